/* jsonl.h: JSON Lines input for preprocess: a streaming line reader (plain or gzip) and a
 * one-record parser that pulls out the string fields Megatron's preprocess_data.py reads.
 *
 * Reader: lines end at '\n'; a trailing '\r' stays on the line (it is JSON whitespace, so
 * CRLF files parse as Python's universal newlines would read them). A file that starts
 * with the gzip magic is decompressed (zlib), whatever its name. Memory is one buffer of
 * the longest line (at least 4 MiB).
 *
 * Parser: the whole line must be what Python's json.loads accepts (strict mode): one JSON
 * value, whitespace " \t\n\r" around it, NaN/Infinity/-Infinity allowed, no control
 * characters inside strings, duplicate keys resolved by the last one. The line must also
 * be valid UTF-8, as Python's text-mode read requires (overlong forms, surrogates and
 * code points above U+10FFFF are errors). Escapes are decoded, surrogate pairs joined; a
 * lone surrogate escape (\ud800) is an error because the text could not be handed to a
 * tokenizer as UTF-8 (Python's json keeps it; HF tokenizers and SentencePiece then
 * refuse the string). Errors say what and at which byte of the line. */
#ifndef MC_DATA_JSONL_H
#define MC_DATA_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct mc_jsonl_reader mc_jsonl_reader;

int mc_jsonl_open(mc_jsonl_reader **out, const char *path, mc_err *err);
/* The next line (without its '\n'; valid until the next call). Returns 1 for a line, 0 at
 * the end of the input, MC_ERR on a read/decompression error. *lineno is 1-based. */
int mc_jsonl_next(mc_jsonl_reader *r, const char **line, size_t *len, int64_t *lineno, mc_err *err);
/* Bytes of the file consumed so far (compressed bytes for gzip) and the file size (-1 if
 * unknown), for progress estimates. */
int64_t mc_jsonl_position(const mc_jsonl_reader *r);
int64_t mc_jsonl_size(const mc_jsonl_reader *r);
bool mc_jsonl_is_gzip(const mc_jsonl_reader *r);
void mc_jsonl_close(mc_jsonl_reader *r);
/* Whether this build reads .gz input. */
bool mc_jsonl_have_gzip(void);

/* ---- parser ------------------------------------------------------------------------------ */

typedef enum {
    MC_JV_MISSING = 0, /* the key is absent */
    MC_JV_STRING,      /* one string: part 0 */
    MC_JV_LIST,        /* a list whose elements are all strings: parts 0..nparts-1 */
    MC_JV_OTHER,       /* a number, object, null, ... or a list holding a non-string */
} mc_jv_kind;

typedef struct mc_jv {
    mc_jv_kind kind;
    const char *other_type; /* MC_JV_OTHER: "number", "object", "null", "list element", ... */
    int64_t nparts;
    int64_t first_part;     /* index into the scratch part table */
} mc_jv;

/* Decoded text lives here; reuse one per thread. */
typedef struct mc_jsonl_scratch {
    char *text;
    size_t len, cap;
    int64_t *part_off, *part_len; /* (nparts_total,) into text */
    int64_t nparts, parts_cap;
    char *key;
    size_t key_cap;
} mc_jsonl_scratch;

void mc_jsonl_scratch_free(mc_jsonl_scratch *s);

/* Parses one line; vals[i] describes keys[i]. On a malformed line returns MC_ERR with the
 * reason (and byte offset) in err. */
int mc_jsonl_parse(const char *line, size_t len, int nkeys, const char *const *keys, mc_jsonl_scratch *s,
                   mc_jv *vals, mc_err *err);

/* Part j of a value: text and length. */
static inline const char *mc_jv_part(const mc_jsonl_scratch *s, const mc_jv *v, int64_t j, size_t *len) {
    *len = (size_t)s->part_len[v->first_part + j];
    return s->text + s->part_off[v->first_part + j];
}

#endif
