/* attention_bf16_bwd.cu: causal flash-attention backward on tensor cores (BF16 in, F32
 * accumulation), FlashAttention-2 style, in two modes:
 *   - fused (the default): the key-side kernel also forms dQ = dS K for its key block and
 *     adds it into an F32 accumulator with atomics (FlashAttention-2's way); a small kernel
 *     then writes dQ into dqkv. The order of those additions varies between runs.
 *   - deterministic (--deterministic-mode): no atomics; dQ has its own pass over the key
 *     tiles, which recomputes S and dP (7 matrix products per tile instead of 5).
 * D = rowsum(dO * O) comes precomputed (attention.cu); P is recomputed from lse.
 *
 * dkdv kernel: block = (16 NW keys, kv group, batch); warp w owns keys 16w .. 16w+15 of the
 *   block, so its dK and dV rows live in its registers for the whole kernel. It walks the
 *   group's heads in order and, for each, the query tiles (BQ queries) from the diagonal to
 *   S: a fixed order, so dK/dV of a kv head sum over its query heads deterministically.
 *   Q and dO tiles (plus lse, D and the query rows' key ranges) stream through a cp.async
 *   pipeline (cp.async for the tiles, plain stores for the side data); a tile none of whose
 *   queries sees the block's keys (seg_start past them) is skipped by a __syncthreads_or
 *   vote. Per tile each warp computes, transposed so that keys are the mma rows,
 *     S^T = K Q^T, dP^T = V dO^T      (A = K, V fragments; B = Q, dO rows by ldmatrix)
 *     P^T = exp2(S^T scale log2e - lse log2e), Pd = P z, dS^T = P (dP^T z - D) scale
 *     dV += Pd^T dO, dK += dS^T Q     (A = the re-packed accumulators; B by ldmatrix.trans)
 *   The K/V A fragments are re-read from shared memory per k chunk (keeping them in
 *   registers cost occupancy). Without seg_start, a query tile wholly past the block's keys
 *   and inside S needs no mask: that test is uniform over the block and skips the per-element
 *   range checks, which otherwise cost about a third of the backward time (measured).
 * Fused dQ: each warp also stores its dS^T rows (bf16) in shared memory; after a barrier,
 *   warp w forms a [16, D / CG] piece of the tile's dQ = dS K (A = dS by ldmatrix.trans of
 *   dS^T, B = K by ldmatrix.trans) and adds it to dq_acc with float2 atomics. Measured on
 *   an H200 (bench of test_cuda_attention): 6% faster than the two deterministic kernels
 *   on the 1.5B shape (GQA, 4 heads per group); on GPT-2's (MHA) and with d 128 it is no
 *   faster: the atomics' throughput at the L2 eats what the recomputation saves. 128-key
 *   blocks (8 warps, half the atomics) and float4 atomics (lanes pairing their halves) were
 *   both slower.
 * dq kernel: block = (16 NW queries, head, batch), warp w owns 16 queries; Q and dO live in
 *   registers as A fragments; K/V tiles of BK keys stream through the same kind of
 *   pipeline from the block's smallest seg_start to the diagonal:
 *     S = Q K^T, dP = dO V^T, dS = P (dP z - D) scale, dQ += dS K (K by ldmatrix.trans).
 * Shared rows are padded to d + 8 elements (conflict-free ldmatrix, see the forward).
 * Grid order: the key tiles with the most queries first (dkdv), the query tiles with the
 * most keys first (dq).
 *
 * Pipelines: NS stages, one commit group per iteration (empty past the end), the refilled
 * stage always the one read in the previous iteration (free after its closing barrier).
 *
 * Configurations (ptxas, sm_90a; picked by timing on an H200):
 *   d 64:  dkdv 4 warps (64 keys) x BQ 64, 2 stages: 245 registers, no spills, 57 KB shared,
 *          2 blocks per SM; dq 4 warps (64 queries) x BK 64, 2 stages: 246 registers, no
 *          spills, 55 KB, 2 blocks per SM.
 *   d 128: dkdv 4 warps (64 keys) x BQ 32: 255 registers, no spills, 71 KB; dq 4 warps
 *          (64 queries) x BK 32: 248 registers, no spills, 70 KB.
 *   fused: the dkdv configurations above plus the dS^T tile (9 KB at d 64, 5 KB at d 128);
 *          253 and 252 registers, no spills.
 * (8-warp blocks, 32-query tiles with K/V in registers, 3 stages: same or slower.) */
#include <limits.h>

#include "backend/cuda/attention_internal.h"

/* ---------------------------------------------------------------- dK, dV */

