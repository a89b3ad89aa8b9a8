/* index_cache.h: Megatron's dataset index cache, and the file plumbing under it.
 *
 * GPTDataset and BlendedDataset save their indices so that the next run (and the other
 * ranks) load them instead of rebuilding. Megatron names the files after the md5 of a JSON
 * description of the dataset:
 *
 *     {md5}-GPTDataset-{train|valid|test}-description.txt
 *     {md5}-GPTDataset-{split}-document_index.npy   int32   (E*n,)
 *     {md5}-GPTDataset-{split}-sample_index.npy     int32   (len+1, 2), int64 when a position
 *                                                            or a length exceeds INT32_MAX
 *     {md5}-GPTDataset-{split}-shuffle_index.npy    uint32  (len,), int64 from 2^32-1 samples
 *     {md5}-BlendedDataset-{split}-description.txt
 *     {md5}-BlendedDataset-{split}-dataset_index.npy        int16 (size,)
 *     {md5}-BlendedDataset-{split}-dataset_sample_index.npy int64 (size,)
 *
 * The description is Python's json.dumps(..., indent=4) of the dataset's identifiers
 * (mc_desc_* below renders exactly that text, ensure_ascii and float repr included), and
 * the .npy files are what numpy.save writes (format 1.0, same header padding), so a cache
 * written by Megatron is loaded here and the other way round whenever the descriptions
 * agree. Unlike Megatron, every file is written atomically (temporary name, fsync, rename)
 * and the description is written last, so a crash never leaves a cache that looks
 * complete; a cache whose description text differs from ours, or whose arrays are not the
 * shape and range the dataset needs, is reported as an error (delete it to rebuild). */
#ifndef MC_DATA_INDEX_CACHE_H
#define MC_DATA_INDEX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "base/file.h"
#include "data/split.h"

/* ---- md5 ----------------------------------------------------------------------------- */

/* RFC 1321 digest of data as 32 lower-case hex digits (Python's hashlib.md5().hexdigest()). */
void mc_md5_hex(const void *data, size_t n, char out[33]);

/* ---- .npy ------------------------------------------------------------------------------ */

typedef struct mc_npy {
    char descr[8];    /* "<i2", "<i4", "<u4", "<i8" */
    int ndim;         /* 1 or 2 */
    int64_t shape[2];
    size_t itemsize;
    void *data;       /* malloc'd, shape product * itemsize bytes */
} mc_npy;

/* numpy.save of a C-contiguous little-endian array, atomically. */
int mc_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                 mc_err *err);
/* numpy.load of a 1-D or 2-D little-endian integer array (format 1.0/2.0/3.0, C order). */
int mc_npy_read(const char *path, mc_npy *out, mc_err *err);
void mc_npy_free(mc_npy *a);
/* Element i (flat) of an integer array as int64. */
int64_t mc_npy_get(const mc_npy *a, int64_t i);

/* ---- JSON descriptions (Python json.dumps(indent=4, ensure_ascii=True)) -------------- */

typedef struct mc_strbuf {
    char *s;
    size_t len, cap;
} mc_strbuf;

void mc_strbuf_append(mc_strbuf *b, const char *s, size_t n);
void mc_strbuf_printf(mc_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mc_strbuf_free(mc_strbuf *b);

/* Python's repr(float): the shortest digits that round-trip, fixed notation for decimal
 * exponents in [-4, 16), "1e-05"-style otherwise; "NaN", "Infinity" as json writes them. */
void mc_py_float_repr(double x, char out[32]);
/* A JSON string literal with Python's ensure_ascii escaping (\uXXXX, surrogate pairs). */
void mc_json_string(mc_strbuf *b, const char *s);

/* Writers for an indented JSON document: open/close a container at a nesting level, and
 * emit a key or a list element (the separators ",\n" and indentation are handled). */
typedef struct mc_json_writer {
    mc_strbuf *b;
    int depth;
    bool first[32]; /* per depth: no element written yet */
} mc_json_writer;

void mc_jw_init(mc_json_writer *w, mc_strbuf *b);
void mc_jw_begin_object(mc_json_writer *w);
void mc_jw_end_object(mc_json_writer *w);
void mc_jw_begin_list(mc_json_writer *w);
void mc_jw_end_list(mc_json_writer *w);
/* Starts the next member of the current object ("key": ) or the next list element. */
void mc_jw_key(mc_json_writer *w, const char *key);
void mc_jw_elem(mc_json_writer *w);
void mc_jw_str(mc_json_writer *w, const char *s); /* NULL: null */
void mc_jw_int(mc_json_writer *w, int64_t v);
void mc_jw_float(mc_json_writer *w, double v);
void mc_jw_null(mc_json_writer *w);

/* ---- dataset descriptions --------------------------------------------------------- */

/* A tokenizer's unique_identifiers as Megatron's legacy tokenizer classes record them
 * (megatron/training/tokenizer/tokenizer.py): {"class", "tokenizer_path": [...], options
 * as strings}. */
typedef struct mc_tokenizer_identity {
    const char *cls;               /* "_GPT2BPETokenizer", ... */
    int npaths;
    const char *paths[2];          /* NULL entries are JSON null */
    int noptions;
    const char *option_keys[2], *option_values[2];
} mc_tokenizer_identity;

/* MegatronDataset.unique_identifiers of a GPTDataset. */
typedef struct mc_gpt_identity {
    const char *dataset_path;      /* the prefix as given */
    int64_t num_samples;           /* < 0: None */
    int index_split;               /* MC_SPLIT_* */
    uint64_t random_seed;
    int sequence_length;
    const char *split;             /* config.split; NULL: None (per-split blends) */
    const mc_split *split_matrix;  /* NULL: None */
    const mc_tokenizer_identity *tokenizer; /* NULL: null */
} mc_gpt_identity;

extern const char *const mc_split_names[3]; /* "train", "valid", "test" */

/* Writes the identity object at the writer's position. */
void mc_gpt_identity_write(mc_json_writer *w, const mc_gpt_identity *id);
/* json.dumps(unique_identifiers, indent=4) of a GPTDataset (malloc'd). */
char *mc_gpt_description(const mc_gpt_identity *id);
/* The BlendedDataset description: {"class": "BlendedDataset", "datasets": [...], "split",
 * "weights", "size"}; weights are floats (normalized) when size >= 0, else the integer
 * dataset lengths (exhaustive blend, size None). */
char *mc_blended_description(const mc_gpt_identity *datasets, int n, int split, const double *weights,
                             const int64_t *int_weights, int64_t size);

/* ---- cache files --------------------------------------------------------------------- */

/* "{dir}/{md5}-{class}-{split}-{affix}" into a malloc'd string. */
char *mc_cache_path(const char *dir, const char *md5, const char *cls, const char *split, const char *affix);

/* Cache state of one dataset: all files present (hit), none or some (miss). A present
 * description whose text differs from `description` is an error. */
int mc_cache_probe(const char *dir, const char *md5, const char *cls, const char *split, const char *description,
                   const char *const *affixes, int naffixes, bool *hit, mc_err *err);

#endif
