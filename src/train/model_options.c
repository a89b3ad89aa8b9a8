#include "train/model_options.h"

mc_model_options mc_model_options_from_config(const mc_config *cfg, int dp, mc_dtype param_dtype, mc_dtype grad_dtype,
                                              mc_dtype act_dtype, int64_t max_batch, const mc_model_layout *layout) {
    mc_model_options o = {
        .cfg = cfg->model,
        .padded_vocab = mc_config_padded_vocab(cfg),
        .seed = cfg->train.seed,
        .sequence_parallel = cfg->parallel.sequence_parallel,
        .selective_recompute = cfg->train.recompute_granularity == 1,
        .deterministic = cfg->train.deterministic_mode,
        .micro_batches = mc_config_num_microbatches(cfg, dp),
        .max_batch = max_batch,
        .param_dtype = param_dtype,
        .grad_dtype = grad_dtype,
        .act_dtype = act_dtype,
    };
    if (layout) o.layout = *layout;
    return o;
}
