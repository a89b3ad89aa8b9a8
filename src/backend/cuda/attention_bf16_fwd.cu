/* attention_bf16_fwd.cu: causal flash-attention forward on tensor cores (BF16 in, F32
 * accumulation), FlashAttention-2 style, for head_dim 64 and 128.
 *
 * Block = (BQ query rows, head, batch); NW warps, each owning MT m16 row tiles (BQ = 16 MT NW
 * rows). Its Q tile is loaded once (cp.async, zero-filled past S) and kept in registers as
 * mma A fragments; K/V tiles of BK keys stream through a cp.async pipeline in shared
 * memory (below). Per K/V tile each warp
 *   S = Q K^T        mma.m16n8k16 (A = Q from registers, B = K rows by ldmatrix),
 *   online softmax   in registers: scores scaled into the exp2 domain, row max/sum reduced
 *                    over the 4 lanes sharing a row, masking only on tiles that cut the
 *                    causal diagonal or a row's seg_start,
 *   O += P V         P re-packed from the S accumulators as bf16 A fragments (no shared
 *                    memory round trip), V by ldmatrix.trans.
 * Shared rows are padded to d + 8 elements (16 bytes), so the 8 row addresses of an
 * ldmatrix fall in 8 different 16-byte bank groups: conflict-free without a swizzle.
 * Key tiles run from the tile of the block's smallest seg_start to the diagonal (tiles
 * wholly before every row's segment or after the diagonal are never touched). The grid
 * puts the query tiles with the most keys first; the heads of one kv group are adjacent in
 * the grid, so the group's K/V tiles are shared through L2.
 * Dropout: P (after the row sum, as the CPU reference) times the Philox keep factor.
 * Output: O / l as bf16, lse = m ln2 + ln l (F32).
 *
 * The tile loop is an NS-stage cp.async pipeline: tile t + NS - 1 is issued while tile t
 * is used, into the stage read in iteration t - 1 (free after that iteration's closing
 * barrier); every iteration commits one group (empty past the end), so "wait until at
 * most NS - 1 groups are in flight" always means "tile t has landed".
 *
 * Configurations (D, MT, NW, BK, NS), picked by timing on an H200 (ptxas, sm_90a):
 *   d 64:  1 m-tile x 4 warps = 64 rows, 64 keys, 3 stages: 164 registers, no spills,
 *          64.6 KB shared -> 3 blocks (12 warps) per SM;
 *   d 128: 1 m-tile x 4 warps = 64 rows, 64 keys, 2 stages: 244 registers, no spills,
 *          87 KB shared -> 2 blocks per SM (O alone is 64 registers a thread).
 * (2 m-tiles per warp at d 64, 128-key tiles and 8-warp blocks measured the same or slower.) */
#include <limits.h>

#include "backend/cuda/attention_internal.h"

template <int D, int MT, int NW, int BK, int NS>
struct fwd_cfg {
    static constexpr int BQ = 16 * MT * NW;
    static constexpr int NT = 32 * NW;
    static constexpr int LDS = D + 8; /* padded shared row, in elements */
    static constexpr int KC = D / 16; /* k chunks of Q K^T */
    static constexpr int SN = BK / 8; /* n tiles of S */
    static constexpr int ON = D / 8;  /* n tiles of O */
    static constexpr size_t SMEM = (size_t)(BQ + 2 * NS * BK) * LDS * sizeof(__nv_bfloat16) + 16 * sizeof(int);
    static_assert(D % 16 == 0 && BK % 16 == 0 && NS >= 2 && NW <= 16, "tile shapes");
};

