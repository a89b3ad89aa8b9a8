/* xent.cu: vocab-parallel softmax cross-entropy: one pass for each row's max, sum of
 * exponentials and target logit (the max folded in on the fly: the sum is rescaled whenever
 * a larger value appears, so the logits are read once), a rescale of the sums to the
 * tensor-parallel group's max, then loss and gradient. logits [N, V_local] are F32, BF16 or
 * F16; rowmax, stats [2, N], loss and mask are F32. One block per row (V up to 128256 and
 * beyond), 16-byte loads when the row length and the pointer allow, F32 accumulation,
 * reductions in a fixed order. dlogits may alias logits (each element is read before the
 * same thread writes it). */
#include "backend/cuda/cuda_internal.h"

static int xent_threads(int64_t v) { return v >= 65536 ? 1024 : v >= 8192 ? 512 : 256; }

/* (m, s) <- the pair for the union of two sets of logits, each s relative to its own m.
 * Commutative in floating point, so both lanes of a butterfly get the same bits. */
__device__ __forceinline__ void xent_combine(float &m, float &s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    s = M == -INFINITY ? 0.0f : s * __expf(m - M) + s2 * __expf(m2 - M);
    m = M;
}

__device__ __forceinline__ void xent_warp_combine(float &m, float &s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        xent_combine(m, s, m2, s2);
    }
}

template <typename T, bool VEC>
__global__ void xent_rowstats_kernel(float *rowmax, float *stats, const T *logits, const int32_t *targets, int64_t n,
                                     int64_t v, int64_t vocab_start) {
    __shared__ float red_m[32], red_s[32];
    const int64_t row = blockIdx.x;
    const T *lr = logits + row * v;
    const int64_t groups = (v + 7) / 8;
    float m = -INFINITY, s = 0.0f;
    /* XU groups a thread per round, loaded before any is used (several 16-byte loads in
     * flight per thread: one at a time left this kernel latency-bound at ~2 TB/s) */
    constexpr int XU = 4;
    for (int64_t g0 = threadIdx.x; g0 < groups; g0 += XU * (int64_t)blockDim.x) {
        float x[XU][8];
#pragma unroll
        for (int u = 0; u < XU; u++) {
            const int64_t g = g0 + u * (int64_t)blockDim.x;
            if (g < groups) {
                mc_load_group<T, VEC>(lr, g * 8, v, x[u]);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (!VEC && g * 8 + k >= v) x[u][k] = -INFINITY;
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) x[u][k] = -INFINITY;
            }
        }
        float gm = -INFINITY;
#pragma unroll
        for (int u = 0; u < XU; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) gm = fmaxf(gm, x[u][k]);
        if (gm > m) { /* a new maximum: the sum so far, relative to it (0 * exp(-inf) = 0 at first) */
            s *= __expf(m - gm);
            m = gm;
        }
        /* m is finite here (group g0 has a real logit), so exp(-inf - m) = 0 for the padding */
#pragma unroll
        for (int u = 0; u < XU; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) s += __expf(x[u][k] - m); /* ex2.approx: rel. error ~1e-7 near the max */
    }
    xent_warp_combine(m, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? red_m[lane] : -INFINITY;
        s = lane < nwarps ? red_s[lane] : 0.0f;
        xent_warp_combine(m, s);
        if (lane == 0) {
            const int64_t local = (int64_t)targets[row] - vocab_start;
            rowmax[row] = m;
            stats[row] = s;
            stats[n + row] = (local >= 0 && local < v) ? mc_ld(lr + local) : 0.0f;
        }
    }
}

__global__ void xent_rescale_kernel(float *stats, const float *local_max, const float *global_max, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        stats[i] *= __expf(local_max[i] - global_max[i]);
}

__device__ __forceinline__ float xent_loss_of(const float *rowmax, const float *stats, int64_t n, int64_t row) {
    return (float)(log((double)stats[row]) + (double)rowmax[row] - (double)stats[n + row]);
}

__global__ void xent_loss_kernel(float *loss, const float *rowmax, const float *stats, int64_t n) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < n; row += (int64_t)gridDim.x * blockDim.x)
        loss[row] = xent_loss_of(rowmax, stats, n, row);
}

