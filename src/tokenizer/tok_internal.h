/* tok_internal.h: what the tokenizer files (tokenizer.c, tok_*.c) share: the object behind
 * mc_tokenizer, growable buffers, hashing, a string -> id map, a pair -> merge map, UTF-8
 * helpers and the per-thread word cache. Not a public interface. */
#ifndef MC_TOKENIZER_TOK_INTERNAL_H
#define MC_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* ---- the tokenizer object ------------------------------------------------------------ */

typedef struct tok_buf tok_buf;

typedef struct tok_vtable {
    int (*encode)(const mc_tokenizer *t, void *scratch, const char *text, size_t len, mc_ids *out, mc_err *err);
    /* Appends the text of ids to *buf (a tok_buf). */
    void (*decode)(const mc_tokenizer *t, const int32_t *ids, int64_t n, tok_buf *buf);
    void *(*scratch_new)(const mc_tokenizer *t);
    void (*scratch_free)(void *scratch);
    void (*free_impl)(void *impl);
} tok_vtable;

struct mc_tokenizer {
    const tok_vtable *vt;
    mc_tokenizer_type type;
    const char *name;
    int vocab_size;
    int32_t eod;
    void *impl;
};

struct mc_tokenizer_scratch {
    const mc_tokenizer *t;
    void *impl;
};

/* The openers (each fills t->vt, name, vocab_size, eod, impl). */
int tok_open_null(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err);
int tok_open_byte(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err);
int tok_open_gpt2(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err);
int tok_open_hf(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err);
int tok_open_spm(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err);

/* ---- buffers --------------------------------------------------------------------------- */

struct tok_buf {
    char *data;
    size_t len, cap;
};

void tok_buf_grow(tok_buf *b, size_t extra);
static inline void tok_buf_put(tok_buf *b, const void *p, size_t n) {
    if (!n) return;
    if (b->len + n > b->cap) tok_buf_grow(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static inline void tok_buf_putc(tok_buf *b, char c) {
    if (b->len + 1 > b->cap) tok_buf_grow(b, 1);
    b->data[b->len++] = c;
}
void tok_buf_free(tok_buf *b);

void tok_ids_grow(mc_ids *ids, int64_t extra);
static inline void tok_ids_append(mc_ids *ids, const int32_t *p, int64_t n) {
    if (n <= 0) return;
    if (ids->len + n > ids->cap) tok_ids_grow(ids, n);
    memcpy(ids->data + ids->len, p, (size_t)n * sizeof *p);
    ids->len += n;
}
static inline void tok_ids_push(mc_ids *ids, int32_t id) {
    if (ids->len + 1 > ids->cap) tok_ids_grow(ids, 1);
    ids->data[ids->len++] = id;
}

/* Bump allocator for load-time strings (freed all at once). */
typedef struct tok_arena {
    char **chunks;
    size_t n, cap, left;
    char *cur;
} tok_arena;
char *tok_arena_alloc(tok_arena *a, size_t n);
char *tok_arena_dup(tok_arena *a, const void *p, size_t n); /* NUL-terminated copy */
void tok_arena_free(tok_arena *a);

/* Reads a whole file (NUL-terminated); errors name `what` (the flag) and the path. */
int tok_read_file(const char *path, const char *what, char **data, size_t *len, mc_err *err);

/* ---- hashing and maps ------------------------------------------------------------------ */

static inline uint64_t tok_mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
}

static inline uint64_t tok_load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t tok_load32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A fast hash of short byte strings (words): 8 bytes at a time; the tail is read with
 * overlapping loads inside [p, p + n), never past it. */
static inline uint64_t tok_hash(const void *p, size_t n) {
    const uint8_t *s = (const uint8_t *)p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull), w;
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 < n; i += 8) {
            h = (h ^ tok_load64(s + i)) * 0xC4CEB9FE1A85EC53ull;
            h ^= h >> 29;
        }
        w = tok_load64(s + n - 8);
    } else if (n >= 4) {
        w = (uint64_t)tok_load32(s) | (uint64_t)tok_load32(s + n - 4) << 32;
    } else if (n) {
        w = (uint64_t)s[0] << 16 | (uint64_t)s[n / 2] << 8 | s[n - 1];
    } else {
        w = 0;
    }
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return tok_mix64(h);
}

