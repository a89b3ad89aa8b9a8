/* attention_wgmma_dq.cu: dQ of the causal flash-attention backward as its own pass, on
 * Hopper's warpgroup MMA (wgmma, sm_90a), BF16 in, F32 accumulation, head_dim 64, no
 * dropout and no seg_start: the deterministic backward (--deterministic-mode) of the wgmma
 * path, next to attention_wgmma_bwd_pipe.cu run without its dQ sum. No atomics or bulk
 * adds: every dQ row is summed by one thread pair in a fixed key order, so runs are
 * bitwise equal.
 *
 * Block = (BQ = 64 NWG query rows, head, batch), as the forward: warpgroup w owns rows
 * 64 w .. 64 w + 63, its Q and dO rows loaded once, K/V tiles of 64 keys double-buffered by
 * cp.async (128B-swizzled, wgmma.h). Per K/V tile each warpgroup
 *   S = Q K^T, dP = dO V^T    wgmma m64n64k16 x 4 each, operands in shared memory,
 *   dS = P (dP - D) scale     P = exp2(S scale log2e - lse log2e), the causal mask only on
 *                             tiles that cross the diagonal; lse and D of its two rows in
 *                             registers for the whole kernel,
 *   dQ += dS K                A = dS re-packed from the accumulators, B = K as an MN-major
 *                             operand,
 * and writes dQ (bf16) into the q slots of dqkv at the end. This recomputes S and dP, which
 * the key-side kernel also forms: 7 matrix products a tile pair instead of 5, the price of
 * determinism. */
#include <limits.h>

#include "backend/cuda/attention_internal.h"
#include "backend/cuda/wgmma.h"

template <int NWG>
struct wdq_cfg {
    static constexpr int BQ = 64 * NWG;
    static constexpr int NT = 128 * NWG;
    static constexpr size_t SMEM = 1024 + 2 * (size_t)BQ * 128 + 4 * 64 * 128;
};

template <int NWG, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) attn_wg_dq_kernel(attn_geom g, __nv_bfloat16 *dqkv,
                                                                    const __nv_bfloat16 *dout,
                                                                    const __nv_bfloat16 *qkv, const float *lse,
                                                                    const float *D_) {
    using C = wdq_cfg<NWG>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Qs = wg_smem_align1024(smem_raw); /* [BQ] rows */
    unsigned char *dOs = Qs + C::BQ * 128;            /* [BQ] rows */
    unsigned char *Ks = dOs + C::BQ * 128;            /* [2][64] rows */
    unsigned char *Vs = Ks + 2 * 64 * 128;            /* [2][64] rows */

    const int nq = attn_cdiv(g.S, C::BQ);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb); /* the longest rows first */
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * C::BQ, i_last = min(i0 + C::BQ, g.S) - 1;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int rA = i0 + 64 * wg + 16 * warp + lane / 4; /* this thread's rows: rA, rA + 8 */
    const int cq = 2 * (lane % 4);
    const int nkt = i_last / 64 + 1;
    const int wg_first = i0 + 64 * wg, wg_nkt = min(wg_first + 63, g.S - 1) / 64 + 1;

    const int64_t kbase = attn_k_off(g, 0, b, grp), obs = (int64_t)g.B * g.H * 64;
    wg_load_tile<C::BQ, C::NT>(Qs, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, tid);
    wg_load_tile<C::BQ, C::NT>(dOs, dout, attn_o_off(g, 0, b, h), obs, i0, g.S, tid);
    wg_load_tile<64, C::NT>(Ks, qkv, kbase, g.row_stride, 0, g.S, tid);
    wg_load_tile<64, C::NT>(Vs, qkv, kbase + 64, g.row_stride, 0, g.S, tid);
    attn_cp_async_commit();

    float lse2[2], Dr[2]; /* rows past S: p = exp2(-inf) = 0 */
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = rA + 8 * hf;
        lse2[hf] = i < g.S ? lse[attn_row_off(g, i, b, h)] * ATTN_LOG2E : INFINITY;
        Dr[hf] = i < g.S ? D_[attn_row_off(g, i, b, h)] : 0.0f;
    }
    float dq[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dq[i] = 0.0f;
    const unsigned char *Qw = Qs + wg * 8192, *dOw = dOs + wg * 8192;

    for (int it = 0; it < nkt; it++) {
        const int stage = it & 1;
        attn_cp_async_wait<0>(); /* tile it (and Q, dO) landed */
        wg_fence_proxy();
        __syncthreads(); /* visible to every warpgroup; all are done with tile it - 1's stage */
        if (it + 1 < nkt) {
            wg_load_tile<64, C::NT>(Ks + (stage ^ 1) * 8192, qkv, kbase, g.row_stride, (it + 1) * 64, g.S, tid);
            wg_load_tile<64, C::NT>(Vs + (stage ^ 1) * 8192, qkv, kbase + 64, g.row_stride, (it + 1) * 64, g.S, tid);
        }
        attn_cp_async_commit();
        if (it >= wg_nkt) continue; /* past this warpgroup's rows (uniform over it) */
        const unsigned char *Kb = Ks + stage * 8192, *Vb = Vs + stage * 8192;

        float s[32], dp[32];
#pragma unroll
        for (int i = 0; i < 32; i++) s[i] = dp[i] = 0.0f;
        wg_fence_acc(s);
        wg_fence_acc(dp);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(s, wg_desc(Qw + 32 * k), wg_desc(Kb + 32 * k), k > 0);
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(dp, wg_desc(dOw + 32 * k), wg_desc(Vb + 32 * k), k > 0);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(s);
        wg_fence_acc(dp);

        /* element (jj, e): row rA + 8 (e / 2), key j0 + 8 jj + cq + e % 2; keys past S lie
         * past every valid row, so the diagonal mask covers them */
        const int j0 = it * 64;
        const bool need_mask = j0 + 63 > wg_first;
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = attn_ex2(s[4 * jj + e] * g.scale_log2 - lse2[e >> 1]);
                if (need_mask && j0 + 8 * jj + cq + (e & 1) > rA + 8 * (e >> 1)) p = 0.0f;
                s[4 * jj + e] = p * (dp[4 * jj + e] - Dr[e >> 1]) * g.scale;
            }
        uint32_t dsa[4][4];
#pragma unroll
        for (int k = 0; k < 4; k++) wg_pack_a(dsa[k], s, k);
        wg_fence_acc(dq);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_rs_n64<1>(dq, dsa[k], wg_desc(Kb + 2048 * k), 1);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(dq);
    }
    attn_cp_async_wait<0>(); /* only an empty group can remain */

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = rA + 8 * hf;
        if (i >= g.S) continue;
        __nv_bfloat16 *dst = dqkv + attn_q_off(g, i, b, h) + cq;
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
            *reinterpret_cast<uint32_t *>(dst + 8 * jj) = attn_pack_bf16(dq[4 * jj + 2 * hf], dq[4 * jj + 2 * hf + 1]);
    }
}

template <int NWG, int MINB>
static void wdq_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                       const __nv_bfloat16 *qkv, const float *lse, const float *D) {
    using C = wdq_cfg<NWG>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BQ) * g.H * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_wg_dq_kernel<NWG, MINB>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, dqkv, dout, qkv, lse, D);
    ATTN_CHECK_LAUNCH("attn_wg_dq_kernel");
}

void attn_wg_dq(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                const __nv_bfloat16 *qkv, const float *lse, const float *D) {
    MC_ASSERT(g.d == 64, "cuda attention: the wgmma dQ pass is for head_dim 64, not %d", g.d);
    wdq_launch<2, 2>(st, g, dqkv, dout, qkv, lse, D);
}
