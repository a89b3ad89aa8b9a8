/* test_cpu_ops.c: the CPU reference backend, op by op.
 *  - gradient checks in F64: analytic gradients from each backward op (dy = r) against
 *    central finite differences of L = sum(out * r), for every input, weight and bias;
 *  - F32 against F64: every op's forward and backward agree to relative L2 < 1e-5;
 *  - independent references: attention against a naive full softmax, cross-entropy against
 *    a direct log-softmax, AdamW against a scalar statement of torch's update, GEMM against
 *    a triple loop;
 *  - exact semantics: dropout masks, vocab-parallel ranges, dtype conversion, determinism
 *    across thread counts, the fused linear + GELU ops and xent_fused bit for bit the ops
 *    they fuse. */
#include <omp.h>
#include <stdint.h>

#include "backend/cpu/cpu_internal.h"
#include "base/philox.h"
#include "check.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

static mc_backend *be;

#define F64 MC_F64
#define F32 MC_F32
#define SEED 0x5eedULL

/* ---- scratch memory: each test's buffers are freed after it runs ---- */

enum { MAX_ALLOCS = 1024 };
static void *g_allocs[MAX_ALLOCS];
static int g_nallocs;

static void *talloc(size_t bytes) {
    if (g_nallocs == MAX_ALLOCS) {
        fprintf(stderr, "test_cpu_ops: too many scratch allocations\n");
        abort();
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) abort();
    return g_allocs[g_nallocs++] = p;
}

static void tfree_all(void) {
    while (g_nallocs) free(g_allocs[--g_nallocs]);
}

static double *dbuf(int64_t n) { return talloc((size_t)n * sizeof(double)); }
static float *fbuf(int64_t n) { return talloc((size_t)n * sizeof(float)); }

static uint64_t g_stream = 1;
/* n normals times scale, from a fresh Philox stream */
static double *rnd(int64_t n, double scale) {
    double *x = dbuf(n);
    uint64_t stream = g_stream++;
    for (int64_t i = 0; i < n; i++) x[i] = scale * mc_philox_normal(SEED, stream, (uint64_t)i);
    return x;
}

static double *dcopy(const double *x, int64_t n) {
    double *y = dbuf(n);
    memcpy(y, x, (size_t)n * sizeof(double));
    return y;
}

