/* attention_op.cu: the CUDA backend's attention entries: cuDNN's fused attention where it
 * takes the problem (attention_cudnn.h), else our flash-attention kernels (cuda_flash.h);
 * the backward's workspace, its QKV bias gradient and RoPE backward, and the sizes the
 * kernels take. */
#include "backend/cuda/cuda_internal.h"

#include <limits.h>
#include <stdio.h>

#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/attention_internal.h"
#include "backend/cuda/cuda_flash.h"

bool mc_cuda_attention_supports(const mc_op_sizes *s, mc_op_refusal *why) {
    const mc_attn_desc *d = s->attn;
    if (d->head_dim > ATTN_SIMPLE_MAX_D) { /* the simple kernels, which take every case the others do not */
        why->operand = "d.head_dim";
        snprintf(why->expected, sizeof why->expected, "head_dim <= %d", ATTN_SIMPLE_MAX_D);
        snprintf(why->given, sizeof why->given, "%d", d->head_dim);
        return false;
    }
    if (d->seq > INT_MAX / 2 || d->batch > INT_MAX / 2) { /* attn_geom's ints */
        why->operand = "d.seq";
        snprintf(why->expected, sizeof why->expected, "seq and batch <= %d", INT_MAX / 2);
        snprintf(why->given, sizeof why->given, "seq %lld, batch %lld", (long long)d->seq, (long long)d->batch);
        return false;
    }
    return true;
}

void mc_cuda_attention_fwd(mc_backend *be, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                           const mc_attn_desc *d) {
    mc_cuda_state *st = mc_cuda_st(be);
#ifdef MC_HAVE_CUDNN_ATTENTION
    if (mc_cudnn_attention_fwd(st, out, lse, qkv, d)) return;
#endif
    mc_cuda_flash_fwd(st->stream, out, lse, qkv, d);
    MC_CUDA_LAUNCHED(st, "attention_fwd");
}

/* dbias: from the kernels' partial column sums where they form them (not of rotated values),
 * else a pass over dqkv. Rope's backward: the query heads' by the dQ store where it can
 * (mc_cuda_flash_bwd's q_rotated), the rest by the rope kernel. */
void mc_cuda_attention_bwd(mc_backend *be, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                           const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "attention_bwd";
    const bool sums = mc_tensor_present(dbias), kernel_sums = sums && !d->rope;
    const int64_t width = (int64_t)(d->heads + 2 * d->groups) * d->head_dim;
#ifdef MC_HAVE_CUDNN_ATTENTION
    if (mc_cudnn_attention_bwd(st, dqkv, dout, qkv, out, lse, d)) {
        if (d->rope) mc_cuda_rope_heads(st, dqkv, d->rope, true, false);
        if (sums) mc_cuda_colsum_add(st, op, (float *)dbias->data, dqkv->data, dqkv->dtype, d->seq * d->batch, width);
        return;
    }
#endif
    size_t bytes = mc_cuda_flash_bwd_workspace(d, qkv->dtype, kernel_sums);
    void *ws = bytes ? mc_cuda_workspace(st, bytes, op) : NULL;
    const float *parts = NULL;
    bool q_rotated = false;
    int64_t rows = mc_cuda_flash_bwd(st->stream, ws, bytes, dqkv, dout, qkv, out, lse, d, kernel_sums, &parts,
                                     d->rope ? &q_rotated : NULL);
    MC_CUDA_LAUNCHED(st, op);
    if (d->rope) mc_cuda_rope_heads(st, dqkv, d->rope, true, q_rotated);
    if (!sums) return;
    if (rows > 0) mc_cuda_colsum_parts_add(st, op, (float *)dbias->data, parts, rows, width);
    else mc_cuda_colsum_add(st, op, (float *)dbias->data, dqkv->data, dqkv->dtype, d->seq * d->batch, width);
}
