/* tok_hf.c: HuggingFaceTokenizer: loads a tokenizer.json and runs HF `tokenizers`' encode
 * pipeline in C:
 *   1. added tokens: the tokens with normalized=false are split out of the raw text
 *      (leftmost-longest, with single_word / lstrip / rstrip), unless split_special_tokens
 *      makes the special ones plain text;
 *   2. each remaining piece is normalized (Prepend, Replace), and the normalized=true added
 *      tokens are split out of it;
 *   3. pre-tokenizers (Split with a regex or string, ByteLevel, Metaspace, Sequence);
 *   4. the BPE model on each pre-token (tok_bpe.c);
 *   5. the post-processor's special tokens (TemplateProcessing, Roberta/Bert, ByteLevel,
 *      Sequence) when hf_include_special_tokens is set, as Megatron's
 *      `tokenizer(text).input_ids` has them.
 * Decode runs the decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace). Any
 * other component fails at open with its name. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "tokenizer/tok_hf.h"

#define SPACE_SYM "\xE2\x96\x81" /* U+2581, SentencePiece's visible space */

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct hf_scratch {
    tok_bpe_scratch bpe;
    tok_regex_scratch rs[HF_MAX_PRE];
    tok_buf nbuf[2];
    tok_buf pbuf[HF_MAX_PRE];
} hf_scratch;

static void *hf_scratch_new(const mc_tokenizer *t) {
    const tok_hf *h = t->impl;
    hf_scratch *s = mc_xcalloc(1, sizeof *s);
    tok_bpe_scratch_init(&s->bpe);
    for (int i = 0; i < h->n_pre; i++) tok_regex_scratch_init(&s->rs[i], &h->pre[i].re);
    return s;
}

static void hf_scratch_free(void *p) {
    hf_scratch *s = p;
    if (!s) return;
    tok_bpe_scratch_free(&s->bpe);
    for (int i = 0; i < HF_MAX_PRE; i++) {
        tok_regex_scratch_free(&s->rs[i]);
        tok_buf_free(&s->pbuf[i]);
    }
    tok_buf_free(&s->nbuf[0]);
    tok_buf_free(&s->nbuf[1]);
    free(s);
}

/* The BPE model on one pre-token. Without a pre-tokenizer (Llama 2 / Mistral) the whole
 * normalized text is one word for HF; when no token holds U+2581 after another character,
 * no merge can cross the start of a "▁word", so the word splits there exactly (and each
 * piece can hit the word cache). */
static void model_encode(const tok_hf *h, hf_scratch *s, const uint8_t *p, size_t n, mc_ids *out) {
    if (!h->segment_ws) {
        tok_bpe_encode_word(&h->bpe, &s->bpe, p, n, out);
        return;
    }
    size_t start = 0, i = 0;
    for (;;) {
        const uint8_t *q = memmem(p + i, n - i, SPACE_SYM, 3);
        if (!q) break;
        size_t at = (size_t)(q - p);
        if (at > start && !(at >= 3 && memcmp(p + at - 3, SPACE_SYM, 3) == 0)) {
            tok_bpe_encode_word(&h->bpe, &s->bpe, p + start, at - start, out);
            start = at;
        }
        i = at + 3;
    }
    tok_bpe_encode_word(&h->bpe, &s->bpe, p + start, n - start, out);
}

static void pretok(const tok_hf *h, hf_scratch *s, int step, const uint8_t *p, size_t n, bool first, mc_ids *out);

static void split_by(const tok_hf *h, hf_scratch *s, int step, const tok_regex *re, hf_split_behavior behavior,
                     const uint8_t *p, size_t n, bool first, mc_ids *out) {
#define EMIT(a, b)                                                                   \
    do {                                                                             \
        if ((b) > (a)) pretok(h, s, step + 1, p + (a), (b) - (a), first && (a) == 0, out); \
    } while (0)
    size_t last = 0, from = 0, ms, me, ps = SIZE_MAX, pe = 0;
    while (tok_regex_next(re, &s->rs[step], p, n, from, &ms, &me)) {
        switch (behavior) {
        case HF_SPLIT_ISOLATED: EMIT(last, ms); EMIT(ms, me); last = me; break;
        case HF_SPLIT_REMOVED: EMIT(last, ms); last = me; break;
        case HF_SPLIT_MERGED_PREV: EMIT(last, me); last = me; break;
        case HF_SPLIT_MERGED_NEXT: EMIT(last, ms); last = ms; break;
        case HF_SPLIT_CONTIGUOUS:
            if (ps != SIZE_MAX && ms == pe) {
                pe = me;
            } else {
                if (ps != SIZE_MAX) {
                    EMIT(ps, pe);
                    last = pe;
                }
                EMIT(last, ms);
                ps = ms;
                pe = me;
            }
            break;
        }
        from = me;
    }
    if (ps != SIZE_MAX) {
        EMIT(ps, pe);
        last = pe;
    }
    EMIT(last, n);
#undef EMIT
}

