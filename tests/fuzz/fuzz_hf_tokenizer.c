/* fuzz_hf_tokenizer.c: HuggingFaceTokenizer's tokenizer.json loader on any file; a
 * tokenizer that opens encodes and decodes fz_texts, with and without special-token
 * parsing. */
#include "fuzz_tok_texts.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_path("tokenizer.json");
    fz_write(path, data, size);
    for (int split = 0; split < 2; split++) {
        mc_tokenizer_options o = {.type = MC_TOKENIZER_HF, .tokenizer_model = path, .hf_include_special_tokens = true,
                                  .split_special_tokens = split};
        mc_tokenizer *t;
        mc_err err;
        if (mc_tokenizer_open(&t, &o, &err) != MC_OK) return 0;
        fz_encode_texts(t);
        mc_tokenizer_free(t);
    }
    return 0;
}