template <int D, int NW, int BQ, int NS>
struct dkdv_cfg {
    static constexpr int BKV = 16 * NW;
    static constexpr int NT = 32 * NW;
    static constexpr int LDS = D + 8;
    static constexpr int KC = D / 16;
    static constexpr int QN = BQ / 8; /* n tiles of S^T */
    static constexpr int DN = D / 8;  /* n tiles of dK, dV */
    static constexpr size_t TILES = (size_t)(2 * BKV + 2 * NS * BQ) * LDS * sizeof(__nv_bfloat16);
    static constexpr size_t SMEM = TILES + (size_t)NS * 4 * BQ * sizeof(float);
    /* fused dQ: the item's dS^T tile, and the warps' share of dQ = dS K ([BQ, D]): RT row
     * tiles of 16 queries by CG column groups of DW dims */
    static constexpr int LDQ = BQ + 8;
    static constexpr size_t SMEM_DQ = SMEM + (size_t)BKV * LDQ * sizeof(__nv_bfloat16);
    static constexpr int RT = BQ / 16, CG = NW / RT, DW = D / CG;
    static_assert(BQ % 16 == 0 && BQ <= NT && NS >= 2 && NS <= 8, "BQ, NS");
    static_assert(NW % RT == 0 && DW % 16 == 0, "dQ warp tiling");
};

template <int D, int NW, int BQ, int NS, int MINB, bool DQ>
__global__ void __launch_bounds__(NW * 32, MINB) attn_mma_dkdv_kernel(attn_geom g, __nv_bfloat16 *dqkv,
                                                                const __nv_bfloat16 *dout,
                                                                const __nv_bfloat16 *qkv, const float *lse,
                                                                const float *D_, float *dq_acc) {
    using C = dkdv_cfg<D, NW, BQ, NS>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)smem_raw; /* [BKV][LDS] */
    __nv_bfloat16 *Vs = Ks + C::BKV * C::LDS;      /* [BKV][LDS] */
    __nv_bfloat16 *Qs = Vs + C::BKV * C::LDS;      /* [NS][BQ][LDS] */
    __nv_bfloat16 *dOs = Qs + NS * BQ * C::LDS;    /* [NS][BQ][LDS] */
    float *lse2_s = (float *)(smem_raw + C::TILES); /* [NS][BQ]: lse log2e */
    float *D_s = lse2_s + NS * BQ;                  /* [NS][BQ] */
    int *lo_s = (int *)(D_s + NS * BQ);             /* [NS][BQ]: first key of each query */
    int *hi_s = lo_s + NS * BQ;                     /* [NS][BQ]: last key (i), -1 past S */
    __nv_bfloat16 *dS_s = (__nv_bfloat16 *)(smem_raw + C::SMEM); /* DQ: [BKV][LDQ], dS^T of the item */

    const int64_t ngb = (int64_t)g.G * g.B;
    const int kt = (int)(blockIdx.x / ngb); /* key tile 0 has the most queries: first */
    const int gb = (int)(blockIdx.x % ngb), grp = gb % g.G, b = gb / g.G;
    const int j0 = kt * C::BKV, j_last = min(j0 + C::BKV, g.S) - 1;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int kw = warp * 16; /* the warp's first key in the block */
    const int nq = attn_cdiv(g.S, BQ), qt0 = j0 / BQ, nqt = nq - qt0, nitems = g.hpg * nqt;
    const int64_t obs = (int64_t)g.B * g.H * D; /* out/dout stride between positions */

    attn_load_tile<C::BKV, D, C::NT>(Ks, qkv, attn_k_off(g, 0, b, grp), g.row_stride, j0, g.S);
    attn_load_tile<C::BKV, D, C::NT>(Vs, qkv, attn_v_off(g, 0, b, grp), g.row_stride, j0, g.S);

    /* item -> (head, query tile): its Q/dO tiles by cp.async and its side data by plain
     * stores into stage `stage`; returns whether a query row this thread loaded sees a key
     * of the block (the block votes on it before computing the item). */
    auto load_item = [&](int item, int stage) -> bool {
        const int h = grp * g.hpg + item / nqt, i0 = (qt0 + item % nqt) * BQ;
        attn_load_tile<BQ, D, C::NT>(Qs + stage * BQ * C::LDS, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S);
        attn_load_tile<BQ, D, C::NT>(dOs + stage * BQ * C::LDS, dout, attn_o_off(g, 0, b, h), obs, i0, g.S);
        bool any = false;
        if (tid < BQ) {
            const int i = i0 + tid;
            const bool valid = i < g.S;
            const int lo = valid ? attn_seg_lo(g, b, i) : INT_MAX;
            lo_s[stage * BQ + tid] = lo;
            hi_s[stage * BQ + tid] = valid ? i : -1;
            lse2_s[stage * BQ + tid] = valid ? lse[attn_row_off(g, i, b, h)] * ATTN_LOG2E : 0.0f;
            D_s[stage * BQ + tid] = valid ? D_[attn_row_off(g, i, b, h)] : 0.0f;
            any = valid && i >= j0 && lo <= j_last;
        }
        return any;
    };

    /* prologue: items 0 .. NS-2 into stages 0 .. NS-2, one commit group each (group 0 also
     * holds K and V; nitems >= 1, the diagonal tile). Bit s of predmask: the item now in
     * stage s has a query row (loaded by this thread) that sees a key of the block. */
    unsigned predmask = 0;
