/* attention_wgmma_bwd.cu: causal flash-attention backward on Hopper's warpgroup MMA (wgmma,
 * sm_90a), BF16 in, F32 accumulation, head_dim 64, no dropout and no seg_start. dQ is
 * summed in F32 by the copy engine's bulk adds, whose order varies from run to run; with
 * --deterministic-mode (dq_acc NULL) this kernel forms dK and dV only and dQ has its own
 * pass (attention_wgmma_dq.cu). The other cases keep the mma.sync kernels of
 * attention_bf16_bwd.cu. This is the serial kernel, run with MC_ATTN_BWD_PIPE=0;
 * attention_wgmma_bwd_pipe.cu has the software-pipelined one attention.cu runs by default.
 *
 * Block = (64 NWG keys, kv group, batch); warpgroup w owns keys 64 w .. 64 w + 63, its dK
 * and dV in registers for the whole kernel. The block walks the group's heads in order and,
 * for each, the 64-query tiles from the diagonal to S (a fixed order: dK/dV sum over the
 * query heads deterministically). Q and dO tiles (with lse and D) are double-buffered by
 * cp.async, 128B-swizzled (wgmma.h). Per tile each warpgroup, transposed so that its keys
 * are the M rows:
 *   S^T = K Q^T, dP^T = V dO^T     wgmma m64n64k16 x 4 each, both operands in shared memory,
 *   P^T = exp2(S^T scale log2e - lse log2e) (the causal mask only on tiles that need it),
 *   dS^T = P^T (dP^T - D) scale,
 *   dV += P^T dO                   A = P^T re-packed in registers, B = dO as an MN-major
 *                                  operand (no transposed copy),
 *   dK += dS^T Q                   A = dS^T stored to shared memory (swizzled), read K-major;
 *                                  B = Q MN-major;
 *   dQ = dS K                      over all the block's keys, after a block barrier: A = the
 *                                  warpgroups' dS^T tiles read MN-major, B = K MN-major;
 *                                  warpgroup w forms columns 64 w / NWG .. of it (a
 *                                  descriptor starting inside the swizzled rows) into a
 *                                  shared F32 tile, which one thread adds into dq_acc with
 *                                  one bulk reduction (cp.reduce.async.bulk .add.f32: the
 *                                  tile's 64 rows are contiguous there) while the block
 *                                  goes on with the next tile.
 * Summing dQ is what this kernel spends most on beyond its matrix products. Measured on an
 * H200 (Llama shape / GPT-2 shape): without any dQ sum 0.55 / 1.17 ms; float2 atomics from
 * every thread, 64-key blocks 0.84 / 1.64, 128-key blocks (one dQ product for both
 * warpgroups: half the atomics) 0.77 / 1.61; bulk adds of single rows 0.91 / 1.91; one
 * bulk add of the whole tile 0.74 / 1.56 (kept). (dS^T goes through shared memory rather
 * than registers for dK as well: that keeps the kernel near 200 registers instead of 254.)
 * Configuration (ptxas, sm_90a): 2 warpgroups, 191 registers, 114 KB of shared memory, one
 * block per SM (64-key blocks of one warpgroup, 3 blocks per SM at 168 registers: 0.82 /
 * 1.90 with atomics).
 * Query rows past S get lse = +inf (p = 0), so only the diagonal tiles need a mask; a tile
 * wholly before a warpgroup's keys is skipped by that warpgroup. */
#include <limits.h>

#include "backend/cuda/attention_internal.h"
#include "backend/cuda/wgmma.h"

template <int NWG>
struct wbwd_cfg {
    static constexpr int BN = 64 * NWG; /* keys per block */
    static constexpr int NT = 128 * NWG;
    static constexpr size_t TILES = (size_t)2 * BN * 128 + 4 * 64 * 128 + (size_t)NWG * 64 * 128;
    static constexpr size_t DQ_BYTES = (size_t)64 * 64 * sizeof(float); /* a query tile's dQ, F32, contiguous */
    static constexpr size_t SMEM = 1024 + TILES + 4 * 64 * sizeof(float) + 2 * DQ_BYTES;
};

