#include "train/model_options.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

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
    /* MC_KEEP_ACTIVATIONS_APART=1: the activations in memory of their own always (tests
     * compare the two placements) */
    const char *apart = getenv("MC_KEEP_ACTIVATIONS_APART");
    o.keep_activations_apart = apart && strcmp(apart, "0") != 0;
    if (layout) o.layout = *layout;
    return o;
}

int mc_backend_from_config(const mc_config *cfg, mc_comm *comm, mc_backend **be, mc_err *err) {
    mc_device_choice dev = cfg->train.device;
    if (dev == MC_DEVICE_CUDA_ONLY || (dev == MC_DEVICE_AUTO && mc_backend_cuda_available())) {
        int device = mc_comm_pick_device(comm, err);
        if (device < 0) return MC_ERR;
        *be = mc_backend_cuda_create(device, err);
        if (!*be) return MC_ERR;
        (*be)->reproducible = cfg->train.deterministic_mode;
        /* every rank the same transport before any creates NCCL communicators (collective) */
        const bool over_mpi = cfg->parallel.distributed_backend == MC_DIST_MPI;
        if (comm->world_size > 1)
            MC_TRY(mc_comm_check_same_u64(&comm->world, over_mpi, "--distributed-backend", err));
        mc_comm_set_device_over_mpi(comm, over_mpi);
        return mc_comm_init_device(comm, *be, err);
    }
    *be = mc_backend_cpu_create();
    if (cfg->precision.bf16)
        mc_log_info("note: --bf16: the CPU backend computes in fp32 (bf16 applies on the CUDA backend)");
    if (cfg->precision.fp16)
        mc_log_info("note: --fp16: the CPU backend computes in fp32 (fp16 applies on the CUDA backend); loss scaling "
                    "and skipping overflowed steps still run");
    return MC_OK;
}

mc_dtype mc_model_dtype_from_config(const mc_config *cfg, const mc_backend *be) {
    if (be->device == MC_DEVICE_CUDA && cfg->precision.bf16) return MC_BF16;
    if (be->device == MC_DEVICE_CUDA && cfg->precision.fp16) return MC_F16;
    return MC_F32;
}
