/* model_internal.h: pieces shared by the model's source files. */
#ifndef MC_MODEL_INTERNAL_H
#define MC_MODEL_INTERNAL_H

#include "model/model.h"

/* Fills m->params/nparams and the layer indices from m->cfg and the shard sizes, then the
 * offsets, buckets and numel for `layout` (NULL: one bucket, no padding multiple). */
void mc_model_build_table(mc_model *m, const mc_model_layout *layout);

/* Statistics dtype for activations of dtype `act`: F64 with F64 activations, else F32. */
static inline mc_dtype mc_model_stat_dtype(mc_dtype act) { return act == MC_F64 ? MC_F64 : MC_F32; }

#endif
