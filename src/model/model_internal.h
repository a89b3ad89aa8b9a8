/* model_internal.h: pieces shared by the model's source files. */
#ifndef MC_MODEL_INTERNAL_H
#define MC_MODEL_INTERNAL_H

#include "model/model.h"
#include "tensor/ops.h"

/* Fills m->params/nparams and the layer indices from m->cfg and the shard sizes, then the
 * offsets, buckets and numel for `layout` (NULL: one bucket, no padding multiple). */
void mc_model_build_table(mc_model *m, const mc_model_layout *layout);

/* Zeroes the gradient range the first backward's head borrowed (mc_model.borrow_lo..hi) but
 * its grad_overwritten parameters, after that head. */
void mc_model_zero_borrowed(mc_model *m);
/* Zeroes the hosted range (mc_model.host_hi), once the activations there are dead. */
void mc_model_zero_hosted(mc_model *m);

/* What the LM head's chunk (rows of logits at a time) is chosen from: `tokens` a
 * micro-batch, `vocab` logits a row of `elem` bytes; the bytes of the layers' backward
 * scratch the chunk shares (`scratch`) and of the activations the layers keep (`kept`);
 * the rows the gradient buffer lends the first backward's head (`borrow_rows`, GPU only)
 * and the micro-batches a step. mc_model_head_chunk (model.c) says the rule. */
typedef struct mc_head_plan {
    bool gpu;
    int64_t tokens, vocab, borrow_rows;
    int micro_batches;
    size_t elem, scratch, kept;
} mc_head_plan;

int64_t mc_model_head_chunk(const mc_head_plan *hp);

/* The bias gradients of the linears writing the residual stream (attention projection,
 * fc2) as column sums of the residual stream's gradient, summed by the norm backward that
 * updates it (its dxsum) instead of a pass of their own: where that gradient is the
 * branch's output gradient itself, without hidden dropout, and over all N tokens, without
 * sequence parallelism. */
static inline bool mc_model_bias_by_norm(const mc_model *m) {
    return m->cfg.hidden_dropout == 0.0f && !m->sp && m->cfg.add_bias_linear;
}

/* QKV's bias gradient as the column sums of dqkv, summed by the attention backward that
 * writes it (its dbias) instead of by QKV's weight-gradient GEMM: where nothing acts on
 * dqkv in between, i.e. without RoPE (whose backward rotates dq and dk after it). */
static inline bool mc_model_qkv_bias_by_attention(const mc_model *m) {
    return m->cfg.add_bias_linear && m->cfg.position_embedding_type != MC_POS_ROPE;
}

#endif
