/* fuzz_serve_api.c: serve's request bodies (serve/api.h) on any bytes: the first byte picks
 * the API (even: PUT /api, odd: /v1/completions), the rest is the body, read over a Null
 * tokenizer of 300 ids; a body that is taken is answered as if each sequence had made a few
 * tokens, and a refusal's message is written as the error answer. */
#include "fuzz_util.h"
#include "serve/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mc_tokenizer *tok;
    mc_err err;
    if (!tok) {
        mc_tokenizer_options opt = {.type = MC_TOKENIZER_NULL, .vocab_size = 300};
        if (mc_tokenizer_open(&tok, &opt, &err) != MC_OK) abort();
    }
    if (size == 0) return 0;
    const mc_api_kind api = data[0] & 1 ? MC_API_COMPLETIONS : MC_API_MEGATRON;
    char *body = malloc(size);
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    const mc_api_limits lim = {.max_positions = 64, .vocab = 300, .eod = 299, .seed = 1};
    mc_serve_request *r = mc_api_parse(api, body, size - 1, tok, &lim, &err);
    char *answer;
    if (r) {
        for (int i = 0; i < r->n; i++) {
            mc_serve_seq *s = &r->seqs[i];
            s->produced = s->params.max_new_tokens < 3 ? s->params.max_new_tokens : 3;
            for (int k = 0; k < s->produced; k++) s->out[k] = (int32_t)((i * 31 + k * 7) % 300);
        }
        answer = mc_api_answer(r, tok, "model", "cmpl-0", 0);
        mc_serve_request_free(r);
    } else {
        answer = mc_api_error(err.msg);
    }
    free(answer);
    free(body);
    return 0;
}
