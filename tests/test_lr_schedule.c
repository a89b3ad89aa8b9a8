/* LR and weight-decay schedules against a Python re-statement of Megatron's
 * OptimizerParamScheduler.get_lr/get_wd (values generated once and pasted here):
 * max 1e-3, min 1e-5, gbs 8, train/decay 100 iterations, warmup 10 iterations,
 * WSD anneal 20 iterations; steps are samples. */
#include <string.h>

#include "check.h"
#include "megatron.h"
#include "optim/lr_schedule.h"

typedef struct {
    mc_lr_decay_style style;
    mc_wsd_decay_style wsd_style;
    double init;
    int warmup_iters; /* -1: --lr-warmup-fraction 0.1 */
    int wsd_iters;
    int samples;
    double want;
} lr_case;

static const lr_case k_cases[] = {
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 0, 0},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 8, 0.0001},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 40, 0.00050000000000000001},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 80, 0.001},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 88, 0.00098900000000000008},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 400, 0.00056000000000000006},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 792, 2.0999999999999962e-05},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 800, 1.0000000000000001e-05},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 808, 1.0000000000000001e-05},
    {MC_LR_LINEAR, MC_WSD_LINEAR, 0, 10, 0, 1000, 1.0000000000000001e-05},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 0, 0},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 8, 0.0001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 40, 0.00050000000000000001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 80, 0.001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 88, 0.00099969845937445258},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 400, 0.00059095584794513066},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 792, 1.0301540625547598e-05},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 800, 1.0000000000000001e-05},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 808, 1.0000000000000001e-05},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0, 10, 0, 1000, 1.0000000000000001e-05},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 0, 0},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 8, 0.0001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 40, 0.00050000000000000001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 80, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 88, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 400, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 792, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 800, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 808, 0.001},
    {MC_LR_CONSTANT, MC_WSD_LINEAR, 0, 10, 0, 1000, 0.001},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 0, 0},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 8, 0.0001},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 40, 0.00050000000000000001},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 80, 0.001},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 88, 0.0009534625892455924},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 400, 0.00044721359549995795},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 792, 0.00031782086308186413},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 800, 0.00031622776601683794},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 808, 1.0000000000000001e-05},
    {MC_LR_INVERSE_SQRT, MC_WSD_LINEAR, 0, 10, 0, 1000, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 0, 0},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 80, 0.001},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 600, 0.001},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 640, 0.001},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 700, 0.00062874999999999997},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 760, 0.00025750000000000002},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 800, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_LINEAR, 0, 10, 20, 808, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 0, 0},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 80, 0.001},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 600, 0.001},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 640, 0.001},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 700, 0.00069442829902071951},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 760, 0.00015498214331265901},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 800, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_COSINE, 0, 10, 20, 808, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 0, 0},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 80, 0.001},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 600, 0.001},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 640, 0.001},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 700, 0.00054678871715386134},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 760, 0.00019731504385269382},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 800, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_EXPONENTIAL, 0, 10, 20, 808, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 0, 0},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 80, 0.001},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 600, 0.001},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 640, 0.001},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 700, 0.00039375128866116351},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 760, 0.00014263485025340578},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 800, 1.0000000000000001e-05},
    {MC_LR_WSD, MC_WSD_MINUS_SQRT, 0, 10, 20, 808, 1.0000000000000001e-05},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0.0001, -1, 0, 0, 0.0001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0.0001, -1, 0, 8, 0.00019000000000000001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0.0001, -1, 0, 80, 0.001},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0.0001, -1, 0, 88, 0.00099969845937445258},
    {MC_LR_COSINE, MC_WSD_LINEAR, 0.0001, -1, 0, 800, 1.0000000000000001e-05},
};

typedef struct {
    int style;
    int samples;
    double want;
} wd_case;

static const wd_case k_wd[] = {
    {1, 0, 0.01},
    {1, 200, 0.032500000000000001},
    {1, 400, 0.055000000000000007},
    {1, 800, 0.10000000000000001},
    {1, 808, 0.10000000000000001},
    {2, 0, 0.01},
    {2, 200, 0.023180194846605363},
    {2, 400, 0.055000000000000007},
    {2, 800, 0.10000000000000001},
    {2, 808, 0.10000000000000001},
};

static mc_config config_for(const lr_case *c) {
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.train.global_batch_size = 8;
    cfg.train.train_iters = 100;
    cfg.optim.lr = 1e-3;
    cfg.optim.min_lr = 1e-5;
    cfg.optim.lr_decay_style = c->style;
    cfg.optim.lr_wsd_decay_style = c->wsd_style;
    cfg.optim.lr_wsd_decay_iters = c->wsd_iters;
    cfg.optim.lr_warmup_init = c->init;
    if (c->warmup_iters < 0)
        cfg.optim.lr_warmup_fraction = 0.1;
    else
        cfg.optim.lr_warmup_iters = c->warmup_iters;
    return cfg;
}

static void test_lr_styles(void) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        mc_config cfg = config_for(&k_cases[i]);
        mc_lr_schedule s;
        mc_lr_schedule_init(&s, &cfg);
                CHECK_REL(mc_lr_at(&s, k_cases[i].samples), k_cases[i].want, 1e-12, "case %zu (style %d, %d samples)", i,
                  (int)k_cases[i].style, k_cases[i].samples);
    }
}

static void test_weight_decay_increments(void) {
    for (size_t i = 0; i < sizeof k_wd / sizeof k_wd[0]; i++) {
        mc_config cfg;
        mc_config_init(&cfg);
        cfg.train.global_batch_size = 8;
        cfg.train.train_iters = 100;
        cfg.optim.lr = 1e-3;
        cfg.optim.start_weight_decay = 0.01f;
        cfg.optim.end_weight_decay = 0.1f;
        cfg.optim.weight_decay_incr_style = k_wd[i].style;
        mc_lr_schedule s;
        mc_lr_schedule_init(&s, &cfg);
        CHECK_REL(mc_wd_at(&s, k_wd[i].samples), k_wd[i].want, 1e-6, "wd case %zu", i);
    }
}

int main(void) {
    RUN(test_lr_styles);
    RUN(test_weight_decay_increments);
    return check_summary();
}
