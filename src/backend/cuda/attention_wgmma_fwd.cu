/* attention_wgmma_fwd.cu: causal flash-attention forward on Hopper's warpgroup MMA (wgmma,
 * sm_90a), BF16 in, F32 accumulation, head_dim 64, no dropout and no seg_start (those
 * cases keep the mma.sync kernels of attention_bf16_fwd.cu).
 *
 * Block = (BQ = 64 NWG query rows, head, batch); warpgroup w owns rows 64 w .. 64 w + 63.
 * Q is loaded once; K/V tiles of BK keys are double-buffered in shared memory (cp.async:
 * tile t + 1 is in flight while tile t is used), all tiles 128B-swizzled (wgmma.h). Per
 * K/V tile each warpgroup
 *   S = Q K^T        wgmma m64nBKk16 x 4, A = Q and B = K straight from shared memory,
 *   online softmax   in registers (exp2 domain; the causal mask only on the tiles that
 *                    cross the diagonal for some of its rows),
 *   O += P V         wgmma m64n64k16 x BK/16, A = P re-packed from the S accumulators in
 *                    registers, B = V as an MN-major operand (no transposed copy).
 * A warpgroup stops at the last tile its own rows reach (the other may go one further).
 * Grid order as the mma.sync kernel: the query tiles with the most keys first, a kv
 * group's heads adjacent (K/V shared through L2).
 * Output: O / l as bf16, lse = m ln2 + ln l (F32).
 * Configuration (ptxas, sm_90a; timed on an H200 against 128-key tiles with 2 and 3
 * warpgroups, which take 167 registers and fit one block per SM): 2 warpgroups (128 rows),
 * 64-key tiles, 115 registers, 49 KB of shared memory, 2 blocks per SM; Llama shape
 * 0.227 ms vs 0.285 and 0.266, GPT-2 shape 0.40 vs 0.52 and 0.55. */
#include <limits.h>

#include "backend/cuda/attention_internal.h"
#include "backend/cuda/wgmma.h"

template <int NWG, int BK>
struct wfwd_cfg {
    static constexpr int BQ = 64 * NWG;
    static constexpr int NT = 128 * NWG;
    static constexpr int SR = BK / 2; /* S accumulator registers a thread */
    static constexpr size_t SMEM = 1024 + (size_t)BQ * 128 + 4 * (size_t)BK * 128;
    static_assert(BK == 64 || BK == 128, "BK");
};

template <int BK>
__device__ __forceinline__ void wfwd_qk(float (&s)[BK / 2], uint64_t dq, const unsigned char *Kb) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (BK == 128)
            wg_mma_ss_n128<0, 0>(s, dq + 2 * k, wg_desc(Kb + 32 * k), k > 0);
        else
            wg_mma_ss_n64<0, 0>(s, dq + 2 * k, wg_desc(Kb + 32 * k), k > 0);
    }
}

