/* tok_bpe.c: the BPE merge loop, the per-thread word cache, and the HF BPE model. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_bpe.h"

/* ---- merge loop --------------------------------------------------------------------------- */

/* Words up to this many symbols use the array scan (O(n^2), but n is small and the arrays
 * stay in L1); longer ones a heap over a linked list (O(n log n)), as HF's word.rs does. */
#define SMALL_WORD 128

void tok_merge_reserve(tok_merge_buf *mb, size_t n) {
    if (n <= mb->cap) return;
    size_t cap = mb->cap ? mb->cap : 256;
    while (cap < n) cap *= 2;
    mb->ids = mc_xrealloc(mb->ids, cap * sizeof *mb->ids);
    mb->lens = mc_xrealloc(mb->lens, cap * sizeof *mb->lens);
    mb->rank = mc_xrealloc(mb->rank, cap * sizeof *mb->rank);
    mb->nid = mc_xrealloc(mb->nid, cap * sizeof *mb->nid);
    mb->prev = mc_xrealloc(mb->prev, cap * sizeof *mb->prev);
    mb->next = mc_xrealloc(mb->next, cap * sizeof *mb->next);
    mb->cap = cap;
}

void tok_merge_free(tok_merge_buf *mb) {
    free(mb->ids);
    free(mb->lens);
    free(mb->rank);
    free(mb->nid);
    free(mb->prev);
    free(mb->next);
    free(mb->heap);
    memset(mb, 0, sizeof *mb);
}

static inline void pair_at(const tok_pairmap *pm, const int32_t *ids, int i, uint32_t *rank, int32_t *nid) {
    const tok_pair_slot *s = tok_pairmap_get(pm, ids[i], ids[i + 1]);
    rank[i] = s ? s->rank : UINT32_MAX;
    nid[i] = s ? s->id : -1;
}

static int merge_small(const tok_pairmap *pm, tok_merge_buf *mb, int n) {
    int32_t *ids = mb->ids, *nid = mb->nid;
    uint32_t *lens = mb->lens, *rank = mb->rank;
    for (int i = 0; i + 1 < n; i++) pair_at(pm, ids, i, rank, nid);
    for (;;) {
        uint32_t best = UINT32_MAX;
        int bi = -1;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (bi < 0) break;
        /* symbols bi and bi+1 become one; pairs after it shift left by one */
        ids[bi] = nid[bi];
        lens[bi] += lens[bi + 1];
        int tail = n - bi - 2;
        memmove(ids + bi + 1, ids + bi + 2, (size_t)tail * sizeof *ids);
        memmove(lens + bi + 1, lens + bi + 2, (size_t)tail * sizeof *lens);
        if (tail > 1) {
            memmove(rank + bi + 1, rank + bi + 2, (size_t)(tail - 1) * sizeof *rank);
            memmove(nid + bi + 1, nid + bi + 2, (size_t)(tail - 1) * sizeof *nid);
        }
        n--;
        if (bi > 0) pair_at(pm, ids, bi - 1, rank, nid);
        if (bi + 1 < n) pair_at(pm, ids, bi, rank, nid);
    }
    return n;
}

