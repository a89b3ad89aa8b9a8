/* argmax.cu: the greedy choice of generation (backend.h's argmax_rows, and decode_advance
 * after it; the CPU reference is backend/cpu/argmax.c). One block of 512 threads per row: each thread keeps the best
 * (value, id) of a strided walk over the row's shards in groups of 8 elements (16-byte
 * loads, ARGMAX_UNROLL of them in flight: a decode step's row of 128K logits is a few
 * round trips to memory, not hundreds), then the block reduces them by warp shuffles and
 * shared memory, the lower id winning among equal values, so the result does not depend
 * on the launch shape. */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int ARGMAX_THREADS = 512;
constexpr int ARGMAX_UNROLL = 4;

/* (v, id) better than (bv, bid): larger, or as large with a lower id; NaN never. */
__device__ __forceinline__ bool better(float v, int64_t id, float bv, int64_t bid) {
    return v > bv || (v == bv && id < bid);
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_rows_kernel(int32_t *ids, const T *x, int64_t n, int64_t shards, int64_t cols, int64_t vocab) {
    __shared__ float val_s[ARGMAX_THREADS / 32];
    __shared__ int64_t id_s[ARGMAX_THREADS / 32];
    const int64_t b = blockIdx.x;
    constexpr int64_t STRIDE = (int64_t)ARGMAX_THREADS * 8;
    float bv = -INFINITY;
    int64_t bid = 0;
    for (int64_t r = 0; r < shards; r++) {
        const T *row = x + (r * n + b) * cols;
        const int64_t lim = vocab - r * cols < cols ? vocab - r * cols : cols;
        for (int64_t j0 = (int64_t)threadIdx.x * 8; j0 < lim; j0 += STRIDE * ARGMAX_UNROLL) {
            float v[ARGMAX_UNROLL][8];
#pragma unroll
            for (int u = 0; u < ARGMAX_UNROLL; u++) mc_load_group<T, VEC>(row, j0 + u * STRIDE, lim, v[u]);
#pragma unroll
            for (int u = 0; u < ARGMAX_UNROLL; u++)
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const int64_t j = j0 + u * STRIDE + k;
                    if (j < lim && better(v[u][k], r * cols + j, bv, bid)) { /* -inf, NaN never replace (-inf, 0) */
                        bv = v[u][k];
                        bid = r * cols + j;
                    }
                }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oid = __shfl_xor_sync(0xffffffffu, bid, o);
        if (better(ov, oid, bv, bid)) bv = ov, bid = oid;
    }
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    if (lane == 0) val_s[warp] = bv, id_s[warp] = bid;
    __syncthreads();
    if (warp == 0) {
        constexpr int WARPS = ARGMAX_THREADS / 32;
        bv = lane < WARPS ? val_s[lane] : -INFINITY;
        bid = lane < WARPS ? id_s[lane] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int64_t oid = __shfl_xor_sync(0xffffffffu, bid, o);
            if (better(ov, oid, bv, bid)) bv = ov, bid = oid;
        }
        if (lane == 0) ids[b] = (int32_t)bid;
    }
}

template <typename T>
void argmax_launch(mc_cuda_state *st, int32_t *ids, const T *x, int64_t n, int64_t shards, int64_t cols,
                   int64_t vocab) {
    /* 16-byte loads when every row starts 16-byte aligned */
    if (cols % 8 == 0 && mc_cuda_aligned16(x))
        argmax_rows_kernel<T, true><<<(unsigned)n, ARGMAX_THREADS, 0, st->stream>>>(ids, x, n, shards, cols, vocab);
    else
        argmax_rows_kernel<T, false><<<(unsigned)n, ARGMAX_THREADS, 0, st->stream>>>(ids, x, n, shards, cols, vocab);
}

__global__ void decode_advance_kernel(int32_t *tokens, int32_t *pos, const int32_t *ids, int64_t n, int64_t cap) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n) return;
    tokens[b] = ids[b];
    pos[b] = pos[b] + 1 < cap ? pos[b] + 1 : (int32_t)(cap - 1);
}

}  // namespace

void mc_cuda_argmax_rows(mc_backend *be, mc_tensor *ids, const mc_tensor *x, int64_t vocab) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int64_t n = mc_tensor_numel(ids), cols = mc_cuda_cols(x);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, "argmax_rows", T,
                           argmax_launch<T>(st, (int32_t *)ids->data, (const T *)x->data, n, mc_cuda_rows(x) / n,
                                            cols, vocab));
    MC_CUDA_LAUNCHED(st, "argmax_rows");
}

void mc_cuda_decode_advance(mc_backend *be, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int64_t n = mc_tensor_numel(ids);
    decode_advance_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st->stream>>>(
        (int32_t *)tokens->data, (int32_t *)pos->data, (const int32_t *)ids->data, n, cap);
    MC_CUDA_LAUNCHED(st, "decode_advance");
}
