#include "data/index_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- md5 (RFC 1321) ------------------------------------------------------------------ */

static const uint32_t k_md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const int k_md5_r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static void md5_block(uint32_t h[4], const unsigned char *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) % 16;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) % 16;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) % 16;
        }
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + k_md5_k[i] + m[g];
        b = b + (x << k_md5_r[i] | x >> (32 - k_md5_r[i]));
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

void mc_md5_hex(const void *data, size_t n, char out[33]) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    const unsigned char *p = data;
    size_t full = n / 64 * 64;
    for (size_t i = 0; i < full; i += 64) md5_block(h, p + i);
    unsigned char tail[128] = {0};
    size_t rest = n - full;
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    size_t tlen = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[tlen - 8 + i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < tlen; i += 64) md5_block(h, tail + i);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[32] = 0;
}

/* ---- .npy ------------------------------------------------------------------------------ */

static size_t descr_itemsize(const char *descr) {
    if (!strcmp(descr, "<i2") || !strcmp(descr, "<u2")) return 2;
    if (!strcmp(descr, "<i4") || !strcmp(descr, "<u4")) return 4;
    if (!strcmp(descr, "<i8") || !strcmp(descr, "<u8")) return 8;
    if (!strcmp(descr, "|i1") || !strcmp(descr, "|u1")) return 1;
    return 0;
}

int mc_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                 mc_err *err) {
    size_t itemsize = descr_itemsize(descr);
    MC_ASSERT(itemsize && (ndim == 1 || ndim == 2));
    /* numpy.lib.format: the dict's repr, spare room for the first axis to grow to 21
     * digits, then spaces and a newline up to a multiple of 64 bytes. */
    char header[256], shp[64];
    if (ndim == 1)
        snprintf(shp, sizeof shp, "(%lld,)", (long long)shape[0]);
    else
        snprintf(shp, sizeof shp, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shp);
    char first[32];
    int first_digits = snprintf(first, sizeof first, "%lld", (long long)shape[0]);
    for (int i = 0; i < 21 - first_digits; i++) header[len++] = ' ';
    int hlen = len + 1;
    int padlen = 64 - ((6 + 2 + 2 + hlen) % 64);
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int total = hlen + padlen;
    prefix[8] = (unsigned char)(total & 0xff);
    prefix[9] = (unsigned char)(total >> 8);
    char pad[80];
    memset(pad, ' ', sizeof pad);
    int64_t count = shape[0] * (ndim == 2 ? shape[1] : 1);

    mc_atomic_file af;
    MC_TRY(mc_atomic_file_open(&af, path, err));
    if (mc_atomic_file_write(&af, prefix, 10, err) || mc_atomic_file_write(&af, header, (size_t)len, err) ||
        mc_atomic_file_write(&af, pad, (size_t)padlen, err) || mc_atomic_file_write(&af, "\n", 1, err) ||
        mc_atomic_file_write(&af, data, (size_t)count * itemsize, err)) {
        mc_atomic_file_abort(&af);
        return MC_ERR;
    }
    return mc_atomic_file_commit(&af, err);
}

/* Finds 'key': in the header dict and returns a pointer after the colon and spaces. */
static const char *npy_field(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        p = strstr(h, pat);
    }
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

