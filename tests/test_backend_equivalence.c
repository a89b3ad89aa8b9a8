/* test_backend_equivalence.c: every op of the CUDA backend against the CPU reference.
 *
 * Random inputs, fresh each run (the seed is printed; MC_TEST_SEED=<n> replays one), with
 * no zeros. Each op runs on the CPU backend in F32 and on the CUDA backend in F32, BF16 and
 * F16; for BF16 and F16 the inputs are first rounded to that dtype and the CPU's F32
 * reference is computed on the same rounded values. Outputs are compared by relative L2
 * error: F32 < 1e-5, BF16 and F16 < 1e-2 (the F32 statistics and weight gradients of a
 * 16-bit run too).
 * Also: determinism (two CUDA runs bitwise equal) of embedding_bwd, the norm backwards,
 * attention_bwd (with and without its dbias), adamw, linear_dgelu_bwd, linear_bwd's bias gradient and xent_fused;
 * init_normal against the CPU's values (within one float ulp); exact fill/convert;
 * sumsq/sumsq_segments/count_zeros; adamw on the split master (param_lo) bit for bit as on
 * the F32 master, and master_join/master_split bit for bit as the CPU's.
 *
 * Exits 77 (skipped) when no CUDA device is visible or the build has no CUDA backend.
 * MC_CUDA_DEBUG_SYNC=1 makes the backend synchronize after every kernel, so a faulting
 * kernel is named by its op; MC_TEST_ONLY=<substring> runs only the matching tests;
 * MC_TEST_BENCH=1 also times the main kernels at training sizes (MC_TEST_BENCH=xent: those
 * whose name contains "xent"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/philox.h"
#include "check.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

static mc_backend *cpu, *gpu;

#define F32 MC_F32
#define BF16 MC_BF16
#define F16 MC_F16

/* ---- scratch: each test's buffers are released after it runs ---- */

enum { MAX_ALLOCS = 4096 };
typedef struct {
    mc_backend *be; /* NULL: host malloc */
    void *p;
} scratch_rec;
static scratch_rec g_scratch[MAX_ALLOCS];
static int g_nscratch;

static void *track(mc_backend *be, void *p) {
    if (g_nscratch == MAX_ALLOCS) {
        fprintf(stderr, "test_backend_equivalence: too many scratch allocations\n");
        abort();
    }
    g_scratch[g_nscratch].be = be;
    g_scratch[g_nscratch].p = p;
    g_nscratch++;
    return p;
}

static void *halloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) abort();
    return track(NULL, p);
}

static void *balloc(mc_backend *be, size_t bytes) { return track(be, be->alloc(be, bytes)); }

static void release_all(void) {
    if (gpu) gpu->sync(gpu);
    while (g_nscratch) {
        scratch_rec *r = &g_scratch[--g_nscratch];
        if (r->be) r->be->free(r->be, r->p);
        else free(r->p);
    }
}

/* ---- random inputs ---- */

static uint64_t g_rng;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }

static int64_t rng_int(int64_t lo, int64_t hi) { /* [lo, hi) */
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo));
}

/* n values of magnitude in [0.1, 1] * scale, random sign: no zeros */
static float *rnd(int64_t n, float scale) {
    float *x = halloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double m = 0.1 + 0.9 * rng_uniform();
        x[i] = (float)((rng_next() & 1) ? m : -m) * scale;
    }
    return x;
}

/* v rounded to what dtype dt can hold (F32: v) */
static float round_to(mc_dtype dt, float v) {
    if (dt == BF16) return mc_bf16_to_f32(mc_f32_to_bf16(v));
    if (dt == F16) return mc_f16_to_f32(mc_f32_to_f16(v));
    return v;
}

/* The bit pattern of v in the 16-bit dtype dt, rounded as the host rounds. */
static int bits16(mc_dtype dt, float v) { return dt == BF16 ? (int)mc_f32_to_bf16(v) : (int)mc_f32_to_f16(v); }

/* x rounded in place to what dtype dt can hold, so CPU and GPU see the same values */
static float *as_dtype(float *x, int64_t n, mc_dtype dt) {
    for (int64_t i = 0; i < n; i++) x[i] = round_to(dt, x[i]);
    return x;
}

static float *fcopy(const float *x, int64_t n) {
    float *y = halloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* ---- tensors on either backend, filled from F32 host values ---- */

/* Uploads n F32 host values (NULL: zeros) as dtype dt into p on be. */
static void upload(mc_backend *be, void *p, mc_dtype dt, const float *h, int64_t n) {
    size_t bytes = (size_t)n * mc_dtype_size(dt);
    if (!h) {
        be->zero(be, p, bytes);
        return;
    }
    if (dt == F32) {
        be->copy_h2d(be, p, h, bytes);
    } else if (dt == BF16 || dt == F16) {
        uint16_t *tmp = malloc(bytes ? bytes : 2);
        for (int64_t i = 0; i < n; i++) tmp[i] = (uint16_t)bits16(dt, h[i]);
        be->copy_h2d(be, p, tmp, bytes);
        free(tmp);
    } else {
        fprintf(stderr, "upload: dtype %s\n", mc_dtype_name(dt));
        abort();
    }
}

static mc_tensor mk2(mc_backend *be, mc_dtype dt, const float *h, int64_t rows, int64_t cols) {
    void *p = balloc(be, (size_t)(rows * cols) * mc_dtype_size(dt));
    upload(be, p, dt, h, rows * cols);
    return mc_tensor_2d(p, dt, rows, cols);
}

static mc_tensor mk1(mc_backend *be, mc_dtype dt, const float *h, int64_t n) {
    void *p = balloc(be, (size_t)n * mc_dtype_size(dt));
    upload(be, p, dt, h, n);
    return mc_tensor_1d(p, dt, n);
}

static mc_tensor mk_i32(mc_backend *be, const int32_t *h, int64_t n) {
    void *p = balloc(be, (size_t)n * 4);
    be->copy_h2d(be, p, h, (size_t)n * 4);
    return mc_tensor_1d(p, MC_I32, n);
}

/* The tensor's values as F32 on the host. */
static float *dl(mc_backend *be, const mc_tensor *t) {
    int64_t n = mc_tensor_numel(t);
    float *out = halloc((size_t)n * sizeof(float));
    size_t bytes = (size_t)n * mc_dtype_size(t->dtype);
    if (t->dtype == F32) {
        be->copy_d2h(be, out, t->data, bytes);
    } else {
        uint16_t *tmp = malloc(bytes ? bytes : 2);
        be->copy_d2h(be, tmp, t->data, bytes);
        for (int64_t i = 0; i < n; i++) out[i] = t->dtype == BF16 ? mc_bf16_to_f32(tmp[i]) : mc_f16_to_f32(tmp[i]);
        free(tmp);
    }
    return out;
}

static void *dl_raw(mc_backend *be, const void *p, size_t bytes) {
    void *out = halloc(bytes);
    be->copy_d2h(be, out, p, bytes);
    return out;
}

/* ---- comparisons: one printed line per check ---- */

static double tol_of(mc_dtype dt) { return dt == F32 ? 1e-5 : 1e-2; }

static void cmp(const char *what, mc_dtype dt, const float *got, const float *ref, int64_t n) {
    double err = check_rel_l2(got, ref, n);
    double tol = tol_of(dt);
    printf("  %-52s %-4s rel L2 %.3e (tol %.0e)%s\n", what, mc_dtype_name(dt), err, tol,
           err < tol ? "" : "  <-- FAIL");
    CHECK(err < tol && !isnan(err), "%s (%s): relative L2 error %.3e >= %.0e", what, mc_dtype_name(dt), err, tol);
}

static void same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    bool eq = memcmp(a, b, bytes) == 0;
    printf("  %-52s      %s\n", what, eq ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(eq, "%s: two CUDA runs differ", what);
}

static const mc_dtype k_dtypes[] = {F32, BF16, F16};
#define NDTYPES ((int)(sizeof k_dtypes / sizeof k_dtypes[0]))

/* ======================================================================= memory */

static void test_memory(void) {
    int64_t n = 1000;
    float *h = rnd(n, 1.0f);
    size_t a0, m0, r0;
    gpu->memory_stats(gpu, &a0, &m0, &r0);
    float *d1 = balloc(gpu, n * 4), *d2 = balloc(gpu, n * 4);
    size_t a1, m1, r1;
    gpu->memory_stats(gpu, &a1, &m1, &r1);
    printf("  memory_stats: allocated %zu -> %zu, max %zu, reserved %zu\n", a0, a1, m1, r1);
    CHECK(a1 == a0 + 2 * (size_t)n * 4, "allocated grew by %zu, expected %zu", a1 - a0, 2 * (size_t)n * 4);
    CHECK(m1 >= a1 && r1 >= a1);
    gpu->copy_h2d(gpu, d1, h, n * 4);
    gpu->copy_d2d(gpu, d2, d1, n * 4);
    gpu->zero(gpu, d1, 40);
    float *b1 = dl_raw(gpu, d1, n * 4), *b2 = dl_raw(gpu, d2, n * 4);
    bool ok = memcmp(b2, h, n * 4) == 0 && memcmp(b1 + 10, h + 10, (n - 10) * 4) == 0;
    for (int i = 0; i < 10; i++) ok = ok && b1[i] == 0.0f;
    printf("  %-52s      %s\n", "copy_h2d / copy_d2d / zero / copy_d2h", ok ? "exact" : "WRONG  <-- FAIL");
    CHECK(ok, "memory copies");
    release_all();
}

/* ======================================================================= fill, convert, init */

static void test_fill_convert(void) {
    int64_t n = 1237;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        mc_tensor t = mk1(gpu, dt, NULL, n);
        mc_op_fill(gpu, &t, 0.3);
        float *got = dl(gpu, &t);
        float want = round_to(dt, 0.3f);
        bool ok = true;
        for (int64_t i = 0; i < n; i++) ok = ok && got[i] == want;
        printf("  %-52s %-4s %s\n", "fill 0.3", mc_dtype_name(dt), ok ? "exact" : "WRONG  <-- FAIL");
        CHECK(ok, "fill %s", mc_dtype_name(dt));
    }
    /* convert: F32 -> BF16/F16 -> F32 against the CPU backend's conversion, bit for bit
     * (inputs over a wide range incl. values needing round-to-even) */
    float *h = rnd(n, 100.0f);
    for (int64_t i = 0; i < n; i += 7) h[i] *= 1e-3f;
    mc_dtype lows[2] = {BF16, MC_F16};
    for (int k = 0; k < 2; k++) {
        mc_dtype lo = lows[k];
        size_t lb = (size_t)n * 2;
        mc_tensor gsrc = mk1(gpu, F32, h, n), csrc = mk1(cpu, F32, h, n);
        mc_tensor glo = mc_tensor_1d(balloc(gpu, lb), lo, n), clo = mc_tensor_1d(balloc(cpu, lb), lo, n);
        mc_op_convert(gpu, &glo, &gsrc);
        mc_op_convert(cpu, &clo, &csrc);
        void *got = dl_raw(gpu, glo.data, lb);
        bool ok = memcmp(got, clo.data, lb) == 0;
        char what[96];
        snprintf(what, sizeof what, "convert F32 -> %s (bits vs CPU)", mc_dtype_name(lo));
        printf("  %-52s      %s\n", what, ok ? "exact" : "DIFFER  <-- FAIL");
        CHECK(ok, "%s", what);
        mc_tensor gback = mk1(gpu, F32, NULL, n), cback = mk1(cpu, F32, NULL, n);
        mc_op_convert(gpu, &gback, &glo);
        mc_op_convert(cpu, &cback, &clo);
        float *gb = dl(gpu, &gback);
        ok = memcmp(gb, cback.data, (size_t)n * 4) == 0;
        snprintf(what, sizeof what, "convert %s -> F32 (bits vs CPU)", mc_dtype_name(lo));
        printf("  %-52s      %s\n", what, ok ? "exact" : "DIFFER  <-- FAIL");
        CHECK(ok, "%s", what);
    }
    /* unaligned views (odd element offsets) take the scalar path */
    mc_tensor gsrc = mk1(gpu, F32, h, n);
    mc_tensor glo = mk1(gpu, BF16, NULL, n);
    mc_tensor s1 = mc_tensor_1d((float *)gsrc.data + 1, F32, n - 3), d1 = mc_tensor_1d((uint16_t *)glo.data + 3, BF16, n - 3);
    mc_op_convert(gpu, &d1, &s1);
    uint16_t *got = dl_raw(gpu, glo.data, (size_t)n * 2);
    bool ok = true;
    for (int64_t i = 0; i < n - 3; i++) ok = ok && got[i + 3] == mc_f32_to_bf16(h[i + 1]);
    printf("  %-52s      %s\n", "convert F32 -> BF16, unaligned views", ok ? "exact" : "DIFFER  <-- FAIL");
    CHECK(ok, "unaligned convert");
    release_all();
}

static void test_init_normal(void) {
    int64_t rows = 37, cols = 131, stride = 500, col0 = 17;
    int64_t *row_index = halloc(sizeof(int64_t) * rows);
    for (int64_t r = 0; r < rows; r++) row_index[r] = 3 * r + 5; /* a shard's rows of a larger tensor */
    uint64_t seed = rng_next(), stream = rng_next();
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        mc_tensor c = mk2(cpu, dt, NULL, rows, cols);
        mc_tensor g = mk2(gpu, dt, NULL, rows, cols);
        mc_op_init_normal(cpu, &c, seed, stream, 0.02, row_index, stride, col0);
        mc_op_init_normal(gpu, &g, seed, stream, 0.02, row_index, stride, col0);
        float *gv = dl(gpu, &g), *cv = dl(cpu, &c);
        int64_t exact = 0, one_ulp = 0, worse = 0;
        for (int64_t i = 0; i < rows * cols; i++) {
            if (gv[i] == cv[i]) exact++;
            else if (dt == F32 && (gv[i] == nextafterf(cv[i], INFINITY) || gv[i] == nextafterf(cv[i], -INFINITY))) one_ulp++;
            else if (dt != F32 && abs(bits16(dt, gv[i]) - bits16(dt, cv[i])) == 1) one_ulp++;
            else worse++;
        }
        printf("  %-52s %-4s %lld exact, %lld within 1 ulp, %lld worse\n", "init_normal vs CPU (sharded rows)",
               mc_dtype_name(dt), (long long)exact, (long long)one_ulp, (long long)worse);
        CHECK(worse == 0, "init_normal %s: %lld values more than 1 ulp from the CPU's", mc_dtype_name(dt), (long long)worse);
    }
    /* 1-D */
    int64_t n = 1001, zero = 0;
    mc_tensor c = mk1(cpu, F32, NULL, n), g = mk1(gpu, F32, NULL, n);
    mc_op_init_normal(cpu, &c, seed, stream, 1.0, &zero, 0, 0);
    mc_op_init_normal(gpu, &g, seed, stream, 1.0, &zero, 0, 0);
    cmp("init_normal 1-D", F32, dl(gpu, &g), c.data, n);
    release_all();
}

/* ======================================================================= GEMM and linear */

static void test_gemm(void) {
    int64_t m = 37, n = 29, k = 45;
    float alpha = 0.7f, beta = 0.3f;
    for (int tr = 0; tr < 4; tr++) {
        bool ta = tr & 1, tb = (tr >> 1) & 1;
        for (int kk = 0; kk < 5; kk++) { /* F32; BF16 -> BF16; BF16 -> F32; F16 -> F16; F16 -> F32 */
            mc_dtype dt = kk == 0 ? F32 : kk <= 2 ? BF16 : F16, ct = kk == 2 || kk == 4 ? F32 : dt;
            float *a = as_dtype(rnd(m * k, 1.0f), m * k, dt), *b = as_dtype(rnd(k * n, 1.0f), k * n, dt);
            float *c0 = as_dtype(rnd(m * n, 1.0f), m * n, ct);
            mc_tensor ca = ta ? mk2(cpu, F32, a, k, m) : mk2(cpu, F32, a, m, k);
            mc_tensor cb = tb ? mk2(cpu, F32, b, n, k) : mk2(cpu, F32, b, k, n);
            mc_tensor cc = mk2(cpu, F32, c0, m, n);
            mc_tensor ga = ta ? mk2(gpu, dt, a, k, m) : mk2(gpu, dt, a, m, k);
            mc_tensor gb = tb ? mk2(gpu, dt, b, n, k) : mk2(gpu, dt, b, k, n);
            mc_tensor gc = mk2(gpu, ct, c0, m, n);
            mc_op_gemm(cpu, &cc, &ca, ta, &cb, tb, alpha, beta);
            mc_op_gemm(gpu, &gc, &ga, ta, &gb, tb, alpha, beta);
            char what[96];
            snprintf(what, sizeof what, "gemm %s%s alpha/beta%s", ta ? "T" : "N", tb ? "T" : "N",
                     kk == 2 ? " (BF16 in, F32 out)" : kk == 4 ? " (F16 in, F32 out)" : "");
            cmp(what, dt, dl(gpu, &gc), cc.data, m * n);
        }
    }
    release_all();
}

