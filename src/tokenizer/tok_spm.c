/* tok_spm.c: SentencePieceTokenizer (and GPTSentencePieceTokenizer, Llama2Tokenizer, which
 * Megatron's HEAD maps to the same wrapper): a tokenizer.model protobuf read here, and
 * SentencePiece's BPE encode (encode_as_ids: no BOS/EOS; eod = eos_id()).
 *
 * Normalization as SentencePiece's Normalizer: the precompiled charsmap (a darts-clone
 * double array, longest match), user-defined symbols kept whole, malformed UTF-8 -> U+FFFD,
 * remove_extra_whitespaces, the dummy prefix, ' ' -> U+2581. Encoding as bpe_model.cc:
 * repeatedly merge the adjacent pair whose concatenation is the highest-scoring piece (the
 * leftmost among equal scores); characters outside the vocabulary become <0xNN> pieces with
 * byte_fallback, else one <unk> per run. Decoding as SentencePieceProcessor::Decode. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_internal.h"

#define SPACE_SYM "\xE2\x96\x81"

enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4, SP_UNUSED = 5, SP_BYTE = 6 };
enum { MODEL_UNIGRAM = 1, MODEL_BPE = 2, MODEL_WORD = 3, MODEL_CHAR = 4 };

typedef struct tok_spm {
    int32_t n;         /* pieces */
    char **piece;      /* then the pseudo-symbols (single characters that are no piece) */
    uint32_t *plen;
    float *score;
    uint8_t *type;
    tok_strmap pieces;   /* NORMAL, USER_DEFINED, UNUSED pieces -> id: what merges may form */
    tok_strmap reserved; /* CONTROL, UNKNOWN, BYTE pieces -> id */
    tok_strmap syms;     /* characters -> symbol id (a piece, or a pseudo-symbol >= n) */
    int32_t n_syms;
    int32_t ascii_sym[128];
    tok_pairmap merges;  /* (symbol, symbol) -> (rank of the merged piece's score, piece) */
    int32_t unk_id, eos_id;
    bool byte_fallback;
    int32_t byte_id[256];
    bool add_dummy_prefix, remove_extra_ws, escape_ws, ws_suffix;
    int32_t *user;       /* user-defined pieces, for the prefix matcher */
    int n_user;
    uint8_t user_first[256];
    bool segment_ws;
    const char *unk_surface;
    /* precompiled charsmap */
    const uint32_t *trie;
    size_t trie_units;
    const char *norm_blob;
    size_t norm_blob_len;
    uint8_t *charsmap_copy;
    tok_arena arena;
} tok_spm;

/* ---- protobuf ------------------------------------------------------------------------------ */

typedef struct pb {
    const uint8_t *p, *end, *base;
} pb;

static int pb_varint(pb *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Reads a field header and its payload: varint value, fixed bytes, or a length-delimited
 * span. Returns 0, 1 at the end, -1 on corruption. */
typedef struct pb_field {
    uint32_t num, wire;
    uint64_t v;
    const uint8_t *data;
    size_t len;
} pb_field;

static int pb_next(pb *r, pb_field *f) {
    if (r->p >= r->end) return 1;
    uint64_t key;
    if (pb_varint(r, &key)) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if (f->num == 0) return -1;
    switch (f->wire) {
    case 0: return pb_varint(r, &f->v);
    case 1:
        if (r->end - r->p < 8) return -1;
        f->data = r->p;
        r->p += 8;
        return 0;
    case 5:
        if (r->end - r->p < 4) return -1;
        f->data = r->p;
        memcpy(&f->v, r->p, 4);
        f->v &= 0xFFFFFFFFu;
        r->p += 4;
        return 0;
    case 2: {
        uint64_t n;
        if (pb_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
        f->data = r->p;
        f->len = (size_t)n;
        r->p += n;
        return 0;
    }
    default: return -1; /* groups are not used by sentencepiece_model.proto */
    }
}

/* ---- normalization ------------------------------------------------------------------------ */

static inline uint32_t da_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline uint32_t da_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static inline bool da_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t da_value(uint32_t u) { return u & ((1u << 31) - 1); }

/* Longest rule of the charsmap that prefixes s: its length (0: none) and replacement. */
static size_t charsmap_match(const tok_spm *m, const uint8_t *s, size_t n, const char **repl) {
    if (!m->trie_units) return 0;
    size_t best = 0;
    uint32_t pos = da_offset(m->trie[0]);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= m->trie_units) break;
        uint32_t u = m->trie[pos];
        if (da_label(u) != s[i]) break;
        pos ^= da_offset(u);
        if (pos >= m->trie_units) break;
        if (da_has_leaf(u)) {
            uint32_t v = da_value(m->trie[pos]);
            if (v < m->norm_blob_len) {
                best = i + 1;
                *repl = m->norm_blob + v;
            }
        }
    }
    return best;
}

