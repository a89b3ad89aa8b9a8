/* model_options.h: the model's inputs (mc_model_options, model/model.h) from a validated
 * mc_config: the one place the train layer hands the model what it derived from the
 * configuration (the padded vocabulary, the micro-batches a step, the parallel and
 * recomputation switches, the device and the precision), so that the model never reads
 * back into train/config.c. The trainer and generation's inference model (generate/) build
 * from these alike. */
#ifndef MC_TRAIN_MODEL_OPTIONS_H
#define MC_TRAIN_MODEL_OPTIONS_H

#include "comm/comm.h"
#include "megatron.h"
#include "model/model.h"

/* cfg validated (mc_config_validate) for a data-parallel size dp; the dtypes of the
 * parameters, gradients and activations; micro-batches of up to max_batch sequences;
 * layout NULL: one bucket. */
mc_model_options mc_model_options_from_config(const mc_config *cfg, int dp, mc_dtype param_dtype, mc_dtype grad_dtype,
                                              mc_dtype act_dtype, int64_t max_batch, const mc_model_layout *layout);

/* The backend --device asks for (auto: CUDA when a GPU is visible), on this rank's GPU with
 * the comm layer's device transport set up (--deterministic-mode: reproducible); a note
 * when the CPU computes in fp32 what --bf16 or --fp16 asked for. */
int mc_backend_from_config(const mc_config *cfg, mc_comm *comm, mc_backend **be, mc_err *err);
/* The parameters' and activations' dtype on be: BF16 or F16 on CUDA with --bf16 or --fp16,
 * else F32. */
mc_dtype mc_model_dtype_from_config(const mc_config *cfg, const mc_backend *be);

#endif
