/* init.cu: fill, the Philox normal weight init, and dtype conversion.
 *
 * init_normal computes exactly mc_philox_normal (base/philox.c): two 32-bit Philox draws,
 * Box-Muller in double, then std * value rounded to float and to the tensor's dtype, as
 * the CPU backend does. Device log/cos may differ from glibc's by an ulp of double, which
 * survives the rounding to float only rarely (then as one float ulp).
 * Conversions round to nearest even (bf16 as mc_f32_to_bf16, f16 as IEEE). */
#include "backend/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- fill ---- */

template <typename T>
__global__ void fill_kernel(T *x, int64_t n, float v) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mc_st(x + i, v);
}

void mc_cuda_fill(mc_backend *be, mc_tensor *x, double value) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "fill";
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return;
    float v = (float)value;
    unsigned grid = mc_cuda_grid(st, n, 256);
    if (x->dtype == MC_F32) fill_kernel<float><<<grid, 256, 0, st->stream>>>((float *)x->data, n, v);
    else if (x->dtype == MC_BF16) fill_kernel<__nv_bfloat16><<<grid, 256, 0, st->stream>>>((__nv_bfloat16 *)x->data, n, v);
    else fill_kernel<__half><<<grid, 256, 0, st->stream>>>((__half *)x->data, n, v);
    MC_CUDA_LAUNCHED(st, op);
}

/* ---- init_normal ---- */

/* mc_philox_normal, operation for operation */
__device__ __forceinline__ double philox_normal_dev(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t a = mc_philox_bits(seed, stream, 2 * index);
    uint32_t b = mc_philox_bits(seed, stream, 2 * index + 1);
    double u1 = ((double)a + 1.0) / 4294967296.0;
    double u2 = (double)b / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

template <typename T>
__global__ void init_normal_kernel(T *p, int64_t rows, int64_t cols, uint64_t seed, uint64_t stream, double std,
                                   const int64_t *row_index, int64_t row_stride, int64_t col_offset) {
    const int64_t total = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        const uint64_t idx = (uint64_t)(row_index[r] * row_stride + col_offset + c);
        const double v = std * philox_normal_dev(seed, stream, idx);
        mc_st(p + i, (float)v);
    }
}

void mc_cuda_init_normal(mc_backend *be, mc_tensor *p, uint64_t seed, uint64_t stream, double std,
                         const int64_t *row_index, int64_t row_stride, int64_t col_offset) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "init_normal";
    int64_t rows = p->ndim == 2 ? p->shape[0] : 1, cols = p->ndim == 2 ? p->shape[1] : mc_tensor_numel(p);
    if (rows == 0 || cols == 0) return;
    /* the host row indices, into scratch: synchronous, so row_index may be reused at once */
    int64_t *dev_rows = (int64_t *)mc_cuda_workspace(st, (size_t)rows * sizeof(int64_t), op);
    MC_CUDA_CHECK(cudaMemcpyAsync(dev_rows, row_index, (size_t)rows * sizeof(int64_t), cudaMemcpyHostToDevice,
                                  st->stream),
                  op);
    unsigned grid = mc_cuda_grid(st, rows * cols, 256);
    if (p->dtype == MC_F32)
        init_normal_kernel<float><<<grid, 256, 0, st->stream>>>((float *)p->data, rows, cols, seed, stream, std,
                                                                dev_rows, row_stride, col_offset);
    else if (p->dtype == MC_BF16)
        init_normal_kernel<__nv_bfloat16><<<grid, 256, 0, st->stream>>>((__nv_bfloat16 *)p->data, rows, cols, seed,
                                                                        stream, std, dev_rows, row_stride, col_offset);
    else
        init_normal_kernel<__half><<<grid, 256, 0, st->stream>>>((__half *)p->data, rows, cols, seed, stream, std,
                                                                 dev_rows, row_stride, col_offset);
    MC_CUDA_LAUNCHED(st, op);
    mc_cuda_sync_checked(st, op); /* row_index (pageable) was read by the copy; keep init simple and safe */
}

/* ---- convert ---- */

template <typename D, typename S>
__global__ void convert_kernel(D *dst, const S *src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mc_st(dst + i, mc_ld(src + i));
}

/* F32 <-> BF16 or F16 in groups of 8 with 16-byte accesses */
template <typename D, typename S>
__global__ void convert8_kernel(D *dst, const S *src, int64_t n) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mc_load_group<S, true>(src, g * 8, n, v);
        mc_store_group<D, true>(dst, g * 8, n, v);
    }
}

template <typename D, typename S>
static void launch_convert(mc_cuda_state *st, void *dst, const void *src, int64_t n) {
    unsigned grid = mc_cuda_grid(st, n, 256);
    convert_kernel<D, S><<<grid, 256, 0, st->stream>>>((D *)dst, (const S *)src, n);
    MC_CUDA_LAUNCHED(st, "convert");
}

template <typename D, typename S>
static void launch_convert8(mc_cuda_state *st, void *dst, const void *src, int64_t n) {
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    convert8_kernel<D, S><<<grid, 256, 0, st->stream>>>((D *)dst, (const S *)src, n);
    MC_CUDA_LAUNCHED(st, "convert");
}

void mc_cuda_convert(mc_backend *be, mc_tensor *dst, const mc_tensor *src) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "convert";
    int64_t n = mc_tensor_numel(src);
    if (n == 0) return;
    if (dst->dtype == src->dtype) {
        if (dst->data != src->data)
            MC_CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data, mc_tensor_bytes(src), cudaMemcpyDeviceToDevice, st->stream),
                          op);
        return;
    }
    bool vec = mc_cuda_aligned16(dst->data) && mc_cuda_aligned16(src->data);
    mc_dtype s = src->dtype, d = dst->dtype;
    if (s == MC_F32 && d == MC_BF16) {
        if (vec) launch_convert8<__nv_bfloat16, float>(st, dst->data, src->data, n);
        else launch_convert<__nv_bfloat16, float>(st, dst->data, src->data, n);
    } else if (s == MC_BF16 && d == MC_F32) {
        if (vec) launch_convert8<float, __nv_bfloat16>(st, dst->data, src->data, n);
        else launch_convert<float, __nv_bfloat16>(st, dst->data, src->data, n);
    } else if (s == MC_F32 && d == MC_F16) {
        if (vec) launch_convert8<__half, float>(st, dst->data, src->data, n);
        else launch_convert<__half, float>(st, dst->data, src->data, n);
    } else if (s == MC_F16 && d == MC_F32) {
        if (vec) launch_convert8<float, __half>(st, dst->data, src->data, n);
        else launch_convert<float, __half>(st, dst->data, src->data, n);
    } else if (s == MC_BF16 && d == MC_F16) {
        launch_convert<__half, __nv_bfloat16>(st, dst->data, src->data, n);
    } else {
        launch_convert<__nv_bfloat16, __half>(st, dst->data, src->data, n);
    }
}