/* Longest user-defined piece at s (0: none), and its id. */
static size_t user_match(const tok_spm *m, const uint8_t *s, size_t n, int32_t *id) {
    if (!m->n_user || !m->user_first[s[0]]) return 0;
    size_t best = 0;
    for (int k = 0; k < m->n_user; k++) {
        uint32_t l = m->plen[m->user[k]];
        if (l > best && l <= n && !memcmp(s, m->piece[m->user[k]], l)) {
            best = l;
            *id = m->user[k];
        }
    }
    return best;
}

/* Normalizer::NormalizePrefix: the normalized text of the next unit of s and its length in
 * s. */
static size_t normalize_prefix(const tok_spm *m, const uint8_t *s, size_t n, const char **out, size_t *out_len) {
    int32_t uid;
    size_t l = user_match(m, s, n, &uid);
    if (l) {
        *out = (const char *)s;
        *out_len = l;
        return l;
    }
    const char *repl;
    l = charsmap_match(m, s, n, &repl);
    if (l) {
        *out = repl;
        *out_len = strnlen(repl, m->norm_blob_len - (size_t)(repl - m->norm_blob));
        return l;
    }
    uint32_t cp;
    l = tok_utf8_decode(s, n, &cp);
    if (cp == TOK_INVALID_CP) {
        *out = "\xEF\xBF\xBD";
        *out_len = 3;
        return 1;
    }
    *out = (const char *)s;
    *out_len = l;
    return l;
}

static void put_space(const tok_spm *m, tok_buf *b) {
    if (m->escape_ws) tok_buf_put(b, SPACE_SYM, 3);
    else tok_buf_putc(b, ' ');
}

static void normalize(const tok_spm *m, const uint8_t *s, size_t n, tok_buf *b) {
    b->len = 0;
    if (!n) return;
    size_t i = 0;
    const char *u;
    size_t ul;
    if (m->remove_extra_ws)
        while (i < n) {
            size_t c = normalize_prefix(m, s + i, n - i, &u, &ul);
            if (!(ul == 1 && u[0] == ' ')) break;
            i += c;
        }
    if (i == n) return;
    if (!m->ws_suffix && m->add_dummy_prefix) put_space(m, b);
    bool prev_space = m->remove_extra_ws;
    while (i < n) {
        size_t c = normalize_prefix(m, s + i, n - i, &u, &ul);
        while (prev_space && ul && u[0] == ' ') {
            u++;
            ul--;
        }
        if (ul) {
            for (size_t k = 0; k < ul; k++) {
                if (u[k] == ' ' && m->escape_ws) tok_buf_put(b, SPACE_SYM, 3);
                else tok_buf_putc(b, u[k]);
            }
            prev_space = u[ul - 1] == ' ';
        }
        i += c;
        if (!m->remove_extra_ws) prev_space = false;
    }
    if (m->remove_extra_ws) {
        const char *sp = m->escape_ws ? SPACE_SYM : " ";
        size_t sl = m->escape_ws ? 3 : 1;
        while (b->len >= sl && !memcmp(b->data + b->len - sl, sp, sl)) b->len -= sl;
    }
    if (m->ws_suffix && m->add_dummy_prefix) put_space(m, b);
}

