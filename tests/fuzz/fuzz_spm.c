/* fuzz_spm.c: SentencePieceTokenizer's model loader (the protobuf) on any file; a tokenizer
 * that opens encodes and decodes fz_texts. */
#include "fuzz_tok_texts.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_path("tokenizer.model");
    fz_write(path, data, size);
    mc_tokenizer_options o = {.type = MC_TOKENIZER_SENTENCEPIECE, .tokenizer_model = path};
    mc_tokenizer *t;
    mc_err err;
    if (mc_tokenizer_open(&t, &o, &err) != MC_OK) return 0;
    fz_encode_texts(t);
    mc_tokenizer_free(t);
    return 0;
}
