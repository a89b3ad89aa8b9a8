/* attention_wgmma_bwd_pipe.cu: the key-side kernel of the causal flash-attention backward
 * on Hopper's warpgroup MMA (wgmma, sm_90a), software-pipelined: BF16 in, F32
 * accumulation, head_dim 64, no dropout and no seg_start. dQ is summed in F32 by the copy
 * engine's bulk adds, whose order varies from run to run; with --deterministic-mode
 * (dq_acc NULL) this kernel forms dK and dV only and dQ has its own pass
 * (attention_wgmma_dq.cu). The other cases keep the mma.sync kernels of
 * attention_bf16_bwd.cu.
 *
 * Block = (128 keys, kv group, batch), two warpgroups; warpgroup w owns keys 64 w .. 64 w +
 * 63, its dK and dV in registers for the whole kernel. The block walks the group's heads in
 * order and, for each, the 64-query tiles from the diagonal to S (a fixed order: dK/dV sum
 * over the query heads deterministically); an item is one (head, query tile). Q and dO
 * tiles (with lse and D) are staged by cp.async, 128B-swizzled (wgmma.h). Per item each
 * warpgroup, transposed so that its keys are the M rows:
 *   S^T = K Q^T, dP^T = V dO^T     wgmma m64n64k16 x 4 each, both operands in shared memory,
 *   P^T = exp2(S^T scale log2e - lse log2e) (the causal mask only on tiles that need it),
 *   dS^T = P^T (dP^T - D) scale,
 *   dV += P^T dO                   A = P^T re-packed in registers, B = dO as an MN-major
 *                                  operand (no transposed copy),
 *   dK += dS^T Q                   A = dS^T stored to shared memory (swizzled), read K-major;
 *                                  B = Q MN-major;
 *   dQ = dS K                      over all the block's keys, after a block barrier: A = the
 *                                  warpgroups' dS^T tiles read MN-major, B = K MN-major;
 *                                  warpgroup w forms columns 32 w .. 32 w + 31 of it (a
 *                                  descriptor starting inside the swizzled rows) into a
 *                                  shared F32 tile, which one thread adds into dq_acc with
 *                                  one bulk reduction (cp.reduce.async.bulk .add.f32: the
 *                                  tile's 64 rows are contiguous there) while the block
 *                                  goes on with the next items.
 * Summing dQ is what this backward spends most on beyond its matrix products: one bulk add
 * of the whole tile beat per-thread float2 atomics (with 64- or 128-key blocks) and bulk adds
 * of single rows (bench/RESULTS.md has the timings). dS^T goes through shared memory rather
 * than registers for dK as well: that kept the kernel near 200 registers instead of 254.
 *
 * Why pipelined: a serial version waited for each product before the next step (S, dP ->
 * wait -> P, dS -> dV, dK -> barrier -> dQ -> wait -> stage dQ -> barrier), the two
 * warpgroups in lockstep, so the tensor cores idled through every elementwise phase, barrier
 * and staging; this one took 7% less time on the Llama shape's backward. Here an item's
 * products are four commit groups,
 *   S(j)  = S^T = K Q^T                  (both operands in shared memory)
 *   P(j)  = dP^T = V dO^T
 *   V(j)  = dV += P^T dO                  (A = P^T packed in registers)
 *   KQ(j) = dK += dS^T Q, and (dq_acc) dQ = dS K over the block's 128 keys,
 * issued so that the tensor cores have a queued group whenever the warps do something
 * else. Loop iteration j (after the barrier of iteration j - 1; V(j - 1) still pending):
 *   0. issue S(j), KQ(j - 1), P(j);  thread 0 bulk-adds dQ(j - 2) (staged in iteration
 *      j - 1) into dq_acc;  cp.async item j + 1's Q, dO, lse, D into the next stage
 *   1. wait<2>: S(j) done;  P^T = exp2(..) in F32 (the MUFU-bound part) while KQ(j - 1)
 *      and P(j) run;  pack P^T as A operands;  issue V(j)
 *   2. wait<1>: KQ(j - 1), P(j) done;  stage dQ(j - 1) in shared memory;  dS^T = P^T
 *      (dP^T - D) scale into this item's dS^T buffer; both while V(j) runs
 *   3. cp.async wait (item j + 1), fence.proxy.async, the item's one __syncthreads
 * and after the loop KQ(last), the last two bulk adds. One block barrier an item (the
 * serial version had two and a warpgroup barrier). KQ(-1), issued in iteration 0, reads a
 * dS^T buffer and a Q stage zeroed in the prologue: it adds exact zeros to dK, and its dQ
 * is staged but never added; so every group is issued unconditionally.
 *
 * ptxas (CUDA 13) constraints this shape follows; each break shows as a "Potential
 * Performance Loss: wgmma.mma_async instructions are serialized" line of ptxas -v, which
 * would undo the pipelining (the build does not show ptxas info: check with -Xptxas -v):
 *   - accumulators read by ordinary code (st, dpt, dqa) must come from groups issued in the
 *     same loop iteration: a partial wait (wait<1>, wait<2>) retiring a group issued
 *     before the back edge, followed by a read of its registers, is serialized. Hence the
 *     loop starts with the issues (KQ(j - 1) belongs to iteration j), and only V(j), whose
 *     dv is not read in the loop and whose pa is rewritten only after the next wait<2>,
 *     stays in flight across the back edge;
 *   - no wgmma under a branch ptxas cannot prove warpgroup-uniform: with an `if (active)`
 *     around each group here (skipping a warpgroup whose keys all follow the tile's
 *     queries, as the serial version did), ptxas injected arrives in the branch and
 *     serialized every wgmma (C7520; the serial version's one branch around a whole
 *     wait-to-wait phase passed). So that warpgroup (warpgroup 1 on each head's diagonal
 *     tile) computes its products too: the causal mask gives it P^T = 0 and dS^T = 0, exact
 *     zeros added to dK, dV and dQ (dQ then always runs over both dS^T tiles). That costs
 *     the tensor-core work of ~1/nqt of the items for one warpgroup (~3% on the Llama
 *     shape, ~6% on GPT-2's);
 *   - the accumulators' zero initial values are made opaque (wg_fence_acc): otherwise they
 *     are copies of one constant register placed where the loop has them in flight.
 *
 * Ordering points (wgmma.h's rules), each the reason for a wait, fence or barrier:
 *   - accumulators: st is read after the wait<2> of step 1 (the groups after S(j) are
 *     KQ(j - 1), P(j)); dpt and dqa after the wait<1> of step 2 (only V(j) is newer); dk, dv
 *     only after the final wait<0>. dk and dv accumulate from several groups in flight:
 *     the in-order accumulator chaining the PTX ISA allows for wgmma of one shape.
 *   - A registers: pa of V(j - 1) is rewritten in step 1 of iteration j, after the wait<2>
 *     that retires V(j - 1) (older than S(j)).
 *   - S(j), P(j) overwrite st, dpt at step 0, after step 2 of iteration j - 1 last read
 *     them (program order; neither is in flight between).
 *   - shared memory written by cp.async or ordinary stores, then read by wgmma: item
 *     j + 1's Q, dO (cp.async wait + fence.proxy.async + barrier of iteration j, then
 *     S(j + 1), P(j + 1)); the dS^T tiles of both warpgroups (stores + fence + the same
 *     barrier, then KQ(j), whose dQ part reads the other warpgroup's tile too); the
 *     prologue's zeros (fence + the prologue barrier).
 *   - rewriting shared memory that wgmma or the bulk copy read:
 *       * Q, dO, lse, D have 3 stages: item j + 1's cp.async (step 0 of iteration j)
 *         overwrites item j - 2's stage, last read by KQ(j - 2) (retired in step 2 of
 *         iteration j - 1 by each warpgroup), V(j - 2) (step 1 of j - 1) and the
 *         elementwise code of iteration j - 2: all before the barrier of iteration j - 1;
 *       * dS^T has 2 buffers by item parity: item j's stores (step 2) overwrite item
 *         j - 2's tiles, read by KQ(j - 2) of both warpgroups, each retired in step 2 of
 *         iteration j - 1, before its barrier;
 *       * dQ staging has 3 buffers: dQ(j - 1) goes into buffer (j - 1) % 3 in step 2 of
 *         iteration j; that buffer's last bulk add (dQ(j - 4), step 0 of iteration j - 2)
 *         was waited for by thread 0 (bulk wait_group.read 1 in step 3 of iteration j - 1:
 *         all but dQ(j - 3)'s add) before the barrier of j - 1. The third buffer lets that
 *         wait leave the add issued in the same iteration in flight. The stagers'
 *         fence.proxy.async and the barrier of iteration j precede thread 0's add of
 *         dQ(j - 1) in step 0 of iteration j + 1.
 *   - the end: KQ(last), the add of dQ(last - 1), wait<0>, stage dQ(last) (its buffer's
 *     last add, dQ(last - 3), was read before the loop's last barrier), fence,
 *     __syncthreads, the add of dQ(last); dK and dV through the K and V tiles (dead after
 *     that barrier: every wgmma is past its wait<0>); and thread 0 waits for the bulk adds
 *     to have read their staging buffers before the block ends (their writes land before
 *     the grid completes, as TMA stores' do).
 *
 * Also:
 *   - lse and D come by cp.async with the tiles (4 bytes a thread), not by loads: in the
 *     serial version their latency held the first two warps (and so warpgroup 0's
 *     products) at every item. Query rows past S get lse 0 and D 0 (zero-filled): their Q
 *     and dO rows are zero-filled too, so S^T = 0, p = 1 (finite), dP^T = 0, dS^T = p (0 -
 *     0) scale = 0 and P^T dO adds 0: nothing reaches dK or dV, and their dQ rows are not
 *     added (the bulk add stops at S).
 *   - dQ staging rotates each thread's four 8-column float2 stores by its row
 *     ((lane / 4) % 4): the staging rows are 256 bytes, so without it the 8 rows of a
 *     store instruction fall on the same 8 banks; with it a half-warp covers all 32.
 *   - SUM (with dq_acc): after its stores the block also sums its dK and dV columns over
 *     its 128 keys into its row of the column-sum partials (attn_colsum_parts), and the dQ
 *     store sums dQ's over the same 128-position tiles, so a QKV bias gradient needs no
 *     pass over dqkv (nor cuBLASLt's BGRADB epilogue on QKV's weight gradient).
 * Configuration (ptxas -v, sm_90a, CUDA 13): 2 warpgroups, 128-key blocks, one block per
 * SM, 162.5 KB of shared memory (K, V; 3 stages of Q, dO, lse, D; 2 dS^T and 3 dQ
 * buffers), 204 registers with dq_acc (208 with SUM too) and 186 without, no spills, no
 * wgmma serialization.

 */
