#include "data/jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<zlib.h>)
#include <zlib.h>
#define MC_JSONL_ZLIB 1
#endif
#endif

/* ---- reader ------------------------------------------------------------------------------ */

struct mc_jsonl_reader {
    char *path;
    int fd;
#ifdef MC_JSONL_ZLIB
    gzFile gz;
#endif
    bool is_gzip, eof;
    char *buf;
    size_t cap, start, end; /* unread bytes are buf[start, end) */
    int64_t lineno;
    int64_t size;
};

bool mc_jsonl_have_gzip(void) {
#ifdef MC_JSONL_ZLIB
    return true;
#else
    return false;
#endif
}

int mc_jsonl_open(mc_jsonl_reader **out, const char *path, mc_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mc_err_set(err, "--input %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        close(fd);
        return mc_err_set(err, "--input %s: not a file", path);
    }
    unsigned char magic[2] = {0, 0};
    ssize_t got = pread(fd, magic, 2, 0);
    bool gz = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    mc_jsonl_reader *r = mc_xcalloc(1, sizeof *r);
    r->path = mc_xstrdup(path);
    r->fd = fd;
    r->is_gzip = gz;
    r->size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
    r->cap = 4 << 20;
    r->buf = mc_xmalloc(r->cap);
    if (gz) {
#ifdef MC_JSONL_ZLIB
        r->gz = gzdopen(dup(fd), "rb");
        if (!r->gz) {
            mc_jsonl_close(r);
            return mc_err_set(err, "--input %s: cannot open the gzip stream", path);
        }
        gzbuffer(r->gz, 1 << 20);
#else
        mc_jsonl_close(r);
        return mc_err_set(err, "--input %s: a gzip file, but this build has no zlib", path);
#endif
    }
    *out = r;
    return MC_OK;
}

void mc_jsonl_close(mc_jsonl_reader *r) {
    if (!r) return;
#ifdef MC_JSONL_ZLIB
    if (r->gz) gzclose(r->gz);
#endif
    close(r->fd);
    free(r->buf);
    free(r->path);
    free(r);
}

bool mc_jsonl_is_gzip(const mc_jsonl_reader *r) { return r->is_gzip; }
int64_t mc_jsonl_size(const mc_jsonl_reader *r) { return r->size; }

int64_t mc_jsonl_position(const mc_jsonl_reader *r) {
#ifdef MC_JSONL_ZLIB
    if (r->gz) return (int64_t)gzoffset(r->gz);
#endif
    return (int64_t)lseek(r->fd, 0, SEEK_CUR);
}

/* Reads more input after the unread bytes; returns bytes added, 0 at EOF. */
static int fill(mc_jsonl_reader *r, mc_err *err) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end == r->cap) {
        r->cap *= 2;
        r->buf = mc_xrealloc(r->buf, r->cap);
    }
    size_t want = r->cap - r->end;
    ssize_t got;
#ifdef MC_JSONL_ZLIB
    if (r->gz) {
        if (want > (1u << 30)) want = 1u << 30;
        got = gzread(r->gz, r->buf + r->end, (unsigned)want);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(r->gz, &zerr);
            return mc_err_set(err, "--input %s: gzip error: %s", r->path, msg);
        }
    } else
#endif
    {
        do got = read(r->fd, r->buf + r->end, want);
        while (got < 0 && errno == EINTR);
        if (got < 0) return mc_err_set(err, "--input %s: read error: %s", r->path, strerror(errno));
    }
    r->end += (size_t)got;
    return (int)(got > 0);
}

int mc_jsonl_next(mc_jsonl_reader *r, const char **line, size_t *len, int64_t *lineno, mc_err *err) {
    size_t scanned = r->start;
    for (;;) {
        char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
        if (nl) {
            *line = r->buf + r->start;
            *len = (size_t)(nl - (r->buf + r->start));
            r->start = (size_t)(nl - r->buf) + 1;
            *lineno = ++r->lineno;
            return 1;
        }
        if (r->eof) {
            if (r->start == r->end) return 0;
            *line = r->buf + r->start; /* last line without '\n' */
            *len = r->end - r->start;
            r->start = r->end;
            *lineno = ++r->lineno;
            return 1;
        }
        size_t seen = r->end - r->start;
        int got = fill(r, err);
        if (got < 0) return MC_ERR;
        if (got == 0) r->eof = true;
        scanned = r->start + seen;
    }
}

