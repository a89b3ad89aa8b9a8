/* embedding.cu: vocab-parallel embedding lookup (forward) and its gradient (backward).
 * This rank holds table rows for ids [vocab_start, vocab_start + rows); other ids read as
 * zeros forward and are skipped backward.
 *
 * Backward is deterministic without atomics: the (local row, token) pairs are sorted by
 * row with CUB's radix sort, which is stable, so each row's tokens stay in token order;
 * then one block per (run of equal rows, column slice) sums its tokens' gradient rows in
 * that order in F32 and adds the sum to the F32 dtable. Ids off this rank get the key
 * `rows`, sorted last and skipped. */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>

#include <cub/device/device_radix_sort.cuh>

/* ---- forward ---- */

/* Thread per group of 8 columns of one token: y[t, c..c+8) (=, +=) table[r, c..c+8). */
template <typename T, bool VEC>
__global__ void embedding_fwd_kernel(T *y, const int32_t *ids, const T *table, int64_t ntok, int64_t rows, int64_t h,
                                     int64_t vocab_start, bool accumulate) {
    const int64_t groups_per_row = (h + 7) / 8, total = ntok * groups_per_row;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = g / groups_per_row, c0 = (g % groups_per_row) * 8;
        const int64_t r = (int64_t)ids[t] - vocab_start;
        T *yt = y + t * h;
        float v[8];
        if (r >= 0 && r < rows) {
            mc_load_group<T, VEC>(table + r * h, c0, h, v);
            if (accumulate) {
                float a[8];
                mc_load_group<T, VEC>(yt, c0, h, a);
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] += a[k];
            }
        } else {
            if (accumulate) continue;
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = 0.0f;
        }
        mc_store_group<T, VEC>(yt, c0, h, v);
    }
}

template <typename T>
static void launch_fwd(mc_cuda_state *st, T *y, const int32_t *ids, const T *table, int64_t ntok, int64_t rows,
                       int64_t h, int64_t vocab_start, bool accumulate) {
    bool vec = h % 8 == 0 && mc_cuda_aligned16(y) && mc_cuda_aligned16(table);
    int64_t total = ntok * ((h + 7) / 8);
    unsigned grid = mc_cuda_grid(st, total, 256);
    if (vec)
        embedding_fwd_kernel<T, true><<<grid, 256, 0, st->stream>>>(y, ids, table, ntok, rows, h, vocab_start, accumulate);
    else
        embedding_fwd_kernel<T, false><<<grid, 256, 0, st->stream>>>(y, ids, table, ntok, rows, h, vocab_start, accumulate);
    MC_CUDA_LAUNCHED(st, "embedding_fwd");
}

void mc_cuda_embedding_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                           int64_t vocab_start, bool accumulate) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "embedding_fwd";
    int64_t ntok = mc_tensor_numel(ids), rows = mc_cuda_rows(table), h = mc_cuda_cols(table);
    if (ntok == 0 || h == 0) return;
    MC_CUDA_DISPATCH_FLOAT(table->dtype, op, T,
                           launch_fwd<T>(st, (T *)y->data, (const int32_t *)ids->data, (const T *)table->data, ntok,
                                         rows, h, vocab_start, accumulate));
}

/* ---- backward ---- */

/* key[t] = local row of token t (or `rows` when off this rank), val[t] = t */
__global__ void embedding_keys_kernel(uint32_t *keys, uint32_t *vals, const int32_t *ids, int64_t ntok, int64_t rows,
                                      int64_t vocab_start) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < ntok; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)ids[t] - vocab_start;
        keys[t] = (r >= 0 && r < rows) ? (uint32_t)r : (uint32_t)rows;
        vals[t] = (uint32_t)t;
    }
}

enum { EMB_BWD_THREADS = 128 };

/* Block (i, slice): if sorted position i starts a run of equal keys, sums dy rows of the
 * run's tokens (in token order) over the columns of this slice and adds them to dtable. */
