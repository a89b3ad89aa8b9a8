/* text_corpus.h: a plain UTF-8 text file as a token corpus (--text-data-path).
 *
 * Documents are separated by blank lines (one or more lines holding nothing but spaces,
 * tabs or a carriage return). A document is its lines joined with "\n" (a trailing "\r"
 * of each line dropped, so CRLF and LF files give the same tokens), byte-tokenized, with
 * the EOD token (256) appended, as preprocess_data.py --append-eod does. */
#ifndef MC_DATA_TEXT_CORPUS_H
#define MC_DATA_TEXT_CORPUS_H

#include <stdint.h>

#include "base/error.h"

/* On success *tokens (malloc'd, *num_tokens entries) and *doc_offsets (malloc'd,
 * *num_docs + 1 entries) belong to the caller. Errors name the file: cannot open/read,
 * empty, no document. */
int mc_text_corpus_load(const char *path, int32_t **tokens, int64_t *num_tokens, int64_t **doc_offsets,
                        int64_t *num_docs, mc_err *err);

/* The same from a buffer in memory (`name` is used in messages). */
int mc_text_corpus_from_buffer(const char *text, int64_t n, const char *name, int32_t **tokens,
                               int64_t *num_tokens, int64_t **doc_offsets, int64_t *num_docs, mc_err *err);

#endif
