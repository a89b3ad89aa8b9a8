/* optimizer.h: Megatron's `adam` (AdamW) over the model's flat buffers, with global
 * gradient-norm clipping, plain or distributed (--use-distributed-optimizer).
 *
 * State is F32: master weights, exp_avg and exp_avg_sq. Plain: the state covers every
 * parameter; the master is the model's own parameter buffer when that is F32. With BF16
 * parameters it is split by default (store_param_remainders, as Megatron-Core's and
 * Transformer Engine's FusedAdam): the model's BF16 parameters are its high halves
 * (rounded to nearest, ties away from zero: tensor/backend.h's mc_master_hi) and
 * param_lo holds its low halves, so it costs 2 bytes a parameter instead of 4 and keeps
 * the F32 values exactly. Otherwise (F16 parameters, or --no-store-param-remainders) the
 * master is an F32 copy whose update is written back into the model's low-precision
 * buffer, rounded to nearest even. Distributed (Megatron's DistributedOptimizer): each
 * data-parallel rank keeps the state of its shard only: shard r of every gradient bucket
 * (model.h), whose gradients the reduce-scatter delivered; it updates that shard and
 * writes it into the model's parameter buffer, and the all-gather (optim/ddp.h) brings the
 * other shards.
 *
 * Bytes a parameter of state (this rank's share of it when distributed): exp_avg and
 * exp_avg_sq 8, plus the master 4 (an F32 copy), 2 (split) or 0 (plain with F32
 * parameters, which are the master). */
#ifndef MC_OPTIM_OPTIMIZER_H
#define MC_OPTIM_OPTIMIZER_H

#include "megatron.h"
#include "model/model.h"
#include "tensor/backend.h"

typedef struct mc_optimizer {
    mc_model *model;
    mc_backend *be;
    float beta1, beta2, eps, clip_grad;
    bool sharded;         /* distributed optimizer */
    int dp_size, dp_rank; /* over the data-parallel (x context-parallel) group */
    float *master;        /* [state_numel] F32 (model->param_buf when plain and F32; NULL when split) */
    bool owns_master;
    bool split_master;    /* the master as the model's BF16 parameters and param_lo */
    uint16_t *param_lo;   /* [state_numel] the split master's low halves */
    float *exp_avg, *exp_avg_sq;
    int64_t state_numel;
    /* This rank's update segments (parameter x shard intersections); no_wd marks biases
     * and norm weights, whose weight decay is 0. */
    mc_adamw_segment *segments;
    bool *no_wd;
    int nsegments;
    /* Ranges of the gradient buffer this rank counts in norms (shards, minus
     * tensor-parallel duplicates), and the same ranges in the state buffer. */
    mc_adamw_segment *norm_segments, *state_norm_segments;
    int nnorm;
    int64_t step;         /* optimizer steps taken */
    /* Sums of squares in backend memory ([0] gradients, [1] parameters), and the gradients'
     * copied back to the host behind each step (read by mc_optimizer_finish_step). */
    double *sumsq_dev, *sumsq_host;
    double pending_loss_scale; /* > 0 between mc_optimizer_step and mc_optimizer_finish_step */
} mc_optimizer;

/* mc_optimizer_plan then mc_optimizer_alloc. */
int mc_optimizer_create(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err);
/* The segments and the state's size, from the model's plan (mc_model_plan); nothing
 * allocated. */
int mc_optimizer_plan(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err);
/* Backend bytes mc_optimizer_alloc takes: the moments, and the master (or its low halves)
 * unless it is the model's own buffer. */
size_t mc_optimizer_state_bytes(const mc_optimizer *o);
/* Allocates the state, the master as the exact widening of the model's parameters (so
 * after they are initialized; split, its low halves are zero). */
void mc_optimizer_alloc(mc_optimizer *o);
void mc_optimizer_free(mc_optimizer *o);
/* After the model's parameters were set again from scratch (a fresh start): the master
 * widened from them again. */
void mc_optimizer_reset_master(mc_optimizer *o);

/* Readers of the exact F32 master (checkpoint saves, the params norm): between
 * mc_optimizer_master_join and mc_optimizer_master_release, mc_optimizer_master_of(o, s)
 * is where segment s's master starts. A split master is joined into the model's gradient
 * buffer at the segments' grad offsets and released by zeroing those ranges there, so the
 * buffer must not hold gradients (mc_model.grads_held: none since the last step or the
 * allocation; it then holds zeros and stale values the next backward overwrites). Not
 * split, the two calls do nothing. The join is queued on the backend's stream. */
void mc_optimizer_master_join(mc_optimizer *o);
const float *mc_optimizer_master_of(const mc_optimizer *o, int segment);
void mc_optimizer_master_release(mc_optimizer *o);

/* The global L2 norm of the parameters' F32 master (--log-params-norm); waits for the
 * device. Split, it borrows the gradient buffer as mc_optimizer_master_join does. */
double mc_optimizer_params_norm(mc_optimizer *o);
int64_t mc_optimizer_count_zeros(mc_optimizer *o);

/* Queues one AdamW step with learning rate lr and weight decay wd (not applied to norms and
 * biases), clipped by the global gradient norm, and the zeroing of the gradients; returns
 * without waiting. The norm (tensor-parallel duplicates counted once, as Megatron's
 * get_grad_norm_fp32, after the data-parallel reduction) is the square root of a sum of
 * squares formed and reduced over the ranks holding other parts on the device, in a fixed
 * order, so every rank gets the same bits; the update reads it there (mc_adamw_desc): grads
 * are multiplied by 1 / loss_scale (fp16's, else 1) and Megatron's clip coefficient
 * min(1, clip/(norm+1e-6)) of the unscaled norm, in one factor. The norm is inf or NaN
 * exactly when some gradient is, and the update then writes nothing: fp16's found_inf,
 * agreed by all ranks. (Duplicates left out are bitwise copies of counted gradients, and
 * data-parallel replicas are identical after the all-reduce.) Writes this rank's updated
 * parameters into the model's buffer. */
void mc_optimizer_step(mc_optimizer *o, double lr, double wd, double loss_scale);
/* After mc_optimizer_step: waits for the norm that step used (not for the update) and
 * stores the unscaled norm in *grad_norm. Returns whether the step was taken: false when the
 * norm is not finite, in which case parameters, moments and the step count are as before
 * (the caller skips the iteration on fp16 or reports the error). */
bool mc_optimizer_finish_step(mc_optimizer *o, double *grad_norm);

#endif
