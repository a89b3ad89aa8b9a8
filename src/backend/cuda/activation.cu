/* activation.cu: GELU (exact and tanh approximation) and SwiGLU, forward and backward, in
 * the CPU backend's forms (backend/cpu/activation.c):
 *   exact:   gelu(x) = 0.5 x (1 + erf(x / sqrt 2)), gelu'(x) = 0.5 (1 + erf(x / sqrt 2)) + x phi(x)
 *   tanh:    gelu(x) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
 *            gelu'(x) = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *   swiglu:  x [N, 2f] = [gate | up], y = silu(gate) up;
 *            d gate = dy up s (1 + a (1 - s)), d up = dy silu(a), s = sigmoid(a)
 * One thread per group of 8 elements (16-byte accesses when aligned); each element is
 * read before the same thread writes it, so dx may alias dy. */
#include "backend/cuda/cuda_internal.h"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

__device__ __forceinline__ float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }

__device__ __forceinline__ float gelu_f(float v, bool tanh_approx) {
    if (tanh_approx) {
        float u = GELU_K0 * (v + GELU_K1 * v * v * v);
        return v * sigmoidf_(2.0f * u);
    }
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float gelu_grad_f(float v, bool tanh_approx) {
    if (tanh_approx) {
        float u = GELU_K0 * (v + GELU_K1 * v * v * v);
        float s = sigmoidf_(2.0f * u), du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        return s + 2.0f * v * s * (1.0f - s) * du;
    }
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.3989422804014327f * expf(-0.5f * v * v);
    return cdf + v * pdf;
}

/* ---- GELU ---- */

template <typename T, bool VEC>
__global__ void gelu_fwd_kernel(T *y, const T *x, int64_t n, bool tanh_approx) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mc_load_group<T, VEC>(x, g * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = gelu_f(v[k], tanh_approx);
        mc_store_group<T, VEC>(y, g * 8, n, v);
    }
}

template <typename T, bool VEC>
__global__ void gelu_bwd_kernel(T *dx, const T *dy, const T *x, int64_t n, bool tanh_approx) {
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8], d[8];
        mc_load_group<T, VEC>(x, g * 8, n, v);
        mc_load_group<T, VEC>(dy, g * 8, n, d);
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] = d[k] * gelu_grad_f(v[k], tanh_approx);
        mc_store_group<T, VEC>(dx, g * 8, n, d);
    }
}

template <typename T>
static void launch_gelu_fwd(mc_cuda_state *st, T *y, const T *x, int64_t n, bool tanh_approx) {
    bool vec = mc_cuda_aligned16(y) && mc_cuda_aligned16(x);
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    if (vec) gelu_fwd_kernel<T, true><<<grid, 256, 0, st->stream>>>(y, x, n, tanh_approx);
    else gelu_fwd_kernel<T, false><<<grid, 256, 0, st->stream>>>(y, x, n, tanh_approx);
    MC_CUDA_LAUNCHED(st, "gelu_fwd");
}

template <typename T>
static void launch_gelu_bwd(mc_cuda_state *st, T *dx, const T *dy, const T *x, int64_t n, bool tanh_approx) {
    bool vec = mc_cuda_aligned16(dx) && mc_cuda_aligned16(dy) && mc_cuda_aligned16(x);
    unsigned grid = mc_cuda_grid(st, (n + 7) / 8, 256);
    if (vec) gelu_bwd_kernel<T, true><<<grid, 256, 0, st->stream>>>(dx, dy, x, n, tanh_approx);
    else gelu_bwd_kernel<T, false><<<grid, 256, 0, st->stream>>>(dx, dy, x, n, tanh_approx);
    MC_CUDA_LAUNCHED(st, "gelu_bwd");
}

void mc_cuda_gelu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, bool tanh) {
    mc_cuda_state *st = mc_cuda_st(be);
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, "gelu_fwd", T, launch_gelu_fwd<T>(st, (T *)y->data, (const T *)x->data, n, tanh));
}

void mc_cuda_gelu_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh) {
    mc_cuda_state *st = mc_cuda_st(be);
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, "gelu_bwd", T,
                           launch_gelu_bwd<T>(st, (T *)dx->data, (const T *)dy->data, (const T *)x->data, n, tanh));
}

/* ---- SwiGLU: group = 8 consecutive columns j of one row t ---- */

/* silu(a) u: the forward and the backward's rewrite of y share it, so both round alike. */
__device__ __forceinline__ float swiglu_out(float a, float u) { return a * sigmoidf_(a) * u; }

/* I indexes the groups: uint32_t when the grid-stride loop fits in 32 bits
 * (mc_cuda_loop_fits_u32), int64_t otherwise. */
template <typename T, bool VEC, typename I>
__global__ void swiglu_fwd_kernel(T *y, const T *x, I rows, I f) {
    const I gpr = (f + 7) / 8, total = rows * gpr;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        const int64_t t = (int64_t)(i / gpr), j0 = (int64_t)(i % gpr) * 8;
        const T *gate = x + t * 2 * f, *up = gate + f;
        float a[8], u[8];
        mc_load_group<T, VEC>(gate, j0, f, a);
        mc_load_group<T, VEC>(up, j0, f, u);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = swiglu_out(a[k], u[k]);
        mc_store_group<T, VEC>(y + t * f, j0, f, a);
    }
}