template <int D, int MT, int NW, int BK, int NS>
__global__ void __launch_bounds__(NW * 32) attn_mma_fwd_kernel(attn_geom g, __nv_bfloat16 *out, float *lse,
                                                               const __nv_bfloat16 *qkv) {
    using C = fwd_cfg<D, MT, NW, BK, NS>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_raw; /* [BQ][LDS] */
    __nv_bfloat16 *Ks = Qs + C::BQ * C::LDS;       /* [NS][BK][LDS] */
    __nv_bfloat16 *Vs = Ks + NS * BK * C::LDS;     /* [NS][BK][LDS] */
    int *red = (int *)(Vs + NS * BK * C::LDS);     /* [NW]: each warp's smallest first key */

    const int nq = attn_cdiv(g.S, C::BQ);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb); /* the longest rows first */
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * C::BQ, i_last = min(i0 + C::BQ, g.S) - 1;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int wrow0 = warp * 16 * MT; /* the warp's first row in the tile */

    /* each thread's rows: (mt, hf) -> i0 + wrow0 + 16 mt + gq + 8 hf */
    int lo_t[MT][2];
    int my_min = INT_MAX;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = i0 + wrow0 + 16 * mt + gq + 8 * hf;
            lo_t[mt][hf] = i < g.S ? attn_seg_lo(g, b, i) : INT_MAX;
            my_min = min(my_min, lo_t[mt][hf]);
        }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) my_min = min(my_min, __shfl_xor_sync(0xffffffffu, my_min, off));
    if (lane == 0) red[warp] = my_min;

    const int64_t qbase = attn_q_off(g, 0, b, h), kbase = attn_k_off(g, 0, b, grp), vbase = kbase + D;
    attn_load_tile<C::BQ, D, C::NT>(Qs, qkv, qbase, g.row_stride, i0, g.S);
    __syncthreads(); /* red[] complete */
    int klo = INT_MAX;
#pragma unroll
    for (int w = 0; w < NW; w++) klo = min(klo, red[w]);
    /* klo <= i0: row i0 is valid and its first key is at most i0 */
    const int kt0 = klo / BK, kt1 = i_last / BK, nkt = kt1 - kt0 + 1;
    /* prologue: tiles 0 .. NS-2 in stages 0 .. NS-2, one commit group each (the first one
     * also holds Q); groups past the last tile are empty, which keeps the counting uniform */
#pragma unroll
    for (int st = 0; st < NS - 1; st++) {
        if (st < nkt) {
            attn_load_tile<BK, D, C::NT>(Ks + st * BK * C::LDS, qkv, kbase, g.row_stride, (kt0 + st) * BK, g.S);
            attn_load_tile<BK, D, C::NT>(Vs + st * BK * C::LDS, qkv, vbase, g.row_stride, (kt0 + st) * BK, g.S);
        }
        attn_cp_async_commit();
    }

    uint32_t qf[MT][C::KC][4];
    float o[MT][C::ON][4];
    float m_r[MT][2], l_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < C::ON; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        m_r[mt][0] = m_r[mt][1] = -INFINITY;
        l_r[mt][0] = l_r[mt][1] = 0.0f;
    }
    /* ldmatrix lane address pieces: A operand (rows = lane%8 + 8 ((lane/8)%2), col 8 (lane/16));
     * B operand non-transposed (rows = lane%8 + 8 (lane/16), col 8 ((lane/8)%2)); B operand
     * transposed (rows = lane%8 + 8 ((lane/8)%2), col 8 (lane/16)). */
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;

    for (int it = 0; it < nkt; it++) {
        const int kt = kt0 + it, buf = it % NS;
        if (it + NS - 1 < nkt) { /* into the stage read in iteration it - 1 (barrier-protected) */
            const int nb = (it + NS - 1) % NS;
            attn_load_tile<BK, D, C::NT>(Ks + nb * BK * C::LDS, qkv, kbase, g.row_stride, (kt + NS - 1) * BK, g.S);
            attn_load_tile<BK, D, C::NT>(Vs + nb * BK * C::LDS, qkv, vbase, g.row_stride, (kt + NS - 1) * BK, g.S);
        }
        attn_cp_async_commit(); /* possibly empty: keeps the group count uniform */
        attn_cp_async_wait<NS - 1>(); /* tile it (and Q) has landed; NS - 1 younger groups may fly */
        __syncthreads();
        if (it == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kc = 0; kc < C::KC; kc++)
                    attn_ldsm_x4(qf[mt][kc], Qs + (wrow0 + 16 * mt + a_row) * C::LDS + kc * 16 + a_col);
        }
        const __nv_bfloat16 *Kb = Ks + buf * BK * C::LDS, *Vb = Vs + buf * BK * C::LDS;

        /* S = Q K^T */
        float s[MT][C::SN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < C::SN; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < C::KC; kc++)
