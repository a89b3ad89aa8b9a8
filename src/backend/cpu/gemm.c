/* gemm.c: general GEMM and the linear layer (forward and backward) through OpenBLAS, and
 * the linear + tanh GELU ops (composed of the unfused ones).
 * OpenBLAS threads itself, so these calls sit outside any OpenMP region; the bias fill and
 * the bias-gradient column sums are ours (OpenMP over columns, deterministic). */
#ifdef REAL

static void RNAME(blas_gemm)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, REAL alpha, const REAL *a,
                             int64_t lda, const REAL *b, int64_t ldb, REAL beta, REAL *c, int64_t ldc) {
#if R_IS_F32
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
#else
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
#endif
}

/* c[0 .. count) *= beta (0 stays exact): the k == 0 case, which BLAS implementations treat unevenly. */
static void RNAME(scale_elems)(REAL *c, int64_t count, REAL beta) {
    for (int64_t i = 0; i < count; i++) c[i] = beta == 0 ? 0 : c[i] * beta;
}

/* y[rows, cols] = bias[cols] broadcast over rows. */
static void RNAME(bias_fill)(REAL *restrict y, const REAL *restrict bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
    for (int64_t t = 0; t < rows; t++) memcpy(y + t * cols, bias, (size_t)cols * sizeof(REAL));
}

/* db[cols] += sum over rows of dy[rows, cols]: column blocks in parallel, rows in order,
 * accumulated in double, so the result does not depend on the thread count. */
static void RNAME(colsum_add)(REAL *restrict db, const REAL *restrict dy, int64_t rows, int64_t cols) {
    enum { BLOCK = 64 };
    int64_t nblocks = (cols + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * BLOCK, nc = cols - c0 < BLOCK ? cols - c0 : BLOCK;
        double acc[BLOCK] = {0};
        for (int64_t t = 0; t < rows; t++) {
            const REAL *row = dy + t * cols + c0;
            for (int64_t c = 0; c < nc; c++) acc[c] += row[c];
        }
        for (int64_t c = 0; c < nc; c++) db[c0 + c] += (REAL)acc[c];
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>

#define MC_CPU_TEMPLATE "backend/cpu/gemm.c"
#include "backend/cpu/cpu_instantiate.h"

/* OpenBLAS takes 32-bit dimensions (blasint) in the usual builds: the op layer asks here
 * (mc_cpu_supports) before every GEMM-shaped op. */
bool mc_cpu_gemm_supports(const mc_op_sizes *s, mc_op_refusal *why) {
    if (s->m <= INT_MAX && s->n <= INT_MAX && s->k <= INT_MAX) return true;
    why->operand = "dimensions";
    snprintf(why->expected, sizeof why->expected, "m, n, k <= %d (BLAS int)", INT_MAX);
    snprintf(why->given, sizeof why->given, "%lld x %lld x %lld", (long long)s->m, (long long)s->n, (long long)s->k);
    return false;
}

void mc_cpu_gemm(mc_backend *be, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                 float alpha, float beta) {
    (void)be;
    int64_t a_rows = mc_cpu_rows(a), a_cols = mc_cpu_cols(a), b_cols = mc_cpu_cols(b);
    int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols, n = trans_b ? mc_cpu_rows(b) : b_cols;
    if (m == 0 || n == 0) return;
    if (k == 0) {
        MC_CPU_DISPATCH(a->dtype, scale_elems, c->data, m * n, beta);
        return;
    }
    MC_CPU_DISPATCH(a->dtype, blas_gemm, trans_a, trans_b, m, n, k, alpha, a->data, a_cols, b->data, b_cols, beta,
                    c->data, n);
}

void mc_cpu_linear_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b) {
    (void)be;
    int64_t n = mc_cpu_rows(x), in = mc_cpu_cols(x), out = mc_cpu_rows(w);
    if (n == 0 || out == 0) return;
    bool bias = mc_tensor_present(b);
    if (bias) MC_CPU_DISPATCH(x->dtype, bias_fill, y->data, b->data, n, out);
    if (in == 0) {
        if (!bias) MC_CPU_DISPATCH(x->dtype, scale_elems, y->data, n * out, 0);
        return;
    }
    /* y = x w^T (+ y, which holds the bias) */
    MC_CPU_DISPATCH(x->dtype, blas_gemm, false, true, n, out, in, 1, x->data, in, w->data, in, bias ? 1 : 0, y->data,
                    out);
}

/* linear_fwd into y, then y = residual + y: the unfused ops, in their order, bit for bit. */
void mc_cpu_linear_residual_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                                const mc_tensor *w, const mc_tensor *b) {
    mc_cpu_linear_fwd(be, y, x, w, b);
    mc_cpu_dropout_add_fwd(be, y, residual, y, 0.0f, 0, 0);
}

void mc_cpu_linear_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                       const mc_tensor *x, const mc_tensor *w, bool accumulate) {
    (void)be;
    int64_t n = mc_cpu_rows(dy), out = mc_cpu_cols(dy), in = mc_cpu_cols(w);
    if (mc_tensor_present(dx)) { /* dx[n, in] = dy[n, out] w[out, in] */
        if (n > 0 && in > 0) {
            if (out == 0) MC_CPU_DISPATCH(dy->dtype, scale_elems, dx->data, n * in, 0);
            else MC_CPU_DISPATCH(dy->dtype, blas_gemm, false, false, n, in, out, 1, dy->data, out, w->data, in, 0,
                                 dx->data, in);
        }
    }
    if (mc_tensor_present(dw)) { /* dw[out, in] (+)= dy^T x */
        if (n > 0 && in > 0 && out > 0)
            MC_CPU_DISPATCH(dy->dtype, blas_gemm, true, false, out, in, n, 1, dy->data, out, x->data, in,
                            accumulate ? 1 : 0, dw->data, in);
        else if (!accumulate)
            MC_CPU_DISPATCH(dy->dtype, scale_elems, dw->data, out * in, 0);
    }
    if (mc_tensor_present(db)) { /* db[out] (+)= sum_rows dy */
        if (!accumulate) MC_CPU_DISPATCH(dy->dtype, scale_elems, db->data, out, 0);
        MC_CPU_DISPATCH(dy->dtype, colsum_add, db->data, dy->data, n, out);
    }
}

void mc_cpu_colsum_add(mc_tensor *db, const mc_tensor *dy) {
    MC_CPU_DISPATCH(dy->dtype, colsum_add, db->data, dy->data, mc_cpu_rows(dy), mc_cpu_cols(dy));
}

/* The fused ops of backend.h, as exactly the unfused ops (the reference for a backend
 * that fuses them, and the same bits as the model's unfused path). */
void mc_cpu_linear_gelu_fwd(mc_backend *be, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                            const mc_tensor *b) {
    mc_cpu_linear_fwd(be, pre, x, w, b);
    mc_cpu_gelu_fwd(be, y, pre, true);
}

void mc_cpu_linear_dgelu_bwd(mc_backend *be, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                             const mc_tensor *pre) {
    int64_t n = mc_cpu_rows(dy), f = mc_cpu_cols(w);
    mc_tensor none = mc_tensor_none();
    mc_cpu_linear_bwd(be, dpre, &none, &none, dy, pre, w, true); /* pre stands in for x, which only dw reads */
    mc_cpu_gelu_bwd(be, dpre, dpre, pre, true);
    if (mc_tensor_present(db)) MC_CPU_DISPATCH(dy->dtype, colsum_add, db->data, dpre->data, n, f);
}

#endif
