/* norm.c: LayerNorm and RMSNorm over the last dim, forward and backward.
 *   layernorm: y = (x - mean) rstd w + b,  rstd = 1/sqrt(var + eps), biased variance
 *   rmsnorm:   y = x rstd w,               rstd = 1/sqrt(mean(x^2) + eps)
 * Row statistics are accumulated in double (two-pass variance). Backward with
 * xhat = normalized x and g = dy w, per row:
 *   layernorm: dx += rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm:   dx += rstd (g - xhat mean(g xhat))
 * and dw += sum_rows dy xhat, db += sum_rows dy, reduced per column block in row order
 * (deterministic, independent of the thread count). The column pass runs before the row
 * pass, so dx may even alias dy. The backward can also rewrite the forward's output y
 * (selective recomputation keeps only x and the statistics): through norm_out, the very
 * expression the forward uses, so it is the forward's y bit for bit. */
#ifdef REAL

/* One output element: (x - mean) rstd w (+ b); mean = 0 and no b for RMSNorm. */
static inline REAL RNAME(norm_out)(REAL x, REAL mean, REAL rstd, REAL w, const REAL *b, int64_t c) {
    REAL o = (x - mean) * rstd * w;
    return b ? o + b[c] : o;
}

static void RNAME(layernorm_fwd)(REAL *restrict y, REAL *restrict mean_out, REAL *restrict rstd_out,
                                 const REAL *restrict x, const REAL *restrict w, const REAL *restrict b, int64_t n,
                                 int64_t h, REAL eps) {
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t t = 0; t < n; t++) {
        const REAL *xt = x + t * h;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < h; c++) sum += xt[c];
        double mean = sum / (double)h, sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < h; c++) {
            double d = xt[c] - mean;
            sq += d * d;
        }
        REAL m = (REAL)mean, rstd = (REAL)(1.0 / sqrt(sq / (double)h + (double)eps));
        REAL *yt = y + t * h;
        for (int64_t c = 0; c < h; c++) yt[c] = RNAME(norm_out)(xt[c], m, rstd, w[c], b, c);
        if (mean_out) mean_out[t] = m;
        if (rstd_out) rstd_out[t] = rstd;
    }
}

/* dw[c] += sum_t dy[t,c] xhat[t,c] (if dw), db[c] += sum_t dy[t,c] (if db), where
 * xhat = (x - mean[t]) rstd[t]; mean == NULL for RMSNorm. */
static void RNAME(norm_param_grads)(REAL *restrict dw, REAL *restrict db, const REAL *dy, const REAL *restrict x,
                                    const REAL *restrict mean, const REAL *restrict rstd, int64_t n, int64_t h) {
    int64_t nblocks = (h + NORM_COL_BLOCK - 1) / NORM_COL_BLOCK;
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * NORM_COL_BLOCK, nc = h - c0 < NORM_COL_BLOCK ? h - c0 : NORM_COL_BLOCK;
        double acc_w[NORM_COL_BLOCK] = {0}, acc_b[NORM_COL_BLOCK] = {0};
        for (int64_t t = 0; t < n; t++) {
            const REAL *dyt = dy + t * h + c0, *xt = x + t * h + c0;
            REAL m = mean ? mean[t] : 0, r = rstd[t];
            for (int64_t c = 0; c < nc; c++) {
                acc_w[c] += dyt[c] * ((xt[c] - m) * r);
                acc_b[c] += dyt[c];
            }
        }
        if (dw)
            for (int64_t c = 0; c < nc; c++) dw[c0 + c] += (REAL)acc_w[c];
        if (db)
            for (int64_t c = 0; c < nc; c++) db[c0 + c] += (REAL)acc_b[c];
    }
}

/* dx += rstd (g - mean(g) - xhat mean(g xhat)) per row, g = dy w (layernorm: mean != NULL),
 * dx += rstd (g - xhat mean(g xhat)) (rmsnorm: mean == NULL), and y = the forward output
 * (if y; b: LayerNorm's bias, optional). dx may alias dy. */