static void pretok(const tok_hf *h, hf_scratch *s, int step, const uint8_t *p, size_t n, bool first, mc_ids *out) {
    if (n == 0) return;
    if (step == h->n_pre) {
        model_encode(h, s, p, n, out);
        return;
    }
    const hf_pre *st = &h->pre[step];
    tok_buf *b = &s->pbuf[step];
    switch (st->kind) {
    case HF_PRE_SPLIT: split_by(h, s, step, &st->re, st->behavior, p, n, first, out); return;
    case HF_PRE_BYTELEVEL:
        if (st->add_prefix_space && p[0] != ' ') {
            b->len = 0;
            tok_buf_putc(b, ' ');
            tok_buf_put(b, p, n);
            p = (const uint8_t *)b->data;
            n = b->len;
        }
        if (st->use_re) split_by(h, s, step, &st->re, HF_SPLIT_ISOLATED, p, n, first, out);
        else pretok(h, s, step + 1, p, n, first, out);
        return;
    case HF_PRE_METASPACE: {
        b->len = 0;
        bool starts = p[0] == ' ' || (n >= st->repl_len && memcmp(p, st->repl, st->repl_len) == 0);
        if (!starts && (st->prepend == HF_PREPEND_ALWAYS || (st->prepend == HF_PREPEND_FIRST && first)))
            tok_buf_put(b, st->repl, st->repl_len);
        for (size_t i = 0; i < n; i++) {
            if (p[i] == ' ') tok_buf_put(b, st->repl, st->repl_len);
            else tok_buf_putc(b, (char)p[i]);
        }
        p = (const uint8_t *)b->data;
        n = b->len;
        if (!st->split) {
            pretok(h, s, step + 1, p, n, first, out);
            return;
        }
        size_t start = 0, i = 0; /* each piece starts at a replacement (MergedWithNext) */
        for (;;) {
            const uint8_t *q = memmem(p + i, n - i, st->repl, st->repl_len);
            if (!q) break;
            size_t at = (size_t)(q - p);
            if (at > start) pretok(h, s, step + 1, p + start, at - start, first && start == 0, out);
            start = at;
            i = at + st->repl_len;
        }
        pretok(h, s, step + 1, p + start, n - start, first && start == 0, out);
        return;
    }
    }
}

/* The normalizers in order, ping-ponging between two scratch buffers. */
static const uint8_t *normalize(const tok_hf *h, tok_buf nbuf[2], const uint8_t *p, size_t *n) {
    int cur = 0;
    for (int k = 0; k < h->n_norm; k++) {
        const hf_norm *op = &h->norm[k];
        tok_buf *d = &nbuf[cur];
        d->len = 0;
        if (op->kind == HF_NORM_PREPEND) {
            if (*n == 0) continue;
            tok_buf_put(d, op->a, op->alen);
            tok_buf_put(d, p, *n);
        } else {
            size_t i = 0;
            while (i < *n) {
                const uint8_t *q = op->alen ? memmem(p + i, *n - i, op->a, op->alen) : NULL;
                size_t at = q ? (size_t)(q - p) : *n;
                tok_buf_put(d, p + i, at - i);
                if (!q) break;
                tok_buf_put(d, op->b, op->blen);
                i = at + op->alen;
            }
        }
        p = (const uint8_t *)d->data;
        *n = d->len;
        cur ^= 1;
    }
    return p;
}

/* The code point that ends s[0..i), or TOK_INVALID_CP. */
static uint32_t cp_before(const uint8_t *s, size_t i) {
    size_t j = i;
    while (j > 0 && i - j < 4) {
        j--;
        if ((s[j] & 0xC0) != 0x80) break;
    }
    uint32_t cp;
    size_t l = tok_utf8_decode(s + j, i - j, &cp);
    return l == i - j ? cp : TOK_INVALID_CP;
}

static bool is_word_cp(uint32_t cp) { return cp != TOK_INVALID_CP && (tok_uc_class(cp) & TOK_UC_W); }
static bool is_space_cp(uint32_t cp) { return cp != TOK_INVALID_CP && (tok_uc_class(cp) & TOK_UC_WS); }

/* Leftmost-longest added token (of one set) in s[from..n): its index, at *at; or -1. */
static int find_added(const tok_hf *h, bool norm, const uint8_t *s, size_t n, size_t from, size_t *at) {
    const uint8_t *first = norm ? h->first_norm : h->first_raw;
    for (size_t i = from; i < n; i++) {
        if (!first[s[i]]) continue;
        int best = -1;
        uint32_t blen = 0;
        for (int k = 0; k < h->n_added; k++) {
            const hf_added *a = &h->added[k];
            if (a->normalized != norm) continue;
            const char *c = norm ? a->norm_content : a->content;
            uint32_t cl = norm ? a->norm_len : a->len;
            if (cl > blen && cl <= n - i && memcmp(s + i, c, cl) == 0) {
                best = k;
                blen = cl;
            }
        }
        if (best >= 0) {
            *at = i;
            return best;
        }
    }
    return -1;
}

/* HF AddedVocabulary::find_matches: split s at the added tokens of one set; calls back for
 * the text between them. */
typedef void (*gap_fn)(const tok_hf *h, hf_scratch *s, const uint8_t *p, size_t n, bool first, mc_ids *out);
static void split_added(const tok_hf *h, hf_scratch *s, bool norm, const uint8_t *p, size_t n, bool first,
                        gap_fn gap, mc_ids *out) {
    size_t seg = 0, pos = 0, at;
    int k;
    while ((k = find_added(h, norm, p, n, pos, &at)) >= 0) {
        const hf_added *a = &h->added[k];
        size_t ms = at, me = at + (norm ? a->norm_len : a->len);
        pos = me;
        if (h->split_special && a->special) continue; /* HF skips the match (and what it covers) */
        if (a->single_word) {
            bool start_ok = ms == 0 || !is_word_cp(cp_before(p, ms));
            uint32_t cp = TOK_INVALID_CP;
            if (me < n) tok_utf8_decode(p + me, n - me, &cp);
            bool stop_ok = me == n || !is_word_cp(cp);
            if (!start_ok || !stop_ok) continue;
        }
        if (a->lstrip) {
            while (ms > seg) {
                uint32_t cp = cp_before(p, ms);
                if (!is_space_cp(cp)) break;
                char tmp[4];
                ms -= tok_utf8_encode(cp, tmp);
            }
        }
        if (a->rstrip) {
            while (me < n) {
                uint32_t cp;
                size_t l = tok_utf8_decode(p + me, n - me, &cp);
                if (!is_space_cp(cp)) break;
                me += l;
            }
        }
        if (ms > seg) gap(h, s, p + seg, ms - seg, first && seg == 0, out);
        tok_ids_push(out, a->id);
        seg = pos = me;
    }
    if (n > seg) gap(h, s, p + seg, n - seg, first && seg == 0, out);
}