template <int NWG, int BK, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) attn_wg_fwd_kernel(attn_geom g, __nv_bfloat16 *out, float *lse,
                                                                     const __nv_bfloat16 *qkv) {
    using C = wfwd_cfg<NWG, BK>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Qs = wg_smem_align1024(smem_raw); /* [BQ] rows */
    unsigned char *Ks = Qs + C::BQ * 128; /* [2][BK] rows */
    unsigned char *Vs = Ks + 2 * BK * 128; /* [2][BK] rows */

    const int nq = attn_cdiv(g.S, C::BQ);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb); /* the longest rows first */
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * C::BQ, i_last = min(i0 + C::BQ, g.S) - 1;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int rA = i0 + 64 * wg + 16 * warp + lane / 4; /* this thread's rows: rA, rA + 8 */
    const int cq = 2 * (lane % 4);
    const int nkt = i_last / BK + 1;
    const int wg_first = i0 + 64 * wg, wg_nkt = min(wg_first + 63, g.S - 1) / BK + 1;

    const int64_t kbase = attn_k_off(g, 0, b, grp);
    wg_load_tile<C::BQ, C::NT>(Qs, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, tid);
    wg_load_tile<BK, C::NT>(Ks, qkv, kbase, g.row_stride, 0, g.S, tid);
    wg_load_tile<BK, C::NT>(Vs, qkv, kbase + 64, g.row_stride, 0, g.S, tid);
    attn_cp_async_commit();

    float o[32];
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const uint64_t dq = wg_desc(Qs + wg * 64 * 128);

    for (int it = 0; it < nkt; it++) {
        const int stage = it & 1;
        attn_cp_async_wait<0>(); /* tile it (and Q) landed */
        wg_fence_proxy();
        __syncthreads(); /* visible to every warpgroup; all are done with tile it - 1's stage */
        if (it + 1 < nkt) {
            unsigned char *Kn = Ks + (stage ^ 1) * BK * 128, *Vn = Vs + (stage ^ 1) * BK * 128;
            wg_load_tile<BK, C::NT>(Kn, qkv, kbase, g.row_stride, (it + 1) * BK, g.S, tid);
            wg_load_tile<BK, C::NT>(Vn, qkv, kbase + 64, g.row_stride, (it + 1) * BK, g.S, tid);
        }
        attn_cp_async_commit();
        if (it >= wg_nkt) continue; /* past this warpgroup's rows (uniform over it) */
        const unsigned char *Kb = Ks + stage * BK * 128, *Vb = Vs + stage * BK * 128;

        float s[C::SR];
#pragma unroll
        for (int i = 0; i < C::SR; i++) s[i] = 0.0f;
        wg_fence_acc(s);
        wg_arrive();
        wfwd_qk<BK>(s, dq, Kb);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(s);

        const int j0 = it * BK;
        if (j0 + BK - 1 > wg_first) { /* the tile crosses the diagonal of some row */
#pragma unroll
            for (int jj = 0; jj < BK / 8; jj++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (j0 + 8 * jj + cq + (e & 1) > rA + 8 * (e >> 1)) s[4 * jj + e] = -INFINITY;
        }
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float mx = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < BK / 8; jj++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float v = s[4 * jj + 2 * hf + c] * g.scale_log2;
                    s[4 * jj + 2 * hf + c] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_r[hf], mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* nothing visible yet: p = 0 */
            const float corr = attn_ex2(m_r[hf] - m_use);
            m_r[hf] = m_new;
            float rs = 0.0f;
#pragma unroll
            for (int jj = 0; jj < BK / 8; jj++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float p = attn_ex2(s[4 * jj + 2 * hf + c] - m_use);
                    s[4 * jj + 2 * hf + c] = p;
                    rs += p;
                }
            l_r[hf] = l_r[hf] * corr + rs; /* this thread's partial row sum */
#pragma unroll
            for (int jj = 0; jj < 8; jj++) {
                o[4 * jj + 2 * hf] *= corr;
                o[4 * jj + 2 * hf + 1] *= corr;
            }
        }

        uint32_t pa[BK / 16][4];
#pragma unroll
        for (int k = 0; k < BK / 16; k++) wg_pack_a(pa[k], s, k);
        wg_fence_acc(o);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < BK / 16; k++) wg_mma_rs_n64<1>(o, pa[k], wg_desc(Vb + 2048 * k), 1);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(o);
    }
    attn_cp_async_wait<0>(); /* only an empty group can remain */

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float l = l_r[hf];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int i = rA + 8 * hf;
        if (i >= g.S) continue;
        const float inv = 1.0f / l;
        __nv_bfloat16 *dst = out + attn_o_off(g, i, b, h) + cq;
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
            *reinterpret_cast<uint32_t *>(dst + 8 * jj) = attn_pack_bf16(o[4 * jj + 2 * hf] * inv, o[4 * jj + 2 * hf + 1] * inv);
        if (lane % 4 == 0) lse[attn_row_off(g, i, b, h)] = m_r[hf] * ATTN_LN2 + logf(l);
    }
}

template <int NWG, int BK, int MINB>
static void wfwd_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv) {
    using C = wfwd_cfg<NWG, BK>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BQ) * g.H * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_wg_fwd_kernel<NWG, BK, MINB>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, out, lse, qkv);
    ATTN_CHECK_LAUNCH("attn_wg_fwd_kernel");
}

void attn_wg_fwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv) {
    MC_ASSERT(g.d == 64, "cuda attention: the wgmma forward is for head_dim 64, not %d", g.d);
    wfwd_launch<2, 64, 2>(st, g, out, lse, qkv);
}