/* ---- parser ------------------------------------------------------------------------------ */

void mc_jsonl_scratch_free(mc_jsonl_scratch *s) {
    free(s->text);
    free(s->part_off);
    free(s->part_len);
    free(s->key);
    memset(s, 0, sizeof *s);
}

typedef struct parser {
    const unsigned char *s;
    size_t n, i;
    mc_jsonl_scratch *sc;
    mc_err *err;
    int depth;
} parser;

enum { MAX_DEPTH = 1000 }; /* Python's json recursion limit is of this order */

static int fail(parser *p, const char *what) {
    return mc_err_set(p->err, "invalid JSON at byte %zu: %s", p->i, what);
}

static void skip_ws(parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

typedef struct out_buf {
    char **data;
    size_t *len, *cap;
} out_buf;

static void out_put(out_buf *o, const void *src, size_t n) {
    if (*o->len + n + 1 > *o->cap) {
        size_t cap = *o->cap ? *o->cap : 4096;
        while (cap < *o->len + n + 1) cap *= 2;
        *o->data = mc_xrealloc(*o->data, cap);
        *o->cap = cap;
    }
    memcpy(*o->data + *o->len, src, n);
    *o->len += n;
}

static void put_utf8(out_buf *o, uint32_t cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    out_put(o, b, n);
}

/* Length of the valid UTF-8 sequence at s[0..n) (n >= 1, s[0] >= 0x80), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c >= 0xc2 && c <= 0xdf) return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
        if (c == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
        if (c == 0xed && s[1] >= 0xa0) return 0; /* UTF-16 surrogate */
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) return 0;
        if (c == 0xf0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xf4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static int hex4(const unsigned char *s, uint32_t *v) {
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = s[k];
        x <<= 4;
        if (c >= '0' && c <= '9')
            x |= c - '0';
        else if (c >= 'a' && c <= 'f')
            x |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            x |= c - 'A' + 10;
        else
            return 0;
    }
    *v = x;
    return 1;
}

/* Parses a string at p->i (on the opening quote); appends the decoded text to o (if any).
 * A lone surrogate escape is an error only in text that will be tokenized (`text`);
 * elsewhere Python's json accepts it, and so do we (a key holding one is kept as the
 * replacement character, which no requested key matches). */
static int parse_string_ex(parser *p, out_buf *o, bool text) {
    p->i++; /* opening quote */
    for (;;) {
        /* The run of plain bytes. */
        size_t run = p->i;
        while (run < p->n && p->s[run] >= 0x20 && p->s[run] < 0x80 && p->s[run] != '"' && p->s[run] != '\\') run++;
        if (o && run > p->i) out_put(o, p->s + p->i, run - p->i);
        p->i = run;
        if (p->i >= p->n) return fail(p, "unterminated string");
        unsigned c = p->s[p->i];
        if (c == '"') {
            p->i++;
            return MC_OK;
        }
        if (c < 0x20) return fail(p, "invalid control character in a string (escape it)");
        if (c >= 0x80) {
            size_t k = utf8_seq(p->s + p->i, p->n - p->i);
            if (!k) return mc_err_set(p->err, "invalid UTF-8 at byte %zu", p->i);
            if (o) out_put(o, p->s + p->i, k);
            p->i += k;
            continue;
        }
        /* Escape. */
        if (p->i + 1 >= p->n) return fail(p, "unterminated string");
        unsigned e = p->s[p->i + 1];
        static const char simple_from[] = "\"\\/bfnrt", simple_to[] = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(simple_from, (int)e) : NULL;
        if (hit) {
            if (o) out_put(o, &simple_to[hit - simple_from], 1);
            p->i += 2;
            continue;
        }
        if (e != 'u') return fail(p, "invalid \\escape");
        uint32_t cp;
        if (p->i + 6 > p->n || !hex4(p->s + p->i + 2, &cp)) return fail(p, "invalid \\uXXXX escape");
        p->i += 6;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            uint32_t lo;
            if (p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' && hex4(p->s + p->i + 2, &lo) &&
                lo >= 0xdc00 && lo <= 0xdfff) {
                p->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (text) {
                return mc_err_set(p->err,
                                  "lone surrogate escape \\u%04x at byte %zu: the text is not valid Unicode and "
                                  "cannot be tokenized",
                                  cp, p->i - 6);
            } else {
                cp = 0xfffd;
            }
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            if (text)
                return mc_err_set(p->err,
                                  "lone surrogate escape \\u%04x at byte %zu: the text is not valid Unicode and cannot "
                                  "be tokenized",
                                  cp, p->i - 6);
            cp = 0xfffd;
        }
        if (o) put_utf8(o, cp);
    }
}

