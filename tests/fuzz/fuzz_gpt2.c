/* fuzz_gpt2.c: GPT2BPETokenizer's loaders on any pair of files: the input is vocab.json, a
 * NUL byte, then merges.txt. A tokenizer that opens encodes and decodes fz_texts. */
#include "fuzz_tok_texts.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t vocab_len, merges_len;
    const uint8_t *merges;
    fz_split(data, size, 0, &vocab_len, &merges, &merges_len);
    fz_write(fz_path("vocab.json"), data, vocab_len);
    fz_write(fz_path("merges.txt"), merges, merges_len);
    mc_tokenizer_options o = {.type = MC_TOKENIZER_GPT2BPE, .vocab_file = fz_path("vocab.json"),
                              .merge_file = fz_path("merges.txt")};
    mc_tokenizer *t;
    mc_err err;
    if (mc_tokenizer_open(&t, &o, &err) != MC_OK) return 0;
    fz_encode_texts(t);
    mc_tokenizer_free(t);
    return 0;
}