/* w and b at odd element offsets of a flat buffer, as model parameters are */
/* N = 33 rows (cuBLASLt), and 1, 5 and 8 (a decode step's few rows: gemv.cu in bf16/f16) */
static void test_linear_rows(int64_t N) {
    int64_t in = 64, out = 48;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        for (int variant = 0; variant < 3; variant++) { /* 0: no bias, 1: aligned bias, 2: unaligned w and b */
            float *x = as_dtype(rnd(N * in, 1.0f), N * in, dt), *w = as_dtype(rnd(out * in, 0.2f), out * in, dt);
            float *b = as_dtype(rnd(out, 1.0f), out, dt), *dy = as_dtype(rnd(N * out, 1.0f), N * out, dt);
            float *dw0 = rnd(out * in, 1.0f), *db0 = rnd(out, 1.0f);
            bool bias = variant > 0;
            mc_tensor cx = mk2(cpu, F32, x, N, in), cw = mk2(cpu, F32, w, out, in), cb = mk1(cpu, F32, b, out);
            mc_tensor cy = mk2(cpu, F32, NULL, N, out), cdy = mk2(cpu, F32, dy, N, out);
            mc_tensor cdx = mk2(cpu, F32, NULL, N, in), cdw = mk2(cpu, F32, dw0, out, in), cdb = mk1(cpu, F32, db0, out);
            mc_tensor none = mc_tensor_none();
            mc_op_linear_fwd(cpu, &cy, &cx, &cw, bias ? &cb : &none);
            mc_op_linear_bwd(cpu, &cdx, &cdw, bias ? &cdb : &none, &cdy, &cx, &cw, true);

            mc_tensor gx = mk2(gpu, dt, x, N, in), gy = mk2(gpu, dt, NULL, N, out), gdy = mk2(gpu, dt, dy, N, out);
            mc_tensor gw, gb;
            if (variant == 2) { /* one flat parameter buffer: [1 pad][w][b] */
                size_t es = mc_dtype_size(dt);
                char *flat = balloc(gpu, (1 + out * in + out) * es);
                upload(gpu, flat + es, dt, w, out * in);
                upload(gpu, flat + (1 + out * in) * es, dt, b, out);
                gw = mc_tensor_2d(flat + es, dt, out, in);
                gb = mc_tensor_1d(flat + (1 + out * in) * es, dt, out);
            } else {
                gw = mk2(gpu, dt, w, out, in);
                gb = mk1(gpu, dt, b, out);
            }
            mc_tensor gdx = mk2(gpu, dt, NULL, N, in), gdw = mk2(gpu, F32, dw0, out, in), gdb = mk1(gpu, F32, db0, out);
            mc_op_linear_fwd(gpu, &gy, &gx, &gw, bias ? &gb : &none);
            mc_op_linear_bwd(gpu, &gdx, &gdw, bias ? &gdb : &none, &gdy, &gx, &gw, true);
            const char *vn = variant == 0 ? "no bias" : variant == 1 ? "bias" : "bias, unaligned w/b";
            char what[96];
            snprintf(what, sizeof what, "linear_fwd y (%lld rows, %s)", (long long)N, vn);
            cmp(what, dt, dl(gpu, &gy), cy.data, N * out);
            if (N > 1 && N <= 8 && variant < 2 && dt != F32) { /* a decode row (gemv.cu) the same beside others as alone */
                mc_tensor gx1 = mc_tensor_rows(&gx, 0, 1), gy1 = mk2(gpu, dt, NULL, 1, out);
                mc_op_linear_fwd(gpu, &gy1, &gx1, &gw, bias ? &gb : &none);
                const size_t rb = (size_t)out * mc_dtype_size(dt);
                snprintf(what, sizeof what, "linear_fwd row 0 of %lld = alone (%s)", (long long)N, vn);
                same_bits(what, dl_raw(gpu, gy.data, rb), dl_raw(gpu, gy1.data, rb), rb);
            }
            snprintf(what, sizeof what, "linear_bwd dx (%s)", vn);
            cmp(what, dt, dl(gpu, &gdx), cdx.data, N * in);
            snprintf(what, sizeof what, "linear_bwd dw += (F32) (%s)", vn);
            cmp(what, dt, dl(gpu, &gdw), cdw.data, out * in);
            if (bias) {
                snprintf(what, sizeof what, "linear_bwd db += (F32) (%s)", vn);
                cmp(what, dt, dl(gpu, &gdb), cdb.data, out);
            }
        }
    }
    /* a bigger, tensor-core sized shape with many rows for db's chunked sum */
    if (N == 33) {
        int64_t n2 = 1024, i2 = 256, o2 = 384;
        mc_dtype dt = BF16;
        float *x = as_dtype(rnd(n2 * i2, 1.0f), n2 * i2, dt), *w = as_dtype(rnd(o2 * i2, 0.1f), o2 * i2, dt);
        float *dy = as_dtype(rnd(n2 * o2, 1.0f), n2 * o2, dt), *b = as_dtype(rnd(o2, 1.0f), o2, dt);
        mc_tensor cx = mk2(cpu, F32, x, n2, i2), cw = mk2(cpu, F32, w, o2, i2), cb = mk1(cpu, F32, b, o2);
        mc_tensor cy = mk2(cpu, F32, NULL, n2, o2), cdy = mk2(cpu, F32, dy, n2, o2);
        mc_tensor cdw = mk2(cpu, F32, NULL, o2, i2), cdb = mk1(cpu, F32, NULL, o2), none = mc_tensor_none();
        mc_op_linear_fwd(cpu, &cy, &cx, &cw, &cb);
        mc_op_linear_bwd(cpu, &none, &cdw, &cdb, &cdy, &cx, &cw, true);
        for (int k = 0; k < NDTYPES; k++) {
            mc_dtype t = k_dtypes[k];
            mc_tensor gx = mk2(gpu, t, x, n2, i2), gw = mk2(gpu, t, w, o2, i2), gb = mk1(gpu, t, b, o2);
            mc_tensor gy = mk2(gpu, t, NULL, n2, o2), gdy = mk2(gpu, t, dy, n2, o2);
            mc_tensor gdw = mk2(gpu, F32, NULL, o2, i2), gdb = mk1(gpu, F32, NULL, o2);
            mc_op_linear_fwd(gpu, &gy, &gx, &gw, &gb);
            mc_op_linear_bwd(gpu, &none, &gdw, &gdb, &gdy, &gx, &gw, true);
            cmp("linear_fwd y (1024x256 -> 384, bias)", t, dl(gpu, &gy), cy.data, n2 * o2);
            cmp("linear_bwd dw (1024 rows)", t, dl(gpu, &gdw), cdw.data, o2 * i2);
            cmp("linear_bwd db (1024 rows)", t, dl(gpu, &gdb), cdb.data, o2);
        }
    }
    release_all();
}

static void test_linear(void) {
    const int64_t rows[] = {33, 1, 5, 8};
    for (int i = 0; i < 4; i++) test_linear_rows(rows[i]);
}

/* linear_residual_fwd (y = residual + x w^T + b): one cuBLASLt GEMM reading the residual
 * as C where it applies, linear_fwd and the add elsewhere (unaligned bias or residual);
 * against the CPU's composition. variant 0: no bias, 1: bias, 2: bias and residual at odd
 * element offsets. */
/* N = 33 rows (cuBLASLt), and 1, 5 and 8 (a decode step's few rows: gemv.cu in bf16/f16) */
static void test_linear_residual_rows(int64_t N) {
    int64_t in = 64, out = 48;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        for (int variant = 0; variant < 3; variant++) {
            bool bias = variant > 0;
            float *x = as_dtype(rnd(N * in, 1.0f), N * in, dt), *w = as_dtype(rnd(out * in, 0.2f), out * in, dt);
            float *b = as_dtype(rnd(out, 1.0f), out, dt), *r = as_dtype(rnd(N * out, 1.0f), N * out, dt);
            mc_tensor none = mc_tensor_none();
            mc_tensor cx = mk2(cpu, F32, x, N, in), cw = mk2(cpu, F32, w, out, in), cb = mk1(cpu, F32, b, out);
            mc_tensor cr = mk2(cpu, F32, r, N, out), cy = mk2(cpu, F32, NULL, N, out);
            mc_op_linear_residual_fwd(cpu, &cy, &cr, &cx, &cw, bias ? &cb : &none);
            mc_tensor gx = mk2(gpu, dt, x, N, in), gw = mk2(gpu, dt, w, out, in), gy = mk2(gpu, dt, NULL, N, out);
            mc_tensor gb, gr;
            if (variant == 2) { /* [1 pad][b][r] */
                size_t es = mc_dtype_size(dt);
                char *flat = balloc(gpu, (size_t)(1 + out + N * out) * es);
                upload(gpu, flat + es, dt, b, out);
                upload(gpu, flat + (1 + out) * es, dt, r, N * out);
                gb = mc_tensor_1d(flat + es, dt, out);
                gr = mc_tensor_2d(flat + (1 + out) * es, dt, N, out);
            } else {
                gb = mk1(gpu, dt, b, out);
                gr = mk2(gpu, dt, r, N, out);
            }
            mc_op_linear_residual_fwd(gpu, &gy, &gr, &gx, &gw, bias ? &gb : &none);
            char what[96];
            snprintf(what, sizeof what, "linear_residual_fwd y (%lld rows, %s)", (long long)N,
                     variant == 0 ? "no bias" : variant == 1 ? "bias" : "bias and residual unaligned");
            cmp(what, dt, dl(gpu, &gy), cy.data, N * out);
        }
        release_all();
    }
}

static void test_linear_residual(void) {
    const int64_t rows[] = {33, 1, 5, 8};
    for (int i = 0; i < 4; i++) test_linear_residual_rows(rows[i]);
}

/* GEMM autotuning (on by default outside --deterministic-mode: the beta = 0 GEMMs time the
 * heuristic's candidates on first use and keep the fastest): the timing runs must leave the
 * right product behind. Shapes not used elsewhere in this test, so their cache entries are
 * built (and tuned) here. */
static void test_linear_autotuned(void) {
    unsetenv("MC_GEMM_AUTOTUNE");
    MC_ASSERT(!gpu->reproducible, "the test backend is not in reproducible mode");
    int64_t N = 520, in = 136, out = 200;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        float *x = as_dtype(rnd(N * in, 1.0f), N * in, dt), *w = as_dtype(rnd(out * in, 0.2f), out * in, dt);
        float *b = as_dtype(rnd(out, 1.0f), out, dt), *dy = as_dtype(rnd(N * out, 1.0f), N * out, dt);
        mc_tensor none = mc_tensor_none();
        mc_tensor cx = mk2(cpu, F32, x, N, in), cw = mk2(cpu, F32, w, out, in), cb = mk1(cpu, F32, b, out);
        mc_tensor cy = mk2(cpu, F32, NULL, N, out), cdy = mk2(cpu, F32, dy, N, out), cdx = mk2(cpu, F32, NULL, N, in);
        mc_op_linear_fwd(cpu, &cy, &cx, &cw, &cb);
        mc_op_linear_bwd(cpu, &cdx, &none, &none, &cdy, &cx, &cw, true);
        mc_tensor gx = mk2(gpu, dt, x, N, in), gw = mk2(gpu, dt, w, out, in), gb = mk1(gpu, dt, b, out);
        mc_tensor gy = mk2(gpu, dt, NULL, N, out), gdy = mk2(gpu, dt, dy, N, out), gdx = mk2(gpu, dt, NULL, N, in);
        mc_op_linear_fwd(gpu, &gy, &gx, &gw, &gb);
        mc_op_linear_bwd(gpu, &gdx, &none, &none, &gdy, &gx, &gw, true);
        cmp("linear_fwd y (autotuned GEMM)", dt, dl(gpu, &gy), cy.data, N * out);
        cmp("linear_bwd dx (autotuned GEMM)", dt, dl(gpu, &gdx), cdx.data, N * in);
        release_all();
    }
}

/* linear_gelu_fwd and linear_dgelu_bwd: cuBLASLt's GELU epilogues in BF16 and F16 where
 * they apply (row length f a multiple of 8, aligned bias and pre), the unfused kernels
 * elsewhere and in F32; against the CPU, whose ops are the unfused composition. The
 * backward gets the CPU forward's pre rounded to the dtype, so it is checked on its own.
 * variant 0: no bias (and no db), 1: bias, 2: bias at an odd element offset. */
static void linear_gelu_case(mc_dtype dt, int64_t N, int64_t in, int64_t f, int64_t out, int variant) {
    bool bias = variant > 0;
    float *x = as_dtype(rnd(N * in, 1.0f), N * in, dt), *w1 = as_dtype(rnd(f * in, 0.2f), f * in, dt);
    float *b1 = as_dtype(rnd(f, 1.0f), f, dt), *w2 = as_dtype(rnd(out * f, 0.2f), out * f, dt);
    float *dy = as_dtype(rnd(N * out, 1.0f), N * out, dt), *db0 = rnd(f, 1.0f);
    mc_tensor none = mc_tensor_none();
    mc_tensor cx = mk2(cpu, F32, x, N, in), cw1 = mk2(cpu, F32, w1, f, in), cb1 = mk1(cpu, F32, b1, f);
    mc_tensor cy = mk2(cpu, F32, NULL, N, f), cpre = mk2(cpu, F32, NULL, N, f);
    mc_op_linear_gelu_fwd(cpu, &cy, &cpre, &cx, &cw1, bias ? &cb1 : &none);
    float *pre_r = as_dtype(fcopy(cpre.data, N * f), N * f, dt);
    mc_tensor cpre_r = mk2(cpu, F32, pre_r, N, f), cw2 = mk2(cpu, F32, w2, out, f), cdy = mk2(cpu, F32, dy, N, out);
    mc_tensor cdpre = mk2(cpu, F32, NULL, N, f), cdb = mk1(cpu, F32, db0, f);
    mc_op_linear_dgelu_bwd(cpu, &cdpre, bias ? &cdb : &none, &cdy, &cw2, &cpre_r);

    mc_tensor gx = mk2(gpu, dt, x, N, in), gw1 = mk2(gpu, dt, w1, f, in), gb1;
    if (variant == 2) { /* [1 pad][b1] */
        char *flat = balloc(gpu, (size_t)(1 + f) * mc_dtype_size(dt));
        upload(gpu, flat + mc_dtype_size(dt), dt, b1, f);
        gb1 = mc_tensor_1d(flat + mc_dtype_size(dt), dt, f);
    } else {
        gb1 = mk1(gpu, dt, b1, f);
    }
    mc_tensor gy = mk2(gpu, dt, NULL, N, f), gpre = mk2(gpu, dt, NULL, N, f);
    mc_op_linear_gelu_fwd(gpu, &gy, &gpre, &gx, &gw1, bias ? &gb1 : &none);
    mc_tensor gpre_r = mk2(gpu, dt, pre_r, N, f), gw2 = mk2(gpu, dt, w2, out, f), gdy = mk2(gpu, dt, dy, N, out);
    mc_tensor gdpre = mk2(gpu, dt, NULL, N, f), gdb = mk1(gpu, F32, db0, f);
    mc_op_linear_dgelu_bwd(gpu, &gdpre, bias ? &gdb : &none, &gdy, &gw2, &gpre_r);
    char what[96];
    const char *vn = variant == 0 ? "no bias" : variant == 1 ? "bias" : "bias unaligned";
    snprintf(what, sizeof what, "linear_gelu_fwd pre (%lldx%lld->%lld, %s)", (long long)N, (long long)in, (long long)f, vn);
    cmp(what, dt, dl(gpu, &gpre), cpre.data, N * f);
    snprintf(what, sizeof what, "linear_gelu_fwd y (%lldx%lld->%lld, %s)", (long long)N, (long long)in, (long long)f, vn);
    cmp(what, dt, dl(gpu, &gy), cy.data, N * f);
    snprintf(what, sizeof what, "linear_dgelu_bwd dpre (f=%lld, out=%lld, %s)", (long long)f, (long long)out, vn);
    cmp(what, dt, dl(gpu, &gdpre), cdpre.data, N * f);
    if (bias) {
        snprintf(what, sizeof what, "linear_dgelu_bwd db += (F32) (f=%lld, %s)", (long long)f, vn);
        cmp(what, dt, dl(gpu, &gdb), cdb.data, f);
        /* run to run: the epilogue's sums over tokens too */
        mc_tensor gdpre2 = mk2(gpu, dt, NULL, N, f), gdb2 = mk1(gpu, F32, db0, f);
        gdb = mk1(gpu, F32, db0, f);
        mc_op_linear_dgelu_bwd(gpu, &gdpre, &gdb, &gdy, &gw2, &gpre_r);
        mc_op_linear_dgelu_bwd(gpu, &gdpre2, &gdb2, &gdy, &gw2, &gpre_r);
        size_t pb = (size_t)(N * f) * mc_dtype_size(dt);
        snprintf(what, sizeof what, "linear_dgelu_bwd %s dpre, db (f=%lld)", mc_dtype_name(dt), (long long)f);
        same_bits(what, dl_raw(gpu, gdpre.data, pb), dl_raw(gpu, gdpre2.data, pb), pb);
        same_bits(what, dl_raw(gpu, gdb.data, (size_t)f * 4), dl_raw(gpu, gdb2.data, (size_t)f * 4), (size_t)f * 4);
    }
}

static void test_linear_gelu(void) {
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        for (int variant = 0; variant < 3; variant++) {
            linear_gelu_case(dt, 33, 64, 48, 40, variant); /* f % 8 == 0: the epilogues' shape */
            linear_gelu_case(dt, 33, 64, 36, 40, variant); /* f % 8 != 0: unfused */
        }
        linear_gelu_case(dt, 1024, 256, 1024, 256, 1); /* tensor-core sized, many token tiles for db */
        release_all();
    }
}

/* linear_bwd's db from the weight-gradient GEMM (cuBLASLt's BGRADB where it applies): run
 * to run equal, and equal to what the column sums give when dw is not asked for. */
