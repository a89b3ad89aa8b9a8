/* fuzz_tok_texts.h: the texts the tokenizer harnesses encode with each fuzzed tokenizer, and
 * the encode/decode round they run: letters, digits, spaces and newlines, special-token
 * text, non-ASCII, invalid UTF-8, long runs. */
#ifndef MC_TESTS_FUZZ_TOK_TEXTS_H
#define MC_TESTS_FUZZ_TOK_TEXTS_H

#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static const char *const fz_texts[] = {
    "Hello, World! It's 2024: 12345 tokens.\n\n  indented\tline\r\n",
    "<|endoftext|> a<|endoftext|>b <s></s><unk>[SEP]<mask> <|begin_of_text|>",
    "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xE2\x96\x81" "x",
    "\xFF\xFE\xC3 \xE2\x82 \x80" "bad",
    "",
    " ",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "1 2 3 99999999999 -4 x",
};

/* Encodes every text twice (the second time from the word caches) and decodes the ids. */
static inline void fz_encode_texts(const mc_tokenizer *t) {
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(t);
    mc_ids ids = {0};
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sizeof fz_texts / sizeof fz_texts[0]; i++) {
            mc_err err;
            ids.len = 0;
            if (mc_tokenizer_encode(t, s, fz_texts[i], strlen(fz_texts[i]), &ids, &err) != MC_OK) continue;
            size_t len;
            free(mc_tokenizer_decode(t, ids.data, ids.len, &len));
        }
    int32_t odd[4] = {-1, 0, mc_tokenizer_vocab_size(t), INT32_MAX};
    size_t len;
    free(mc_tokenizer_decode(t, odd, 4, &len));
    mc_ids_free(&ids);
    mc_tokenizer_scratch_free(s);
}

#endif