/* Binary min-heap of rank << 32 | pos: the lowest rank, then the leftmost position. */
static void heap_push(tok_merge_buf *mb, size_t *len, uint64_t v) {
    if (*len == mb->heap_cap) {
        mb->heap_cap = mb->heap_cap ? mb->heap_cap * 2 : 1024;
        mb->heap = mc_xrealloc(mb->heap, mb->heap_cap * sizeof *mb->heap);
    }
    uint64_t *h = mb->heap;
    size_t i = (*len)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(tok_merge_buf *mb, size_t *len) {
    uint64_t *h = mb->heap, top = h[0], v = h[--*len];
    size_t n = *len, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = v;
    return top;
}

static int merge_heap(const tok_pairmap *pm, tok_merge_buf *mb, int n) {
    int32_t *ids = mb->ids, *prev = mb->prev, *next = mb->next;
    uint32_t *lens = mb->lens;
    size_t hl = 0;
    for (int i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < n; i++) {
        const tok_pair_slot *s = tok_pairmap_get(pm, ids[i], ids[i + 1]);
        if (s) heap_push(mb, &hl, (uint64_t)s->rank << 32 | (uint32_t)i);
    }
    while (hl) {
        uint64_t top = heap_pop(mb, &hl);
        int pos = (int)(uint32_t)top;
        uint32_t rank = (uint32_t)(top >> 32);
        if (lens[pos] == 0 || next[pos] < 0) continue; /* merged away, or now the last */
        int right = next[pos];
        const tok_pair_slot *s = tok_pairmap_get(pm, ids[pos], ids[right]);
        if (!s || s->rank != rank) continue; /* stale: the pair at pos changed */
        ids[pos] = s->id;
        lens[pos] += lens[right];
        lens[right] = 0;
        next[pos] = next[right];
        if (next[right] >= 0) prev[next[right]] = pos;
        if (prev[pos] >= 0) {
            const tok_pair_slot *l = tok_pairmap_get(pm, ids[prev[pos]], ids[pos]);
            if (l) heap_push(mb, &hl, (uint64_t)l->rank << 32 | (uint32_t)prev[pos]);
        }
        if (next[pos] >= 0) {
            const tok_pair_slot *r = tok_pairmap_get(pm, ids[pos], ids[next[pos]]);
            if (r) heap_push(mb, &hl, (uint64_t)r->rank << 32 | (uint32_t)pos);
        }
    }
    int k = 0;
    for (int i = 0; i >= 0; i = next[i]) {
        ids[k] = ids[i];
        lens[k] = lens[i];
        k++;
    }
    return k;
}

int tok_merge_run(const tok_pairmap *pm, tok_merge_buf *mb, int n) {
    if (n < 2) return n;
    return n <= SMALL_WORD ? merge_small(pm, mb, n) : merge_heap(pm, mb, n);
}

/* ---- word cache --------------------------------------------------------------------------- */

void tok_cache_init(tok_cache *c, unsigned log2_slots, unsigned log2_max) {
    memset(c, 0, sizeof *c);
    c->slots = mc_xcalloc((size_t)1 << log2_slots, sizeof *c->slots);
    c->mask = (1u << log2_slots) - 1;
    c->max_mask = (1u << log2_max) - 1;
}

void tok_cache_free(tok_cache *c) {
    free(c->slots);
    tok_buf_free(&c->keys);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

static void cache_insert(tok_cache *c, tok_cache_slot s, uint64_t h) {
    uint32_t i = (uint32_t)h & c->mask;
    while (c->slots[i].tag) i = (i + 1) & c->mask;
    c->slots[i] = s;
    c->count++;
}

void tok_cache_put(tok_cache *c, const void *key, size_t len, uint64_t h, const int32_t *ids, size_t n) {
    if (len > TOK_CACHE_MAX_KEY) return;
    if ((size_t)c->count * 5 >= (size_t)(c->mask + 1) * 3) { /* 60% full */
        if (c->mask < c->max_mask) { /* grow: rehash from the stored keys */
            tok_cache_slot *old = c->slots;
            uint32_t old_n = c->mask + 1;
            c->mask = c->mask * 2 + 1;
            c->slots = mc_xcalloc((size_t)c->mask + 1, sizeof *c->slots);
            c->count = 0;
            for (uint32_t i = 0; i < old_n; i++)
                if (old[i].tag) cache_insert(c, old[i], tok_hash(c->keys.data + old[i].key_off, old[i].key_len));
            free(old);
        } else { /* full at the largest size: start over rather than evict */
            memset(c->slots, 0, ((size_t)c->mask + 1) * sizeof *c->slots);
            c->count = 0;
            c->keys.len = 0;
            c->ids_len = 0;
        }
    }
    if (c->keys.len + len > UINT32_MAX / 2 || c->ids_len + n > UINT32_MAX / 2) return; /* never in practice */
    tok_cache_slot s = {.tag = (uint32_t)(h >> 32) | 1, .key_off = (uint32_t)c->keys.len, .key_len = (uint16_t)len,
                        .n_ids = (uint16_t)n};
    if (n == 1) {
        s.id = ids[0];
    } else if (n > 1) { /* a word without ids (bytes outside the vocabulary, no unk) stores none */
        if (c->ids_len + n > c->ids_cap) {
            size_t cap = c->ids_cap ? c->ids_cap : 4096;
            while (cap < c->ids_len + n) cap *= 2;
            c->ids = mc_xrealloc(c->ids, cap * sizeof *c->ids);
            c->ids_cap = cap;
        }
        memcpy(c->ids + c->ids_len, ids, n * sizeof *ids);
        s.id = (int32_t)c->ids_len;
        c->ids_len += n;
    }
    tok_buf_put(&c->keys, key, len);
    cache_insert(c, s, h);
}

/* ---- BPE model: loading ------------------------------------------------------------------ */

void tok_bpe_init(tok_bpe *m, int32_t n_ids) {
    memset(m, 0, sizeof *m);
    m->n_ids = n_ids;
    m->tok = mc_xcalloc((size_t)n_ids, sizeof *m->tok);
    m->tok_len = mc_xcalloc((size_t)n_ids, sizeof *m->tok_len);
    m->unk_id = -1;
}

int tok_bpe_add_token(tok_bpe *m, int32_t id, const char *s, size_t len, mc_err *err) {
    MC_ASSERT(id >= 0 && id < m->n_ids, "id %d outside the table", id);
    if (m->tok[id])
        return mc_err_set(err, "id %d is given to both \"%.60s\" and \"%.60s\"", id, m->tok[id], s);
    if (len == 0) return mc_err_set(err, "id %d has an empty token", id);
    m->tok[id] = tok_arena_dup(&m->arena, s, len);
    m->tok_len[id] = (uint32_t)len;
    return MC_OK;
}

/* The raw bytes a byte-level token stands for; false when a character is outside the map
 * (such a token cannot come out of byte-level BPE). */
static bool byte_level_key(const char *s, size_t n, char *out, size_t *out_len) {
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        i += tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0) return false;
        out[k++] = (char)b;
    }
    *out_len = k;
    return true;
}

