/* fuzz_util.h: what the libFuzzer harnesses (tests/fuzz/fuzz_*.c) share: a private
 * temporary directory for parsers that read files, removed at exit, and the text split of
 * one input into several files. Each harness defines LLVMFuzzerTestOneInput; it is linked
 * with libFuzzer by `make fuzz` and with replay_main.c for the ctest that replays the
 * corpus and every past finding. */
#ifndef MC_TESTS_FUZZ_UTIL_H
#define MC_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir_[64];

static inline void fz_cleanup_(void) {
    mc_err err;
    if (fz_dir_[0]) mc_remove_tree(fz_dir_, &err);
}

/* The harness's directory (created on first use). */
static inline const char *fz_dir(void) {
    if (!fz_dir_[0]) {
        snprintf(fz_dir_, sizeof fz_dir_, "/tmp/mc_fuzz_XXXXXX");
        if (!mkdtemp(fz_dir_)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fz_cleanup_);
    }
    return fz_dir_;
}

/* dir/name in a static buffer (one of four, so that a few may be held at once). */
static inline const char *fz_path(const char *name) {
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", fz_dir(), name);
    return b;
}

static inline void fz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Splits data at the first `sep` byte: [0, *first_len) and the rest after it (all of the
 * input is the first part when there is no separator). */
static inline void fz_split(const uint8_t *data, size_t size, uint8_t sep, size_t *first_len, const uint8_t **rest,
                     size_t *rest_len) {
    const uint8_t *at = memchr(data, sep, size);
    *first_len = at ? (size_t)(at - data) : size;
    *rest = at ? at + 1 : data + size;
    *rest_len = at ? size - *first_len - 1 : 0;
}

#endif
