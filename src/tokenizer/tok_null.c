/* tok_null.c: NullTokenizer (the text is space-separated ids; eod = vocab_size - 1, as
 * Megatron's HEAD null tokenizer) and ByteLevelTokenizer (bytes 0..255, eod 256; see
 * byte_tokenizer.h). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/tok_internal.h"

static bool py_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F); }

/* Megatron: [int(x) for x in text.split(' ')]. Each field may carry other whitespace around
 * it (int() strips it); an empty field, a non-integer, or an id outside [0, vocab_size) is
 * an error. Text that is empty or only whitespace gives no ids (Megatron would fail). */
static int null_encode(const mc_tokenizer *t, void *scratch, const char *text, size_t len, mc_ids *out, mc_err *err) {
    (void)scratch;
    size_t i = 0;
    while (i < len && py_space(text[i])) i++;
    if (i == len) return MC_OK;
    int64_t start_len = out->len;
    const char *p = text, *end = text + len;
    for (;;) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *fe = sp ? sp : end, *a = p, *b = fe;
        while (a < b && py_space(*a)) a++;
        while (b > a && py_space(b[-1])) b--;
        const char *q = a;
        bool neg = false;
        if (q < b && (*q == '+' || *q == '-')) neg = *q++ == '-';
        int64_t v = 0;
        bool ok = q < b;
        for (; q < b && ok; q++) {
            if (*q < '0' || *q > '9') ok = false;
            else if ((v = v * 10 + (*q - '0')) > INT32_MAX) ok = false;
        }
        int w = (int)(b - a > 40 ? 40 : b - a);
        if (!ok) {
            out->len = start_len;
            if (a == b)
                return mc_err_set(err, "NullTokenizer: empty token at byte %zu (ids are separated by single spaces)",
                                  (size_t)(a - text));
            return mc_err_set(err, "NullTokenizer: token \"%.*s\" is not an integer id", w, a);
        }
        if ((neg && v != 0) || v >= t->vocab_size) {
            out->len = start_len;
            return mc_err_set(err, "NullTokenizer: token \"%.*s\" is out of range [0, %d) (--vocab-size)", w, a,
                              t->vocab_size);
        }
        tok_ids_push(out, (int32_t)v);
        if (!sp) break;
        p = sp + 1;
    }
    return MC_OK;
}

static void null_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, tok_buf *out) {
    (void)t;
    char num[16];
    for (int64_t i = 0; i < n; i++) {
        int k = snprintf(num, sizeof num, i ? " %d" : "%d", ids[i]);
        tok_buf_put(out, num, (size_t)k);
    }
}

static const tok_vtable null_vtable = {.encode = null_encode, .decode = null_decode};

int tok_open_null(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err) {
    if (opt->vocab_size <= 0)
        return mc_err_set(err, "--vocab-size: NullTokenizer needs a positive --vocab-size, got %d", opt->vocab_size);
    t->vt = &null_vtable;
    t->name = "NullTokenizer";
    t->vocab_size = opt->vocab_size;
    t->eod = opt->vocab_size - 1;
    return MC_OK;
}

static int byte_encode(const mc_tokenizer *t, void *scratch, const char *text, size_t len, mc_ids *out, mc_err *err) {
    (void)t, (void)scratch, (void)err;
    if (out->len + (int64_t)len > out->cap) tok_ids_grow(out, (int64_t)len);
    out->len += mc_byte_tokenizer_encode(text, (int64_t)len, out->data + out->len);
    return MC_OK;
}

static void byte_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, tok_buf *out) {
    (void)t;
    int64_t need = mc_byte_tokenizer_decode(ids, n, NULL, 0);
    if (out->len + (size_t)need + 1 > out->cap) tok_buf_grow(out, (size_t)need + 1);
    mc_byte_tokenizer_decode(ids, n, out->data + out->len, need + 1);
    out->len += (size_t)need;
}

static const tok_vtable byte_vtable = {.encode = byte_encode, .decode = byte_decode};

int tok_open_byte(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err) {
    (void)opt, (void)err;
    t->vt = &byte_vtable;
    t->name = "ByteLevelTokenizer";
    t->vocab_size = MC_BYTE_TOKENIZER_VOCAB;
    t->eod = MC_BYTE_TOKENIZER_EOD;
    return MC_OK;
}
