/* --fp16 training on the CPU, where the backend computes in fp32 but the whole loss-scaling
 * path runs (scaled backward seed, unscaling in AdamW, overflow detection, skipped steps):
 *  - the losses and grad norms equal fp32 training within 1e-6, and bit for bit with a
 *    power-of-two scale (scaling by powers of two is exact in fp32 unless something
 *    overflows), with a dynamic scale that grows and with a constant one;
 *  - an injected inf gradient (MC_TEST_INF_GRAD_AT_ITERATION) skips that iteration: the
 *    parameters and Adam's state and step count stay, the LR schedule does not advance,
 *    the consumed samples do, and the scale backs off per the hysteresis;
 *  - the iteration line and metrics.jsonl: loss scale, number of skipped iterations, and
 *    the lm loss averaged over the iterations that were not skipped (megatron-c train).
 * The multi-rank case (all ranks skip together) is in test_parallel_equivalence.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "megatron.h"
#include "tiny_llama.h"
#include "train/trainer_internal.h"

#define STEPS 12

static void tiny_llama(mc_config *c) {
    tiny_llama_base(c);
    c->model.seq_length = 32;
    c->model.hidden_dropout = 0.1f;
    c->model.attention_dropout = 0.1f;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 4;
    c->train.train_iters = STEPS;
    c->train.device = MC_DEVICE_CPU_ONLY;
    c->optim.lr_warmup_iters = 2;
}

static mc_trainer *create(const mc_config *c) {
    mc_err err;
    mc_trainer *t = mc_trainer_create(c, &err);
    CHECK(t != NULL, "%s", err.msg);
    return t;
}

static bool step(mc_trainer *t, mc_step_stats *st) {
    mc_err err;
    int rc = mc_trainer_step(t, st, &err);
    CHECK(rc == MC_OK, "iteration %lld: %s", (long long)(t->iteration + 1), err.msg);
    return rc == MC_OK;
}

/* Runs STEPS iterations. */
static int train(const mc_config *c, mc_step_stats *out) {
    mc_trainer *t = create(c);
    if (!t) return -1;
    for (int i = 0; i < STEPS; i++)
        if (!step(t, &out[i])) {
            mc_trainer_free(t);
            return -1;
        }
    mc_trainer_free(t);
    return 0;
}

/* Losses and grad norms within 1e-6 of fp32; with a power-of-two scale, bit for bit. */
static void compare_to_fp32(const char *name, const mc_step_stats *ref, const mc_step_stats *r, bool pow2) {
    int bitwise = 0;
    for (int i = 0; i < STEPS; i++) {
        CHECK(!r[i].skipped, "%s: iteration %d skipped", name, i + 1);
        CHECK_REL(r[i].lm_loss, ref[i].lm_loss, 1e-6, "%s: lm loss at iteration %d", name, i + 1);
        CHECK_REL(r[i].grad_norm, ref[i].grad_norm, 1e-6, "%s: grad norm at iteration %d", name, i + 1);
        bitwise += r[i].lm_loss == ref[i].lm_loss && r[i].grad_norm == ref[i].grad_norm;
    }
    printf("   %-36s %d of %d iterations bitwise equal to fp32; final loss scale %.1f\n", name, bitwise, STEPS,
           r[STEPS - 1].loss_scale);
    CHECK(!pow2 || bitwise == STEPS, "%s: scaling by a power of two must change no bit", name);
}