#pragma unroll
    for (int st = 0; st < NS - 1; st++) {
        if (st < nitems && load_item(st, st)) predmask |= 1u << st;
        attn_cp_async_commit();
    }

    float dk[C::DN][4], dv[C::DN][4];
#pragma unroll
    for (int n = 0; n < C::DN; n++) dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;

    for (int it = 0; it < nitems; it++) {
        const int stage = it % NS;
        if (it + NS - 1 < nitems) { /* into the stage read in iteration it - 1 (barrier-protected) */
            const int ns = (it + NS - 1) % NS;
            predmask &= ~(1u << ns);
            if (load_item(it + NS - 1, ns)) predmask |= 1u << ns;
        }
        attn_cp_async_commit();
        attn_cp_async_wait<NS - 1>();
        /* also the barrier after which item `it` (cp.async and plain stores) is visible */
        const int active = __syncthreads_or((int)((predmask >> stage) & 1u));
        if (active) {
            const int h = grp * g.hpg + it / nqt, i0 = (qt0 + it % nqt) * BQ;
            const __nv_bfloat16 *Qb = Qs + stage * BQ * C::LDS, *dOb = dOs + stage * BQ * C::LDS;
            const float *lse2 = lse2_s + stage * BQ, *Dv = D_s + stage * BQ;
            const int *lo = lo_s + stage * BQ, *hi = hi_s + stage * BQ;

            /* S^T = K Q^T, dP^T = V dO^T: [16 keys, BQ queries] per warp */
            float st[C::QN][4], dpt[C::QN][4];
#pragma unroll
            for (int n = 0; n < C::QN; n++)
                st[n][0] = st[n][1] = st[n][2] = st[n][3] = dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < C::KC; kc++) {
                uint32_t ka[4], va[4]; /* A fragments of the warp's K and V rows */
                attn_ldsm_x4(ka, Ks + (kw + a_row) * C::LDS + kc * 16 + a_col);
                attn_ldsm_x4(va, Vs + (kw + a_row) * C::LDS + kc * 16 + a_col);
#pragma unroll
                for (int np = 0; np < C::QN / 2; np++) {
                    uint32_t qb[4], ob[4];
                    attn_ldsm_x4(qb, Qb + (np * 16 + b_row) * C::LDS + kc * 16 + b_col);
                    attn_ldsm_x4(ob, dOb + (np * 16 + b_row) * C::LDS + kc * 16 + b_col);
                    attn_mma(st[2 * np], ka, qb[0], qb[1]);
                    attn_mma(st[2 * np + 1], ka, qb[2], qb[3]);
                    attn_mma(dpt[2 * np], va, ob[0], ob[1]);
                    attn_mma(dpt[2 * np + 1], va, ob[2], ob[3]);
                }
            }

            /* element (n, e): key kw + gq + 8 (e / 2), query column 8 n + 2 tq + e % 2. Without
             * seg_start, a query tile wholly past the block's keys and inside S sees every key:
             * no mask (the common case); the branches are uniform over the block. */
            const bool need_mask = g.seg != nullptr || i0 < j0 + C::BKV || i0 + BQ > g.S;
            if (g.dropout > 0.0f) {
#pragma unroll
                for (int n = 0; n < C::QN; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qc = n * 8 + 2 * tq + (e & 1), j = j0 + kw + gq + 8 * (e >> 1);
                        const bool vis = j >= lo[qc] && j <= hi[qc];
                        const float p = vis ? attn_ex2(st[n][e] * g.scale_log2 - lse2[qc]) : 0.0f;
                        const float z = vis ? attn_drop_factor(g, attn_drop_index(g, b, h, i0 + qc, j)) : 0.0f;
                        st[n][e] = p * z;
                        dpt[n][e] = p * (dpt[n][e] * z - Dv[qc]) * g.scale;
                    }
            } else if (need_mask) {
#pragma unroll
                for (int n = 0; n < C::QN; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qc = n * 8 + 2 * tq + (e & 1), j = j0 + kw + gq + 8 * (e >> 1);
                        const bool vis = j >= lo[qc] && j <= hi[qc];
                        const float p = vis ? attn_ex2(st[n][e] * g.scale_log2 - lse2[qc]) : 0.0f;
                        st[n][e] = p;
                        dpt[n][e] = p * (dpt[n][e] - Dv[qc]) * g.scale;
                    }
            } else {
#pragma unroll
                for (int n = 0; n < C::QN; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qc = n * 8 + 2 * tq + (e & 1);
                        const float p = attn_ex2(st[n][e] * g.scale_log2 - lse2[qc]);
                        st[n][e] = p;
                        dpt[n][e] = p * (dpt[n][e] - Dv[qc]) * g.scale;
                    }
            }

            if (DQ) { /* dS^T (bf16, as the mma operands below) for the block's dQ product */
#pragma unroll
                for (int n = 0; n < C::QN; n++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++)
                        *reinterpret_cast<uint32_t *>(dS_s + (kw + gq + 8 * hf) * C::LDQ + n * 8 + 2 * tq) =
                            attn_pack_bf16(dpt[n][2 * hf], dpt[n][2 * hf + 1]);
            }

            /* dV += Pd^T dO, dK += dS^T Q */
#pragma unroll
            for (int kc = 0; kc < BQ / 16; kc++) {
                uint32_t pa[4], sa[4];
                pa[0] = attn_pack_bf16(st[2 * kc][0], st[2 * kc][1]);
                pa[1] = attn_pack_bf16(st[2 * kc][2], st[2 * kc][3]);
                pa[2] = attn_pack_bf16(st[2 * kc + 1][0], st[2 * kc + 1][1]);
                pa[3] = attn_pack_bf16(st[2 * kc + 1][2], st[2 * kc + 1][3]);
                sa[0] = attn_pack_bf16(dpt[2 * kc][0], dpt[2 * kc][1]);
                sa[1] = attn_pack_bf16(dpt[2 * kc][2], dpt[2 * kc][3]);
                sa[2] = attn_pack_bf16(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]);
                sa[3] = attn_pack_bf16(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3]);