static void normalized_piece(const tok_hf *h, hf_scratch *s, const uint8_t *p, size_t n, bool first, mc_ids *out) {
    if (h->fast_end) {
        for (size_t i = 0, e; i < n; i = e) {
            e = h->fast_end(p, n, i);
            tok_bpe_encode_word(&h->bpe, &s->bpe, p + i, e - i, out);
        }
        return;
    }
    pretok(h, s, 0, p, n, first, out);
}

static void raw_piece(const tok_hf *h, hf_scratch *s, const uint8_t *p, size_t n, bool first, mc_ids *out) {
    if (h->n_norm) p = normalize(h, s->nbuf, p, &n);
    if (h->n_norm_added) split_added(h, s, true, p, n, first, normalized_piece, out);
    else normalized_piece(h, s, p, n, first, out);
}

static int hf_encode(const mc_tokenizer *t, void *scratch, const char *text, size_t len, mc_ids *out, mc_err *err) {
    (void)err;
    const tok_hf *h = t->impl;
    hf_scratch *s = scratch;
    const uint8_t *p = (const uint8_t *)text;
    if (h->include_special) tok_ids_append(out, h->prefix, h->n_prefix);
    if (h->n_raw_added) split_added(h, s, false, p, len, true, raw_piece, out);
    else if (len) raw_piece(h, s, p, len, true, out);
    if (h->include_special) tok_ids_append(out, h->suffix, h->n_suffix);
    return MC_OK;
}

/* ---- decode ------------------------------------------------------------------------------------ */

typedef struct strv {
    tok_buf *v;
    size_t n, cap;
} strv;

static tok_buf *strv_add(strv *sv) {
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 64;
        sv->v = mc_xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    tok_buf *b = &sv->v[sv->n++];
    memset(b, 0, sizeof *b);
    return b;
}

static void strv_free(strv *sv) {
    for (size_t i = 0; i < sv->n; i++) tok_buf_free(&sv->v[i]);
    free(sv->v);
    memset(sv, 0, sizeof *sv);
}

static void strv_join_into(strv *sv, tok_buf *out, const char *sep) {
    for (size_t i = 0; i < sv->n; i++) {
        if (i && sep) tok_buf_put(out, sep, strlen(sep));
        tok_buf_put(out, sv->v[i].data, sv->v[i].len);
    }
}

static void replace_all(tok_buf *dst, const char *p, size_t n, const char *a, size_t alen, const char *b, size_t blen) {
    size_t i = 0;
    while (i < n) {
        const char *q = alen ? memmem(p + i, n - i, a, alen) : NULL;
        size_t at = q ? (size_t)(q - p) : n;
        tok_buf_put(dst, p + i, at - i);
        if (!q) break;
        tok_buf_put(dst, b, blen);
        i = at + alen;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void apply_decoder(const hf_dec *d, strv *sv) {
    strv nv = {0};
    switch (d->kind) {
    case HF_DEC_BYTELEVEL: { /* all tokens' bytes, read back as UTF-8 (lossy) */
        tok_buf bytes = {0};
        for (size_t i = 0; i < sv->n; i++) {
            const uint8_t *p = (const uint8_t *)sv->v[i].data;
            size_t n = sv->v[i].len, j = 0, mark = bytes.len;
            while (j < n) {
                uint32_t cp;
                j += tok_utf8_decode(p + j, n - j, &cp);
                int b = tok_cp_to_byte(cp);
                if (b < 0) { /* a character outside the map: the token as it is */
                    bytes.len = mark;
                    tok_buf_put(&bytes, p, n);
                    break;
                }
                tok_buf_putc(&bytes, (char)b);
            }
        }
        tok_utf8_lossy(strv_add(&nv), (const uint8_t *)bytes.data, bytes.len);
        tok_buf_free(&bytes);
        break;
    }
    case HF_DEC_REPLACE:
        for (size_t i = 0; i < sv->n; i++)
            replace_all(strv_add(&nv), sv->v[i].data, sv->v[i].len, d->a, d->alen, d->b, d->blen);
        break;
    case HF_DEC_BYTEFALLBACK: {
        tok_buf pend = {0};
        for (size_t i = 0; i <= sv->n; i++) {
            int byte = -1;
            if (i < sv->n) {
                const char *t = sv->v[i].data;
                if (sv->v[i].len == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && hexval(t[3]) >= 0 && hexval(t[4]) >= 0)
                    byte = hexval(t[3]) * 16 + hexval(t[4]);
            }
            if (byte >= 0) {
                tok_buf_putc(&pend, (char)byte);
                continue;
            }
            if (pend.len) {
                bool valid = true;
                for (size_t j = 0; j < pend.len;) {
                    uint32_t cp;
                    j += tok_utf8_decode((const uint8_t *)pend.data + j, pend.len - j, &cp);
                    if (cp == TOK_INVALID_CP) valid = false;
                }
                if (valid) tok_buf_put(strv_add(&nv), pend.data, pend.len);
                else
                    for (size_t j = 0; j < pend.len; j++) tok_buf_put(strv_add(&nv), "\xEF\xBF\xBD", 3);
                pend.len = 0;
            }
            if (i < sv->n) tok_buf_put(strv_add(&nv), sv->v[i].data, sv->v[i].len);
        }
        tok_buf_free(&pend);
        break;
    }
    case HF_DEC_FUSE: strv_join_into(sv, strv_add(&nv), NULL); break;
    case HF_DEC_STRIP:
        for (size_t i = 0; i < sv->n; i++) {
            const char *p = sv->v[i].data;
            size_t n = sv->v[i].len, a = 0, b = n;
            if (n == 0) { /* an empty string (its data may be NULL) strips to itself */
                strv_add(&nv);
                continue;
            }
            for (int k = 0; k < d->start && b - a >= d->alen && memcmp(p + a, d->a, d->alen) == 0; k++) a += d->alen;
            for (int k = 0; k < d->stop && b - a >= d->alen && memcmp(p + b - d->alen, d->a, d->alen) == 0; k++)
                b -= d->alen;
            tok_buf_put(strv_add(&nv), p + a, b - a);
        }
        break;
    case HF_DEC_METASPACE:
        for (size_t i = 0; i < sv->n; i++) {
            bool drop = i == 0 && d->prepend != HF_PREPEND_NEVER;
            replace_all(strv_add(&nv), sv->v[i].data, sv->v[i].len, d->repl, d->repl_len, " ", drop ? 0 : 1);
        }
        break;
    }
    strv_free(sv);
    *sv = nv;
}

static void hf_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, tok_buf *out) {
    const tok_hf *h = t->impl;
    strv sv = {0};
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= h->n_ids || !h->id_text[id]) continue; /* HF skips ids it does not know */
        tok_buf_put(strv_add(&sv), h->id_text[id], h->id_len[id]);
    }
    for (int k = 0; k < h->n_dec; k++) apply_decoder(&h->dec[k], &sv);
    strv_join_into(&sv, out, h->has_decoder ? NULL : " ");
    strv_free(&sv);
}