static void test_cpu_fp16_matches_fp32(void) {
    mc_step_stats ref[STEPS], r[STEPS];
    mc_config c;
    tiny_llama(&c);
    if (train(&c, ref)) return;
    for (int i = 0; i < STEPS; i++) CHECK(ref[i].loss_scale == 1.0 && !ref[i].skipped, "fp32 loss scale");

    tiny_llama(&c); /* Megatron's default: dynamic from 2^32 */
    c.precision.fp16 = true;
    if (train(&c, r) == 0) {
        compare_to_fp32("fp16, dynamic scale 2^32", ref, r, true);
        for (int i = 0; i < STEPS; i++) CHECK(r[i].loss_scale == 4294967296.0, "scale %g", r[i].loss_scale);
    }
    tiny_llama(&c); /* a growing scale: x2 every 3 clean steps */
    c.precision.fp16 = true;
    c.precision.initial_loss_scale = 65536.0;
    c.precision.loss_scale_window = 3;
    if (train(&c, r) == 0) {
        compare_to_fp32("fp16, dynamic scale, window 3", ref, r, true);
        for (int i = 0; i < STEPS; i++)
            CHECK(r[i].loss_scale == ldexp(65536.0, (i + 1) / 3), "iteration %d: scale %g", i + 1, r[i].loss_scale);
    }
    tiny_llama(&c); /* constant, not a power of two: unscaling rounds, so only close */
    c.precision.fp16 = true;
    c.precision.loss_scale = 1000.0;
    if (train(&c, r) == 0) {
        compare_to_fp32("fp16, constant scale 1000", ref, r, false);
        CHECK(r[STEPS - 1].loss_scale == 1000.0, "scale %g", r[STEPS - 1].loss_scale);
    }
}

/* Host copies of the parameters and Adam's moments. */
typedef struct {
    void *params;
    float *m, *v;
    size_t pbytes, sbytes;
} snapshot;

static snapshot take(mc_trainer *t) {
    snapshot s;
    mc_backend *be = t->be;
    s.pbytes = (size_t)t->model.numel * mc_dtype_size(t->model.param_dtype);
    s.sbytes = (size_t)t->opt.state_numel * sizeof(float);
    s.params = malloc(s.pbytes);
    s.m = malloc(s.sbytes);
    s.v = malloc(s.sbytes);
    be->copy_d2h(be, s.params, t->model.param_buf, s.pbytes);
    be->copy_d2h(be, s.m, t->opt.exp_avg, s.sbytes);
    be->copy_d2h(be, s.v, t->opt.exp_avg_sq, s.sbytes);
    return s;
}

static bool same(const snapshot *a, const snapshot *b) {
    return memcmp(a->params, b->params, a->pbytes) == 0 && memcmp(a->m, b->m, a->sbytes) == 0 &&
           memcmp(a->v, b->v, a->sbytes) == 0;
}

static void drop(snapshot *s) {
    free(s->params);
    free(s->m);
    free(s->v);
}

/* Iterations 1-4 with an inf gradient injected at iteration 3 and --hysteresis 1. */
static void check_skipped_iteration(mc_trainer *t, int64_t gbs) {
    mc_step_stats st[4];
    if (!step(t, &st[0]) || !step(t, &st[1])) return;
    snapshot before = take(t);
    int64_t adam_steps = t->opt.step;
    if (step(t, &st[2])) {
        snapshot after = take(t);
        CHECK(st[2].skipped && !st[0].skipped && !st[1].skipped, "only iteration 3 is skipped");
        CHECK(same(&before, &after), "a skipped step changed the parameters or Adam's moments");
        CHECK(t->opt.step == adam_steps, "Adam's step count moved: %lld -> %lld", (long long)adam_steps,
              (long long)t->opt.step);
        CHECK(!isfinite(st[2].grad_norm), "grad norm of the skipped step: %g", st[2].grad_norm);
        CHECK(isfinite(st[2].lm_loss), "the forward loss was fine: %g", st[2].lm_loss);
        CHECK(st[2].learning_rate == st[1].learning_rate, "the LR schedule advanced: %g -> %g", st[1].learning_rate,
              st[2].learning_rate);
        CHECK(st[2].consumed_samples == 3 * gbs && t->sched_samples == 2 * gbs, "consumed %lld, schedule at %lld",
              (long long)st[2].consumed_samples, (long long)t->sched_samples);
        CHECK(st[1].loss_scale == 4294967296.0 && st[2].loss_scale == 2147483648.0,
              "hysteresis 1 halves at once: %.1f -> %.1f", st[1].loss_scale, st[2].loss_scale);
        if (step(t, &st[3])) {
            snapshot next = take(t);
            CHECK(!st[3].skipped && !same(&after, &next), "iteration 4 updates");
            CHECK(t->opt.step == adam_steps + 1, "Adam step %lld", (long long)t->opt.step);
            CHECK(st[3].learning_rate != st[2].learning_rate, "the schedule moves again");
            CHECK(st[3].loss_scale == 2147483648.0, "scale %.1f", st[3].loss_scale);
            drop(&next);
        }
        drop(&after);
    }
    drop(&before);
}

