/* tokenizer.c: the public tokenizer API (open by type, encode/decode dispatch, mc_ids) and
 * the helpers every tokenizer file shares: buffers, file reading, the string and pair maps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

/* ---- mc_ids and buffers ------------------------------------------------------------------ */

void tok_ids_grow(mc_ids *ids, int64_t extra) {
    int64_t need = ids->len + extra, cap = ids->cap ? ids->cap : 256;
    while (cap < need) cap *= 2;
    ids->data = mc_xrealloc(ids->data, (size_t)cap * sizeof *ids->data);
    ids->cap = cap;
}

void mc_ids_push(mc_ids *ids, int32_t id) { tok_ids_push(ids, id); }

void mc_ids_free(mc_ids *ids) {
    free(ids->data);
    ids->data = NULL;
    ids->len = ids->cap = 0;
}

void tok_buf_grow(tok_buf *b, size_t extra) {
    size_t need = b->len + extra, cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    b->data = mc_xrealloc(b->data, cap);
    b->cap = cap;
}

void tok_buf_free(tok_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *tok_arena_alloc(tok_arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    if (n > a->left) {
        size_t sz = n > (1u << 20) ? n : (1u << 20);
        if (a->n == a->cap) {
            a->cap = a->cap ? a->cap * 2 : 16;
            a->chunks = mc_xrealloc(a->chunks, a->cap * sizeof *a->chunks);
        }
        a->cur = a->chunks[a->n++] = mc_xmalloc(sz);
        a->left = sz;
    }
    char *p = a->cur;
    a->cur += n;
    a->left -= n;
    return p;
}

char *tok_arena_dup(tok_arena *a, const void *p, size_t n) {
    char *d = tok_arena_alloc(a, n + 1);
    if (n) memcpy(d, p, n);
    d[n] = 0;
    return d;
}

void tok_arena_free(tok_arena *a) {
    for (size_t i = 0; i < a->n; i++) free(a->chunks[i]);
    free(a->chunks);
    memset(a, 0, sizeof *a);
}

int tok_read_file(const char *path, const char *what, char **data, size_t *len, mc_err *err) {
    if (!path || !*path) return mc_err_set(err, "%s: no file given", what);
    FILE *f = fopen(path, "rb");
    if (!f) return mc_err_set(err, "%s %s: cannot open: %s", what, path, strerror(errno));
    tok_buf b = {0};
    for (;;) {
        if (b.cap - b.len < 65536) tok_buf_grow(&b, 65536);
        size_t got = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        b.len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        tok_buf_free(&b);
        return mc_err_set(err, "%s %s: read error", what, path);
    }
    b.data[b.len] = 0;
    *data = b.data;
    *len = b.len;
    return MC_OK;
}

/* ---- string -> id map ---------------------------------------------------------------------- */

static uint64_t pow2_at_least(size_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

void tok_strmap_init(tok_strmap *m, size_t expected, const char *const *keys, const uint32_t *lens) {
    uint64_t cap = pow2_at_least(expected * 2 + 1);
    m->slots = mc_xcalloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    m->keys = keys;
    m->lens = lens;
}

int32_t tok_strmap_put(tok_strmap *m, int32_t id) {
    uint64_t h = tok_hash(m->keys[id], m->lens[id]);
    uint64_t tag = h >> 32, i = h & m->mask;
    for (;;) {
        uint64_t s = m->slots[i];
        if (!s) break;
        if ((s >> 32) == tag) {
            int32_t other = (int32_t)(uint32_t)s - 1;
            if (m->lens[other] == m->lens[id] && memcmp(m->keys[other], m->keys[id], m->lens[id]) == 0) return other;
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = tag << 32 | (uint64_t)(uint32_t)(id + 1);
    return -1;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* ---- pair -> merge map ------------------------------------------------------------------- */

void tok_pairmap_init(tok_pairmap *m, size_t expected) {
    uint64_t cap = pow2_at_least(expected * 2 + 1);
    m->slots = mc_xmalloc(cap * sizeof *m->slots);
    for (uint64_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->count = 0;
}

bool tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    MC_ASSERT((m->count + 1) * 2 <= m->mask + 1, "pair map sized too small");
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & m->mask;
    for (;;) {
        tok_pair_slot *s = &m->slots[i];
        if (s->key == key) {
            s->rank = rank;
            s->id = id;
            return false;
        }
        if (s->key == UINT64_MAX) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            m->count++;
            return true;
        }
        i = (i + 1) & m->mask;
    }
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* ---- the public API ---------------------------------------------------------------------- */

int mc_tokenizer_open(mc_tokenizer **out, const mc_tokenizer_options *opt, mc_err *err) {
    *out = NULL;
    tok_uc_init();
    mc_tokenizer *t = mc_xcalloc(1, sizeof *t);
    t->type = opt->type;
    t->eod = -1;
    int rc;
    switch (opt->type) {
    case MC_TOKENIZER_NULL: rc = tok_open_null(t, opt, err); break;
    case MC_TOKENIZER_BYTE: rc = tok_open_byte(t, opt, err); break;
    case MC_TOKENIZER_GPT2BPE: rc = tok_open_gpt2(t, opt, err); break;
    case MC_TOKENIZER_HF: rc = tok_open_hf(t, opt, err); break;
    case MC_TOKENIZER_SENTENCEPIECE: rc = tok_open_spm(t, opt, err); break;
    default:
        rc = mc_err_set(err, "--tokenizer-type: unknown tokenizer type %d (expected NullTokenizer, "
                             "ByteLevelTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer or "
                             "SentencePieceTokenizer)",
                        (int)opt->type);
    }
    if (rc != MC_OK) {
        free(t);
        return MC_ERR;
    }
    *out = t;
    return MC_OK;
}

void mc_tokenizer_free(mc_tokenizer *t) {
    if (!t) return;
    if (t->vt && t->vt->free_impl) t->vt->free_impl(t->impl);
    free(t);
}

mc_tokenizer_scratch *mc_tokenizer_scratch_new(const mc_tokenizer *t) {
    mc_tokenizer_scratch *s = mc_xcalloc(1, sizeof *s);
    s->t = t;
    s->impl = t->vt->scratch_new ? t->vt->scratch_new(t) : NULL;
    return s;
}

void mc_tokenizer_scratch_free(mc_tokenizer_scratch *s) {
    if (!s) return;
    if (s->t->vt->scratch_free) s->t->vt->scratch_free(s->impl);
    free(s);
}

int mc_tokenizer_encode(const mc_tokenizer *t, mc_tokenizer_scratch *s, const char *text, size_t len, mc_ids *out,
                        mc_err *err) {
    MC_ASSERT(s && s->t == t, "the scratch belongs to another tokenizer");
    return t->vt->encode(t, s->impl, text, len, out, err);
}

char *mc_tokenizer_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, size_t *len_out) {
    tok_buf b = {0};
    t->vt->decode(t, ids, n, &b);
    tok_buf_putc(&b, 0);
    if (len_out) *len_out = b.len - 1;
    return b.data;
}

int mc_tokenizer_vocab_size(const mc_tokenizer *t) { return t->vocab_size; }
int32_t mc_tokenizer_eod(const mc_tokenizer *t) { return t->eod; }
const char *mc_tokenizer_name(const mc_tokenizer *t) { return t->name; }