void tok_bpe_finish_vocab(tok_bpe *m, bool byte_level, size_t n_merges) {
    m->byte_level = byte_level;
    tok_strmap_init(&m->tokmap, (size_t)m->n_ids, (const char *const *)m->tok, m->tok_len);
    for (int32_t id = 0; id < m->n_ids; id++)
        if (m->tok[id]) tok_strmap_put(&m->tokmap, id); /* add_token rejected duplicates' ids; texts are checked by the caller */
    if (byte_level) {
        m->key = mc_xcalloc((size_t)m->n_ids, sizeof *m->key);
        m->key_len = mc_xcalloc((size_t)m->n_ids, sizeof *m->key_len);
        for (int32_t id = 0; id < m->n_ids; id++) {
            if (!m->tok[id]) continue;
            char *k = tok_arena_alloc(&m->arena, m->tok_len[id] + 1);
            size_t kl;
            if (byte_level_key(m->tok[id], m->tok_len[id], k, &kl)) {
                m->key[id] = k;
                m->key_len[id] = (uint32_t)kl;
            }
        }
        tok_strmap_init(&m->keymap, (size_t)m->n_ids, (const char *const *)m->key, m->key_len);
        for (int32_t id = 0; id < m->n_ids; id++)
            if (m->key[id]) tok_strmap_put(&m->keymap, id);
    } else {
        m->key = m->tok;
        m->key_len = m->tok_len;
        m->keymap = m->tokmap;
    }
    tok_pairmap_init(&m->merges, n_merges);
}

int tok_bpe_add_merge(tok_bpe *m, const char *a, size_t alen, const char *b, size_t blen, uint32_t rank, mc_err *err) {
    int32_t ia = tok_strmap_get(&m->tokmap, a, alen);
    if (ia < 0) return mc_err_set(err, "merge \"%.*s %.*s\": \"%.*s\" is not in the vocabulary", (int)alen, a, (int)blen, b, (int)alen, a);
    int32_t ib = tok_strmap_get(&m->tokmap, b, blen);
    if (ib < 0) return mc_err_set(err, "merge \"%.*s %.*s\": \"%.*s\" is not in the vocabulary", (int)alen, a, (int)blen, b, (int)blen, b);
    char stackbuf[512];
    char *cat = alen + blen <= sizeof stackbuf ? stackbuf : mc_xmalloc(alen + blen);
    memcpy(cat, a, alen);
    memcpy(cat + alen, b, blen);
    int32_t ic = tok_strmap_get(&m->tokmap, cat, alen + blen);
    if (cat != stackbuf) free(cat);
    if (ic < 0)
        return mc_err_set(err, "merge \"%.*s %.*s\": the result \"%.*s%.*s\" is not in the vocabulary", (int)alen, a,
                          (int)blen, b, (int)alen, a, (int)blen, b);
    if ((m->merges.count + 1) * 2 > m->merges.mask + 1) { /* more merges than announced: rehash */
        tok_pairmap old = m->merges;
        tok_pairmap_init(&m->merges, old.count * 2 + 16);
        for (uint64_t i = 0; i <= old.mask; i++)
            if (old.slots[i].key != UINT64_MAX)
                tok_pairmap_put(&m->merges, (int32_t)(old.slots[i].key >> 32), (int32_t)(uint32_t)old.slots[i].key,
                                old.slots[i].rank, old.slots[i].id);
        tok_pairmap_free(&old);
    }
    tok_pairmap_put(&m->merges, ia, ib, rank, ic);
    return MC_OK;
}

