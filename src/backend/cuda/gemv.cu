/* gemv.cu: linear_fwd and linear_residual_fwd for a few rows (generation's decode steps):
 * y[r, o] = x[r, :] . w[o, :] (+ b[o]) (+ residual[r, o]) for r < n <= MC_CUDA_GEMV_ROWS.
 *
 * A decode step reads every weight once for a handful of tokens: the GEMMs are matrix-vector
 * products bound by memory bandwidth, which cuBLASLt's kernels (tiles made for many rows)
 * leave partly unused (bench/RESULTS.md has the decode traces). Here a warp owns one
 * output o: its lanes stream w's row o in 16-byte pieces, GEMV_UNROLL of them in flight
 * each, dot them with the same 8 elements of each x row (small, read through the L1 cache
 * by every warp), and sum their partials by shuffles. Every (r, o) is summed in the same
 * order whatever n is, so a row's result does not depend on the rows beside it (a batched
 * decode gives each sequence what it gets alone). bf16 and f16, 16-byte aligned rows of a
 * multiple of 8 elements; other operands take cuBLASLt (mc_cuda_gemv_fits). */
#include "backend/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>

namespace {

constexpr int GEMV_WARPS = 8;  /* warps (outputs) of a block */
constexpr int GEMV_UNROLL = 8; /* 16-byte pieces of w a lane has in flight */

template <typename T, int NR>
__global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_kernel(T *y, const T *x, const T *w, const T *b, const T *residual, int n, int64_t in, int64_t out) {
    const int64_t o = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    const int lane = (int)threadIdx.x % 32;
    if (o >= out) return; /* a whole warp: no shuffle is left waiting */
    const T *wr = w + o * in;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    const int64_t groups = in / 8;
    for (int64_t g0 = lane; g0 < groups; g0 += 32 * GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int64_t g = g0 + u * 32;
            if (g < groups) wv[u] = __ldcs(reinterpret_cast<const uint4 *>(wr) + g); /* streamed: read once */
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int64_t g = g0 + u * 32;
            if (g >= groups) break;
            float wf[8];
            mc_unpack8(wr, wv[u], wf);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                if (r >= n) break;
                float xf[8];
                mc_load8(x + r * in + g * 8, xf);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[r] += wf[k] * xf[k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = mc_warp_sum(acc[r]);
    if (lane == 0) {
        const float bias = b ? mc_ld(b + o) : 0.0f;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            if (r >= n) break;
            float v = acc[r] + bias;
            if (residual) v += mc_ld(residual + r * out + o);
            mc_st(y + r * out + o, v);
        }
    }
}

template <typename T>
void gemv_launch(mc_cuda_state *st, T *y, const T *x, const T *w, const T *b, const T *residual, int n, int64_t in,
                 int64_t out) {
    const unsigned grid = (unsigned)((out + GEMV_WARPS - 1) / GEMV_WARPS);
#define MC_GEMV_LAUNCH(NR) gemv_kernel<T, NR><<<grid, 32 * GEMV_WARPS, 0, st->stream>>>(y, x, w, b, residual, n, in, out)
    if (n == 1) MC_GEMV_LAUNCH(1);
    else if (n == 2) MC_GEMV_LAUNCH(2);
    else if (n <= 4) MC_GEMV_LAUNCH(4);
    else MC_GEMV_LAUNCH(8);
#undef MC_GEMV_LAUNCH
}

/* MC_GEMV=0 in the environment: every linear through cuBLASLt (A/B timing, bisection). */
bool gemv_enabled() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("MC_GEMV");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on != 0;
}

}  // namespace

bool mc_cuda_gemv_fits(const mc_tensor *x, const mc_tensor *w) {
    const int64_t n = mc_cuda_rows(x), in = mc_cuda_cols(x);
    return n >= 1 && n <= MC_CUDA_GEMV_ROWS && in % 8 == 0 && (x->dtype == MC_BF16 || x->dtype == MC_F16) &&
           mc_cuda_aligned16(x->data) && mc_cuda_aligned16(w->data) && gemv_enabled();
}

void mc_cuda_gemv(mc_backend *be, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                  const mc_tensor *residual) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int n = (int)mc_cuda_rows(x);
    const int64_t in = mc_cuda_cols(x), out = mc_cuda_rows(w);
    const void *bias = b && mc_tensor_present(b) ? b->data : NULL, *res = residual ? residual->data : NULL;
    if (x->dtype == MC_BF16)
        gemv_launch<__nv_bfloat16>(st, (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data,
                                   (const __nv_bfloat16 *)w->data, (const __nv_bfloat16 *)bias,
                                   (const __nv_bfloat16 *)res, n, in, out);
    else
        gemv_launch<__half>(st, (__half *)y->data, (const __half *)x->data, (const __half *)w->data,
                            (const __half *)bias, (const __half *)res, n, in, out);
    MC_CUDA_LAUNCHED(st, "linear_fwd (gemv)");
}