static void test_linear_bias_grad(void) {
    int64_t N = 1000, in = 192, out = 264;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        float *x = as_dtype(rnd(N * in, 1.0f), N * in, dt), *w = as_dtype(rnd(out * in, 0.1f), out * in, dt);
        float *dy = as_dtype(rnd(N * out, 1.0f), N * out, dt), *db0 = rnd(out, 1.0f);
        mc_tensor none = mc_tensor_none();
        mc_tensor gx = mk2(gpu, dt, x, N, in), gw = mk2(gpu, dt, w, out, in), gdy = mk2(gpu, dt, dy, N, out);
        mc_tensor dw1 = mk2(gpu, F32, NULL, out, in), dw2 = mk2(gpu, F32, NULL, out, in);
        mc_tensor db1 = mk1(gpu, F32, db0, out), db2 = mk1(gpu, F32, db0, out), db3 = mk1(gpu, F32, db0, out);
        mc_op_linear_bwd(gpu, &none, &dw1, &db1, &gdy, &gx, &gw, true);
        mc_op_linear_bwd(gpu, &none, &dw2, &db2, &gdy, &gx, &gw, true);
        mc_op_linear_bwd(gpu, &none, &none, &db3, &gdy, &gx, &gw, true); /* the column-sum kernel */
        same_bits("linear_bwd dw with db, run to run", dl_raw(gpu, dw1.data, (size_t)(out * in) * 4),
                  dl_raw(gpu, dw2.data, (size_t)(out * in) * 4), (size_t)(out * in) * 4);
        same_bits("linear_bwd db from the dw GEMM, run to run", dl_raw(gpu, db1.data, (size_t)out * 4),
                  dl_raw(gpu, db2.data, (size_t)out * 4), (size_t)out * 4);
        cmp("linear_bwd db with dw vs db alone", dt, dl(gpu, &db1), dl(gpu, &db3), out);
        /* without accumulate: dw and db written, their old contents (NaN) never read; the
         * references accumulate into zeros */
        float *nan_w = halloc(sizeof(float) * (size_t)(out * in)), *nan_b = halloc(sizeof(float) * (size_t)out);
        for (int64_t i = 0; i < out * in; i++) nan_w[i] = NAN;
        for (int64_t i = 0; i < out; i++) nan_b[i] = NAN;
        mc_tensor rw = mk2(gpu, F32, NULL, out, in), rb = mk1(gpu, F32, NULL, out), rb2 = mk1(gpu, F32, NULL, out);
        mc_tensor ow = mk2(gpu, F32, nan_w, out, in), ob = mk1(gpu, F32, nan_b, out);
        mc_tensor ow2 = mk2(gpu, F32, nan_w, out, in), ob2 = mk1(gpu, F32, nan_b, out);
        mc_op_linear_bwd(gpu, &none, &rw, &rb, &gdy, &gx, &gw, true);
        mc_op_linear_bwd(gpu, &none, &none, &rb2, &gdy, &gx, &gw, true);
        mc_op_linear_bwd(gpu, &none, &ow, &ob, &gdy, &gx, &gw, false);  /* with db: BGRADB into db */
        mc_op_linear_bwd(gpu, &none, &ow2, &none, &gdy, &gx, &gw, false); /* dw alone */
        mc_op_linear_bwd(gpu, &none, &none, &ob2, &gdy, &gx, &gw, false); /* db alone: column sums */
        cmp("linear_bwd dw written (with db)", dt, dl(gpu, &ow), dl(gpu, &rw), out * in);
        cmp("linear_bwd db written (with dw)", dt, dl(gpu, &ob), dl(gpu, &rb), out);
        cmp("linear_bwd dw written (alone)", dt, dl(gpu, &ow2), dl(gpu, &rw), out * in);
        cmp("linear_bwd db written (alone)", dt, dl(gpu, &ob2), dl(gpu, &rb2), out);
    }
    release_all();
}

/* ======================================================================= embedding */

static void test_embedding(void) {
    int64_t hs[2] = {72, 67}; /* vector and scalar paths */
    int64_t rows = 50, ntok = 300, vocab_start = 7;
    for (int hi = 0; hi < 2; hi++) {
        int64_t h = hs[hi];
        int32_t *ids = halloc(sizeof(int32_t) * ntok);
        for (int64_t t = 0; t < ntok; t++) ids[t] = (int32_t)rng_int(-3, vocab_start + rows + 12); /* some off-rank */
        ids[0] = ids[5] = ids[17] = (int32_t)vocab_start + 3;                                 /* repeats */
        for (int k = 0; k < NDTYPES; k++) {
            mc_dtype dt = k_dtypes[k];
            float *table = as_dtype(rnd(rows * h, 1.0f), rows * h, dt), *y0 = as_dtype(rnd(ntok * h, 1.0f), ntok * h, dt);
            float *dy = as_dtype(rnd(ntok * h, 1.0f), ntok * h, dt), *dt0 = rnd(rows * h, 1.0f);
            mc_tensor cids = mk_i32(cpu, ids, ntok), gids = mk_i32(gpu, ids, ntok);
            mc_tensor ctab = mk2(cpu, F32, table, rows, h), gtab = mk2(gpu, dt, table, rows, h);
            for (int acc = 0; acc < 2; acc++) {
                mc_tensor cy = mk2(cpu, F32, y0, ntok, h), gy = mk2(gpu, dt, y0, ntok, h);
                mc_op_embedding_fwd(cpu, &cy, &cids, &ctab, vocab_start, acc);
                mc_op_embedding_fwd(gpu, &gy, &gids, &gtab, vocab_start, acc);
                char what[96];
                snprintf(what, sizeof what, "embedding_fwd h=%lld%s", (long long)h, acc ? " accumulate" : "");
                cmp(what, dt, dl(gpu, &gy), cy.data, ntok * h);
            }
            mc_tensor cdy = mk2(cpu, F32, dy, ntok, h), gdy = mk2(gpu, dt, dy, ntok, h);
            mc_tensor cdt = mk2(cpu, F32, dt0, rows, h), gdt = mk2(gpu, F32, dt0, rows, h), gdt2 = mk2(gpu, F32, dt0, rows, h);
            mc_op_embedding_bwd(cpu, &cdt, &cdy, &cids, vocab_start);
            mc_op_embedding_bwd(gpu, &gdt, &gdy, &gids, vocab_start);
            mc_op_embedding_bwd(gpu, &gdt2, &gdy, &gids, vocab_start);
            char what[96];
            snprintf(what, sizeof what, "embedding_bwd dtable += (F32) h=%lld", (long long)h);
            float *r1 = dl(gpu, &gdt), *r2 = dl(gpu, &gdt2);
            cmp(what, dt, r1, cdt.data, rows * h);
            snprintf(what, sizeof what, "embedding_bwd determinism h=%lld %s", (long long)h, mc_dtype_name(dt));
            same_bits(what, r1, r2, (size_t)(rows * h) * 4);
        }
    }
    release_all();
}

/* ======================================================================= norms */

static void norm_case(int64_t N, int64_t h, bool layernorm, bool with_bias, mc_dtype dt) {
    float eps = 1e-5f;
    float *x = as_dtype(rnd(N * h, 1.0f), N * h, dt), *w = as_dtype(rnd(h, 1.0f), h, dt);
    float *b = as_dtype(rnd(h, 1.0f), h, dt), *dy = as_dtype(rnd(N * h, 1.0f), N * h, dt);
    for (int64_t i = 0; i < N * h; i += 3) x[i] += 0.5f; /* a nonzero mean */
    as_dtype(x, N * h, dt);
    float *dx0 = as_dtype(rnd(N * h, 1.0f), N * h, dt), *dw0 = rnd(h, 1.0f), *db0 = rnd(h, 1.0f), *ds0 = rnd(h, 1.0f);
    mc_tensor none = mc_tensor_none();
    mc_tensor cx = mk2(cpu, F32, x, N, h), cw = mk1(cpu, F32, w, h), cb = mk1(cpu, F32, b, h);
    mc_tensor cy = mk2(cpu, F32, NULL, N, h), cm = mk1(cpu, F32, NULL, N), cr = mk1(cpu, F32, NULL, N);
    mc_tensor cdy = mk2(cpu, F32, dy, N, h), cdx = mk2(cpu, F32, dx0, N, h);
    mc_tensor cdw = mk1(cpu, F32, dw0, h), cdb = mk1(cpu, F32, db0, h), cds = mk1(cpu, F32, ds0, h);
    mc_tensor gx = mk2(gpu, dt, x, N, h), gw = mk1(gpu, dt, w, h), gb = mk1(gpu, dt, b, h);
    mc_tensor gy = mk2(gpu, dt, NULL, N, h), gm = mk1(gpu, F32, NULL, N), gr = mk1(gpu, F32, NULL, N);
    mc_tensor gdy = mk2(gpu, dt, dy, N, h), gyre = mk2(gpu, dt, NULL, N, h);
    /* runs 0 and 1 also sum dx's columns (dxsum), run 0 rewrites y too: they must agree bit
     * for bit; run 2 sums nothing (another kernel, whose own grid may order the dw sums
     * differently), checked against the CPU */
    mc_tensor gdx[3], gdw[3], gdb[3], gds[2];
    for (int r = 0; r < 3; r++) {
        gdx[r] = mk2(gpu, dt, dx0, N, h);
        gdw[r] = mk1(gpu, F32, dw0, h);
        gdb[r] = mk1(gpu, F32, db0, h);
        if (r < 2) gds[r] = mk1(gpu, F32, ds0, h);
    }
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "%s N=%lld h=%lld%s", layernorm ? "layernorm" : "rmsnorm", (long long)N, (long long)h,
             layernorm && !with_bias ? " no bias" : "");
    if (layernorm) {
        mc_op_layernorm_fwd(cpu, &cy, &cm, &cr, &cx, &cw, with_bias ? &cb : &none, eps);
        mc_op_layernorm_fwd(gpu, &gy, &gm, &gr, &gx, &gw, with_bias ? &gb : &none, eps);
        mc_op_layernorm_bwd(cpu, &cdx, &cdw, with_bias ? &cdb : &none, &cds, &none, &cdy, &cx, &cw, &none, &cm, &cr);
        for (int r = 0; r < 3; r++)
            mc_op_layernorm_bwd(gpu, &gdx[r], &gdw[r], with_bias ? &gdb[r] : &none, r < 2 ? &gds[r] : &none,
                               r == 0 ? &gyre : &none, &gdy, &gx, &gw, with_bias ? &gb : &none, &gm, &gr);
    } else {
        mc_op_rmsnorm_fwd(cpu, &cy, &cr, &cx, &cw, eps);
        mc_op_rmsnorm_fwd(gpu, &gy, &gr, &gx, &gw, eps);
        mc_op_rmsnorm_bwd(cpu, &cdx, &cdw, &cds, &none, &cdy, &cx, &cw, &cr);
        for (int r = 0; r < 3; r++)
            mc_op_rmsnorm_bwd(gpu, &gdx[r], &gdw[r], r < 2 ? &gds[r] : &none, r == 0 ? &gyre : &none, &gdy, &gx, &gw,
                             &gr);
    }
    snprintf(what, sizeof what, "%s bwd's rewritten y = fwd y", tag);
    bool same_y = memcmp(dl(gpu, &gyre), dl(gpu, &gy), (size_t)(N * h) * 4) == 0;
    printf("  %-52s      %s\n", what, same_y ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(same_y, "%s: the backward's y differs from the forward's", what);
    snprintf(what, sizeof what, "%s fwd y", tag);
    cmp(what, dt, dl(gpu, &gy), cy.data, N * h);
    if (layernorm) {
        snprintf(what, sizeof what, "%s fwd mean (F32)", tag);
        cmp(what, dt, dl(gpu, &gm), cm.data, N);
    }
    snprintf(what, sizeof what, "%s fwd rstd (F32)", tag);
    cmp(what, dt, dl(gpu, &gr), cr.data, N);
    float *dx1 = dl(gpu, &gdx[0]), *dx2 = dl(gpu, &gdx[1]), *dw1 = dl(gpu, &gdw[0]), *dw2 = dl(gpu, &gdw[1]);
    snprintf(what, sizeof what, "%s bwd dx +=", tag);
    cmp(what, dt, dx1, cdx.data, N * h);
    snprintf(what, sizeof what, "%s bwd dw += (F32)", tag);
    cmp(what, dt, dw1, cdw.data, h);
    snprintf(what, sizeof what, "%s bwd dxsum += dx's column sums (F32)", tag);
    float *ds1 = dl(gpu, &gds[0]), *ds2 = dl(gpu, &gds[1]);
    cmp(what, dt, ds1, cds.data, h);
    snprintf(what, sizeof what, "%s bwd without dxsum: dx +=", tag);
    cmp(what, dt, dl(gpu, &gdx[2]), cdx.data, N * h);
    snprintf(what, sizeof what, "%s bwd without dxsum: dw += (F32)", tag);
    cmp(what, dt, dl(gpu, &gdw[2]), cdw.data, h);
    snprintf(what, sizeof what, "%s bwd determinism dx, dw, dxsum (%s)", tag, mc_dtype_name(dt));
    bool eq = memcmp(dx1, dx2, (size_t)(N * h) * 4) == 0 && memcmp(dw1, dw2, (size_t)h * 4) == 0 &&
              memcmp(ds1, ds2, (size_t)h * 4) == 0;
    if (layernorm && with_bias) {
        float *db1 = dl(gpu, &gdb[0]), *db2 = dl(gpu, &gdb[1]);
        snprintf(what, sizeof what, "%s bwd db += (F32)", tag);
        cmp(what, dt, db1, cdb.data, h);
        snprintf(what, sizeof what, "%s bwd without dxsum: db += (F32)", tag);
        cmp(what, dt, dl(gpu, &gdb[2]), cdb.data, h);
        eq = eq && memcmp(db1, db2, (size_t)h * 4) == 0;
        snprintf(what, sizeof what, "%s bwd determinism dx, dw, db, dxsum (%s)", tag, mc_dtype_name(dt));
    }
    printf("  %-52s      %s\n", what, eq ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(eq, "%s: two CUDA runs differ", what);
    release_all();
}

static void test_norms(void) {
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        norm_case(67, 256, true, true, dt);   /* warp per row, one group per lane */
        norm_case(67, 100, true, false, dt);  /* block per row, scalar path, no bias */
        norm_case(67, 256, false, false, dt); /* rmsnorm */
        norm_case(45, 97, false, false, dt);
        norm_case(300, 768, true, true, dt);    /* warp per row, 3 groups a lane (GPT-2's width) */
        norm_case(130, 1024, false, false, dt); /* warp per row, 4 groups per lane */
        norm_case(40, 2048, true, true, dt);    /* register rows, one row per block */
        norm_case(3000, 2048, false, false, dt); /* register rows, several a block (Llama's rmsnorm) */
        norm_case(2500, 1032, true, true, dt);   /* register rows, threads past the row's groups */
        norm_case(16, 8192, true, true, dt);   /* partials in shared memory, big rows */
        norm_case(5, 30000, false, false, dt); /* partials in global memory (8 h > shared limit) */
        /* the pipelined kernels (forward: rows of up to 2048 in 16-byte groups; backward: up
         * to 1024, 512 in F32): many rows a warp, row counts no multiple of a block's warps,
         * 1 to 8 groups a lane, lanes past the row's groups */
        norm_case(20011, 768, true, true, dt);   /* GPT-2's width: forward ~5 rows a warp, backward ~13 */
        norm_case(4099, 1024, true, true, dt);   /* 4 groups a lane (F32 backward: register rows) */
        norm_case(2047, 512, true, false, dt);   /* 2 groups a lane, no bias */
        norm_case(5001, 256, false, false, dt);  /* 1 group a lane */
        norm_case(3001, 128, true, true, dt);    /* 16 groups: lanes 16-31 hold nothing */
        norm_case(999, 264, true, true, dt);     /* 33 groups: only lane 0 holds a second */
        norm_case(777, 8, true, true, dt);       /* one group: only lane 0 holds anything */
        norm_case(9001, 2048, false, false, dt); /* Llama's rmsnorm: forward 8 groups a lane, ~3 rows a warp */
        norm_case(5003, 2048, true, true, dt);   /* the same with LayerNorm's mean and bias */
        norm_case(1000, 1536, true, true, dt);   /* forward 6 of 8 groups a lane; backward register rows */
        norm_case(100, 2056, true, true, dt);    /* 257 groups: past the pipelined forward, three-pass kernel */
    }
}

/* dx aliasing dy, as the model's residual-stream backward may do; 4001 x 768 in BF16 and
 * F16: the pipelined backward, which loads the next row's dy and dx before it writes this
 * row's dx */
static void test_norm_alias(void) {
    const int64_t shapes[2][2] = {{31, 128}, {4001, 768}};
    for (int si = 0; si < 2; si++) {
        const int64_t N = shapes[si][0], h = shapes[si][1];
        for (int k = 0; k < NDTYPES; k++) {
            mc_dtype dt = k_dtypes[k];
            float *x = as_dtype(rnd(N * h, 1.0f), N * h, dt), *w = as_dtype(rnd(h, 1.0f), h, dt);
            float *dy = as_dtype(rnd(N * h, 1.0f), N * h, dt);
            mc_tensor cx = mk2(cpu, F32, x, N, h), cw = mk1(cpu, F32, w, h), cy = mk2(cpu, F32, NULL, N, h);
            mc_tensor cr = mk1(cpu, F32, NULL, N), cd = mk2(cpu, F32, dy, N, h), cdw = mk1(cpu, F32, NULL, h);
            mc_tensor gx = mk2(gpu, dt, x, N, h), gw = mk1(gpu, dt, w, h), gy = mk2(gpu, dt, NULL, N, h);
            mc_tensor gr = mk1(gpu, F32, NULL, N), gd = mk2(gpu, dt, dy, N, h), gdw = mk1(gpu, F32, NULL, h);
            mc_op_rmsnorm_fwd(cpu, &cy, &cr, &cx, &cw, 1e-6f);
            mc_op_rmsnorm_fwd(gpu, &gy, &gr, &gx, &gw, 1e-6f);
            mc_tensor none = mc_tensor_none();
            mc_op_rmsnorm_bwd(cpu, &cd, &cdw, &none, &none, &cd, &cx, &cw, &cr);
            mc_op_rmsnorm_bwd(gpu, &gd, &gdw, &none, &none, &gd, &gx, &gw, &gr);
            char what[96];
            snprintf(what, sizeof what, "rmsnorm_bwd dx aliasing dy (N=%lld h=%lld)", (long long)N, (long long)h);
            cmp(what, dt, dl(gpu, &gd), cd.data, N * h);
            snprintf(what, sizeof what, "rmsnorm_bwd dw (dx aliasing dy, N=%lld h=%lld)", (long long)N, (long long)h);
            cmp(what, dt, dl(gpu, &gdw), cdw.data, h);
        }
        release_all();
    }
}

