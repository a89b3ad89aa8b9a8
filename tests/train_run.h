/* train_run.h: a training run through the public API for the tests that compare runs'
 * losses and grad norms step by step. */
#ifndef MC_TESTS_TRAIN_RUN_H
#define MC_TESTS_TRAIN_RUN_H

#include "check.h"
#include "megatron.h"

/* Runs `steps` iterations of a trainer made from cfg (with train_iters = steps); fills
 * losses[steps] and norms[steps]. A trainer that cannot be made or a step that fails is a
 * failed check and returns -1 (the caller then compares nothing). */
static inline int train_run(const mc_config *cfg, int steps, double *losses, double *norms) {
    mc_config c = *cfg;
    c.train.train_iters = steps;
    mc_err err;
    mc_trainer *t = mc_trainer_create(&c, &err);
    if (!t) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    for (int i = 0; i < steps; i++) {
        mc_step_stats st;
        if (mc_trainer_step(t, &st, &err) != MC_OK) {
            CHECK(0, "step %d: %s", i + 1, err.msg);
            mc_trainer_free(t);
            return -1;
        }
        losses[i] = st.lm_loss;
        norms[i] = st.grad_norm;
        if (st.skipped) printf("   iteration %d skipped (fp16 overflow); loss scale now %.1f\n", i + 1, st.loss_scale);
    }
    mc_trainer_free(t);
    return 0;
}

#endif