static void test_inf_grad_skips_the_step(void) {
    mc_config c;
    tiny_llama(&c);
    c.precision.fp16 = true;
    c.precision.hysteresis = 1;
    setenv("MC_TEST_INF_GRAD_AT_ITERATION", "3", 1);
    mc_trainer *t = create(&c);
    if (t) check_skipped_iteration(t, c.train.global_batch_size);
    unsetenv("MC_TEST_INF_GRAD_AT_ITERATION");
    mc_trainer_free(t);
}

/* Default hysteresis 2: the first overflow leaves the scale, the second halves it. */
static void test_hysteresis_two(void) {
    mc_config c;
    tiny_llama(&c);
    c.precision.fp16 = true;
    setenv("MC_TEST_INF_GRAD_AT_ITERATION", "2,3,5", 1);
    mc_trainer *t = create(&c);
    double want[6] = {4294967296.0, 4294967296.0, 2147483648.0, 2147483648.0, 1073741824.0, 1073741824.0};
    bool skip[6] = {false, true, true, false, true, false};
    for (int i = 0; t && i < 6; i++) {
        mc_step_stats st;
        if (!step(t, &st)) break;
        CHECK(st.skipped == skip[i] && st.loss_scale == want[i], "iteration %d: skipped %d, scale %.1f (want %d, %.1f)",
              i + 1, st.skipped, st.loss_scale, skip[i], want[i]);
    }
    CHECK(!t || t->opt.step == 3, "3 updates in 6 iterations");
    unsetenv("MC_TEST_INF_GRAD_AT_ITERATION");
    mc_trainer_free(t);
}

/* Without --fp16 a non-finite gradient stays an error. */
static void test_fp32_inf_grad_is_an_error(void) {
    mc_config c;
    tiny_llama(&c);
    setenv("MC_TEST_INF_GRAD_AT_ITERATION", "1", 1);
    mc_trainer *t = create(&c);
    mc_step_stats st;
    mc_err err;
    CHECK(t && mc_trainer_step(t, &st, &err) != MC_OK && strstr(err.msg, "the gradient norm is Inf"),
          "wanted the grad-norm error, got: %s", t ? err.msg : "no trainer");
    unsetenv("MC_TEST_INF_GRAD_AT_ITERATION");
    mc_trainer_free(t);
}

/* ---- megatron-c train: the log line and metrics.jsonl ---- */

static char g_bin[512], g_dir[256];

/* Runs 4 iterations with an inf gradient at iteration 3 and --hysteresis 1; returns the
 * output (malloc'd) or NULL. */
static char *run_cli(int log_interval, const char *name) {
    char cmd[2048], out[512];
    snprintf(out, sizeof out, "%s/%s.log", g_dir, name);
    snprintf(cmd, sizeof cmd,
             "MC_TEST_INF_GRAD_AT_ITERATION=3 OMP_NUM_THREADS=2 %s train --num-layers 2 --hidden-size 64 "
             "--num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 "
             "--lr 1e-3 --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --device cpu --eval-iters 0 "
             "--fp16 --hysteresis 1 --log-interval %d --log-dir %s/%s > %s 2>&1",
             g_bin, log_interval, g_dir, name, out);
    int rc = system(cmd);
    CHECK(rc == 0, "%s exited with %d (see %s)", name, rc, out);
    return rc == 0 ? check_read_file(out, NULL) : NULL;
}

/* The line of iteration `it` (a pointer into text, up to its newline). */
static const char *line_of(const char *text, int it, int *len) {
    char key[64];
    snprintf(key, sizeof key, " iteration %8d/", it);
    const char *p = strstr(text, key);
    if (!p) return NULL;
    const char *e = strchr(p, '\n');
    *len = e ? (int)(e - p) : (int)strlen(p);
    return p;
}