static float *f32_of(const double *x, int64_t n) {
    float *y = fbuf(n);
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* after - before, both double */
static double *delta(const double *after, const double *before, int64_t n) {
    double *d = dbuf(n);
    for (int64_t i = 0; i < n; i++) d[i] = after[i] - before[i];
    return d;
}

/* after - before, float inputs, double result */
static double *delta32(const float *after, const float *before, int64_t n) {
    double *d = dbuf(n);
    for (int64_t i = 0; i < n; i++) d[i] = (double)after[i] - (double)before[i];
    return d;
}

static double *d_of(const float *x, int64_t n) {
    double *y = dbuf(n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static double rel_l2(const double *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* F32 result against the F64 one: relative L2 < 1e-5 */
static void check_f32(const char *what, const float *got, const double *ref, int64_t n) {
    double r = rel_l2(d_of(got, n), ref, n);
    CHECK(r < 1e-5, "%s: F32 vs F64 relative L2 error %.3g", what, r);
}

static void check_f32d(const char *what, const double *got, const double *ref, int64_t n) {
    double r = rel_l2(got, ref, n);
    CHECK(r < 1e-5, "%s: F32 vs F64 relative L2 error %.3g", what, r);
}

static void check_close(const char *what, const double *got, const double *ref, int64_t n, double tol) {
    double r = rel_l2(got, ref, n);
    CHECK(r <= tol, "%s: relative L2 error %.3g > %.3g", what, r, tol);
}

static mc_tensor t1(void *p, mc_dtype dt, int64_t n) { return mc_tensor_1d(p, dt, n); }
static mc_tensor t2(void *p, mc_dtype dt, int64_t r, int64_t c) { return mc_tensor_2d(p, dt, r, c); }

/* ---- finite differences ---- */

typedef double (*loss_fn)(void *ctx);

/* analytic[k] against (L(param + h e_k) - L(param - h e_k)) / 2h, for every k when n <=
 * max_points, else for max_points spread over the tensor. Pass: relative L2 < 1e-4 over the
 * checked points and each point within 1e-4 relative (absolute floor 1e-7 max(1, |grad|_inf)). */
static void grad_check(const char *what, double *param, int64_t n, const double *analytic, loss_fn loss, void *ctx,
                       int64_t max_points) {
    const double h = 1e-6;
    int64_t npts = n < max_points ? n : max_points;
    double amax = 0;
    for (int64_t k = 0; k < n; k++) amax = fmax(amax, fabs(analytic[k]));
    double floor_abs = 1e-7 * fmax(1.0, amax), num = 0, den = 0;
    int bad = 0;
    for (int64_t s = 0; s < npts; s++) {
        int64_t k = s;
        if (npts < n) {
            int64_t lo = s * n / npts, hi = (s + 1) * n / npts;
            k = lo + (int64_t)(mc_philox_bits(SEED, 77, (uint64_t)s) % (uint64_t)(hi - lo));
        }
        double orig = param[k];
        param[k] = orig + h;
        double lp = loss(ctx);
        param[k] = orig - h;
        double lm = loss(ctx);
        param[k] = orig;
        double fd = (lp - lm) / (2 * h), a = analytic[k];
        num += (a - fd) * (a - fd);
        den += fd * fd;
        if (!(fabs(a - fd) <= 1e-4 * fmax(fabs(a), fabs(fd)) + floor_abs)) {
            if (bad < 5) fprintf(stderr, "  %s[%lld]: analytic %.12g vs finite difference %.12g\n", what, (long long)k, a, fd);
            bad++;
        }
    }
    loss(ctx); /* leave the case's outputs those of the unperturbed inputs */
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(bad == 0, "%s: %d of %lld elements differ from finite differences", what, bad, (long long)npts);
    CHECK(rel < 1e-4, "%s: relative L2 error %.3g against finite differences", what, rel);
}

/* ======================================================================== memory, convert */

static void test_memory(void) {
    CHECK(strcmp(be->name, "cpu") == 0 && be->device == MC_DEVICE_CPU);
    char *a = be->alloc(be, 1000), *b = be->alloc(be, 1000);
    CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0, "allocations are 64-byte aligned");
    for (int i = 0; i < 1000; i++) a[i] = (char)i;
    be->copy_h2d(be, b, a, 1000);
    CHECK(memcmp(a, b, 1000) == 0);
    be->zero(be, b, 500);
    CHECK(b[0] == 0 && b[499] == 0 && b[500] == (char)500);
    be->copy_d2d(be, b, a, 1000);
    be->copy_d2h(be, a, b, 0);
    be->sync(be);
    CHECK(memcmp(a, b, 1000) == 0);
    be->free(be, a);
    be->free(be, b);
}

static uint16_t half_bits(float f) {
    uint16_t h;
    mc_tensor src = t1(&f, F32, 1), dst = t1(&h, MC_F16, 1);
    mc_op_convert(be, &dst, &src);
    return h;
}

static float half_value(uint16_t h) {
    float f;
    mc_tensor src = t1(&h, MC_F16, 1), dst = t1(&f, F32, 1);
    mc_op_convert(be, &dst, &src);
    return f;
}

static void test_convert(void) {
    /* known binary16 encodings, including rounding, subnormals and overflow */
    CHECK(half_bits(1.0f) == 0x3c00 && half_bits(-2.0f) == 0xc000 && half_bits(65504.0f) == 0x7bff);
    CHECK(half_bits(0.1f) == 0x2e66, "0.1 -> %#x", half_bits(0.1f));
    CHECK(half_bits(65519.0f) == 0x7bff && half_bits(65520.0f) == 0x7c00 && half_bits(1e9f) == 0x7c00);
    CHECK(half_bits(0x1p-24f) == 0x0001 && half_bits(0x1p-25f) == 0x0000 && half_bits(0x1.8p-25f) == 0x0001);
    CHECK(half_bits(0x1p-14f) == 0x0400 && half_bits(-0.0f) == 0x8000 && half_bits(INFINITY) == 0x7c00);
    CHECK(half_bits(1.0f + 0x1p-11f) == 0x3c00, "tie rounds to even");
    CHECK(half_bits(1.0f + 0x1.8p-11f) == 0x3c01 && half_bits(1.0f + 0x1p-10f + 0x1p-11f) == 0x3c02,
          "above the tie rounds up, a tie above an odd mantissa rounds up");
    CHECK(isnan(half_value(half_bits(NAN))));
    CHECK(half_value(0x0001) == 0x1p-24f && half_value(0x3555) == 0x1.554p-2f && half_value(0xfbff) == -65504.0f);
    /* every finite half survives half -> float -> half */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        if (half_bits(half_value((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    /* F64 -> F32 -> BF16 -> F32 -> F64 through tensors */
    enum { N = 1000 };
    double *x = rnd(N, 3.0), *back = dbuf(N);
    float *xf = fbuf(N), *xf2 = fbuf(N);
    uint16_t *bf = talloc(N * 2);
    mc_tensor tx = t1(x, F64, N), txf = t1(xf, F32, N), tbf = t1(bf, MC_BF16, N), txf2 = t1(xf2, F32, N),
              tback = t1(back, F64, N);
    mc_op_convert(be, &txf, &tx);
    mc_op_convert(be, &tbf, &txf);
    mc_op_convert(be, &txf2, &tbf);
    mc_op_convert(be, &tback, &txf2);
    bad = 0;
    for (int i = 0; i < N; i++) {
        if (xf[i] != (float)x[i] || bf[i] != mc_f32_to_bf16(xf[i]) || back[i] != mc_bf16_to_f32(bf[i])) bad++;
        if (fabs(back[i] - x[i]) > fabs(x[i]) * 0x1p-8) bad++;
    }
    CHECK(bad == 0);
}

/* ======================================================================== gemm, linear */

static void naive_gemm(double *c, const double *a, bool ta, const double *b, bool tb, int64_t m, int64_t n, int64_t k,
                       double alpha, double beta) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = alpha * s + (beta == 0 ? 0 : beta * c[i * n + j]);
        }
}

static void test_gemm(void) {
    const int64_t m = 7, n = 5, k = 9;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int zero_beta = 0; zero_beta < 2; zero_beta++) {
                double alpha = 0.7, beta = zero_beta ? 0.0 : 0.3;
                double *a = rnd(m * k, 1), *b = rnd(k * n, 1), *c0 = rnd(m * n, 1);
                if (zero_beta)
                    for (int64_t i = 0; i < m * n; i++) c0[i] = NAN; /* beta = 0 must overwrite */
                double *ref = dcopy(c0, m * n), *c = dcopy(c0, m * n);
                naive_gemm(ref, a, ta, b, tb, m, n, k, alpha, beta);
                mc_tensor A = ta ? t2(a, F64, k, m) : t2(a, F64, m, k), B = tb ? t2(b, F64, n, k) : t2(b, F64, k, n);
                mc_tensor C = t2(c, F64, m, n);
                mc_op_gemm(be, &C, &A, ta, &B, tb, (float)alpha, (float)beta);
                check_close("gemm F64", c, ref, m * n, 1e-6); /* alpha, beta pass through float */
                float *af = f32_of(a, m * k), *bf = f32_of(b, k * n), *cf = f32_of(c0, m * n);
                mc_tensor Af = A, Bf = B, Cf = t2(cf, F32, m, n);
                Af.data = af, Af.dtype = F32, Bf.data = bf, Bf.dtype = F32;
                mc_op_gemm(be, &Cf, &Af, ta, &Bf, tb, (float)alpha, (float)beta);
                check_f32("gemm", cf, c, m * n);
            }
    tfree_all();
}

typedef struct linear_case {
    int64_t n, in, out;
    double *x, *w, *b, *r, *y;
} linear_case;

static void linear_run(mc_dtype dt, int64_t n, int64_t in, int64_t out, void *y, void *x, void *w, void *b) {
    mc_tensor Y = t2(y, dt, n, out), X = t2(x, dt, n, in), W = t2(w, dt, out, in);
    mc_tensor B = b ? t1(b, dt, out) : mc_tensor_none();
    mc_op_linear_fwd(be, &Y, &X, &W, &B);
}

static void linear_run_bwd(mc_dtype dt, int64_t n, int64_t in, int64_t out, void *dx, void *dw, void *db, void *dy,
                           void *x, void *w) {
    mc_tensor DX = t2(dx, dt, n, in), DW = t2(dw, dt, out, in), DY = t2(dy, dt, n, out), X = t2(x, dt, n, in),
              W = t2(w, dt, out, in);
    mc_tensor DB = db ? t1(db, dt, out) : mc_tensor_none();
    mc_op_linear_bwd(be, &DX, &DW, &DB, &DY, &X, &W, true);
}

static double linear_loss(void *ctx) {
    linear_case *c = ctx;
    linear_run(F64, c->n, c->in, c->out, c->y, c->x, c->w, c->b);
    return dot(c->y, c->r, c->n * c->out);
}

static void test_linear(void) {
    for (int bias = 0; bias < 2; bias++) {
        linear_case c = {.n = 6, .in = 7, .out = 5};
        int64_t n = c.n, in = c.in, out = c.out;
        c.x = rnd(n * in, 1), c.w = rnd(out * in, 0.5), c.b = bias ? rnd(out, 1) : NULL, c.r = rnd(n * out, 1);
        c.y = dbuf(n * out);
        /* forward against the definition */
        linear_loss(&c);
        double *ref = dbuf(n * out);
        for (int64_t t = 0; t < n; t++)
            for (int64_t o = 0; o < out; o++) ref[t * out + o] = (bias ? c.b[o] : 0) + dot(c.x + t * in, c.w + o * in, in);
        check_close("linear_fwd", c.y, ref, n * out, 1e-14);
        /* backward: dx overwritten, dw and db accumulated */
        double *dx = rnd(n * in, 1e3), *dw0 = rnd(out * in, 1), *db0 = rnd(out, 1);
        double *dw = dcopy(dw0, out * in), *db = dcopy(db0, out);
        linear_run_bwd(F64, n, in, out, dx, dw, bias ? db : NULL, c.r, c.x, c.w);
        grad_check("linear dx", c.x, n * in, dx, linear_loss, &c, 1 << 20);
        grad_check("linear dw", c.w, out * in, delta(dw, dw0, out * in), linear_loss, &c, 1 << 20);
        if (bias) grad_check("linear db", c.b, out, delta(db, db0, out), linear_loss, &c, 1 << 20);
        /* F32 */
        float *xf = f32_of(c.x, n * in), *wf = f32_of(c.w, out * in), *bf = bias ? f32_of(c.b, out) : NULL;
        float *yf = fbuf(n * out), *dxf = fbuf(n * in), *dwf = f32_of(dw0, out * in), *dbf = f32_of(db0, out);
        linear_run(F32, n, in, out, yf, xf, wf, bf);
        check_f32("linear_fwd y", yf, c.y, n * out);
        linear_run_bwd(F32, n, in, out, dxf, dwf, bias ? dbf : NULL, f32_of(c.r, n * out), xf, wf);
        check_f32("linear_bwd dx", dxf, dx, n * in);
        check_f32d("linear_bwd dw", delta32(dwf, f32_of(dw0, out * in), out * in), delta(dw, dw0, out * in), out * in);
        if (bias) check_f32d("linear_bwd db", delta32(dbf, f32_of(db0, out), out), delta(db, db0, out), out);
        /* without accumulate, dw and db are written: old contents (NaN here) never read */
        double *dwo = rnd(out * in, 1), *dbo = rnd(out, 1);
        for (int64_t i = 0; i < out * in; i++) dwo[i] = NAN;
        for (int64_t i = 0; i < out; i++) dbo[i] = NAN;
        mc_tensor DW = t2(dwo, F64, out, in), DB = bias ? t1(dbo, F64, out) : mc_tensor_none(), none = mc_tensor_none();
        mc_tensor DY = t2(c.r, F64, n, out), X = t2(c.x, F64, n, in), W = t2(c.w, F64, out, in);
        mc_op_linear_bwd(be, &none, &DW, &DB, &DY, &X, &W, false);
        check_close("linear_bwd dw written", dwo, delta(dw, dw0, out * in), out * in, 1e-12);
        if (bias) check_close("linear_bwd db written", dbo, delta(db, db0, out), out, 1e-12);
        tfree_all();
    }
}

/* ======================================================================== linear + GELU */

/* fc1 -> tanh GELU -> fc2 with L = sum(z * r), z = gelu(x w1^T (+ b1)) w2^T. */
typedef struct mlp_case {
    int64_t n, in, f, out;
    double *x, *w1, *b1, *w2, *r, *pre, *act, *z;
} mlp_case;

static double mlp_loss(void *ctx) {
    mlp_case *c = ctx;
    mc_tensor Act = t2(c->act, F64, c->n, c->f), Pre = t2(c->pre, F64, c->n, c->f), X = t2(c->x, F64, c->n, c->in);
    mc_tensor W1 = t2(c->w1, F64, c->f, c->in), B1 = c->b1 ? t1(c->b1, F64, c->f) : mc_tensor_none();
    mc_op_linear_gelu_fwd(be, &Act, &Pre, &X, &W1, &B1);
    linear_run(F64, c->n, c->f, c->out, c->z, c->act, c->w2, NULL);
    return dot(c->z, c->r, c->n * c->out);
}

/* n doubles as dtype dt (F64 or F32) */
static void *as_real(mc_dtype dt, const double *v, int64_t n) { return dt == F64 ? (void *)dcopy(v, n) : (void *)f32_of(v, n); }
static void *real_buf(mc_dtype dt, int64_t n) { return dt == F64 ? (void *)dbuf(n) : (void *)fbuf(n); }

/* The fused ops give exactly the bits of the ops they stand for (the model's unfused path). */
static void mlp_same_bits(mc_dtype dt, const mlp_case *c) {
    int64_t n = c->n, in = c->in, f = c->f, out = c->out;
    size_t es = dt == F64 ? sizeof(double) : sizeof(float);
    bool bias = c->b1 != NULL;
    double *db0 = rnd(f, 1);
    mc_tensor X = t2(as_real(dt, c->x, n * in), dt, n, in), W1 = t2(as_real(dt, c->w1, f * in), dt, f, in);
    mc_tensor B1 = bias ? t1(as_real(dt, c->b1, f), dt, f) : mc_tensor_none();
    mc_tensor W2 = t2(as_real(dt, c->w2, out * f), dt, out, f), DY = t2(as_real(dt, c->r, n * out), dt, n, out);
    mc_tensor pre1 = t2(real_buf(dt, n * f), dt, n, f), act1 = t2(real_buf(dt, n * f), dt, n, f);
    mc_tensor pre2 = t2(real_buf(dt, n * f), dt, n, f), act2 = t2(real_buf(dt, n * f), dt, n, f);
    mc_op_linear_gelu_fwd(be, &act1, &pre1, &X, &W1, &B1);
    mc_op_linear_fwd(be, &pre2, &X, &W1, &B1);
    mc_op_gelu_fwd(be, &act2, &pre2, true);
    CHECK(memcmp(pre1.data, pre2.data, (size_t)(n * f) * es) == 0, "%s: linear_gelu_fwd pre differs from linear_fwd",
          mc_dtype_name(dt));
    CHECK(memcmp(act1.data, act2.data, (size_t)(n * f) * es) == 0, "%s: linear_gelu_fwd y differs from gelu_fwd",
          mc_dtype_name(dt));
    mc_tensor dpre1 = t2(real_buf(dt, n * f), dt, n, f), dpre2 = t2(real_buf(dt, n * f), dt, n, f);
    mc_tensor dact = t2(real_buf(dt, n * f), dt, n, f), none = mc_tensor_none();
    mc_tensor db1 = bias ? t1(as_real(dt, db0, f), dt, f) : none, db2 = bias ? t1(as_real(dt, db0, f), dt, f) : none;
    mc_op_linear_dgelu_bwd(be, &dpre1, &db1, &DY, &W2, &pre1);
    mc_op_linear_bwd(be, &dact, &none, &none, &DY, &act1, &W2, true);
    mc_op_gelu_bwd(be, &dpre2, &dact, &pre1, true);
    mc_op_linear_bwd(be, &none, &none, &db2, &dpre2, &X, &W1, true);
    CHECK(memcmp(dpre1.data, dpre2.data, (size_t)(n * f) * es) == 0,
          "%s: linear_dgelu_bwd dpre differs from linear_bwd + gelu_bwd", mc_dtype_name(dt));
    if (bias)
        CHECK(memcmp(db1.data, db2.data, (size_t)f * es) == 0, "%s: linear_dgelu_bwd db differs from linear_bwd's",
              mc_dtype_name(dt));
}

static void test_linear_gelu(void) {
    for (int bias = 0; bias < 2; bias++) {
        mlp_case c = {.n = 6, .in = 5, .f = 8, .out = 4};
        int64_t n = c.n, in = c.in, f = c.f, out = c.out;
        c.x = rnd(n * in, 1), c.w1 = rnd(f * in, 0.7), c.b1 = bias ? rnd(f, 0.5) : NULL, c.w2 = rnd(out * f, 0.5);
        c.r = rnd(n * out, 1), c.pre = dbuf(n * f), c.act = dbuf(n * f), c.z = dbuf(n * out);
        mlp_same_bits(F64, &c);
        mlp_same_bits(F32, &c);
        /* gradients of the pair: dpre and db1 from linear_dgelu_bwd, then fc1's linear_bwd */
        mlp_loss(&c);
        double *dpre = dbuf(n * f), *db0 = rnd(f, 1), *db = dcopy(db0, f), *dx = dbuf(n * in), *dw1 = dbuf(f * in);
        mc_tensor DPRE = t2(dpre, F64, n, f), DB = bias ? t1(db, F64, f) : mc_tensor_none();
        mc_tensor DY = t2(c.r, F64, n, out), W2 = t2(c.w2, F64, out, f), PRE = t2(c.pre, F64, n, f);
        mc_op_linear_dgelu_bwd(be, &DPRE, &DB, &DY, &W2, &PRE);
        linear_run_bwd(F64, n, in, f, dx, dw1, NULL, dpre, c.x, c.w1);
        grad_check("linear_gelu dx", c.x, n * in, dx, mlp_loss, &c, 1 << 20);
        grad_check("linear_gelu dw1", c.w1, f * in, dw1, mlp_loss, &c, 1 << 20);
        if (bias) grad_check("linear_dgelu_bwd db", c.b1, f, delta(db, db0, f), mlp_loss, &c, 1 << 20);
        tfree_all();
    }
}

/* linear_residual_fwd is linear_fwd then dropout_add_fwd (p = 0), bit for bit, with and
 * without a bias, in F64 and F32 (the model's path at TP 1 without dropout, whose results
 * must not depend on which of the two it takes). */
static void test_linear_residual(void) {
    int64_t n = 7, in = 5, out = 6;
    for (int bias = 0; bias < 2; bias++)
        for (int k = 0; k < 2; k++) {
            mc_dtype dt = k == 0 ? F64 : F32;
            size_t es = dt == F64 ? sizeof(double) : sizeof(float);
            mc_tensor X = t2(as_real(dt, rnd(n * in, 1), n * in), dt, n, in);
            mc_tensor W = t2(as_real(dt, rnd(out * in, 0.5), out * in), dt, out, in);
            mc_tensor B = bias ? t1(as_real(dt, rnd(out, 0.5), out), dt, out) : mc_tensor_none();
            mc_tensor R = t2(as_real(dt, rnd(n * out, 1), n * out), dt, n, out);
            mc_tensor y1 = t2(real_buf(dt, n * out), dt, n, out), y2 = t2(real_buf(dt, n * out), dt, n, out);
            mc_tensor t = t2(real_buf(dt, n * out), dt, n, out);
            mc_op_linear_residual_fwd(be, &y1, &R, &X, &W, &B);
            mc_op_linear_fwd(be, &t, &X, &W, &B);
            mc_op_dropout_add_fwd(be, &y2, &R, &t, 0.0f, 0, 0);
            CHECK(memcmp(y1.data, y2.data, (size_t)(n * out) * es) == 0,
                  "%s%s: linear_residual_fwd differs from linear_fwd + dropout_add_fwd", mc_dtype_name(dt),
                  bias ? " (bias)" : "");
            tfree_all();
        }
}

/* ======================================================================== embedding */

typedef struct emb_case {
    int64_t ntok, rows, h, vocab_start;
    int32_t *ids;
    double *table, *r, *y;
} emb_case;

static void emb_run(mc_dtype dt, const emb_case *c, void *y, void *table, bool accumulate) {
    mc_tensor Y = t2(y, dt, c->ntok, c->h), I = t1(c->ids, MC_I32, c->ntok), T = t2(table, dt, c->rows, c->h);
    mc_op_embedding_fwd(be, &Y, &I, &T, c->vocab_start, accumulate);
}

static void emb_run_bwd(mc_dtype dt, const emb_case *c, void *dtable, void *dy) {
    mc_tensor DT = t2(dtable, dt, c->rows, c->h), DY = t2(dy, dt, c->ntok, c->h), I = t1(c->ids, MC_I32, c->ntok);
    mc_op_embedding_bwd(be, &DT, &DY, &I, c->vocab_start);
}

static double emb_loss(void *ctx) {
    emb_case *c = ctx;
    emb_run(F64, c, c->y, c->table, false);
    return dot(c->y, c->r, c->ntok * c->h);
}

static void test_embedding(void) {
    /* this rank holds ids [5, 15); the others read as zeros and get no gradient */
    static int32_t ids[] = {5, 0, 14, 7, 15, 7, 19, 4, 9, 5, 12, 7, 100};
    emb_case c = {.ntok = 13, .rows = 10, .h = 9, .vocab_start = 5, .ids = ids};
    int64_t nt = c.ntok, h = c.h, rows = c.rows;
    c.table = rnd(rows * h, 1), c.r = rnd(nt * h, 1), c.y = rnd(nt * h, 1);
    emb_loss(&c);
    int bad = 0;
    for (int64_t t = 0; t < nt; t++) {
        int64_t r = ids[t] - c.vocab_start;
        for (int64_t k = 0; k < h; k++) bad += c.y[t * h + k] != ((r >= 0 && r < rows) ? c.table[r * h + k] : 0.0);
    }
    CHECK(bad == 0, "embedding_fwd rows");
    double *base = rnd(nt * h, 1), *acc = dcopy(base, nt * h);
    emb_run(F64, &c, acc, c.table, true);
    check_close("embedding_fwd accumulate", delta(acc, base, nt * h), c.y, nt * h, 1e-15);
    double *dt0 = rnd(rows * h, 1), *dt = dcopy(dt0, rows * h);
    emb_run_bwd(F64, &c, dt, c.r);
    grad_check("embedding dtable", c.table, rows * h, delta(dt, dt0, rows * h), emb_loss, &c, 1 << 20);
    float *yf = fbuf(nt * h), *dtf = f32_of(dt0, rows * h);
    emb_run(F32, &c, yf, f32_of(c.table, rows * h), false);
    check_f32("embedding_fwd", yf, c.y, nt * h);
    emb_run_bwd(F32, &c, dtf, f32_of(c.r, nt * h));
    check_f32d("embedding_bwd", delta32(dtf, f32_of(dt0, rows * h), rows * h), delta(dt, dt0, rows * h), rows * h);
    tfree_all();
}

/* ======================================================================== norms */

typedef struct norm_case {
    bool rms;
    int64_t n, h;
    double *x, *w, *b, *r, *y, *mean, *rstd;
    float eps;
} norm_case;

static void norm_run(mc_dtype dt, const norm_case *c, void *y, void *mean, void *rstd, void *x, void *w, void *b) {
    mc_tensor Y = t2(y, dt, c->n, c->h), X = t2(x, dt, c->n, c->h), W = t1(w, dt, c->h);
    mc_tensor M = t1(mean, dt, c->n), R = t1(rstd, dt, c->n), B = b ? t1(b, dt, c->h) : mc_tensor_none();
    if (c->rms) mc_op_rmsnorm_fwd(be, &Y, &R, &X, &W, c->eps);
    else mc_op_layernorm_fwd(be, &Y, &M, &R, &X, &W, &B, c->eps);
}

/* yout (optional): the forward's output rewritten by the backward; b: the forward's bias. */
static void norm_run_bwd(mc_dtype dt, const norm_case *c, void *dx, void *dw, void *db, void *yout, void *dy, void *x,
                         void *w, void *b, void *mean, void *rstd) {
    mc_tensor DX = t2(dx, dt, c->n, c->h), DW = t1(dw, dt, c->h), DY = t2(dy, dt, c->n, c->h);
    mc_tensor X = t2(x, dt, c->n, c->h), W = t1(w, dt, c->h), M = t1(mean, dt, c->n), R = t1(rstd, dt, c->n);
    mc_tensor DB = db ? t1(db, dt, c->h) : mc_tensor_none(), B = b ? t1(b, dt, c->h) : mc_tensor_none();
    mc_tensor Y = yout ? t2(yout, dt, c->n, c->h) : mc_tensor_none(), NONE_DS = mc_tensor_none();
    if (c->rms) mc_op_rmsnorm_bwd(be, &DX, &DW, &NONE_DS, &Y, &DY, &X, &W, &R);
    else mc_op_layernorm_bwd(be, &DX, &DW, &DB, &NONE_DS, &Y, &DY, &X, &W, &B, &M, &R);
}

static double norm_loss(void *ctx) {
    norm_case *c = ctx;
    norm_run(F64, c, c->y, c->mean, c->rstd, c->x, c->w, c->b);
    return dot(c->y, c->r, c->n * c->h);
}

static void norm_test(bool rms, bool bias) {
    norm_case c = {.rms = rms, .n = 7, .h = 10, .eps = 1e-5f};
    int64_t n = c.n, h = c.h, nh = n * h;
    c.x = rnd(nh, 1.5), c.w = rnd(h, 1), c.b = bias ? rnd(h, 1) : NULL, c.r = rnd(nh, 1);
    for (int64_t i = 0; i < nh; i++) c.x[i] += 0.5; /* a nonzero mean */
    c.y = dbuf(nh), c.mean = dbuf(n), c.rstd = dbuf(n);
    norm_loss(&c);
    /* forward against the definition */
    double *ref = dbuf(nh);
    for (int64_t t = 0; t < n; t++) {
        double mu = 0, var = 0;
        for (int64_t k = 0; k < h; k++) mu += c.x[t * h + k] / h;
        for (int64_t k = 0; k < h; k++) {
            double v = rms ? c.x[t * h + k] : c.x[t * h + k] - mu;
            var += v * v / h;
        }
        double rs = 1 / sqrt(var + (double)c.eps);
        for (int64_t k = 0; k < h; k++)
            ref[t * h + k] = (rms ? c.x[t * h + k] : c.x[t * h + k] - mu) * rs * c.w[k] + (bias ? c.b[k] : 0);
        CHECK_REL(c.rstd[t], rs, 1e-12);
        if (!rms) CHECK(fabs(c.mean[t] - mu) < 1e-14, "mean %.17g vs %.17g", c.mean[t], mu);
    }
    check_close("norm fwd", c.y, ref, nh, 1e-12);
    /* backward: all accumulate */
    double *dx0 = rnd(nh, 1), *dw0 = rnd(h, 1), *db0 = rnd(h, 1);
    double *dx = dcopy(dx0, nh), *dw = dcopy(dw0, h), *db = dcopy(db0, h);
    double *yre = dbuf(nh);
    norm_run_bwd(F64, &c, dx, dw, bias ? db : NULL, yre, c.r, c.x, c.w, c.b, c.mean, c.rstd);
    CHECK(memcmp(yre, c.y, (size_t)nh * sizeof(double)) == 0, "norm bwd's rewritten y is the forward's, bit for bit");
    grad_check("norm dx", c.x, nh, delta(dx, dx0, nh), norm_loss, &c, 1 << 20);
    grad_check("norm dw", c.w, h, delta(dw, dw0, h), norm_loss, &c, 1 << 20);
    if (bias) grad_check("norm db", c.b, h, delta(db, db0, h), norm_loss, &c, 1 << 20);
    /* dx may alias dy (the column pass runs first) */
    double *alias = dcopy(c.r, nh), *dw_a = dcopy(dw0, h);
    norm_run_bwd(F64, &c, alias, dw_a, NULL, NULL, alias, c.x, c.w, c.b, c.mean, c.rstd);
    double *expect = delta(dx, dx0, nh);
    for (int64_t i = 0; i < nh; i++) expect[i] += c.r[i];
    check_close("norm bwd dx aliasing dy", alias, expect, nh, 1e-14);
    /* F32 */
    float *xf = f32_of(c.x, nh), *wf = f32_of(c.w, h), *bf = bias ? f32_of(c.b, h) : NULL;
    float *yf = fbuf(nh), *mf = fbuf(n), *rf = fbuf(n);
    norm_run(F32, &c, yf, mf, rf, xf, wf, bf);
    check_f32("norm fwd y", yf, c.y, nh);
    check_f32("norm fwd rstd", rf, c.rstd, n);
    if (!rms) check_f32("norm fwd mean", mf, c.mean, n);
    float *dxf = f32_of(dx0, nh), *dwf = f32_of(dw0, h), *dbf = f32_of(db0, h);
    float *yref = fbuf(nh);
    norm_run_bwd(F32, &c, dxf, dwf, bias ? dbf : NULL, yref, f32_of(c.r, nh), xf, wf, bf, mf, rf);
    CHECK(memcmp(yref, yf, (size_t)nh * sizeof(float)) == 0, "F32 norm bwd's rewritten y is the forward's, bit for bit");
    check_f32d("norm bwd dx", delta32(dxf, f32_of(dx0, nh), nh), delta(dx, dx0, nh), nh);
    check_f32d("norm bwd dw", delta32(dwf, f32_of(dw0, h), h), delta(dw, dw0, h), h);
    if (bias) check_f32d("norm bwd db", delta32(dbf, f32_of(db0, h), h), delta(db, db0, h), h);
    tfree_all();
}

static void test_layernorm_bias(void) { norm_test(false, true); }
static void test_layernorm_nobias(void) { norm_test(false, false); }
static void test_rmsnorm(void) { norm_test(true, false); }

/* ======================================================================== rope */

typedef struct rope_case {
    mc_rope_desc d;
    int64_t numel;
    double *x, *r, *work;
} rope_case;

static mc_rope_desc rope_desc_as(const rope_case *c, mc_dtype dt, void *cos_tab, void *sin_tab) {
    mc_rope_desc d = c->d;
    d.cos.data = cos_tab, d.cos.dtype = dt, d.sin.data = sin_tab, d.sin.dtype = dt;
    return d;
}

static void rope_run(mc_dtype dt, const mc_rope_desc *d, void *x, int64_t numel, bool inverse) {
    mc_tensor X = t1(x, dt, numel);
    mc_op_rope(be, &X, d, inverse);
}

static double rope_loss(void *ctx) {
    rope_case *c = ctx;
    memcpy(c->work, c->x, (size_t)c->numel * sizeof(double));
    rope_run(F64, &c->d, c->work, c->numel, false);
    return dot(c->work, c->r, c->numel);
}

static void rope_test(bool with_pos) {
    const int64_t S = 5, B = 2, P = 16;
    const int heads = 4, groups = 2, hd = 8, rot = 6, half = rot / 2, per_group = heads / groups + 2;
    double *cos_tab = dbuf(P * half), *sin_tab = dbuf(P * half);
    for (int64_t p = 0; p < P; p++)
        for (int k = 0; k < half; k++) {
            double theta = p * pow(10000.0, -2.0 * k / rot);
            cos_tab[p * half + k] = cos(theta), sin_tab[p * half + k] = sin(theta);
        }
    int32_t *pos = talloc(S * B * sizeof(int32_t));
    for (int64_t t = 0; t < S * B; t++) pos[t] = (int32_t)((t * 7 + 3) % P);
    rope_case c = {.d = {.seq = S, .batch = B, .heads = heads, .groups = groups, .head_dim = hd, .rot_dim = rot,
                         .cos = t2(cos_tab, F64, P, half), .sin = t2(sin_tab, F64, P, half),
                         .pos = with_pos ? t1(pos, MC_I32, S * B) : mc_tensor_none()}};
    c.numel = S * B * (heads + 2 * groups) * hd;
    c.x = rnd(c.numel, 1), c.r = rnd(c.numel, 1), c.work = dbuf(c.numel);
    rope_loss(&c);
    /* against the formula, and untouched value heads and tail dims */
    int bad = 0;
    for (int64_t t = 0; t < S * B; t++)
        for (int hd_i = 0; hd_i < groups * per_group; hd_i++) {
            bool is_v = hd_i % per_group == per_group - 1;
            int64_t p = with_pos ? pos[t] : t / B;
            const double *x = c.x + (t * groups * per_group + hd_i) * hd, *y = c.work + (t * groups * per_group + hd_i) * hd;
            for (int k = 0; k < hd; k++) {
                double e = x[k];
                if (!is_v && k < rot) {
                    int kk = k % half;
                    double co = cos_tab[p * half + kk], si = sin_tab[p * half + kk];
                    e = k < half ? x[k] * co - x[k + half] * si : x[k] * co + x[k - half] * si;
                }
                bad += fabs(y[k] - e) > 1e-14;
            }
        }
    CHECK(bad == 0, "rope against the formula: %d elements", bad);
    /* gradient: the transpose, i.e. inverse = true on r */
    double *g = dcopy(c.r, c.numel);
    rope_run(F64, &c.d, g, c.numel, true);
    grad_check("rope dx", c.x, c.numel, g, rope_loss, &c, 1 << 20);
    /* inverse undoes forward */
    double *rt = dcopy(c.work, c.numel);
    rope_run(F64, &c.d, rt, c.numel, true);
    check_close("rope inverse(rope(x)) = x", rt, c.x, c.numel, 1e-14);
    /* F32 */
    mc_rope_desc df = rope_desc_as(&c, F32, f32_of(cos_tab, P * half), f32_of(sin_tab, P * half));
    float *xf = f32_of(c.x, c.numel), *gf = f32_of(c.r, c.numel);
    rope_run(F32, &df, xf, c.numel, false);
    rope_run(F32, &df, gf, c.numel, true);
    check_f32("rope fwd", xf, c.work, c.numel);
    check_f32("rope inverse", gf, g, c.numel);
    tfree_all();
}

static void test_rope_pos_ids(void) { rope_test(true); }
static void test_rope_seq_positions(void) { rope_test(false); }

/* ======================================================================== activations */

typedef struct act_case {
    bool swiglu, tanh;
    int64_t n, f; /* gelu: n elements; swiglu: x [n, 2f] */
    double *x, *r, *y;
} act_case;

static void act_run(mc_dtype dt, const act_case *c, void *y, void *x) {
    mc_tensor Y = c->swiglu ? t2(y, dt, c->n, c->f) : t1(y, dt, c->n);
    mc_tensor X = c->swiglu ? t2(x, dt, c->n, 2 * c->f) : t1(x, dt, c->n);
    if (c->swiglu) mc_op_swiglu_fwd(be, &Y, &X);
    else mc_op_gelu_fwd(be, &Y, &X, c->tanh);
}

/* yout (optional, SwiGLU): the forward's output rewritten by the backward. */
static void act_run_bwd(mc_dtype dt, const act_case *c, void *dx, void *yout, void *dy, void *x) {
    mc_tensor DY = c->swiglu ? t2(dy, dt, c->n, c->f) : t1(dy, dt, c->n);
    mc_tensor X = c->swiglu ? t2(x, dt, c->n, 2 * c->f) : t1(x, dt, c->n), DX = X;
    mc_tensor Y = yout ? t2(yout, dt, c->n, c->f) : mc_tensor_none();
    DX.data = dx;
    if (c->swiglu) mc_op_swiglu_bwd(be, &DX, &Y, &DY, &X);
    else mc_op_gelu_bwd(be, &DX, &DY, &X, c->tanh);
}

static double act_loss(void *ctx) {
    act_case *c = ctx;
    act_run(F64, c, c->y, c->x);
    return dot(c->y, c->r, c->swiglu ? c->n * c->f : c->n);
}

static void gelu_test(bool tanh_approx) {
    act_case c = {.n = 200, .tanh = tanh_approx};
    c.x = rnd(c.n, 2.5), c.r = rnd(c.n, 1), c.y = dbuf(c.n);
    c.x[0] = 0, c.x[1] = -30, c.x[2] = 30, c.x[3] = 1e-4;
    act_loss(&c);
    double *ref = dbuf(c.n);
    for (int64_t i = 0; i < c.n; i++) {
        double v = c.x[i];
        ref[i] = tanh_approx ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                             : 0.5 * v * (1 + erf(v / sqrt(2.0)));
    }
    check_close(tanh_approx ? "gelu against 0.5 x (1 + tanh(.))" : "gelu against 0.5 x (1 + erf(x/sqrt2))", c.y, ref,
                c.n, 1e-14);
    double *dx = dbuf(c.n);
    act_run_bwd(F64, &c, dx, NULL, c.r, c.x);
    grad_check("gelu dx", c.x, c.n, dx, act_loss, &c, 1 << 20);
    double *inplace = dcopy(c.r, c.n);
    act_run_bwd(F64, &c, inplace, NULL, inplace, c.x);
    check_close("gelu_bwd with dx aliasing dy", inplace, dx, c.n, 1e-15);
    float *xf = f32_of(c.x, c.n), *yf = fbuf(c.n), *dxf = fbuf(c.n);
    act_run(F32, &c, yf, xf);
    act_run_bwd(F32, &c, dxf, NULL, f32_of(c.r, c.n), xf);
    check_f32("gelu fwd", yf, c.y, c.n);
    check_f32("gelu bwd", dxf, dx, c.n);
    tfree_all();
}

static void test_gelu(void) { gelu_test(true); }
static void test_gelu_erf(void) { gelu_test(false); }

static void test_swiglu(void) {
    act_case c = {.swiglu = true, .n = 6, .f = 11};
    int64_t nx = c.n * 2 * c.f, ny = c.n * c.f;
    c.x = rnd(nx, 2), c.r = rnd(ny, 1), c.y = dbuf(ny);
    act_loss(&c);
    double *ref = dbuf(ny);
    for (int64_t t = 0; t < c.n; t++)
        for (int64_t j = 0; j < c.f; j++) {
            double a = c.x[t * 2 * c.f + j], u = c.x[t * 2 * c.f + c.f + j];
            ref[t * c.f + j] = a / (1 + exp(-a)) * u;
        }
    check_close("swiglu against silu(gate) up", c.y, ref, ny, 1e-14);
    double *dx = dbuf(nx), *yre = dbuf(ny);
    act_run_bwd(F64, &c, dx, yre, c.r, c.x);
    grad_check("swiglu dx", c.x, nx, dx, act_loss, &c, 1 << 20);
    CHECK(memcmp(yre, c.y, (size_t)ny * sizeof(double)) == 0, "swiglu bwd's rewritten y is the forward's, bit for bit");
    /* in place (dx over x, as the model does), rewriting y */
    double *xin = dcopy(c.x, nx), *yin = dbuf(ny);
    act_run_bwd(F64, &c, xin, yin, c.r, xin);
    check_close("swiglu_bwd with dx aliasing x", xin, dx, nx, 0);
    CHECK(memcmp(yin, c.y, (size_t)ny * sizeof(double)) == 0, "swiglu bwd in place: y bit for bit");
    float *xf = f32_of(c.x, nx), *yf = fbuf(ny), *dxf = fbuf(nx), *yref = fbuf(ny);
    act_run(F32, &c, yf, xf);
    act_run_bwd(F32, &c, dxf, yref, f32_of(c.r, ny), xf);
    check_f32("swiglu fwd", yf, c.y, ny);
    check_f32("swiglu bwd", dxf, dx, nx);
    CHECK(memcmp(yref, yf, (size_t)ny * sizeof(float)) == 0, "F32 swiglu bwd's rewritten y bit for bit");
    tfree_all();
}

/* ======================================================================== attention */

typedef struct attn_case {
    mc_attn_desc d;
    int64_t nqkv, nout, nlse;
    double *qkv, *r, *out, *lse;
} attn_case;

static void attn_run(mc_dtype dt, const mc_attn_desc *d, void *out, void *lse, void *qkv) {
    int64_t nqkv = d->seq * d->batch * (d->heads + 2 * d->groups) * d->head_dim;
    mc_tensor O = t1(out, dt, d->seq * d->batch * d->heads * d->head_dim), L = t1(lse, dt, d->batch * d->heads * d->seq),
              Q = t1(qkv, dt, nqkv);
    mc_op_attention_fwd(be, &O, &L, &Q, d);
}

static void attn_run_bwd(mc_dtype dt, const mc_attn_desc *d, void *dqkv, void *dout, void *qkv, void *out, void *lse) {
    int64_t nqkv = d->seq * d->batch * (d->heads + 2 * d->groups) * d->head_dim;
    int64_t nout = d->seq * d->batch * d->heads * d->head_dim;
    mc_tensor DQ = t1(dqkv, dt, nqkv), DO = t1(dout, dt, nout), Q = t1(qkv, dt, nqkv), O = t1(out, dt, nout),
              L = t1(lse, dt, d->batch * d->heads * d->seq);
    mc_op_attention_bwd(be, &DQ, NULL, &DO, &Q, &O, &L, d);
}

static double attn_loss(void *ctx) {
    attn_case *c = ctx;
    attn_run(F64, &c->d, c->out, c->lse, c->qkv);
    return dot(c->out, c->r, c->nout);
}

/* The definition, with the full softmax row in memory. */
static void attn_naive(const mc_attn_desc *d, const double *qkv, double *out, double *lse) {
    const int64_t S = d->seq, B = d->batch;
    const int H = d->heads, G = d->groups, hd = d->head_dim, hpg = H / G, ts = (H + 2 * G) * hd;
    const int32_t *seg = d->seg_start.data;
    double *p = malloc((size_t)S * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                int g = h / hpg;
                int64_t lo = seg ? seg[b * S + i] : 0;
                const double *q = qkv + (i * B + b) * ts + (g * (hpg + 2) + h % hpg) * hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = lo; j <= i; j++) {
                    const double *k = qkv + (j * B + b) * ts + (g * (hpg + 2) + hpg) * hd;
                    p[j] = (double)d->softmax_scale * dot(q, k, hd);
                    m = fmax(m, p[j]);
                }
                for (int64_t j = lo; j <= i; j++) sum += (p[j] = exp(p[j] - m));
                double *o = out + ((i * B + b) * H + h) * hd;
                for (int c = 0; c < hd; c++) o[c] = 0;
                for (int64_t j = lo; j <= i; j++) {
                    double w = p[j] / sum;
                    if (d->dropout > 0) {
                        float u = mc_philox_uniform(d->seed, d->stream, (uint64_t)(((b * H + h) * S + i) * S + j));
                        w = u >= d->dropout ? w / (1.0 - (double)d->dropout) : 0;
                    }
                    const double *v = qkv + (j * B + b) * ts + (g * (hpg + 2) + hpg + 1) * hd;
                    for (int c = 0; c < hd; c++) o[c] += w * v[c];
                }
                lse[(b * H + h) * S + i] = m + log(sum);
            }
    free(p);
}

/* attention_kv_fwd (generation): a prompt of S0 tokens through the cache in one call, then
 * the rest one token a call, every sequence at the same positions, gives the naive causal
 * attention of the whole sequence; the cache holds every position's key and value. */
static void attn_kv_test(int64_t S, int64_t S0, int64_t B, int heads, int groups, int hd) {
    mc_attn_desc d = {.seq = S, .batch = B, .heads = heads, .groups = groups, .head_dim = hd,
                      .softmax_scale = (float)(1.0 / sqrt(hd)), .seg_start = mc_tensor_none()};
    const int64_t ts = (heads + 2 * groups) * hd, nqkv = S * B * ts, nout = S * B * heads * hd;
    double *qkv = rnd(nqkv, 1), *ref = dbuf(nout), *lse = dbuf(B * heads * S), *out = dbuf(nout);
    double *cache = dbuf(B * S * groups * 2 * hd);
    int32_t *pos = talloc((size_t)(S0 * B) * sizeof(int32_t));
    attn_naive(&d, qkv, ref, lse);
    mc_tensor C = t1(cache, F64, B * S * groups * 2 * hd);
    for (int64_t p0 = 0; p0 < S;) {
        const int64_t n = p0 == 0 ? S0 : 1;
        mc_attn_desc dd = d;
        dd.seq = n;
        for (int64_t t = 0; t < n * B; t++) pos[t] = (int32_t)(p0 + t / B);
        mc_tensor O = t1(out + p0 * B * heads * hd, F64, n * B * heads * hd), Q = t1(qkv + p0 * B * ts, F64, n * B * ts);
        mc_tensor P = t1(pos, MC_I32, n * B);
        mc_op_attention_kv_fwd(be, &O, &C, &Q, &P, &dd);
        p0 += n;
    }
    check_close("attention_kv_fwd out vs naive", out, ref, nout, 1e-12);
    const int hpg = heads / groups;
    double worst = 0; /* the cache [B, S, groups, 2, hd]: position j's key and value heads of each group, as in qkv */
    for (int64_t j = 0; j < S; j++)
        for (int64_t b = 0; b < B; b++)
            for (int g = 0; g < groups; g++)
                for (int c = 0; c < 2 * hd; c++)
                    worst = fmax(worst, fabs(cache[((b * S + j) * groups + g) * 2 * hd + c] -
                                             qkv[(j * B + b) * ts + (g * (hpg + 2) + hpg) * hd + c]));
    CHECK(worst == 0, "the cache differs from the keys and values by %g", worst);
}

/* Sequences of their own lengths in one cache (generation's batch): each prompt alone
 * into its slot (batch 1 over the slot's part of the cache), then calls over all B
 * sequences together, the first with two new tokens a sequence, each at its own position;
 * a sequence already at its end repeats its last positions (same keys and values again).
 * Every output equals the naive attention of that sequence alone; the cache holds every
 * sequence's keys and values at its positions. */
static void attn_kv_ragged_test(int B, const int *prompt, const int *len, int heads, int groups, int hd) {
    const int64_t ts = (int64_t)(heads + 2 * groups) * hd, ho = (int64_t)heads * hd, per_pos = (int64_t)groups * 2 * hd;
    int64_t cap = 0;
    for (int b = 0; b < B; b++) cap = len[b] + 1 > cap ? len[b] + 1 : cap; /* a position to spare */
    double **qkv = talloc(sizeof(double *) * (size_t)B), **ref = talloc(sizeof(double *) * (size_t)B);
    for (int b = 0; b < B; b++) { /* each sequence alone: [len, 1] */
        mc_attn_desc one = {.seq = len[b], .batch = 1, .heads = heads, .groups = groups, .head_dim = hd,
                            .softmax_scale = (float)(1.0 / sqrt(hd)), .seg_start = mc_tensor_none()};
        qkv[b] = rnd(len[b] * ts, 1);
        ref[b] = dbuf(len[b] * ho);
        attn_naive(&one, qkv[b], ref[b], dbuf(heads * len[b]));
    }
    double *cache = dbuf(B * cap * per_pos), *q = dbuf(2 * B * ts), *out = dbuf(2 * B * ho), worst = 0;
    int32_t *pos = talloc(sizeof(int32_t) * (size_t)(cap + 2 * B)); /* a prompt's, or a call's */
    mc_tensor C = t1(cache, F64, B * cap * per_pos);
    mc_attn_desc d = {.heads = heads, .groups = groups, .head_dim = hd, .softmax_scale = (float)(1.0 / sqrt(hd)),
                      .seg_start = mc_tensor_none()};
    int64_t *at = talloc(sizeof(int64_t) * (size_t)B); /* positions written so far */
    for (int b = 0; b < B; b++) { /* the prompts */
        d.seq = prompt[b];
        d.batch = 1;
        for (int i = 0; i < prompt[b]; i++) pos[i] = i;
        double *o = dbuf(prompt[b] * ho);
        mc_tensor O = t1(o, F64, prompt[b] * ho), Q = t1(qkv[b], F64, prompt[b] * ts), P = t1(pos, MC_I32, prompt[b]);
        mc_tensor slot = t1(cache + b * cap * per_pos, F64, cap * per_pos);
        mc_op_attention_kv_fwd(be, &O, &slot, &Q, &P, &d);
        for (int64_t i = 0; i < prompt[b] * ho; i++) worst = fmax(worst, fabs(o[i] - ref[b][i]));
        at[b] = prompt[b];
    }
    for (int64_t S = 2;; S = 1) { /* the batched calls */
        bool more = false;
        for (int b = 0; b < B; b++) more = more || at[b] < len[b];
        if (!more) break;
        d.seq = S;
        d.batch = B;
        for (int64_t s = 0; s < S; s++)
            for (int b = 0; b < B; b++) {
                const int64_t p = (at[b] < len[b] - S ? at[b] : len[b] - S) + s, t = s * B + b;
                pos[t] = (int32_t)p;
                memcpy(q + t * ts, qkv[b] + p * ts, sizeof(double) * (size_t)ts);
            }
        mc_tensor O = t1(out, F64, S * B * ho), Q = t1(q, F64, S * B * ts), P = t1(pos, MC_I32, S * B);
        mc_op_attention_kv_fwd(be, &O, &C, &Q, &P, &d);
        for (int64_t t = 0; t < S * B; t++) {
            const int b = (int)(t % B);
            for (int64_t i = 0; i < ho; i++) worst = fmax(worst, fabs(out[t * ho + i] - ref[b][pos[t] * ho + i]));
            if (pos[t] + 1 > at[b]) at[b] = pos[t] + 1;
        }
    }
    CHECK(worst < 1e-12, "attention_kv_fwd of sequences of their own lengths: %g from the naive attention alone", worst);
    const int hpg = heads / groups;
    double cw = 0;
    for (int b = 0; b < B; b++)
        for (int64_t j = 0; j < len[b]; j++)
            for (int g = 0; g < groups; g++)
                for (int c = 0; c < 2 * hd; c++)
                    cw = fmax(cw, fabs(cache[(b * cap + j) * per_pos + g * 2 * hd + c] -
                                       qkv[b][j * ts + (g * (hpg + 2) + hpg) * hd + c]));
    CHECK(cw == 0, "the cache differs from the sequences' keys and values by %g", cw);
    tfree_all();
}

static void test_attention_kv_cache(void) {
    attn_kv_test(23, 9, 2, 4, 2, 16);  /* GQA, prefill then 14 single steps */
    attn_kv_test(300, 290, 1, 2, 2, 8); /* more than one 256-key block */
    attn_kv_test(5, 1, 3, 3, 1, 32);   /* MQA, one token at a time from the start */
    tfree_all();
}

static void test_attention_kv_ragged(void) {
    static const int prompt3[] = {5, 1, 12}, len3[] = {9, 14, 13};
    attn_kv_ragged_test(3, prompt3, len3, 4, 2, 16);
    static const int prompt2[] = {270, 3}, len2[] = {300, 8}; /* past one 256-key block, beside a short one */
    attn_kv_ragged_test(2, prompt2, len2, 2, 1, 8);
}

/* argmax_rows: the lowest id of the largest value over the shards' rows, ids from vocab on
 * left out, NaN never chosen; against a loop over the whole rows. */
static void test_argmax_rows(void) {
    enum { N = 3, SHARDS = 2, V = 7, VOCAB = 12 };
    float x[SHARDS * N * V];
    for (int i = 0; i < SHARDS * N * V; i++) x[i] = (float)((i * 37) % 11) - 5.0f;
    x[(1 * N + 0) * V + 2] = 9.0f;    /* row 0: id 9 in shard 1 ... */
    x[(0 * N + 0) * V + 4] = 9.0f;    /* ... ties id 4 in shard 0, which wins */
    x[(1 * N + 1) * V + 6] = 50.0f;   /* row 1: id 13 >= vocab, not a token */
    x[(0 * N + 2) * V + 0] = NAN;     /* row 2: NaN never wins */
    int32_t ids[N], want[N];
    for (int b = 0; b < N; b++) {
        want[b] = 0;
        float best = -INFINITY;
        for (int id = 0; id < VOCAB; id++) {
            const float v = x[((id / V) * N + b) * V + id % V];
            if (v > best) best = v, want[b] = id;
        }
    }
    mc_tensor I = t1(ids, MC_I32, N), X = mc_tensor_2d(x, F32, SHARDS * N, V);
    mc_op_argmax_rows(be, &I, &X, VOCAB);
    for (int b = 0; b < N; b++) CHECK(ids[b] == want[b], "argmax_rows row %d: %d, want %d", b, ids[b], want[b]);
    CHECK(want[0] == 4, "the test's tie: %d", want[0]);
}

/* fd_points: finite-difference points for dqkv (all when >= the element count) */
static void attn_test(int64_t S, int64_t B, int heads, int groups, int hd, bool seg, float dropout, int64_t fd_points) {
    attn_case c = {.d = {.seq = S, .batch = B, .heads = heads, .groups = groups, .head_dim = hd,
                         .softmax_scale = (float)(1.0 / sqrt(hd)), .dropout = dropout, .seed = 1234, .stream = 99}};
    c.nqkv = S * B * (heads + 2 * groups) * hd, c.nout = S * B * heads * hd, c.nlse = B * heads * S;
    if (seg) { /* documents starting at 0, S/3, 2S/3+1 in batch 0 and at 0, S/2 in the others */
        int32_t *ss = talloc((size_t)(B * S) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < S; i++) {
                int64_t start = 0;
                if (b == 0) start = i >= 2 * S / 3 + 1 ? 2 * S / 3 + 1 : i >= S / 3 ? S / 3 : 0;
                else start = i >= S / 2 ? S / 2 : 0;
                ss[b * S + i] = (int32_t)start;
            }
        c.d.seg_start = t2(ss, MC_I32, B, S);
    }
    c.qkv = rnd(c.nqkv, 1), c.r = rnd(c.nout, 1), c.out = dbuf(c.nout), c.lse = dbuf(c.nlse);
    attn_loss(&c);
    double *ref_out = dbuf(c.nout), *ref_lse = dbuf(c.nlse);
    attn_naive(&c.d, c.qkv, ref_out, ref_lse);
    check_close("attention_fwd out vs naive", c.out, ref_out, c.nout, 1e-12);
    check_close("attention_fwd lse vs naive", c.lse, ref_lse, c.nlse, 1e-12);
    double *dqkv = dbuf(c.nqkv);
    for (int64_t i = 0; i < c.nqkv; i++) dqkv[i] = 12345.0; /* must be fully overwritten */
    attn_run_bwd(F64, &c.d, dqkv, c.r, c.qkv, c.out, c.lse);
    grad_check("attention dqkv", c.qkv, c.nqkv, dqkv, attn_loss, &c, fd_points);
    /* F32 */
    float *qf = f32_of(c.qkv, c.nqkv), *of = fbuf(c.nout), *lf = fbuf(c.nlse), *dqf = fbuf(c.nqkv);
    attn_run(F32, &c.d, of, lf, qf);
    check_f32("attention_fwd out", of, c.out, c.nout);
    check_f32("attention_fwd lse", lf, c.lse, c.nlse);
    attn_run_bwd(F32, &c.d, dqf, f32_of(c.r, c.nout), qf, of, lf);
    check_f32("attention_bwd dqkv", dqf, dqkv, c.nqkv);
    tfree_all();
}

static void test_attention_mha(void) { attn_test(9, 2, 2, 2, 4, false, 0, 1 << 20); }
static void test_attention_gqa(void) { attn_test(9, 2, 4, 2, 4, false, 0, 1 << 20); }
static void test_attention_seg_start(void) { attn_test(9, 2, 4, 2, 4, true, 0, 1 << 20); }
static void test_attention_dropout(void) { attn_test(9, 2, 4, 2, 4, false, 0.3f, 1 << 20); }
/* more keys than one online-softmax block and more queries than one forward block */
static void test_attention_long_mqa_seg_dropout(void) { attn_test(150, 1, 2, 1, 4, true, 0.1f, 1 << 20); }
static void test_attention_wide(void) { attn_test(102, 2, 4, 2, 32, true, 0.2f, 1500); }

/* ======================================================================== dropout */

static void test_philox_vectorized(void) {
    float u[300];
    static const uint64_t starts[] = {0, 1, 3, 5, 17, 4 * 0xffffffffULL - 9, 0x123456789ULL};
    static const int64_t lens[] = {0, 1, 3, 16, 17, 31, 64, 300};
    int bad = 0;
    for (size_t a = 0; a < sizeof starts / sizeof starts[0]; a++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            uint64_t seed = 0x0123456789abcdefULL + a, stream = 0xfedcba9876543210ULL - l;
            mc_cpu_philox_uniforms(seed, stream, starts[a], lens[l], u);
            for (int64_t k = 0; k < lens[l]; k++) bad += u[k] != mc_philox_uniform(seed, stream, starts[a] + (uint64_t)k);
        }
    CHECK(bad == 0, "%d vectorized Philox draws differ from mc_philox_uniform", bad);
}

typedef struct drop_case {
    int64_t n;
    float p;
    double *x, *r, *y;
} drop_case;

static void drop_run(mc_dtype dt, const drop_case *c, void *y, void *x) {
    mc_tensor Y = t1(y, dt, c->n), X = t1(x, dt, c->n);
    mc_op_dropout_fwd(be, &Y, &X, c->p, 42, 7);
}

static double drop_loss(void *ctx) {
    drop_case *c = ctx;
    drop_run(F64, c, c->y, c->x);
    return dot(c->y, c->r, c->n);
}

static void test_dropout(void) {
    drop_case c = {.n = 10007, .p = 0.3f};
    int64_t n = c.n;
    c.x = rnd(n, 1), c.r = rnd(n, 1), c.y = dbuf(n);
    drop_loss(&c);
    int bad = 0;
    int64_t kept = 0;
    double scale = 1.0 / (1.0 - (double)c.p);
    for (int64_t i = 0; i < n; i++) {
        bool keep = mc_philox_uniform(42, 7, (uint64_t)i) >= c.p;
        kept += keep;
        bad += c.y[i] != (keep ? c.x[i] * scale : 0.0);
    }
    CHECK(bad == 0, "dropout mask: %d elements", bad);
    CHECK(fabs((double)kept / n - 0.7) < 0.02, "kept fraction %g", (double)kept / n);
    /* backward regenerates the mask */
    double *dx = dbuf(n);
    mc_tensor DX = t1(dx, F64, n), DY = t1(c.r, F64, n);
    mc_op_dropout_bwd(be, &DX, &DY, c.p, 42, 7);
    grad_check("dropout dx", c.x, n, dx, drop_loss, &c, 2000);
    /* in place, and p = 0 is an exact copy */
    double *inplace = dcopy(c.x, n);
    mc_tensor IP = t1(inplace, F64, n);
    mc_op_dropout_fwd(be, &IP, &IP, c.p, 42, 7);
    check_close("dropout in place", inplace, c.y, n, 0);
    double *copy = dbuf(n);
    mc_tensor CP = t1(copy, F64, n), X = t1(c.x, F64, n);
    mc_op_dropout_fwd(be, &CP, &X, 0.0f, 42, 7);
    CHECK(memcmp(copy, c.x, (size_t)n * sizeof(double)) == 0, "p = 0 copies exactly");
    /* y = residual + dropout(x), y aliasing residual */
    double *res = rnd(n, 1), *y = dcopy(res, n);
    mc_tensor Y = t1(y, F64, n);
    mc_op_dropout_add_fwd(be, &Y, &Y, &X, c.p, 42, 7);
    double *expect = dcopy(res, n);
    for (int64_t i = 0; i < n; i++) expect[i] += c.y[i];
    check_close("dropout_add_fwd", y, expect, n, 0);
    memcpy(y, res, (size_t)n * sizeof(double));
    mc_op_dropout_add_fwd(be, &Y, &Y, &X, 0.0f, 42, 7);
    for (int64_t i = 0; i < n; i++) expect[i] = res[i] + c.x[i];
    check_close("dropout_add_fwd p = 0", y, expect, n, 0);
    /* F32 */
    float *xf = f32_of(c.x, n), *yf = fbuf(n), *dxf = fbuf(n), *rf = f32_of(res, n);
    drop_run(F32, &c, yf, xf);
    check_f32("dropout_fwd", yf, c.y, n);
    mc_tensor DXF = t1(dxf, F32, n), DYF = t1(f32_of(c.r, n), F32, n), XF = t1(xf, F32, n), RF = t1(rf, F32, n);
    mc_op_dropout_bwd(be, &DXF, &DYF, c.p, 42, 7);
    check_f32("dropout_bwd", dxf, dx, n);
    for (int64_t i = 0; i < n; i++) expect[i] = res[i] + c.y[i];
    mc_op_dropout_add_fwd(be, &RF, &RF, &XF, c.p, 42, 7);
    check_f32("dropout_add_fwd", rf, expect, n);
    tfree_all();
}

static void test_add_scale(void) {
    const int64_t n = 1001;
    double *y = rnd(n, 1), *x = rnd(n, 1), *y0 = dcopy(y, n);
    mc_tensor Y = t1(y, F64, n), X = t1(x, F64, n);
    mc_op_add_inplace(be, &Y, &X);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != y0[i] + x[i];
    mc_op_scale_inplace(be, &Y, 0.25f);
    for (int64_t i = 0; i < n; i++) bad += y[i] != (y0[i] + x[i]) * 0.25;
    CHECK(bad == 0);
    float *yf = f32_of(y0, n);
    mc_tensor YF = t1(yf, F32, n), XF = t1(f32_of(x, n), F32, n);
    mc_op_add_inplace(be, &YF, &XF);
    mc_op_scale_inplace(be, &YF, 0.25f);
    check_f32("add_inplace + scale_inplace", yf, y, n);
    tfree_all();
}

/* ======================================================================== cross-entropy */

typedef struct xent_case {
    int64_t n, v, v_local; /* v = 2 v_local: two tensor-parallel ranks */
    int32_t *targets;
    double *logits, *mask, *loss, *dlogits;
    float grad_scale;
} xent_case;

/* The passes on each of two ranks, with the all-reduces between them done here: row
 * statistics, max of the row maxima, each rank's sums rescaled to it, sum of the stats. */
static void xent_run(mc_dtype dt, const xent_case *c, const void *logits, void *loss, void *dlogits, const void *mask,
                     bool in_place) {
    const int64_t n = c->n, vl = c->v_local;
    const size_t es = dt == F64 ? 8 : 4;
    char *part[2], *rowmax[2], *gmax[2], *stats[2], *lossr[2], *dl[2];
    for (int r = 0; r < 2; r++) { /* rank r's contiguous [n, v_local] slice */
        part[r] = malloc((size_t)(n * vl) * es), dl[r] = malloc((size_t)(n * vl) * es);
        rowmax[r] = malloc((size_t)n * es), gmax[r] = malloc((size_t)n * es);
        stats[r] = malloc((size_t)(2 * n) * es), lossr[r] = malloc((size_t)n * es);
        for (int64_t i = 0; i < n; i++)
            memcpy(part[r] + (size_t)(i * vl) * es, (const char *)logits + (size_t)(i * c->v + r * vl) * es, (size_t)vl * es);
    }
    mc_tensor T = t1(c->targets, MC_I32, n);
    for (int r = 0; r < 2; r++) {
        mc_tensor L = t2(part[r], dt, n, vl), M = t1(rowmax[r], dt, n), ST = t2(stats[r], dt, 2, n);
        mc_op_xent_rowstats(be, &M, &ST, &L, &T, r * vl);
    }
    for (int64_t i = 0; i < n; i++) { /* all-reduce max */
        if (dt == F64) ((double *)gmax[0])[i] = ((double *)gmax[1])[i] = fmax(((double *)rowmax[0])[i], ((double *)rowmax[1])[i]);
        else ((float *)gmax[0])[i] = ((float *)gmax[1])[i] = fmaxf(((float *)rowmax[0])[i], ((float *)rowmax[1])[i]);
    }
    for (int r = 0; r < 2; r++) {
        mc_tensor M = t1(rowmax[r], dt, n), G = t1(gmax[r], dt, n), ST = t2(stats[r], dt, 2, n);
        mc_op_xent_rescale(be, &ST, &M, &G);
    }
    for (int64_t i = 0; i < 2 * n; i++) { /* all-reduce sum */
        if (dt == F64) ((double *)stats[0])[i] = ((double *)stats[1])[i] = ((double *)stats[0])[i] + ((double *)stats[1])[i];
        else ((float *)stats[0])[i] = ((float *)stats[1])[i] = ((float *)stats[0])[i] + ((float *)stats[1])[i];
    }
    for (int r = 0; r < 2; r++) {
        char *g = dlogits ? (in_place ? part[r] : dl[r]) : NULL;
        mc_tensor L = t2(part[r], dt, n, vl), M = t1(gmax[r], dt, n), ST = t2(stats[r], dt, 2, n),
                  LS = t1(lossr[r], dt, n), DL = g ? t2(g, dt, n, vl) : mc_tensor_none(),
                  MK = mask ? t1((void *)mask, dt, n) : mc_tensor_none();
        mc_op_xent_loss_grad(be, &LS, &DL, &L, &M, &ST, &T, &MK, r * vl, c->grad_scale);
        if (g)
            for (int64_t i = 0; i < n; i++)
                memcpy((char *)dlogits + (size_t)(i * c->v + r * vl) * es, g + (size_t)(i * vl) * es, (size_t)vl * es);
    }
    memcpy(loss, lossr[0], (size_t)n * es);
    CHECK(memcmp(lossr[0], lossr[1], (size_t)n * es) == 0, "both ranks compute the same loss");
    for (int r = 0; r < 2; r++) free(part[r]), free(dl[r]), free(rowmax[r]), free(gmax[r]), free(stats[r]), free(lossr[r]);
}

static double xent_loss(void *ctx) {
    xent_case *c = ctx;
    xent_run(F64, c, c->logits, c->loss, NULL, NULL, false);
    double s = 0;
    for (int64_t i = 0; i < c->n; i++) s += c->grad_scale * c->mask[i] * c->loss[i];
    return s;
}

static void test_xent_vocab_parallel(void) {
    static int32_t targets[] = {0, 13, 9, 10, 19, 4, 15};
    xent_case c = {.n = 7, .v = 20, .v_local = 10, .targets = targets, .grad_scale = 0.5f};
    int64_t n = c.n, v = c.v;
    c.logits = rnd(n * v, 3), c.loss = dbuf(n), c.dlogits = dbuf(n * v);
    c.mask = dbuf(n);
    for (int64_t i = 0; i < n; i++) c.mask[i] = i == 2 || i == 5 ? 0.0 : 1.0;
    c.logits[3 * v + 11] = 40; /* a dominant logit: the stable form matters */
    xent_run(F64, &c, c.logits, c.loss, c.dlogits, c.mask, false);
    /* against a direct log-softmax of the whole row */
    double *ref = dbuf(n);
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < v; j++) m = fmax(m, c.logits[i * v + j]);
        for (int64_t j = 0; j < v; j++) s += exp(c.logits[i * v + j] - m);
        ref[i] = -(c.logits[i * v + targets[i]] - m - log(s));
    }
    check_close("xent loss vs log-softmax", c.loss, ref, n, 1e-13);
    grad_check("xent dlogits", c.logits, n * v, c.dlogits, xent_loss, &c, 1 << 20);
    int zero_rows_ok = 1;
    for (int64_t j = 0; j < v; j++) zero_rows_ok &= c.dlogits[2 * v + j] == 0 && c.dlogits[5 * v + j] == 0;
    CHECK(zero_rows_ok, "masked rows get zero gradient");
    /* dlogits aliasing logits */
    double *loss2 = dbuf(n), *dl2 = dbuf(n * v);
    xent_run(F64, &c, c.logits, loss2, dl2, c.mask, true);
    check_close("xent in place loss", loss2, c.loss, n, 0);
    check_close("xent in place dlogits", dl2, c.dlogits, n * v, 0);
    /* F32 */
    float *lf = fbuf(n), *dlf = fbuf(n * v);
    xent_run(F32, &c, f32_of(c.logits, n * v), lf, dlf, f32_of(c.mask, n), false);
    check_f32("xent loss", lf, c.loss, n);
    check_f32("xent dlogits", dlf, c.dlogits, n * v);
    tfree_all();
}

/* One rank holding the whole (large) vocabulary: F32 against F64 over long rows. */
static void test_xent_large_vocab_f32(void) {
    const int64_t n = 8, v = 5003;
    static int32_t targets[8] = {0, 5002, 17, 4000, 2500, 1, 999, 3333};
    double *logits = rnd(n * v, 4), *rowmax = dbuf(n), *stats = dbuf(2 * n), *loss = dbuf(n), *dl = dbuf(n * v);
    float *lf = f32_of(logits, n * v), *rmf = fbuf(n), *stf = fbuf(2 * n), *lossf = fbuf(n), *dlf = fbuf(n * v);
    mc_tensor T = t1(targets, MC_I32, n), NONE = mc_tensor_none();
    mc_tensor L = t2(logits, F64, n, v), M = t1(rowmax, F64, n), ST = t2(stats, F64, 2, n), LS = t1(loss, F64, n),
              DL = t2(dl, F64, n, v);
    mc_tensor LF = t2(lf, F32, n, v), MF = t1(rmf, F32, n), STF = t2(stf, F32, 2, n), LSF = t1(lossf, F32, n),
              DLF = t2(dlf, F32, n, v);
    mc_op_xent_rowstats(be, &M, &ST, &L, &T, 0);
    mc_op_xent_loss_grad(be, &LS, &DL, &L, &M, &ST, &T, &NONE, 0, 1.0f);
    mc_op_xent_rowstats(be, &MF, &STF, &LF, &T, 0);
    mc_op_xent_loss_grad(be, &LSF, &DLF, &LF, &MF, &STF, &T, &NONE, 0, 1.0f);
    check_f32("xent rowmax", rmf, rowmax, n);
    check_f32("xent stats", stf, stats, 2 * n);
    check_f32("xent loss", lossf, loss, n);
    check_f32("xent dlogits", dlf, dl, n * v);
    tfree_all();
}

/* xent_fused (one rank, the whole vocabulary) is xent_rowstats then xent_loss_grad bit for
 * bit: with and without dlogits, dlogits aliasing logits, F64 and F32, targets at both ends
 * of the row and off it (-1, V), masks with zeros and a 0.5. */
static void test_xent_fused(void) {
    static const int64_t shapes[][2] = {{7, 20}, {6, 5003}};
    const float gs = 0.37f;
    for (int sh = 0; sh < 2; sh++) {
        const int64_t n = shapes[sh][0], v = shapes[sh][1];
        int32_t *tg = talloc((size_t)n * sizeof(int32_t));
        double *mask = dbuf(n), *logits = rnd(n * v, 3);
        for (int64_t i = 0; i < n; i++) {
            tg[i] = (int32_t)((i * 7919 + 5) % (v + v / 2));
            mask[i] = i % 3 == 1 ? 0.0 : i % 3 == 2 ? 0.5 : 1.0;
        }
        tg[0] = -1, tg[1] = (int32_t)v, tg[2] = (int32_t)(v - 1), tg[3] = 0;
        for (int f = 0; f < 2; f++) {
            const mc_dtype dt = f ? F32 : F64;
            const size_t es = f ? sizeof(float) : sizeof(double), lb = (size_t)n * es, db = (size_t)(n * v) * es;
            void *lg = f ? (void *)f32_of(logits, n * v) : (void *)logits, *mk = f ? (void *)f32_of(mask, n) : (void *)mask;
            char *rowmax = talloc(lb), *stats = talloc(2 * lb), *loss_ref = talloc(lb), *dl_ref = talloc(db);
            char *loss = talloc(lb), *dl = talloc(db), *loss_only = talloc(lb), *loss_in = talloc(lb), *in = talloc(db);
            mc_tensor L = t2(lg, dt, n, v), T = t1(tg, MC_I32, n), MK = t1(mk, dt, n), NONE = mc_tensor_none();
            mc_tensor RM = t1(rowmax, dt, n), ST = t2(stats, dt, 2, n), LR = t1(loss_ref, dt, n), DR = t2(dl_ref, dt, n, v);
            mc_op_xent_rowstats(be, &RM, &ST, &L, &T, 0);
            mc_op_xent_loss_grad(be, &LR, &DR, &L, &RM, &ST, &T, &MK, 0, gs);
            mc_tensor LS = t1(loss, dt, n), DL = t2(dl, dt, n, v), LO = t1(loss_only, dt, n), LI = t1(loss_in, dt, n);
            mc_op_xent_fused(be, &LS, &DL, &L, &T, &MK, gs);
            mc_op_xent_fused(be, &LO, &NONE, &L, &T, &MK, gs);
            memcpy(in, lg, db);
            mc_tensor IN = t2(in, dt, n, v);
            mc_op_xent_fused(be, &LI, &IN, &IN, &T, &MK, gs);
            const char *name = mc_dtype_name(dt);
            CHECK(memcmp(loss, loss_ref, lb) == 0, "%s V=%lld: xent_fused loss differs from rowstats + loss_grad", name,
                  (long long)v);
            CHECK(memcmp(dl, dl_ref, db) == 0, "%s V=%lld: xent_fused dlogits differ from rowstats + loss_grad", name,
                  (long long)v);
            CHECK(memcmp(loss_only, loss_ref, lb) == 0, "%s V=%lld: xent_fused loss without dlogits differs", name,
                  (long long)v);
            CHECK(memcmp(loss_in, loss_ref, lb) == 0 && memcmp(in, dl_ref, db) == 0,
                  "%s V=%lld: xent_fused in place differs", name, (long long)v);
        }
    }
    tfree_all();
}

/* ======================================================================== optimizer */

static void test_adamw(void) {
    enum { N = 1000 };
    static const mc_adamw_segment segs[] = {{0, 600, 0, 0.1f}, {650, 350, 650, 0.0f}}; /* [600, 650) untouched */
    float *p = fbuf(N), *g = fbuf(N), *m = fbuf(N), *v = fbuf(N);
    float *rp = fbuf(N), *rm = fbuf(N), *rv = fbuf(N); /* torch's formula, in float */
    double *dp = dbuf(N), *dm = dbuf(N), *dv = dbuf(N); /* the textbook formula, in double */
    uint16_t *copy = talloc(N * 2);
    for (int i = 0; i < N; i++) {
        p[i] = rp[i] = (float)mc_philox_normal(SEED, 500, (uint64_t)i);
        dp[i] = p[i];
        copy[i] = 0xffff;
    }
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gs = 0.5f;
    for (int64_t step = 1; step <= 3; step++) {
        float lr = 1e-3f * (float)step;
        for (int i = 0; i < N; i++) g[i] = (float)mc_philox_normal(SEED, 600 + (uint64_t)step, (uint64_t)i);
        mc_adamw_desc d = {.param = p, .grad = g, .exp_avg = m, .exp_avg_sq = v,
                           .param_copy = t1(copy, MC_BF16, N), .segments = segs, .nsegments = 2,
                           .lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .grad_scale = gs, .step = step,
                           .state_numel = N, .grad_numel = N};
        mc_op_adamw(be, &d);
        double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
        for (int s = 0; s < 2; s++)
            for (int64_t i = segs[s].offset; i < segs[s].offset + segs[s].count; i++) {
                /* torch: param.mul_(1 - lr wd); exp_avg.lerp_(grad, 1 - beta1);
                 * exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2);
                 * denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps); param.addcdiv_(exp_avg, denom, value=-lr/bc1) */
                float gi = g[i] * gs;
                rp[i] = rp[i] * (float)(1.0 - (double)lr * segs[s].weight_decay);
                rm[i] = rm[i] + (float)(1.0 - b1) * (gi - rm[i]);
                rv[i] = rv[i] * b2 + (float)(1.0 - b2) * gi * gi;
                float denom = sqrtf(rv[i]) / (float)sqrt(bc2) + eps;
                rp[i] = rp[i] + (float)(-(double)lr / bc1) * rm[i] / denom;
                double gd = (double)g[i] * gs;
                dm[i] = b1 * dm[i] + (1 - (double)b1) * gd;
                dv[i] = b2 * dv[i] + (1 - (double)b2) * gd * gd;
                dp[i] -= (double)lr * (dm[i] / bc1) / (sqrt(dv[i] / bc2) + eps) + (double)lr * segs[s].weight_decay * dp[i];
            }
    }
    int bad_torch = 0, bad_textbook = 0, bad_copy = 0;
    for (int i = 0; i < N; i++) {
        bool in_seg = i < 600 || i >= 650;
        bad_torch += p[i] != rp[i] || (in_seg && (m[i] != rm[i] || v[i] != rv[i]));
        bad_textbook += fabs(p[i] - dp[i]) > 1e-6;
        bad_copy += in_seg ? copy[i] != mc_f32_to_bf16(p[i]) : copy[i] != 0xffff;
    }
    CHECK(bad_torch == 0, "%d elements differ from torch's float arithmetic", bad_torch);
    CHECK(bad_textbook == 0, "%d elements differ from the double-precision formula", bad_textbook);
    CHECK(bad_copy == 0, "%d param_copy elements wrong", bad_copy);
    tfree_all();
}

static void test_sumsq_count_zeros(void) {
    const int64_t n = 300001;
    float *x = fbuf(n);
    double ref = 0;
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = i % 7 == 0 ? 0.0f : (float)mc_philox_normal(SEED, 700, (uint64_t)i);
        ref += (double)x[i] * x[i];
        zeros += x[i] == 0;
    }
    mc_tensor X = t1(x, F32, n);
    CHECK_REL(mc_op_sumsq(be, &X), ref, 1e-12);
    CHECK(mc_op_count_zeros(be, &X) == zeros);
    double *xd = d_of(x, n);
    mc_tensor XD = t1(xd, F64, n);
    CHECK_REL(mc_op_sumsq(be, &XD), ref, 1e-12);
    CHECK(mc_op_count_zeros(be, &XD) == zeros);
    tfree_all();
}

