/* attention_simple.cu: the simple tiled attention kernels: any head_dim <= 256, F32 math on
 * F32, BF16 or F16 data. They run the F32 path (which must match the CPU reference to 1e-5,
 * so they follow its arithmetic: q scaled before the dot product, expf, o * (1/l), dS =
 * p (dp z - D) scale), every BF16 shape the tensor-core kernels do not take, and F16.
 *
 * Tiles: 32 queries x 32 keys, 256 threads (8 warps). Operand tiles are staged in shared
 * memory as F32 rows of stride d|1 (odd, so that 32 lanes reading 32 different rows at the
 * same column hit 32 different banks). Warp w owns the tile rows w, w+8, w+16, w+24; in the
 * score phase lane l takes the other operand's row l (one key, or one query), in the
 * accumulation phase lane l takes the dims l, l+32, ... (<= 8 of them), and the per-row
 * weights move between the two by warp shuffles. No shared accumulators, so each kernel
 * needs only the two barriers around each tile load.
 *
 *   fwd:  block = (32 queries, head, batch), long causal rows first; loops over key tiles
 *         from the tile of the block's smallest seg_start to the diagonal; online softmax.
 *   dkdv: block = (32 keys, kv group, batch); loops over the group's heads, then the query
 *         tiles from the diagonal on (skipping tiles whose queries all start after the
 *         block's last key), in a fixed order: deterministic, no atomics.
 *   dq:   block = (32 queries, head, batch); loops over key tiles like fwd.
 * Both backward kernels recompute P = exp(s - lse) and the dropout mask (Philox). */
#include <limits.h>

#include "backend/cuda/attention_internal.h"

enum {
    SIMPLE_T = 32,                       /* tile rows (queries or keys) */
    SIMPLE_WARPS = 8,                    /* 256 threads */
    SIMPLE_R = SIMPLE_T / SIMPLE_WARPS,  /* tile rows per warp */
    SIMPLE_C = ATTN_SIMPLE_MAX_D / 32,   /* dims per lane, at most */
};