#pragma unroll
                for (int dn = 0; dn < D / 16; dn++) {
                    uint32_t ob[4], qb[4];
                    attn_ldsm_x4_trans(ob, dOb + (kc * 16 + a_row) * C::LDS + dn * 16 + a_col);
                    attn_ldsm_x4_trans(qb, Qb + (kc * 16 + a_row) * C::LDS + dn * 16 + a_col);
                    attn_mma(dv[2 * dn], pa, ob[0], ob[1]);
                    attn_mma(dv[2 * dn + 1], pa, ob[2], ob[3]);
                    attn_mma(dk[2 * dn], sa, qb[0], qb[1]);
                    attn_mma(dk[2 * dn + 1], sa, qb[2], qb[3]);
                }
            }
            if (DQ) {
                __syncthreads(); /* every warp's dS^T rows are in dS_s */
                /* dQ[wq .. wq+15, c0 .. c0+DW) = dS K over the block's keys: A = dS by
                 * ldmatrix.trans of dS^T, B = K by ldmatrix.trans; then added to dq_acc */
                const int wq = (warp % C::RT) * 16, c0 = (warp / C::RT) * C::DW;
                float acc[C::DW / 8][4];
#pragma unroll
                for (int n = 0; n < C::DW / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
                for (int kc = 0; kc < C::BKV / 16; kc++) {
                    uint32_t da[4];
                    attn_ldsm_x4_trans(da, dS_s + (kc * 16 + b_row) * C::LDQ + wq + b_col);
#pragma unroll
                    for (int dn = 0; dn < C::DW / 16; dn++) {
                        uint32_t kb[4];
                        attn_ldsm_x4_trans(kb, Ks + (kc * 16 + a_row) * C::LDS + c0 + dn * 16 + a_col);
                        attn_mma(acc[2 * dn], da, kb[0], kb[1]);
                        attn_mma(acc[2 * dn + 1], da, kb[2], kb[3]);
                    }
                }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int i = i0 + wq + gq + 8 * hf;
                    if (i >= g.S) continue;
                    float *row = dq_acc + attn_row_off(g, i, b, h) * D + c0 + 2 * tq;
#pragma unroll
                    for (int n = 0; n < C::DW / 8; n++)
                        atomicAdd(reinterpret_cast<float2 *>(row + n * 8), make_float2(acc[n][2 * hf], acc[n][2 * hf + 1]));
                }
            }
        }
        __syncthreads(); /* every warp is done with `stage` (and dS_s) before a later iteration refills it */
    }
    attn_cp_async_wait<0>(); /* nothing may be in flight at exit (the last group is empty) */

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = j0 + kw + gq + 8 * hf;
        if (j >= g.S) continue;
        __nv_bfloat16 *kd = dqkv + attn_k_off(g, j, b, grp) + 2 * tq, *vd = dqkv + attn_v_off(g, j, b, grp) + 2 * tq;
#pragma unroll
        for (int n = 0; n < C::DN; n++) {
            *reinterpret_cast<uint32_t *>(kd + n * 8) = attn_pack_bf16(dk[n][2 * hf], dk[n][2 * hf + 1]);
            *reinterpret_cast<uint32_t *>(vd + n * 8) = attn_pack_bf16(dv[n][2 * hf], dv[n][2 * hf + 1]);
        }
    }
}

/* ---------------------------------------------------------------- dQ */

template <int D, int NW, int BK, int NS>
struct dq_cfg {
    static constexpr int BQ = 16 * NW;
    static constexpr int NT = 32 * NW;
    static constexpr int LDS = D + 8;
    static constexpr int KC = D / 16;
    static constexpr int SN = BK / 8;
    static constexpr int DN = D / 8;
    static constexpr size_t SMEM = (size_t)(2 * BQ + 2 * NS * BK) * LDS * sizeof(__nv_bfloat16) + 16 * sizeof(int);
    static_assert(NS >= 2 && NW <= 16, "NS, NW");
};