#include <limits.h>

#include "backend/cuda/attention_internal.h"
#include "backend/cuda/cuda_flash.h"
#include "backend/cuda/wgmma.h"

struct wbp_cfg {
    static constexpr int NWG = 2, BN = 64 * NWG, NT = 128 * NWG;
    static constexpr int NSTAGE = 3;                    /* Q, dO, lse, D stages */
    static constexpr int NDQ = 3;                       /* dQ staging buffers */
    static constexpr size_t TILE = 64 * 128;            /* one swizzled [64][64] BF16 tile */
    static constexpr size_t DQ_TILE = 64 * 64;          /* floats: a query tile's dQ, F32 */
    static constexpr size_t SMEM = 1024 + 2 * (size_t)BN * 128 /* K, V */ + 2 * NSTAGE * TILE /* Q, dO */ +
                                   2 * NWG * TILE /* dS^T, 2 buffers */ + 2 * NSTAGE * 64 * sizeof(float) /* lse, D */ +
                                   NDQ * DQ_TILE * sizeof(float) /* dQ staging */;
};

template <bool DQ, bool SUM>
__global__ void __launch_bounds__(wbp_cfg::NT, 1) attn_wg_bwd_pipe_kernel(attn_geom g, __nv_bfloat16 *dqkv,
                                                                         const __nv_bfloat16 *dout,
                                                                         const __nv_bfloat16 *qkv, const float *lse,
                                                                         const float *D_, float *dq_acc, float *parts) {
    using C = wbp_cfg;
    constexpr int NWG = C::NWG, NT = C::NT, NSTAGE = C::NSTAGE;
    constexpr int DQN = 64 / NWG, DQR = DQN / 2; /* dQ columns and accumulator registers a warpgroup */
    static_assert(NWG == 2, "the dQ column split is for two warpgroups");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Ks = wg_smem_align1024(smem_raw); /* [BN] rows */
    unsigned char *Vs = Ks + C::BN * 128;             /* [BN] rows */
    unsigned char *Qs = Vs + C::BN * 128;             /* [NSTAGE][64] rows */
    unsigned char *dOs = Qs + NSTAGE * C::TILE;       /* [NSTAGE][64] rows */
    unsigned char *dSs = dOs + NSTAGE * C::TILE;      /* [2][NWG][64] rows: dS^T by item parity, warpgroup */
    float *lse_s = (float *)(dSs + 2 * NWG * C::TILE); /* [NSTAGE][64] lse (0 past S) */
    float *D_s = lse_s + NSTAGE * 64;                  /* [NSTAGE][64] D (0 past S) */
    float *dQs = D_s + NSTAGE * 64;                    /* [NDQ][64][64] F32: dQ staged for the bulk adds */

    const int64_t ngb = (int64_t)g.G * g.B;
    const int kt = (int)(blockIdx.x / ngb); /* key tile 0 has the most queries: first */
    const int gb = (int)(blockIdx.x % ngb), grp = gb % g.G, b = gb / g.G;
    const int j0 = kt * C::BN;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int jw0 = j0 + 64 * wg;          /* the warpgroup's first key */
    const int krow = 16 * warp + lane / 4; /* this thread's key rows krow, krow + 8 (local) */
    const int cq = 2 * (lane % 4);
    const int nq = attn_cdiv(g.S, 64), qt0 = j0 / 64, nqt = nq - qt0, nitems = g.hpg * nqt;
    const int64_t obs = (int64_t)g.B * g.H * 64; /* out/dout stride between positions */
    unsigned char *Kw = Ks + wg * C::TILE, *Vw = Vs + wg * C::TILE; /* dK, dV go out through them at the end */

    auto item_h = [&](int item) { return grp * g.hpg + item / nqt; };
    auto item_i0 = [&](int item) { return (qt0 + item % nqt) * 64; };

    /* item's Q, dO tiles and its lse, D rows into stage `stage`, by cp.async (no commit) */
    auto load_item = [&](int item, int stage) {
        const int h = item_h(item), i0 = item_i0(item);
        wg_load_tile<64, NT>(Qs + stage * C::TILE, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, tid);
        wg_load_tile<64, NT>(dOs + stage * C::TILE, dout, attn_o_off(g, 0, b, h), obs, i0, g.S, tid);
        if (tid < 128) { /* warps 0, 1: lse; warps 2, 3: D */
            const int r = tid & 63, i = i0 + r;
            const float *src = tid < 64 ? lse : D_;
            float *dst = (tid < 64 ? lse_s : D_s) + stage * 64 + r;
            const bool ok = i < g.S;
            attn_cp_async4(dst, ok ? src + attn_row_off(g, i, b, h) : src, ok);
        }
    };

    float dk[32], dv[32], st[32], dpt[32], dqa[DQR];
    uint32_t pa[4][4];
#pragma unroll
    for (int i = 0; i < 32; i++) dk[i] = dv[i] = st[i] = dpt[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < DQR; i++) dqa[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) pa[k][0] = pa[k][1] = pa[k][2] = pa[k][3] = 0u;
    /* opaque from here: otherwise the zeros are one constant register whose copies into the
     * loop's accumulators land where wgmma have them in flight (ptxas then serializes) */
    wg_fence_acc(dk);
    wg_fence_acc(dv);
    wg_fence_acc(st);
    wg_fence_acc(dpt);
    wg_fence_acc(dqa);
#pragma unroll
    for (int k = 0; k < 4; k++) wg_fence_acc(pa[k]);

    /* dqa (a finished dQ product) into a staging buffer [64][64] F32: rows the queries, same
     * lane mapping as dS^T's keys; this warpgroup's DQN columns; store t of a row goes to
     * column block (t + rot) % 4, rot = (lane / 4) % 4 (conflict-free: see the header) */
    static_assert(DQN == 32, "stage_dq rotates four 8-column blocks");
    auto stage_dq = [&](float *buf) {
        float *dst = buf + DQN * wg + cq;
        const int rot = (lane >> 2) & 3;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float2 v[4], a[4], w[4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) v[jj] = make_float2(dqa[4 * jj + 2 * hf], dqa[4 * jj + 2 * hf + 1]);
#pragma unroll
            for (int t = 0; t < 4; t++) a[t] = (rot & 1) ? v[(t + 1) & 3] : v[t];
#pragma unroll
            for (int t = 0; t < 4; t++) w[t] = (rot & 2) ? a[(t + 2) & 3] : a[t]; /* w[t] = v[(t + rot) % 4] */
#pragma unroll
            for (int t = 0; t < 4; t++)
                *reinterpret_cast<float2 *>(dst + (krow + 8 * hf) * 64 + 8 * ((t + rot) & 3)) = w[t];
        }
    };
    auto dq_buf = [&](int item) { return dQs + (size_t)((item + C::NDQ) % C::NDQ) * C::DQ_TILE; }; /* item >= -1 */
    /* thread 0: dq_acc rows of `item` += its staged dQ (one bulk add: the rows are contiguous) */
    auto add_dq = [&](int item) {
        const int i0 = item_i0(item);
        wg_bulk_add_f32(dq_acc + attn_row_off(g, i0, b, item_h(item)) * 64, dq_buf(item),
                        (uint32_t)(min(64, g.S - i0) * 64 * sizeof(float)));
        wg_bulk_commit();
    };

    /* KQ(item): dK += dS^T Q (A = dS^T K-major, B = Q MN-major), and dQ = dS K over the
     * block's 128 keys (A = both warpgroups' dS^T tiles, consecutive: k-step k of 16 keys
     * starts 2048 k bytes in, read MN-major; B = K MN-major, this warpgroup's DQN columns
     * starting 2 DQN w bytes into its rows). One commit group. */
    auto issue_kq = [&](const unsigned char *dSb, const unsigned char *Qb) {
        wg_fence_acc(dqa);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++)
            wg_mma_ss_n64<0, 1>(dk, wg_desc(dSb + wg * C::TILE + 32 * k), wg_desc(Qb + 2048 * k), 1);
        if constexpr (DQ) {
#pragma unroll
            for (int k = 0; k < 4 * NWG; k++)
                wg_mma_ss_n32<1, 1>(dqa, wg_desc(dSb + 2048 * k), wg_desc(Ks + 2048 * k + 2 * DQN * wg), k > 0);
        }
        wg_commit();
    };

    /* prologue: K, V and item 0 landed and visible. KQ(-1), issued with item 0, reads the
     * dS^T buffer of parity 1 and the Q stage NSTAGE - 1: zeroed here, so that it adds
     * exact zeros to dK (its dQ is staged but never added) */
    const int64_t kbase = attn_k_off(g, 0, b, grp);
    wg_load_tile<C::BN, NT>(Ks, qkv, kbase, g.row_stride, j0, g.S, tid);
    wg_load_tile<C::BN, NT>(Vs, qkv, kbase + 64, g.row_stride, j0, g.S, tid);
    load_item(0, 0);
    attn_cp_async_commit();
    {
        uint4 *z1 = reinterpret_cast<uint4 *>(dSs + NWG * C::TILE);
        uint4 *z2 = reinterpret_cast<uint4 *>(Qs + (NSTAGE - 1) * C::TILE);
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        for (int e = tid; e < (int)(NWG * C::TILE / 16); e += NT) z1[e] = zero;
        for (int e = tid; e < (int)(C::TILE / 16); e += NT) z2[e] = zero;
    }
    attn_cp_async_wait<0>();
    wg_fence_proxy();
    __syncthreads();

    int sc = 0; /* item j's stage; item j - 1's is sc - 1 mod NSTAGE, item j + 1's sc + 1 */
    for (int j = 0; j < nitems; j++) {
        const int i0 = item_i0(j);
        const int sp = sc == 0 ? NSTAGE - 1 : sc - 1, sn = sc == NSTAGE - 1 ? 0 : sc + 1;
        const unsigned char *Qb = Qs + sc * C::TILE, *dOb = dOs + sc * C::TILE;
        const float *lse_b = lse_s + sc * 64, *D_b = D_s + sc * 64;
        unsigned char *dSw = dSs + (j & 1) * NWG * C::TILE + wg * C::TILE; /* this warpgroup's dS^T of item j */

        /* 0. (after the previous item's barrier) S(j), KQ(j - 1), P(j); the bulk add of
         * dQ(j - 2); item j + 1's loads. Pending before: V(j - 1). */
        wg_fence_acc(st);
        wg_arrive(); /* S(j): S^T = K Q^T */
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(st, wg_desc(Kw + 32 * k), wg_desc(Qb + 32 * k), k > 0);
        wg_commit();
        issue_kq(dSs + ((j - 1) & 1) * NWG * C::TILE, Qs + sp * C::TILE);
        wg_fence_acc(dpt);
        wg_arrive(); /* P(j): dP^T = V dO^T */
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(dpt, wg_desc(Vw + 32 * k), wg_desc(dOb + 32 * k), k > 0);
        wg_commit();
        if constexpr (DQ) {
            if (tid == 0 && j >= 2) add_dq(j - 2);
        }
        if (j + 1 < nitems) {
            load_item(j + 1, sn);
            attn_cp_async_commit();
        }

        /* 1. S(j) done (V(j - 1) with it): P^T in F32 while KQ(j - 1) and P(j) run. A
         * warpgroup whose keys all follow the tile's queries (warpgroup 1 on the diagonal
         * tile) gets P^T = 0 from the mask, hence dS^T = 0: it adds zeros to dK, dV, dQ. */
        wg_wait<2>();
        wg_fence_acc(st);
        {
            /* element (jj, e): key jw0 + krow + 8 (e / 2), query i0 + 8 jj + cq + e % 2 */
            const bool need_mask = i0 < jw0 + 63;
#pragma unroll
            for (int jj = 0; jj < 8; jj++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qc = 8 * jj + cq + (e & 1);
                    float p = attn_ex2(st[4 * jj + e] * g.scale_log2 - lse_b[qc] * ATTN_LOG2E);
                    if (need_mask && jw0 + krow + 8 * (e >> 1) > i0 + qc) p = 0.0f;
                    st[4 * jj + e] = p;
                }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) wg_pack_a(pa[k], st, k);
#pragma unroll
        for (int k = 0; k < 4; k++) wg_fence_acc(pa[k]);
        wg_arrive(); /* V(j): dV += P^T dO, dO as an MN-major operand */
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_rs_n64<1>(dv, pa[k], wg_desc(dOb + 2048 * k), 1);
        wg_commit();

        /* 2. KQ(j - 1) and P(j) done: stage dQ(j - 1), then dS^T, while V(j) runs */
        wg_wait<1>();
        wg_fence_acc(dpt);
        wg_fence_acc(dqa);
        if constexpr (DQ) stage_dq(dq_buf(j - 1)); /* (j = 0: zeros into the last buffer, never added) */
        /* dS^T rows (keys) to shared memory: the A operand of dK (K-major) and of dQ (MN-major) */
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int qc = 8 * jj + cq;
                const float d0 = st[4 * jj + 2 * hf] * (dpt[4 * jj + 2 * hf] - D_b[qc]) * g.scale;
                const float d1 = st[4 * jj + 2 * hf + 1] * (dpt[4 * jj + 2 * hf + 1] - D_b[qc + 1]) * g.scale;
                *reinterpret_cast<uint32_t *>(dSw + wg_sw_off(krow + 8 * hf, qc)) = wg_pack(d0, d1);
            }

        /* 3. item j + 1's tiles landed (this thread's copies); this item's dS^T and the staged
         * dQ(j - 1) written: all visible to the async proxy after the barrier; thread 0's
         * bulk adds but the newest (dQ(j - 2)) have read their staging buffers */
        attn_cp_async_wait<0>();
        wg_fence_proxy();
        if constexpr (DQ) {
            if (tid == 0) wg_bulk_wait_read<1>();
        }
        __syncthreads();
        sc = sn;
    } /* pending across the loop's back edge: V(j) only (dv accumulates, pa is rewritten after the next wait) */

    /* the last item's KQ; the bulk adds of the last two dQ */
    const int last = nitems - 1;
    issue_kq(dSs + (last & 1) * NWG * C::TILE, Qs + (last % NSTAGE) * C::TILE);
    if constexpr (DQ) {
        if (tid == 0 && last >= 1) add_dq(last - 1);
    }
    wg_wait<0>();
    wg_fence_acc(dk);
    wg_fence_acc(dv);
    wg_fence_acc(dqa);
    if constexpr (DQ) {
        stage_dq(dq_buf(last));
        wg_fence_proxy();
        __syncthreads();
        if (tid == 0) add_dq(last); /* its source read is waited for at the block's end */
    }

    /* dK and dV out through shared memory: into the K and V tiles' places (swizzled, as
     * loaded), then whole rows by 16-byte stores (the fragments' own stores were 4 bytes, 8
     * rows to an instruction). Every wgmma of both warpgroups, the only readers of K and V,
     * is past its wait<0> at the barrier above (DQ; without DQ, here). */
    if constexpr (!DQ) __syncthreads();
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const uint32_t off = wg_sw_off(krow + 8 * hf, 8 * jj + cq);
            *reinterpret_cast<uint32_t *>(Kw + off) =
                attn_pack_bf16(dk[4 * jj + 2 * hf], dk[4 * jj + 2 * hf + 1]);
            *reinterpret_cast<uint32_t *>(Vw + off) =
                attn_pack_bf16(dv[4 * jj + 2 * hf], dv[4 * jj + 2 * hf + 1]);
        }
    __syncthreads();
    wg_store_tile<C::BN, NT>(dqkv, kbase, g.row_stride, j0, g.S, Ks, tid);
    wg_store_tile<C::BN, NT>(dqkv, kbase + 64, g.row_stride, j0, g.S, Vs, tid);

    /* SUM: dK's and dV's column sums over the block's 128 keys (F32, before rounding) into
     * parts' row kt B + b (attn_colsum_parts): each thread's two rows, the 8 lanes of a
     * column (lane / 4) by butterfly, then the 8 warps in order through shared memory (the
     * dS^T buffers, read by no wgmma any more once every warpgroup is past its wait<0>) */
    if constexpr (SUM) {
        float sk[16], sv[16];
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float a = 0.0f, v = 0.0f;
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
                    if (jw0 + krow + 8 * hf < g.S) a += dk[4 * jj + 2 * hf + e], v += dv[4 * jj + 2 * hf + e];
                sk[2 * jj + e] = a, sv[2 * jj + e] = v;
            }