__device__ __forceinline__ float simple_warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float simple_warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ int simple_warp_min(int v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* dst[r][c] (row stride ld) = src[base + (row0 + r) stride + c] * mul for r < SIMPLE_T,
 * c < d; rows at or past S are zero. All threads of the block take part. */
template <typename T>
__device__ __forceinline__ void simple_load_rows(float *dst, int ld, const T *src, int64_t base, int64_t stride,
                                                 int row0, int S, int d, float mul) {
    for (int e = threadIdx.x; e < SIMPLE_T * d; e += blockDim.x) {
        const int r = e / d, c = e - r * d;
        float v = 0.0f;
        if (row0 + r < S) v = attn_load(src + base + (int64_t)(row0 + r) * stride + c) * mul;
        dst[r * ld + c] = v;
    }
}

/* ---------------------------------------------------------------- forward */

template <typename T>
__global__ void __launch_bounds__(256, 1) attn_simple_fwd_kernel(attn_geom g, T *out, float *lse, const T *qkv) {
    extern __shared__ float smem[];
    const int d = g.d, ld = d | 1;
    float *Qs = smem, *Ks = Qs + SIMPLE_T * ld, *Vs = Ks + SIMPLE_T * ld;
    int *lo_s = (int *)(Vs + SIMPLE_T * ld); /* [SIMPLE_T + 1]: each row's first key, then their min */

    const int nq = attn_cdiv(g.S, SIMPLE_T);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb); /* the longest rows first */
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * SIMPLE_T, nrows = min(SIMPLE_T, g.S - i0), i_last = i0 + nrows - 1;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;

    simple_load_rows(Qs, ld, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, d, g.scale);
    if (tid < 32) {
        const int i = i0 + tid;
        const int lo = i < g.S ? attn_seg_lo(g, b, i) : INT_MAX;
        lo_s[tid] = lo;
        const int m = simple_warp_min(lo);
        if (tid == 0) lo_s[SIMPLE_T] = m;
    }
    __syncthreads();
    const int klo = lo_s[SIMPLE_T]; /* <= i0: row i0 is valid */
    int lo_r[SIMPLE_R];
    float m_r[SIMPLE_R], l_r[SIMPLE_R], acc[SIMPLE_R][SIMPLE_C];
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++) {
        lo_r[r] = lo_s[w + SIMPLE_WARPS * r];
        m_r[r] = -INFINITY;
        l_r[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++) acc[r][k] = 0.0f;
    }
    const int64_t kbase = attn_k_off(g, 0, b, grp), vbase = attn_v_off(g, 0, b, grp);

    for (int j0 = klo / SIMPLE_T * SIMPLE_T; j0 <= i_last; j0 += SIMPLE_T) {
        __syncthreads(); /* every warp is done with the previous K and V tiles */
        simple_load_rows(Ks, ld, qkv, kbase, g.row_stride, j0, g.S, d, 1.0f);
        simple_load_rows(Vs, ld, qkv, vbase, g.row_stride, j0, g.S, d, 1.0f);
        __syncthreads();
        float s[SIMPLE_R];
#pragma unroll
        for (int r = 0; r < SIMPLE_R; r++) s[r] = 0.0f;
        const float *krow = Ks + lane * ld;
        for (int c = 0; c < d; c++) {
            const float kv = krow[c];
#pragma unroll
            for (int r = 0; r < SIMPLE_R; r++) s[r] += Qs[(w + SIMPLE_WARPS * r) * ld + c] * kv;
        }
        const int j = j0 + lane;
#pragma unroll
        for (int r = 0; r < SIMPLE_R; r++) {
            const int i = i0 + w + SIMPLE_WARPS * r;
            const bool vis = j >= lo_r[r] && j <= i; /* invalid rows have lo = INT_MAX */
            const float sv = vis ? s[r] : -INFINITY;
            const float m_new = fmaxf(m_r[r], simple_warp_max(sv));
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* no visible key yet: all p = 0 */
            float p = vis ? expf(sv - m_use) : 0.0f;
            const float corr = expf(m_r[r] - m_use);
            l_r[r] = l_r[r] * corr + simple_warp_sum(p);
            m_r[r] = m_new;
            if (g.dropout > 0.0f && vis) p *= attn_drop_factor(g, attn_drop_index(g, b, h, i, j));
#pragma unroll
            for (int k = 0; k < SIMPLE_C; k++) acc[r][k] *= corr;
            for (int jj = 0; jj < 32; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
                const float *vrow = Vs + jj * ld;
#pragma unroll
                for (int k = 0; k < SIMPLE_C; k++)
                    if (lane + 32 * k < d) acc[r][k] += pj * vrow[lane + 32 * k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++) {
        const int lr = w + SIMPLE_WARPS * r;
        if (lr >= nrows) continue;
        const int i = i0 + lr;
        const float inv_l = 1.0f / l_r[r];
        T *dst = out + attn_o_off(g, i, b, h);
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++)
            if (lane + 32 * k < d) attn_store(dst + lane + 32 * k, acc[r][k] * inv_l);
        if (lane == 0) lse[attn_row_off(g, i, b, h)] = m_r[r] + logf(l_r[r]);
    }
}

/* ---------------------------------------------------------------- backward */

/* Per-query-row side data of a tile: first key, last key (-1 for rows past S), lse, D. */
struct simple_rows {
    float *lse, *D;
    int *lo, *hi, *flag;
};

__device__ __forceinline__ simple_rows simple_rows_at(float *p) {
    simple_rows r;
    r.lse = p;
    r.D = p + SIMPLE_T;
    r.lo = (int *)(p + 2 * SIMPLE_T);
    r.hi = r.lo + SIMPLE_T;
    r.flag = r.hi + SIMPLE_T;
    return r;
}

/* Threads 0..31 fill the side data of query rows i0 .. i0+31 and return (in lane 0 and
 * through rows.flag[0]) the smallest first key of the valid rows. */
__device__ __forceinline__ void simple_load_side(const attn_geom &g, simple_rows rows, const float *lse, const float *D,
                                                 int b, int h, int i0) {
    const int tid = threadIdx.x;
    if (tid >= 32) return;
    const int i = i0 + tid;
    const bool valid = i < g.S;
    const int lo = valid ? attn_seg_lo(g, b, i) : INT_MAX;
    rows.lo[tid] = lo;
    rows.hi[tid] = valid ? i : -1;
    rows.lse[tid] = valid ? lse[attn_row_off(g, i, b, h)] : 0.0f;
    rows.D[tid] = valid ? D[attn_row_off(g, i, b, h)] : 0.0f;
    const int m = simple_warp_min(lo);
    if (tid == 0) rows.flag[0] = m;
}

template <typename T>
__global__ void __launch_bounds__(256, 1) attn_simple_dkdv_kernel(attn_geom g, T *dqkv, const T *dout, const T *qkv,
                                                               const float *lse, const float *D) {
    extern __shared__ float smem[];
    const int d = g.d, ld = d | 1;
    float *Ks = smem, *Vs = Ks + SIMPLE_T * ld, *Qs = Vs + SIMPLE_T * ld, *dOs = Qs + SIMPLE_T * ld;
    const simple_rows rows = simple_rows_at(dOs + SIMPLE_T * ld);

    const int64_t ngb = (int64_t)g.G * g.B;
    const int kt = (int)(blockIdx.x / ngb); /* key tile 0 has the most queries: first */
    const int gb = (int)(blockIdx.x % ngb), grp = gb % g.G, b = gb / g.G;
    const int j0 = kt * SIMPLE_T, nkeys = min(SIMPLE_T, g.S - j0), j_last = j0 + nkeys - 1;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int64_t obs = (int64_t)g.B * g.H * d; /* out/dout stride between positions */

    simple_load_rows(Ks, ld, qkv, attn_k_off(g, 0, b, grp), g.row_stride, j0, g.S, d, 1.0f);
    simple_load_rows(Vs, ld, qkv, attn_v_off(g, 0, b, grp), g.row_stride, j0, g.S, d, 1.0f);
    float dk[SIMPLE_R][SIMPLE_C], dv[SIMPLE_R][SIMPLE_C];
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++)
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++) dk[r][k] = dv[r][k] = 0.0f;

    for (int hh = 0; hh < g.hpg; hh++) {
        const int h = grp * g.hpg + hh;
        for (int i0 = j0; i0 < g.S; i0 += SIMPLE_T) { /* j0 is a multiple of the tile */
            __syncthreads(); /* every warp is done with the previous query tile */
            simple_load_rows(Qs, ld, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, d, 1.0f);
            simple_load_rows(dOs, ld, dout, attn_o_off(g, 0, b, h), obs, i0, g.S, d, 1.0f);
            simple_load_side(g, rows, lse, D, b, h, i0);
            __syncthreads();
            if (rows.flag[0] > j_last) continue; /* every query of the tile starts after our keys */
            float s[SIMPLE_R], dp[SIMPLE_R];
#pragma unroll
            for (int r = 0; r < SIMPLE_R; r++) s[r] = dp[r] = 0.0f;
            for (int c = 0; c < d; c++) { /* lane = query, r = key */
                const float q = Qs[lane * ld + c] * g.scale, o = dOs[lane * ld + c];
#pragma unroll
                for (int r = 0; r < SIMPLE_R; r++) {
                    s[r] += q * Ks[(w + SIMPLE_WARPS * r) * ld + c];
                    dp[r] += o * Vs[(w + SIMPLE_WARPS * r) * ld + c];
                }
            }
            const int i = i0 + lane, lo = rows.lo[lane], hi = rows.hi[lane];
            const float L = rows.lse[lane], Di = rows.D[lane];
            float pd[SIMPLE_R], ds[SIMPLE_R];
#pragma unroll
            for (int r = 0; r < SIMPLE_R; r++) {
                const int j = j0 + w + SIMPLE_WARPS * r;
                const bool vis = j <= j_last && j >= lo && j <= hi;
                const float p = vis ? expf(s[r] - L) : 0.0f;
                float z = 1.0f;
                if (g.dropout > 0.0f && vis) z = attn_drop_factor(g, attn_drop_index(g, b, h, i, j));
                pd[r] = p * z;
                ds[r] = p * (dp[r] * z - Di) * g.scale;
            }
            for (int ii = 0; ii < 32; ii++) {
                const float *orow = dOs + ii * ld, *qrow = Qs + ii * ld;
#pragma unroll
                for (int r = 0; r < SIMPLE_R; r++) {
                    const float pi = __shfl_sync(0xffffffffu, pd[r], ii), si = __shfl_sync(0xffffffffu, ds[r], ii);
#pragma unroll
                    for (int k = 0; k < SIMPLE_C; k++)
                        if (lane + 32 * k < d) {
                            dv[r][k] += pi * orow[lane + 32 * k];
                            dk[r][k] += si * qrow[lane + 32 * k];
                        }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++) {
        const int lk = w + SIMPLE_WARPS * r;
        if (lk >= nkeys) continue;
        T *kd = dqkv + attn_k_off(g, j0 + lk, b, grp), *vd = dqkv + attn_v_off(g, j0 + lk, b, grp);
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++)
            if (lane + 32 * k < d) {
                attn_store(kd + lane + 32 * k, dk[r][k]);
                attn_store(vd + lane + 32 * k, dv[r][k]);
            }
    }
}

template <typename T>
__global__ void __launch_bounds__(256, 1) attn_simple_dq_kernel(attn_geom g, T *dqkv, const T *dout, const T *qkv,
                                                             const float *lse, const float *D) {
    extern __shared__ float smem[];
    const int d = g.d, ld = d | 1;
    float *Qs = smem, *dOs = Qs + SIMPLE_T * ld, *Ks = dOs + SIMPLE_T * ld, *Vs = Ks + SIMPLE_T * ld;
    const simple_rows rows = simple_rows_at(Vs + SIMPLE_T * ld);

    const int nq = attn_cdiv(g.S, SIMPLE_T);
    const int64_t nhb = (int64_t)g.H * g.B;
    const int qt = nq - 1 - (int)(blockIdx.x / nhb);
    const int hb = (int)(blockIdx.x % nhb), h = hb % g.H, b = hb / g.H, grp = h / g.hpg;
    const int i0 = qt * SIMPLE_T, nrows = min(SIMPLE_T, g.S - i0), i_last = i0 + nrows - 1;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int64_t obs = (int64_t)g.B * g.H * d;

    simple_load_rows(Qs, ld, qkv, attn_q_off(g, 0, b, h), g.row_stride, i0, g.S, d, g.scale);
    simple_load_rows(dOs, ld, dout, attn_o_off(g, 0, b, h), obs, i0, g.S, d, 1.0f);
    simple_load_side(g, rows, lse, D, b, h, i0);
    __syncthreads();
    const int klo = rows.flag[0];
    int lo_r[SIMPLE_R], hi_r[SIMPLE_R];
    float L_r[SIMPLE_R], D_r[SIMPLE_R], dq[SIMPLE_R][SIMPLE_C];
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++) {
        const int lr = w + SIMPLE_WARPS * r;
        lo_r[r] = rows.lo[lr];
        hi_r[r] = rows.hi[lr];
        L_r[r] = rows.lse[lr];
        D_r[r] = rows.D[lr];
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++) dq[r][k] = 0.0f;
    }
    const int64_t kbase = attn_k_off(g, 0, b, grp), vbase = attn_v_off(g, 0, b, grp);

    for (int j0 = klo / SIMPLE_T * SIMPLE_T; j0 <= i_last; j0 += SIMPLE_T) {
        __syncthreads();
        simple_load_rows(Ks, ld, qkv, kbase, g.row_stride, j0, g.S, d, 1.0f);
        simple_load_rows(Vs, ld, qkv, vbase, g.row_stride, j0, g.S, d, 1.0f);
        __syncthreads();
        float s[SIMPLE_R], dp[SIMPLE_R];
#pragma unroll
        for (int r = 0; r < SIMPLE_R; r++) s[r] = dp[r] = 0.0f;
        for (int c = 0; c < d; c++) { /* lane = key, r = query */
            const float kv = Ks[lane * ld + c], vv = Vs[lane * ld + c];
#pragma unroll
            for (int r = 0; r < SIMPLE_R; r++) {
                s[r] += Qs[(w + SIMPLE_WARPS * r) * ld + c] * kv;
                dp[r] += dOs[(w + SIMPLE_WARPS * r) * ld + c] * vv;
            }
        }
        const int j = j0 + lane;
        float ds[SIMPLE_R];
#pragma unroll
        for (int r = 0; r < SIMPLE_R; r++) {
            const int i = i0 + w + SIMPLE_WARPS * r;
            const bool vis = j >= lo_r[r] && j <= hi_r[r];
            const float p = vis ? expf(s[r] - L_r[r]) : 0.0f;
            float z = 1.0f;
            if (g.dropout > 0.0f && vis) z = attn_drop_factor(g, attn_drop_index(g, b, h, i, j));
            ds[r] = p * (dp[r] * z - D_r[r]) * g.scale;
        }
        for (int jj = 0; jj < 32; jj++) {
            const float *krow = Ks + jj * ld;
#pragma unroll
            for (int r = 0; r < SIMPLE_R; r++) {
                const float sj = __shfl_sync(0xffffffffu, ds[r], jj);
#pragma unroll
                for (int k = 0; k < SIMPLE_C; k++)
                    if (lane + 32 * k < d) dq[r][k] += sj * krow[lane + 32 * k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SIMPLE_R; r++) {
        const int lr = w + SIMPLE_WARPS * r;
        if (lr >= nrows) continue;
        T *dst = dqkv + attn_q_off(g, i0 + lr, b, h);
#pragma unroll
        for (int k = 0; k < SIMPLE_C; k++)
            if (lane + 32 * k < d) attn_store(dst + lane + 32 * k, dq[r][k]);
    }
}

/* ---------------------------------------------------------------- launchers */

static size_t simple_tiles_bytes(int d, int ntiles) { return (size_t)ntiles * SIMPLE_T * (size_t)(d | 1) * sizeof(float); }
static size_t simple_side_bytes(void) { return (4 * SIMPLE_T + 1) * sizeof(float); }

template <typename K>
static void simple_set_smem(K kernel, size_t bytes, const char *name) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    MC_ASSERT(e == cudaSuccess, "cuda attention: %s needs %zu bytes of shared memory: %s", name, bytes,
              cudaGetErrorString(e));
}

template <typename T>
static void simple_fwd(cudaStream_t st, const attn_geom &g, T *out, float *lse, const T *qkv) {
    MC_ASSERT(g.d <= ATTN_SIMPLE_MAX_D, "cuda attention: head_dim %d above %d", g.d, ATTN_SIMPLE_MAX_D);
    const size_t smem = simple_tiles_bytes(g.d, 3) + (SIMPLE_T + 1) * sizeof(int);
    const int64_t blocks = (int64_t)attn_cdiv(g.S, SIMPLE_T) * g.H * g.B;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)blocks);
    simple_set_smem(attn_simple_fwd_kernel<T>, smem, "attn_simple_fwd_kernel");
    attn_simple_fwd_kernel<T><<<(unsigned)blocks, SIMPLE_WARPS * 32, smem, st>>>(g, out, lse, qkv);
    ATTN_CHECK_LAUNCH("attn_simple_fwd_kernel");
}