/* a[0..n) == b[0..n), inline for short strings. */
static inline bool tok_eq(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n >= 8 && n <= 16)
        return tok_load64(a) == tok_load64(b) && tok_load64(a + n - 8) == tok_load64(b + n - 8);
    if (n >= 4 && n < 8) return tok_load32(a) == tok_load32(b) && tok_load32(a + n - 4) == tok_load32(b + n - 4);
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i]) return false;
        return true;
    }
    return memcmp(a, b, n) == 0;
}

/* String -> id map over keys owned by the caller: keys[id], lens[id]. */
typedef struct tok_strmap {
    uint64_t *slots; /* (hash >> 32) << 32 | (id + 1); 0 = empty */
    uint64_t mask;
    const char *const *keys;
    const uint32_t *lens;
} tok_strmap;

void tok_strmap_init(tok_strmap *m, size_t expected, const char *const *keys, const uint32_t *lens);
/* Inserts id (its key is keys[id]); returns the id already holding that key, or -1. */
int32_t tok_strmap_put(tok_strmap *m, int32_t id);
static inline int32_t tok_strmap_get_h(const tok_strmap *m, const void *key, size_t len, uint64_t h) {
    uint64_t tag = h >> 32, i = h & m->mask;
    for (;;) {
        uint64_t s = m->slots[i];
        if (!s) return -1;
        if ((s >> 32) == tag) {
            int32_t id = (int32_t)(uint32_t)s - 1;
            if (m->lens[id] == len && tok_eq((const uint8_t *)m->keys[id], (const uint8_t *)key, len)) return id;
        }
        i = (i + 1) & m->mask;
    }
}
static inline int32_t tok_strmap_get(const tok_strmap *m, const void *key, size_t len) {
    return tok_strmap_get_h(m, key, len, tok_hash(key, len));
}
void tok_strmap_free(tok_strmap *m);

/* (left id, right id) -> (rank, merged id): the BPE merges. */
typedef struct tok_pair_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;
} tok_pair_slot;
typedef struct tok_pairmap {
    tok_pair_slot *slots;
    uint64_t mask;
    size_t count;
} tok_pairmap;

void tok_pairmap_init(tok_pairmap *m, size_t expected);
/* Inserts, or replaces the entry of a pair already present (the last rank wins, as in HF
 * and GPT-2's dict of merges); returns true when the pair was new. */
bool tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
static inline const tok_pair_slot *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & m->mask;
    for (;;) {
        const tok_pair_slot *s = &m->slots[i];
        if (s->key == UINT64_MAX) return NULL; /* first: (-1, -1) is the empty key */
        if (s->key == key) return s;
        i = (i + 1) & m->mask;
    }
}
void tok_pairmap_free(tok_pairmap *m);

/* ---- the BPE merge loop ---------------------------------------------------------------- */

/* Work arrays of one merge run (per thread). */
typedef struct tok_merge_buf {
    int32_t *ids;
    uint32_t *lens;  /* bytes of each symbol */
    uint32_t *rank;  /* small path: rank of pair (i, i+1) */
    int32_t *nid;    /* small path: id that pair merges to */
    int32_t *prev, *next; /* heap path: linked list */
    uint64_t *heap;  /* heap path: rank << 32 | pos */
    size_t cap, heap_cap;
} tok_merge_buf;

void tok_merge_reserve(tok_merge_buf *mb, size_t n);
void tok_merge_free(tok_merge_buf *mb);
/* Applies merges to mb->ids[0..n) (and lens): always the lowest-rank adjacent pair, the
 * leftmost among equal ranks, until none applies (HF BPE / SentencePiece BPE order).
 * Returns the new symbol count. */