template <typename T, bool VEC>
__global__ void embedding_bwd_kernel(float *dtable, const T *dy, const uint32_t *keys, const uint32_t *toks,
                                     int64_t ntok, int64_t rows, int64_t h) {
    const int64_t i = blockIdx.x;
    const uint32_t key = keys[i];
    if (key >= (uint32_t)rows) return;            /* off this rank (sorted last) */
    if (i > 0 && keys[i - 1] == key) return;      /* not the start of a run */
    const int64_t slice_cols = (int64_t)EMB_BWD_THREADS * 8;
    const int64_t c0 = (int64_t)blockIdx.y * slice_cols + (int64_t)threadIdx.x * 8;
    if (c0 >= h) return;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    for (int64_t j = i; j < ntok && keys[j] == key; j++) {
        float v[8];
        mc_load_group<T, VEC>(dy + (int64_t)toks[j] * h, c0, h, v);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += v[k];
    }
    float *dst = dtable + (int64_t)key * h;
    float cur[8];
    mc_load_group<float, VEC>(dst, c0, h, cur);
#pragma unroll
    for (int k = 0; k < 8; k++) cur[k] += acc[k];
    mc_store_group<float, VEC>(dst, c0, h, cur);
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The backward's limits (the backend's supports()): token and row indices are 32-bit sort
 * keys, and a grid's y dimension (65535) holds the hidden size's slices. */
bool mc_cuda_embedding_bwd_supports(const mc_op_sizes *s, mc_op_refusal *why) {
    if (s->rows == 0 || s->cols == 0 || s->table_rows == 0) return true; /* nothing to do */
    if (s->rows >= ((int64_t)1 << 31) || s->table_rows >= ((int64_t)1 << 31) - 1) {
        why->operand = "ids";
        snprintf(why->expected, sizeof why->expected, "fewer than 2^31 tokens and 2^31 - 1 table rows (32-bit sort keys)");
        snprintf(why->given, sizeof why->given, "%lld tokens, %lld rows", (long long)s->rows, (long long)s->table_rows);
        return false;
    }
    const int64_t slice_cols = (int64_t)EMB_BWD_THREADS * 8;
    if ((s->cols + slice_cols - 1) / slice_cols > 65535) {
        why->operand = "dtable";
        snprintf(why->expected, sizeof why->expected, "a last dim of at most %lld", (long long)(65535 * slice_cols));
        snprintf(why->given, sizeof why->given, "%lld", (long long)s->cols);
        return false;
    }
    return true;
}

void mc_cuda_embedding_bwd(mc_backend *be, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                           int64_t vocab_start) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "embedding_bwd";
    int64_t ntok = mc_tensor_numel(ids), rows = mc_cuda_rows(dtable), h = mc_cuda_cols(dtable);
    if (ntok == 0 || h == 0 || rows == 0) return;
    int end_bit = 1;
    while (end_bit < 32 && ((uint64_t)1 << end_bit) <= (uint64_t)rows) end_bit++; /* keys are <= rows */

    size_t cub_bytes = 0;
    MC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                  (const uint32_t *)NULL, (uint32_t *)NULL, (int)ntok, 0, end_bit,
                                                  st->stream),
                  op);
    size_t arr = align256((size_t)ntok * sizeof(uint32_t));
    char *ws = (char *)mc_cuda_workspace(st, 4 * arr + align256(cub_bytes), op);
    uint32_t *keys_in = (uint32_t *)ws, *keys_out = (uint32_t *)(ws + arr);
    uint32_t *vals_in = (uint32_t *)(ws + 2 * arr), *vals_out = (uint32_t *)(ws + 3 * arr);
    void *cub_tmp = ws + 4 * arr;

    embedding_keys_kernel<<<mc_cuda_grid(st, ntok, 256), 256, 0, st->stream>>>(keys_in, vals_in,
                                                                               (const int32_t *)ids->data, ntok, rows,
                                                                               vocab_start);
    MC_CUDA_LAUNCHED(st, op);
    MC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, keys_in, keys_out, vals_in, vals_out, (int)ntok, 0,
                                                  end_bit, st->stream),
                  op);
    MC_CUDA_LAUNCHED(st, op);

    const int64_t slices = (h + (int64_t)EMB_BWD_THREADS * 8 - 1) / ((int64_t)EMB_BWD_THREADS * 8);
    dim3 grid((unsigned)ntok, (unsigned)slices);
    bool vec = h % 8 == 0 && mc_cuda_aligned16(dy->data) && mc_cuda_aligned16(dtable->data);
    float *dt = (float *)dtable->data;
    MC_CUDA_DISPATCH_FLOAT(dy->dtype, op, T, const T *d = (const T *)dy->data;
        if (vec) embedding_bwd_kernel<T, true><<<grid, EMB_BWD_THREADS, 0, st->stream>>>(dt, d, keys_out, vals_out,
                                                                                        ntok, rows, h);
        else embedding_bwd_kernel<T, false><<<grid, EMB_BWD_THREADS, 0, st->stream>>>(dt, d, keys_out, vals_out,
                                                                                         ntok, rows, h));
    MC_CUDA_LAUNCHED(st, op);
}