/* ======================================================================= rope */

static void test_rope(void) {
    int64_t S = 5, B = 3, P = 16;
    int heads = 4, groups = 2, d = 32;
    int rots[2] = {16, 12}; /* half = 8: vector path; half = 6: scalar path */
    for (int ri = 0; ri < 2; ri++) {
        int rot = rots[ri], half = rot / 2;
        float *cosv = halloc(sizeof(float) * P * half), *sinv = halloc(sizeof(float) * P * half);
        for (int64_t i = 0; i < P * half; i++) {
            double ang = 6.283185307179586 * rng_uniform();
            cosv[i] = (float)cos(ang);
            sinv[i] = (float)sin(ang);
        }
        int32_t *pos = halloc(sizeof(int32_t) * S * B);
        for (int64_t t = 0; t < S * B; t++) pos[t] = (int32_t)rng_int(0, P);
        int64_t nqkv = S * B * (heads + 2 * groups) * d;
        for (int k = 0; k < NDTYPES; k++) {
            mc_dtype dt = k_dtypes[k];
            for (int with_pos = 0; with_pos < 2; with_pos++) {
                for (int inv = 0; inv < 2; inv++) {
                    float *q = as_dtype(rnd(nqkv, 1.0f), nqkv, dt);
                    mc_rope_desc cd = {.seq = S, .batch = B, .heads = heads, .groups = groups, .head_dim = d,
                                       .rot_dim = rot, .cos = mk2(cpu, F32, cosv, P, half),
                                       .sin = mk2(cpu, F32, sinv, P, half),
                                       .pos = with_pos ? mk_i32(cpu, pos, S * B) : mc_tensor_none()};
                    mc_rope_desc gd = cd;
                    gd.cos = mk2(gpu, F32, cosv, P, half);
                    gd.sin = mk2(gpu, F32, sinv, P, half);
                    gd.pos = with_pos ? mk_i32(gpu, pos, S * B) : mc_tensor_none();
                    mc_tensor cq = mk1(cpu, F32, q, nqkv), gq = mk1(gpu, dt, q, nqkv);
                    mc_op_rope(cpu, &cq, &cd, inv);
                    mc_op_rope(gpu, &gq, &gd, inv);
                    char what[96];
                    snprintf(what, sizeof what, "rope rot_dim=%d%s%s (GQA 4/2)", rot, with_pos ? " pos ids" : "",
                             inv ? " inverse" : "");
                    cmp(what, dt, dl(gpu, &gq), cq.data, nqkv);
                }
            }
        }
        release_all();
    }
}

/* ======================================================================= activations */

static void test_activations(void) {
    int64_t n = 1003;
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        for (int th = 0; th < 2; th++) {
            float *x = as_dtype(rnd(n, 3.0f), n, dt), *dy = as_dtype(rnd(n, 1.0f), n, dt);
            mc_tensor cx = mk1(cpu, F32, x, n), cy = mk1(cpu, F32, NULL, n), cdy = mk1(cpu, F32, dy, n);
            mc_tensor cdx = mk1(cpu, F32, NULL, n);
            mc_tensor gx = mk1(gpu, dt, x, n), gy = mk1(gpu, dt, NULL, n), gdy = mk1(gpu, dt, dy, n);
            mc_tensor gdx = mk1(gpu, dt, NULL, n), gdy2 = mk1(gpu, dt, dy, n);
            mc_op_gelu_fwd(cpu, &cy, &cx, th);
            mc_op_gelu_fwd(gpu, &gy, &gx, th);
            mc_op_gelu_bwd(cpu, &cdx, &cdy, &cx, th);
            mc_op_gelu_bwd(gpu, &gdx, &gdy, &gx, th);
            mc_op_gelu_bwd(gpu, &gdy2, &gdy2, &gx, th); /* dx aliasing dy */
            cmp(th ? "gelu_fwd tanh" : "gelu_fwd erf", dt, dl(gpu, &gy), cy.data, n);
            cmp(th ? "gelu_bwd tanh" : "gelu_bwd erf", dt, dl(gpu, &gdx), cdx.data, n);
            cmp(th ? "gelu_bwd tanh, dx aliasing dy" : "gelu_bwd erf, dx aliasing dy", dt, dl(gpu, &gdy2), cdx.data, n);
        }
        int64_t N = 13, fs[2] = {40, 37};
        for (int fi = 0; fi < 2; fi++) {
            int64_t f = fs[fi];
            float *x = as_dtype(rnd(N * 2 * f, 2.0f), N * 2 * f, dt), *dy = as_dtype(rnd(N * f, 1.0f), N * f, dt);
            mc_tensor cx = mk2(cpu, F32, x, N, 2 * f), cy = mk2(cpu, F32, NULL, N, f), cdy = mk2(cpu, F32, dy, N, f);
            mc_tensor cdx = mk2(cpu, F32, NULL, N, 2 * f);
            mc_tensor gx = mk2(gpu, dt, x, N, 2 * f), gy = mk2(gpu, dt, NULL, N, f), gdy = mk2(gpu, dt, dy, N, f);
            mc_tensor gdx = mk2(gpu, dt, NULL, N, 2 * f), gyre = mk2(gpu, dt, NULL, N, f), none = mc_tensor_none();
            mc_tensor gx_in = mk2(gpu, dt, x, N, 2 * f);
            mc_op_swiglu_fwd(cpu, &cy, &cx);
            mc_op_swiglu_fwd(gpu, &gy, &gx);
            mc_op_swiglu_bwd(cpu, &cdx, &none, &cdy, &cx);
            mc_op_swiglu_bwd(gpu, &gdx, &none, &gdy, &gx);
            mc_op_swiglu_bwd(gpu, &gx_in, &gyre, &gdy, &gx_in); /* in place, rewriting y: as the model does */
            char what[96];
            snprintf(what, sizeof what, "swiglu_bwd f=%lld in place, rewriting y", (long long)f);
            bool same = memcmp(dl(gpu, &gyre), dl(gpu, &gy), (size_t)(N * f) * 4) == 0 &&
                        memcmp(dl(gpu, &gx_in), dl(gpu, &gdx), (size_t)(N * 2 * f) * 4) == 0;
            printf("  %-52s      %s\n", what, same ? "bitwise equal" : "DIFFER  <-- FAIL");
            CHECK(same, "%s: y or dx differs from the forward's y / the separate dx", what);
            snprintf(what, sizeof what, "swiglu_fwd f=%lld", (long long)f);
            cmp(what, dt, dl(gpu, &gy), cy.data, N * f);
            snprintf(what, sizeof what, "swiglu_bwd f=%lld", (long long)f);
            cmp(what, dt, dl(gpu, &gdx), cdx.data, N * 2 * f);
        }
    }
    release_all();
}

/* ======================================================================= dropout, add, scale */

static void test_dropout(void) {
    int64_t n = 4099;
    uint64_t seed = rng_next(), stream = rng_next() >> 20;
    float ps[2] = {0.1f, 0.0f};
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        for (int pi = 0; pi < 2; pi++) {
            float p = ps[pi];
            float *x = as_dtype(rnd(n, 1.0f), n, dt), *r = as_dtype(rnd(n, 1.0f), n, dt);
            mc_tensor cx = mk1(cpu, F32, x, n), cy = mk1(cpu, F32, NULL, n), cr = mk1(cpu, F32, r, n);
            mc_tensor cdx = mk1(cpu, F32, NULL, n), cya = mk1(cpu, F32, NULL, n);
            mc_tensor gx = mk1(gpu, dt, x, n), gy = mk1(gpu, dt, NULL, n), gr = mk1(gpu, dt, r, n);
            mc_tensor gdx = mk1(gpu, dt, NULL, n), gya = mk1(gpu, dt, NULL, n), gres = mk1(gpu, dt, r, n);
            mc_op_dropout_fwd(cpu, &cy, &cx, p, seed, stream);
            mc_op_dropout_fwd(gpu, &gy, &gx, p, seed, stream);
            mc_op_dropout_bwd(cpu, &cdx, &cx, p, seed, stream + 1);
            mc_op_dropout_bwd(gpu, &gdx, &gx, p, seed, stream + 1);
            mc_op_dropout_add_fwd(cpu, &cya, &cr, &cx, p, seed, stream + 2);
            mc_op_dropout_add_fwd(gpu, &gya, &gr, &gx, p, seed, stream + 2);
            mc_op_dropout_add_fwd(gpu, &gres, &gres, &gx, p, seed, stream + 2); /* y aliasing residual */
            char what[96];
            snprintf(what, sizeof what, "dropout_fwd p=%g", (double)p);
            cmp(what, dt, dl(gpu, &gy), cy.data, n);
            snprintf(what, sizeof what, "dropout_bwd p=%g", (double)p);
            cmp(what, dt, dl(gpu, &gdx), cdx.data, n);
            snprintf(what, sizeof what, "dropout_add_fwd p=%g", (double)p);
            cmp(what, dt, dl(gpu, &gya), cya.data, n);
            snprintf(what, sizeof what, "dropout_add_fwd p=%g, y aliasing residual", (double)p);
            cmp(what, dt, dl(gpu, &gres), cya.data, n);
            if (p > 0 && dt == F32) { /* the masks agree exactly */
                float *g = dl(gpu, &gy);
                int64_t mism = 0;
                for (int64_t i = 0; i < n; i++) mism += (g[i] == 0.0f) != (((float *)cy.data)[i] == 0.0f);
                printf("  %-52s      %lld mask mismatches\n", "dropout mask vs CPU", (long long)mism);
                CHECK(mism == 0, "dropout masks differ in %lld places", (long long)mism);
            }
        }
        /* unaligned (odd offset) views: the scalar path */
        {
            float *x = as_dtype(rnd(n, 1.0f), n, dt);
            mc_tensor cx = mk1(cpu, F32, x, n), cy = mk1(cpu, F32, NULL, n);
            mc_tensor gx = mk1(gpu, dt, x, n), gy = mk1(gpu, dt, NULL, n);
            size_t es = mc_dtype_size(dt);
            mc_tensor cxv = mc_tensor_1d((char *)cx.data + 4, F32, n - 1), cyv = mc_tensor_1d((char *)cy.data + 4, F32, n - 1);
            mc_tensor gxv = mc_tensor_1d((char *)gx.data + es, dt, n - 1), gyv = mc_tensor_1d((char *)gy.data + es, dt, n - 1);
            mc_op_dropout_fwd(cpu, &cxv, &cxv, 0.2f, seed, stream + 5); /* in place */
            mc_op_dropout_fwd(gpu, &gxv, &gxv, 0.2f, seed, stream + 5);
            mc_op_dropout_fwd(cpu, &cyv, &cxv, 0.3f, seed, stream + 6);
            mc_op_dropout_fwd(gpu, &gyv, &gxv, 0.3f, seed, stream + 6);
            cmp("dropout_fwd unaligned views, in place", dt, dl(gpu, &gx), cx.data, n);
            cmp("dropout_fwd unaligned views", dt, dl(gpu, &gy), cy.data, n);
        }
        /* add_inplace and scale_inplace */
        {
            float *a = as_dtype(rnd(n, 1.0f), n, dt), *b = as_dtype(rnd(n, 1.0f), n, dt);
            mc_tensor ca = mk1(cpu, F32, a, n), cb = mk1(cpu, F32, b, n), ga = mk1(gpu, dt, a, n), gb = mk1(gpu, dt, b, n);
            mc_op_add_inplace(cpu, &ca, &cb);
            mc_op_add_inplace(gpu, &ga, &gb);
            cmp("add_inplace", dt, dl(gpu, &ga), ca.data, n);
            mc_op_scale_inplace(cpu, &ca, 0.37f);
            mc_op_scale_inplace(gpu, &ga, 0.37f);
            cmp("scale_inplace", dt, dl(gpu, &ga), ca.data, n);
        }
    }
    release_all();
}

/* ======================================================================= cross-entropy */

static void xent_case(int64_t N, int64_t V, int64_t vocab_start, mc_dtype dt, bool alias) {
    float *logits = as_dtype(rnd(N * V, 4.0f), N * V, dt);
    int32_t *tg = halloc(sizeof(int32_t) * N);
    float *mask = halloc(sizeof(float) * N);
    for (int64_t i = 0; i < N; i++) {
        tg[i] = (int32_t)rng_int(0, vocab_start + V + V / 2); /* some targets off this rank */
        mask[i] = (i % 5 == 3) ? 0.0f : 1.0f;
    }
    tg[0] = (int32_t)vocab_start;          /* first local id */
    tg[N - 1] = (int32_t)(vocab_start + V - 1); /* last local id */
    float gs = 0.37f;
    mc_tensor cl = mk2(cpu, F32, logits, N, V), crm = mk1(cpu, F32, NULL, N), cst = mk2(cpu, F32, NULL, 2, N);
    mc_tensor closs = mk1(cpu, F32, NULL, N), cdl = mk2(cpu, F32, NULL, N, V);
    mc_tensor ctg = mk_i32(cpu, tg, N), cmask = mk1(cpu, F32, mask, N);
    mc_tensor gl = mk2(gpu, dt, logits, N, V), grm = mk1(gpu, F32, NULL, N), gst = mk2(gpu, F32, NULL, 2, N);
    mc_tensor gloss = mk1(gpu, F32, NULL, N), gdl = alias ? gl : mk2(gpu, dt, NULL, N, V);
    mc_tensor gtg = mk_i32(gpu, tg, N), gmask = mk1(gpu, F32, mask, N);
    mc_op_xent_rowstats(cpu, &crm, &cst, &cl, &ctg, vocab_start);
    mc_op_xent_rowstats(gpu, &grm, &gst, &gl, &gtg, vocab_start);
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "xent N=%lld V=%lld start=%lld", (long long)N, (long long)V, (long long)vocab_start);
    snprintf(what, sizeof what, "%s rowmax", tag);
    cmp(what, dt, dl(gpu, &grm), crm.data, N);
    snprintf(what, sizeof what, "%s stats", tag);
    cmp(what, dt, dl(gpu, &gst), cst.data, 2 * N);
    { /* the tensor-parallel rescale, to a larger "group" max */
        float *gm = halloc(sizeof(float) * N);
        float *lm = dl(gpu, &grm);
        for (int64_t i = 0; i < N; i++) gm[i] = lm[i] + 0.25f * (float)(i % 3);
        mc_tensor cg = mk1(cpu, F32, gm, N), gg = mk1(gpu, F32, gm, N);
        mc_tensor cs2 = mk2(cpu, F32, dl(gpu, &gst), 2, N), gs2 = mk2(gpu, F32, dl(gpu, &gst), 2, N);
        mc_tensor cl2 = mk1(cpu, F32, lm, N);
        mc_op_xent_rescale(cpu, &cs2, &cl2, &cg);
        mc_op_xent_rescale(gpu, &gs2, &grm, &gg);
        snprintf(what, sizeof what, "%s rescaled stats", tag);
        cmp(what, F32, dl(gpu, &gs2), cs2.data, 2 * N);
    }
    /* loss only (no dlogits), then loss and gradient */
    mc_tensor none = mc_tensor_none(), gloss2 = mk1(gpu, F32, NULL, N);
    mc_op_xent_loss_grad(gpu, &gloss2, &none, &gl, &grm, &gst, &gtg, &gmask, vocab_start, gs);
    mc_op_xent_loss_grad(cpu, &closs, &cdl, &cl, &crm, &cst, &ctg, &cmask, vocab_start, gs);
    mc_op_xent_loss_grad(gpu, &gloss, &gdl, &gl, &grm, &gst, &gtg, &gmask, vocab_start, gs);
    snprintf(what, sizeof what, "%s loss (no dlogits)", tag);
    cmp(what, dt, dl(gpu, &gloss2), closs.data, N);
    snprintf(what, sizeof what, "%s loss", tag);
    cmp(what, dt, dl(gpu, &gloss), closs.data, N);
    snprintf(what, sizeof what, "%s dlogits%s", tag, alias ? " (aliasing logits)" : "");
    cmp(what, dt, dl(gpu, &gdl), cdl.data, N * V);
    release_all();
}

/* Inputs of an xent_fused case: logits rounded to dt, targets and a mask. Targets include
 * both ends of the row, -1, V (off the row) and both sides of every slice edge of a 2-, 4-
 * and 8-block cluster split, the rest random with a third of them off the row; masks have
 * zeros and a 0.5. */
static void xent_fused_inputs(int64_t N, int64_t V, mc_dtype dt, float **logits, int32_t **targets, float **mask) {
    *logits = as_dtype(rnd(N * V, 4.0f), N * V, dt);
    int32_t *tg = halloc(sizeof(int32_t) * N);
    float *mk = halloc(sizeof(float) * N);
    for (int64_t i = 0; i < N; i++) {
        tg[i] = (int32_t)rng_int(0, V + V / 2);
        mk[i] = (i % 5 == 3) ? 0.0f : (i % 7 == 2) ? 0.5f : 1.0f;
    }
    const int64_t s2 = ((V + 1) / 2 + 7) / 8 * 8, s4 = ((V + 3) / 4 + 7) / 8 * 8, s8 = ((V + 7) / 8 + 7) / 8 * 8;
    const int64_t edges[] = {0,      V - 1,      -1,     V,          s2 - 1, s2,         s4 - 1,     s4,
                             2 * s4 - 1, 2 * s4, 3 * s4 - 1, 3 * s4, s8 - 1, s8,         3 * s8 - 1, 3 * s8,
                             7 * s8 - 1, 7 * s8};
    for (int64_t i = 0; i < N && i < (int64_t)(sizeof edges / sizeof edges[0]); i++) tg[i] = (int32_t)edges[i];
    *targets = tg;
    *mask = mk;
}