template <typename T>
static void simple_bwd(cudaStream_t st, const attn_geom &g, T *dqkv, const T *dout, const T *qkv, const float *lse,
                       const float *D) {
    MC_ASSERT(g.d <= ATTN_SIMPLE_MAX_D, "cuda attention: head_dim %d above %d", g.d, ATTN_SIMPLE_MAX_D);
    const size_t smem = simple_tiles_bytes(g.d, 4) + simple_side_bytes();
    const int64_t kv_blocks = (int64_t)attn_cdiv(g.S, SIMPLE_T) * g.G * g.B;
    const int64_t q_blocks = (int64_t)attn_cdiv(g.S, SIMPLE_T) * g.H * g.B;
    MC_ASSERT(q_blocks <= INT_MAX, "cuda attention: grid of %lld blocks is too large", (long long)q_blocks);
    simple_set_smem(attn_simple_dkdv_kernel<T>, smem, "attn_simple_dkdv_kernel");
    attn_simple_dkdv_kernel<T><<<(unsigned)kv_blocks, SIMPLE_WARPS * 32, smem, st>>>(g, dqkv, dout, qkv, lse, D);
    ATTN_CHECK_LAUNCH("attn_simple_dkdv_kernel");
    simple_set_smem(attn_simple_dq_kernel<T>, smem, "attn_simple_dq_kernel");
    attn_simple_dq_kernel<T><<<(unsigned)q_blocks, SIMPLE_WARPS * 32, smem, st>>>(g, dqkv, dout, qkv, lse, D);
    ATTN_CHECK_LAUNCH("attn_simple_dq_kernel");
}