void tok_bpe_finish(tok_bpe *m) {
    for (int b = 0; b < 256; b++) {
        m->byte_sym[b] = -1;
        if (m->byte_level) {
            char k = (char)b;
            m->byte_sym[b] = tok_strmap_get(&m->keymap, &k, 1);
        } else if (m->byte_fallback) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            m->byte_sym[b] = tok_strmap_get(&m->tokmap, name, 6);
        }
    }
    for (int c = 0; c < 128; c++) {
        char k = (char)c;
        m->ascii_sym[c] = m->byte_level ? -1 : tok_strmap_get(&m->keymap, &k, 1);
    }
}

void tok_bpe_free(tok_bpe *m) {
    if (m->byte_level) {
        tok_strmap_free(&m->keymap);
        free(m->key);
        free(m->key_len);
    }
    tok_strmap_free(&m->tokmap);
    tok_pairmap_free(&m->merges);
    free(m->tok);
    free(m->tok_len);
    tok_arena_free(&m->arena);
}

/* ---- BPE model: encoding ----------------------------------------------------------------- */

void tok_bpe_scratch_init(tok_bpe_scratch *s) {
    memset(s, 0, sizeof *s);
    tok_cache_init(&s->cache, 14, 19);
}

void tok_bpe_scratch_free(tok_bpe_scratch *s) {
    tok_cache_free(&s->cache);
    tok_merge_free(&s->mb);
}

/* The initial symbols of a char-level word (HF BPE::merge_word): a vocabulary character,
 * else its <0xNN> bytes (byte_fallback), else unk (runs fused with fuse_unk), else dropped.
 * As in HF, a pending unk is written only when a vocabulary character (or the end) follows. */
static int char_symbols(const tok_bpe *m, const uint8_t *w, size_t n, tok_merge_buf *mb) {
    int k = 0;
    int32_t *ids = mb->ids;
    uint32_t *lens = mb->lens;
    uint32_t unk_len = 0; /* pending unk bytes, 0 = none */
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_decode(w + i, n - i, &cp);
        int32_t id = w[i] < 128 ? m->ascii_sym[w[i]] : tok_strmap_get(&m->keymap, w + i, l);
        if (id >= 0) {
            if (unk_len) {
                ids[k] = m->unk_id;
                lens[k++] = unk_len;
                unk_len = 0;
            }
            ids[k] = id;
            lens[k++] = (uint32_t)l;
        } else {
            bool fell_back = false;
            if (m->byte_fallback) {
                fell_back = true;
                for (size_t j = 0; j < l; j++) fell_back &= m->byte_sym[w[i + j]] >= 0;
                if (fell_back)
                    for (size_t j = 0; j < l; j++) {
                        ids[k] = m->byte_sym[w[i + j]];
                        lens[k++] = 1;
                    }
            }
            if (!fell_back && m->unk_id >= 0) {
                if (unk_len && !m->fuse_unk) {
                    ids[k] = m->unk_id;
                    lens[k++] = unk_len;
                    unk_len = 0;
                }
                unk_len += (uint32_t)l;
            }
        }
        i += l;
    }
    if (unk_len) {
        ids[k] = m->unk_id;
        lens[k++] = unk_len;
    }
    return k;
}

void tok_bpe_encode_word(const tok_bpe *m, tok_bpe_scratch *s, const uint8_t *w, size_t n, mc_ids *out) {
    MC_ASSERT(n < INT32_MAX, "a %zu-byte pre-token", n);
    uint64_t h = tok_hash(w, n);
    const tok_cache_slot *cs = tok_cache_get(&s->cache, w, n, h);
    if (cs) {
        tok_ids_append(out, tok_cache_ids(&s->cache, cs), cs->n_ids);
        return;
    }
    if (m->ignore_merges) { /* a word that is a token is that token (Llama 3) */
        int32_t id = tok_strmap_get_h(&m->keymap, w, n, h);
        if (id >= 0) {
            tok_ids_push(out, id);
            tok_cache_put(&s->cache, w, n, h, &id, 1);
            return;
        }
    }
    tok_merge_buf *mb = &s->mb;
    tok_merge_reserve(mb, n);
    int k = 0;
    if (m->byte_level) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = m->byte_sym[w[i]];
            if (id < 0) id = m->unk_id; /* a vocabulary without this byte: HF gives unk or nothing */
            if (id < 0) continue;
            mb->ids[k] = id;
            mb->lens[k++] = 1;
        }
    } else {
        k = char_symbols(m, w, n, mb);
    }
    k = tok_merge_run(&m->merges, mb, k);
    tok_ids_append(out, mb->ids, k);
    tok_cache_put(&s->cache, w, n, h, mb->ids, (size_t)k);
}