int tok_merge_run(const tok_pairmap *pm, tok_merge_buf *mb, int n);

/* ---- the per-thread cache of word -> ids ------------------------------------------------ */

typedef struct tok_cache_slot {
    uint32_t tag; /* high hash bits | 1; 0 = empty */
    uint32_t key_off;
    uint16_t key_len, n_ids;
    int32_t id; /* the id when n_ids == 1, else the offset of the ids */
} tok_cache_slot;
typedef struct tok_cache {
    tok_cache_slot *slots;
    uint32_t mask, count, max_mask;
    tok_buf keys;
    int32_t *ids;
    size_t ids_len, ids_cap;
} tok_cache;

#define TOK_CACHE_MAX_KEY 128

/* Starts with 2^log2_slots slots, grows to 2^log2_max, then starts over when full. */
void tok_cache_init(tok_cache *c, unsigned log2_slots, unsigned log2_max);
void tok_cache_free(tok_cache *c);
static inline const tok_cache_slot *tok_cache_get(const tok_cache *c, const void *key, size_t len, uint64_t h) {
    uint32_t tag = (uint32_t)(h >> 32) | 1, i = (uint32_t)h & c->mask;
    for (;;) {
        const tok_cache_slot *s = &c->slots[i];
        if (s->tag == tag && s->key_len == len &&
            tok_eq((const uint8_t *)c->keys.data + s->key_off, (const uint8_t *)key, len))
            return s;
        if (!s->tag) return NULL;
        i = (i + 1) & c->mask;
    }
}
/* The cached ids of a slot; NULL for a word that has none (c->ids may still be NULL then). */
static inline const int32_t *tok_cache_ids(const tok_cache *c, const tok_cache_slot *s) {
    if (s->n_ids == 0) return NULL;
    return s->n_ids == 1 ? &s->id : c->ids + s->id;
}
void tok_cache_put(tok_cache *c, const void *key, size_t len, uint64_t h, const int32_t *ids, size_t n);

/* ---- UTF-8 ------------------------------------------------------------------------------ */

#define TOK_UC_L 1u
#define TOK_UC_N 2u
#define TOK_UC_WS 4u
#define TOK_UC_W 8u
#define TOK_INVALID_CP 0x110000u

/* Decodes one code point at s[0..n) (n >= 1); returns its length. An invalid or truncated
 * sequence decodes as TOK_INVALID_CP of length 1. */
static inline size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF && n >= 2 && (s[1] & 0xC0) == 0x80) {
        *cp = (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF && n >= 3 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        uint32_t v = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) {
            *cp = v;
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4 && n >= 4 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
               (s[3] & 0xC0) == 0x80) {
        uint32_t v = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
                     (s[3] & 0x3F);
        if (v >= 0x10000 && v <= 0x10FFFF) {
            *cp = v;
            return 4;
        }
    }
    *cp = TOK_INVALID_CP;
    return 1;
}
size_t tok_utf8_encode(uint32_t cp, char *out);
/* Appends s[0..n) with each maximal invalid UTF-8 subpart replaced by U+FFFD (Rust's
 * from_utf8_lossy and Python's errors="replace"). */
void tok_utf8_lossy(tok_buf *b, const uint8_t *s, size_t n);

/* Unicode classes (TOK_UC_* bits) of a code point; TOK_INVALID_CP has none. */
extern uint8_t tok_uc_bmp[65536];
void tok_uc_init(void); /* thread-safe, idempotent; the openers call it */
uint8_t tok_uc_class_slow(uint32_t cp);
static inline uint8_t tok_uc_class(uint32_t cp) {
    return cp < 0x10000 ? tok_uc_bmp[cp] : tok_uc_class_slow(cp);
}

/* GPT-2's byte <-> unicode map: byte b is written as code point tok_byte_to_cp[b]. */
extern const uint16_t tok_byte_to_cp[256];
/* The byte a code point stands for, or -1. */
int tok_cp_to_byte(uint32_t cp);

#endif