static int parse_string(parser *p, out_buf *o) { return parse_string_ex(p, o, o != NULL); }

static bool match(parser *p, const char *lit) {
    size_t n = strlen(lit);
    if (p->i + n <= p->n && memcmp(p->s + p->i, lit, n) == 0) {
        p->i += n;
        return true;
    }
    return false;
}

static int parse_number(parser *p) {
    size_t i = p->i;
    if (i < p->n && p->s[i] == '-') i++;
    if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') return fail(p, "expecting a value");
    if (p->s[i] == '0')
        i++;
    else
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    if (i + 1 < p->n && p->s[i] == '.' && p->s[i + 1] >= '0' && p->s[i + 1] <= '9') {
        i++;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < p->n && (p->s[j] == '+' || p->s[j] == '-')) j++;
        if (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') {
            while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++;
            i = j;
        }
    }
    p->i = i;
    return MC_OK;
}

static int parse_value(parser *p, mc_jv *v);

static void add_part(mc_jsonl_scratch *sc, int64_t off, int64_t len) {
    if (sc->nparts == sc->parts_cap) {
        sc->parts_cap = sc->parts_cap ? 2 * sc->parts_cap : 64;
        sc->part_off = mc_xrealloc(sc->part_off, (size_t)sc->parts_cap * sizeof *sc->part_off);
        sc->part_len = mc_xrealloc(sc->part_len, (size_t)sc->parts_cap * sizeof *sc->part_len);
    }
    sc->part_off[sc->nparts] = off;
    sc->part_len[sc->nparts] = len;
    sc->nparts++;
}

static int parse_array(parser *p, mc_jv *v) {
    p->i++; /* '[' */
    if (++p->depth > MAX_DEPTH) return fail(p, "nested too deeply");
    if (v) {
        v->kind = MC_JV_LIST;
        v->nparts = 0;
        v->first_part = p->sc->nparts;
    }
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        p->depth--;
        return MC_OK;
    }
    for (;;) {
        skip_ws(p);
        if (v && v->kind == MC_JV_LIST && p->i < p->n && p->s[p->i] == '"') {
            /* A string element of a captured list: decode it as a part. */
            out_buf o = {&p->sc->text, &p->sc->len, &p->sc->cap};
            int64_t off = (int64_t)p->sc->len;
            MC_TRY(parse_string(p, &o));
            add_part(p->sc, off, (int64_t)p->sc->len - off);
            v->nparts++;
        } else {
            if (v && v->kind == MC_JV_LIST) {
                v->kind = MC_JV_OTHER;
                v->other_type = "list with a non-string element";
            }
            MC_TRY(parse_value(p, NULL));
        }
        skip_ws(p);
        if (p->i >= p->n) return fail(p, "unterminated list");
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            p->depth--;
            return MC_OK;
        }
        return fail(p, "expecting ',' or ']'");
    }
}

