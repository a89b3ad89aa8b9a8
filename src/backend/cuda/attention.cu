/* attention.cu: the flash-attention kernels' launch interface (cuda_flash.h): the choice
 * of kernel, the backward workspace, and the one small kernel both paths share,
 * D = rowsum(dO * O). The op entries over it are attention_op.cu's.
 *
 * Kernel choice:
 *   - BF16, head_dim 64, no dropout, no seg_start, 16-byte aligned operands, on a compute
 *     capability 9.0 GPU: the Hopper wgmma kernels (attention_wgmma_fwd.cu, the
 *     software-pipelined key-side backward of attention_wgmma_bwd_pipe.cu, and
 *     attention_wgmma_dq.cu for the deterministic backward's separate dQ pass);
 *   - other BF16 cases with head_dim 64 or 128 and 16-byte aligned operands: the tensor-core
 *     FlashAttention-2 kernels (attention_bf16_fwd.cu, attention_bf16_bwd.cu);
 *   - everything else (F32, F16, other head dims up to 256): the simple tiled kernels of
 *     attention_simple.cu, F32 math (they are what the F32 CPU-equivalence tests run;
 *     F16, used by --fp16 only, is slow there but exact enough).
 * MC_ATTN_SIMPLE=1 in the environment forces the simple kernels for BF16 too (to bisect a
 * wrong result between the paths); MC_ATTN_WGMMA=0 turns the wgmma kernels off (the
 * mma.sync ones run instead: for timing one against the other and for bisection).
 *
 * Backward workspace: D [B, heads, S] F32, rounded up to 256 bytes; unless the descriptor
 * asks for a deterministic backward, the tensor-core path also takes an F32 dQ
 * accumulator [B, heads, S, d] that the key-side kernel adds into (atomics, or the wgmma
 * kernel's bulk adds; which
 * saves recomputing S and dP in a separate dQ pass; see attention_bf16_bwd.cu), and when
 * dqkv's column sums are asked for (a QKV bias gradient), room for the partial sums the
 * wgmma backward forms as it writes dqkv (attn_colsum_parts): about 4.7 MB on GPT-2's
 * bench shape, against the pass over dqkv (0.3 GB) that summing it afterwards reads. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/attention_internal.h"
#include "backend/cuda/cuda_flash.h"

/* ---------------------------------------------------------------- D = rowsum(dO * O) */

/* One warp per (s, b, h) row of out; D is [B, H, S]. */
template <typename T>
__global__ void __launch_bounds__(256) attn_rowdot_kernel(attn_geom g, float *D, const T *dout, const T *out) {
    const int64_t nrows = (int64_t)g.S * g.B * g.H;
    const int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= nrows) return; /* whole warps leave together: row is warp-uniform */
    const int h = (int)(row % g.H);
    const int b = (int)((row / g.H) % g.B);
    const int64_t s = row / ((int64_t)g.H * g.B);
    const T *o = out + row * g.d, *dO = dout + row * g.d;
    float acc = 0.0f;
    for (int c = lane; c < g.d; c += 32) acc += attn_load(dO + c) * attn_load(o + c);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) D[attn_row_off(g, s, b, h)] = acc;
}

template <typename T>
static void attn_launch_rowdot(cudaStream_t st, const attn_geom &g, float *D, const T *dout, const T *out) {
    const int64_t nrows = (int64_t)g.S * g.B * g.H;
    const int64_t blocks = (nrows + 7) / 8;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: %lld rows is too many", (long long)nrows);
    attn_rowdot_kernel<T><<<(unsigned)blocks, 256, 0, st>>>(g, D, dout, out);
    ATTN_CHECK_LAUNCH("attn_rowdot_kernel");
}

void attn_launch_rowdot_f32(cudaStream_t st, const attn_geom &g, float *D, const float *dout, const float *out) {
    attn_launch_rowdot<float>(st, g, D, dout, out);
}
/* BF16 with d a multiple of 8 and 16-byte aligned rows: d / 8 threads a row, 16-byte loads
 * (the warp-per-row kernel above reads 2 bytes a lane: ~1 TB/s, measured); also zeroes the
 * row's dQ accumulator when there is one (instead of a separate memset). */