template <int NWG, int MINB, bool DQ>
__global__ void __launch_bounds__(NWG * 128, MINB) attn_wg_bwd_kernel(attn_geom g, __nv_bfloat16 *dqkv,
                                                                     const __nv_bfloat16 *dout,
                                                                     const __nv_bfloat16 *qkv, const float *lse,
                                                                     const float *D_, float *dq_acc) {
    using C = wbwd_cfg<NWG>;
    static_assert(NWG == 2, "the dQ column split below is for two warpgroups");
    constexpr int DQN = 64 / NWG, DQR = DQN / 2; /* dQ columns and accumulator registers a warpgroup */
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Ks = wg_smem_align1024(smem_raw); /* [BN] rows */
    unsigned char *Vs = Ks + C::BN * 128;     /* [BN] rows */
    unsigned char *Qs = Vs + C::BN * 128;     /* [2][64] rows */
    unsigned char *dOs = Qs + 2 * 64 * 128;   /* [2][64] rows */
    unsigned char *dSs = dOs + 2 * 64 * 128;  /* [NWG][64] rows: each warpgroup's dS^T */
    float *lse2_s = (float *)(dSs + NWG * 64 * 128); /* [2][64]: lse log2e (+inf past S) */
    float *D_s = lse2_s + 2 * 64;                     /* [2][64] */
    float *dQs = D_s + 2 * 64;                        /* [2][64][64]: an item's dQ, staged for the bulk add */

    const int64_t ngb = (int64_t)g.G * g.B;
    const int kt = (int)(blockIdx.x / ngb); /* key tile 0 has the most queries: first */
    const int gb = (int)(blockIdx.x % ngb), grp = gb % g.G, b = gb / g.G;
    const int j0 = kt * C::BN;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int jw0 = j0 + 64 * wg;                     /* the warpgroup's first key */
    const int krow = 16 * warp + lane / 4;            /* this thread's key rows krow, krow + 8 (local) */
    const int cq = 2 * (lane % 4);
    const int nq = attn_cdiv(g.S, 64), qt0 = j0 / 64, nqt = nq - qt0, nitems = g.hpg * nqt;
    const int64_t obs = (int64_t)g.B * g.H * 64; /* out/dout stride between positions */

    const int64_t kbase = attn_k_off(g, 0, b, grp);
    wg_load_tile<C::BN, C::NT>(Ks, qkv, kbase, g.row_stride, j0, g.S, tid);
    wg_load_tile<C::BN, C::NT>(Vs, qkv, kbase + 64, g.row_stride, j0, g.S, tid);

    auto load_item = [&](int item, int stage) {
        const int h = grp * g.hpg + item / nqt, i0 = (qt0 + item % nqt) * 64;
        wg_load_tile<64, C::NT>(Qs + stage * 8192, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, tid);
        wg_load_tile<64, C::NT>(dOs + stage * 8192, dout, attn_o_off(g, 0, b, h), obs, i0, g.S, tid);
        if (tid < 64) {
            const int i = i0 + tid;
            lse2_s[stage * 64 + tid] = i < g.S ? lse[attn_row_off(g, i, b, h)] * ATTN_LOG2E : INFINITY;
            D_s[stage * 64 + tid] = i < g.S ? D_[attn_row_off(g, i, b, h)] : 0.0f;
        }
    };
    load_item(0, 0);
    attn_cp_async_commit();

    float dk[32], dv[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dk[i] = dv[i] = 0.0f;
    unsigned char *Kw = Ks + wg * 8192, *Vw = Vs + wg * 8192, *dSw = dSs + wg * 8192;

    /* dQ: item it's dQ is staged in dQs[it % 2] at its end and added to dq_acc at the start
     * of item it + 1 (after that item's first barrier) by one bulk add of the tile's rows
     * (contiguous in dq_acc) from thread 0; the add of item it - 2 has finished reading its
     * buffer by then (wait_read 1). */
    int prev_h = 0, prev_i0 = -1;
    auto flush_dq = [&](int buf) {
        if (tid == 0) {
            if (prev_i0 >= 0)
                wg_bulk_add_f32(dq_acc + attn_row_off(g, prev_i0, b, prev_h) * 64, dQs + (size_t)buf * 64 * 64,
                                (uint32_t)(min(64, g.S - prev_i0) * 64 * sizeof(float)));
            wg_bulk_commit();
            wg_bulk_wait_read<1>();
        }
    };

    for (int it = 0; it < nitems; it++) {
        const int stage = it & 1;
        attn_cp_async_wait<0>(); /* item it's tiles landed (its side data: plain stores) */
        wg_fence_proxy();
        __syncthreads(); /* visible to all; every warpgroup is done with item it - 1's stage */
        if constexpr (DQ) flush_dq(stage ^ 1);
        if (it + 1 < nitems) load_item(it + 1, stage ^ 1);
        attn_cp_async_commit();
        const int h = grp * g.hpg + it / nqt, i0 = (qt0 + it % nqt) * 64;
        /* a tile whose queries all precede this warpgroup's keys: no P, no dS (uniform per
         * warpgroup); only the last warpgroups can be inactive, and only on the diagonal */
        const bool active = i0 + 63 >= jw0;
        const int nact = min(NWG, (i0 + 63 - j0) / 64 + 1); /* active warpgroups: 0 .. nact-1 */
        const unsigned char *Qb = Qs + stage * 8192, *dOb = dOs + stage * 8192;
        const float *lse2 = lse2_s + stage * 64, *Dv = D_s + stage * 64;

        if (active) {
            float st[32], dpt[32];
#pragma unroll
            for (int i = 0; i < 32; i++) st[i] = dpt[i] = 0.0f;
            wg_fence_acc(st);
            wg_fence_acc(dpt);
            wg_arrive();
#pragma unroll
            for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(st, wg_desc(Kw + 32 * k), wg_desc(Qb + 32 * k), k > 0);
#pragma unroll
            for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(dpt, wg_desc(Vw + 32 * k), wg_desc(dOb + 32 * k), k > 0);
            wg_commit();
            wg_wait<0>();
            wg_fence_acc(st);
            wg_fence_acc(dpt);

            /* element (jj, e): key jw0 + krow + 8 (e / 2), query i0 + 8 jj + cq + e % 2 */
            const bool need_mask = i0 < jw0 + 63;
#pragma unroll
            for (int jj = 0; jj < 8; jj++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qc = 8 * jj + cq + (e & 1);
                    float p = attn_ex2(st[4 * jj + e] * g.scale_log2 - lse2[qc]);
                    if (need_mask && jw0 + krow + 8 * (e >> 1) > i0 + qc) p = 0.0f;
                    st[4 * jj + e] = p;
                    dpt[4 * jj + e] = p * (dpt[4 * jj + e] - Dv[qc]) * g.scale;
                }
            uint32_t pa[4][4];
#pragma unroll
            for (int k = 0; k < 4; k++) wg_pack_a(pa[k], st, k);
            /* dS^T rows (keys) to shared memory: the A operand of dK (K-major) and of dQ (MN-major) */
#pragma unroll
            for (int jj = 0; jj < 8; jj++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
                    *reinterpret_cast<uint32_t *>(dSw + wg_sw_off(krow + 8 * hf, 8 * jj + cq)) =
                        wg_pack(dpt[4 * jj + 2 * hf], dpt[4 * jj + 2 * hf + 1]);
            wg_fence_proxy();
            wg_bar(wg); /* this warpgroup's dS^T tile is complete */
            wg_fence_acc(dk);
            wg_fence_acc(dv);
            wg_arrive();
#pragma unroll
            for (int k = 0; k < 4; k++) wg_mma_rs_n64<1>(dv, pa[k], wg_desc(dOb + 2048 * k), 1);
#pragma unroll
            for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 1>(dk, wg_desc(dSw + 32 * k), wg_desc(Qb + 2048 * k), 1);
            wg_commit();
            if constexpr (!DQ) { /* done with pa and dSw before the next tile rewrites them */
                wg_wait<0>();
                wg_fence_acc(dk);
                wg_fence_acc(dv);
            }
        }
        if constexpr (!DQ) continue; /* dQ has its own kernel (attention_wgmma_dq.cu) */
        __syncthreads(); /* every active warpgroup's dS^T tile is complete */

        float dqa[DQR];
#pragma unroll
        for (int i = 0; i < DQR; i++) dqa[i] = 0.0f;
        wg_fence_acc(dqa);
        wg_arrive();
        /* dQ[:, DQN w .. DQN (w + 1)) = dS K over the block's active keys (the dS^T tiles are
         * consecutive, so k-step k of 16 keys starts 2048 k bytes in; K's columns DQN w ..
         * start 2 DQN w bytes into its rows) */
        if (nact == NWG) {
#pragma unroll
            for (int k = 0; k < 4 * NWG; k++) wg_mma_ss_n32<1, 1>(dqa, wg_desc(dSs + 2048 * k), wg_desc(Ks + 2048 * k + 2 * DQN * wg), k > 0);
        } else { /* NWG 2, the diagonal tile: only warpgroup 0's keys are visible */
#pragma unroll
            for (int k = 0; k < 4; k++) wg_mma_ss_n32<1, 1>(dqa, wg_desc(dSs + 2048 * k), wg_desc(Ks + 2048 * k + 2 * DQN * wg), k > 0);
        }
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(dqa);
        wg_fence_acc(dk);
        wg_fence_acc(dv);
        /* stage this item's dQ (rows: the tile's queries, same lane mapping as dS^T's keys) */
        float *dst = dQs + (size_t)stage * 64 * 64 + DQN * wg + cq;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int jj = 0; jj < DQN / 8; jj++)
                *reinterpret_cast<float2 *>(dst + (krow + 8 * hf) * 64 + 8 * jj) =
                    make_float2(dqa[4 * jj + 2 * hf], dqa[4 * jj + 2 * hf + 1]);
        wg_fence_proxy(); /* the bulk add (async proxy) reads it after the next barrier */
        prev_h = h;
        prev_i0 = i0;
    } /* (the next item's first barrier also orders this dS^T read before its rewrite) */
    attn_cp_async_wait<0>(); /* only an empty group can remain */
    if constexpr (DQ) {
        __syncthreads(); /* the last item's dQ is staged */
        flush_dq((nitems - 1) & 1);
        if (tid == 0) wg_bulk_wait<0>(); /* landed before the block ends */
    }

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = jw0 + krow + 8 * hf;
        if (j >= g.S) continue;
        __nv_bfloat16 *kd = dqkv + attn_k_off(g, j, b, grp) + cq, *vd = dqkv + attn_v_off(g, j, b, grp) + cq;
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            *reinterpret_cast<uint32_t *>(kd + 8 * jj) = attn_pack_bf16(dk[4 * jj + 2 * hf], dk[4 * jj + 2 * hf + 1]);
            *reinterpret_cast<uint32_t *>(vd + 8 * jj) = attn_pack_bf16(dv[4 * jj + 2 * hf], dv[4 * jj + 2 * hf + 1]);
        }
    }
}

template <int NWG, int MINB, bool DQ>
static void wbwd_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                        const __nv_bfloat16 *qkv, const float *lse, const float *Drow, float *dq_acc) {
    using C = wbwd_cfg<NWG>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BN) * g.G * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_wg_bwd_kernel<NWG, MINB, DQ>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, dqkv, dout, qkv, lse, Drow, dq_acc);
    ATTN_CHECK_LAUNCH("attn_wg_bwd_kernel");
}

void attn_wg_bwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *qkv, const float *lse, const float *D, float *dq_acc) {
    MC_ASSERT(g.d == 64, "cuda attention: the wgmma backward is for head_dim 64, not %d", g.d);
    if (dq_acc) {
        wbwd_launch<2, 1, true>(st, g, dqkv, dout, qkv, lse, D, dq_acc);
        attn_launch_dq_store(st, g, dqkv, dq_acc);
    } else { /* deterministic: dK, dV here, dQ by its own pass */
        wbwd_launch<2, 1, false>(st, g, dqkv, dout, qkv, lse, D, nullptr);
        attn_wg_dq(st, g, dqkv, dout, qkv, lse, D);
    }
}