/* Parses an object; at the top level (keys != NULL) captures the requested keys. */
static int parse_object(parser *p, int nkeys, const char *const *keys, mc_jv *vals) {
    p->i++; /* '{' */
    if (++p->depth > MAX_DEPTH) return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        p->depth--;
        return MC_OK;
    }
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expecting a property name in double quotes");
        mc_jsonl_scratch *sc = p->sc;
        size_t key_len = 0;
        out_buf ko = {&sc->key, &key_len, &sc->key_cap};
        MC_TRY(parse_string_ex(p, keys ? &ko : NULL, false));
        int which = -1;
        if (keys)
            for (int k = 0; k < nkeys; k++)
                if (strlen(keys[k]) == key_len && memcmp(keys[k], sc->key, key_len) == 0) {
                    which = k;
                    break;
                }
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') return fail(p, "expecting ':' after a property name");
        p->i++;
        skip_ws(p);
        if (which >= 0) {
            mc_jv *v = &vals[which];
            memset(v, 0, sizeof *v); /* a repeated key: the last one wins, as in Python */
            if (p->i < p->n && p->s[p->i] == '"') {
                out_buf o = {&sc->text, &sc->len, &sc->cap};
                int64_t off = (int64_t)sc->len;
                MC_TRY(parse_string(p, &o));
                v->kind = MC_JV_STRING;
                v->first_part = sc->nparts;
                v->nparts = 1;
                add_part(sc, off, (int64_t)sc->len - off);
            } else if (p->i < p->n && p->s[p->i] == '[') {
                MC_TRY(parse_array(p, v));
            } else {
                MC_TRY(parse_value(p, v));
            }
        } else {
            MC_TRY(parse_value(p, NULL));
        }
        skip_ws(p);
        if (p->i >= p->n) return fail(p, "unterminated object");
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] == '}') {
            p->i++;
            p->depth--;
            return MC_OK;
        }
        return fail(p, "expecting ',' or '}'");
    }
}

/* Any value; v (if not NULL) records its type as MC_JV_OTHER. */
static int parse_value(parser *p, mc_jv *v) {
    skip_ws(p);
    if (p->i >= p->n) return fail(p, "expecting a value");
    const char *type = NULL;
    switch (p->s[p->i]) {
    case '"':
        MC_TRY(parse_string(p, NULL));
        type = "string";
        break;
    case '{':
        MC_TRY(parse_object(p, 0, NULL, NULL));
        type = "object";
        break;
    case '[':
        MC_TRY(parse_array(p, NULL));
        type = "list";
        break;
    case 't':
        if (!match(p, "true")) return fail(p, "expecting a value");
        type = "boolean";
        break;
    case 'f':
        if (!match(p, "false")) return fail(p, "expecting a value");
        type = "boolean";
        break;
    case 'n':
        if (!match(p, "null")) return fail(p, "expecting a value");
        type = "null";
        break;
    case 'N':
        if (!match(p, "NaN")) return fail(p, "expecting a value");
        type = "number";
        break;
    case 'I':
        if (!match(p, "Infinity")) return fail(p, "expecting a value");
        type = "number";
        break;
    default:
        if (!match(p, "-Infinity")) MC_TRY(parse_number(p));
        type = "number";
        break;
    }
    if (v) {
        v->kind = MC_JV_OTHER;
        v->other_type = type;
    }
    return MC_OK;
}

int mc_jsonl_parse(const char *line, size_t len, int nkeys, const char *const *keys, mc_jsonl_scratch *s,
                   mc_jv *vals, mc_err *err) {
    parser p = {.s = (const unsigned char *)line, .n = len, .sc = s, .err = err};
    if (!s->text) { /* so that the part of an empty string ("text": "") is text + 0, not NULL + 0 */
        s->cap = 4096;
        s->text = mc_xmalloc(s->cap);
    }
    s->len = 0;
    s->nparts = 0;
    for (int k = 0; k < nkeys; k++) memset(&vals[k], 0, sizeof vals[k]);
    if (len >= 3 && (unsigned char)line[0] == 0xef && (unsigned char)line[1] == 0xbb && (unsigned char)line[2] == 0xbf)
        return mc_err_set(err, "the line starts with a UTF-8 byte order mark (Python's json.loads rejects it; "
                               "strip it)");
    skip_ws(&p);
    if (p.i >= p.n) return mc_err_set(err, "empty line (expecting a JSON object)");
    if (p.s[p.i] != '{') {
        mc_jv v;
        MC_TRY(parse_value(&p, &v));
        skip_ws(&p);
        if (p.i < p.n) return fail(&p, "extra data after the JSON value");
        return mc_err_set(err, "the line is a JSON %s, not an object with the keys to read", v.other_type);
    }
    MC_TRY(parse_object(&p, nkeys, keys, vals));
    skip_ws(&p);
    if (p.i < p.n) return fail(&p, "extra data after the JSON object");
    return MC_OK;
}
