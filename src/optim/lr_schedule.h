/* lr_schedule.h: Megatron's OptimizerParamScheduler, stepped in samples.
 *
 * The scheduler starts at num_steps = 0 and advances by the global batch size after each
 * optimizer step, so the update of iteration k (1-based) uses lr(num_steps = (k-1)*gbs)
 * and the iteration line prints lr(k*gbs), the value after the step, as Megatron does. */
#ifndef MC_OPTIM_LR_SCHEDULE_H
#define MC_OPTIM_LR_SCHEDULE_H

#include "megatron.h"

typedef struct mc_lr_schedule {
    double init_lr, max_lr, min_lr;
    double warmup_steps;         /* samples (fractional with --lr-warmup-fraction) */
    double decay_steps;          /* samples */
    mc_lr_decay_style style;
    double wsd_decay_steps;
    mc_wsd_decay_style wsd_style;
    double start_wd, end_wd, wd_incr_steps;
    int wd_incr_style;           /* 0 constant, 1 linear, 2 cosine */
} mc_lr_schedule;

/* From a validated config (training length in iterations or samples). */
void mc_lr_schedule_init(mc_lr_schedule *s, const mc_config *cfg);
double mc_lr_at(const mc_lr_schedule *s, double num_steps);
double mc_wd_at(const mc_lr_schedule *s, double num_steps);

#endif