int mc_npy_read(const char *path, mc_npy *out, mc_err *err) {
    memset(out, 0, sizeof *out);
    char *buf;
    size_t n;
    MC_TRY(mc_read_file(path, &buf, &n, err));
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    size_t hstart, hlen;
    if (n < 10 || memcmp(buf, magic, 6) != 0) {
        free(buf);
        return mc_err_set(err, "%s: not a .npy file (bad magic)", path);
    }
    int major = (unsigned char)buf[6];
    if (major == 1) {
        hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
        hstart = 10;
    } else if ((major == 2 || major == 3) && n >= 12) {
        hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8 | (size_t)(unsigned char)buf[10] << 16 |
               (size_t)(unsigned char)buf[11] << 24;
        hstart = 12;
    } else {
        free(buf);
        return mc_err_set(err, "%s: unsupported .npy format version %d", path, major);
    }
    if (hstart + hlen > n) {
        free(buf);
        return mc_err_set(err, "%s: truncated .npy header", path);
    }
    char *h = mc_xmalloc(hlen + 1);
    memcpy(h, buf + hstart, hlen);
    h[hlen] = 0;
    const char *d = npy_field(h, "descr"), *fo = npy_field(h, "fortran_order"), *sh = npy_field(h, "shape");
    int ok = d && fo && sh && (*d == '\'' || *d == '"');
    if (ok) {
        size_t k = 0;
        for (d++; *d && *d != '\'' && *d != '"' && k < sizeof out->descr - 1; d++) out->descr[k++] = *d;
        out->descr[k] = 0;
        out->itemsize = descr_itemsize(out->descr);
        ok = out->itemsize != 0 && !strncmp(fo, "False", 5) && *sh == '(';
    }
    if (ok) {
        const char *p = sh + 1;
        while (*p && *p != ')') {
            while (*p == ' ' || *p == ',') p++;
            if (*p == ')') break;
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0 || out->ndim == 2) {
                ok = 0;
                break;
            }
            out->shape[out->ndim++] = v;
            p = end;
        }
        ok = ok && out->ndim >= 1;
    }
    free(h);
    if (!ok) {
        free(buf);
        memset(out, 0, sizeof *out);
        return mc_err_set(err, "%s: unsupported .npy header (expected a C-order little-endian integer array of 1 or 2 "
                               "dimensions)",
                          path);
    }
    int64_t count = out->shape[0] * (out->ndim == 2 ? out->shape[1] : 1);
    size_t bytes = (size_t)count * out->itemsize;
    if (n - hstart - hlen != bytes) {
        size_t have = n - hstart - hlen;
        free(buf);
        memset(out, 0, sizeof *out);
        return mc_err_set(err, "%s: %zu data bytes where the header promises %zu (truncated or corrupt file)", path,
                          have, bytes);
    }
    out->data = mc_xmalloc(bytes ? bytes : 1);
    memcpy(out->data, buf + hstart + hlen, bytes);
    free(buf);
    return MC_OK;
}

void mc_npy_free(mc_npy *a) {
    free(a->data);
    memset(a, 0, sizeof *a);
}