/* ---- encode ------------------------------------------------------------------------------------ */

typedef struct spm_scratch {
    tok_cache cache;
    tok_merge_buf mb;
    tok_buf norm;
    mc_ids seg;
} spm_scratch;

static void *spm_scratch_new(const mc_tokenizer *t) {
    (void)t;
    spm_scratch *s = mc_xcalloc(1, sizeof *s);
    tok_cache_init(&s->cache, 14, 19);
    return s;
}

static void spm_scratch_free(void *p) {
    spm_scratch *s = p;
    if (!s) return;
    tok_cache_free(&s->cache);
    tok_merge_free(&s->mb);
    tok_buf_free(&s->norm);
    mc_ids_free(&s->seg);
    free(s);
}

/* Writes the pieces of symbols [0, k) of a merged run starting at text w. */
static void emit_run(const tok_spm *m, tok_merge_buf *mb, int k, const uint8_t *w, bool *prev_unk, mc_ids *out) {
    size_t off = 0;
    for (int i = 0; i < k; i++) {
        int32_t id = mb->ids[i];
        uint32_t len = mb->lens[i];
        const uint8_t *text = w + off;
        off += len;
        if (id >= 0 && id < m->n) { /* a piece */
            tok_ids_push(out, id);
            *prev_unk = false;
            continue;
        }
        int32_t r = tok_strmap_get(&m->reserved, text, len); /* a character that is a control/byte piece */
        if (r >= 0 && m->type[r] != SP_UNKNOWN) {
            tok_ids_push(out, r);
            *prev_unk = false;
            continue;
        }
        if (m->byte_fallback) {
            for (uint32_t j = 0; j < len; j++) tok_ids_push(out, m->byte_id[text[j]]);
            *prev_unk = false; /* byte pieces are not unknown */
            continue;
        }
        if (!*prev_unk) tok_ids_push(out, m->unk_id); /* a run of unknowns is one <unk> */
        *prev_unk = true;
    }
}

/* BPE over one stretch of normalized text (no user-defined symbol inside). */
static void encode_run(const tok_spm *m, spm_scratch *s, const uint8_t *w, size_t n, bool *prev_unk, mc_ids *out) {
    tok_merge_buf *mb = &s->mb;
    tok_merge_reserve(mb, n);
    int k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode(w + i, n - i, &cp);
        mb->ids[k] = w[i] < 128 ? m->ascii_sym[w[i]] : tok_strmap_get(&m->syms, w + i, l);
        mb->lens[k++] = (uint32_t)l;
        i += l;
    }
    k = tok_merge_run(&m->merges, mb, k);
    emit_run(m, mb, k, w, prev_unk, out);
}

/* One segment: user-defined symbols (never merged) split it into runs. */
static void encode_segment(const tok_spm *m, spm_scratch *s, const uint8_t *w, size_t n, bool *prev_unk, mc_ids *out) {
    size_t start = 0, i = 0;
    while (i < n) {
        int32_t uid;
        size_t l = user_match(m, w + i, n - i, &uid);
        if (!l) {
            uint32_t cp;
            i += tok_utf8_decode(w + i, n - i, &cp);
            continue;
        }
        if (i > start) encode_run(m, s, w + start, i - start, prev_unk, out);
        tok_ids_push(out, uid);
        *prev_unk = false;
        i += l;
        start = i;
    }
    if (n > start) encode_run(m, s, w + start, n - start, prev_unk, out);
}