#pragma unroll
        for (int o = 4; o < 32; o <<= 1)
#pragma unroll
            for (int k = 0; k < 16; k++) {
                sk[k] += __shfl_xor_sync(0xffffffffu, sk[k], o);
                sv[k] += __shfl_xor_sync(0xffffffffu, sv[k], o);
            }
        float *red = reinterpret_cast<float *>(dSs); /* [8 warps][128]: dK's 64 columns, then dV's */
        __syncthreads();
        if (lane < 4) {
            float *row = red + (4 * wg + warp) * 128;
#pragma unroll
            for (int jj = 0; jj < 8; jj++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    row[8 * jj + cq + e] = sk[2 * jj + e];
                    row[64 + 8 * jj + cq + e] = sv[2 * jj + e];
                }
        }
        __syncthreads();
        if (tid < 128) {
            float t = 0.0f;
#pragma unroll
            for (int w = 0; w < 8; w++) t += red[w * 128 + tid];
            const int64_t col = (tid < 64 ? attn_k_off(g, 0, 0, grp) : attn_v_off(g, 0, 0, grp)) + (tid & 63);
            parts[((int64_t)kt * g.B + b) * g.ts + col] = t;
        }
    }
    /* the staging buffers stay allocated until the last bulk add has read them; its writes
     * land before the grid completes (as TMA stores do), so nothing waits for them here */
    if constexpr (DQ) {
        if (tid == 0) wg_bulk_wait_read<0>();
    }
}