template <int D, int NW, int BK, int NS, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) attn_mma_dq_kernel(attn_geom g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                                                              const __nv_bfloat16 *qkv, const float *lse,
                                                              const float *D_) {
    using C = dq_cfg<D, NW, BK, NS>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_raw; /* [BQ][LDS] */
    __nv_bfloat16 *dOs = Qs + C::BQ * C::LDS;      /* [BQ][LDS] */
    __nv_bfloat16 *Ks = dOs + C::BQ * C::LDS;      /* [NS][BK][LDS] */
    __nv_bfloat16 *Vs = Ks + NS * BK * C::LDS;     /* [NS][BK][LDS] */
    int *red = (int *)(Vs + NS * BK * C::LDS);     /* [NW] */

    const int nq = attn_cdiv(g.S, C::BQ);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb);
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * C::BQ, i_last = min(i0 + C::BQ, g.S) - 1;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int wrow0 = warp * 16;
    const int64_t obs = (int64_t)g.B * g.H * D;

    /* this thread's two rows (hf): first key, last key, lse log2e, D */
    int lo_t[2], hi_t[2];
    float lse2_t[2], D_t[2];
    int my_min = INT_MAX;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i0 + wrow0 + gq + 8 * hf;
        const bool valid = i < g.S;
        lo_t[hf] = valid ? attn_seg_lo(g, b, i) : INT_MAX;
        hi_t[hf] = valid ? i : -1;
        lse2_t[hf] = valid ? lse[attn_row_off(g, i, b, h)] * ATTN_LOG2E : 0.0f;
        D_t[hf] = valid ? D_[attn_row_off(g, i, b, h)] : 0.0f;
        my_min = min(my_min, lo_t[hf]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) my_min = min(my_min, __shfl_xor_sync(0xffffffffu, my_min, off));
    if (lane == 0) red[warp] = my_min;

    const int64_t kbase = attn_k_off(g, 0, b, grp), vbase = kbase + D;
    attn_load_tile<C::BQ, D, C::NT>(Qs, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S);
    attn_load_tile<C::BQ, D, C::NT>(dOs, dout, attn_o_off(g, 0, b, h), obs, i0, g.S);
    __syncthreads(); /* red[] complete */
    int klo = INT_MAX;
#pragma unroll
    for (int w = 0; w < NW; w++) klo = min(klo, red[w]);
    const int kt0 = klo / BK, kt1 = i_last / BK, nkt = kt1 - kt0 + 1;
    /* prologue: tiles 0 .. NS-2 into stages 0 .. NS-2 (group 0 also holds Q and dO) */
#pragma unroll
    for (int st = 0; st < NS - 1; st++) {
        if (st < nkt) {
            attn_load_tile<BK, D, C::NT>(Ks + st * BK * C::LDS, qkv, kbase, g.row_stride, (kt0 + st) * BK, g.S);
            attn_load_tile<BK, D, C::NT>(Vs + st * BK * C::LDS, qkv, vbase, g.row_stride, (kt0 + st) * BK, g.S);
        }
        attn_cp_async_commit();
    }

    uint32_t qf[C::KC][4], of[C::KC][4];
    float dq[C::DN][4];