static void encode_cached(const tok_spm *m, spm_scratch *s, const uint8_t *w, size_t n, bool *prev_unk, mc_ids *out) {
    uint64_t h = tok_hash(w, n);
    const tok_cache_slot *cs = tok_cache_get(&s->cache, w, n, h);
    if (cs) { /* a segment starts with "▁" (a piece), so its ids do not depend on what precedes */
        const int32_t *ids = tok_cache_ids(&s->cache, cs);
        tok_ids_append(out, ids, cs->n_ids);
        *prev_unk = cs->n_ids && ids[cs->n_ids - 1] == m->unk_id && !m->byte_fallback;
        return;
    }
    s->seg.len = 0;
    encode_segment(m, s, w, n, prev_unk, &s->seg);
    tok_ids_append(out, s->seg.data, s->seg.len);
    tok_cache_put(&s->cache, w, n, h, s->seg.data, (size_t)s->seg.len);
}

static int spm_encode(const mc_tokenizer *t, void *scratch, const char *text, size_t len, mc_ids *out, mc_err *err) {
    (void)err;
    const tok_spm *m = t->impl;
    spm_scratch *s = scratch;
    normalize(m, (const uint8_t *)text, len, &s->norm);
    const uint8_t *p = (const uint8_t *)s->norm.data;
    size_t n = s->norm.len;
    bool prev_unk = false;
    if (!n) return MC_OK;
    if (!m->segment_ws) {
        encode_segment(m, s, p, n, &prev_unk, out);
        return MC_OK;
    }
    /* No piece has "▁" after another character, so no merge crosses the start of a "▁"
     * run: encode the text between such starts separately (and cache it). */
    size_t start = 0, i = 0;
    for (;;) {
        const uint8_t *q = memmem(p + i, n - i, SPACE_SYM, 3);
        if (!q) break;
        size_t at = (size_t)(q - p);
        if (at > start && !(at >= 3 && !memcmp(p + at - 3, SPACE_SYM, 3))) {
            encode_cached(m, s, p + start, at - start, &prev_unk, out);
            start = at;
        }
        i = at + 3;
    }
    encode_cached(m, s, p + start, n - start, &prev_unk, out);
    return MC_OK;
}

/* ---- decode ------------------------------------------------------------------------------------ */

static void flush_bytes(tok_buf *out, tok_buf *bytes) {
    for (size_t i = 0; i < bytes->len;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)bytes->data + i, bytes->len - i, &cp);
        if (cp == TOK_INVALID_CP) tok_buf_put(out, "\xEF\xBF\xBD", 3);
        else tok_buf_put(out, bytes->data + i, l);
        i += l;
    }
    bytes->len = 0;
}

static void spm_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, tok_buf *out) {
    const tok_spm *m = t->impl;
    size_t base = out->len;
    tok_buf bytes = {0};
    bool bos_ws = true, bos_ws_seen = false;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= m->n) continue;
        if (m->type[id] == SP_BYTE) {
            unsigned v = 0;
            sscanf(m->piece[id] + 3, "%2x", &v); /* checked at load: "<0xNN>" */
            tok_buf_putc(&bytes, (char)v);
            continue;
        }
        flush_bytes(out, &bytes);
        if (bos_ws_seen || out->len > base) bos_ws = false;
        bos_ws_seen = false;
        if (m->type[id] == SP_CONTROL) continue;
        if (m->type[id] == SP_UNKNOWN) {
            tok_buf_put(out, m->unk_surface, strlen(m->unk_surface));
            continue;
        }
        const char *p = m->piece[id];
        size_t pl = m->plen[id];
        if (bos_ws && (m->add_dummy_prefix || m->remove_extra_ws) && pl >= 3 && !memcmp(p, SPACE_SYM, 3)) {
            p += 3;
            pl -= 3;
            bos_ws_seen = !m->remove_extra_ws;
        }
        for (size_t k = 0; k < pl;) {
            if (k + 3 <= pl && !memcmp(p + k, SPACE_SYM, 3)) {
                tok_buf_putc(out, ' ');
                k += 3;
            } else {
                tok_buf_putc(out, p[k++]);
            }
        }
    }
    flush_bytes(out, &bytes);
    tok_buf_free(&bytes);
}

/* ---- load ---------------------------------------------------------------------------------------- */