/* The one-pass op (no tensor parallelism) against the CPU's, which is rowstats then
 * loss_grad: loss without dlogits, then loss and dlogits twice (fresh logits each time when
 * dlogits aliases them), the two runs bitwise equal and their loss bitwise the loss-only
 * one's. */
/* Inputs for xent_fused [N, V] and the CPU's loss and dlogits of them (grad scale 0.37). */
typedef struct {
    float *logits, *mask;
    int32_t *tg;
    float gs;
    mc_tensor closs, cdl;
} xent_fused_ref;

static xent_fused_ref xent_fused_reference(int64_t N, int64_t V, mc_dtype dt) {
    xent_fused_ref r = {.gs = 0.37f};
    xent_fused_inputs(N, V, dt, &r.logits, &r.tg, &r.mask);
    mc_tensor cl = mk2(cpu, F32, r.logits, N, V), ctg = mk_i32(cpu, r.tg, N), cmask = mk1(cpu, F32, r.mask, N);
    r.closs = mk1(cpu, F32, NULL, N);
    r.cdl = mk2(cpu, F32, NULL, N, V);
    mc_op_xent_fused(cpu, &r.closs, &r.cdl, &cl, &ctg, &cmask, r.gs);
    return r;
}

static void xent_fused_case(int64_t N, int64_t V, mc_dtype dt, bool alias) {
    xent_fused_ref ref = xent_fused_reference(N, V, dt);
    const float *logits = ref.logits, gs = ref.gs;
    mc_tensor closs = ref.closs, cdl = ref.cdl;
    mc_tensor gtg = mk_i32(gpu, ref.tg, N), gmask = mk1(gpu, F32, ref.mask, N), none = mc_tensor_none();
    mc_tensor gl = mk2(gpu, dt, logits, N, V), gloss0 = mk1(gpu, F32, NULL, N);
    mc_op_xent_fused(gpu, &gloss0, &none, &gl, &gtg, &gmask, gs);
    mc_tensor gloss[2], gdl[2];
    for (int r = 0; r < 2; r++) {
        mc_tensor l = r == 0 && !alias ? gl : mk2(gpu, dt, logits, N, V);
        gloss[r] = mk1(gpu, F32, NULL, N);
        gdl[r] = alias ? l : mk2(gpu, dt, NULL, N, V);
        mc_op_xent_fused(gpu, &gloss[r], &gdl[r], &l, &gtg, &gmask, gs);
    }
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "xent_fused N=%lld V=%lld", (long long)N, (long long)V);
    snprintf(what, sizeof what, "%s loss (no dlogits)", tag);
    cmp(what, dt, dl(gpu, &gloss0), closs.data, N);
    snprintf(what, sizeof what, "%s loss", tag);
    cmp(what, dt, dl(gpu, &gloss[0]), closs.data, N);
    snprintf(what, sizeof what, "%s dlogits%s", tag, alias ? " (aliasing logits)" : "");
    cmp(what, dt, dl(gpu, &gdl[0]), cdl.data, N * V);
    size_t lb = (size_t)N * sizeof(float), db = (size_t)(N * V) * mc_dtype_size(dt);
    snprintf(what, sizeof what, "%s %s loss: two runs", tag, mc_dtype_name(dt));
    same_bits(what, dl_raw(gpu, gloss[0].data, lb), dl_raw(gpu, gloss[1].data, lb), lb);
    snprintf(what, sizeof what, "%s %s dlogits: two runs", tag, mc_dtype_name(dt));
    same_bits(what, dl_raw(gpu, gdl[0].data, db), dl_raw(gpu, gdl[1].data, db), db);
    snprintf(what, sizeof what, "%s %s loss: with and without dlogits", tag, mc_dtype_name(dt));
    same_bits(what, dl_raw(gpu, gloss0.data, lb), dl_raw(gpu, gloss[0].data, lb), lb);
    release_all();
}

/* dlogits one element past a 16-byte boundary, logits aligned: the streaming kernel cannot
 * store them, the one-cluster-a-row kernel does, and the loss must still be the bits of a
 * call without dlogits (which streams). */
static void xent_fused_unaligned_case(int64_t N, int64_t V, mc_dtype dt) {
    xent_fused_ref ref = xent_fused_reference(N, V, dt);
    const float *logits = ref.logits, gs = ref.gs;
    mc_tensor closs = ref.closs, cdl = ref.cdl;
    mc_tensor gtg = mk_i32(gpu, ref.tg, N), gmask = mk1(gpu, F32, ref.mask, N), none = mc_tensor_none();
    mc_tensor gl = mk2(gpu, dt, logits, N, V), gloss0 = mk1(gpu, F32, NULL, N), gloss = mk1(gpu, F32, NULL, N);
    const size_t esz = mc_dtype_size(dt);
    char *base = balloc(gpu, (size_t)(N * V + 8) * esz);
    mc_tensor gdl = mc_tensor_2d(base + esz, dt, N, V);
    mc_op_xent_fused(gpu, &gloss0, &none, &gl, &gtg, &gmask, gs);
    mc_op_xent_fused(gpu, &gloss, &gdl, &gl, &gtg, &gmask, gs);
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "xent_fused N=%lld V=%lld", (long long)N, (long long)V);
    snprintf(what, sizeof what, "%s loss (dlogits unaligned)", tag);
    cmp(what, dt, dl(gpu, &gloss), closs.data, N);
    snprintf(what, sizeof what, "%s dlogits unaligned", tag);
    cmp(what, dt, dl(gpu, &gdl), cdl.data, N * V);
    size_t lb = (size_t)N * sizeof(float);
    snprintf(what, sizeof what, "%s %s loss: unaligned dlogits and none", tag, mc_dtype_name(dt));
    same_bits(what, dl_raw(gpu, gloss0.data, lb), dl_raw(gpu, gloss.data, lb), lb);
    release_all();
}

static void test_xent(void) {
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        xent_case(37, 4096, 500, dt, false); /* vector path */
        xent_case(37, 1003, 77, dt, false);  /* scalar path */
        xent_case(21, 4096, 0, dt, true);    /* dlogits aliasing logits */
        xent_case(4, 128256, 128256, dt, false); /* Llama-3 vocab, second TP rank */
    }
}

/* Cluster sizes of the streaming kernel on the H200 (16-bit / F32; a whole row a block while
 * two stages of it fit in ~113 KiB each): V 4096: 1 / 1; 24576: 1 / 1; 30720: 1 / 4; 50304:
 * 1 / 8; 61440: 4 / 8; 128256: 8 / 8 with 64 KiB stages; 300000: 8 with 73 KiB stages / too
 * long (the two passes). The larger N give every cluster four rows or more, so both stages
 * and both parities of their mbarriers turn over; V 8, 40 and 200 leave warps without a
 * chunk; odd V and the unaligned dlogits take the one-cluster-a-row kernel. */
static void test_xent_fused(void) {
    for (int k = 0; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        xent_fused_case(37, 4096, dt, false);   /* one block a row, 16-byte path */
        xent_fused_case(37, 1003, dt, false);   /* odd V: element path */
        xent_fused_case(21, 4096, dt, true);    /* dlogits aliasing logits */
        xent_fused_case(16, 50304, dt, false);  /* GPT-2's padded vocab */
        xent_fused_case(16, 50257, dt, false);  /* GPT-2's vocab unpadded: clusters, element path */
        xent_fused_case(13, 128256, dt, false); /* Llama 3's vocab */
        xent_fused_case(13, 128256, dt, true);  /* ... aliasing, across a cluster */
        xent_fused_case(3, 300001, dt, false);  /* 16 bits: 4 x 147 KiB slices; F32 too long: the two passes */
        xent_fused_case(3, 300000, dt, false);  /* 16 bits: streamed, 8 x 73 KiB; F32: the two passes */
        xent_fused_case(9, 8, dt, false);       /* one group a row: one warp with a chunk */
        xent_fused_case(11, 40, dt, false);
        xent_fused_case(7, 200, dt, true);
        xent_fused_case(2701, 4096, dt, false); /* at least 4 rows a cluster (H200: 660, 264, 132, ~49 clusters) */
        xent_fused_case(1103, 24576, dt, true);
        xent_fused_case(601, 50304, dt, false);
        xent_fused_case(211, 128256, dt, false);
        xent_fused_case(400, 61440, dt, false);
        xent_fused_case(400, 30720, dt, true);
        xent_fused_unaligned_case(37, 4096, dt);
        xent_fused_unaligned_case(13, 50304, dt);
    }
}

/* ======================================================================= attention */

typedef struct {
    int64_t S, B;
    int heads, groups, d;
    float dropout;
    bool seg;
    int rot; /* > 0: rope's backward in the same call (mc_attn_desc.rope), rotating rot dims */
} attn_cfg;

/* Rope tables [S, rot/2] of Llama's kind (base 10000), on backend be. */
static void rope_tables(mc_backend *be, int64_t S, int rot, mc_tensor *c, mc_tensor *sn) {
    int half = rot / 2;
    float *cv = halloc(sizeof(float) * (size_t)(S * half)), *sv = halloc(sizeof(float) * (size_t)(S * half));
    for (int64_t p = 0; p < S; p++)
        for (int k = 0; k < half; k++) {
            double a = (double)p * pow(10000.0, -2.0 * k / rot);
            cv[p * half + k] = (float)cos(a), sv[p * half + k] = (float)sin(a);
        }
    *c = mk2(be, F32, cv, S, half), *sn = mk2(be, F32, sv, S, half);
}

static void attention_case(const attn_cfg *a, mc_dtype dt) {
    int64_t S = a->S, B = a->B;
    int64_t nqkv = S * B * (a->heads + 2 * a->groups) * a->d, nout = S * B * a->heads * a->d;
    int64_t nlse = B * a->heads * S;
    float *qkv = as_dtype(rnd(nqkv, 1.0f), nqkv, dt), *dout = as_dtype(rnd(nout, 1.0f), nout, dt);
    int32_t *seg = halloc(sizeof(int32_t) * B * S);
    for (int64_t b = 0; b < B; b++) { /* documents of random lengths in each sequence */
        int64_t start = 0;
        for (int64_t s = 0; s < S; s++) {
            if (s > 0 && rng_uniform() < 0.1) start = s;
            seg[b * S + s] = (int32_t)start;
        }
    }
    mc_attn_desc cd = {.seq = S, .batch = B, .heads = a->heads, .groups = a->groups, .head_dim = a->d,
                       .softmax_scale = (float)(1.0 / sqrt((double)a->d)), .dropout = a->dropout,
                       .seed = rng_next(), .stream = rng_next() >> 16,
                       .seg_start = a->seg ? mk_i32(cpu, seg, B * S) : mc_tensor_none()};
    mc_attn_desc gd = cd;
    gd.seg_start = a->seg ? mk_i32(gpu, seg, B * S) : mc_tensor_none();
    mc_rope_desc crd = {.seq = S, .batch = B, .heads = a->heads, .groups = a->groups, .head_dim = a->d,
                        .rot_dim = a->rot, .pos = mc_tensor_none()};
    mc_rope_desc grd = crd;
    if (a->rot > 0) {
        rope_tables(cpu, S, a->rot, &crd.cos, &crd.sin);
        rope_tables(gpu, S, a->rot, &grd.cos, &grd.sin);
        cd.rope = &crd, gd.rope = &grd;
    }
    mc_tensor cq = mk1(cpu, F32, qkv, nqkv), co = mk1(cpu, F32, NULL, nout), cl = mk1(cpu, F32, NULL, nlse);
    mc_tensor cdo = mk1(cpu, F32, dout, nout), cdq = mk1(cpu, F32, NULL, nqkv);
    mc_tensor gq = mk1(gpu, dt, qkv, nqkv), go = mk1(gpu, dt, NULL, nout), gl = mk1(gpu, F32, NULL, nlse);
    mc_tensor gdo = mk1(gpu, dt, dout, nout), gdq = mk1(gpu, dt, NULL, nqkv), gdq2 = mk1(gpu, dt, NULL, nqkv);
    mc_tensor gdq3 = mk1(gpu, dt, NULL, nqkv), gdq4 = mk1(gpu, dt, NULL, nqkv);
    /* dbias += dqkv's column sums, from a nonzero start */
    int64_t width = (int64_t)(a->heads + 2 * a->groups) * a->d;
    float *bias0 = rnd(width, 0.1f);
    mc_tensor cdb = mk1(cpu, F32, bias0, width), gdb = mk1(gpu, F32, bias0, width), gdb2 = mk1(gpu, F32, bias0, width);
    mc_tensor gdb3 = mk1(gpu, F32, bias0, width);
    mc_op_attention_fwd(cpu, &co, &cl, &cq, &cd);
    mc_op_attention_bwd(cpu, &cdq, &cdb, &cdo, &cq, &co, &cl, &cd);
    mc_op_attention_fwd(gpu, &go, &gl, &gq, &gd);
    /* backward from the GPU's own forward output (as in training): once as training runs by
     * default (atomics allowed), then deterministic three times: with the column sums,
     * without (dqkv the same bits), with them again (dbias the same bits) */
    mc_attn_desc gdd = gd;
    gdd.deterministic = true;
    mc_op_attention_bwd(gpu, &gdq, &gdb, &gdo, &gq, &go, &gl, &gd);
    mc_op_attention_bwd(gpu, &gdq2, &gdb2, &gdo, &gq, &go, &gl, &gdd);
    mc_op_attention_bwd(gpu, &gdq3, NULL, &gdo, &gq, &go, &gl, &gdd);
    mc_op_attention_bwd(gpu, &gdq4, &gdb3, &gdo, &gq, &go, &gl, &gdd);
    char tag[96], what[160];
    snprintf(tag, sizeof tag, "attention S=%lld B=%lld h=%d/g=%d d=%d%s%s%s", (long long)S, (long long)B, a->heads,
             a->groups, a->d, a->seg ? " seg" : "", a->dropout > 0 ? " drop" : "", a->rot > 0 ? " +rope bwd" : "");
    snprintf(what, sizeof what, "%s out", tag);
    cmp(what, dt, dl(gpu, &go), co.data, nout);
    snprintf(what, sizeof what, "%s lse (F32)", tag);
    cmp(what, dt, dl(gpu, &gl), cl.data, nlse);
    float *d0 = dl(gpu, &gdq), *d1 = dl(gpu, &gdq2), *d2 = dl(gpu, &gdq3), *d3 = dl(gpu, &gdq4);
    snprintf(what, sizeof what, "%s dqkv", tag);
    cmp(what, dt, d0, cdq.data, nqkv);
    snprintf(what, sizeof what, "%s dqkv (deterministic)", tag);
    cmp(what, dt, d1, cdq.data, nqkv);
    snprintf(what, sizeof what, "%s bwd determinism (%s)", tag, mc_dtype_name(dt));
    same_bits(what, d1, d2, (size_t)nqkv * 4);
    same_bits(what, d1, d3, (size_t)nqkv * 4);
    float *b0 = dl(gpu, &gdb), *b1 = dl(gpu, &gdb2), *b2 = dl(gpu, &gdb3);
    snprintf(what, sizeof what, "%s dbias", tag);
    cmp(what, dt, b0, cdb.data, width);
    cmp(what, dt, b1, cdb.data, width);
    snprintf(what, sizeof what, "%s dbias determinism (%s)", tag, mc_dtype_name(dt));
    same_bits(what, b1, b2, (size_t)width * 4);
    release_all();
}

/* attention_kv_fwd (generation): sequences of their own lengths in one cache, on both
 * backends: each prompt (S0[b] tokens) into its slot, then calls over all B sequences, the
 * first with two new tokens a sequence, each token at its own position (a sequence at its
 * end repeats its last positions); the GPU's outputs and cache against the CPU's. */