#pragma unroll
    for (int n = 0; n < C::DN; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;

    for (int it = 0; it < nkt; it++) {
        const int kt = kt0 + it, buf = it % NS;
        if (it + NS - 1 < nkt) { /* into the stage read in iteration it - 1 (barrier-protected) */
            const int nb = (it + NS - 1) % NS;
            attn_load_tile<BK, D, C::NT>(Ks + nb * BK * C::LDS, qkv, kbase, g.row_stride, (kt + NS - 1) * BK, g.S);
            attn_load_tile<BK, D, C::NT>(Vs + nb * BK * C::LDS, qkv, vbase, g.row_stride, (kt + NS - 1) * BK, g.S);
        }
        attn_cp_async_commit();
        attn_cp_async_wait<NS - 1>();
        __syncthreads();
        if (it == 0) {
#pragma unroll
            for (int kc = 0; kc < C::KC; kc++) {
                attn_ldsm_x4(qf[kc], Qs + (wrow0 + a_row) * C::LDS + kc * 16 + a_col);
                attn_ldsm_x4(of[kc], dOs + (wrow0 + a_row) * C::LDS + kc * 16 + a_col);
            }
        }
        const __nv_bfloat16 *Kb = Ks + buf * BK * C::LDS, *Vb = Vs + buf * BK * C::LDS;

        float s[C::SN][4], dp[C::SN][4];
#pragma unroll
        for (int n = 0; n < C::SN; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < C::KC; kc++)
#pragma unroll
            for (int np = 0; np < C::SN / 2; np++) {
                uint32_t kb[4], vb[4];
                attn_ldsm_x4(kb, Kb + (np * 16 + b_row) * C::LDS + kc * 16 + b_col);
                attn_ldsm_x4(vb, Vb + (np * 16 + b_row) * C::LDS + kc * 16 + b_col);
                attn_mma(s[2 * np], qf[kc], kb[0], kb[1]);
                attn_mma(s[2 * np + 1], qf[kc], kb[2], kb[3]);
                attn_mma(dp[2 * np], of[kc], vb[0], vb[1]);
                attn_mma(dp[2 * np + 1], of[kc], vb[2], vb[3]);
            }

        const int j0 = kt * BK;
        /* this thread's rows see every key of the tile: no mask (thread-local branch) */
        const bool need_mask = j0 + BK - 1 > min(hi_t[0], hi_t[1]) || j0 < max(lo_t[0], lo_t[1]);
        if (g.dropout > 0.0f) {
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int i = i0 + wrow0 + gq + 8 * hf;
#pragma unroll
                for (int n = 0; n < C::SN; n++) {
                    const int j = j0 + n * 8 + 2 * tq;
                    float z[2];
                    attn_drop_factor2(g, attn_drop_index(g, b, h, i, j), z[0], z[1]);
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const bool vis = j + e >= lo_t[hf] && j + e <= hi_t[hf];
                        const float p = vis ? attn_ex2(s[n][2 * hf + e] * g.scale_log2 - lse2_t[hf]) : 0.0f;
                        dp[n][2 * hf + e] = p * (dp[n][2 * hf + e] * z[e] - D_t[hf]) * g.scale;
                    }
                }
            }
        } else if (need_mask) {
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int n = 0; n < C::SN; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int j = j0 + n * 8 + 2 * tq + e;
                        const bool vis = j >= lo_t[hf] && j <= hi_t[hf];
                        const float p = vis ? attn_ex2(s[n][2 * hf + e] * g.scale_log2 - lse2_t[hf]) : 0.0f;
                        dp[n][2 * hf + e] = p * (dp[n][2 * hf + e] - D_t[hf]) * g.scale;
                    }
        } else {
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int n = 0; n < C::SN; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float p = attn_ex2(s[n][2 * hf + e] * g.scale_log2 - lse2_t[hf]);
                        dp[n][2 * hf + e] = p * (dp[n][2 * hf + e] - D_t[hf]) * g.scale;
                    }
        }

        /* dQ += dS K */
#pragma unroll
        for (int kc = 0; kc < BK / 16; kc++) {
            uint32_t sa[4];
            sa[0] = attn_pack_bf16(dp[2 * kc][0], dp[2 * kc][1]);
            sa[1] = attn_pack_bf16(dp[2 * kc][2], dp[2 * kc][3]);
            sa[2] = attn_pack_bf16(dp[2 * kc + 1][0], dp[2 * kc + 1][1]);
            sa[3] = attn_pack_bf16(dp[2 * kc + 1][2], dp[2 * kc + 1][3]);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t kb[4];
                attn_ldsm_x4_trans(kb, Kb + (kc * 16 + a_row) * C::LDS + dn * 16 + a_col);
                attn_mma(dq[2 * dn], sa, kb[0], kb[1]);
                attn_mma(dq[2 * dn + 1], sa, kb[2], kb[3]);
            }
        }
        __syncthreads(); /* every warp is done with `buf` before a later iteration refills it */
    }
    attn_cp_async_wait<0>();

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i0 + wrow0 + gq + 8 * hf;
        if (i >= g.S) continue;
        __nv_bfloat16 *dst = dqkv + attn_q_off(g, i, b, h) + 2 * tq;
#pragma unroll
        for (int n = 0; n < C::DN; n++)
            *reinterpret_cast<uint32_t *>(dst + n * 8) = attn_pack_bf16(dq[n][2 * hf], dq[n][2 * hf + 1]);
    }
}

/* ---------------------------------------------------------------- launchers */

/* 8 F32 dQ values as 8 BF16 (16 bytes) */
__device__ __forceinline__ uint4 dq_pack8(float4 lo, float4 hi) {
    uint4 v;
    v.x = attn_pack_bf16(lo.x, lo.y), v.y = attn_pack_bf16(lo.z, lo.w);
    v.z = attn_pack_bf16(hi.x, hi.y), v.w = attn_pack_bf16(hi.z, hi.w);
    return v;
}

/* dQ (F32, [B, H, S, D], summed by the fused kernel) into the q slots of dqkv, 8 dims per
 * thread. */
template <int D>
__global__ void dq_store_kernel(attn_geom g, __nv_bfloat16 *dqkv, const float *dq_acc) {
    constexpr int C8 = D / 8;
    const int64_t total = (int64_t)g.B * g.H * g.S * C8;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(e % C8);
        const int64_t row = e / C8; /* (b H + h) S + i */
        const int i = (int)(row % g.S), h = (int)((row / g.S) % g.H), b = (int)(row / ((int64_t)g.S * g.H));
        const float4 lo = *reinterpret_cast<const float4 *>(dq_acc + row * D + c * 8);
        const float4 hi = *reinterpret_cast<const float4 *>(dq_acc + row * D + c * 8 + 4);
        *reinterpret_cast<uint4 *>(dqkv + attn_q_off(g, i, b, h) + c * 8) = dq_pack8(lo, hi);
    }
}

