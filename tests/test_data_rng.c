/* test_data_rng.c: MT19937 (legacy RandomState) and PCG64 (default_rng) against numpy,
 * bit for bit, and the mock dataset's sequence lengths. Fixtures come from
 * tools/reference/make_data_golden.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/lowlevel.h"
#include "data/numpy_rng.h"

#define FIX "tests/fixtures/data/"

/* sum_i (i + 1) * a[i] mod 2^64, the fixtures' checksum */
static uint64_t cs_i64(const int64_t *a, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (uint64_t)(i + 1) * (uint64_t)a[i];
    return s;
}

static FILE *open_fixture(const char *name) {
    char p[512];
    snprintf(p, sizeof p, FIX "%s", name);
    FILE *f = fopen(p, "r");
    if (!f) {
        fprintf(stderr, "missing fixture %s (run tools/reference/make_data_golden.py)\n", p);
        exit(1);
    }
    return f;
}

/* Next non-comment line into buf; 0 at EOF. */
static int next_line(FILE *f, char *buf, int size) {
    while (fgets(buf, size, f))
        if (buf[0] != '#' && buf[0] != '\n') return 1;
    return 0;
}

static void test_mt19937_raw(void) {
    FILE *f = open_fixture("mt19937_raw.txt");
    char line[4096];
    int cases = 0;
    while (next_line(f, line, sizeof line)) {
        char *p = line;
        unsigned long long seed = strtoull(p, &p, 10);
        long n = strtol(p, &p, 10);
        uint64_t want_cs = strtoull(p, &p, 10);
        mc_mt19937 mt;
        mc_mt19937_seed(&mt, (uint32_t)seed);
        int64_t *d = malloc((size_t)n * sizeof *d);
        for (long i = 0; i < n; i++) d[i] = mc_mt19937_next32(&mt);
        for (int i = 0; i < 16; i++) {
            unsigned long long want = strtoull(p, &p, 10);
            CHECK((unsigned long long)d[i] == want, "seed %llu draw %d: %lld vs %llu", seed, i, (long long)d[i], want);
        }
        CHECK(cs_i64(d, n) == want_cs, "seed %llu checksum of %ld draws", seed, n);
        free(d);
        cases++;
    }
    fclose(f);
    CHECK(cases == 5);
}

static void test_mt19937_interval(void) {
    FILE *f = open_fixture("mt19937_interval.txt");
    char line[4096];
    int cases = 0;
    while (next_line(f, line, sizeof line)) {
        char *p = line;
        unsigned long long seed = strtoull(p, &p, 10), max = strtoull(p, &p, 10);
        long n = strtol(p, &p, 10);
        mc_mt19937 mt;
        mc_mt19937_seed(&mt, (uint32_t)seed);
        for (long i = 0; i < n; i++) {
            unsigned long long want = strtoull(p, &p, 10);
            unsigned long long got = mc_mt19937_random_interval(&mt, max);
            CHECK(got == want, "seed %llu max %llu draw %ld: %llu vs %llu", seed, max, i, got, want);
        }
        cases++;
    }
    fclose(f);
    CHECK(cases == 3);
}

static void test_mt19937_shuffle(void) {
    FILE *f = open_fixture("mt19937_shuffle.txt");
    char line[4096];
    int cases = 0;
    while (next_line(f, line, sizeof line)) {
        char *p = line;
        if (strncmp(line, "twice", 5) == 0) {
            /* Two shuffles from one state continue the same stream. */
            p += 5;
            mc_mt19937 mt;
            mc_mt19937_seed(&mt, (uint32_t)strtoul(p, &p, 10));
            int64_t a[10], b[7];
            for (int i = 0; i < 10; i++) a[i] = i;
            for (int i = 0; i < 7; i++) b[i] = 10 + i;
            mc_mt19937_shuffle_i64(&mt, a, 10);
            mc_mt19937_shuffle_i64(&mt, b, 7);
            for (int i = 0; i < 17; i++) {
                long want = strtol(p, &p, 10);
                CHECK((i < 10 ? a[i] : b[i - 10]) == want, "twice: element %d", i);
            }
            cases++;
            continue;
        }
        unsigned long long seed = strtoull(p, &p, 10);
        long n = strtol(p, &p, 10);
        uint64_t want_cs = strtoull(p, &p, 10);
        int64_t *a64 = malloc((size_t)(n + 1) * sizeof *a64);
        int32_t *a32 = malloc((size_t)(n + 1) * sizeof *a32);
        uint32_t *u32 = malloc((size_t)(n + 1) * sizeof *u32);
        for (long i = 0; i < n; i++) a64[i] = a32[i] = (int32_t)(u32[i] = (uint32_t)i);
        mc_mt19937 mt;
        mc_mt19937_seed(&mt, (uint32_t)seed);
        mc_mt19937_shuffle_i64(&mt, a64, n);
        mc_mt19937_seed(&mt, (uint32_t)seed);
        mc_mt19937_shuffle_i32(&mt, a32, n);
        mc_mt19937_seed(&mt, (uint32_t)seed);
        mc_mt19937_shuffle_u32(&mt, u32, n);
        for (long i = 0; i < n && i < 16; i++) {
            long want = strtol(p, &p, 10);
            CHECK(a64[i] == want, "seed %llu n %ld element %ld: %lld vs %ld", seed, n, i, (long long)a64[i], want);
        }
        CHECK(cs_i64(a64, n) == want_cs, "seed %llu n %ld checksum", seed, n);
        int same = 1;
        for (long i = 0; i < n; i++) same &= a32[i] == a64[i] && (int64_t)u32[i] == a64[i];
        CHECK(same, "seed %llu n %ld: int32/uint32/int64 permutations differ", seed, n);
        free(a64);
        free(a32);
        free(u32);
        cases++;
    }
    fclose(f);
    CHECK(cases == 3 * 8 + 1, "%d cases", cases);
}