/* ---- install / free --------------------------------------------------------------------------- */

void tok_hf_free(void *impl) {
    tok_hf *h = impl;
    if (!h) return;
    tok_bpe_free(&h->bpe);
    for (int i = 0; i < h->n_added; i++) {
        free(h->added[i].content);
        free(h->added[i].norm_content);
    }
    free(h->added);
    for (int i = 0; i < h->n_norm; i++) {
        free(h->norm[i].a);
        free(h->norm[i].b);
    }
    free(h->norm);
    for (int i = 0; i < h->n_pre; i++) tok_regex_free(&h->pre[i].re);
    for (int i = 0; i < h->n_dec; i++) {
        free(h->dec[i].a);
        free(h->dec[i].b);
    }
    free(h->dec);
    free(h->prefix);
    free(h->suffix);
    free(h->id_text);
    free(h->id_len);
    free(h);
}

static const tok_vtable hf_vtable = {
    .encode = hf_encode,
    .decode = hf_decode,
    .scratch_new = hf_scratch_new,
    .scratch_free = hf_scratch_free,
    .free_impl = tok_hf_free,
};

void tok_hf_install(mc_tokenizer *t, tok_hf *h, const char *name) {
    int32_t n_ids = h->bpe.n_ids;
    for (int i = 0; i < h->n_added; i++)
        if (h->added[i].id + 1 > n_ids) n_ids = h->added[i].id + 1;
    h->n_ids = n_ids;
    h->id_text = mc_xcalloc((size_t)n_ids, sizeof *h->id_text);
    h->id_len = mc_xcalloc((size_t)n_ids, sizeof *h->id_len);
    int distinct = 0;
    for (int32_t id = 0; id < h->bpe.n_ids; id++) {
        if (!h->bpe.tok[id]) continue;
        h->id_text[id] = h->bpe.tok[id];
        h->id_len[id] = h->bpe.tok_len[id];
        distinct++;
    }
    for (int i = 0; i < h->n_added; i++) {
        const hf_added *a = &h->added[i];
        /* HF (0.23) gives a normalized added token the text of its normalized form */
        h->id_text[a->id] = a->normalized ? a->norm_content : a->content;
        h->id_len[a->id] = a->normalized ? a->norm_len : a->len;
        bool dup = tok_strmap_get(&h->bpe.tokmap, a->content, a->len) >= 0;
        for (int j = 0; j < i && !dup; j++) dup = h->added[j].len == a->len && !memcmp(h->added[j].content, a->content, a->len);
        if (!dup) distinct++;
    }
    for (int i = 0; i < h->n_added; i++) {
        const hf_added *a = &h->added[i];
        (a->normalized ? h->first_norm : h->first_raw)[(uint8_t)(a->normalized ? a->norm_content[0] : a->content[0])] = 1;
        if (a->normalized) h->n_norm_added++;
        else h->n_raw_added++;
    }
    /* [Split(hand regex, Isolated), ByteLevel(no regex, no prefix)] or [ByteLevel(hand regex,
     * no prefix)]: pieces go straight from the matcher to the model */
    const hf_pre *p0 = &h->pre[0], *p1 = &h->pre[1];
    const tok_regex *re = NULL;
    if (h->n_pre == 2 && p0->kind == HF_PRE_SPLIT && p0->behavior == HF_SPLIT_ISOLATED && p1->kind == HF_PRE_BYTELEVEL &&
        !p1->use_re && !p1->add_prefix_space)
        re = &p0->re;
    if (h->n_pre == 1 && p0->kind == HF_PRE_BYTELEVEL && p0->use_re && !p0->add_prefix_space) re = &p0->re;
    if (re && re->kind == TOK_RE_GPT2) h->fast_end = tok_re_gpt2_end;
    if (re && re->kind == TOK_RE_CL100K) h->fast_end = tok_re_cl100k_end;
    t->vt = &hf_vtable;
    t->name = name;
    t->impl = h;
    /* Megatron: len(tokenizer), the distinct tokens of vocabulary and added tokens. */
    t->vocab_size = distinct > n_ids ? distinct : n_ids;
}

