/* attention_qpack.cu: the query heads between the packed per-group QKV [S, B, G, H/G + 2, d]
 * and a plain [S, B, H, d] buffer, for the cuDNN attention path (attention_cudnn.h says
 * why). 16-byte copies: the callers pass 2-byte types with d a multiple of 8 and buffers
 * from the allocator, so every head starts 16-byte aligned. Memory-bound: one read and
 * one write of the query heads. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/attention_cudnn.h"

/* Chunk c of the plain buffer (16 bytes) <-> its place in qkv. I: uint32_t when the chunk
 * count fits (mc_cuda_loop_fits_u32), int64_t otherwise. */
template <bool PACK, typename I>
__global__ void qheads_kernel(uint4 *plain, uint4 *qkv, I chunks, int heads, int hpg, int chunks_per_head) {
    for (I c = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; c < chunks; c += (I)gridDim.x * (I)blockDim.x) {
        const I row = c / (I)chunks_per_head; /* (token, head) */
        const int k = (int)(c % (I)chunks_per_head);
        const I tok = row / (I)heads;
        const int h = (int)(row % (I)heads), grp = h / hpg, hh = h - grp * hpg;
        const int groups = heads / hpg;
        const int64_t src = ((int64_t)tok * groups * (hpg + 2) + (int64_t)grp * (hpg + 2) + hh) * chunks_per_head + k;
        if (PACK) plain[c] = qkv[src];
        else qkv[src] = plain[c];
    }
}

template <bool PACK>
static void qheads_launch(mc_cuda_state *st, void *plain, void *qkv, const mc_attn_desc *d, mc_dtype dt,
                          const char *op) {
    const int chunks_per_head = (int)((size_t)d->head_dim * mc_dtype_size(dt) / 16);
    const int64_t chunks = d->seq * d->batch * d->heads * (int64_t)chunks_per_head;
    const int hpg = d->heads / d->groups;
    const unsigned grid = mc_cuda_grid(st, chunks, 256);
    if (mc_cuda_loop_fits_u32(chunks, grid, 256))
        qheads_kernel<PACK, uint32_t><<<grid, 256, 0, st->stream>>>((uint4 *)plain, (uint4 *)qkv, (uint32_t)chunks,
                                                                    d->heads, hpg, chunks_per_head);
    else
        qheads_kernel<PACK, int64_t><<<grid, 256, 0, st->stream>>>((uint4 *)plain, (uint4 *)qkv, chunks, d->heads,
                                                                   hpg, chunks_per_head);
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_qheads_pack(mc_cuda_state *st, void *q, const void *qkv, const mc_attn_desc *d, mc_dtype dt) {
    qheads_launch<true>(st, q, (void *)qkv, d, dt, "attention (query heads packed for cuDNN)");
}

void mc_cuda_qheads_unpack(mc_cuda_state *st, void *qkv, const void *q, const mc_attn_desc *d, mc_dtype dt) {
    qheads_launch<false>(st, (void *)q, qkv, d, dt, "attention (query-head gradient unpacked from cuDNN)");
}
