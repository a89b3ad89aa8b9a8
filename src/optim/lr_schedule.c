#include "optim/lr_schedule.h"

#include <math.h>

void mc_lr_schedule_init(mc_lr_schedule *s, const mc_config *cfg) {
    const mc_optim_config *o = &cfg->optim;
    const mc_train_config *t = &cfg->train;
    double gbs = cfg->train.global_batch_size;
    s->init_lr = o->lr_warmup_init;
    s->max_lr = o->lr;
    s->min_lr = o->min_lr;
    s->style = o->lr_decay_style;
    s->wsd_style = o->lr_wsd_decay_style;
    if (t->train_iters > 0) {
        /* training.py: iteration-based flags are converted to samples with gbs. */
        int64_t decay_iters = o->lr_decay_iters ? o->lr_decay_iters : t->train_iters;
        s->decay_steps = (double)decay_iters * gbs;
        s->wd_incr_steps = (double)t->train_iters * gbs;
        s->wsd_decay_steps = (double)o->lr_wsd_decay_iters * gbs;
        s->warmup_steps = o->lr_warmup_fraction >= 0 ? o->lr_warmup_fraction * s->decay_steps
                                                     : (double)o->lr_warmup_iters * gbs;
    } else {
        s->decay_steps = (double)(o->lr_decay_samples ? o->lr_decay_samples : t->train_samples);
        s->wd_incr_steps = (double)t->train_samples;
        s->wsd_decay_steps = (double)o->lr_wsd_decay_samples;
        s->warmup_steps = o->lr_warmup_fraction >= 0 ? o->lr_warmup_fraction * s->decay_steps
                                                     : (double)o->lr_warmup_samples;
    }
    s->start_wd = o->start_weight_decay;
    s->end_wd = o->end_weight_decay;
    s->wd_incr_style = o->weight_decay_incr_style;
}

double mc_lr_at(const mc_lr_schedule *s, double n) {
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == MC_LR_CONSTANT) return s->max_lr;
    if (n > s->decay_steps) return s->min_lr;
    if (s->style == MC_LR_INVERSE_SQRT) {
        double w = s->warmup_steps > 1 ? s->warmup_steps : 1, k = n > 1 ? n : 1;
        double lr = s->max_lr * sqrt(w) / sqrt(k);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double ratio = (n - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
    double coeff = 1.0;
    switch (s->style) {
    case MC_LR_LINEAR: coeff = 1.0 - ratio; break;
    case MC_LR_COSINE: coeff = 0.5 * (cos(M_PI * ratio) + 1.0); break;
    case MC_LR_WSD: {
        double anneal_start = s->decay_steps - s->wsd_decay_steps;
        if (n <= anneal_start) {
            coeff = 1.0;
        } else {
            double r = (n - anneal_start) / s->wsd_decay_steps;
            switch (s->wsd_style) {
            case MC_WSD_LINEAR: coeff = 1.0 - r; break;
            case MC_WSD_COSINE: coeff = 0.5 * (cos(M_PI * r) + 1.0); break;
            case MC_WSD_EXPONENTIAL: coeff = 2.0 * pow(0.5, r) - 1.0; break;
            case MC_WSD_MINUS_SQRT: coeff = 1.0 - sqrt(r); break;
            }
        }
        break;
    }
    default: break;
    }
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

double mc_wd_at(const mc_lr_schedule *s, double n) {
    if (n > s->wd_incr_steps || s->wd_incr_style == 0) return s->end_wd;
    double r = n / s->wd_incr_steps;
    double coeff = s->wd_incr_style == 1 ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}
