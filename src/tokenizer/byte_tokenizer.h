/* byte_tokenizer.h: the byte-level tokenizer of --text-data-path (a Megatron-C extension).
 *
 * Ids 0..255 are the bytes of the UTF-8 text, id 256 is the end-of-document token; the
 * vocabulary has 257 entries. No merges, no normalization: encode is a widening copy. */
#ifndef MC_TOKENIZER_BYTE_TOKENIZER_H
#define MC_TOKENIZER_BYTE_TOKENIZER_H

#include <stdint.h>

#define MC_BYTE_TOKENIZER_EOD 256
#define MC_BYTE_TOKENIZER_VOCAB 257

/* Writes n ids for the n bytes of text into out; returns n. */
int64_t mc_byte_tokenizer_encode(const char *text, int64_t n, int32_t *out);

/* Writes the text of n ids into out (at most cap bytes, NUL-terminated when cap > 0) and
 * returns the length the full text has (like snprintf). Bytes decode to themselves, the
 * EOD to "\n\n" (the blank line that separates documents in a text file), and any other
 * id (a padded-vocabulary id a model may emit) to nothing. */
int64_t mc_byte_tokenizer_decode(const int32_t *ids, int64_t n, char *out, int64_t cap);

#endif
