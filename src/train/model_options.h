/* model_options.h: the model's inputs (mc_model_options, model/model.h) from a validated
 * mc_config: the one place the train layer hands the model what it derived from the
 * configuration (the padded vocabulary, the micro-batches a step, the parallel and
 * recomputation switches), so that the model never reads back into train/config.c. */
#ifndef MC_TRAIN_MODEL_OPTIONS_H
#define MC_TRAIN_MODEL_OPTIONS_H

#include "megatron.h"
#include "model/model.h"

/* cfg validated (mc_config_validate) for a data-parallel size dp; the dtypes of the
 * parameters, gradients and activations; micro-batches of up to max_batch sequences;
 * layout NULL: one bucket. */
mc_model_options mc_model_options_from_config(const mc_config *cfg, int dp, mc_dtype param_dtype, mc_dtype grad_dtype,
                                              mc_dtype act_dtype, int64_t max_batch, const mc_model_layout *layout);

#endif