/* ---- tokenizer.json ------------------------------------------------------------------------ */

typedef struct loader {
    const char *path; /* for messages */
    mc_err *err;
} loader;

static int lerr(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lerr(loader *L, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mc_err_set(L->err, "--tokenizer-model %s: %s", L->path, msg);
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jbool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = jget(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}
/* An integer-valued JSON number inside int64's range, checked before the cast (which is
 * undefined outside it: an id of 1e30). */
static int jint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= -0x1p63 && d < 0x1p63) || d != (double)(int64_t)d) return -1;
    *out = (int64_t)d;
    return 0;
}
static char *xdup(const char *s) { return mc_xstrdup(s ? s : ""); }

/* A {"String": s} pattern; Regex patterns are reported by the caller. */
static const char *string_pattern(const cJSON *pat) { return jstr(pat, "String"); }

static int parse_normalizer(loader *L, tok_hf *h, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return MC_OK;
    const char *type = jstr(n, "type");
    if (!type) return lerr(L, "normalizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = jget(n, "normalizers"), *it;
        if (!cJSON_IsArray(list)) return lerr(L, "normalizer Sequence without a \"normalizers\" list");
        cJSON_ArrayForEach(it, list) MC_TRY(parse_normalizer(L, h, it));
        return MC_OK;
    }
    hf_norm op = {0};
    if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p) return lerr(L, "normalizer Prepend without a \"prepend\" string");
        op.kind = HF_NORM_PREPEND;
        op.a = xdup(p);
        op.alen = strlen(p);
    } else if (!strcmp(type, "Replace")) {
        const char *from = string_pattern(jget(n, "pattern")), *to = jstr(n, "content");
        if (!from || !to)
            return lerr(L, "normalizer Replace: only a {\"String\": ...} pattern with a \"content\" string is supported");
        op.kind = HF_NORM_REPLACE;
        op.a = xdup(from);
        op.alen = strlen(from);
        op.b = xdup(to);
        op.blen = strlen(to);
    } else {
        return lerr(L, "normalizer \"%s\" is not supported (supported: Sequence, Prepend, Replace)", type);
    }
    h->norm = mc_xrealloc(h->norm, (size_t)(h->n_norm + 1) * sizeof *h->norm);
    h->norm[h->n_norm++] = op;
    return MC_OK;
}

static int parse_prepend_scheme(loader *L, const cJSON *o, hf_prepend_scheme *out, const char *what) {
    const char *ps = jstr(o, "prepend_scheme");
    if (ps) {
        if (!strcmp(ps, "always")) *out = HF_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first")) *out = HF_PREPEND_FIRST;
        else if (!strcmp(ps, "never")) *out = HF_PREPEND_NEVER;
        else return lerr(L, "%s: unknown prepend_scheme \"%s\"", what, ps);
    } else {
        *out = jbool(o, "add_prefix_space", true) ? HF_PREPEND_ALWAYS : HF_PREPEND_NEVER;
    }
    return MC_OK;
}

static int parse_replacement(loader *L, const cJSON *o, char repl[8], size_t *len, const char *what) {
    const char *r = jstr(o, "replacement");
    if (!r) r = SPACE_SYM;
    size_t n = strlen(r);
    uint32_t cp;
    if (n == 0 || n > 4 || tok_utf8_decode((const uint8_t *)r, n, &cp) != n)
        return lerr(L, "%s: \"replacement\" must be one character", what);
    memcpy(repl, r, n);
    *len = n;
    return MC_OK;
}

static int parse_pretok(loader *L, tok_hf *h, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return MC_OK;
    const char *type = jstr(p, "type");
    if (!type) return lerr(L, "pre_tokenizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = jget(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(list)) return lerr(L, "pre_tokenizer Sequence without a \"pretokenizers\" list");
        cJSON_ArrayForEach(it, list) MC_TRY(parse_pretok(L, h, it));
        return MC_OK;
    }
    if (h->n_pre == HF_MAX_PRE) return lerr(L, "more than %d pre-tokenizers", HF_MAX_PRE);
    hf_pre *st = &h->pre[h->n_pre];
    memset(st, 0, sizeof *st);
    if (!strcmp(type, "ByteLevel")) {
        st->kind = HF_PRE_BYTELEVEL;
        st->add_prefix_space = jbool(p, "add_prefix_space", true);
        st->use_re = jbool(p, "use_regex", true);
        if (st->use_re && tok_regex_compile(&st->re, tok_re_gpt2, true, L->err) != MC_OK) return MC_ERR;
    } else if (!strcmp(type, "Split")) {
        st->kind = HF_PRE_SPLIT;
        const cJSON *pat = jget(p, "pattern");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        const char *beh = jstr(p, "behavior");
        if (jbool(p, "invert", false)) return lerr(L, "pre_tokenizer Split with invert=true is not supported");
        if (!beh) return lerr(L, "pre_tokenizer Split without a \"behavior\"");
        if (!strcmp(beh, "Isolated")) st->behavior = HF_SPLIT_ISOLATED;
        else if (!strcmp(beh, "Removed")) st->behavior = HF_SPLIT_REMOVED;
        else if (!strcmp(beh, "MergedWithPrevious")) st->behavior = HF_SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) st->behavior = HF_SPLIT_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) st->behavior = HF_SPLIT_CONTIGUOUS;
        else return lerr(L, "pre_tokenizer Split: unknown behavior \"%s\"", beh);
        if (re) {
            if (tok_regex_compile(&st->re, re, true, L->err) != MC_OK) return mc_err_prefix(L->err, "--tokenizer-model %s: ", L->path);
        } else if (lit) {
            tok_regex_literal(&st->re, lit, strlen(lit));
        } else {
            return lerr(L, "pre_tokenizer Split needs a {\"Regex\": ...} or {\"String\": ...} pattern");
        }
    } else if (!strcmp(type, "Metaspace")) {
        st->kind = HF_PRE_METASPACE;
        MC_TRY(parse_replacement(L, p, st->repl, &st->repl_len, "pre_tokenizer Metaspace"));
        MC_TRY(parse_prepend_scheme(L, p, &st->prepend, "pre_tokenizer Metaspace"));
        st->split = jbool(p, "split", true);
    } else {
        return lerr(L, "pre_tokenizer \"%s\" is not supported (supported: Sequence, Split, ByteLevel, Metaspace)", type);
    }
    h->n_pre++;
    return MC_OK;
}