static void spm_free(void *impl) {
    tok_spm *m = impl;
    if (!m) return;
    tok_strmap_free(&m->pieces);
    tok_strmap_free(&m->reserved);
    tok_strmap_free(&m->syms);
    tok_pairmap_free(&m->merges);
    free(m->piece);
    free(m->plen);
    free(m->score);
    free(m->type);
    free(m->user);
    free(m->charsmap_copy);
    tok_arena_free(&m->arena);
    free(m);
}

static const tok_vtable spm_vtable = {
    .encode = spm_encode,
    .decode = spm_decode,
    .scratch_new = spm_scratch_new,
    .scratch_free = spm_scratch_free,
    .free_impl = spm_free,
};

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

/* Symbol id of a character or piece text for the merge table: a piece of `pieces`, else
 * (single characters only) a pseudo-symbol, created on demand; -1 for longer non-pieces. */
static int32_t symbol_of(tok_spm *m, const char *s, size_t n, size_t cap) {
    int32_t id = tok_strmap_get(&m->pieces, s, n);
    if (id >= 0) return id;
    uint32_t cp;
    if (tok_utf8_decode((const uint8_t *)s, n, &cp) != n) return -1;
    id = tok_strmap_get(&m->syms, s, n);
    if (id >= 0) return id;
    MC_ASSERT((size_t)m->n_syms < cap, "pseudo-symbol table full");
    id = m->n_syms++;
    m->piece[id] = tok_arena_dup(&m->arena, s, n);
    m->plen[id] = (uint32_t)n;
    tok_strmap_put(&m->syms, id);
    return id;
}

typedef struct spm_spec {
    int model_type;
    bool byte_fallback, ws_suffix;
    const uint8_t *unk_surface, *eos_piece;
    size_t unk_surface_len, eos_piece_len;
    bool add_dummy_prefix, remove_extra_ws, escape_ws;
    const uint8_t *charsmap;
    size_t charsmap_len;
    const uint8_t *norm_name;
    size_t norm_name_len;
} spm_spec;

#define CORRUPT(what) mc_err_set(err, "--tokenizer-model %s: corrupt SentencePiece model (%s)", path, what)

static int parse_trainer(const char *path, const uint8_t *d, size_t n, spm_spec *sp, mc_err *err) {
    pb r = {d, d + n, d};
    pb_field f;
    int rc;
    while ((rc = pb_next(&r, &f)) == 0) {
        if (f.num == 3 && f.wire == 0) sp->model_type = (int)f.v;
        else if (f.num == 35 && f.wire == 0) sp->byte_fallback = f.v != 0;
        else if (f.num == 24 && f.wire == 0) sp->ws_suffix = f.v != 0;
        else if (f.num == 44 && f.wire == 2) {
            sp->unk_surface = f.data;
            sp->unk_surface_len = f.len;
        } else if (f.num == 47 && f.wire == 2) {
            sp->eos_piece = f.data;
            sp->eos_piece_len = f.len;
        }
    }
    return rc < 0 ? CORRUPT("bad trainer_spec") : MC_OK;
}

static int parse_normalizer_spec(const char *path, const uint8_t *d, size_t n, spm_spec *sp, mc_err *err) {
    pb r = {d, d + n, d};
    pb_field f;
    int rc;
    while ((rc = pb_next(&r, &f)) == 0) {
        if (f.num == 1 && f.wire == 2) {
            sp->norm_name = f.data;
            sp->norm_name_len = f.len;
        } else if (f.num == 2 && f.wire == 2) {
            sp->charsmap = f.data;
            sp->charsmap_len = f.len;
        } else if (f.num == 3 && f.wire == 0) sp->add_dummy_prefix = f.v != 0;
        else if (f.num == 4 && f.wire == 0) sp->remove_extra_ws = f.v != 0;
        else if (f.num == 5 && f.wire == 0) sp->escape_ws = f.v != 0;
    }
    return rc < 0 ? CORRUPT("bad normalizer_spec") : MC_OK;
}