static void attention_kv_case(int64_t B, const int64_t *S0, const int64_t *S, int heads, int groups, int d, mc_dtype dt) {
    const int64_t ts = (int64_t)(heads + 2 * groups) * d, ho = (int64_t)heads * d, per_pos = (int64_t)groups * 2 * d;
    int64_t cap = 0;
    for (int64_t b = 0; b < B; b++) cap = S[b] > cap ? S[b] : cap;
    float **seq = malloc(sizeof(float *) * (size_t)B);
    for (int64_t b = 0; b < B; b++) seq[b] = as_dtype(rnd(S[b] * ts, 1.0f), S[b] * ts, dt); /* [S[b], 1] qkv */
    mc_tensor cc = mk1(cpu, F32, NULL, B * cap * per_pos), gc = mk1(gpu, dt, NULL, B * cap * per_pos);
    mc_attn_desc desc = {.heads = heads, .groups = groups, .head_dim = d, .softmax_scale = (float)(1.0 / sqrt((double)d)),
                         .seg_start = mc_tensor_none()};
    char what[160];
    int64_t *at = malloc(sizeof(int64_t) * (size_t)B);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)(cap * B));
    float *q = malloc(sizeof(float) * (size_t)(cap * B * ts));
    /* a call's operands, of the most tokens one takes (the longest prompt, or 2 B) */
    const int64_t most = cap > 2 * B ? cap : 2 * B;
    mc_tensor bq = mk1(cpu, F32, NULL, most * ts), bo = mk1(cpu, F32, NULL, most * ho), bgq = mk1(gpu, dt, NULL, most * ts);
    mc_tensor bgo = mk1(gpu, dt, NULL, most * ho);
    mc_tensor bp = mc_tensor_1d(balloc(cpu, (size_t)most * 4), MC_I32, most);
    mc_tensor bgp = mc_tensor_1d(balloc(gpu, (size_t)most * 4), MC_I32, most);
    float *got = NULL, *want = NULL;
    int64_t nout = 0;
    for (int64_t step = -B;; step++) { /* steps -B .. -1: the prompts; then the batched calls */
        int64_t n, batch = B, slot0 = 0;
        if (step < 0) {
            const int64_t b = step + B;
            n = S0[b];
            batch = 1;
            slot0 = b;
            for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)i;
            memcpy(q, seq[b], sizeof(float) * (size_t)(n * ts));
            at[b] = n;
        } else {
            bool more = false;
            for (int64_t b = 0; b < B; b++) more = more || at[b] < S[b];
            if (!more) break;
            n = step == 0 ? 2 : 1;
            for (int64_t s = 0; s < n; s++)
                for (int64_t b = 0; b < B; b++) {
                    const int64_t p = (at[b] < S[b] - n ? at[b] : S[b] - n) + s, t = s * B + b;
                    pos[t] = (int32_t)p;
                    memcpy(q + t * ts, seq[b] + p * ts, sizeof(float) * (size_t)ts);
                }
            for (int64_t t = 0; t < n * B; t++) at[t % B] = pos[t] + 1 > at[t % B] ? pos[t] + 1 : at[t % B];
        }
        desc.seq = n;
        desc.batch = batch;
        const int64_t nt = n * batch;
        mc_tensor cq = mc_tensor_1d(bq.data, F32, nt * ts), co = mc_tensor_1d(bo.data, F32, nt * ho);
        mc_tensor gq = mc_tensor_1d(bgq.data, dt, nt * ts), go = mc_tensor_1d(bgo.data, dt, nt * ho);
        mc_tensor cp = mc_tensor_1d(bp.data, MC_I32, nt), gp = mc_tensor_1d(bgp.data, MC_I32, nt);
        upload(cpu, cq.data, F32, q, nt * ts);
        upload(gpu, gq.data, dt, q, nt * ts);
        cpu->copy_h2d(cpu, cp.data, pos, (size_t)nt * 4);
        gpu->copy_h2d(gpu, gp.data, pos, (size_t)nt * 4);
        mc_tensor cs = mc_tensor_1d((float *)cc.data + slot0 * cap * per_pos, F32, batch * cap * per_pos);
        mc_tensor gs = mc_tensor_1d((char *)gc.data + (size_t)(slot0 * cap * per_pos) * mc_dtype_size(dt), dt,
                                    batch * cap * per_pos);
        mc_op_attention_kv_fwd(cpu, &co, &cs, &cq, &cp, &desc);
        mc_op_attention_kv_fwd(gpu, &go, &gs, &gq, &gp, &desc);
        float *g = dl(gpu, &go); /* every call's outputs, compared together at the end */
        got = realloc(got, sizeof(float) * (size_t)(nout + nt * ho));
        want = realloc(want, sizeof(float) * (size_t)(nout + nt * ho));
        memcpy(got + nout, g, sizeof(float) * (size_t)(nt * ho));
        memcpy(want + nout, co.data, sizeof(float) * (size_t)(nt * ho));
        nout += nt * ho;
    }
    snprintf(what, sizeof what, "attention_kv B=%lld h=%d/g=%d d=%d out", (long long)B, heads, groups, d);
    cmp(what, dt, got, want, nout);
    snprintf(what, sizeof what, "attention_kv B=%lld h=%d/g=%d d=%d cache", (long long)B, heads, groups, d);
    cmp(what, dt, dl(gpu, &gc), cc.data, B * cap * per_pos);
    free(seq);
    free(at);
    free(pos);
    free(q);
    free(got);
    free(want);
    release_all();
}

static void test_attention_kv(void) {
    static const int64_t s0a[] = {60, 5}, sa[] = {70, 40}, s0b[] = {1}, sb[] = {40};
    static const int64_t s0c[] = {3, 17, 1, 9}, sc[] = {20, 19, 12, 300};
    for (size_t k = 0; k < sizeof k_dtypes / sizeof k_dtypes[0]; k++) {
        attention_kv_case(2, s0a, sa, 8, 2, 128, k_dtypes[k]);
        attention_kv_case(1, s0b, sb, 4, 4, 64, k_dtypes[k]);
        attention_kv_case(4, s0c, sc, 8, 8, 64, k_dtypes[k]); /* four lengths, one past a 256-key block */
    }
}

/* argmax_rows (generation's greedy choice): the same ids as the CPU's on the same values
 * (each dtype's, rounded), over 1 and 2 vocabulary shards, with ties and padding ids. */
static void argmax_case(int64_t n, int64_t shards, int64_t cols, int64_t vocab, mc_dtype dt) {
    float *x = as_dtype(rnd(shards * n * cols, 4.0f), shards * n * cols, dt);
    for (int64_t b = 0; b < n; b += 3) { /* a tie between the row's first id and a later one, both the largest */
        x[b * cols] = 50.0f;
        x[((shards - 1) * n + b) * cols + cols / 2] = 50.0f;
    }
    int32_t *got = halloc(sizeof(int32_t) * (size_t)n), *want = halloc(sizeof(int32_t) * (size_t)n);
    mc_tensor cx = mk2(cpu, F32, x, shards * n, cols), gx = mk2(gpu, dt, x, shards * n, cols);
    mc_tensor ci = mc_tensor_1d(want, MC_I32, n), gi = mc_tensor_1d(balloc(gpu, (size_t)n * 4), MC_I32, n);
    mc_op_argmax_rows(cpu, &ci, &cx, vocab);
    mc_op_argmax_rows(gpu, &gi, &gx, vocab);
    gpu->copy_d2h(gpu, got, gi.data, (size_t)n * 4);
    int64_t differ = 0;
    for (int64_t b = 0; b < n; b++) differ += got[b] != want[b];
    printf("  argmax_rows n=%lld shards=%lld V=%lld vocab=%lld %-4s %lld ids differ\n", (long long)n, (long long)shards,
           (long long)cols, (long long)vocab, mc_dtype_name(dt), (long long)differ);
    CHECK(differ == 0, "argmax_rows n=%lld shards=%lld (%s): %lld ids differ from the CPU's", (long long)n,
          (long long)shards, mc_dtype_name(dt), (long long)differ);
    release_all();
}

static void test_argmax_rows(void) {
    for (int k = 0; k < NDTYPES; k++) {
        argmax_case(32, 1, 128256, 128256, k_dtypes[k]); /* a decode step of Llama 3 */
        argmax_case(7, 2, 64128, 128000, k_dtypes[k]);   /* TP 2's gathered shards, padding ids left out */
        argmax_case(1, 1, 300, 257, k_dtypes[k]);        /* rows not 16-byte aligned: element loads */
        argmax_case(3, 1, 50304, 50257, k_dtypes[k]);    /* GPT-2's padded vocabulary: a part group at the end */
    }
}

/* decode_advance (a pipelined decode's next inputs): the CPU's tokens and positions, a
 * position at the cache's end held there. */
static void test_decode_advance(void) {
    enum { N = 5, CAP = 10 };
    const int32_t ids[N] = {7, 0, 50256, 3, 128000}, pos0[N] = {0, 8, 9, 4, 2};
    int32_t want_t[N + 1] = {0}, want_p[N + 1], got_t[N + 1], got_p[N + 1];
    memcpy(want_p, pos0, sizeof pos0);
    want_p[N] = want_t[N] = -1; /* past the ids: left alone */
    mc_tensor ct = mc_tensor_1d(want_t, MC_I32, N + 1), cp = mc_tensor_1d(want_p, MC_I32, N + 1);
    mc_tensor ci = mc_tensor_1d((void *)ids, MC_I32, N);
    mc_tensor gt = mc_tensor_1d(balloc(gpu, sizeof want_t), MC_I32, N + 1), gp = mc_tensor_1d(balloc(gpu, sizeof want_p), MC_I32, N + 1);
    mc_tensor gi = mc_tensor_1d(balloc(gpu, sizeof ids), MC_I32, N);
    gpu->copy_h2d(gpu, gt.data, want_t, sizeof want_t);
    gpu->copy_h2d(gpu, gp.data, want_p, sizeof want_p);
    gpu->copy_h2d(gpu, gi.data, ids, sizeof ids);
    mc_op_decode_advance(cpu, &ct, &cp, &ci, CAP);
    mc_op_decode_advance(gpu, &gt, &gp, &gi, CAP);
    gpu->copy_d2h(gpu, got_t, gt.data, sizeof got_t);
    gpu->copy_d2h(gpu, got_p, gp.data, sizeof got_p);
    CHECK(want_p[0] == 1 && want_p[2] == CAP - 1 && want_p[N] == -1 && want_t[4] == 128000,
          "decode_advance on the CPU: positions %d %d %d, token %d", want_p[0], want_p[2], want_p[N], want_t[4]);
    CHECK(memcmp(got_t, want_t, sizeof got_t) == 0 && memcmp(got_p, want_p, sizeof got_p) == 0,
          "decode_advance: the GPU's tokens or positions differ from the CPU's");
    printf("  decode_advance n=%d cap=%d: %s\n", N, CAP, memcmp(got_p, want_p, sizeof got_p) ? "differ" : "same");
    release_all();
}

static void test_attention(void) {
    attn_cfg cfgs[] = {
        {67, 2, 4, 2, 64, 0.0f, false},  /* GQA, ragged sequence */
        {67, 2, 4, 2, 64, 0.1f, true},   /* GQA, documents, dropout */
        {128, 1, 2, 2, 128, 0.0f, true}, /* MHA, head_dim 128 */
        {33, 3, 6, 1, 32, 0.0f, false},  /* MQA, small head_dim */
        {130, 2, 4, 2, 64, 0.0f, false, 64}, /* rope's backward: dQ rotated by its store on the wgmma path */
        {67, 2, 4, 2, 64, 0.1f, false, 64},  /* the same where the rope kernel rotates it all */
        {67, 2, 4, 2, 64, 0.0f, false, 32},  /* partial rotary */
        /* head_dim 128, the Llama 2/3 heads (on cuDNN's attention where it is present, else
         * ours): GQA, MHA, rope's backward, and a longer sequence */
        {200, 2, 8, 2, 128, 0.0f, false},
        {133, 2, 4, 4, 128, 0.0f, false},
        {130, 1, 4, 1, 128, 0.0f, false, 128},
        {1024, 1, 4, 1, 128, 0.0f, false},
    };
    for (int k = 0; k < NDTYPES; k++)
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) attention_case(&cfgs[c], k_dtypes[k]);
}

/* ======================================================================= optimizer */

/* A sharded optimizer state, as with the distributed optimizer: segments sit at `offset`
 * in the state buffers (param, exp_avg, exp_avg_sq: ns elements) and at `grad_offset` in
 * the model's grad and param_copy (n elements). */
static void adamw_case(mc_dtype copy_dt) {
    int64_t n = 12000, ns = 10000;
    mc_adamw_segment segs[] = {
        {.offset = 0, .count = 100, .grad_offset = 2000, .weight_decay = 0.1f},
        {.offset = 100, .count = 4900, .grad_offset = 2100, .weight_decay = 0.0f},
        {.offset = 5000, .count = 3, .grad_offset = 7000, .weight_decay = 0.1f},
        {.offset = 5003, .count = 0, .grad_offset = 7003, .weight_decay = 0.1f},
        {.offset = 6000, .count = 4000, .grad_offset = 8000, .weight_decay = 0.05f}, /* state [5003, 6000) untouched */
    };
    int nseg = (int)(sizeof segs / sizeof segs[0]);
    int64_t *state_of = halloc(sizeof(int64_t) * n); /* model index -> state index, -1: not covered */
    for (int64_t i = 0; i < n; i++) state_of[i] = -1;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].count; j++) state_of[segs[s].grad_offset + j] = segs[s].offset + j;
    float *p0 = rnd(ns, 1.0f), *m0 = rnd(ns, 0.01f), *v0 = rnd(ns, 0.001f);
    for (int64_t i = 0; i < ns; i++) v0[i] = fabsf(v0[i]);
    float *cp = fcopy(p0, ns), *cm = fcopy(m0, ns), *cv = fcopy(v0, ns);
    float *gp[2], *gm[2], *gv[2];
    mc_tensor gcopy[2];
    for (int r = 0; r < 2; r++) {
        gp[r] = balloc(gpu, ns * 4), gm[r] = balloc(gpu, ns * 4), gv[r] = balloc(gpu, ns * 4);
        upload(gpu, gp[r], F32, p0, ns);
        upload(gpu, gm[r], F32, m0, ns);
        upload(gpu, gv[r], F32, v0, ns);
        gcopy[r] = mk1(gpu, copy_dt, NULL, n);
    }
    float *gg = balloc(gpu, n * 4);
    double *gsum = balloc(gpu, sizeof(double));
    float *before = NULL;
    /* steps 1 and 3 scale by grad_scale; 2 clips on the device (norm sqrt(400) / 2 = 10 >
     * clip 1); 4 has an infinite sum of squares, so nothing may change */
    for (int step = 1; step <= 4; step++) {
        float *grad = rnd(n, 1.0f);
        double sumsq = step == 2 ? 400.0 : INFINITY;
        mc_adamw_desc d = {.param = cp, .grad = grad, .exp_avg = cm, .exp_avg_sq = cv, .param_copy = mc_tensor_none(),
                           .segments = segs, .nsegments = nseg, .lr = 1e-3f * (float)step, .beta1 = 0.9f,
                           .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = step, .state_numel = ns,
                           .grad_numel = n};
        if (step % 2 == 0) d.grad_sumsq = &sumsq, d.loss_scale = 2.0, d.clip_grad = 1.0;
        if (step == 4) before = fcopy(cp, ns);
        mc_op_adamw(cpu, &d);
        upload(gpu, gg, F32, grad, n);
        gpu->copy_h2d(gpu, gsum, &sumsq, sizeof sumsq);
        for (int r = 0; r < 2; r++) {
            mc_adamw_desc g = d;
            g.param = gp[r], g.grad = gg, g.exp_avg = gm[r], g.exp_avg_sq = gv[r], g.param_copy = gcopy[r];
            if (d.grad_sumsq) g.grad_sumsq = gsum;
            mc_op_adamw(gpu, &g);
        }
    }
    float factor = 0;
    CHECK(mc_adamw_clip_scale(400.0, 2.0, 1.0, &factor) && factor == (float)(0.5 * (1.0 / (10.0 + 1e-6))),
          "mc_adamw_clip_scale: factor %.9g", factor);
    CHECK(!mc_adamw_clip_scale(INFINITY, 2.0, 1.0, &factor) && !mc_adamw_clip_scale(NAN, 1.0, 0.0, &factor),
          "mc_adamw_clip_scale takes a non-finite norm");
    CHECK(memcmp(before, cp, (size_t)ns * 4) == 0, "cpu adamw: an infinite norm changed the parameters");
    float *rp = dl_raw(gpu, gp[0], ns * 4), *rm = dl_raw(gpu, gm[0], ns * 4), *rv = dl_raw(gpu, gv[0], ns * 4);
    cmp("adamw param (4 steps, 5 sharded segments, clipped)", F32, rp, cp, ns);
    cmp("adamw exp_avg", F32, rm, cm, ns);
    cmp("adamw exp_avg_sq", F32, rv, cv, ns);
    int64_t pdiff = 0, cdiff = 0;
    for (int64_t i = 0; i < ns; i++) pdiff += memcmp(&rp[i], &cp[i], 4) != 0;
    uint16_t *rc = dl_raw(gpu, gcopy[0].data, n * 2);
    for (int64_t i = 0; i < n; i++) cdiff += rc[i] != (state_of[i] >= 0 ? bits16(copy_dt, cp[state_of[i]]) : 0);
    printf("  %-52s      %lld of %lld differ bitwise from the CPU\n", "adamw param bits", (long long)pdiff, (long long)ns);
    printf("  %-52s      %lld of %lld wrong (%s at grad_offset; rest untouched)\n", "adamw param_copy",
           (long long)cdiff, (long long)n, mc_dtype_name(copy_dt));
    CHECK(cdiff == 0, "adamw param_copy %s: %lld wrong", mc_dtype_name(copy_dt), (long long)cdiff);
    float *rp2 = dl_raw(gpu, gp[1], ns * 4), *rm2 = dl_raw(gpu, gm[1], ns * 4), *rv2 = dl_raw(gpu, gv[1], ns * 4);
    bool eq = memcmp(rp, rp2, ns * 4) == 0 && memcmp(rm, rm2, ns * 4) == 0 && memcmp(rv, rv2, ns * 4) == 0 &&
              memcmp(rc, dl_raw(gpu, gcopy[1].data, n * 2), n * 2) == 0;
    printf("  %-52s      %s\n", "adamw determinism (param, m, v, param_copy)", eq ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(eq, "adamw: two CUDA runs differ");
    release_all();
}

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* The split master (param_lo, --bf16's default): on the GPU, the F32 master's kernel bit for
 * bit (the joined master and the moments; the BF16 halves its mc_master_hi), and the CPU's
 * split AdamW. Segments on the vector path and off it (offsets not multiples of 4), every
 * fifth master starting on a tie, steps clipped on the device and one skipped. */
static void adamw_split_case(void) {
    int64_t n = 12000, ns = 10000;
    mc_adamw_segment segs[] = {
        {.offset = 0, .count = 100, .grad_offset = 2000, .weight_decay = 0.1f},
        {.offset = 100, .count = 4899, .grad_offset = 2101, .weight_decay = 0.0f}, /* grad side unaligned */
        {.offset = 5000, .count = 3, .grad_offset = 7001, .weight_decay = 0.1f},
        {.offset = 6001, .count = 3999, .grad_offset = 8001, .weight_decay = 0.05f}, /* both unaligned */
        {.offset = 4999, .count = 1, .grad_offset = 7000, .weight_decay = 0.0f},
        {.offset = 5004, .count = 996, .grad_offset = 7004, .weight_decay = 0.1f}, /* aligned, a tail of 0 */
    };
    int nseg = (int)(sizeof segs / sizeof segs[0]);
    int64_t *state_of = halloc(sizeof(int64_t) * n);
    for (int64_t i = 0; i < n; i++) state_of[i] = -1;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].count; j++) state_of[segs[s].grad_offset + j] = segs[s].offset + j;
    float *p0 = rnd(ns, 1.0f), *m0 = rnd(ns, 0.01f), *v0 = rnd(ns, 0.001f);
    uint16_t *hi0 = halloc((size_t)n * 2), *lo0 = halloc((size_t)ns * 2);
    for (int64_t i = 0; i < ns; i++) {
        v0[i] = fabsf(v0[i]);
        uint32_t b = f32_bits(p0[i]);
        if (i % 5 == 0) b = (b & 0xffff0000u) | 0x8000u;
        memcpy(&p0[i], &b, 4);
        lo0[i] = (uint16_t)b;
    }
    for (int64_t i = 0; i < n; i++) hi0[i] = state_of[i] >= 0 ? mc_master_hi(f32_bits(p0[state_of[i]])) : 0x1234;
    /* [0]: the F32 master with a BF16 copy, [1]: split, on the GPU; cpu: split */
    float *gp = balloc(gpu, ns * 4), *gm[2], *gv[2], *gg = balloc(gpu, n * 4);
    uint16_t *gh = balloc(gpu, n * 2), *gl = balloc(gpu, ns * 2), *ch = halloc((size_t)n * 2), *cl = halloc((size_t)ns * 2);
    mc_tensor gcopy = mk1(gpu, BF16, NULL, n);
    upload(gpu, gp, F32, p0, ns);
    gpu->copy_h2d(gpu, gh, hi0, (size_t)n * 2);
    gpu->copy_h2d(gpu, gl, lo0, (size_t)ns * 2);
    memcpy(ch, hi0, (size_t)n * 2);
    memcpy(cl, lo0, (size_t)ns * 2);
    for (int r = 0; r < 2; r++) {
        gm[r] = balloc(gpu, ns * 4), gv[r] = balloc(gpu, ns * 4);
        upload(gpu, gm[r], F32, m0, ns);
        upload(gpu, gv[r], F32, v0, ns);
    }
    float *cm = fcopy(m0, ns), *cv = fcopy(v0, ns);
    double *gsum = balloc(gpu, sizeof(double));
    for (int step = 1; step <= 4; step++) {
        float *grad = rnd(n, 1.0f);
        double sumsq = step == 2 ? 400.0 : INFINITY;
        mc_adamw_desc d = {.grad = grad, .exp_avg = cm, .exp_avg_sq = cv, .param_copy = mc_tensor_1d(ch, BF16, n),
                           .param_lo = cl, .segments = segs, .nsegments = nseg, .lr = 1e-3f * (float)step,
                           .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = step,
                           .state_numel = ns, .grad_numel = n};
        if (step % 2 == 0) d.grad_sumsq = &sumsq, d.loss_scale = 2.0, d.clip_grad = 1.0;
        mc_op_adamw(cpu, &d);
        upload(gpu, gg, F32, grad, n);
        gpu->copy_h2d(gpu, gsum, &sumsq, sizeof sumsq);
        mc_adamw_desc g = d;
        g.grad = gg, g.grad_sumsq = d.grad_sumsq ? gsum : NULL;
        g.param = gp, g.param_lo = NULL, g.param_copy = gcopy, g.exp_avg = gm[0], g.exp_avg_sq = gv[0];
        mc_op_adamw(gpu, &g);
        g.param = NULL, g.param_lo = gl, g.param_copy = mc_tensor_1d(gh, BF16, n), g.exp_avg = gm[1], g.exp_avg_sq = gv[1];
        mc_op_adamw(gpu, &g);
    }
    float *rp = dl_raw(gpu, gp, ns * 4);
    uint16_t *rh = dl_raw(gpu, gh, n * 2), *rl = dl_raw(gpu, gl, ns * 2);
    int64_t master_bad = 0, hi_bad = 0, cpu_diff = 0, ties = 0;
    float *joined = halloc((size_t)ns * 4), *cjoined = halloc((size_t)ns * 4);
    for (int64_t i = 0; i < n; i++) {
        int64_t s = state_of[i];
        if (s < 0) {
            hi_bad += rh[i] != 0x1234;
            continue;
        }
        uint32_t want = f32_bits(rp[s]), got = mc_master_join(rh[i], rl[s]), cgot = mc_master_join(ch[i], cl[s]);
        master_bad += got != want;
        hi_bad += rh[i] != mc_master_hi(want);
        cpu_diff += cgot != got;
        ties += (want & 0xffffu) == 0x8000u;
        memcpy(&joined[s], &got, 4);
        memcpy(&cjoined[s], &cgot, 4);
    }
    printf("  %-52s      %lld of %lld differ from the F32 master's kernel (%lld ties)\n", "adamw split master (joined)",
           (long long)master_bad, (long long)ns, (long long)ties);
    CHECK(master_bad == 0 && hi_bad == 0, "adamw split: %lld masters and %lld BF16 halves wrong", (long long)master_bad,
          (long long)hi_bad);
    same_bits("adamw split exp_avg vs the F32 master's", dl_raw(gpu, gm[1], ns * 4), dl_raw(gpu, gm[0], ns * 4), ns * 4);
    same_bits("adamw split exp_avg_sq vs the F32 master's", dl_raw(gpu, gv[1], ns * 4), dl_raw(gpu, gv[0], ns * 4), ns * 4);
    cmp("adamw split master vs the CPU's", F32, joined, cjoined, ns);
    printf("  %-52s      %lld of %lld differ bitwise from the CPU\n", "adamw split master bits", (long long)cpu_diff,
           (long long)ns);
    release_all();
}

