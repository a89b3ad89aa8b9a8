#include "tokenizer/byte_tokenizer.h"

int64_t mc_byte_tokenizer_encode(const char *text, int64_t n, int32_t *out) {
    const unsigned char *u = (const unsigned char *)text;
    for (int64_t i = 0; i < n; i++) out[i] = u[i];
    return n;
}

int64_t mc_byte_tokenizer_decode(const int32_t *ids, int64_t n, char *out, int64_t cap) {
    int64_t len = 0;
#define PUT(c)                                 \
    do {                                       \
        if (len < cap - 1) out[len] = (char)(c); \
        len++;                                 \
    } while (0)
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < 256) {
            PUT(ids[i]);
        } else if (ids[i] == MC_BYTE_TOKENIZER_EOD) {
            PUT('\n');
            PUT('\n');
        }
    }
#undef PUT
    if (cap > 0) out[len < cap ? len : cap - 1] = 0;
    return len;
}