void attn_simple_fwd_f32(cudaStream_t st, const attn_geom &g, float *out, float *lse, const float *qkv) {
    simple_fwd<float>(st, g, out, lse, qkv);
}
void attn_simple_fwd_bf16(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse,
                          const __nv_bfloat16 *qkv) {
    simple_fwd<__nv_bfloat16>(st, g, out, lse, qkv);
}
void attn_simple_bwd_f32(cudaStream_t st, const attn_geom &g, float *dqkv, const float *dout, const float *qkv,
                         const float *lse, const float *D) {
    simple_bwd<float>(st, g, dqkv, dout, qkv, lse, D);
}
void attn_simple_bwd_bf16(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                          const __nv_bfloat16 *qkv, const float *lse, const float *D) {
    simple_bwd<__nv_bfloat16>(st, g, dqkv, dout, qkv, lse, D);
}
void attn_simple_fwd_f16(cudaStream_t st, const attn_geom &g, __half *out, float *lse, const __half *qkv) {
    simple_fwd<__half>(st, g, out, lse, qkv);
}
void attn_simple_bwd_f16(cudaStream_t st, const attn_geom &g, __half *dqkv, const __half *dout, const __half *qkv,
                         const float *lse, const float *D) {
    simple_bwd<__half>(st, g, dqkv, dout, qkv, lse, D);
}