/* ======================================================================== determinism */

/* The reductions that could depend on scheduling give bit-identical results on 1 and 2 threads. */
static void test_thread_count_independence(void) {
    int saved = omp_get_max_threads();
    const int64_t n = 300, h = 130, rows = 50;
    double *x = rnd(n * h, 1), *w = rnd(h, 1), *dy = rnd(n * h, 1), *mean = dbuf(n), *rstd = dbuf(n), *y = dbuf(n * h);
    int32_t *ids = talloc((size_t)n * sizeof(int32_t));
    for (int64_t t = 0; t < n; t++) ids[t] = (int32_t)(mc_philox_bits(SEED, 800, (uint64_t)t) % rows);
    mc_attn_desc ad = {.seq = 80, .batch = 2, .heads = 4, .groups = 2, .head_dim = 16, .softmax_scale = 0.25f,
                       .dropout = 0.1f, .seed = 5, .stream = 6};
    int64_t nqkv = 80 * 2 * 8 * 16, nout = 80 * 2 * 4 * 16;
    double *qkv = rnd(nqkv, 1), *ao = dbuf(nout), *alse = dbuf(2 * 4 * 80), *ad_out = rnd(nout, 1);
    double *results[2][5];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        double *dx = dbuf(n * h), *dw = dbuf(h), *db = dbuf(h), *dtab = dbuf(rows * h), *dq = dbuf(nqkv);
        mc_tensor X = t2(x, F64, n, h), W = t1(w, F64, h), DY = t2(dy, F64, n, h), M = t1(mean, F64, n),
                  R = t1(rstd, F64, n), Y = t2(y, F64, n, h), B = mc_tensor_none();
        mc_op_layernorm_fwd(be, &Y, &M, &R, &X, &W, &B, 1e-5f);
        mc_tensor DX = t2(dx, F64, n, h), DW = t1(dw, F64, h), DB = t1(db, F64, h), NONE_DS = mc_tensor_none();
        mc_op_layernorm_bwd(be, &DX, &DW, &DB, &NONE_DS, &B, &DY, &X, &W, &B, &M, &R);
        mc_tensor DT = t2(dtab, F64, rows, h), I = t1(ids, MC_I32, n);
        mc_op_embedding_bwd(be, &DT, &DY, &I, 0);
        attn_run(F64, &ad, ao, alse, qkv);
        attn_run_bwd(F64, &ad, dq, ad_out, qkv, ao, alse);
        results[run][0] = dx, results[run][1] = dw, results[run][2] = db, results[run][3] = dtab, results[run][4] = dq;
    }
    omp_set_num_threads(saved);
    CHECK(memcmp(results[0][0], results[1][0], (size_t)(n * h) * 8) == 0, "layernorm dx");
    CHECK(memcmp(results[0][1], results[1][1], (size_t)h * 8) == 0, "layernorm dw");
    CHECK(memcmp(results[0][2], results[1][2], (size_t)h * 8) == 0, "layernorm db");
    CHECK(memcmp(results[0][3], results[1][3], (size_t)(rows * h) * 8) == 0, "embedding dtable");
    CHECK(memcmp(results[0][4], results[1][4], (size_t)nqkv * 8) == 0, "attention dqkv");
    tfree_all();
}