static int parse_decoder(loader *L, tok_hf *h, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return MC_OK;
    h->has_decoder = true;
    const char *type = jstr(d, "type");
    if (!type) return lerr(L, "decoder without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = jget(d, "decoders"), *it;
        if (!cJSON_IsArray(list)) return lerr(L, "decoder Sequence without a \"decoders\" list");
        cJSON_ArrayForEach(it, list) MC_TRY(parse_decoder(L, h, it));
        return MC_OK;
    }
    hf_dec dec = {0};
    if (!strcmp(type, "ByteLevel")) {
        dec.kind = HF_DEC_BYTELEVEL;
    } else if (!strcmp(type, "Replace")) {
        const char *from = string_pattern(jget(d, "pattern")), *to = jstr(d, "content");
        if (!from || !to) return lerr(L, "decoder Replace: only a {\"String\": ...} pattern is supported");
        dec.kind = HF_DEC_REPLACE;
        dec.a = xdup(from);
        dec.alen = strlen(from);
        dec.b = xdup(to);
        dec.blen = strlen(to);
    } else if (!strcmp(type, "ByteFallback")) {
        dec.kind = HF_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        dec.kind = HF_DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        const char *c = jstr(d, "content");
        int64_t start = 0, stop = 0;
        if (!c || jint(jget(d, "start"), &start) || jint(jget(d, "stop"), &stop) || start < 0 || stop < 0)
            return lerr(L, "decoder Strip needs \"content\", \"start\" and \"stop\"");
        dec.kind = HF_DEC_STRIP;
        dec.a = xdup(c);
        dec.alen = strlen(c);
        dec.start = start > INT_MAX ? INT_MAX : (int)start; /* more than the text holds strips it all */
        dec.stop = stop > INT_MAX ? INT_MAX : (int)stop;
    } else if (!strcmp(type, "Metaspace")) {
        dec.kind = HF_DEC_METASPACE;
        MC_TRY(parse_replacement(L, d, dec.repl, &dec.repl_len, "decoder Metaspace"));
        MC_TRY(parse_prepend_scheme(L, d, &dec.prepend, "decoder Metaspace"));
    } else {
        return lerr(L, "decoder \"%s\" is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, "
                       "Fuse, Strip, Metaspace)",
                    type);
    }
    h->dec = mc_xrealloc(h->dec, (size_t)(h->n_dec + 1) * sizeof *h->dec);
    h->dec[h->n_dec++] = dec;
    return MC_OK;
}

static void ids_cat(int32_t **dst, int *n, const int32_t *src, int m, bool front) {
    *dst = mc_xrealloc(*dst, (size_t)(*n + m + 1) * sizeof **dst);
    if (front) {
        memmove(*dst + m, *dst, (size_t)*n * sizeof **dst);
        memcpy(*dst, src, (size_t)m * sizeof **dst);
    } else {
        memcpy(*dst + *n, src, (size_t)m * sizeof **dst);
    }
    *n += m;
}

/* The id of a token text: added tokens first, then the vocabulary; -1 if neither. */
static int32_t token_id(const tok_hf *h, const char *s) {
    size_t n = strlen(s);
    for (int i = 0; i < h->n_added; i++)
        if (h->added[i].len == n && !memcmp(h->added[i].content, s, n)) return h->added[i].id;
    return tok_strmap_get(&h->bpe.tokmap, s, n);
}

static int parse_post(loader *L, tok_hf *h, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return MC_OK;
    const char *type = jstr(p, "type");
    if (!type) return lerr(L, "post_processor without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = jget(p, "processors"), *it;
        if (!cJSON_IsArray(list)) return lerr(L, "post_processor Sequence without a \"processors\" list");
        cJSON_ArrayForEach(it, list) MC_TRY(parse_post(L, h, it));
        return MC_OK;
    }
    if (!strcmp(type, "ByteLevel")) return MC_OK; /* offsets only */
    int32_t pre[64], suf[64];
    int npre = 0, nsuf = 0;
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *single = jget(p, "single"), *specials = jget(p, "special_tokens"), *it;
        if (!cJSON_IsArray(single)) return lerr(L, "post_processor TemplateProcessing without a \"single\" list");
        bool seen_seq = false;
        cJSON_ArrayForEach(it, single) {
            const cJSON *st = jget(it, "SpecialToken"), *sq = jget(it, "Sequence");
            if (sq) {
                if (seen_seq) return lerr(L, "post_processor TemplateProcessing: \"single\" has two sequences");
                seen_seq = true;
                continue;
            }
            const char *name = jstr(st, "id");
            const cJSON *ids = jget(jget(specials, name ? name : ""), "ids"), *x;
            if (!name || !cJSON_IsArray(ids))
                return lerr(L, "post_processor TemplateProcessing: special token \"%s\" is not in \"special_tokens\"",
                            name ? name : "?");
            cJSON_ArrayForEach(x, ids) {
                int64_t v;
                if (jint(x, &v) || v < 0 || v > INT32_MAX || npre + nsuf >= 64)
                    return lerr(L, "post_processor TemplateProcessing: bad ids for \"%s\"", name);
                if (seen_seq) suf[nsuf++] = (int32_t)v;
                else pre[npre++] = (int32_t)v;
            }
        }
        if (!seen_seq) return lerr(L, "post_processor TemplateProcessing: \"single\" has no sequence");
    } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const cJSON *cls = jget(p, "cls"), *sep = jget(p, "sep");
        int64_t c, s;
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || jint(cJSON_GetArrayItem(cls, 1), &c) ||
            jint(cJSON_GetArrayItem(sep, 1), &s))
            return lerr(L, "post_processor %s needs \"cls\" and \"sep\" as [token, id]", type);
        pre[npre++] = (int32_t)c;
        suf[nsuf++] = (int32_t)s;
    } else {
        return lerr(L, "post_processor \"%s\" is not supported (supported: Sequence, TemplateProcessing, ByteLevel, "
                       "RobertaProcessing, BertProcessing)",
                    type);
    }
    ids_cat(&h->prefix, &h->n_prefix, pre, npre, true);
    ids_cat(&h->suffix, &h->n_suffix, suf, nsuf, false);
    return MC_OK;
}

