/* npy.c: numpy's .npy format (numpy.lib.format), the subset the index caches use. */
#include "data/npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

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

/* One dimension of the shape tuple at *p: a decimal integer in [0, INT64_MAX]. */
static bool npy_parse_dim(const char **p, int64_t *dim) {
    if (**p < '0' || **p > '9') return false;
    errno = 0;
    char *end;
    long long v = strtoll(*p, &end, 10);
    if (errno == ERANGE) return false;
    *p = end;
    *dim = v;
    return true;
}

int mc_npy_parse(const void *data, size_t n, const char *path, mc_npy *out, mc_err *err) {
    memset(out, 0, sizeof *out);
    const unsigned char *buf = data;
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    size_t hstart, hlen;
    if (n < 10 || memcmp(buf, magic, 6) != 0) return mc_err_set(err, "%s: not a .npy file (bad magic)", path);
    int major = buf[6];
    if (major == 1) {
        hlen = buf[8] | (size_t)buf[9] << 8;
        hstart = 10;
    } else if ((major == 2 || major == 3) && n >= 12) {
        hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        hstart = 12;
    } else {
        return mc_err_set(err, "%s: unsupported .npy format version %d", path, major);
    }
    if (hlen > n - hstart) return mc_err_set(err, "%s: truncated .npy header", path);
    char *h = mc_xmalloc(hlen + 1);
    memcpy(h, buf + hstart, hlen);
    h[hlen] = 0;
    const char *d = npy_field(h, "descr"), *fo = npy_field(h, "fortran_order"), *sh = npy_field(h, "shape");
    bool ok = d && fo && sh && (*d == '\'' || *d == '"');
    if (ok) {
        size_t k = 0;
        for (d++; *d && *d != '\'' && *d != '"' && k < sizeof out->descr - 1; d++) out->descr[k++] = *d;
        out->descr[k] = 0;
        out->itemsize = descr_itemsize(out->descr);
        ok = out->itemsize != 0 && !strncmp(fo, "False", 5) && *sh == '(';
    }
    bool too_large = false;
    if (ok) {
        const char *p = sh + 1;
        while (*p && *p != ')') {
            while (*p == ' ' || *p == ',') p++;
            if (*p == ')') break;
            if (out->ndim == 2 || !npy_parse_dim(&p, &out->shape[out->ndim])) {
                ok = false;
                break;
            }
            out->ndim++;
        }
        ok = ok && out->ndim >= 1;
    }
    free(h);
    /* The byte count must fit in size_t without wrapping: a shape such as (2^62 + 1, 4)
     * would otherwise wrap to a small count that a short data section matches. */
    size_t bytes = out->itemsize;
    for (int i = 0; ok && i < out->ndim; i++) {
        if (out->shape[i] != 0 && bytes > SIZE_MAX / (size_t)out->shape[i]) {
            too_large = true;
            break;
        }
        bytes *= (size_t)out->shape[i];
    }
    if (!ok || too_large) {
        memset(out, 0, sizeof *out);
        if (too_large) return mc_err_set(err, "%s: the .npy shape's size overflows (corrupt header)", path);
        return mc_err_set(err, "%s: unsupported .npy header (expected a C-order little-endian integer array of 1 or 2 "
                               "dimensions)",
                          path);
    }
    size_t have = n - hstart - hlen;
    if (have != bytes) {
        memset(out, 0, sizeof *out);
        return mc_err_set(err, "%s: %zu data bytes where the header promises %zu (truncated or corrupt file)", path,
                          have, bytes);
    }
    out->data = mc_xmalloc(bytes ? bytes : 1);
    if (bytes) memcpy(out->data, buf + hstart + hlen, bytes);
    return MC_OK;
}

int mc_npy_read(const char *path, mc_npy *out, mc_err *err) {
    memset(out, 0, sizeof *out);
    char *buf;
    size_t n;
    MC_TRY(mc_read_file(path, &buf, &n, err));
    int rc = mc_npy_parse(buf, n, path, out, err);
    free(buf);
    return rc;
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
