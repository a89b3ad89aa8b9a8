#include "base/error.h"

#include <string.h>

int mc_err_set(mc_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return MC_ERR;
}

int mc_err_prefix(mc_err *err, const char *fmt, ...) {
    if (!err) return MC_ERR;
    char tail[sizeof err->msg];
    memcpy(tail, err->msg, sizeof tail);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err->msg - 1) strncat(err->msg, tail, sizeof err->msg - 1 - (size_t)n);
    return MC_ERR;
}

void mc_die_usage(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("megatron-c: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(MC_EXIT_USAGE);
}

void mc_assert_fail(const char *expr, const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "megatron-c: internal error at %s:%d: assertion `%s` failed", file, line, expr);
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    abort();
}

void *mc_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mc_assert_fail("malloc", __FILE__, __LINE__, "out of host memory allocating %zu bytes", bytes);
    return p;
}

void *mc_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) mc_assert_fail("calloc", __FILE__, __LINE__, "out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *mc_xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) mc_assert_fail("realloc", __FILE__, __LINE__, "out of host memory allocating %zu bytes", bytes);
    return q;
}

char *mc_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = mc_xmalloc(n);
    memcpy(d, s, n);
    return d;
}