static int parse_model(loader *L, tok_hf *h, const cJSON *m, bool byte_level) {
    if (!cJSON_IsObject(m)) return lerr(L, "no \"model\" object");
    const char *type = jstr(m, "type");
    if (type && strcmp(type, "BPE"))
        return lerr(L, "model \"%s\" is not supported (only BPE)", type);
    const cJSON *vocab = jget(m, "vocab"), *merges = jget(m, "merges"), *it;
    if (!cJSON_IsObject(vocab)) return lerr(L, "model.vocab is not an object of token -> id");
    if (!cJSON_IsArray(merges)) return lerr(L, "model.merges is not a list");
    const cJSON *dropout = jget(m, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return lerr(L, "model.dropout %g is not supported (BPE dropout is for training)", dropout->valuedouble);
    const char *csp = jstr(m, "continuing_subword_prefix"), *eow = jstr(m, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return lerr(L, "model.continuing_subword_prefix / end_of_word_suffix are not supported");
    int64_t max_id = -1;
    cJSON_ArrayForEach(it, vocab) {
        int64_t id;
        if (jint(it, &id) || id < 0 || id >= INT32_MAX)
            return lerr(L, "model.vocab[\"%.60s\"] is not a valid id", it->string);
        if (id > max_id) max_id = id;
    }
    int count = cJSON_GetArraySize(vocab);
    if (max_id >= 4 * (int64_t)count + 65536)
        return lerr(L, "model.vocab ids are not dense (id %lld for %d tokens)", (long long)max_id, count);
    tok_bpe *b = &h->bpe;
    tok_bpe_init(b, (int32_t)(max_id + 1));
    cJSON_ArrayForEach(it, vocab) {
        if (tok_bpe_add_token(b, (int32_t)it->valuedouble, it->string, strlen(it->string), L->err) != MC_OK)
            return mc_err_prefix(L->err, "--tokenizer-model %s: model.vocab: ", L->path);
    }
    tok_bpe_finish_vocab(b, byte_level, (size_t)cJSON_GetArraySize(merges));
    uint32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *c;
        size_t alen, clen;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return lerr(L, "model.merges[%u] \"%.60s\": expected two tokens separated by one space", rank, s);
            a = s;
            alen = (size_t)(sp - s);
            c = sp + 1;
            clen = strlen(c);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            c = cJSON_GetArrayItem(it, 1)->valuestring;
            alen = strlen(a);
            clen = strlen(c);
        } else {
            return lerr(L, "model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", rank);
        }
        if (tok_bpe_add_merge(b, a, alen, c, clen, rank, L->err) != MC_OK)
            return mc_err_prefix(L->err, "--tokenizer-model %s: model.merges[%u]: ", L->path, rank);
        rank++;
    }
    b->byte_fallback = jbool(m, "byte_fallback", false);
    b->fuse_unk = jbool(m, "fuse_unk", false);
    b->ignore_merges = jbool(m, "ignore_merges", false);
    const char *unk = jstr(m, "unk_token");
    if (unk) {
        b->unk_id = tok_strmap_get(&b->tokmap, unk, strlen(unk));
        if (b->unk_id < 0) return lerr(L, "model.unk_token \"%s\" is not in the vocabulary", unk);
    }
    tok_bpe_finish(b);
    return MC_OK;
}

static int parse_added(loader *L, tok_hf *h, const cJSON *list) {
    if (!list || cJSON_IsNull(list)) return MC_OK;
    if (!cJSON_IsArray(list)) return lerr(L, "added_tokens is not a list");
    const cJSON *it;
    h->added = mc_xcalloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *h->added);
    cJSON_ArrayForEach(it, list) {
        int64_t id;
        const char *c = jstr(it, "content");
        if (jint(jget(it, "id"), &id) || id < 0 || id >= INT32_MAX || !c)
            return lerr(L, "added_tokens[%d] needs an \"id\" (an integer from 0 to 2147483646) and a \"content\"", h->n_added);
        if (id >= (int64_t)h->bpe.n_ids + 4 * (int64_t)cJSON_GetArraySize(list) + 65536)
            return lerr(L, "added_tokens[%d]: id %lld is far beyond the vocabulary", h->n_added, (long long)id);
        if (!*c) continue; /* HF ignores empty added tokens */
        hf_added *a = &h->added[h->n_added++];
        a->content = xdup(c);
        a->len = (uint32_t)strlen(c);
        a->id = (int32_t)id;
        a->single_word = jbool(it, "single_word", false);
        a->lstrip = jbool(it, "lstrip", false);
        a->rstrip = jbool(it, "rstrip", false);
        a->special = jbool(it, "special", false);
        a->normalized = jbool(it, "normalized", !a->special);
    }
    return MC_OK;
}