static void RNAME(norm_input_grad)(REAL *dx, REAL *restrict y, const REAL *dy, const REAL *restrict x,
                                   const REAL *restrict w, const REAL *restrict b, const REAL *restrict mean,
                                   const REAL *restrict rstd, int64_t n, int64_t h) {
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t t = 0; t < n; t++) {
        const REAL *dyt = dy + t * h, *xt = x + t * h;
        REAL m = mean ? mean[t] : 0, r = rstd[t];
        double sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t c = 0; c < h; c++) {
            REAL g = dyt[c] * w[c];
            sum_g += g;
            sum_gx += g * ((xt[c] - m) * r);
        }
        REAL mean_g = mean ? (REAL)(sum_g / (double)h) : 0, mean_gx = (REAL)(sum_gx / (double)h);
        if (dx) {
            REAL *dxt = dx + t * h;
            for (int64_t c = 0; c < h; c++) {
                REAL xhat = (xt[c] - m) * r;
                dxt[c] += r * (dyt[c] * w[c] - mean_g - xhat * mean_gx);
            }
        }
        if (y) {
            REAL *yt = y + t * h;
            for (int64_t c = 0; c < h; c++) yt[c] = RNAME(norm_out)(xt[c], m, r, w[c], b, c);
        }
    }
}

static void RNAME(rmsnorm_fwd)(REAL *restrict y, REAL *restrict rstd_out, const REAL *restrict x,
                               const REAL *restrict w, int64_t n, int64_t h, REAL eps) {
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t t = 0; t < n; t++) {
        const REAL *xt = x + t * h;
        double sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < h; c++) sq += (double)xt[c] * xt[c];
        REAL rstd = (REAL)(1.0 / sqrt(sq / (double)h + (double)eps));
        REAL *yt = y + t * h;
        for (int64_t c = 0; c < h; c++) yt[c] = RNAME(norm_out)(xt[c], 0, rstd, w[c], NULL, c);
        if (rstd_out) rstd_out[t] = rstd;
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

enum { NORM_COL_BLOCK = 64 }; /* columns per task of the weight-gradient reduction */

#define MC_CPU_TEMPLATE "backend/cpu/norm.c"
#include "backend/cpu/cpu_instantiate.h"

/* An optional operand's data, or NULL. */
static void *data_or_null(const mc_tensor *t) { return mc_tensor_present(t) ? t->data : NULL; }

void mc_cpu_layernorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                          const mc_tensor *w, const mc_tensor *b, float eps) {
    (void)be;
    MC_CPU_DISPATCH(x->dtype, layernorm_fwd, y->data, data_or_null(mean), data_or_null(rstd), x->data, w->data,
                    data_or_null(b), mc_cpu_rows(x), mc_cpu_cols(x), eps);
}

/* dxsum += the column sums of dx, as stored (the op's last step) */
static void dx_colsum(mc_tensor *dxsum, const mc_tensor *dx) {
    if (mc_tensor_present(dxsum)) mc_cpu_colsum_add(dxsum, dx);
}

void mc_cpu_layernorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum, mc_tensor *y,
                          const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                          const mc_tensor *mean, const mc_tensor *rstd) {
    (void)be;
    mc_dtype dt = x->dtype;
    int64_t n = mc_cpu_rows(x), h = mc_cpu_cols(x);
    void *dwd = data_or_null(dw), *dbd = data_or_null(db), *dxd = data_or_null(dx), *yd = data_or_null(y);
    void *bd = yd ? data_or_null(b) : NULL;
    if (dwd || dbd) MC_CPU_DISPATCH(dt, norm_param_grads, dwd, dbd, dy->data, x->data, mean->data, rstd->data, n, h);
    if (dxd || yd)
        MC_CPU_DISPATCH(dt, norm_input_grad, dxd, yd, dy->data, x->data, w->data, bd, mean->data, rstd->data, n, h);
    dx_colsum(dxsum, dx);
}

void mc_cpu_rmsnorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                        float eps) {
    (void)be;
    MC_CPU_DISPATCH(x->dtype, rmsnorm_fwd, y->data, data_or_null(rstd), x->data, w->data, mc_cpu_rows(x),
                    mc_cpu_cols(x), eps);
}

void mc_cpu_rmsnorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                        const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd) {
    (void)be;
    mc_dtype dt = x->dtype;
    int64_t n = mc_cpu_rows(x), h = mc_cpu_cols(x);
    void *dwd = data_or_null(dw), *dxd = data_or_null(dx), *yd = data_or_null(y);
    if (dwd) MC_CPU_DISPATCH(dt, norm_param_grads, dwd, NULL, dy->data, x->data, NULL, rstd->data, n, h);
    if (dxd || yd)
        MC_CPU_DISPATCH(dt, norm_input_grad, dxd, yd, dy->data, x->data, w->data, NULL, NULL, rstd->data, n, h);
    dx_colsum(dxsum, dx);
}

#endif
