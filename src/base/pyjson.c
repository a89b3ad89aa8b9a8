/* pyjson.c: JSON text exactly as Python's json.dumps(indent=4, ensure_ascii=True) writes it. */
#include "base/pyjson.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

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