/* Whether a char-level model's words may be split before "▁" runs: "▁" is a token and no
 * token has "▁" after another character. */
static bool segmentable(const tok_bpe *b) {
    if (b->byte_level || tok_strmap_get(&b->tokmap, SPACE_SYM, 3) < 0) return false;
    for (int32_t id = 0; id < b->n_ids; id++) {
        const char *t = b->tok[id];
        if (!t) continue;
        uint32_t n = b->tok_len[id];
        for (uint32_t i = 1; i + 3 <= n; i++)
            if (!memcmp(t + i, SPACE_SYM, 3) && !(i >= 3 && !memcmp(t + i - 3, SPACE_SYM, 3))) return false;
    }
    return true;
}

/* eos_token of a tokenizer_config.json beside the tokenizer.json, or NULL. */
static char *config_eos(const char *cfg_path) {
    char *data;
    size_t len;
    mc_err e;
    if (tok_read_file(cfg_path, "tokenizer_config.json", &data, &len, &e) != MC_OK) return NULL;
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    char *eos = NULL;
    const cJSON *v = jget(root, "eos_token");
    if (cJSON_IsString(v)) eos = mc_xstrdup(v->valuestring);
    else if (jstr(v, "content")) eos = mc_xstrdup(jstr(v, "content"));
    cJSON_Delete(root);
    return eos;
}

int tok_open_hf(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err) {
    const char *arg = opt->tokenizer_model;
    if (!arg || !*arg) return mc_err_set(err, "--tokenizer-model: HuggingFaceTokenizer needs a tokenizer.json (or its directory)");
    char path[4096], dir[4096];
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", arg);
        snprintf(path, sizeof path, "%s/tokenizer.json", arg);
    } else {
        snprintf(path, sizeof path, "%s", arg);
        snprintf(dir, sizeof dir, "%s", arg);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    loader L = {.path = path, .err = err};
    char *data;
    size_t len;
    if (tok_read_file(path, "--tokenizer-model", &data, &len, err) != MC_OK) return MC_ERR;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, len, &end, false);
    if (!root) {
        size_t at = end && end >= data ? (size_t)(end - data) : 0;
        free(data);
        return lerr(&L, "malformed JSON near byte %zu", at);
    }
    free(data);
    tok_hf *h = mc_xcalloc(1, sizeof *h);
    int rc = MC_ERR;
    if (!cJSON_IsObject(root)) {
        lerr(&L, "not a tokenizer.json (the top level is not an object)");
        goto done;
    }
    if (parse_normalizer(&L, h, jget(root, "normalizer")) != MC_OK) goto done;
    if (parse_pretok(&L, h, jget(root, "pre_tokenizer")) != MC_OK) goto done;
    bool byte_level = false;
    for (int i = 0; i < h->n_pre; i++) {
        if (h->pre[i].kind == HF_PRE_BYTELEVEL) {
            byte_level = true;
            if (i != h->n_pre - 1) {
                lerr(&L, "pre_tokenizer ByteLevel followed by other pre-tokenizers is not supported");
                goto done;
            }
        }
        if (h->pre[i].kind == HF_PRE_METASPACE && byte_level) {
            lerr(&L, "pre_tokenizer mixes ByteLevel and Metaspace");
            goto done;
        }
    }
    if (parse_model(&L, h, jget(root, "model"), byte_level) != MC_OK) goto done;
    if (parse_added(&L, h, jget(root, "added_tokens")) != MC_OK) goto done;
    for (int i = 0; i < h->n_added; i++) { /* normalized added tokens match their normalized form */
        hf_added *a = &h->added[i];
        size_t n = a->len;
        tok_buf nb[2] = {{0}, {0}};
        const uint8_t *p = normalize(h, nb, (const uint8_t *)a->content, &n);
        a->norm_content = mc_xmalloc(n + 1);
        memcpy(a->norm_content, p, n);
        a->norm_content[n] = 0;
        a->norm_len = (uint32_t)n;
        tok_buf_free(&nb[0]);
        tok_buf_free(&nb[1]);
        if (a->normalized && n == 0) a->normalized = false;
    }
    if (parse_post(&L, h, jget(root, "post_processor")) != MC_OK) goto done;
    if (parse_decoder(&L, h, jget(root, "decoder")) != MC_OK) goto done;
    h->segment_ws = segmentable(&h->bpe); /* a property of the model: exact after any pre-tokenizer */
    h->include_special = opt->hf_include_special_tokens;
    h->split_special = opt->split_special_tokens;
    tok_hf_install(t, h, "HuggingFaceTokenizer");
    /* eod: Megatron uses eos_token_id, which tokenizer_config.json names; without one, the
     * first of the usual end-of-text tokens the vocabulary has. */
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    char *eos = config_eos(cfg);
    if (eos) {
        t->eod = token_id(h, eos);
        if (t->eod < 0) {
            lerr(&L, "tokenizer_config.json eos_token \"%s\" is not a token", eos);
            free(eos);
            t->impl = NULL;
            goto done;
        }
        free(eos);
    } else {
        static const char *const names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>", "[SEP]"};
        for (size_t i = 0; i < sizeof names / sizeof names[0] && t->eod < 0; i++) t->eod = token_id(h, names[i]);
    }
    rc = MC_OK;
done:
    cJSON_Delete(root);
    if (rc != MC_OK) tok_hf_free(h);
    return rc;
}
