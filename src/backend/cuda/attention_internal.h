/* attention_internal.h: private to the CUDA attention files (attention*.cu). The geometry
 * every attention kernel receives by value, the index helpers for the packed QKV layout,
 * the Philox dropout draw, the tensor-core primitives and padded-tile loads, the launch
 * check, and the launchers each file provides.
 *
 * Layouts (t = s * B + b, sequence first; see tensor/backend.h):
 *   qkv  [S, B, G, hpg + 2, d]: token t's group g holds hpg query heads, its key, its value
 *   out  [S, B, H, d],  lse [B, H, S] F32,  seg_start [B, S] I32 (optional)
 *   D    [B, H, S] F32 (backward workspace: D_i = dO_i . O_i)
 * Query i of batch b, head h attends keys j with lo_i <= j <= i, lo_i = seg_start[b, i]
 * (0 when absent), in kv group h / hpg. */
#ifndef MC_BACKEND_CUDA_ATTENTION_INTERNAL_H
#define MC_BACKEND_CUDA_ATTENTION_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "base/error.h"
#include "base/philox.h"

/* Everything a kernel needs to know about the problem, passed by value. */
struct attn_geom {
    int S, B, H, G, hpg, d;
    int64_t ts;          /* token stride of qkv in elements: (H + 2 G) d */
    int64_t row_stride;  /* elements between positions s and s + 1 of qkv: B ts */
    float scale;         /* softmax scale */
    float scale_log2;    /* scale * log2(e): scores in the exp2 domain */
    float dropout;       /* p, 0 <= p < 1 */
    float keep_scale;    /* 1 / (1 - p), computed in float exactly as the CPU reference */
    uint64_t seed, stream;
    const int32_t *seg;  /* [B, S] device pointer, or NULL */
};

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

/* Element offsets into qkv of position s, batch b: query head h, the key and the value of
 * group g. */
__device__ __forceinline__ int64_t attn_q_off(const attn_geom &g, int64_t s, int b, int h) {
    const int grp = h / g.hpg, hh = h - grp * g.hpg;
    return s * g.row_stride + (int64_t)b * g.ts + (int64_t)(grp * (g.hpg + 2) + hh) * g.d;
}
__device__ __forceinline__ int64_t attn_k_off(const attn_geom &g, int64_t s, int b, int grp) {
    return s * g.row_stride + (int64_t)b * g.ts + (int64_t)(grp * (g.hpg + 2) + g.hpg) * g.d;
}
__device__ __forceinline__ int64_t attn_v_off(const attn_geom &g, int64_t s, int b, int grp) {
    return attn_k_off(g, s, b, grp) + g.d;
}
/* out [S, B, H, d] */
__device__ __forceinline__ int64_t attn_o_off(const attn_geom &g, int64_t s, int b, int h) {
    return ((s * g.B + b) * g.H + h) * (int64_t)g.d;
}
/* lse and D [B, H, S] */
__device__ __forceinline__ int64_t attn_row_off(const attn_geom &g, int64_t s, int b, int h) {
    return ((int64_t)b * g.H + h) * g.S + s;
}
/* The first key query i may attend to, clamped to [0, i] (the CPU reference asserts that
 * range; a value outside it must not make a row empty, which would divide by zero). */
__device__ __forceinline__ int attn_seg_lo(const attn_geom &g, int b, int i) {
    if (!g.seg) return 0;
    int lo = g.seg[(int64_t)b * g.S + i];
    return lo < 0 ? 0 : (lo > i ? i : lo);
}
/* Philox element index of (b, h, i, j): ((b H + h) S + i) S + j. */
__device__ __forceinline__ uint64_t attn_drop_index(const attn_geom &g, int b, int h, int i, int j) {
    return ((((uint64_t)b * (uint64_t)g.H + (uint64_t)h) * (uint64_t)g.S + (uint64_t)i) * (uint64_t)g.S) + (uint64_t)j;
}
/* Word w (0..3) of a Philox block, selected without indexing a local array at run time
 * (which would put the block in local memory). */