template <int TPR>
__global__ void __launch_bounds__(256) attn_rowdot_vec_kernel(attn_geom g, float *D, float *dq_zero,
                                                              const __nv_bfloat16 *dout, const __nv_bfloat16 *out) {
    const int64_t nrows = (int64_t)g.S * g.B * g.H;
    const int64_t row = ((int64_t)blockIdx.x * 256 + threadIdx.x) / TPR;
    const int c = (int)(threadIdx.x % TPR);
    const bool ok = row < nrows; /* every lane stays for the shuffles below */
    const int h = (int)(row % g.H);
    const int b = (int)((row / g.H) % g.B);
    const int64_t s = row / ((int64_t)g.H * g.B);
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
    const uint4 o = ok ? *reinterpret_cast<const uint4 *>(out + row * g.d + c * 8) : zero4;
    const uint4 dO = ok ? *reinterpret_cast<const uint4 *>(dout + row * g.d + c * 8) : zero4;
    const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&o), *d2 = reinterpret_cast<const __nv_bfloat162 *>(&dO);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 a = __bfloat1622float2(o2[k]), e = __bfloat1622float2(d2[k]);
        acc += a.x * e.x + a.y * e.y;
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (!ok) return;
    const int64_t r = attn_row_off(g, s, b, h);
    if (c == 0) D[r] = acc;
    if (dq_zero) {
        float4 *z = reinterpret_cast<float4 *>(dq_zero + r * g.d + c * 8);
        z[0] = z[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

void attn_launch_rowdot_bf16(cudaStream_t st, const attn_geom &g, float *D, float *dq_zero, const __nv_bfloat16 *dout,
                             const __nv_bfloat16 *out) {
    const bool vec = (g.d == 64 || g.d == 128) && ((uintptr_t)dout & 15) == 0 && ((uintptr_t)out & 15) == 0;
    if (!vec) {
        attn_launch_rowdot<__nv_bfloat16>(st, g, D, dout, out);
        if (dq_zero) ATTN_CUDA(cudaMemsetAsync(dq_zero, 0, (size_t)g.B * g.H * g.S * g.d * sizeof(float), st));
        return;
    }
    const int64_t threads = (int64_t)g.S * g.B * g.H * (g.d / 8), blocks = (threads + 255) / 256;
    MC_ASSERT(blocks <= INT_MAX, "cuda attention: %lld rows is too many", (long long)(threads / (g.d / 8)));
    if (g.d == 64)
        attn_rowdot_vec_kernel<8><<<(unsigned)blocks, 256, 0, st>>>(g, D, dq_zero, dout, out);
    else
        attn_rowdot_vec_kernel<16><<<(unsigned)blocks, 256, 0, st>>>(g, D, dq_zero, dout, out);
    ATTN_CHECK_LAUNCH("attn_rowdot_vec_kernel");
}
void attn_launch_rowdot_f16(cudaStream_t st, const attn_geom &g, float *D, const __half *dout, const __half *out) {
    attn_launch_rowdot<__half>(st, g, D, dout, out);
}

/* ---------------------------------------------------------------- dispatch */

/* The geometry of d. */
static attn_geom attn_geometry(const mc_attn_desc *d) {
    attn_geom g;
    memset(&g, 0, sizeof g);
    g.S = (int)d->seq;
    g.B = (int)d->batch;
    g.H = d->heads;
    g.G = d->groups;
    g.hpg = d->heads / d->groups;
    g.d = d->head_dim;
    g.ts = (int64_t)(d->heads + 2 * d->groups) * d->head_dim;
    g.row_stride = g.ts * g.B;
    g.scale = d->softmax_scale;
    g.scale_log2 = d->softmax_scale * ATTN_LOG2E;
    g.dropout = d->dropout;
    g.keep_scale = 1.0f / (1.0f - d->dropout);
    g.seed = d->seed;
    g.stream = d->stream;
    if (mc_tensor_present(&d->seg_start)) g.seg = (const int32_t *)d->seg_start.data;
    return g;
}

static bool attn_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static bool attn_force_simple(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("MC_ATTN_SIMPLE");
        cached = (e && e[0] && strcmp(e, "0") != 0) ? 1 : 0;
    }
    return cached == 1;
}

/* The tensor-core path: BF16, d in {64, 128}, every operand 16-byte aligned (the kernels
 * move 16-byte chunks; with d a multiple of 8 every row then starts aligned too). */
static bool attn_use_mma(const attn_geom &g, mc_dtype dt, const void *a, const void *b, const void *c, const void *e) {
    if (dt != MC_BF16 || !attn_mma_supported(g.d) || attn_force_simple()) return false;
    return attn_aligned16(a) && attn_aligned16(b) && (!c || attn_aligned16(c)) && (!e || attn_aligned16(e));
}

static bool attn_env_off(const char *name) {
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}

/* Whether the current device runs sm_90a code (wgmma), cached per device. */
static bool attn_device_is_sm90(void) {
    static signed char cache[64];
    int dev = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return false;
    if (cache[dev] == 0) {
        int major = 0, minor = 0;
        ATTN_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        ATTN_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        cache[dev] = (major == 9 && minor == 0) ? 1 : -1;
    }
    return cache[dev] == 1;
}

/* The wgmma path: see the kernel choice above (the caller checked alignment via attn_use_mma). */
static bool attn_use_wgmma(const attn_geom &g) { /* (the environment read at every call: tests switch paths) */
    return !attn_env_off("MC_ATTN_WGMMA") && g.d == 64 && g.dropout == 0.0f && !g.seg && attn_device_is_sm90();
}

extern "C" void mc_cuda_flash_fwd(cudaStream_t stream, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                                  const mc_attn_desc *d) {
    const attn_geom g = attn_geometry(d);
    const mc_dtype dt = qkv->dtype;
    if (dt == MC_F32) {
        attn_simple_fwd_f32(stream, g, (float *)out->data, (float *)lse->data, (const float *)qkv->data);
    } else if (dt == MC_F16) {
        attn_simple_fwd_f16(stream, g, (__half *)out->data, (float *)lse->data, (const __half *)qkv->data);
    } else if (attn_use_mma(g, dt, qkv->data, out->data, NULL, NULL) && attn_use_wgmma(g)) {
        attn_wg_fwd(stream, g, (__nv_bfloat16 *)out->data, (float *)lse->data, (const __nv_bfloat16 *)qkv->data);
    } else if (attn_use_mma(g, dt, qkv->data, out->data, NULL, NULL)) {
        attn_mma_fwd(stream, g, (__nv_bfloat16 *)out->data, (float *)lse->data, (const __nv_bfloat16 *)qkv->data);
    } else {
        attn_simple_fwd_bf16(stream, g, (__nv_bfloat16 *)out->data, (float *)lse->data,
                             (const __nv_bfloat16 *)qkv->data);
    }
}

static size_t attn_round256(size_t n) { return (n + 255) / 256 * 256; }
static size_t attn_d_bytes(const mc_attn_desc *d) {
    return attn_round256((size_t)d->batch * (size_t)d->heads * (size_t)d->seq * sizeof(float));
}
/* The tensor-core backward sums dQ in F32 in a varying order unless asked to be deterministic. */
static bool attn_fused_dq(const mc_attn_desc *d, mc_dtype dt) {
    return !d->deterministic && dt == MC_BF16 && attn_mma_supported(d->head_dim) && !attn_force_simple();
}
static size_t attn_dq_acc_bytes(const mc_attn_desc *d) {
    return attn_round256((size_t)d->batch * (size_t)d->heads * (size_t)d->seq * (size_t)d->head_dim * sizeof(float));
}

/* Room for the partial column sums (attn_colsum_parts) where the backward may form them:
 * the wgmma path with a dQ accumulator (whether it runs is known only with the operands). */
static size_t attn_parts_bytes(const mc_attn_desc *d, mc_dtype dt) {
    if (!attn_fused_dq(d, dt) || d->head_dim != 64) return 0;
    const int64_t rows = (d->seq + ATTN_COLSUM_ROWS - 1) / ATTN_COLSUM_ROWS * d->batch;
    const int64_t ts = (int64_t)(d->heads + 2 * d->groups) * d->head_dim;
    return attn_round256((size_t)(rows * ts) * sizeof(float));
}

extern "C" size_t mc_cuda_flash_bwd_workspace(const mc_attn_desc *d, mc_dtype dtype, bool colsums) {
    return attn_d_bytes(d) + (attn_fused_dq(d, dtype) ? attn_dq_acc_bytes(d) : 0) +
           (colsums ? attn_parts_bytes(d, dtype) : 0);
}

/* Whether the dQ store can rotate by d->rope: all of head_dim 64 rotated, positions = the
 * sequence index, F32 tables of 32 aligned columns covering the sequence. */
static bool attn_rope_in_dq_store(const mc_attn_desc *d) {
    const mc_rope_desc *r = d->rope;
    return r && r->rot_dim == 64 && r->head_dim == 64 && d->head_dim == 64 && r->seq == d->seq &&
           r->batch == d->batch && r->heads == d->heads && r->groups == d->groups && !mc_tensor_present(&r->pos) &&
           r->cos.dtype == MC_F32 && r->sin.dtype == MC_F32 && r->cos.ndim == 2 && r->sin.ndim == 2 &&
           r->cos.shape[1] == 32 && r->sin.shape[1] == 32 && r->cos.shape[0] >= d->seq && r->sin.shape[0] >= d->seq &&
           ((uintptr_t)r->cos.data & 15) == 0 && ((uintptr_t)r->sin.data & 15) == 0;
}

extern "C" int64_t mc_cuda_flash_bwd(cudaStream_t stream, void *workspace, size_t workspace_bytes, mc_tensor *dqkv,
                                     const mc_tensor *dout, const mc_tensor *qkv, const mc_tensor *out,
                                     const mc_tensor *lse, const mc_attn_desc *d, bool colsums, const float **parts,
                                     bool *q_rotated) {
    if (q_rotated) *q_rotated = false;
    const attn_geom g = attn_geometry(d);
    const mc_dtype dt = qkv->dtype;
    const size_t need = mc_cuda_flash_bwd_workspace(d, dt, colsums);
    MC_ASSERT(workspace && workspace_bytes >= need, "cuda attention_bwd: workspace of %zu bytes, %zu needed",
              workspace_bytes, need);
    float *D = (float *)workspace;
    if (dt == MC_F32) {
        attn_launch_rowdot_f32(stream, g, D, (const float *)dout->data, (const float *)out->data);
        attn_simple_bwd_f32(stream, g, (float *)dqkv->data, (const float *)dout->data, (const float *)qkv->data,
                            (const float *)lse->data, D);
        return 0;
    }
    if (dt == MC_F16) {
        attn_launch_rowdot_f16(stream, g, D, (const __half *)dout->data, (const __half *)out->data);
        attn_simple_bwd_f16(stream, g, (__half *)dqkv->data, (const __half *)dout->data, (const __half *)qkv->data,
                            (const float *)lse->data, D);
        return 0;
    }
    const __nv_bfloat16 *dO = (const __nv_bfloat16 *)dout->data, *O = (const __nv_bfloat16 *)out->data,
                        *x = (const __nv_bfloat16 *)qkv->data;
    __nv_bfloat16 *dx = (__nv_bfloat16 *)dqkv->data;
    float *dq_acc = attn_fused_dq(d, dt) ? (float *)((char *)workspace + attn_d_bytes(d)) : NULL;
    attn_launch_rowdot_bf16(stream, g, D, dq_acc, dO, O); /* also zeroes dq_acc */
    if (attn_use_mma(g, dt, x, dx, dO, NULL) && attn_use_wgmma(g)) {
        float *p = colsums && dq_acc ? (float *)((char *)dq_acc + attn_dq_acc_bytes(d)) : NULL;
        attn_rope tabs = {NULL, NULL};
        const bool rotate = q_rotated && !p && attn_rope_in_dq_store(d);
        if (rotate) tabs.cos = (const float *)d->rope->cos.data, tabs.sin = (const float *)d->rope->sin.data;
        const bool rotated = attn_wg_bwd_pipe(stream, g, dx, dO, x, (const float *)lse->data, D, dq_acc, p,
                                              rotate ? &tabs : NULL);
        if (q_rotated) *q_rotated = rotated;
        if (p) {
            *parts = p;
            return attn_colsum_parts(g);
        }
    } else if (attn_use_mma(g, dt, x, dx, dO, NULL)) {
        attn_mma_bwd(stream, g, dx, dO, x, (const float *)lse->data, D, dq_acc);
    } else {
        attn_simple_bwd_bf16(stream, g, dx, dO, x, (const float *)lse->data, D);
    }
    return 0;
}