template <typename T, bool VEC, typename I>
__global__ void swiglu_bwd_kernel(T *dx, T *y, const T *dy, const T *x, I rows, I f) {
    const I gpr = (f + 7) / 8, total = rows * gpr;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        const int64_t t = (int64_t)(i / gpr), j0 = (int64_t)(i % gpr) * 8;
        const T *gate = x + t * 2 * f, *up = gate + f;
        float a[8], u[8], d[8], dg[8], du[8];
        mc_load_group<T, VEC>(gate, j0, f, a);
        mc_load_group<T, VEC>(up, j0, f, u);
        mc_load_group<T, VEC>(dy + t * f, j0, f, d);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float s = sigmoidf_(a[k]);
            dg[k] = d[k] * u[k] * s * (1.0f + a[k] * (1.0f - s));
            du[k] = d[k] * a[k] * s;
        }
        T *dgate = dx + t * 2 * f, *dup = dgate + f;
        mc_store_group<T, VEC>(dgate, j0, f, dg);
        mc_store_group<T, VEC>(dup, j0, f, du);
        if (y) {
#pragma unroll
            for (int k = 0; k < 8; k++) dg[k] = swiglu_out(a[k], u[k]);
            mc_store_group<T, VEC>(y + t * f, j0, f, dg);
        }
    }
}

template <typename T>
static void launch_swiglu_fwd(mc_cuda_state *st, T *y, const T *x, int64_t rows, int64_t f) {
    bool vec = f % 8 == 0 && mc_cuda_aligned16(y) && mc_cuda_aligned16(x);
    unsigned grid = mc_cuda_grid(st, rows * ((f + 7) / 8), 256);
    if (mc_cuda_loop_fits_u32(rows * ((f + 7) / 8), grid, 256)) {
        uint32_t r = (uint32_t)rows, c = (uint32_t)f;
        if (vec) swiglu_fwd_kernel<T, true, uint32_t><<<grid, 256, 0, st->stream>>>(y, x, r, c);
        else swiglu_fwd_kernel<T, false, uint32_t><<<grid, 256, 0, st->stream>>>(y, x, r, c);
    } else {
        if (vec) swiglu_fwd_kernel<T, true, int64_t><<<grid, 256, 0, st->stream>>>(y, x, rows, f);
        else swiglu_fwd_kernel<T, false, int64_t><<<grid, 256, 0, st->stream>>>(y, x, rows, f);
    }
    MC_CUDA_LAUNCHED(st, "swiglu_fwd");
}

template <typename T>
static void launch_swiglu_bwd(mc_cuda_state *st, T *dx, T *y, const T *dy, const T *x, int64_t rows, int64_t f) {
    bool vec = f % 8 == 0 && mc_cuda_aligned16(dx) && mc_cuda_aligned16(dy) && mc_cuda_aligned16(x) &&
               (!y || mc_cuda_aligned16(y));
    unsigned grid = mc_cuda_grid(st, rows * ((f + 7) / 8), 256);
    if (mc_cuda_loop_fits_u32(rows * ((f + 7) / 8), grid, 256)) {
        uint32_t r = (uint32_t)rows, c = (uint32_t)f;
        if (vec) swiglu_bwd_kernel<T, true, uint32_t><<<grid, 256, 0, st->stream>>>(dx, y, dy, x, r, c);
        else swiglu_bwd_kernel<T, false, uint32_t><<<grid, 256, 0, st->stream>>>(dx, y, dy, x, r, c);
    } else {
        if (vec) swiglu_bwd_kernel<T, true, int64_t><<<grid, 256, 0, st->stream>>>(dx, y, dy, x, rows, f);
        else swiglu_bwd_kernel<T, false, int64_t><<<grid, 256, 0, st->stream>>>(dx, y, dy, x, rows, f);
    }
    MC_CUDA_LAUNCHED(st, "swiglu_bwd");
}

void mc_cuda_swiglu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "swiglu_fwd";
    int64_t rows = mc_cuda_rows(x), f = mc_cuda_cols(x) / 2;
    if (rows == 0 || f == 0) return;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T, launch_swiglu_fwd<T>(st, (T *)y->data, (const T *)x->data, rows, f));
}

/* dx [N, 2f] may even alias x: each thread writes exactly the gate/up elements it read.
 * y (optional): the forward's output again. */
void mc_cuda_swiglu_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "swiglu_bwd";
    int64_t rows = mc_cuda_rows(x), f = mc_cuda_cols(x) / 2;
    void *yd = mc_tensor_present(y) ? y->data : NULL;
    if (rows == 0 || f == 0) return;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_swiglu_bwd<T>(st, (T *)dx->data, (T *)yd, (const T *)dy->data, (const T *)x->data,
                                                rows, f));
}
