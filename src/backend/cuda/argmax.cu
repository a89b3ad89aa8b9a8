/* argmax.cu: the greedy choice of generation (backend.h's argmax_rows; the CPU reference is
 * backend/cpu/argmax.c). One block per row: each thread keeps the best (value, id) of a
 * strided walk over the row's shards, then the block reduces them in shared memory, the
 * lower id winning among equal values, so the result does not depend on the launch shape. */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int ARGMAX_THREADS = 256;

/* (v, id) better than (bv, bid): larger, or as large with a lower id; NaN never. */
__device__ __forceinline__ bool better(float v, int64_t id, float bv, int64_t bid) {
    return v > bv || (v == bv && id < bid);
}

template <typename T>
__global__ void argmax_rows_kernel(int32_t *ids, const T *x, int64_t n, int64_t shards, int64_t cols, int64_t vocab) {
    __shared__ float val_s[ARGMAX_THREADS];
    __shared__ int64_t id_s[ARGMAX_THREADS];
    const int64_t b = blockIdx.x;
    float bv = -INFINITY;
    int64_t bid = 0;
    for (int64_t r = 0; r < shards; r++) {
        const T *row = x + (r * n + b) * cols;
        const int64_t lim = vocab - r * cols < cols ? vocab - r * cols : cols;
        for (int64_t j = threadIdx.x; j < lim; j += ARGMAX_THREADS) {
            const float v = mc_ld(row + j);
            if (better(v, r * cols + j, bv, bid)) { /* -inf and NaN never replace the initial (-inf, 0) */
                bv = v;
                bid = r * cols + j;
            }
        }
    }
    val_s[threadIdx.x] = bv;
    id_s[threadIdx.x] = bid;
    __syncthreads();
    for (int s = ARGMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && better(val_s[threadIdx.x + s], id_s[threadIdx.x + s], val_s[threadIdx.x], id_s[threadIdx.x])) {
            val_s[threadIdx.x] = val_s[threadIdx.x + s];
            id_s[threadIdx.x] = id_s[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) ids[b] = (int32_t)id_s[0];
}

}  // namespace

void mc_cuda_argmax_rows(mc_backend *be, mc_tensor *ids, const mc_tensor *x, int64_t vocab) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int64_t n = mc_tensor_numel(ids), cols = mc_cuda_cols(x);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, "argmax_rows", T,
                           argmax_rows_kernel<T><<<(unsigned)n, ARGMAX_THREADS, 0, st->stream>>>(
                               (int32_t *)ids->data, (const T *)x->data, n, mc_cuda_rows(x) / n, cols, vocab));
    MC_CUDA_LAUNCHED(st, "argmax_rows");
}
