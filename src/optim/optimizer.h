/* optimizer.h: Megatron's `adam` (AdamW) over the model's flat buffers, with global
 * gradient-norm clipping.
 *
 * State is F32: master weights (the model's own parameter buffer when it is F32, else a
 * separate F32 copy whose result is written back to the model's low-precision buffer),
 * exp_avg and exp_avg_sq, all in the model's flat layout. */
#ifndef MC_OPTIM_OPTIMIZER_H
#define MC_OPTIM_OPTIMIZER_H

#include "megatron.h"
#include "model/model.h"
#include "tensor/backend.h"

typedef struct mc_optimizer {
    mc_model *model;
    mc_backend *be;
    float beta1, beta2, eps, clip_grad;
    float *master;        /* [numel] F32: model->param_buf when the model is F32 */
    bool owns_master;
    float *exp_avg, *exp_avg_sq;
    mc_adamw_segment *segments; /* one per parameter */
    mc_adamw_segment *norm_segments; /* the parameters counted in norms on this rank */
    int64_t step;         /* optimizer steps taken */
} mc_optimizer;

int mc_optimizer_create(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err);
void mc_optimizer_free(mc_optimizer *o);

/* The global L2 norm of the gradients over all ranks (tensor-parallel duplicates counted
 * once, as Megatron's get_grad_norm_fp32). */
double mc_optimizer_grad_norm(mc_optimizer *o);
/* The global L2 norm of the parameters (--log-params-norm). */
double mc_optimizer_params_norm(mc_optimizer *o);
int64_t mc_optimizer_count_zeros(mc_optimizer *o);

/* One AdamW step with learning rate lr and weight decay wd (not applied to norms and
 * biases); grads are multiplied by Megatron's clip coefficient min(1, clip/(norm+1e-6)).
 * Zeroes the gradients afterwards. */
void mc_optimizer_step(mc_optimizer *o, double lr, double wd, double grad_norm);

#endif