__device__ __forceinline__ uint32_t attn_philox_word(const mc_philox_out &o, int w) {
    return w == 0 ? o.v[0] : w == 1 ? o.v[1] : w == 2 ? o.v[2] : o.v[3];
}
__device__ __forceinline__ mc_philox_out attn_philox_block(const attn_geom &g, uint64_t blk) {
    return mc_philox4x32_10(g.seed, (uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)g.stream, (uint32_t)(g.stream >> 32));
}
/* keep_scale when kept (uniform >= p, the uniform exactly as mc_philox_uniform), else 0 */
__device__ __forceinline__ float attn_keep(const attn_geom &g, uint32_t bits) {
    const float u = (float)(bits >> 8) * (1.0f / 16777216.0f);
    return u >= g.dropout ? g.keep_scale : 0.0f;
}
/* The dropout factor of element idx. */
__device__ __forceinline__ float attn_drop_factor(const attn_geom &g, uint64_t idx) {
    return attn_keep(g, attn_philox_word(attn_philox_block(g, idx >> 2), (int)(idx & 3)));
}
/* The factors of elements idx and idx + 1, with one Philox block when they share one. */
__device__ __forceinline__ void attn_drop_factor2(const attn_geom &g, uint64_t idx, float &z0, float &z1) {
    const int w = (int)(idx & 3);
    const mc_philox_out o = attn_philox_block(g, idx >> 2);
    z0 = attn_keep(g, attn_philox_word(o, w));
    if (w == 3)
        z1 = attn_keep(g, attn_philox_block(g, (idx >> 2) + 1).v[0]);
    else
        z1 = attn_keep(g, attn_philox_word(o, w + 1));
}

