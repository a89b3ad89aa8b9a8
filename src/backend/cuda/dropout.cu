/* dropout.cu: dropout (forward, backward, fused with the residual add), add and scale in
 * place. Element i is kept iff mc_philox_uniform(seed, stream, i) >= p and then scaled by
 * 1/(1 - p), exactly as the CPU backend: one thread per group of 8 elements draws the two
 * Philox blocks (4 words each) that cover them. The mask is regenerated in backward,
 * never stored. p == 0 is an exact copy or add. Each element is read before the same
 * thread writes it, so outputs may alias inputs. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

/* u[k] = mc_philox_uniform(seed, stream, 8 g + k), k < 8 */
__device__ __forceinline__ void philox_uniform8(uint64_t seed, uint64_t stream, int64_t g, float u[8]) {
#pragma unroll
    for (int b = 0; b < 2; b++) {
        uint64_t blk = (uint64_t)g * 2 + (uint64_t)b;
        mc_philox_out o = mc_philox4x32_10(seed, (uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)stream,
                                           (uint32_t)(stream >> 32));
#pragma unroll
        for (int w = 0; w < 4; w++) u[4 * b + w] = (float)(o.v[w] >> 8) * (1.0f / 16777216.0f);
    }
}

/* y = (residual +) keep x scale */
template <typename T, bool VEC, bool RES>
__global__ void dropout_kernel(T *y, const T *residual, const T *x, int64_t n, float p, float scale, uint64_t seed,
                               uint64_t stream) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float u[8], v[8], r[8];
        philox_uniform8(seed, stream, g, u);
        mc_load_group<T, VEC>(x, g * 8, n, v);
        if (RES) mc_load_group<T, VEC>(residual, g * 8, n, r);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float kept = u[k] >= p ? v[k] * scale : 0.0f;
            v[k] = RES ? r[k] + kept : kept;
        }
        mc_store_group<T, VEC>(y, g * 8, n, v);
    }
}

/* y = a + b */
template <typename T, bool VEC>
__global__ void add_kernel(T *y, const T *a, const T *b, int64_t n) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float va[8], vb[8];
        mc_load_group<T, VEC>(a, g * 8, n, va);
        mc_load_group<T, VEC>(b, g * 8, n, vb);
#pragma unroll
        for (int k = 0; k < 8; k++) va[k] = va[k] + vb[k];
        mc_store_group<T, VEC>(y, g * 8, n, va);
    }
}

template <typename T, bool VEC>
__global__ void scale_kernel(T *x, int64_t n, float s) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mc_load_group<T, VEC>(x, g * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = v[k] * s;
        mc_store_group<T, VEC>(x, g * 8, n, v);
    }
}

template <typename T>
static void launch_dropout(mc_cuda_state *st, const char *op, T *y, const T *residual, const T *x, int64_t n, float p,
                           uint64_t seed, uint64_t stream) {
    if (n == 0) return;
    float scale = 1.0f / (1.0f - p);
    bool vec = mc_cuda_aligned16(y) && mc_cuda_aligned16(x) && (!residual || mc_cuda_aligned16(residual));
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    if (residual) {
        if (vec) dropout_kernel<T, true, true><<<grid, 256, 0, st->stream>>>(y, residual, x, n, p, scale, seed, stream);
        else dropout_kernel<T, false, true><<<grid, 256, 0, st->stream>>>(y, residual, x, n, p, scale, seed, stream);
    } else {
        if (vec) dropout_kernel<T, true, false><<<grid, 256, 0, st->stream>>>(y, NULL, x, n, p, scale, seed, stream);
        else dropout_kernel<T, false, false><<<grid, 256, 0, st->stream>>>(y, NULL, x, n, p, scale, seed, stream);
    }
    MC_CUDA_LAUNCHED(st, op);
}

template <typename T>
static void launch_add(mc_cuda_state *st, const char *op, T *y, const T *a, const T *b, int64_t n) {
    if (n == 0) return;
    bool vec = mc_cuda_aligned16(y) && mc_cuda_aligned16(a) && mc_cuda_aligned16(b);
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    if (vec) add_kernel<T, true><<<grid, 256, 0, st->stream>>>(y, a, b, n);
    else add_kernel<T, false><<<grid, 256, 0, st->stream>>>(y, a, b, n);
    MC_CUDA_LAUNCHED(st, op);
}

/* y = (residual +) dropout(x), dispatched on dtype; p == 0: exact copy or add. */
static void dropout_any(mc_cuda_state *st, const char *op, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                        float p, uint64_t seed, uint64_t stream) {
    int64_t n = mc_tensor_numel(x);
    const void *res = residual ? residual->data : NULL;
    if (p == 0.0f) {
        if (!res) {
            if (y->data != x->data && n > 0)
                MC_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, mc_tensor_bytes(x), cudaMemcpyDeviceToDevice, st->stream),
                              op);
        } else {
            MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                                   launch_add<T>(st, op, (T *)y->data, (const T *)res, (const T *)x->data, n));
        }
        return;
    }
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_dropout<T>(st, op, (T *)y->data, (const T *)res, (const T *)x->data, n, p, seed,
                                             stream));
}

void mc_cuda_dropout_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream) {
    dropout_any(mc_cuda_st(be), "dropout_fwd", y, NULL, x, p, seed, stream);
}

void mc_cuda_dropout_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream) {
    dropout_any(mc_cuda_st(be), "dropout_bwd", dx, NULL, dy, p, seed, stream);
}

void mc_cuda_dropout_add_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                             uint64_t seed, uint64_t stream) {
    dropout_any(mc_cuda_st(be), "dropout_add_fwd", y, residual, x, p, seed, stream);
}

void mc_cuda_add_inplace(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "add_inplace";
    int64_t n = mc_tensor_numel(y);
    MC_CUDA_DISPATCH_FLOAT(y->dtype, op, T,
                           launch_add<T>(st, op, (T *)y->data, (const T *)y->data, (const T *)x->data, n));
}

void mc_cuda_scale_inplace(mc_backend *be, mc_tensor *x, float s) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "scale_inplace";
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return;
    bool vec = mc_cuda_aligned16(x->data);
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           if (vec) scale_kernel<T, true><<<grid, 256, 0, st->stream>>>((T *)x->data, n, s);
                           else scale_kernel<T, false><<<grid, 256, 0, st->stream>>>((T *)x->data, n, s));
    MC_CUDA_LAUNCHED(st, op);
}