int tok_open_spm(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err) {
    const char *path = opt->tokenizer_model;
    if (!path || !*path) return mc_err_set(err, "--tokenizer-model: SentencePieceTokenizer needs a tokenizer.model");
    char *data;
    size_t len;
    MC_TRY(tok_read_file(path, "--tokenizer-model", &data, &len, err));
    tok_spm *m = mc_xcalloc(1, sizeof *m);
    spm_spec sp = {.model_type = MODEL_UNIGRAM, .add_dummy_prefix = true, .remove_extra_ws = true, .escape_ws = true};
    int rc = MC_ERR;
    /* pass 1: count pieces, read the specs */
    pb r = {(const uint8_t *)data, (const uint8_t *)data + len, (const uint8_t *)data};
    pb_field f;
    int st, npieces = 0;
    while ((st = pb_next(&r, &f)) == 0) {
        if (f.num == 1 && f.wire == 2) npieces++;
        else if (f.num == 2 && f.wire == 2) {
            if (parse_trainer(path, f.data, f.len, &sp, err)) goto done;
        } else if (f.num == 3 && f.wire == 2) {
            if (parse_normalizer_spec(path, f.data, f.len, &sp, err)) goto done;
        }
    }
    if (st < 0) {
        CORRUPT("truncated or malformed protobuf");
        goto done;
    }
    if (npieces == 0) {
        mc_err_set(err, "--tokenizer-model %s: no pieces (not a SentencePiece model)", path);
        goto done;
    }
    if (sp.model_type != MODEL_BPE) {
        static const char *const names[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
        mc_err_set(err, "--tokenizer-model %s: model_type %s is not supported (only BPE)", path,
                   sp.model_type >= 1 && sp.model_type <= 4 ? names[sp.model_type] : "unknown");
        goto done;
    }
    /* pass 2: the pieces (each its own message: piece = 1, score = 2, type = 3) */
    size_t total_len = 0;
    m->n = npieces;
    r.p = (const uint8_t *)data;
    size_t cap = 0;
    int32_t i = 0;
    while (pb_next(&r, &f) == 0) {
        if (!(f.num == 1 && f.wire == 2)) continue;
        if (!m->piece) {
            cap = (size_t)npieces + len; /* room for pseudo-symbols (at most one per byte of text) */
            m->piece = mc_xcalloc(cap, sizeof *m->piece);
            m->plen = mc_xcalloc(cap, sizeof *m->plen);
            m->score = mc_xcalloc((size_t)npieces, sizeof *m->score);
            m->type = mc_xcalloc((size_t)npieces, sizeof *m->type);
        }
        pb q = {f.data, f.data + f.len, f.data};
        pb_field g;
        const uint8_t *ps = NULL;
        size_t pl = 0;
        int type = SP_NORMAL;
        float score = 0;
        int qs;
        while ((qs = pb_next(&q, &g)) == 0) {
            if (g.num == 1 && g.wire == 2) {
                ps = g.data;
                pl = g.len;
            } else if (g.num == 2 && g.wire == 5) {
                uint32_t u = (uint32_t)g.v;
                memcpy(&score, &u, 4);
            } else if (g.num == 3 && g.wire == 0) {
                type = (int)g.v;
            }
        }
        if (qs < 0) {
            CORRUPT("bad piece");
            goto done;
        }
        if (!ps || pl == 0 || memchr(ps, 0, pl)) {
            mc_err_set(err, "--tokenizer-model %s: piece %d is empty or holds a NUL", path, i);
            goto done;
        }
        if (type < SP_NORMAL || type > SP_BYTE) {
            mc_err_set(err, "--tokenizer-model %s: piece %d has unknown type %d", path, i, type);
            goto done;
        }
        m->piece[i] = tok_arena_dup(&m->arena, ps, pl);
        m->plen[i] = (uint32_t)pl;
        m->score[i] = score;
        m->type[i] = (uint8_t)type;
        total_len += pl;
        i++;
    }
    /* maps, checks (as ModelInterface::InitializePieces) */
    m->unk_id = -1;
    tok_strmap_init(&m->pieces, (size_t)m->n, (const char *const *)m->piece, m->plen);
    tok_strmap_init(&m->reserved, (size_t)m->n, (const char *const *)m->piece, m->plen);
    bool byte_found[256] = {false};
    for (i = 0; i < m->n; i++) {
        int ty = m->type[i];
        bool normal = ty == SP_NORMAL || ty == SP_USER_DEFINED || ty == SP_UNUSED;
        if (tok_strmap_put(normal ? &m->pieces : &m->reserved, i) >= 0) {
            mc_err_set(err, "--tokenizer-model %s: piece \"%.60s\" is defined twice", path, m->piece[i]);
            goto done;
        }
        if (ty == SP_UNUSED) {
            mc_err_set(err, "--tokenizer-model %s: piece \"%.60s\" has type UNUSED, which is not supported", path,
                       m->piece[i]);
            goto done;
        }
        if (ty == SP_UNKNOWN) {
            if (m->unk_id >= 0) {
                mc_err_set(err, "--tokenizer-model %s: two unknown pieces", path);
                goto done;
            }
            m->unk_id = i;
        }
        if (ty == SP_USER_DEFINED) {
            m->user = mc_xrealloc(m->user, (size_t)(m->n_user + 1) * sizeof *m->user);
            m->user[m->n_user++] = i;
            m->user_first[(uint8_t)m->piece[i][0]] = 1;
        }
        if (ty == SP_BYTE) {
            unsigned v;
            char tail;
            if (!sp.byte_fallback || m->plen[i] != 6 || sscanf(m->piece[i], "<0x%2X%c", &v, &tail) != 2 || tail != '>') {
                mc_err_set(err, "--tokenizer-model %s: bad byte piece \"%.60s\"", path, m->piece[i]);
                goto done;
            }
            byte_found[v] = true;
            m->byte_id[v] = i;
        }
    }
    if (m->unk_id < 0) {
        mc_err_set(err, "--tokenizer-model %s: no unknown (<unk>) piece", path);
        goto done;
    }
    m->byte_fallback = sp.byte_fallback;
    if (sp.byte_fallback)
        for (int b = 0; b < 256; b++)
            if (!byte_found[b]) {
                mc_err_set(err, "--tokenizer-model %s: byte_fallback without the 256 byte pieces", path);
                goto done;
            }
    /* normalizer */
    m->add_dummy_prefix = sp.add_dummy_prefix;
    m->remove_extra_ws = sp.remove_extra_ws;
    m->escape_ws = sp.escape_ws;
    m->ws_suffix = sp.ws_suffix;
    if (sp.charsmap_len) {
        uint32_t trie_bytes;
        if (sp.charsmap_len <= 4) {
            CORRUPT("precompiled charsmap too short");
            goto done;
        }
        memcpy(&trie_bytes, sp.charsmap, 4);
        if (trie_bytes >= sp.charsmap_len - 4 || trie_bytes % 4 || trie_bytes < 4) {
            CORRUPT("precompiled charsmap sizes");
            goto done;
        }
        m->charsmap_copy = mc_xmalloc(sp.charsmap_len);
        memcpy(m->charsmap_copy, sp.charsmap, sp.charsmap_len);
        m->trie = (const uint32_t *)(m->charsmap_copy + 4);
        m->trie_units = trie_bytes / 4;
        m->norm_blob = (const char *)m->charsmap_copy + 4 + trie_bytes;
        m->norm_blob_len = sp.charsmap_len - 4 - trie_bytes;
    }
    /* merges: every split of every mergeable piece into two symbols, ranked by score */
    float *scores = mc_xmalloc((size_t)m->n * sizeof *scores);
    int ns = 0;
    for (i = 0; i < m->n; i++)
        if (m->type[i] == SP_NORMAL || m->type[i] == SP_USER_DEFINED) scores[ns++] = m->score[i];
    qsort(scores, (size_t)ns, sizeof *scores, cmp_desc);
    int nd = 0;
    for (int k = 0; k < ns; k++)
        if (!nd || scores[k] != scores[nd - 1]) scores[nd++] = scores[k];
    m->n_syms = m->n;
    tok_strmap_init(&m->syms, (size_t)m->n + total_len, (const char *const *)m->piece, m->plen);
    tok_pairmap_init(&m->merges, total_len + 16);
    for (i = 0; i < m->n; i++) {
        if (!(m->type[i] == SP_NORMAL || m->type[i] == SP_USER_DEFINED)) continue;
        const char *p = m->piece[i];
        uint32_t pl = m->plen[i];
        int lo = 0, hi = nd; /* rank = index of the score among the distinct scores, best first */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (scores[mid] > m->score[i]) lo = mid + 1;
            else hi = mid;
        }
        for (uint32_t k = 1; k < pl; k++) {
            if (((uint8_t)p[k] & 0xC0) == 0x80) continue; /* split at character boundaries only */
            int32_t a = symbol_of(m, p, k, cap), b = symbol_of(m, p + k, pl - k, cap);
            if (a >= 0 && b >= 0) {
                if ((m->merges.count + 1) * 2 > m->merges.mask + 1) {
                    tok_pairmap old = m->merges;
                    tok_pairmap_init(&m->merges, old.count * 2);
                    for (uint64_t s = 0; s <= old.mask; s++)
                        if (old.slots[s].key != UINT64_MAX)
                            tok_pairmap_put(&m->merges, (int32_t)(old.slots[s].key >> 32),
                                            (int32_t)(uint32_t)old.slots[s].key, old.slots[s].rank, old.slots[s].id);
                    tok_pairmap_free(&old);
                }
                tok_pairmap_put(&m->merges, a, b, (uint32_t)lo, i);
            }
        }
    }
    free(scores);
    /* single characters: the pieces map, plus the pseudo-symbols */
    for (i = 0; i < m->n; i++) {
        uint32_t cp;
        if ((m->type[i] == SP_NORMAL || m->type[i] == SP_USER_DEFINED) &&
            tok_utf8_decode((const uint8_t *)m->piece[i], m->plen[i], &cp) == m->plen[i])
            tok_strmap_put(&m->syms, i);
    }
    for (int c = 0; c < 128; c++) {
        char k = (char)c;
        m->ascii_sym[c] = tok_strmap_get(&m->syms, &k, 1);
    }
    /* segmenting at "▁" runs is exact when "▁" is a piece and no piece (nor user symbol)
     * holds "▁" after another character */
    m->segment_ws = m->escape_ws && tok_strmap_get(&m->pieces, SPACE_SYM, 3) >= 0;
    for (i = 0; i < m->n && m->segment_ws; i++) {
        if (m->type[i] != SP_NORMAL && m->type[i] != SP_USER_DEFINED) continue;
        for (uint32_t k = 1; k + 3 <= m->plen[i]; k++)
            if (!memcmp(m->piece[i] + k, SPACE_SYM, 3) && !(k >= 3 && !memcmp(m->piece[i] + k - 3, SPACE_SYM, 3)))
                m->segment_ws = false;
    }
    m->unk_surface = sp.unk_surface ? tok_arena_dup(&m->arena, sp.unk_surface, sp.unk_surface_len) : " \xE2\x81\x87 ";
    const char *eos = sp.eos_piece ? tok_arena_dup(&m->arena, sp.eos_piece, sp.eos_piece_len) : "</s>";
    int32_t eid = tok_strmap_get(&m->reserved, eos, strlen(eos));
    m->eos_id = eid >= 0 && m->type[eid] == SP_CONTROL ? eid : -1;
    t->vt = &spm_vtable;
    t->name = "SentencePieceTokenizer";
    t->impl = m;
    t->vocab_size = m->n;
    t->eod = m->eos_id;
    rc = MC_OK;
done:
    free(data);
    if (rc != MC_OK) spm_free(m);
    return rc;
}