template <bool DQ, bool SUM>
static void wbp_launch(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                       const __nv_bfloat16 *qkv, const float *lse, const float *Drow, float *dq_acc, float *parts) {
    using C = wbp_cfg;
    static_assert(C::BN == ATTN_COLSUM_ROWS, "the column-sum tiles are this kernel's key blocks");
    static_assert(2 * C::NWG * C::TILE >= 8 * 128 * sizeof(float), "the column-sum exchange fits the dS^T buffers");
    const int64_t blocks = (int64_t)attn_cdiv(g.S, C::BN) * g.G * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    auto kernel = attn_wg_bwd_pipe_kernel<DQ, SUM>;
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    kernel<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(g, dqkv, dout, qkv, lse, Drow, dq_acc, parts);
    ATTN_CHECK_LAUNCH("attn_wg_bwd_pipe_kernel");
}

bool attn_wg_bwd_pipe(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                      const __nv_bfloat16 *qkv, const float *lse, const float *D, float *dq_acc, float *parts,
                      const attn_rope *rope) {
    MC_ASSERT(g.d == 64, "cuda attention: the wgmma backward is for head_dim 64, not %d", g.d);
    MC_ASSERT(!parts || dq_acc, "cuda attention: column sums need the dQ accumulator");
    if (dq_acc && parts) {
        wbp_launch<true, true>(st, g, dqkv, dout, qkv, lse, D, dq_acc, parts);
        attn_launch_dq_store(st, g, dqkv, dq_acc, parts, nullptr);
    } else if (dq_acc) {
        wbp_launch<true, false>(st, g, dqkv, dout, qkv, lse, D, dq_acc, nullptr);
        attn_launch_dq_store(st, g, dqkv, dq_acc, nullptr, rope);
        return rope != nullptr;
    } else { /* deterministic: dK, dV here, dQ by its own pass */
        wbp_launch<false, false>(st, g, dqkv, dout, qkv, lse, D, nullptr, nullptr);
        attn_wg_dq(st, g, dqkv, dout, qkv, lse, D);
    }
    return false;
}
