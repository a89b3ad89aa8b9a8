/* adamw.c: the AdamW step (torch.optim.AdamW's arithmetic, in float), the split master's
 * join and split (backend.h's mc_master_hi), and the sum of squares and zero count of a
 * gradient buffer (grad-norm clipping, --log-num-zeros-in-grad).
 *
 * Per element, in torch's order and forms (_single_tensor_adam with decoupled decay):
 *   g = grad * grad_scale
 *   p = p * (1 - lr wd)                          param.mul_(1 - lr * weight_decay)
 *   m = m + (1 - b1) (g - m)                     exp_avg.lerp_(grad, 1 - beta1)
 *   v = v b2 + (1 - b2) g g                      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
 *   p = p + (-lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)   param.addcdiv_(exp_avg, denom, -step_size)
 * with bc1 = 1 - b1^step, bc2 = 1 - b2^step computed in double (Python floats in torch) and
 * the scalars rounded to float where torch hands them to a float kernel. */
#ifdef REAL

/* Sum of squares in double over fixed parts (not per thread), reduced in part order: the
 * result does not depend on the thread count. */
static double RNAME(sumsq)(const REAL *x, int64_t n) {
    enum { MAX_PARTS = 256, MIN_PART = 4096 };
    int64_t nparts = (n + MIN_PART - 1) / MIN_PART;
    if (nparts > MAX_PARTS) nparts = MAX_PARTS;
    if (nparts < 1) nparts = 1;
    int64_t part = (n + nparts - 1) / nparts;
    double partial[MAX_PARTS];
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t k = 0; k < nparts; k++) {
        int64_t i0 = k * part, i1 = i0 + part < n ? i0 + part : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
        partial[k] = s;
    }
    double total = 0;
    for (int64_t k = 0; k < nparts; k++) total += partial[k];
    return total;
}

static int64_t RNAME(count_zeros)(const REAL *x, int64_t n) {
    int64_t zeros = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : zeros) if (n > 65536)
    for (int64_t i = 0; i < n; i++) zeros += x[i] == 0;
    return zeros;
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#define MC_CPU_TEMPLATE "backend/cpu/adamw.c"
#include "backend/cpu/cpu_instantiate.h"

enum { ADAMW_CHUNK = 4096 };

typedef struct adamw_scalars {
    float grad_scale, decay;        /* decay = 1 - lr * wd */
    float one_minus_b1, b2, one_minus_b2;
    float neg_step_size, bc2_sqrt, eps;
} adamw_scalars;

