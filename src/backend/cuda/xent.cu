/* xent.cu: vocab-parallel softmax cross-entropy in three passes (rowmax, stats, loss and
 * gradient), so that the model can all-reduce over the tensor-parallel group between them.
 * logits [N, V_local] are F32, BF16 or F16; rowmax, stats [2, N], loss and mask are F32. One
 * block per row (V up to 128256 and beyond), 16-byte loads when the row length and the
 * pointer allow, F32 accumulation, block reductions in a fixed order. dlogits may alias
 * logits (each element is read before the same thread writes it). */
#include "backend/cuda/cuda_internal.h"

static int xent_threads(int64_t v) { return v >= 65536 ? 1024 : v >= 8192 ? 512 : 256; }

template <typename T, bool VEC>
__global__ void xent_rowmax_kernel(float *rowmax, const T *logits, int64_t v) {
    __shared__ float red[32];
    const T *lr = logits + (int64_t)blockIdx.x * v;
    const int64_t groups = (v + 7) / 8;
    float m = -INFINITY;
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(lr, g * 8, v, x);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (g * 8 + k < v) m = fmaxf(m, x[k]);
    }
    m = mc_block_max(m, red);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

template <typename T, bool VEC>
__global__ void xent_stats_kernel(float *stats, const T *logits, const float *rowmax, const int32_t *targets,
                                  int64_t n, int64_t v, int64_t vocab_start) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const T *lr = logits + row * v;
    const int64_t groups = (v + 7) / 8;
    const float m = rowmax[row];
    float s = 0.0f;
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(lr, g * 8, v, x);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (g * 8 + k < v) s += __expf(x[k] - m); /* ex2.approx: rel. error ~1e-7 near the max */
    }
    s = mc_block_sum(s, red);
    if (threadIdx.x == 0) {
        const int64_t local = (int64_t)targets[row] - vocab_start;
        stats[row] = s;
        stats[n + row] = (local >= 0 && local < v) ? mc_ld(lr + local) : 0.0f;
    }
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

void mc_cuda_xent_rowmax(mc_backend *be, mc_tensor *rowmax, const mc_tensor *logits) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rowmax";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    if (n == 0) return;
    MC_ASSERT(v > 0, "cuda xent_rowmax: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_rowmax: %lld rows", (long long)n);
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data);
    int threads = xent_threads(v);
    float *rm = (float *)rowmax->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, const T *l = (const T *)logits->data;
        if (vec) xent_rowmax_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(rm, l, v);
        else xent_rowmax_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(rm, l, v));
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_xent_stats(mc_backend *be, mc_tensor *stats, const mc_tensor *logits, const mc_tensor *rowmax,
                        const mc_tensor *targets, int64_t vocab_start) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_stats";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    if (n == 0) return;
    MC_ASSERT(v > 0, "cuda xent_stats: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_stats: %lld rows", (long long)n);
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data);
    int threads = xent_threads(v);
    float *s = (float *)stats->data;
    const float *rm = (const float *)rowmax->data;
    const int32_t *tg = (const int32_t *)targets->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, const T *l = (const T *)logits->data;
        if (vec) xent_stats_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(s, l, rm, tg, n, v, vocab_start);
        else xent_stats_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(s, l, rm, tg, n, v, vocab_start));
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