__device__ __forceinline__ float attn_load(const float *p) { return *p; }
__device__ __forceinline__ float attn_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float attn_load(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void attn_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void attn_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void attn_store(__half *p, float v) { *p = __float2half_rn(v); }

/* ---- tensor-core primitives (sm_80+ PTX: fine for the compute_90 and sm_90a targets) ---- */

/* 16-byte global -> shared copy; with pred false the 16 bytes are zero-filled and nothing
 * is read (gmem must still be a valid address). */
__device__ __forceinline__ void attn_cp_async16(void *smem, const void *gmem, bool pred) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
/* 4-byte global -> shared copy (one F32), zero-filled without reading when pred is false. */
__device__ __forceinline__ void attn_cp_async4(void *smem, const void *gmem, bool pred) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = pred ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void attn_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* rows [row0, row0 + ROWS) of a [S, *] operand (row r at base + r stride) into a padded
 * shared tile, 16 bytes per cp.async; rows at or past S are zero-filled. */
template <int ROWS, int D, int NT>
__device__ __forceinline__ void attn_load_tile(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int64_t base,
                                               int64_t stride, int row0, int S) {
    constexpr int CPR = D / 8, TOTAL = ROWS * CPR;
#pragma unroll
    for (int e0 = 0; e0 < TOTAL; e0 += NT) {
        const int e = e0 + (int)threadIdx.x;
        if (TOTAL % NT == 0 || e < TOTAL) {
            const int r = e / CPR, ch = e % CPR;
            const bool ok = row0 + r < S;
            const __nv_bfloat16 *p = ok ? src + base + (int64_t)(row0 + r) * stride + ch * 8 : src;
            attn_cp_async16(dst + r * (D + 8) + ch * 8, p, ok);
        }
    }
}

/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void attn_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m, and register m
 * of lane l gets elements (l / 4, 2 (l % 4) .. +1) of matrix m (transposed with _trans). */
__device__ __forceinline__ void attn_ldsm_x4(uint32_t r[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t r[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
/* c (16x8 F32) += a (16x16 bf16, row) b (16x8 bf16, col). Fragments (g = lane / 4, t = lane % 4):
 * a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); b0 (k 2t..2t+1, n g),
 * b1 (k 2t+8.., n g); c0 c1 (g, 2t..2t+1), c2 c3 (g+8, 2t..2t+1). */
__device__ __forceinline__ void attn_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as bf16x2, lo in the low half (the lower column of a fragment pair). */
__device__ __forceinline__ uint32_t attn_pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}
/* 2^x (ex2.approx: relative error ~2^-22; 2^-inf = 0). */
__device__ __forceinline__ float attn_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Every launch is checked at once, naming the kernel (launch-configuration errors; faults
 * inside a kernel surface at the next synchronizing call). */
#define ATTN_CHECK_LAUNCH(name)                                                                            \
    do {                                                                                                   \
        cudaError_t e_ = cudaGetLastError();                                                               \
        MC_ASSERT(e_ == cudaSuccess, "cuda attention: launch of %s failed: %s", name, cudaGetErrorString(e_)); \
    } while (0)
#define ATTN_CUDA(call)                                                                                    \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        MC_ASSERT(e_ == cudaSuccess, "cuda attention: %s failed: %s", #call, cudaGetErrorString(e_));      \
    } while (0)

__host__ __device__ __forceinline__ int attn_cdiv(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

/* ---- launchers (each file's entry points) ---- */

/* attention.cu: D[b, h, i] = sum_c dO[i, c] O[i, c] (F32), for F32, BF16 or F16 dO and O; the
 * BF16 one also zeroes the F32 dQ accumulator [B, H, S, d] when dq_zero is not NULL. */
void attn_launch_rowdot_f32(cudaStream_t st, const attn_geom &g, float *D, const float *dout, const float *out);
void attn_launch_rowdot_bf16(cudaStream_t st, const attn_geom &g, float *D, float *dq_zero, const __nv_bfloat16 *dout,
                             const __nv_bfloat16 *out);
void attn_launch_rowdot_f16(cudaStream_t st, const attn_geom &g, float *D, const __half *dout, const __half *out);

/* attention_simple.cu: the simple tiled kernels (any d <= ATTN_SIMPLE_MAX_D), F32 math on F32,
 * BF16 or F16 data. */
#define ATTN_SIMPLE_MAX_D 256
void attn_simple_fwd_f32(cudaStream_t st, const attn_geom &g, float *out, float *lse, const float *qkv);
void attn_simple_fwd_bf16(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse,
                          const __nv_bfloat16 *qkv);
void attn_simple_bwd_f32(cudaStream_t st, const attn_geom &g, float *dqkv, const float *dout, const float *qkv,
                         const float *lse, const float *D);
void attn_simple_bwd_bf16(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                          const __nv_bfloat16 *qkv, const float *lse, const float *D);
void attn_simple_fwd_f16(cudaStream_t st, const attn_geom &g, __half *out, float *lse, const __half *qkv);
void attn_simple_bwd_f16(cudaStream_t st, const attn_geom &g, __half *dqkv, const __half *dout, const __half *qkv,
                         const float *lse, const float *D);

/* attention_bf16_fwd.cu / attention_bf16_bwd.cu: tensor-core kernels for d = 64 and 128;
 * the caller checked d and 16-byte alignment. */
bool attn_mma_supported(int d);
void attn_mma_fwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv);
/* dq_acc NULL: deterministic (dQ by its own pass over the key tiles); otherwise a zeroed F32
 * [B, H, S, d] buffer of attn_mma_dq_acc_bytes(g) into which the key-side kernel adds dQ
 * with atomics (faster, but the summation order varies from run to run). */
size_t attn_mma_dq_acc_bytes(const attn_geom &g);
void attn_mma_bwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *qkv, const float *lse, const float *D, float *dq_acc);
/* Rope's tables for a dQ store that rotates (F32 [>= S, 32], 16-byte aligned, position =
 * sequence index). */
struct attn_rope {
    const float *cos, *sin;
};
/* The F32 dQ accumulator [B, H, S, d] into the q slots of dqkv (bf16); d 64 or 128. With
 * `parts` (d 64) also its column sums, into parts (attn_colsum_parts); with `rope` (d 64,
 * no parts) rotated back by it first (rope's backward). */
void attn_launch_dq_store(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const float *dq_acc,
                          float *parts, const attn_rope *rope);

/* dqkv's column sums from the kernels that write it (the wgmma backward with dq_acc):
 * partial sums over tiles of ATTN_COLSUM_ROWS positions, parts [cdiv(S, ROWS) B, ts] F32,
 * row tile B + b holding batch b's tile `tile` in qkv's column order: the q columns from
 * the dQ store, the k and v columns from the key-side kernel (whose 128-key blocks are
 * those tiles). Every element is written once; the column sums of parts, in row order,
 * are dqkv's (cuda_backend.cu adds them into the bias gradient). */
enum { ATTN_COLSUM_ROWS = 128 };
inline int64_t attn_colsum_parts(const attn_geom &g) {
    return (int64_t)((g.S + ATTN_COLSUM_ROWS - 1) / ATTN_COLSUM_ROWS) * g.B;
}

/* attention_wgmma_{fwd,bwd_pipe,dq}.cu: Hopper wgmma kernels for d = 64 without dropout or
 * seg_start, on a compute capability 9.0 device (attention.cu checks all that). The
 * backward (its key-side kernel software-pipelined) sums dQ into dq_acc (zeroed by the
 * caller) with bulk adds, or with dq_acc NULL (deterministic) forms it by attn_wg_dq's
 * separate pass. `parts` (with dq_acc only; else NULL): also dqkv's column-sum partials.
 * `rope` (optional): the dQ store may rotate dQ back by it (with dq_acc and no parts);
 * attn_wg_bwd_pipe returns whether it did. */
void attn_wg_fwd(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv);

bool attn_wg_bwd_pipe(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                      const __nv_bfloat16 *qkv, const float *lse, const float *D, float *dq_acc, float *parts,
                      const attn_rope *rope);
void attn_wg_dq(cudaStream_t st, const attn_geom &g, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                const __nv_bfloat16 *qkv, const float *lse, const float *D);

#endif