/* The same store with rope's backward on the way (head_dim 64, all of it rotated, the
 * position of row i being i): thread = (row, c), c < 4, dims 8 c .. + 7 (x1) and 32 + 8 c
 * .. + 7 (x2), with (cos, sin) = table[i][8 c ..]: x1 cos + x2 sin and x2 cos - x1 sin, the
 * rope kernel's inverse, on the F32 values before their one rounding. */
__global__ void dq_store_rope_kernel(attn_geom g, __nv_bfloat16 *dqkv, const float *dq_acc, const float *cos_tab,
                                     const float *sin_tab) {
    constexpr int D = 64, HALF = 32;
    const uint32_t total = (uint32_t)g.B * g.H * g.S * 4;
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int c = (int)(e % 4);
        const uint32_t row = e / 4; /* (b H + h) S + i */
        const int i = (int)(row % g.S), h = (int)((row / g.S) % g.H), b = (int)(row / ((uint32_t)g.S * g.H));
        const float *src = dq_acc + (int64_t)row * D + c * 8;
        float x1[8], x2[8], cv[8], sv[8];
        *reinterpret_cast<float4 *>(x1) = *reinterpret_cast<const float4 *>(src);
        *reinterpret_cast<float4 *>(x1 + 4) = *reinterpret_cast<const float4 *>(src + 4);
        *reinterpret_cast<float4 *>(x2) = *reinterpret_cast<const float4 *>(src + HALF);
        *reinterpret_cast<float4 *>(x2 + 4) = *reinterpret_cast<const float4 *>(src + HALF + 4);
        const float *ct = cos_tab + (int64_t)i * HALF + c * 8, *sn = sin_tab + (int64_t)i * HALF + c * 8;
        *reinterpret_cast<float4 *>(cv) = *reinterpret_cast<const float4 *>(ct);
        *reinterpret_cast<float4 *>(cv + 4) = *reinterpret_cast<const float4 *>(ct + 4);
        *reinterpret_cast<float4 *>(sv) = *reinterpret_cast<const float4 *>(sn);
        *reinterpret_cast<float4 *>(sv + 4) = *reinterpret_cast<const float4 *>(sn + 4);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float a = x1[k], bb = x2[k], sk = -sv[k];
            x1[k] = a * cv[k] - bb * sk;
            x2[k] = bb * cv[k] + a * sk;
        }
        __nv_bfloat16 *dst = dqkv + attn_q_off(g, i, b, h) + c * 8;
        *reinterpret_cast<uint4 *>(dst) = dq_pack8(*reinterpret_cast<float4 *>(x1), *reinterpret_cast<float4 *>(x1 + 4));
        *reinterpret_cast<uint4 *>(dst + HALF) =
            dq_pack8(*reinterpret_cast<float4 *>(x2), *reinterpret_cast<float4 *>(x2 + 4));
    }
}

/* The same store, also summing dQ's columns (the F32 values, before rounding) over each
 * 128-query tile of a (batch, head): block = (tile, batch, head), 256 threads, thread t
 * columns 8 (t % 8) .. + 7 of rows t / 8, t / 8 + 32, ... of the tile; the 32 row lanes'
 * sums combined in a fixed order (shuffles, then the warps in order), into
 * parts[tile B + b] at the head's q columns (see attn_colsum_parts). */
__global__ void __launch_bounds__(256) dq_store_sum_kernel(attn_geom g, __nv_bfloat16 *dqkv, const float *dq_acc,
                                                           float *parts) {
    constexpr int D = 64;
    __shared__ float red[8][D];
    const int nkt = attn_cdiv(g.S, ATTN_COLSUM_ROWS);
    const int kt = (int)(blockIdx.x % nkt), bh = (int)(blockIdx.x / nkt), b = bh / g.H, h = bh % g.H;
    const int c = threadIdx.x % 8, r0 = threadIdx.x / 8, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i1 = min(g.S, (kt + 1) * ATTN_COLSUM_ROWS);
    float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = kt * ATTN_COLSUM_ROWS + r0; i < i1; i += 32) {
        const float *src = dq_acc + (((int64_t)b * g.H + h) * g.S + i) * D + c * 8;
        const float4 lo = *reinterpret_cast<const float4 *>(src), hi = *reinterpret_cast<const float4 *>(src + 4);
        *reinterpret_cast<uint4 *>(dqkv + attn_q_off(g, i, b, h) + c * 8) = dq_pack8(lo, hi);
        sum[0] += lo.x, sum[1] += lo.y, sum[2] += lo.z, sum[3] += lo.w;
        sum[4] += hi.x, sum[5] += hi.y, sum[6] += hi.z, sum[7] += hi.w;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) { /* the warp's 4 row lanes (lane / 8) */
        sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], 8);
        sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], 16);
    }
    if (lane < 8)