static void adamw_chunk(float *restrict p, const float *restrict grad, float *restrict m, float *restrict v,
                        int64_t n, const adamw_scalars *s) {
    const float gs = s->grad_scale, decay = s->decay, w1 = s->one_minus_b1, b2 = s->b2, w2 = s->one_minus_b2;
    const float nss = s->neg_step_size, bc2s = s->bc2_sqrt, eps = s->eps;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float pi = p[i] * decay;
        float mi = m[i] + w1 * (g - m[i]);
        float vi = v[i] * b2 + w2 * g * g;
        float denom = sqrtf(vi) / bc2s + eps;
        p[i] = pi + nss * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

/* One element of the split master, as F32 and back. */
static inline float master_of(uint16_t hi, uint16_t lo) {
    uint32_t bits = mc_master_join(hi, lo);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline void split_master(float f, uint16_t *hi, uint16_t *lo) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    *hi = mc_master_hi(bits);
    *lo = (uint16_t)bits;
}

void mc_cpu_adamw(mc_backend *be, const mc_adamw_desc *d) {
    (void)be;
    bool copy = mc_tensor_present(&d->param_copy) && !d->param_lo;
    float grad_scale = d->grad_scale;
    if (d->grad_sumsq && !mc_adamw_clip_scale(*d->grad_sumsq, d->loss_scale, d->clip_grad, &grad_scale)) return;
    double bc1 = 1.0 - pow((double)d->beta1, (double)d->step);
    double bc2 = 1.0 - pow((double)d->beta2, (double)d->step);
    for (int sg = 0; sg < d->nsegments; sg++) {
        const mc_adamw_segment *seg = &d->segments[sg];
        adamw_scalars s = {
            .grad_scale = grad_scale,
            .decay = (float)(1.0 - (double)d->lr * (double)seg->weight_decay),
            .one_minus_b1 = (float)(1.0 - (double)d->beta1),
            .b2 = d->beta2,
            .one_minus_b2 = (float)(1.0 - (double)d->beta2),
            .neg_step_size = (float)(-(double)d->lr / bc1),
            .bc2_sqrt = (float)sqrt(bc2),
            .eps = d->eps,
        };
        int64_t off = seg->offset, goff = seg->grad_offset, nchunks = (seg->count + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (seg->count > 16384)
        for (int64_t ch = 0; ch < nchunks; ch++) {
            int64_t i0 = off + ch * ADAMW_CHUNK, g0 = goff + ch * ADAMW_CHUNK, len = seg->count - ch * ADAMW_CHUNK;
            if (len > ADAMW_CHUNK) len = ADAMW_CHUNK;
            if (d->param_lo) { /* the master joined into a chunk of F32, updated, split back */
                float master[ADAMW_CHUNK];
                uint16_t *hi = (uint16_t *)d->param_copy.data + g0, *lo = d->param_lo + i0;
                for (int64_t i = 0; i < len; i++) master[i] = master_of(hi[i], lo[i]);
                adamw_chunk(master, d->grad + g0, d->exp_avg + i0, d->exp_avg_sq + i0, len, &s);
                for (int64_t i = 0; i < len; i++) split_master(master[i], &hi[i], &lo[i]);
                continue;
            }
            adamw_chunk(d->param + i0, d->grad + g0, d->exp_avg + i0, d->exp_avg_sq + i0, len, &s);
            if (copy) mc_cpu_store_f32(d->param_copy.data, d->param_copy.dtype, g0, d->param + i0, len);
        }
    }
}

void mc_cpu_master_join(mc_backend *be, float *master, const uint16_t *copy, const uint16_t *lo,
                        const mc_adamw_segment *segments, int nsegments) {
    (void)be;
    for (int s = 0; s < nsegments; s++) {
        const mc_adamw_segment *sg = &segments[s];
        float *m = master + sg->grad_offset;
        const uint16_t *h = copy + sg->grad_offset, *l = lo + sg->offset;
#pragma omp parallel for schedule(static) if (sg->count > 65536)
        for (int64_t i = 0; i < sg->count; i++) m[i] = master_of(h[i], l[i]);
    }
}

void mc_cpu_master_split(mc_backend *be, uint16_t *copy, uint16_t *lo, const float *master,
                         const mc_adamw_segment *segments, int nsegments) {
    (void)be;
    for (int s = 0; s < nsegments; s++) {
        const mc_adamw_segment *sg = &segments[s];
        const float *m = master + sg->grad_offset;
        uint16_t *h = copy + sg->grad_offset, *l = lo + sg->offset;
#pragma omp parallel for schedule(static) if (sg->count > 65536)
        for (int64_t i = 0; i < sg->count; i++) split_master(m[i], &h[i], &l[i]);
    }
}

double mc_cpu_sumsq(mc_backend *be, const mc_tensor *x) {
    (void)be;
    int64_t n = mc_tensor_numel(x);
    return x->dtype == MC_F32 ? sumsq_f32(x->data, n) : sumsq_f64(x->data, n);
}

void mc_cpu_sumsq_segments(mc_backend *be, double *out, const float *buf, const mc_adamw_segment *segments,
                           int nsegments) {
    (void)be;
    double total = 0.0;
    for (int i = 0; i < nsegments; i++) total += sumsq_f32(buf + segments[i].offset, segments[i].count);
    *out = total;
}

int64_t mc_cpu_count_zeros(mc_backend *be, const mc_tensor *x) {
    (void)be;
    int64_t n = mc_tensor_numel(x);
    return x->dtype == MC_F32 ? count_zeros_f32(x->data, n) : count_zeros_f64(x->data, n);
}

#endif