/* The parameter copy in BF16 (--bf16) and in F16 (--fp16), and the split master. */
static void test_adamw(void) {
    adamw_case(BF16);
    adamw_case(F16);
    adamw_split_case();
}

/* master_join and master_split on random bit patterns (exact ties, infinities, NaNs) over
 * segments on and off 4-element boundaries: the CPU's results bit for bit. */
static void test_master_split(void) {
    int64_t n = 300000, ns = 250000;
    mc_adamw_segment segs[] = {{.offset = 0, .count = 100000, .grad_offset = 20000},
                               {.offset = 100001, .count = 7, .grad_offset = 150003},
                               {.offset = 100010, .count = 0, .grad_offset = 150010},
                               {.offset = 100013, .count = 149987, .grad_offset = 150013}};
    int nseg = (int)(sizeof segs / sizeof segs[0]);
    uint32_t *m = halloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)rng_next();
        if (i % 3 == 0) b = (b & 0xffff0000u) | 0x8000u;
        m[i] = b;
    }
    uint16_t *sent16 = halloc((size_t)n * 2);
    uint32_t *sent32 = halloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) sent16[i] = 0xabcd, sent32[i] = 0x7fbadbadu;
    mc_tensor cm = mc_tensor_1d(m, F32, n), ch = mc_tensor_1d(halloc((size_t)n * 2), BF16, n);
    mc_tensor cl = mc_tensor_1d(halloc((size_t)ns * 2), MC_U16, ns), cj = mc_tensor_1d(halloc((size_t)n * 4), F32, n);
    mc_tensor gm = mc_tensor_1d(balloc(gpu, n * 4), F32, n), gh = mc_tensor_1d(balloc(gpu, n * 2), BF16, n);
    mc_tensor gl = mc_tensor_1d(balloc(gpu, ns * 2), MC_U16, ns), gj = mc_tensor_1d(balloc(gpu, n * 4), F32, n);
    memcpy(ch.data, sent16, (size_t)n * 2), memcpy(cl.data, sent16, (size_t)ns * 2), memcpy(cj.data, sent32, (size_t)n * 4);
    gpu->copy_h2d(gpu, gm.data, m, (size_t)n * 4);
    gpu->copy_h2d(gpu, gh.data, sent16, (size_t)n * 2);
    gpu->copy_h2d(gpu, gl.data, sent16, (size_t)ns * 2);
    gpu->copy_h2d(gpu, gj.data, sent32, (size_t)n * 4);
    mc_op_master_split(cpu, &ch, &cl, &cm, segs, nseg);
    mc_op_master_join(cpu, &cj, &ch, &cl, segs, nseg);
    mc_op_master_split(gpu, &gh, &gl, &gm, segs, nseg);
    mc_op_master_join(gpu, &gj, &gh, &gl, segs, nseg);
    bool eq = memcmp(dl_raw(gpu, gh.data, n * 2), ch.data, n * 2) == 0 &&
              memcmp(dl_raw(gpu, gl.data, ns * 2), cl.data, ns * 2) == 0;
    printf("  %-52s      %s\n", "master_split (BF16 halves, low halves) vs CPU", eq ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(eq, "master_split: the GPU's halves differ from the CPU's");
    eq = memcmp(dl_raw(gpu, gj.data, n * 4), cj.data, n * 4) == 0;
    printf("  %-52s      %s\n", "master_join vs CPU", eq ? "bitwise equal" : "DIFFER  <-- FAIL");
    CHECK(eq, "master_join: the GPU's masters differ from the CPU's");
    int64_t lost = 0;
    for (int s = 0; s < nseg; s++)
        lost += memcmp((uint32_t *)cj.data + segs[s].grad_offset, m + segs[s].grad_offset, (size_t)segs[s].count * 4) != 0;
    CHECK(lost == 0, "master_join(master_split) lost bits in %lld segments", (long long)lost);
    release_all();
}

static void test_reductions(void) {
    int64_t n = 1000003;
    float *x = rnd(n, 2.0f);
    for (int64_t i = 0; i < n; i += 1013) x[i] = 0.0f; /* zeros to count */
    mc_tensor cx = mk1(cpu, F32, x, n), gx = mk1(gpu, F32, x, n);
    double cs = mc_op_sumsq(cpu, &cx), gs = mc_op_sumsq(gpu, &gx), gs2 = mc_op_sumsq(gpu, &gx);
    double rel = fabs(cs - gs) / cs;
    printf("  %-52s      %.17g vs %.17g (rel %.2e)\n", "sumsq 1000003 F32", gs, cs, rel);
    CHECK(rel < 1e-12, "sumsq: relative error %.3e", rel);
    CHECK(memcmp(&gs, &gs2, sizeof gs) == 0, "sumsq: two runs differ");
    /* an unaligned view */
    mc_tensor cv = mc_tensor_1d((float *)cx.data + 3, F32, n - 10), gv = mc_tensor_1d((float *)gx.data + 3, F32, n - 10);
    cs = mc_op_sumsq(cpu, &cv), gs = mc_op_sumsq(gpu, &gv);
    rel = fabs(cs - gs) / cs;
    printf("  %-52s      rel %.2e\n", "sumsq unaligned view", rel);
    CHECK(rel < 1e-12, "sumsq unaligned: relative error %.3e", rel);

    mc_adamw_segment segs[] = {{.offset = 0, .count = 1000, .grad_offset = 0},
                               {.offset = 1000, .count = 0, .grad_offset = 1000},
                               {.offset = 2001, .count = 7, .grad_offset = 2001},
                               {.offset = 5000, .count = 900000, .grad_offset = 5000},
                               {.offset = 999990, .count = 13, .grad_offset = 999990}};
    int nseg = (int)(sizeof segs / sizeof segs[0]);
    double *gsum = gpu->alloc(gpu, 2 * sizeof(double));
    mc_tensor cs_out = mc_tensor_1d(&cs, MC_F64, 1), gs_out = mc_tensor_1d(gsum, MC_F64, 1),
              gs2_out = mc_tensor_1d(gsum + 1, MC_F64, 1);
    mc_op_sumsq_segments(cpu, &cs_out, &cx, segs, nseg);
    mc_op_sumsq_segments(gpu, &gs_out, &gx, segs, nseg);
    mc_op_sumsq_segments(gpu, &gs2_out, &gx, segs, nseg);
    gpu->copy_d2h(gpu, &gs, gsum, sizeof gs);
    gpu->copy_d2h(gpu, &gs2, gsum + 1, sizeof gs2);
    gpu->free(gpu, gsum);
    rel = fabs(cs - gs) / cs;
    printf("  %-52s      %.17g vs %.17g (rel %.2e)\n", "sumsq_segments (5 ranges)", gs, cs, rel);
    CHECK(rel < 1e-12, "sumsq_segments: relative error %.3e", rel);
    CHECK(memcmp(&gs, &gs2, sizeof gs) == 0, "sumsq_segments: two runs differ");

    int64_t cz = mc_op_count_zeros(cpu, &cx), gz = mc_op_count_zeros(gpu, &gx);
    printf("  %-52s      %lld vs %lld\n", "count_zeros", (long long)gz, (long long)cz);
    CHECK(cz == gz, "count_zeros: %lld vs %lld", (long long)gz, (long long)cz);
    /* 16-bit sumsq of rounded values */
    for (int k = 1; k < NDTYPES; k++) {
        mc_dtype dt = k_dtypes[k];
        float *xr = as_dtype(fcopy(x, n), n, dt);
        mc_tensor cxr = mk1(cpu, F32, xr, n), gxr = mk1(gpu, dt, xr, n);
        cs = mc_op_sumsq(cpu, &cxr), gs = mc_op_sumsq(gpu, &gxr);
        rel = fabs(cs - gs) / cs;
        printf("  %-52s %-4s rel %.2e\n", "sumsq", mc_dtype_name(dt), rel);
        CHECK(rel < 1e-12, "sumsq %s: relative error %.3e", mc_dtype_name(dt), rel);
    }
    release_all();
}

/* ======================================================================= benchmark (opt-in) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Times `stmt` (average of `it` runs after 2 warm-ups) and prints the bandwidth for `bytes`
 * moved per run, or the FLOP rate when flops > 0. */
/* MC_TEST_BENCH=1: every benchmark; any other value: those whose name contains it. */
static bool bench_selected(const char *name) {
    const char *f = getenv("MC_TEST_BENCH");
    return !f || strcmp(f, "1") == 0 || strstr(name, f) != NULL;
}

#define BENCH(name, bytes, flops, stmt)                                                                 \
    do {                                                                                                \
        if (!bench_selected(name)) break;                                                              \
        const int it = 10;                                                                              \
        for (int w_ = 0; w_ < 2; w_++) { stmt; }                                                        \
        gpu->sync(gpu);                                                                                 \
        double t0_ = now_s();                                                                           \
        for (int i_ = 0; i_ < it; i_++) { stmt; }                                                       \
        gpu->sync(gpu);                                                                                 \
        double dt_ = (now_s() - t0_) / it;                                                              \
        if ((flops) > 0)                                                                                \
            printf("  bench %-48s %9.1f us  %7.1f TFLOP/s\n", name, dt_ * 1e6, (double)(flops) / dt_ * 1e-12); \
        else                                                                                            \
            printf("  bench %-48s %9.1f us  %7.1f GB/s\n", name, dt_ * 1e6, (double)(bytes) / dt_ * 1e-9);   \
    } while (0)

/* Training-sized shapes (Llama-3-8B-like per GPU: N = 8192 tokens, h = 4096, ffn 14336,
 * 32 heads / 8 groups of 128, vocab 128256), BF16 activations. */
