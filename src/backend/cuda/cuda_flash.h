/* cuda_flash.h: causal flash attention on the GPU, the kernels' launch interface under the
 * CUDA backend's attention entries (attention_op.cu), which tests/test_cuda_attention.c
 * also drives directly. Semantics are exactly mc_backend.attention_fwd/bwd
 * (tensor/backend.h): packed per-group QKV [S, B, groups, heads/groups + 2, d], output
 * [S, B, heads, d], lse [B, heads, S] F32, GQA, optional seg_start, dropout on
 * probabilities from Philox with the element index ((b*heads + h)*S + i)*S + j. F32, BF16
 * and F16 activations (F32 accumulation). Operands as the op layer (tensor/ops.h) checks
 * them, head_dim and sizes within mc_cuda_attention_supports. Every launch goes on
 * `stream`; nothing is allocated here. */
#ifndef MC_BACKEND_CUDA_FLASH_H
#define MC_BACKEND_CUDA_FLASH_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void mc_cuda_flash_fwd(cudaStream_t stream, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                       const mc_attn_desc *d);

/* Scratch bytes attention_bwd needs for this shape and dtype (D = rowsum(dO * O), dQ's F32
 * accumulator; with `colsums` room for the partial column sums below). */
size_t mc_cuda_flash_bwd_workspace(const mc_attn_desc *d, mc_dtype dtype, bool colsums);

/* dqkv fully overwritten. Bitwise reproducible when d->deterministic; otherwise dQ may be
 * summed with floating-point atomics (run-to-run differences at rounding level). With
 * `colsums` (and the workspace sized for them), the kernels that can also sum dqkv's
 * columns as they write it (the wgmma backward with its dQ accumulator) do: *parts then
 * points into the workspace at F32 partial sums [rows, qkv width] whose column sums, in
 * row order, are dqkv's (of the F32 values before rounding), and the return is rows, a
 * deterministic function of the shape; 0 when they did not, leaving the sums to the
 * caller. d->rope is not applied here, except that with q_rotated (optional) the dQ store
 * may rotate the query heads' gradient back by it (rope's backward, on the F32 values) and
 * says so in *q_rotated (then not with colsums): the caller rotates what is left. */
int64_t mc_cuda_flash_bwd(cudaStream_t stream, void *workspace, size_t workspace_bytes, mc_tensor *dqkv,
                          const mc_tensor *dout, const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse,
                          const mc_attn_desc *d, bool colsums, const float **parts, bool *q_rotated);

#ifdef __cplusplus
}
#endif

#endif