template <typename T, bool VEC>
__global__ void xent_loss_grad_kernel(float *loss, T *dlogits, const T *logits, const float *rowmax,
                                      const float *stats, const int32_t *targets, const float *mask, int64_t n,
                                      int64_t v, int64_t vocab_start, float grad_scale) {
    const int64_t row = blockIdx.x;
    if (threadIdx.x == 0) loss[row] = xent_loss_of(rowmax, stats, n, row);
    const float m = rowmax[row], sum = stats[row];
    const float w = grad_scale * (mask ? mask[row] : 1.0f);
    const int64_t local = (int64_t)targets[row] - vocab_start;
    const T *lr = logits + row * v;
    T *dr = dlogits + row * v;
    const int64_t groups = (v + 7) / 8;
    if (w == 0.0f) {
        float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) mc_store_group<T, VEC>(dr, g * 8, v, z);
        return;
    }
    const float coef = w / sum;
#pragma unroll 2
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(lr, g * 8, v, x);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float d = __expf(x[k] - m) * coef;
            if (g * 8 + k == local) d -= w;
            x[k] = d;
        }
        mc_store_group<T, VEC>(dr, g * 8, v, x);
    }
}

/* ---- entries ---- */

void mc_cuda_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                           const mc_tensor *targets, int64_t vocab_start) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rowstats";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    if (n == 0) return;
    MC_ASSERT(v > 0, "cuda xent_rowstats: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_rowstats: %lld rows", (long long)n);
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data);
    int threads = xent_threads(v);
    float *rm = (float *)rowmax->data, *s = (float *)stats->data;
    const int32_t *tg = (const int32_t *)targets->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, const T *l = (const T *)logits->data;
        if (vec) xent_rowstats_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(rm, s, l, tg, n, v, vocab_start);
        else xent_rowstats_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(rm, s, l, tg, n, v, vocab_start));
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_xent_rescale(mc_backend *be, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rescale";
    int64_t n = mc_tensor_numel(local_max);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_f32_numel(op, "local_max", local_max, n);
    mc_cuda_check_f32_numel(op, "global_max", global_max, n);
    if (n == 0) return;
    xent_rescale_kernel<<<mc_cuda_grid(st, n, 256), 256, 0, st->stream>>>(
        (float *)stats->data, (const float *)local_max->data, (const float *)global_max->data, n);
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_xent_loss_grad(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                            const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                            const mc_tensor *mask, int64_t vocab_start, float grad_scale) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_loss_grad";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "loss", loss, n);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    const float *mk = NULL;
    if (mc_tensor_present(mask)) {
        mc_cuda_check_f32_numel(op, "mask", mask, n);
        mk = (const float *)mask->data;
    }
    if (n == 0) return;
    float *lo = (float *)loss->data;
    const float *rm = (const float *)rowmax->data, *s = (const float *)stats->data;
    if (!mc_tensor_present(dlogits)) {
        xent_loss_kernel<<<mc_cuda_grid(st, n, 256), 256, 0, st->stream>>>(lo, rm, s, n);
        MC_CUDA_LAUNCHED(st, op);
        return;
    }
    mc_cuda_check_dtype(op, "dlogits", dlogits, logits->dtype);
    mc_cuda_check_2d(op, "dlogits", dlogits, n, v);
    MC_ASSERT(v > 0, "cuda xent_loss_grad: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_loss_grad: %lld rows", (long long)n);
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data) && mc_cuda_aligned16(dlogits->data);
    int threads = xent_threads(v);
    const int32_t *tg = (const int32_t *)targets->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, T *dl = (T *)dlogits->data; const T *l = (const T *)logits->data;
        if (vec)
            xent_loss_grad_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(lo, dl, l, rm, s, tg, mk, n, v,
                                                                                   vocab_start, grad_scale);
        else
            xent_loss_grad_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(lo, dl, l, rm, s, tg, mk, n, v,
                                                                                    vocab_start, grad_scale));
    MC_CUDA_LAUNCHED(st, op);
}