static void bench_all(void) {
    const int64_t N = 8192, h = 4096, ffn = 14336, V = 128256, hc = 130;
    const size_t e = 2;
    mc_tensor x = mk2(gpu, BF16, NULL, N, h), y = mk2(gpu, BF16, NULL, N, h), dx = mk2(gpu, BF16, NULL, N, h);
    mc_tensor w = mk1(gpu, BF16, NULL, h), rstd = mk1(gpu, F32, NULL, N), mean = mk1(gpu, F32, NULL, N);
    mc_tensor dw = mk1(gpu, F32, NULL, h), db = mk1(gpu, F32, NULL, h), b = mk1(gpu, BF16, NULL, h);
    mc_tensor none = mc_tensor_none();
    mc_op_fill(gpu, &x, 0.5);
    mc_op_fill(gpu, &y, 0.25);
    mc_op_fill(gpu, &w, 1.0);
    BENCH("rmsnorm_fwd [8192, 4096]", 2 * N * h * e, 0, mc_op_rmsnorm_fwd(gpu, &y, &rstd, &x, &w, 1e-5f));
    BENCH("rmsnorm_bwd [8192, 4096] (dx +=, dw +=)", 4 * N * h * e, 0,
          mc_op_rmsnorm_bwd(gpu, &dx, &dw, &none, &none, &y, &x, &w, &rstd));
    BENCH("layernorm_fwd [8192, 4096]", 2 * N * h * e, 0, mc_op_layernorm_fwd(gpu, &y, &mean, &rstd, &x, &w, &b, 1e-5f));
    BENCH("layernorm_bwd [8192, 4096]", 4 * N * h * e, 0,
          mc_op_layernorm_bwd(gpu, &dx, &dw, &db, &none, &none, &y, &x, &w, &none, &mean, &rstd));
    BENCH("dropout_add_fwd p=0.1 [8192, 4096]", 3 * N * h * e, 0, mc_op_dropout_add_fwd(gpu, &y, &y, &x, 0.1f, 1, 2));
    BENCH("add_inplace [8192, 4096]", 3 * N * h * e, 0, mc_op_add_inplace(gpu, &y, &x));
    release_all();

    { /* the norms at GPT-2's (LayerNorm with bias, 65536 x 768) and Llama's (RMSNorm, 8192 x
       * 2048) training shapes; the backward as training calls it, rewriting y */
        const int64_t ng = 65536, hg = 768, nl = 8192, hl = 2048;
        mc_tensor xg = mk2(gpu, BF16, NULL, ng, hg), yg = mk2(gpu, BF16, NULL, ng, hg);
        mc_tensor dyg = mk2(gpu, BF16, NULL, ng, hg), dxg = mk2(gpu, BF16, NULL, ng, hg);
        mc_tensor wg = mk1(gpu, BF16, NULL, hg), bg = mk1(gpu, BF16, NULL, hg);
        mc_tensor mg = mk1(gpu, F32, NULL, ng), rg = mk1(gpu, F32, NULL, ng);
        mc_tensor dwg = mk1(gpu, F32, NULL, hg), dbg = mk1(gpu, F32, NULL, hg);
        mc_tensor xl = mk2(gpu, BF16, NULL, nl, hl), yl = mk2(gpu, BF16, NULL, nl, hl);
        mc_tensor dyl = mk2(gpu, BF16, NULL, nl, hl), dxl = mk2(gpu, BF16, NULL, nl, hl);
        mc_tensor wl = mk1(gpu, BF16, NULL, hl), rl = mk1(gpu, F32, NULL, nl), dwl = mk1(gpu, F32, NULL, hl);
        mc_op_fill(gpu, &xg, 0.5), mc_op_fill(gpu, &wg, 1.0), mc_op_fill(gpu, &bg, 0.1), mc_op_fill(gpu, &dyg, 0.01);
        mc_op_fill(gpu, &xl, 0.5), mc_op_fill(gpu, &wl, 1.0), mc_op_fill(gpu, &dyl, 0.01);
        BENCH("layernorm_fwd [65536, 768]", 2 * ng * hg * e, 0,
              mc_op_layernorm_fwd(gpu, &yg, &mg, &rg, &xg, &wg, &bg, 1e-5f));
        BENCH("layernorm_bwd [65536, 768] rewriting y", 5 * ng * hg * e, 0,
              mc_op_layernorm_bwd(gpu, &dxg, &dwg, &dbg, &none, &yg, &dyg, &xg, &wg, &bg, &mg, &rg));
        mc_tensor dsg = mk1(gpu, F32, NULL, hg); /* training's call that also forms a bias gradient */
        BENCH("layernorm_bwd [65536, 768] rewriting y, dx column sums", 5 * ng * hg * e, 0,
              mc_op_layernorm_bwd(gpu, &dxg, &dwg, &dbg, &dsg, &yg, &dyg, &xg, &wg, &bg, &mg, &rg));
        BENCH("rmsnorm_fwd [8192, 2048]", 2 * nl * hl * e, 0, mc_op_rmsnorm_fwd(gpu, &yl, &rl, &xl, &wl, 1e-5f));
        BENCH("rmsnorm_bwd [8192, 2048] rewriting y", 5 * nl * hl * e, 0,
              mc_op_rmsnorm_bwd(gpu, &dxl, &dwl, &none, &yl, &dyl, &xl, &wl, &rl));
        release_all();
    }

    mc_tensor f1 = mk2(gpu, BF16, NULL, N, 2 * ffn), act = mk2(gpu, BF16, NULL, N, ffn), df1 = mk2(gpu, BF16, NULL, N, 2 * ffn);
    mc_op_fill(gpu, &f1, 0.3);
    mc_op_fill(gpu, &act, 0.2);
    BENCH("swiglu_fwd [8192, 2x14336]", 3 * N * ffn * e, 0, mc_op_swiglu_fwd(gpu, &act, &f1));
    BENCH("swiglu_bwd [8192, 2x14336]", 5 * N * ffn * e, 0, mc_op_swiglu_bwd(gpu, &df1, &none, &act, &f1));
    mc_tensor g1 = mk2(gpu, BF16, NULL, N, ffn);
    BENCH("gelu_fwd erf [8192, 14336]", 2 * N * ffn * e, 0, mc_op_gelu_fwd(gpu, &g1, &act, false));
    BENCH("gelu_bwd erf [8192, 14336]", 3 * N * ffn * e, 0, mc_op_gelu_bwd(gpu, &g1, &g1, &act, false));
    release_all();

    {
        int heads = 32, groups = 8, d = 128;
        int64_t nq = N * (heads + 2 * groups) * d, P = 8192;
        mc_tensor qkv = mk1(gpu, BF16, NULL, nq), c = mk2(gpu, F32, NULL, P, d / 2), sn = mk2(gpu, F32, NULL, P, d / 2);
        mc_rope_desc rd = {.seq = 4096, .batch = 2, .heads = heads, .groups = groups, .head_dim = d, .rot_dim = d,
                           .cos = c, .sin = sn, .pos = mc_tensor_none()};
        BENCH("rope q+k [8192 tok, 32/8 heads, d 128]", 2 * N * (heads + groups) * d * e, 0, mc_op_rope(gpu, &qkv, &rd, false));
        release_all();
    }
    for (int rows = 0; rows < 2; rows++) {
        int64_t n = rows ? 1024 : hc;
        mc_tensor lg = mk2(gpu, BF16, NULL, n, V), rm = mk1(gpu, F32, NULL, n), st = mk2(gpu, F32, NULL, 2, n);
        mc_tensor loss = mk1(gpu, F32, NULL, n), tg = mk1(gpu, MC_I32, NULL, n), mask = mk1(gpu, F32, NULL, n);
        mc_op_fill(gpu, &lg, 0.1);
        mc_op_fill(gpu, &mask, 1.0);
        char nm[96];
        snprintf(nm, sizeof nm, "xent_rowstats [%lld, 128256]", (long long)n);
        BENCH(nm, n * V * e, 0, mc_op_xent_rowstats(gpu, &rm, &st, &lg, &tg, 0));
        snprintf(nm, sizeof nm, "xent_loss_grad [%lld, 128256] in place", (long long)n);
        BENCH(nm, 2 * n * V * e, 0, mc_op_xent_loss_grad(gpu, &loss, &lg, &lg, &rm, &st, &tg, &mask, 0, 1.0f));
        snprintf(nm, sizeof nm, "xent_fused [%lld, 128256] in place", (long long)n);
        BENCH(nm, 2 * n * V * e, 0, mc_op_xent_fused(gpu, &loss, &lg, &lg, &tg, &mask, 1.0f));
        release_all();
    }
    { /* GPT-2's head chunk: 4096 tokens of the padded 50304 vocab */
        const int64_t n = 4096, V2 = 50304;
        mc_tensor lg = mk2(gpu, BF16, NULL, n, V2), rm = mk1(gpu, F32, NULL, n), st = mk2(gpu, F32, NULL, 2, n);
        mc_tensor loss = mk1(gpu, F32, NULL, n), tg = mk1(gpu, MC_I32, NULL, n), mask = mk1(gpu, F32, NULL, n);
        mc_op_fill(gpu, &lg, 0.1);
        mc_op_fill(gpu, &mask, 1.0);
        BENCH("xent_rowstats [4096, 50304]", n * V2 * e, 0, mc_op_xent_rowstats(gpu, &rm, &st, &lg, &tg, 0));
        BENCH("xent_loss_grad [4096, 50304] in place", 2 * n * V2 * e, 0,
              mc_op_xent_loss_grad(gpu, &loss, &lg, &lg, &rm, &st, &tg, &mask, 0, 1.0f));
        release_all();
    }
    /* xent_fused on the two head chunks of training */
    const int64_t chunks[2][2] = {{4096, 50304}, {2048, 128256}};
    for (int c = 0; c < 2; c++) {
        const int64_t n = chunks[c][0], vv = chunks[c][1];
        mc_tensor lg = mk2(gpu, BF16, NULL, n, vv), loss = mk1(gpu, F32, NULL, n);
        mc_tensor tg = mk1(gpu, MC_I32, NULL, n), mask = mk1(gpu, F32, NULL, n);
        mc_op_fill(gpu, &lg, 0.1);
        mc_op_fill(gpu, &mask, 1.0);
        char nm[96];
        snprintf(nm, sizeof nm, "xent_fused [%lld, %lld] in place", (long long)n, (long long)vv);
        BENCH(nm, 2 * n * vv * e, 0, mc_op_xent_fused(gpu, &loss, &lg, &lg, &tg, &mask, 1.0f));
        release_all();
    }
    {
        mc_tensor tab = mk2(gpu, BF16, NULL, V, h), out = mk2(gpu, BF16, NULL, N, h), dt = mk2(gpu, F32, NULL, V, h);
        int32_t *ids = halloc(sizeof(int32_t) * N);
        for (int64_t t = 0; t < N; t++) ids[t] = (int32_t)rng_int(0, V);
        mc_tensor gid = mk_i32(gpu, ids, N);
        BENCH("embedding_fwd [8192, 4096] of 128256 rows", 2 * N * h * e, 0,
              mc_op_embedding_fwd(gpu, &out, &gid, &tab, 0, false));
        BENCH("embedding_bwd [8192, 4096] into F32", N * h * (e + 8), 0, mc_op_embedding_bwd(gpu, &dt, &out, &gid, 0));
        release_all();
    }
    {
        int64_t np = (int64_t)1 << 28; /* 268M parameters */
        float *pp = balloc(gpu, np * 4), *gg = balloc(gpu, np * 4), *mm = balloc(gpu, np * 4), *vv = balloc(gpu, np * 4);
        mc_tensor pc = mk1(gpu, BF16, NULL, np);
        gpu->zero(gpu, pp, np * 4), gpu->zero(gpu, gg, np * 4), gpu->zero(gpu, mm, np * 4), gpu->zero(gpu, vv, np * 4);
        enum { NS = 291 };
        mc_adamw_segment segs[NS];
        int64_t off = 0;
        for (int s = 0; s < NS; s++) {
            int64_t c = s == NS - 1 ? np - off : (s % 3 == 0 ? 4096 : np / NS);
            segs[s] = (mc_adamw_segment){.offset = off, .count = c, .grad_offset = off, .weight_decay = 0.1f};
            off += c;
        }
        mc_adamw_desc d = {.param = pp, .grad = gg, .exp_avg = mm, .exp_avg_sq = vv, .param_copy = pc, .segments = segs,
                           .nsegments = NS, .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f,
                           .step = 1, .state_numel = np, .grad_numel = np};
        BENCH("adamw 268M params, 291 segments, bf16 copy", np * (16 + 12 + 2), 0, mc_op_adamw(gpu, &d));
        mc_tensor sum = mc_tensor_1d(balloc(gpu, sizeof(double)), MC_F64, 1), gt = mc_tensor_1d(gg, F32, np);
        BENCH("sumsq_segments 268M", np * 4, 0, mc_op_sumsq_segments(gpu, &sum, &gt, segs, NS));
        BENCH("sumsq 268M", np * 4, 0, (void)mc_op_sumsq(gpu, &gt));
        BENCH("count_zeros 268M", np * 4, 0, (void)mc_op_count_zeros(gpu, &gt));
        release_all();
    }
    {
        mc_tensor xx = mk2(gpu, BF16, NULL, N, h), ww = mk2(gpu, BF16, NULL, ffn, h), yy = mk2(gpu, BF16, NULL, N, ffn);
        mc_tensor bb = mk1(gpu, BF16, NULL, ffn), dww = mk2(gpu, F32, NULL, ffn, h), dbb = mk1(gpu, F32, NULL, ffn);
        mc_tensor dxx = mk2(gpu, BF16, NULL, N, h), none = mc_tensor_none();
        double fl = 2.0 * (double)N * (double)h * (double)ffn;
        BENCH("linear_fwd bf16 8192x4096 -> 14336", 0, fl, mc_op_linear_fwd(gpu, &yy, &xx, &ww, &none));
        BENCH("linear_fwd bf16 8192x4096 -> 14336 + bias", 0, fl, mc_op_linear_fwd(gpu, &yy, &xx, &ww, &bb));
        BENCH("linear_bwd dx bf16", 0, fl, mc_op_linear_bwd(gpu, &dxx, &none, &none, &yy, &xx, &ww, true));
        BENCH("linear_bwd dW += into F32", 0, fl, mc_op_linear_bwd(gpu, &none, &dww, &none, &yy, &xx, &ww, true));
        BENCH("linear_bwd db += (colsum [8192, 14336])", N * ffn * e, 0, mc_op_linear_bwd(gpu, &none, &none, &dbb, &yy, &xx, &ww, true));
        release_all();
        mc_tensor fx = mk2(gpu, F32, NULL, 4096, 4096), fw = mk2(gpu, F32, NULL, 4096, 4096), fy = mk2(gpu, F32, NULL, 4096, 4096);
        BENCH("linear_fwd f32 4096^3 (no TF32)", 0, 2.0 * 4096.0 * 4096.0 * 4096.0, mc_op_linear_fwd(gpu, &fy, &fx, &fw, &none));
        release_all();
    }
    { /* GPT-2 124M's MLP at --micro-batch-size 64: N = 65536, h 768, ffn 3072; fused against unfused */
        const int64_t n = 65536, hh = 768, ff = 3072;
        mc_tensor xx = mk2(gpu, BF16, NULL, n, hh), w1 = mk2(gpu, BF16, NULL, ff, hh), b1 = mk1(gpu, BF16, NULL, ff);
        mc_tensor pre = mk2(gpu, BF16, NULL, n, ff), act = mk2(gpu, BF16, NULL, n, ff), w2 = mk2(gpu, BF16, NULL, hh, ff);
        mc_tensor dy = mk2(gpu, BF16, NULL, n, hh), dact = mk2(gpu, BF16, NULL, n, ff), dpre = mk2(gpu, BF16, NULL, n, ff);
        mc_tensor db1 = mk1(gpu, F32, NULL, ff), dw2 = mk2(gpu, F32, NULL, hh, ff), db2 = mk1(gpu, F32, NULL, hh);
        mc_tensor none = mc_tensor_none();
        mc_op_fill(gpu, &xx, 0.1), mc_op_fill(gpu, &w1, 0.01), mc_op_fill(gpu, &w2, 0.01), mc_op_fill(gpu, &dy, 0.01);
        double fl = 2.0 * (double)n * (double)hh * (double)ff;
        BENCH("gpt2 fc1 + gelu: linear_fwd, gelu_fwd", 0, fl,
              (mc_op_linear_fwd(gpu, &pre, &xx, &w1, &b1), mc_op_gelu_fwd(gpu, &act, &pre, true)));
        BENCH("gpt2 fc1 + gelu: linear_gelu_fwd", 0, fl, mc_op_linear_gelu_fwd(gpu, &act, &pre, &xx, &w1, &b1));
        BENCH("gpt2 fc2 dx, gelu_bwd, fc1 db (colsum)", 0, fl,
              (mc_op_linear_bwd(gpu, &dact, &none, &none, &dy, &act, &w2, true), mc_op_gelu_bwd(gpu, &dpre, &dact, &pre, true),
               mc_op_linear_bwd(gpu, &none, &none, &db1, &dpre, &xx, &w1, true)));
        BENCH("gpt2 fc2 dx, gelu_bwd, fc1 db: linear_dgelu_bwd", 0, fl,
              mc_op_linear_dgelu_bwd(gpu, &dpre, &db1, &dy, &w2, &pre));
        BENCH("gpt2 fc2 dW, then db (colsum)", 0, fl,
              (mc_op_linear_bwd(gpu, &none, &dw2, &none, &dy, &act, &w2, true),
               mc_op_linear_bwd(gpu, &none, &none, &db2, &dy, &act, &w2, true)));
        BENCH("gpt2 fc2 dW with db (one GEMM where it can)", 0, fl, mc_op_linear_bwd(gpu, &none, &dw2, &db2, &dy, &act, &w2, true));
        release_all();
    }
}

static bool selected(const char *name) {
    const char *only = getenv("MC_TEST_ONLY");
    return !only || !only[0] || strstr(name, only) != NULL;
}

#define RUN_SELECTED(fn) \
    do {                 \
        if (selected(#fn)) RUN(fn); \
    } while (0)

int main(void) {
    if (!mc_backend_cuda_available()) check_skip("no CUDA device visible, or a build without the CUDA backend");
    mc_err err;
    gpu = mc_backend_cuda_create(0, &err);
    if (!gpu) {
        printf("FAIL: a CUDA device is visible but the backend cannot be created: %s\n", err.msg);
        return 1;
    }
    cpu = mc_backend_cpu_create();
    const char *seed_env = getenv("MC_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0)
                             : ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)getpid() << 16);
    g_rng = seed;
    printf("test_backend_equivalence: seed %llu (MC_TEST_SEED=%llu replays this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    RUN_SELECTED(test_memory);
    RUN_SELECTED(test_fill_convert);
    RUN_SELECTED(test_init_normal);
    RUN_SELECTED(test_gemm);
    RUN_SELECTED(test_linear);
    RUN_SELECTED(test_linear_residual);
    RUN_SELECTED(test_linear_gelu);
    RUN_SELECTED(test_linear_autotuned);
    RUN_SELECTED(test_linear_bias_grad);
    RUN_SELECTED(test_embedding);
    RUN_SELECTED(test_norms);
    RUN_SELECTED(test_norm_alias);
    RUN_SELECTED(test_rope);
    RUN_SELECTED(test_activations);
    RUN_SELECTED(test_dropout);
    RUN_SELECTED(test_xent);
    RUN_SELECTED(test_xent_fused);
    RUN_SELECTED(test_attention);
    RUN_SELECTED(test_attention_kv);
    RUN_SELECTED(test_argmax_rows);
    RUN_SELECTED(test_decode_advance);
    RUN_SELECTED(test_adamw);
    RUN_SELECTED(test_master_split);
    RUN_SELECTED(test_reductions);
    const char *bench = getenv("MC_TEST_BENCH");
    if (bench && bench[0] && strcmp(bench, "0") != 0) {
        printf("benchmark (MC_TEST_BENCH=1):\n");
        bench_all();
    }
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return check_summary();
}
