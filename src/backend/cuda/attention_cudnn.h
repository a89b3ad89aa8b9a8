/* attention_cudnn.h: causal attention through cuDNN's fused flash attention (its SDPA
 * graphs, built with the cuDNN frontend), the CUDA backend's first choice where cuDNN takes
 * the problem; attention_op.cu falls back to our own kernels (cuda_flash.h) where it does
 * not. Why: on the H200 cuDNN's SDPA is the fastest attention there is, well ahead of
 * FlashAttention-2 at head dims 64 and 128 (figures in bench/RESULTS.md), so it is the bar
 * our own kernels are measured against, and the path the training shapes take meanwhile.
 *
 * Same semantics and layouts as mc_backend.attention_fwd/bwd (tensor/backend.h): packed
 * per-group QKV [S, B, G, H/G + 2, d], out [S, B, H, d], lse [B, H, S] F32 (the natural
 * log-sum-exp of the scaled scores, which is also what cuDNN's softmax statistics are, so
 * a forward here and a backward on our kernels, or the reverse, agree). Taken: BF16 and F16,
 * no dropout, no document mask (seg_start), head_dim a multiple of 8 up to 256, and a graph
 * cuDNN builds for the shape (with --deterministic-mode its deterministic backward).
 *
 * libcudnn.so.9 is loaded at run time (dlopen): a machine without it runs our kernels.
 * MC_ATTN_CUDNN=0 (or MC_ATTN_SIMPLE=1) turns this path off. C interface over the C++
 * frontend (the one C++ file the CUDA backend has: cuDNN's SDPA is offered through it). */
#ifndef MC_BACKEND_CUDA_ATTENTION_CUDNN_H
#define MC_BACKEND_CUDA_ATTENTION_CUDNN_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_cuda_state;

/* Runs the forward through cuDNN and returns true, or returns false having launched nothing
 * (the caller then runs its own kernels). */
bool mc_cudnn_attention_fwd(struct mc_cuda_state *st, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                            const mc_attn_desc *d);

/* The backward, likewise: dqkv fully overwritten (RoPE's backward and the bias sums are the
 * caller's, as with the kernels of cuda_flash.h). */
bool mc_cudnn_attention_bwd(struct mc_cuda_state *st, mc_tensor *dqkv, const mc_tensor *dout, const mc_tensor *qkv,
                            const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d);

/* Frees the handle and the cached graphs of this state (cuda_destroy). */
void mc_cudnn_attention_release(struct mc_cuda_state *st);

/* Query heads between the packed QKV and a plain [S, B, H, d] buffer (cuDNN wants each head
 * at an affine offset, which the per-group layout gives the keys and values but not the
 * queries once groups hold several; attention_qpack.cu). Unpack writes only the query
 * slots of qkv. */
void mc_cuda_qheads_pack(struct mc_cuda_state *st, void *q, const void *qkv, const mc_attn_desc *d, mc_dtype dt);
void mc_cuda_qheads_unpack(struct mc_cuda_state *st, void *qkv, const void *q, const mc_attn_desc *d, mc_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
