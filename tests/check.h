/* check.h: the in-tree test helper. A test file defines test functions, lists them in
 * main() with RUN(fn), and ends with `return check_summary();`, which prints
 * "N passed, N failed" and returns non-zero on any failure, also one outside every test
 * (a failed baseline or setup in main counts as a failed test). A whole test binary that
 * cannot run here calls check_skip("why"), which exits with 77 (ctest: skipped).
 *
 * A binary that mixes CPU cases and GPU cases lists the GPU ones with RUN_GPU(fn) and
 * calls check_init(argc, argv, has_gpu) first: run plainly it runs the RUN cases, run with
 * --gpu it runs the RUN_GPU cases alone, and skips (77) without a GPU. CMake registers such
 * a binary twice (NAME and NAME_cuda), so that ctest shows the GPU half as skipped rather
 * than as passed. */
#ifndef MC_TESTS_CHECK_H
#define MC_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures_ = 0, check_tests_passed_ = 0, check_tests_failed_ = 0;
static int check_failures_in_tests_ = 0; /* of check_failures_, those inside a RUN */
static int check_gpu_mode_ = 0, check_has_gpu_ = 0;
static const char *check_current_ = "";

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            check_failures_++;                                                                \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__, check_current_, #cond); \
            fprintf(stderr, "" __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* |a - b| <= tol * max(|a|, |b|), and neither is NaN. */
#define CHECK_REL(a, b, tol, ...)                                                                  \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        double r_ = fabs(a_ - b_) / fmax(fmax(fabs(a_), fabs(b_)), 1e-30);                         \
        if (!(r_ <= (tol)) || isnan(a_) || isnan(b_)) {                                           \
            check_failures_++;                                                                     \
            fprintf(stderr, "  FAIL %s:%d [%s]: %.10g vs %.10g (rel %.3g > %.3g) ", __FILE__, __LINE__, \
                    check_current_, a_, b_, r_, (double)(tol));                                    \
            fprintf(stderr, "" __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Relative L2 error ||x - y|| / ||y|| of two float arrays. */
static inline double check_rel_l2(const float *x, const float *y, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)x[i] - (double)y[i];
        num += d * d;
        den += (double)y[i] * (double)y[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

#define CHECK_RUN_(fn)                                                 \
    do {                                                               \
        int before_ = check_failures_;                                 \
        check_current_ = #fn;                                          \
        fn();                                                          \
        check_current_ = "";                                           \
        check_failures_in_tests_ += check_failures_ - before_;         \
        if (check_failures_ == before_) {                              \
            check_tests_passed_++;                                     \
            printf("ok   %s\n", #fn);                                  \
        } else {                                                       \
            check_tests_failed_++;                                     \
            printf("FAIL %s\n", #fn);                                  \
        }                                                              \
        fflush(stdout);                                                \
    } while (0)

#define RUN(fn)                              \
    do {                                     \
        if (!check_gpu_mode_) CHECK_RUN_(fn); \
    } while (0)

#define RUN_GPU(fn)                                                                                 \
    do {                                                                                            \
        if (!check_gpu_mode_) break;                                                                \
        if (!check_has_gpu_) check_skip("the GPU cases need a GPU (and a CUDA build); none here"); \
        CHECK_RUN_(fn);                                                                             \
    } while (0)

/* For tests that call the CUDA runtime themselves (cuda_runtime.h included before the
 * first use): a failing call ends the test with the call, file, line and CUDA's message. */
#define CU(call)                                                                                       \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static inline int check_summary(void) {
    if (check_failures_ > check_failures_in_tests_) { /* a baseline or setup in main failed */
        check_tests_failed_++;
        printf("FAIL (%d checks outside the tests)\n", check_failures_ - check_failures_in_tests_);
    }
    printf("%d passed, %d failed\n", check_tests_passed_, check_tests_failed_);
    return check_tests_failed_ ? 1 : 0;
}

static inline void check_skip(const char *why) {
    printf("SKIP: %s\n", why);
    exit(77);
}

/* For a binary with RUN_GPU cases (see the banner). */
static inline void check_init(int argc, char **argv, int has_gpu) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--gpu")) check_gpu_mode_ = 1;
    check_has_gpu_ = has_gpu;
}

/* The whole file, NUL-terminated, in a malloc'd buffer (NULL when it cannot be read);
 * *len (optional) gets its size. */
static inline char *check_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? (char *)malloc((size_t)size + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)size) {
        free(buf);
        return NULL;
    }
    buf[size] = 0;
    if (len) *len = (size_t)size;
    return buf;
}

/* Path of a file under ../shared/data (the shared test data beside the checkout);
 * MC_SHARED_DIR overrides. */
static inline const char *check_shared_path(const char *rel, char *buf, size_t size) {
    const char *root = getenv("MC_SHARED_DIR");
    snprintf(buf, size, "%s/%s", root ? root : "../shared", rel);
    return buf;
}

#endif