int64_t mc_npy_get(const mc_npy *a, int64_t i) {
    const unsigned char *p = (const unsigned char *)a->data + (size_t)i * a->itemsize;
    bool is_unsigned = a->descr[1] == 'u';
    switch (a->itemsize) {
    case 1: return is_unsigned ? (int64_t)*p : (int64_t)(int8_t)*p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return is_unsigned ? (int64_t)v : (int64_t)(int16_t)v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return is_unsigned ? (int64_t)v : (int64_t)(int32_t)v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* ---- JSON ------------------------------------------------------------------------------- */

void mc_strbuf_append(mc_strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->s = mc_xrealloc(b->s, cap);
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void mc_strbuf_printf(mc_strbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < (int)sizeof small) {
        mc_strbuf_append(b, small, (size_t)n);
        return;
    }
    char *big = mc_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    mc_strbuf_append(b, big, (size_t)n);
    free(big);
}

void mc_strbuf_free(mc_strbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void mc_py_float_repr(double x, char out[32]) {
    if (isnan(x)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (x == 0) {
        strcpy(out, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    /* The shortest %.Ne that reads back as x: its digits and decimal exponent. */
    char buf[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    char digits[24];
    int nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.Ne may pad: "1.0e+00" -> "1" */
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) *o++ = digits[i];
            else
                *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -e - 1; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

void mc_json_string(mc_strbuf *b, const char *s) {
    mc_strbuf_append(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        uint32_t cp;
        int len = 1;
        if (*u < 0x80) {
            cp = *u;
        } else if ((*u & 0xe0) == 0xc0 && (u[1] & 0xc0) == 0x80) {
            cp = (uint32_t)(*u & 0x1f) << 6 | (u[1] & 0x3f);
            len = 2;
        } else if ((*u & 0xf0) == 0xe0 && (u[1] & 0xc0) == 0x80 && (u[2] & 0xc0) == 0x80) {
            cp = (uint32_t)(*u & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
            len = 3;
        } else if ((*u & 0xf8) == 0xf0 && (u[1] & 0xc0) == 0x80 && (u[2] & 0xc0) == 0x80 && (u[3] & 0xc0) == 0x80) {
            cp = (uint32_t)(*u & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 | (uint32_t)(u[2] & 0x3f) << 6 |
                 (u[3] & 0x3f);
            len = 4;
        } else {
            cp = 0xfffd; /* not UTF-8 (a path in some other encoding) */
        }
        u += len;
        char esc[16];
        if (cp == '"') {
            mc_strbuf_append(b, "\\\"", 2);
        } else if (cp == '\\') {
            mc_strbuf_append(b, "\\\\", 2);
        } else if (cp == '\n') {
            mc_strbuf_append(b, "\\n", 2);
        } else if (cp == '\r') {
            mc_strbuf_append(b, "\\r", 2);
        } else if (cp == '\t') {
            mc_strbuf_append(b, "\\t", 2);
        } else if (cp == '\b') {
            mc_strbuf_append(b, "\\b", 2);
        } else if (cp == '\f') {
            mc_strbuf_append(b, "\\f", 2);
        } else if (cp >= 0x20 && cp < 0x7f) {
            char c = (char)cp;
            mc_strbuf_append(b, &c, 1);
        } else if (cp < 0x10000) {
            snprintf(esc, sizeof esc, "\\u%04x", cp);
            mc_strbuf_append(b, esc, 6);
        } else {
            uint32_t v = cp - 0x10000;
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            mc_strbuf_append(b, esc, 12);
        }
    }
    mc_strbuf_append(b, "\"", 1);
}

void mc_jw_init(mc_json_writer *w, mc_strbuf *b) {
    memset(w, 0, sizeof *w);
    w->b = b;
}

static void jw_newline(mc_json_writer *w) {
    mc_strbuf_append(w->b, "\n", 1);
    for (int i = 0; i < w->depth; i++) mc_strbuf_append(w->b, "    ", 4);
}

static void jw_begin(mc_json_writer *w, const char *open) {
    mc_strbuf_append(w->b, open, 1);
    MC_ASSERT(w->depth + 1 < (int)(sizeof w->first / sizeof w->first[0]));
    w->first[++w->depth] = true;
}

static void jw_end(mc_json_writer *w, const char *close) {
    bool empty = w->first[w->depth];
    w->depth--;
    if (!empty) jw_newline(w);
    mc_strbuf_append(w->b, close, 1);
}

void mc_jw_begin_object(mc_json_writer *w) { jw_begin(w, "{"); }
void mc_jw_end_object(mc_json_writer *w) { jw_end(w, "}"); }
void mc_jw_begin_list(mc_json_writer *w) { jw_begin(w, "["); }
void mc_jw_end_list(mc_json_writer *w) { jw_end(w, "]"); }

void mc_jw_elem(mc_json_writer *w) {
    if (w->depth == 0) return;
    if (!w->first[w->depth]) mc_strbuf_append(w->b, ",", 1);
    w->first[w->depth] = false;
    jw_newline(w);
}

void mc_jw_key(mc_json_writer *w, const char *key) {
    mc_jw_elem(w);
    mc_json_string(w->b, key);
    mc_strbuf_append(w->b, ": ", 2);
}

void mc_jw_str(mc_json_writer *w, const char *s) {
    if (s)
        mc_json_string(w->b, s);
    else
        mc_jw_null(w);
}

void mc_jw_int(mc_json_writer *w, int64_t v) { mc_strbuf_printf(w->b, "%lld", (long long)v); }

void mc_jw_float(mc_json_writer *w, double v) {
    char r[32];
    mc_py_float_repr(v, r);
    mc_strbuf_append(w->b, r, strlen(r));
}

void mc_jw_null(mc_json_writer *w) { mc_strbuf_append(w->b, "null", 4); }

/* ---- dataset descriptions --------------------------------------------------------- */

const char *const mc_split_names[3] = {"train", "valid", "test"};

static void write_tokenizer(mc_json_writer *w, const mc_tokenizer_identity *t) {
    if (!t) {
        mc_jw_null(w);
        return;
    }
    mc_jw_begin_object(w);
    mc_jw_key(w, "class");
    mc_jw_str(w, t->cls);
    mc_jw_key(w, "tokenizer_path");
    mc_jw_begin_list(w);
    for (int i = 0; i < t->npaths; i++) {
        mc_jw_elem(w);
        mc_jw_str(w, t->paths[i]);
    }
    mc_jw_end_list(w);
    for (int i = 0; i < t->noptions; i++) {
        mc_jw_key(w, t->option_keys[i]);
        mc_jw_str(w, t->option_values[i]);
    }
    mc_jw_end_object(w);
}

void mc_gpt_identity_write(mc_json_writer *w, const mc_gpt_identity *id) {
    mc_jw_begin_object(w);
    mc_jw_key(w, "class");
    mc_jw_str(w, "GPTDataset");
    mc_jw_key(w, "dataset_path");
    mc_jw_str(w, id->dataset_path);
    mc_jw_key(w, "num_samples");
    if (id->num_samples < 0)
        mc_jw_null(w);
    else
        mc_jw_int(w, id->num_samples);
    mc_jw_key(w, "index_split");
    mc_jw_str(w, mc_split_names[id->index_split]);
    mc_jw_key(w, "random_seed");
    mc_jw_int(w, (int64_t)id->random_seed);
    mc_jw_key(w, "sequence_length");
    mc_jw_int(w, id->sequence_length);
    mc_jw_key(w, "split");
    mc_jw_str(w, id->split);
    mc_jw_key(w, "split_matrix");
    if (!id->split_matrix) {
        mc_jw_null(w);
    } else {
        /* convert_split_vector_to_split_matrix: bookends of the running sum that starts at
         * the integer 0 (so the first bound prints as 0, the others as floats). */
        mc_jw_begin_list(w);
        for (int k = 0; k < 3; k++) {
            mc_jw_elem(w);
            if (!id->split_matrix->present[k]) {
                mc_jw_null(w);
                continue;
            }
            mc_jw_begin_list(w);
            mc_jw_elem(w);
            if (k == 0)
                mc_jw_int(w, 0);
            else
                mc_jw_float(w, id->split_matrix->lo[k]);
            mc_jw_elem(w);
            mc_jw_float(w, id->split_matrix->hi[k]);
            mc_jw_end_list(w);
        }
        mc_jw_end_list(w);
    }
    mc_jw_key(w, "tokenizer");
    write_tokenizer(w, id->tokenizer);
    mc_jw_end_object(w);
}

char *mc_gpt_description(const mc_gpt_identity *id) {
    mc_strbuf b = {0};
    mc_json_writer w;
    mc_jw_init(&w, &b);
    mc_gpt_identity_write(&w, id);
    return b.s;
}

char *mc_blended_description(const mc_gpt_identity *datasets, int n, int split, const double *weights,
                             const int64_t *int_weights, int64_t size) {
    mc_strbuf b = {0};
    mc_json_writer w;
    mc_jw_init(&w, &b);
    mc_jw_begin_object(&w);
    mc_jw_key(&w, "class");
    mc_jw_str(&w, "BlendedDataset");
    mc_jw_key(&w, "datasets");
    mc_jw_begin_list(&w);
    for (int i = 0; i < n; i++) {
        mc_jw_elem(&w);
        mc_gpt_identity_write(&w, &datasets[i]);
    }
    mc_jw_end_list(&w);
    mc_jw_key(&w, "split");
    mc_jw_str(&w, mc_split_names[split]);
    mc_jw_key(&w, "weights");
    mc_jw_begin_list(&w);
    for (int i = 0; i < n; i++) {
        mc_jw_elem(&w);
        if (size >= 0)
            mc_jw_float(&w, weights[i]);
        else
            mc_jw_int(&w, int_weights[i]);
    }
    mc_jw_end_list(&w);
    mc_jw_key(&w, "size");
    if (size >= 0)
        mc_jw_int(&w, size);
    else
        mc_jw_null(&w);
    mc_jw_end_object(&w);
    return b.s;
}

/* ---- cache files --------------------------------------------------------------------- */

char *mc_cache_path(const char *dir, const char *md5, const char *cls, const char *split, const char *affix) {
    mc_strbuf b = {0};
    mc_strbuf_printf(&b, "%s/%s-%s-%s-%s", dir, md5, cls, split, affix);
    return b.s;
}

int mc_cache_probe(const char *dir, const char *md5, const char *cls, const char *split, const char *description,
                   const char *const *affixes, int naffixes, bool *hit, mc_err *err) {
    *hit = false;
    char *desc_path = mc_cache_path(dir, md5, cls, split, "description.txt");
    struct stat st;
    bool have_desc = stat(desc_path, &st) == 0 && S_ISREG(st.st_mode);
    bool all = have_desc;
    for (int i = 0; i < naffixes && all; i++) {
        char *p = mc_cache_path(dir, md5, cls, split, affixes[i]);
        all = stat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
    }
    if (have_desc) {
        char *text;
        size_t n;
        if (mc_read_file(desc_path, &text, &n, err) != MC_OK) {
            free(desc_path);
            return MC_ERR;
        }
        bool same = n == strlen(description) && memcmp(text, description, n) == 0;
        free(text);
        if (!same) {
            mc_err_set(err,
                       "%s: the cached description does not match this dataset's (an md5 collision or an edited "
                       "file); delete the %s-%s-%s-* files to rebuild them",
                       desc_path, md5, cls, split);
            free(desc_path);
            return MC_ERR;
        }
    }
    free(desc_path);
    *hit = all;
    return MC_OK;
}
