/* tok_regex.c: pre-tokenizer patterns: the exact hand-written GPT-2 and cl100k matchers and
 * the PCRE2 path for any other regex. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_regex.h"

#ifdef MC_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

const char tok_re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char tok_re_cl100k[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- hand-written matchers ---------------------------------------------------------------- */

#define L TOK_UC_L
#define N TOK_UC_N
#define WS TOK_UC_WS

/* Class bits of the character at s[i], and its length. */
static inline uint8_t cls_at(const uint8_t *s, size_t n, size_t i, size_t *len) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *len = 1;
        return tok_uc_bmp[c];
    }
    uint32_t cp;
    *len = tok_utf8_decode(s + i, n - i, &cp);
    return cp == TOK_INVALID_CP ? 0 : tok_uc_class(cp);
}

/* End of the run of characters that have any of the `want` bits, from i. */
static inline size_t run_of(const uint8_t *s, size_t n, size_t i, uint8_t want) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (!(tok_uc_bmp[s[i]] & want)) break;
            i++;
        } else {
            size_t l;
            if (!(cls_at(s, n, i, &l) & want)) break;
            i += l;
        }
    }
    return i;
}

/* End of the run of [^\s\p{L}\p{N}] from i. */
static inline size_t run_other(const uint8_t *s, size_t n, size_t i) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (tok_uc_bmp[s[i]] & (L | N | WS)) break;
            i++;
        } else {
            size_t l;
            if (cls_at(s, n, i, &l) & (L | N | WS)) break;
            i += l;
        }
    }
    return i;
}

/* A whitespace run from i (s[i] is whitespace) under \s+(?!\S)|\s+: all of it at the end
 * of the text; else all but its last character, or the one character when that is all. */
static inline size_t ws_tail(const uint8_t *s, size_t n, size_t i, size_t j) {
    size_t last = i;
    while (j < n) {
        size_t l;
        if (!(cls_at(s, n, j, &l) & WS)) break;
        last = j;
        j += l;
    }
    if (j == n) return n;
    return last > i ? last : j;
}

size_t tok_re_gpt2_end(const uint8_t *s, size_t n, size_t i) {
    uint8_t c = s[i];
    if (c == '\'' && i + 1 < n) {
        uint8_t d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    size_t l;
    uint8_t k = cls_at(s, n, i, &l);
    size_t j = i + l;
    if (c == ' ' && j < n) { /* the optional leading space of the next three */
        size_t l2;
        uint8_t k2 = cls_at(s, n, j, &l2);
        if (k2 & L) return run_of(s, n, j + l2, L);
        if (k2 & N) return run_of(s, n, j + l2, N);
        if (!(k2 & WS)) return run_other(s, n, j + l2);
    }
    if (k & L) return run_of(s, n, j, L);
    if (k & N) return run_of(s, n, j, N);
    if (!(k & WS)) return run_other(s, n, j);
    return ws_tail(s, n, i, j);
}

static inline int lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) after the apostrophe at p-1: the match end, or 0. Case
 * folding also maps U+017F (long s) to s. */