static bool line_has(const char *line, int len, const char *what) {
    char *copy = strndup(line, (size_t)len);
    bool has = strstr(copy, what) != NULL;
    free(copy);
    return has;
}

static double line_loss(const char *line, int len) {
    char *copy = strndup(line, (size_t)len);
    const char *p = strstr(copy, " lm loss: ");
    double v = p ? atof(p + 10) : NAN;
    free(copy);
    return v;
}

/* The metrics.jsonl record of iteration `it` (to cJSON_Delete), or NULL. */
static cJSON *metrics_record(const char *name, int it) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", g_dir, name);
    char *text = check_read_file(path, NULL);
    cJSON *found = NULL;
    for (char *line = text ? strtok(text, "\n") : NULL; line && !found; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cJSON *i = cJSON_GetObjectItem(o, "iteration");
        if (i && i->valuedouble == it) found = o;
        else cJSON_Delete(o);
    }
    free(text);
    return found;
}

static void check_logs(const char *every, const char *pairs) {
    int n3, n4, p4;
    const char *l3 = line_of(every, 3, &n3), *l4 = line_of(every, 4, &n4), *q4 = line_of(pairs, 4, &p4);
    CHECK(l3 && l4 && q4, "iteration lines missing");
    if (!l3 || !l4 || !q4) return;
    /* An interval of one skipped iteration: no lm loss and no grad norm (Megatron prints none). */
    CHECK(line_has(l3, n3, "| loss scale: 2147483648.0 |") && line_has(l3, n3, "number of skipped iterations:   1") &&
              !line_has(l3, n3, "lm loss:") && !line_has(l3, n3, "grad norm:"),
          "iteration 3 line: %.*s", n3, l3);
    CHECK(line_has(l4, n4, "number of skipped iterations:   0") && line_has(l4, n4, "grad norm:"),
          "iteration 4 line: %.*s", n4, l4);
    /* Iterations 3 and 4 in one interval: the loss is iteration 4's alone. */
    CHECK(line_has(q4, p4, "number of skipped iterations:   1") && line_has(q4, p4, "loss scale: 2147483648.0"),
          "interval line: %.*s", p4, q4);
    CHECK_REL(line_loss(q4, p4), line_loss(l4, n4), 1e-6, "the interval's loss is the unskipped iteration's");

    cJSON *o = metrics_record("pairs", 4), *o3 = metrics_record("every", 3);
    cJSON *sk = cJSON_GetObjectItem(o, "skipped_iterations"), *ls = cJSON_GetObjectItem(o, "loss_scale");
    CHECK(sk && ls && sk->valuedouble == 1 && ls->valuedouble == 2147483648.0 && cJSON_GetObjectItem(o, "lm_loss"),
          "metrics record of iterations 3-4");
    CHECK(o3 && !cJSON_GetObjectItem(o3, "lm_loss") && !cJSON_GetObjectItem(o3, "grad_norm"),
          "metrics record of the skipped iteration 3 alone: no lm_loss, no grad_norm");
    cJSON_Delete(o);
    cJSON_Delete(o3);
}

static void test_log_line_and_metrics(void) {
    if (!g_bin[0]) {
        printf("   (megatron-c not built: skipped)\n");
        return;
    }
    char *every = run_cli(1, "every"), *pairs = run_cli(2, "pairs");
    if (every && pairs) check_logs(every, pairs);
    free(every);
    free(pairs);
}

int main(void) {
    const char *build = getenv("MC_BUILD_DIR");
    snprintf(g_bin, sizeof g_bin, "%s/megatron-c", build ? build : "build");
    if (access(g_bin, X_OK) != 0) g_bin[0] = 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/mc_fp16_XXXXXX");
    if (!mkdtemp(g_dir)) check_skip("no temporary directory");
    RUN(test_cpu_fp16_matches_fp32);
    RUN(test_inf_grad_skips_the_step);
    RUN(test_hysteresis_two);
    RUN(test_fp32_inf_grad_is_an_error);
    RUN(test_log_line_and_metrics);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (check_failures_ == 0 && system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return check_summary();
}
