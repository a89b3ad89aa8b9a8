/* ddp.h: data-parallel gradient reduction and parameter gathering over the model's
 * buckets (Megatron's DistributedDataParallel + the distributed optimizer's all-gather).
 *
 * Gradients are summed over the data-parallel x context-parallel group (each micro-batch's
 * loss is already scaled by 1/(tokens x micro-batches x DP), so the sum is the average).
 * Plain: each bucket is all-reduced. Distributed optimizer: each bucket is reduce-scattered
 * so that rank r holds the reduced shard r, and after the update the parameter shards are
 * all-gathered back into every rank's full buffer.
 * Overlap (--overlap-grad-reduce): during the last micro-batch's backward, a bucket's
 * reduction starts as soon as the model reports its gradients final (the hooks in
 * model.h), buckets in backward order. --overlap-param-gather: the all-gathers are issued
 * after the step and each is waited for just before the forward reads its parameters. */
#ifndef MC_OPTIM_DDP_H
#define MC_OPTIM_DDP_H

#include <stdbool.h>

#include "comm/comm.h"
#include "model/model.h"

typedef struct mc_ddp {
    mc_model *model;
    mc_group *group;        /* data parallel x context parallel */
    bool sharded, overlap_grad, overlap_param;
    bool reducing;          /* this micro-batch's backward reduces (the last one of the step) */
    int next_bucket;        /* next bucket (backward order) whose reduction to start */
    mc_comm_work **grad_work;  /* per bucket: the reduction in flight */
    mc_comm_work **param_work; /* per bucket: the parameter all-gather in flight */
    float *kv_scratch;         /* [groups, 2d, h] F32, for replicated key/value rows */
    int64_t kv_scratch_numel;
} mc_ddp;

/* Installs the model hooks. Also sums the gradients that are partial over TP ranks
 * (model.h, mc_grad_sync) once per step, before their bucket's data-parallel reduction:
 * Megatron's finalize_model_grads does the same for sequence-parallel norms. */
void mc_ddp_init(mc_ddp *d, mc_model *m, bool sharded, bool overlap_grad, bool overlap_param);
void mc_ddp_free(mc_ddp *d);

/* Before each micro-batch's forward/backward: `last` is the step's last micro-batch. */
void mc_ddp_begin_microbatch(mc_ddp *d, bool last);
/* After the last backward: starts what is not started and waits for every reduction. */
void mc_ddp_finish_grads(mc_ddp *d);
/* After the optimizer step (sharded only): all-gathers the parameters; waits unless
 * overlap_param, in which case the forward's hooks wait bucket by bucket. */
void mc_ddp_gather_params(mc_ddp *d);
/* Waits for every pending parameter gather (before anything reads all parameters). */
void mc_ddp_wait_params(mc_ddp *d);

/* The bucket layout the config asks for, for mc_model_create. */
mc_model_layout mc_ddp_layout(const mc_config *cfg, int dp_cp_size);

#endif