static size_t contraction_ci(const uint8_t *s, size_t n, size_t p) {
    int a = lower(s[p]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 1;
    if (s[p] == 0xC5 && p + 1 < n && s[p + 1] == 0xBF) return p + 2;
    if (p + 1 < n) {
        int b = lower(s[p + 1]);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 2;
    }
    return 0;
}

size_t tok_re_cl100k_end(const uint8_t *s, size_t n, size_t i) {
    uint8_t c = s[i];
    if (c == '\'' && i + 1 < n) {
        size_t e = contraction_ci(s, n, i + 1);
        if (e) return e;
    }
    size_t l;
    uint8_t k = cls_at(s, n, i, &l);
    size_t j = i + l;
    if (k & L) return run_of(s, n, j, L);
    if (!(k & N) && c != '\r' && c != '\n' && j < n) { /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        size_t l2;
        if (cls_at(s, n, j, &l2) & L) return run_of(s, n, j + l2, L);
    }
    if (k & N) { /* \p{N}{1,3} */
        for (int count = 1; count < 3 && j < n; count++) {
            size_t l3;
            if (!(cls_at(s, n, j, &l3) & N)) break;
            j += l3;
        }
        return j;
    }
    size_t p = SIZE_MAX; /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (c == ' ' && j < n) {
        size_t l2;
        if (!(cls_at(s, n, j, &l2) & (L | N | WS))) p = j + l2;
    }
    if (p == SIZE_MAX && !(k & WS)) p = j;
    if (p != SIZE_MAX) {
        p = run_other(s, n, p);
        while (p < n && (s[p] == '\r' || s[p] == '\n')) p++;
        return p;
    }
    /* whitespace: \s*[\r\n]+ ends after the run's last \r or \n; else \s+(?!\S)|\s+ */
    size_t last_nl = (c == '\r' || c == '\n') ? i : SIZE_MAX, e = j;
    while (e < n) {
        size_t l3;
        if (!(cls_at(s, n, e, &l3) & WS)) break;
        if (s[e] == '\r' || s[e] == '\n') last_nl = e;
        e += l3;
    }
    if (last_nl != SIZE_MAX) return last_nl + 1;
    return ws_tail(s, n, i, j);
}

#undef L
#undef N
#undef WS

/* ---- compile / match ------------------------------------------------------------------------ */

#ifdef MC_HAVE_PCRE2
/* PCRE2 brings its own Unicode tables (14.0 in 10.42) and its UCP \s also matches U+180E.
 * So \s, \p{L} and \p{N} (and \S, \P{L}, \P{N} outside brackets) are rewritten into
 * explicit classes from our Unicode 16.0 tables: the classes HF's Oniguruma matches. Other
 * properties (\p{Lu}, ...) stay PCRE2's. */
static void put_class_body(tok_buf *b, uint8_t bit) {
    char tmp[48];
    uint32_t start = 0, end = 0;
    bool open = false;
    for (uint32_t cp = 0; cp <= 0x110000; cp++) {
        bool in = cp < 0x110000 && (tok_uc_class(cp) & bit);
        if (in && !open) {
            start = cp;
            open = true;
        }
        if (in) end = cp;
        if (!in && open) {
            int n = start == end ? snprintf(tmp, sizeof tmp, "\\x{%x}", start)
                                 : snprintf(tmp, sizeof tmp, "\\x{%x}-\\x{%x}", start, end);
            tok_buf_put(b, tmp, (size_t)n);
            open = false;
        }
    }
}

/* The property an escape at p[i] ('\\') names: 's'/'L'/'N' with *neg, and its length; 0 if
 * none of ours. */
static int our_property(const char *p, size_t n, size_t i, bool *neg, size_t *len) {
    char d = p[i + 1];
    if (d == 's' || d == 'S') {
        *neg = d == 'S';
        *len = 2;
        return 's';
    }
    if (d != 'p' && d != 'P') return 0;
    *neg = d == 'P';
    if (i + 2 < n && (p[i + 2] == 'L' || p[i + 2] == 'N')) {
        *len = 3;
        return p[i + 2];
    }
    if (i + 4 < n && p[i + 2] == '{' && (p[i + 3] == 'L' || p[i + 3] == 'N') && p[i + 4] == '}') {
        *len = 5;
        return p[i + 3];
    }
    return 0;
}

static char *rewrite_classes(const char *p) {
    tok_buf b = {0}, body[3] = {{0}};
    bool in_class = false;
    size_t n = strlen(p);
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            bool neg;
            size_t len;
            int prop = our_property(p, n, i, &neg, &len);
            if (prop && !(neg && in_class)) {
                int k = prop == 's' ? 0 : prop == 'L' ? 1 : 2;
                if (!body[k].len) put_class_body(&body[k], k == 0 ? TOK_UC_WS : k == 1 ? TOK_UC_L : TOK_UC_N);
                if (!in_class) tok_buf_put(&b, neg ? "[^" : "[", neg ? 2 : 1);
                tok_buf_put(&b, body[k].data, body[k].len);
                if (!in_class) tok_buf_putc(&b, ']');
                i += len - 1;
                continue;
            }
            tok_buf_put(&b, p + i, 2);
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            tok_buf_putc(&b, c);
            if (i + 1 < n && p[i + 1] == '^') tok_buf_putc(&b, p[++i]);
            if (i + 1 < n && p[i + 1] == ']') tok_buf_putc(&b, p[++i]); /* a leading ] is literal */
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:posix:] */
            const char *end = strstr(p + i + 2, ":]");
            if (end) {
                size_t len = (size_t)(end + 2 - (p + i));
                tok_buf_put(&b, p + i, len);
                i += len - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        tok_buf_putc(&b, c);
    }
    tok_buf_putc(&b, 0);
    for (int k = 0; k < 3; k++) tok_buf_free(&body[k]);
    return b.data;
}
#endif

