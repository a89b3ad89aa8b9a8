/* xent.c: vocab-parallel softmax cross-entropy: one pass for each row's max, sum of
 * exponentials and target logit, a rescale of the sums to the tensor-parallel group's max
 * (after the model's all-reduce of the maxima), then loss and gradient. logits [N, V_local];
 * this rank holds vocab ids [vocab_start, vocab_start + V_local). Sums of exponentials run
 * in REAL over chunks of 512 logits (so they vectorize) and in double across chunks. */
#ifdef REAL

/* rowmax[i] = max_j logits[i, j]; stats[0, i] = sum_j exp(logits[i, j] - rowmax[i]);
 * stats[1, i] = logits[i, target - vocab_start] when the target is on this rank, else 0.
 * (The reference reads each row twice; the GPU kernel folds the max in on the fly.) */
static void RNAME(xent_rowstats)(REAL *restrict rowmax, REAL *restrict stats, const REAL *restrict logits,
                                 const int32_t *restrict targets, int64_t n, int64_t v, int64_t vocab_start) {
#pragma omp parallel for schedule(static) if (n * v > 32768)
    for (int64_t i = 0; i < n; i++) {
        const REAL *row = logits + i * v;
        REAL m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < v; j++) m = row[j] > m ? row[j] : m;
        double sum = 0;
        for (int64_t j0 = 0; j0 < v; j0 += 512) {
            const int64_t j1 = j0 + 512 < v ? j0 + 512 : v;
            REAL part = 0;
#pragma omp simd reduction(+ : part)
            for (int64_t j = j0; j < j1; j++) part += R_EXP(row[j] - m);
            sum += part;
        }
        int64_t local = (int64_t)targets[i] - vocab_start;
        rowmax[i] = m;
        stats[i] = (REAL)sum;
        stats[n + i] = local >= 0 && local < v ? row[local] : 0;
    }
}

/* stats[0, i] *= exp(local_max[i] - global_max[i]): the sum relative to the group's max. */
static void RNAME(xent_rescale)(REAL *restrict stats, const REAL *restrict local_max, const REAL *restrict global_max,
                                int64_t n) {
    for (int64_t i = 0; i < n; i++) stats[i] *= R_EXP(local_max[i] - global_max[i]);
}

/* loss[i] = log(stats[0, i]) + rowmax[i] - stats[1, i]; when dlogits is given,
 * dlogits[i] = (softmax(logits[i]) - onehot(target)) grad_scale mask[i]. dlogits may alias
 * logits (each element is read before it is written). */
static void RNAME(xent_loss_grad)(REAL *restrict loss, REAL *dlogits, const REAL *logits, const REAL *restrict rowmax,
                                  const REAL *restrict stats, const int32_t *restrict targets,
                                  const REAL *restrict mask, int64_t n, int64_t v, int64_t vocab_start,
                                  REAL grad_scale) {
#pragma omp parallel for schedule(static) if (n * v > 32768)
    for (int64_t i = 0; i < n; i++) {
        REAL m = rowmax[i], sum = stats[i];
        loss[i] = (REAL)(log((double)sum) + (double)m - (double)stats[n + i]);
        if (!dlogits) continue;
        const REAL *row = logits + i * v;
        REAL *drow = dlogits + i * v;
        REAL w = grad_scale * (mask ? mask[i] : 1);
        if (w == 0) {
            memset(drow, 0, (size_t)v * sizeof(REAL));
            continue;
        }
        REAL coef = w / sum;
#pragma omp simd
        for (int64_t j = 0; j < v; j++) drow[j] = R_EXP(row[j] - m) * coef;
        int64_t local = (int64_t)targets[i] - vocab_start;
        if (local >= 0 && local < v) drow[local] -= w;
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#define MC_CPU_TEMPLATE "backend/cpu/xent.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                          const mc_tensor *targets, int64_t vocab_start) {
    (void)be;
    MC_CPU_DISPATCH(logits->dtype, xent_rowstats, rowmax->data, stats->data, logits->data, targets->data,
                    mc_cpu_rows(logits), mc_cpu_cols(logits), vocab_start);
}

void mc_cpu_xent_rescale(mc_backend *be, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max) {
    (void)be;
    MC_CPU_DISPATCH(stats->dtype, xent_rescale, stats->data, local_max->data, global_max->data,
                    mc_tensor_numel(local_max));
}

void mc_cpu_xent_loss_grad(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                           const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                           const mc_tensor *mask, int64_t vocab_start, float grad_scale) {
    (void)be;
    void *dl = mc_tensor_present(dlogits) ? dlogits->data : NULL, *mk = mc_tensor_present(mask) ? mask->data : NULL;
    MC_CPU_DISPATCH(logits->dtype, xent_loss_grad, loss->data, dl, logits->data, rowmax->data, stats->data,
                    targets->data, mk, mc_cpu_rows(logits), mc_cpu_cols(logits), vocab_start, grad_scale);
}

/* The reference reads each row twice either way: rowstats then loss_grad, the statistics in
 * the backend's scratch, so the results are those two ops' bit for bit. */
void mc_cpu_xent_fused(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                       const mc_tensor *targets, const mc_tensor *mask, float grad_scale) {
    mc_dtype dt = logits->dtype;
    int64_t n = mc_cpu_rows(logits);
    if (n == 0) return;
    size_t es = mc_dtype_size(dt);
    char *ws = mc_cpu_workspace(be, (size_t)(3 * n) * es);
    mc_tensor rowmax = mc_tensor_1d(ws, dt, n), stats = mc_tensor_2d(ws + (size_t)n * es, dt, 2, n);
    mc_cpu_xent_rowstats(be, &rowmax, &stats, logits, targets, 0);
    mc_cpu_xent_loss_grad(be, loss, dlogits, logits, &rowmax, &stats, targets, mask, 0, grad_scale);
}

#endif
