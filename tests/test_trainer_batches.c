/* The trainer's micro-batches in flight (trainer.c: uploads, passes and loss copies queued
 * without waiting for the device, the next step's first micro-batch prefetched, the losses
 * summed once a step):
 *  - an evaluation between steps (which overwrites the device's micro-batch while the next
 *    step's first one is already uploaded) changes nothing in training: losses and grad
 *    norms bitwise equal to a run without it, on the CPU and, with a GPU, in bf16;
 *  - a step of more micro-batches than slots (12: the ring wraps and waits mid-step) gives
 *    the loss and grad norm of the same 12 samples in 3 micro-batches of 4.
 *    (Bitwise equality is not expected there: GEMMs of 1 and 4 sequences round alike
 *    only by luck);
 *  - the steps' times (each returns with its update still running, and counts its
 *    predecessor's) add up to the time the loop took: none counted twice, none lost. */
#include <math.h>
#include <string.h>

#include "base/timer.h"
#include "check.h"
#include "megatron.h"
#include "tensor/backend.h"
#include "tiny_llama.h"

#define STEPS 6

static void config(mc_config *c, mc_device_choice dev, int mbs, int gbs) {
    tiny_llama_base(c);
    c->model.seq_length = 32;
    c->model.attention_dropout = 0.0f; /* the draws are per micro-batch: 12 x 1 and 3 x 4 would differ */
    c->model.hidden_dropout = 0.0f;
    c->train.micro_batch_size = mbs;
    c->train.global_batch_size = gbs;
    c->train.train_iters = STEPS;
    c->train.eval_iters = 1; /* a validation split to evaluate on */
    c->train.device = dev;
    c->train.deterministic_mode = true;
    c->precision.bf16 = dev == MC_DEVICE_CUDA_ONLY;
}

/* Runs STEPS iterations, evaluating on one validation batch after each when `eval`.
 * Without evaluation, checks that the elapsed_ms of steps 2..STEPS add up to the time from
 * step 1's return to mc_trainer_finish. The wall clock starts after step 1 so that the
 * loader's start (before step 1's clock) stays out of it; what is then outside both sums is
 * a few microseconds of host work, while a step counted twice or lost would move the sum
 * by a whole step. The bound is therefore half the shortest step, not a ratio that a
 * loaded machine's scheduler can break. */
static int run(const mc_config *c, bool eval, double *loss, double *norm) {
    mc_err err;
    mc_trainer *t = mc_trainer_create(c, &err);
    if (!t) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    double sum_ms = 0, min_ms = INFINITY, t0 = 0;
    for (int i = 0; i < STEPS; i++) {
        mc_step_stats st;
        double vl;
        if (mc_trainer_step(t, &st, &err) != MC_OK || (eval && mc_trainer_evaluate(t, 1 /* validation */, 1, &vl, &err))) {
            CHECK(0, "step %d: %s", i + 1, err.msg);
            mc_trainer_free(t);
            return -1;
        }
        loss[i] = st.lm_loss;
        norm[i] = st.grad_norm;
        if (i > 0) {
            sum_ms += st.elapsed_ms;
            min_ms = fmin(min_ms, st.elapsed_ms);
        } else {
            t0 = mc_time_now();
        }
    }
    mc_trainer_finish(t);
    double wall_ms = (mc_time_now() - t0) * 1e3;
    if (!eval) {
        CHECK(fabs(wall_ms - sum_ms) < 0.5 * min_ms,
              "steps 2..%d's times add up to %.3f ms, the loop took %.3f ms (the shortest step %.3f ms)", STEPS,
              sum_ms, wall_ms, min_ms);
    }
    mc_trainer_free(t);
    return 0;
}

static void eval_between_steps(mc_device_choice dev) {
    mc_config c;
    config(&c, dev, 2, 4);
    double l1[STEPS], n1[STEPS], l2[STEPS], n2[STEPS];
    if (run(&c, false, l1, n1) || run(&c, true, l2, n2)) return;
    for (int i = 0; i < STEPS; i++) {
        CHECK(memcmp(&l1[i], &l2[i], sizeof(double)) == 0, "step %d loss %.17g vs %.17g with evaluation", i + 1, l1[i],
              l2[i]);
        CHECK(memcmp(&n1[i], &n2[i], sizeof(double)) == 0, "step %d grad norm %.17g vs %.17g with evaluation", i + 1,
              n1[i], n2[i]);
    }
    CHECK(l1[STEPS - 1] < l1[0], "the loss did not go down (%.4f -> %.4f)", l1[0], l1[STEPS - 1]);
}

static void more_microbatches_than_slots(mc_device_choice dev, double tol) {
    mc_config a, b;
    config(&a, dev, 1, 12);
    config(&b, dev, 4, 12);
    double la[STEPS], na[STEPS], lb[STEPS], nb[STEPS];
    if (run(&a, false, la, na) || run(&b, false, lb, nb)) return;
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double dl = fabs(la[i] - lb[i]) / fabs(lb[i]), dn = fabs(na[i] - nb[i]) / fabs(nb[i]);
        worst = fmax(worst, fmax(dl, dn));
        CHECK(dl < tol, "step %d loss %.9g (12 x 1) vs %.9g (3 x 4)", i + 1, la[i], lb[i]);
        CHECK(dn < tol, "step %d grad norm %.9g (12 x 1) vs %.9g (3 x 4)", i + 1, na[i], nb[i]);
    }
    printf("  12 micro-batches of 1 vs 3 of 4: worst relative difference %.2e (limit %.0e)\n", worst, tol);
}

static void test_cpu_eval(void) { eval_between_steps(MC_DEVICE_CPU_ONLY); }
static void test_cpu_many(void) { more_microbatches_than_slots(MC_DEVICE_CPU_ONLY, 1e-5); }
static void test_cuda_eval(void) { eval_between_steps(MC_DEVICE_CUDA_ONLY); }
static void test_cuda_many(void) { more_microbatches_than_slots(MC_DEVICE_CUDA_ONLY, 2e-2); /* bf16 GEMM shapes */ }

int main(int argc, char **argv) {
    check_init(argc, argv, mc_backend_cuda_available());
    RUN(test_cpu_eval);
    RUN(test_cpu_many);
    RUN_GPU(test_cuda_eval);
    RUN_GPU(test_cuda_many);
    return check_summary();
}