int main(void) {
    be = mc_backend_cpu_create();
    RUN(test_memory);
    RUN(test_convert);
    RUN(test_gemm);
    RUN(test_linear);
    RUN(test_linear_gelu);
    RUN(test_linear_residual);
    RUN(test_embedding);
    RUN(test_layernorm_bias);
    RUN(test_layernorm_nobias);
    RUN(test_rmsnorm);
    RUN(test_rope_pos_ids);
    RUN(test_rope_seq_positions);
    RUN(test_gelu);
    RUN(test_gelu_erf);
    RUN(test_swiglu);
    RUN(test_attention_mha);
    RUN(test_attention_gqa);
    RUN(test_attention_seg_start);
    RUN(test_attention_dropout);
    RUN(test_attention_long_mqa_seg_dropout);
    RUN(test_attention_wide);
    RUN(test_attention_kv_cache);
    RUN(test_attention_kv_ragged);
    RUN(test_argmax_rows);
    RUN(test_philox_vectorized);
    RUN(test_dropout);
    RUN(test_add_scale);
    RUN(test_xent_vocab_parallel);
    RUN(test_xent_large_vocab_f32);
    RUN(test_xent_fused);
    RUN(test_adamw);
    RUN(test_sumsq_count_zeros);
    RUN(test_thread_count_independence);
    be->destroy(be);
    return check_summary();
}