int tok_regex_compile(tok_regex *re, const char *pattern, bool use_hand, mc_err *err) {
    memset(re, 0, sizeof *re);
    if (use_hand && strcmp(pattern, tok_re_gpt2) == 0) {
        re->kind = TOK_RE_GPT2;
        return MC_OK;
    }
    if (use_hand && strcmp(pattern, tok_re_cl100k) == 0) {
        re->kind = TOK_RE_CL100K;
        return MC_OK;
    }
#ifdef MC_HAVE_PCRE2
    char *rewritten = rewrite_classes(pattern);
    int code_err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code_err, &off, NULL);
    free(rewritten);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code_err, msg, sizeof msg);
        return mc_err_set(err, "pre-tokenizer regex /%.200s/: %s", pattern, (const char *)msg);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets */
    re->kind = TOK_RE_PCRE2;
    re->code = code;
    return MC_OK;
#else
    return mc_err_set(err, "pre-tokenizer regex /%.200s/ needs PCRE2, which this build lacks (install libpcre2-dev "
                           "and rebuild)",
                      pattern);
#endif
}

void tok_regex_literal(tok_regex *re, const char *s, size_t n) {
    memset(re, 0, sizeof *re);
    re->kind = TOK_RE_LITERAL;
    re->literal = mc_xmalloc(n + 1);
    memcpy(re->literal, s, n);
    re->literal[n] = 0;
    re->literal_len = n;
}

void tok_regex_free(tok_regex *re) {
#ifdef MC_HAVE_PCRE2
    if (re->code) pcre2_code_free((pcre2_code *)re->code);
#endif
    free(re->literal);
    memset(re, 0, sizeof *re);
}

void tok_regex_scratch_init(tok_regex_scratch *rs, const tok_regex *re) {
    memset(rs, 0, sizeof *rs);
#ifdef MC_HAVE_PCRE2
    if (re->kind == TOK_RE_PCRE2) {
        rs->match_data = pcre2_match_data_create_from_pattern((pcre2_code *)re->code, NULL);
        rs->match_ctx = pcre2_match_context_create(NULL);
        rs->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        pcre2_jit_stack_assign((pcre2_match_context *)rs->match_ctx, NULL, rs->jit_stack);
    }
#else
    (void)re;
#endif
}

void tok_regex_scratch_free(tok_regex_scratch *rs) {
#ifdef MC_HAVE_PCRE2
    if (rs->match_data) pcre2_match_data_free((pcre2_match_data *)rs->match_data);
    if (rs->match_ctx) pcre2_match_context_free((pcre2_match_context *)rs->match_ctx);
    if (rs->jit_stack) pcre2_jit_stack_free((pcre2_jit_stack *)rs->jit_stack);
#endif
    memset(rs, 0, sizeof *rs);
}

int tok_regex_next(const tok_regex *re, tok_regex_scratch *rs, const uint8_t *s, size_t n, size_t from, size_t *ms,
                   size_t *me) {
    if (from >= n) return 0;
    switch (re->kind) {
    case TOK_RE_GPT2:
        *ms = from;
        *me = tok_re_gpt2_end(s, n, from);
        return 1;
    case TOK_RE_CL100K:
        *ms = from;
        *me = tok_re_cl100k_end(s, n, from);
        return 1;
    case TOK_RE_LITERAL: {
        if (re->literal_len == 0) return 0;
        const void *p = memmem(s + from, n - from, re->literal, re->literal_len);
        if (!p) return 0;
        *ms = (size_t)((const uint8_t *)p - s);
        *me = *ms + re->literal_len;
        return 1;
    }
    case TOK_RE_PCRE2: {
#ifdef MC_HAVE_PCRE2
        pcre2_match_data *md = (pcre2_match_data *)rs->match_data;
        while (from < n) {
            int rc = pcre2_match((pcre2_code *)re->code, s, n, from, 0, md, (pcre2_match_context *)rs->match_ctx);
            if (rc < 0) {
                MC_ASSERT(rc == PCRE2_ERROR_NOMATCH, "pcre2_match failed with %d", rc);
                return 0;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] > ov[0]) {
                *ms = ov[0];
                *me = ov[1];
                return 1;
            }
            uint32_t cp; /* empty match: resume one character later */
            from = ov[0] + tok_utf8_decode(s + ov[0], n - ov[0], &cp);
        }
#endif
        return 0;
    }
    default: return 0;
    }
}