#pragma unroll
        for (int k = 0; k < 8; k++) red[warp][c * 8 + k] = sum[k];
    __syncthreads();
    if (threadIdx.x < D) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) t += red[w][threadIdx.x];
        parts[((int64_t)kt * g.B + b) * g.ts + attn_q_off(g, 0, 0, h) + threadIdx.x] = t;
    }
}

/* DQ: the fused kernel (dq_acc zeroed by the caller, dQ stored into dqkv after). */
template <int D, int NW, int BQ, int NS, int MINB, bool DQ>
static void dkdv_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                        const __nv_bfloat16 *qkv, const float *lse, const float *Drow, float *dq_acc) {
    using C = dkdv_cfg<D, NW, BQ, NS>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BKV) * g.G * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    const size_t smem = DQ ? C::SMEM_DQ : C::SMEM;
    auto kernel = attn_mma_dkdv_kernel<D, NW, BQ, NS, MINB, DQ>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<(unsigned)blocks, C::NT, smem, st>>>(g, dqkv, dout, qkv, lse, Drow, dq_acc);
    ATTN_CHECK_LAUNCH("attn_mma_dkdv_kernel");
    if (DQ) attn_launch_dq_store(st, g, dqkv, dq_acc, nullptr, nullptr);
}

void attn_launch_dq_store(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const float *dq_acc,
                          float *parts, const attn_rope *rope) {
    if (rope) {
        MC_ASSERT(g.d == 64 && !parts, "cuda attention: the rotating dQ store is for head_dim 64, without column sums");
        const int64_t n = (int64_t)g.B * g.H * g.S * 4;
        MC_ASSERT(n + (int64_t)65535 * 256 < ((int64_t)1 << 32), "cuda attention: %lld dQ groups", (long long)n);
        const int64_t want = (n + 255) / 256, cap = 65535;
        dq_store_rope_kernel<<<(unsigned)(want < cap ? want : cap), 256, 0, st>>>(g, dqkv, dq_acc, rope->cos, rope->sin);
        ATTN_CHECK_LAUNCH("dq_store_rope_kernel");
        return;
    }
    if (parts) {
        MC_ASSERT(g.d == 64, "cuda attention: no summing dQ store for head_dim %d", g.d);
        const int64_t blocks = (int64_t)attn_cdiv(g.S, ATTN_COLSUM_ROWS) * g.B * g.H;
        MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
        dq_store_sum_kernel<<<(unsigned)blocks, 256, 0, st>>>(g, dqkv, dq_acc, parts);
        ATTN_CHECK_LAUNCH("dq_store_sum_kernel");
        return;
    }
    const int64_t n8 = (int64_t)g.B * g.H * g.S * (g.d / 8);
    const int threads = 256;
    const int64_t want = (n8 + threads - 1) / threads, cap = (int64_t)65535 * 16;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    if (g.d == 64)
        dq_store_kernel<64><<<blocks, threads, 0, st>>>(g, dqkv, dq_acc);
    else if (g.d == 128)
        dq_store_kernel<128><<<blocks, threads, 0, st>>>(g, dqkv, dq_acc);
    else
        MC_ASSERT(0, "cuda attention: no dQ store for head_dim %d", g.d);
    ATTN_CHECK_LAUNCH("dq_store_kernel");
}

template <int D, int NW, int BK, int NS, int MINB>
static void dq_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                      const __nv_bfloat16 *qkv, const float *lse, const float *Drow) {
    using C = dq_cfg<D, NW, BK, NS>;
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BQ) * g.H * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_mma_dq_kernel<D, NW, BK, NS, MINB>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, dqkv, dout, qkv, lse, Drow);
    ATTN_CHECK_LAUNCH("attn_mma_dq_kernel");
}

size_t attn_mma_dq_acc_bytes(const attn_geom &g) { return (size_t)g.B * g.H * g.S * g.d * sizeof(float); }

void attn_mma_bwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *qkv, const float *lse, const float *D, float *dq_acc) {
    if (g.d == 64 && dq_acc) {
        dkdv_launch<64, 4, 64, 2, 2, true>(st, g, dqkv, dout, qkv, lse, D, dq_acc);
    } else if (g.d == 64) {
        dkdv_launch<64, 4, 64, 2, 2, false>(st, g, dqkv, dout, qkv, lse, D, nullptr);
        dq_launch<64, 4, 64, 2, 2>(st, g, dqkv, dout, qkv, lse, D);
    } else if (g.d == 128 && dq_acc) {
        dkdv_launch<128, 4, 32, 2, 1, true>(st, g, dqkv, dout, qkv, lse, D, dq_acc);
    } else if (g.d == 128) {
        dkdv_launch<128, 4, 32, 2, 1, false>(st, g, dqkv, dout, qkv, lse, D, nullptr);
        dq_launch<128, 4, 32, 2, 1>(st, g, dqkv, dout, qkv, lse, D);
    } else {
        MC_ASSERT(0, "cuda attention: no tensor-core backward for head_dim %d", g.d);
    }
}