#pragma unroll
            for (int np = 0; np < C::SN / 2; np++) {
                uint32_t kb[4];
                attn_ldsm_x4(kb, Kb + (np * 16 + b_row) * C::LDS + kc * 16 + b_col);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(s[mt][2 * np], qf[mt][kc], kb[0], kb[1]);
                    attn_mma(s[mt][2 * np + 1], qf[mt][kc], kb[2], kb[3]);
                }
            }

        /* mask, online softmax, dropout */
        const int j0 = kt * BK;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int i = i0 + wrow0 + 16 * mt + gq + 8 * hf, lo = lo_t[mt][hf];
                if (j0 + BK - 1 > i || j0 < lo) {
#pragma unroll
                    for (int n = 0; n < C::SN; n++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int j = j0 + n * 8 + 2 * tq + e;
                            if (j > i || j < lo) s[mt][n][2 * hf + e] = -INFINITY;
                        }
                }
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < C::SN; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float v = s[mt][n][2 * hf + e] * g.scale_log2;
                        s[mt][n][2 * hf + e] = v;
                        mx = fmaxf(mx, v);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m_r[mt][hf], mx);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* nothing visible yet: p = 0 */
                const float corr = attn_ex2(m_r[mt][hf] - m_use);
                m_r[mt][hf] = m_new;
                float rs = 0.0f;
#pragma unroll
                for (int n = 0; n < C::SN; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float p = attn_ex2(s[mt][n][2 * hf + e] - m_use);
                        s[mt][n][2 * hf + e] = p;
                        rs += p;
                    }
                l_r[mt][hf] = l_r[mt][hf] * corr + rs; /* this thread's partial row sum */
#pragma unroll
                for (int n = 0; n < C::ON; n++) {
                    o[mt][n][2 * hf] *= corr;
                    o[mt][n][2 * hf + 1] *= corr;
                }
                if (g.dropout > 0.0f) {
#pragma unroll
                    for (int n = 0; n < C::SN; n++) {
                        float z0, z1;
                        attn_drop_factor2(g, attn_drop_index(g, b, h, i, j0 + n * 8 + 2 * tq), z0, z1);
                        s[mt][n][2 * hf] *= z0;
                        s[mt][n][2 * hf + 1] *= z1;
                    }
                }
            }

        /* O += P V */
#pragma unroll
        for (int kc = 0; kc < BK / 16; kc++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = attn_pack_bf16(s[mt][2 * kc][0], s[mt][2 * kc][1]);
                pa[mt][1] = attn_pack_bf16(s[mt][2 * kc][2], s[mt][2 * kc][3]);
                pa[mt][2] = attn_pack_bf16(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
                pa[mt][3] = attn_pack_bf16(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t vb[4];
                attn_ldsm_x4_trans(vb, Vb + (kc * 16 + a_row) * C::LDS + dp * 16 + a_col);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(o[mt][2 * dp], pa[mt], vb[0], vb[1]);
                    attn_mma(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); /* every warp is done with `buf` before a later iteration refills it */
    }
    attn_cp_async_wait<0>(); /* only empty groups can remain; leave nothing in flight */

    /* O / l, lse */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = l_r[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int i = i0 + wrow0 + 16 * mt + gq + 8 * hf;
            if (i >= g.S) continue;
            const float inv = 1.0f / l;
            __nv_bfloat16 *dst = out + attn_o_off(g, i, b, h) + 2 * tq;
#pragma unroll
            for (int n = 0; n < C::ON; n++)
                *reinterpret_cast<uint32_t *>(dst + n * 8) =
                    attn_pack_bf16(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
            if (tq == 0) lse[attn_row_off(g, i, b, h)] = m_r[mt][hf] * ATTN_LN2 + logf(l);
        }
}

template <int D, int MT, int NW, int BK, int NS>
static void fwd_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv) {
    using C = fwd_cfg<D, MT, NW, BK, NS>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BQ) * g.H * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_mma_fwd_kernel<D, MT, NW, BK, NS>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, out, lse, qkv);
    ATTN_CHECK_LAUNCH("attn_mma_fwd_kernel");
}

bool attn_mma_supported(int d) { return d == 64 || d == 128; }

void attn_mma_fwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv) {
    if (g.d == 64)
        fwd_launch<64, 1, 4, 64, 3>(st, g, out, lse, qkv);
    else if (g.d == 128)
        fwd_launch<128, 1, 4, 64, 2>(st, g, out, lse, qkv);
    else
        MC_ASSERT(0, "cuda attention: no tensor-core forward for head_dim %d", g.d);
}