static void test_pcg64_integers(void) {
    FILE *f = open_fixture("pcg64_integers.txt");
    char line[8192];
    int cases = 0, calls = 0;
    mc_pcg64 g;
    while (next_line(f, line, sizeof line)) {
        char *p = line;
        if (strncmp(p, "case", 4) == 0) {
            p += 4;
            int nw = (int)strtol(p, &p, 10);
            uint32_t w[16];
            for (int i = 0; i < nw; i++) w[i] = (uint32_t)strtoul(p, &p, 10);
            mc_pcg64_seed_words(&g, w, nw);
            cases++;
        } else if (strncmp(p, "call", 4) == 0) {
            p += 4;
            long low = strtol(p, &p, 10), high = strtol(p, &p, 10), n = strtol(p, &p, 10);
            int32_t out[256];
            mc_pcg64_integers_i32(&g, (int32_t)low, high, n, out);
            for (long i = 0; i < n; i++) {
                long want = strtol(p, &p, 10);
                CHECK(out[i] == want, "case %d integers(%ld, %ld)[%ld]: %d vs %ld", cases, low, high, i, out[i], want);
            }
            calls++;
        }
    }
    fclose(f);
    CHECK(cases == 7 && calls == 16, "%d cases %d calls", cases, calls);
    /* default_rng(seed) for integer seeds is the same as the word form. */
    mc_pcg64 a, b;
    uint32_t w2[2] = {5u, 0x80000000u};
    mc_pcg64_seed(&a, 0x8000000000000005ull);
    mc_pcg64_seed_words(&b, w2, 2);
    CHECK(mc_pcg64_next64(&a) == mc_pcg64_next64(&b));
}

static void test_mock_lengths(void) {
    mc_lowlevel *ll;
    mc_err err;
    CHECK(mc_lowlevel_open_mock(&ll, 1000, 999, &err) == MC_OK, "%s", err.msg);
    CHECK(ll->num_sequences == 100000);
    FILE *f = fopen(FIX "mock_lengths_first1000.i32", "rb");
    CHECK(f != NULL);
    int32_t first[1000];
    CHECK(f && fread(first, sizeof first[0], 1000, f) == 1000);
    if (f) fclose(f);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += ll->lengths[i] != first[i];
    CHECK(bad == 0, "%d of the first 1000 mock lengths differ from numpy", bad);

    FILE *s = open_fixture("mock_lengths_summary.txt");
    char line[256];
    CHECK(next_line(s, line, sizeof line));
    long long n, sum;
    unsigned long long want_cs;
    CHECK(sscanf(line, "%lld %lld %llu", &n, &sum, &want_cs) == 3);
    fclose(s);
    int64_t *all = malloc(100000 * sizeof *all);
    long long got_sum = 0;
    for (int i = 0; i < 100000; i++) got_sum += all[i] = ll->lengths[i];
    CHECK(got_sum == sum, "sum %lld vs %lld", got_sum, sum);
    CHECK(cs_i64(all, 100000) == want_cs, "checksum of all 100000 lengths");
    free(all);

    /* Tokens: (1..len-1) % vocab then eod. */
    int32_t len0 = ll->lengths[0], buf[4096];
    mc_lowlevel_read(ll, 0, 0, len0, buf);
    CHECK(buf[0] == 1 % 1000 && buf[len0 - 1] == 999);
    if (len0 > 1001) CHECK(buf[999] == 0 && buf[1000] == 1, "mod vocab");
    mc_lowlevel_close(ll);
}

int main(void) {
    RUN(test_mt19937_raw);
    RUN(test_mt19937_interval);
    RUN(test_mt19937_shuffle);
    RUN(test_pcg64_integers);
    RUN(test_mock_lengths);
    return check_summary();
}
