/* wire.c: a batch of sequences packed for the other tensor-parallel ranks (wire.h). Per
 * sequence: int64 prompt length, int32 ids, int32 max_new_tokens, f64 temperature, int32
 * top_k, f64 top_p, u64 seed, u8 stop_at_eod, on_eol, on_double_eol, int32 stop strings,
 * each an int32 length and its bytes. */
#include "serve/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct writer {
    char *data;
    size_t len, cap;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->len + n > w->cap) {
        w->cap = (w->len + n) * 2;
        w->data = mc_xrealloc(w->data, w->cap);
    }
    memcpy(w->data + w->len, p, n);
    w->len += n;
}

#define PUT(w, type, v)                                                                                                \
    do {                                                                                                               \
        type put_v = (v);                                                                                              \
        put(w, &put_v, sizeof put_v);                                                                                  \
    } while (0)

void *mc_serve_wire_pack(mc_serve_seq *const *seqs, int n, size_t *bytes) {
    writer w = {0};
    PUT(&w, int32_t, n);
    for (int i = 0; i < n; i++) {
        const mc_serve_seq *s = seqs[i];
        const mc_gen_params *p = &s->params;
        PUT(&w, int64_t, s->prompt.len);
        put(&w, s->prompt.data, sizeof(int32_t) * (size_t)s->prompt.len);
        PUT(&w, int32_t, p->max_new_tokens);
        PUT(&w, double, p->temperature);
        PUT(&w, int32_t, p->top_k);
        PUT(&w, double, p->top_p);
        PUT(&w, uint64_t, p->seed);
        PUT(&w, uint8_t, p->stop_at_eod);
        PUT(&w, uint8_t, s->stops->on_eol);
        PUT(&w, uint8_t, s->stops->on_double_eol);
        PUT(&w, int32_t, s->stops->nstrings);
        for (int k = 0; k < s->stops->nstrings; k++) {
            const int32_t len = (int32_t)strlen(s->stops->strings[k]);
            PUT(&w, int32_t, len);
            put(&w, s->stops->strings[k], (size_t)len);
        }
    }
    *bytes = w.len;
    return w.data;
}

typedef struct reader {
    const char *data;
    size_t len, at;
} reader;

static void get(reader *r, void *p, size_t n) {
    MC_ASSERT(n <= r->len - r->at, "serve: a batch message of %zu bytes ends early", r->len);
    memcpy(p, r->data + r->at, n);
    r->at += n;
}

#define GET(r, type, dst)                                                                                              \
    do {                                                                                                               \
        type get_v;                                                                                                    \
        get(r, &get_v, sizeof get_v);                                                                                  \
        dst = get_v;                                                                                                   \
    } while (0)

void mc_serve_wire_unpack(const void *buf, size_t bytes, mc_serve_batch *out) {
    reader r = {.data = buf, .len = bytes};
    int32_t n;
    GET(&r, int32_t, n);
    MC_ASSERT(n >= 0);
    out->n = n;
    out->seqs = mc_xcalloc((size_t)n + 1, sizeof *out->seqs);
    out->stops = mc_xcalloc((size_t)n + 1, sizeof *out->stops);
    for (int i = 0; i < n; i++) {
        mc_serve_seq *s = &out->seqs[i];
        mc_gen_params *p = &s->params;
        mc_serve_stops *st = &out->stops[i];
        int64_t len;
        GET(&r, int64_t, len);
        MC_ASSERT(len >= 0 && (size_t)len <= (bytes - r.at) / sizeof(int32_t));
        s->prompt.data = mc_xmalloc(sizeof(int32_t) * (size_t)(len + 1));
        s->prompt.len = s->prompt.cap = len;
        get(&r, s->prompt.data, sizeof(int32_t) * (size_t)len);
        GET(&r, int32_t, p->max_new_tokens);
        GET(&r, double, p->temperature);
        GET(&r, int32_t, p->top_k);
        GET(&r, double, p->top_p);
        GET(&r, uint64_t, p->seed);
        GET(&r, uint8_t, p->stop_at_eod);
        GET(&r, uint8_t, st->on_eol);
        GET(&r, uint8_t, st->on_double_eol);
        GET(&r, int32_t, st->nstrings);
        MC_ASSERT(p->max_new_tokens >= 1 && st->nstrings >= 0 && (size_t)st->nstrings <= bytes - r.at);
        st->strings = mc_xcalloc((size_t)st->nstrings + 1, sizeof(char *));
        for (int k = 0; k < st->nstrings; k++) {
            int32_t slen;
            GET(&r, int32_t, slen);
            MC_ASSERT(slen >= 0 && (size_t)slen <= bytes - r.at);
            st->strings[k] = mc_xmalloc((size_t)slen + 1);
            get(&r, st->strings[k], (size_t)slen);
            st->strings[k][slen] = 0;
        }
        s->stops = st;
        s->out = mc_xmalloc(sizeof(int32_t) * (size_t)p->max_new_tokens);
    }
    MC_ASSERT(r.at == bytes, "serve: a batch message has %zu bytes after its last sequence", bytes - r.at);
}

void mc_serve_batch_free(mc_serve_batch *b) {
    for (int i = 0; i < b->n; i++) {
        mc_ids_free(&b->seqs[i].prompt);
        free(b->seqs[i].out);
        mc_serve_stops_free(&b->stops[i]);
    }
    free(b->seqs);
    free(b->stops);
    memset(b, 0, sizeof *b);
}
