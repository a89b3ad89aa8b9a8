/* model_internal.h: pieces shared by the model's source files. */
#ifndef MC_MODEL_INTERNAL_H
#define MC_MODEL_INTERNAL_H

#include <stdlib.h>

#include "model/model.h"

/* Fills m->params/nparams and the layer indices from m->cfg and the shard sizes, then the
 * offsets, buckets and numel for `layout` (NULL: one bucket, no padding multiple). */
void mc_model_build_table(mc_model *m, const mc_model_layout *layout);

/* Statistics dtype for activations of dtype `act`: F64 with F64 activations, else F32. */
static inline mc_dtype mc_model_stat_dtype(mc_dtype act) { return act == MC_F64 ? MC_F64 : MC_F32; }

/* fc1 and a tanh GELU as one op each way (linear_gelu_fwd / linear_dgelu_bwd), which a
 * backend can fuse into its GEMMs; fc1's bias gradient then comes from linear_dgelu_bwd
 * (the column sums of the GELU's input gradient, which a GEMM epilogue can form). fc1 is
 * column-parallel, so its bias and the GELU are local to each TP rank. */
static inline bool mc_model_fused_gelu(const mc_model *m) { return !m->cfg.swiglu && m->cfg.openai_gelu; }
static inline bool mc_model_fc1_bias_by_dgelu(const mc_model *m) {
    return mc_model_fused_gelu(m) && !getenv("MC_AB_NO_DGELU_BGRAD"); /* A/B switch, temporary */
}

/* The bias gradients of the linears writing the residual stream (attention projection,
 * fc2) as column sums of the residual stream's gradient, summed by the norm backward that
 * updates it (its dxsum) instead of a pass of their own: where that gradient is the
 * branch's output gradient itself, without hidden dropout, and over all N tokens, without
 * sequence parallelism. */
static inline bool mc_model_bias_by_norm(const mc_model *m) {
    return m->cfg.hidden_dropout == 0.0f && !m->sp && m->cfg.add_bias_linear &&
           !getenv("MC_AB_NO_NORMSUM"); /* A/B switch, temporary */
}

#endif
