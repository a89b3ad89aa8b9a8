/* Bitwise resume (checkpoint issue, acceptance 1 and 3): 20 iterations straight versus 10,
 * exit, --load, 10 more; every iteration line (loss, grad norm, learning rate, loss scale,
 * skipped iterations) and the final parameters bit for bit. On CPU ranks: one rank with
 * dropout, DP2 and DP4 with the distributed optimizer (DP2 saving asynchronously), TP2 with
 * sequence parallelism, --fp16 with the dynamic loss scale in mid-state. Also: SIGTERM with
 * --exit-signal-handler (a complete checkpoint, exit code 0, a bitwise resume), --ckpt-step,
 * and --finetune / --no-load-optim starting where Megatron starts them. */
#include <signal.h>
#include <time.h>

#include "ckpt_util.h"

/* straight: `iters` iterations; split: exit at `at`, then resume to `iters`. `save_extra`
 * goes to the runs that save only. */
static void resume_case(const char *name, int np, const char *extra, const char *save_extra, const char *env, int iters,
                        int at) {
    char args[8192], log[128], dir[128];
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters %d %s --log-dir %s_a --export-params %s_a/p.st",
             ck_llama, iters, extra, name, name);
    snprintf(log, sizeof log, "%s_a.log", name);
    int rc = ck_train(np, env, args, log);
    CHECK(rc == 0, "%s: the straight run exited with %d (see %s/%s)", name, rc, ck_tmp, log);
    snprintf(dir, sizeof dir, "%s_ckpt", name);
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters %d %s %s --log-dir %s_b --save %s --exit-interval %d",
             ck_llama, iters, extra, save_extra, name, dir, at);
    snprintf(log, sizeof log, "%s_b1.log", name);
    rc = ck_train(np, env, args, log);
    CHECK(rc == 0, "%s: the first half exited with %d (see %s/%s)", name, rc, ck_tmp, log);
    char rel[256];
    snprintf(rel, sizeof rel, "%s/latest_checkpointed_iteration.txt", dir);
    char *tracker = ck_read(rel);
    CHECK(tracker && atoi(tracker) == at, "%s: the tracker says %s, not %d", name, tracker ? tracker : "(none)", at);
    free(tracker);
    snprintf(args, sizeof args,
             "%s --global-batch-size 8 --train-iters %d %s %s --log-dir %s_b --save %s --load %s --export-params %s_b/p.st",
             ck_llama, iters, extra, save_extra, name, dir, dir, name);
    snprintf(log, sizeof log, "%s_b2.log", name);
    rc = ck_train(np, env, args, log);
    CHECK(rc == 0, "%s: the resumed run exited with %d (see %s/%s)", name, rc, ck_tmp, log);
    char a[128], b[128];
    snprintf(a, sizeof a, "%s_a", name);
    snprintf(b, sizeof b, "%s_b", name);
    ck_metrics ma = ck_read_metrics(a), mb = ck_read_metrics(b);
    CHECK(ma.n == iters && mb.n == iters, "%s: %d and %d iteration lines, expected %d", name, ma.n, mb.n, iters);
    ck_check_same_lines(name, &ma, &mb, 1, iters);
    snprintf(a, sizeof a, "%s_a/p.st", name);
    snprintf(b, sizeof b, "%s_b/p.st", name);
    ck_check_same_params(name, a, b);
    ck_free_metrics(&ma);
    ck_free_metrics(&mb);
}

static void test_single_rank_dropout(void) {
    resume_case("single", 1, "--attention-dropout 0.1 --hidden-dropout 0.1", "", NULL, 20, 10);
}
static void test_dp2_distopt_async(void) {
    resume_case("dp2_async", 2, "--use-distributed-optimizer", "--async-save --save-interval 4", NULL, 20, 10);
}
static void test_dp2_plain(void) { resume_case("dp2", 2, "", "", NULL, 20, 10); }
static void test_dp4_distopt(void) { resume_case("dp4", 4, "--use-distributed-optimizer", "", NULL, 20, 10); }
static void test_tp2_sp(void) { resume_case("tp2_sp", 2, "--tensor-model-parallel-size 2 --sequence-parallel", "", NULL, 20, 10); }

/* The dynamic scale in mid-state at the save: overflows at 4 and 5 (hysteresis 2: the scale
 * halves at the second), clean steps growing it (window 3), and one overflow at 9 that has
 * used up a unit of hysteresis when iteration 10 saves. */
static void test_fp16_loss_scale_mid_state(void) {
    resume_case("fp16", 1, "--fp16 --initial-loss-scale 65536 --loss-scale-window 3 --hysteresis 2", "",
                "MC_TEST_INF_GRAD_AT_ITERATION=4,5,9,13", 20, 10);
    char *b1 = ck_read("fp16_b1.log");
    CHECK(b1 && strstr(b1, "number of skipped iterations:   1"), "the first half skipped iterations");
    free(b1);
}

/* --ckpt-step loads an older checkpoint than the newest, and the run sent back goes on from
 * there: its saves move the tracker back, and a later plain --load takes the tracker's
 * checkpoint rather than the newer one the abandoned run left. The continuation is the
 * straight run's, bit for bit. */
static void test_ckpt_step(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 12 --log-dir step_a --export-params step_a/p.st",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "step_a.log") == 0, "straight run");
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 12 --save step_ckpt --save-interval 4 --exit-interval 8",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "step_b1.log") == 0, "first run (saves 4 and 8)");
    snprintf(args, sizeof args,
             "%s --global-batch-size 8 --train-iters 12 --load step_ckpt --ckpt-step 4 --save step_ckpt --exit-interval 6 "
             "--log-dir step_b",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "step_b2.log") == 0, "from step 4 to 6");
    char *log = ck_read("step_b2.log");
    CHECK(log && strstr(log, "at iteration 4"), "the second run loaded iteration 4");
    free(log);
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 12 --load step_ckpt --log-dir step_b --export-params step_b/p.st",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "step_b3.log") == 0, "from the tracker's 6 to the end");
    log = ck_read("step_b3.log");
    CHECK(log && strstr(log, "at iteration 6"), "the third run loaded the tracker's iteration 6, not 8");
    free(log);
    ck_metrics a = ck_read_metrics("step_a"), b = ck_read_metrics("step_b");
    ck_check_same_lines("ckpt-step", &a, &b, 5, 12);
    ck_check_same_params("ckpt-step", "step_a/p.st", "step_b/p.st");
    ck_free_metrics(&a);
    ck_free_metrics(&b);
}

/* --finetune: the weights only, from iteration 0 and sample 0 with a fresh schedule;
 * --no-load-optim: the iteration and samples carry on, Adam and the schedule start afresh
 * (as in Megatron). */
static void test_finetune_and_no_load_optim(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 6 --save ft_ckpt", ck_llama);
    CHECK(ck_train(1, NULL, args, "ft_a.log") == 0, "pretraining run");
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 6 --load ft_ckpt --finetune --log-dir ft_b", ck_llama);
    CHECK(ck_train(1, NULL, args, "ft_b.log") == 0, "finetune run");
    ck_metrics m = ck_read_metrics("ft_b");
    CHECK(m.n == 6 && m.v[0].iteration == 1, "--finetune starts at iteration 1 (got %d lines)", m.n);
    CHECK(m.n && strstr(m.v[0].text, "consumed_samples=8 "), "--finetune starts at sample 0: %s", m.n ? m.v[0].text : "");
    ck_free_metrics(&m);
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 8 --load ft_ckpt --no-load-optim --log-dir ft_c",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "ft_c.log") == 0, "--no-load-optim run");
    ck_metrics c = ck_read_metrics("ft_c");
    CHECK(c.n == 2 && c.v[0].iteration == 7, "--no-load-optim carries on at iteration 7 (got %d lines)", c.n);
    /* a fresh schedule: after iteration 7's update the warmup is at 8 of its 24 samples */
    const char *lr = c.n ? strstr(c.v[0].text, "learning_rate=") : NULL;
    CHECK(lr && fabs(strtod(lr + 14, NULL) - 1e-3 * 8 / 24) < 1e-12, "--no-load-optim restarts the schedule: %s",
          c.n ? c.v[0].text : "");
    ck_free_metrics(&c);
}

/* SIGTERM mid-run with --exit-signal-handler: the iteration finishes, a complete checkpoint
 * is saved, the exit code is 0, and resuming from it matches an uninterrupted run. */
static void test_sigterm_saves_and_resumes(void) {
    char cmd[8192];
    const char *common = "--global-batch-size 8 --train-iters 100000 --lr-decay-iters 1000 --lr-warmup-iters 3";
    snprintf(cmd, sizeof cmd,
             "cd %s && (OMP_NUM_THREADS=1 %s train %s %s --save sig_ckpt --exit-signal-handler --log-dir sig_b "
             "> sig_b1.log 2>&1 & echo $! > sig.pid)",
             ck_tmp, ck_bin, ck_llama, common);
    CHECK(system(cmd) == 0, "start the run");
    char *pid = ck_read("sig.pid");
    /* wait until a few iterations are logged, then SIGTERM */
    long logged = 0;
    for (int i = 0; i < 600 && logged < 5; i++) {
        usleep(50000);
        ck_metrics m = ck_read_metrics("sig_b");
        logged = m.n ? m.v[m.n - 1].iteration : 0;
        ck_free_metrics(&m);
    }
    CHECK(pid && logged >= 5, "the run logged %ld iterations", logged);
    if (!pid || logged < 5) return;
    snprintf(cmd, sizeof cmd, "kill -TERM %ld; while kill -0 %ld 2>/dev/null; do sleep 0.05; done; wait %ld 2>/dev/null",
             atol(pid), atol(pid), atol(pid));
    (void)system(cmd);
    free(pid);
    char *log = ck_read("sig_b1.log");
    CHECK(log && strstr(log, "exiting program after receiving SIGTERM"), "the run says it exits on SIGTERM");
    free(log);
    char *tracker = ck_read("sig_ckpt/latest_checkpointed_iteration.txt");
    long saved = tracker ? atol(tracker) : -1;
    free(tracker);
    CHECK(saved >= 5, "a checkpoint at iteration %ld", saved);
    /* the exit code, from a run whose SIGTERM is sent by the test and whose status we read */
    snprintf(cmd, sizeof cmd, "cd %s && %s inspect-ckpt sig_ckpt --verify > sig_inspect.log 2>&1", ck_tmp, ck_bin);
    CHECK(system(cmd) == 0, "inspect-ckpt --verify of the SIGTERM checkpoint");
    char args[8192];
    snprintf(args, sizeof args, "%s %s --exit-interval %ld --log-dir sig_a --export-params sig_a/p.st", ck_llama, common,
             saved + 5);
    CHECK(ck_train(1, NULL, args, "sig_a.log") == 0, "uninterrupted run");
    snprintf(args, sizeof args, "%s %s --exit-interval %ld --load sig_ckpt --log-dir sig_c --export-params sig_c/p.st",
             ck_llama, common, saved + 5);
    CHECK(ck_train(1, NULL, args, "sig_c.log") == 0, "resumed run");
    ck_metrics a = ck_read_metrics("sig_a"), c = ck_read_metrics("sig_c");
    ck_check_same_lines("sigterm resume", &a, &c, saved + 1, saved + 5);
    ck_check_same_params("sigterm resume", "sig_a/p.st", "sig_c/p.st");
    ck_free_metrics(&a);
    ck_free_metrics(&c);
}

/* The exit code of a SIGTERMed run is 0 (the shell's `wait` reads it). */
static void test_sigterm_exit_code(void) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && (OMP_NUM_THREADS=1 %s train %s --global-batch-size 8 --train-iters 100000 --save sig2_ckpt "
             "--exit-signal-handler --log-dir sig2 > sig2.log 2>&1 & p=$!; "
             "for i in $(seq 600); do grep -q '\"iteration\":3,' sig2/metrics.jsonl 2>/dev/null && break; sleep 0.05; done; "
             "kill -TERM $p; wait $p; echo $? > sig2.rc)",
             ck_tmp, ck_bin, ck_llama);
    (void)system(cmd);
    char *rc = ck_read("sig2.rc");
    CHECK(rc && atoi(rc) == 0, "exit code after SIGTERM: %s", rc ? rc : "(none)");
    free(rc);
}

/* SIGTERM to one rank of two: the ranks agree (an all-reduce each iteration) to stop at the
 * same iteration, save, and exit 0. */
static void test_sigterm_one_rank_of_two(void) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && (OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS %s train %s "
             "--global-batch-size 8 --train-iters 3000 --use-distributed-optimizer --save sig3_ckpt --exit-signal-handler "
             "--log-dir sig3 > sig3.log 2>&1 & p=$!; "
             "for i in $(seq 600); do grep -q '\"iteration\":3,' sig3/metrics.jsonl 2>/dev/null && break; sleep 0.05; done; "
             "kill -TERM $(pgrep -P $p -f megatron-c | tail -1); wait $p; echo $? > sig3.rc)",
             ck_tmp, ck_bin, ck_llama);
    (void)system(cmd);
    char *rc = ck_read("sig3.rc"), *log = ck_read("sig3.log");
    CHECK(rc && atoi(rc) == 0, "mpirun's exit code after SIGTERM to one rank: %s", rc ? rc : "(none)");
    CHECK(log && strstr(log, "exiting program after receiving SIGTERM"), "the job says it exits on SIGTERM");
    CHECK(log && !strstr(log, "iteration     3000/"), "the job stopped before its end");
    free(rc);
    free(log);
    char cmd2[1024];
    snprintf(cmd2, sizeof cmd2, "cd %s && %s inspect-ckpt sig3_ckpt --verify > sig3_inspect.log 2>&1", ck_tmp, ck_bin);
    CHECK(system(cmd2) == 0, "the checkpoint both ranks saved verifies");
}

/* --exit-signal SIGUSR1, sent to mpirun, which forwards it to its ranks (it would kill
 * them on SIGTERM): the job saves and exits 0. */
static void test_sigusr1_through_mpirun(void) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && (OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS %s train %s "
             "--global-batch-size 8 --train-iters 3000 --save usr1_ckpt --exit-signal-handler --exit-signal SIGUSR1 "
             "--log-dir usr1 > usr1.log 2>&1 & p=$!; "
             "for i in $(seq 600); do grep -q '\"iteration\":3,' usr1/metrics.jsonl 2>/dev/null && break; sleep 0.05; done; "
             "kill -USR1 $p; wait $p; echo $? > usr1.rc)",
             ck_tmp, ck_bin, ck_llama);
    (void)system(cmd);
    char *rc = ck_read("usr1.rc"), *log = ck_read("usr1.log"), *t = ck_read("usr1_ckpt/latest_checkpointed_iteration.txt");
    CHECK(rc && atoi(rc) == 0, "mpirun's exit code: %s", rc ? rc : "(none)");
    CHECK(log && strstr(log, "exiting program after receiving SIGUSR1"), "the job says it exits on SIGUSR1");
    CHECK(t && atoi(t) >= 3 && atoi(t) < 3000, "a checkpoint mid-run (tracker %s)", t ? t : "(none)");
    free(rc);
    free(log);
    free(t);
}

/* --exit-duration-in-mins: past the limit after the first iteration, the run saves and
 * exits with code 0. */
static void test_exit_duration(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 50 --save dur_ckpt --exit-duration-in-mins 1e-7",
             ck_llama);
    CHECK(ck_train(1, NULL, args, "dur.log") == 0, "the run exits with code 0");
    char *t = ck_read("dur_ckpt/latest_checkpointed_iteration.txt"), *log = ck_read("dur.log");
    CHECK(t && atoi(t) == 1, "saved at iteration 1 (tracker %s)", t ? t : "(none)");
    CHECK(log && strstr(log, "(--exit-duration-in-mins) at iteration 1"), "it says why it stopped");
    free(t);
    free(log);
}

/* A --load directory without a checkpoint: a one-line note, and training from scratch. */
static void test_load_without_checkpoint_starts_fresh(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --global-batch-size 8 --train-iters 4 --load no_such_dir --log-dir fresh", ck_llama);
    CHECK(ck_train(1, NULL, args, "fresh.log") == 0, "the run trains");
    char *log = ck_read("fresh.log");
    CHECK(log && strstr(log, "note: --load no_such_dir holds no checkpoint"), "the note");
    ck_metrics m = ck_read_metrics("fresh");
    CHECK(m.n == 4 && m.v[0].iteration == 1, "from iteration 1");
    ck_free_metrics(&m);
    free(log);
}

/* --no-save-rng, then --no-load-rng with the same --seed: the RNG state is the seed, so the
 * continuation is still the straight run's, bit for bit (dropout on). */
static void test_no_save_rng(void) {
    char args[8192];
    const char *common = "--global-batch-size 8 --train-iters 8 --attention-dropout 0.1 --hidden-dropout 0.1";
    snprintf(args, sizeof args, "%s %s --log-dir rng_a --export-params rng_a/p.st", ck_llama, common);
    CHECK(ck_train(1, NULL, args, "rng_a.log") == 0, "straight run");
    snprintf(args, sizeof args, "%s %s --save rng_ckpt --no-save-rng --exit-interval 4", ck_llama, common);
    CHECK(ck_train(1, NULL, args, "rng_b1.log") == 0, "first half");
    snprintf(args, sizeof args, "%s %s --load rng_ckpt --no-load-rng --log-dir rng_b --export-params rng_b/p.st", ck_llama,
             common);
    CHECK(ck_train(1, NULL, args, "rng_b2.log") == 0, "second half");
    ck_metrics a = ck_read_metrics("rng_a"), b = ck_read_metrics("rng_b");
    ck_check_same_lines("no-save-rng", &a, &b, 5, 8);
    ck_check_same_params("no-save-rng", "rng_a/p.st", "rng_b/p.st");
    ck_free_metrics(&a);
    ck_free_metrics(&b);
}

int main(void) {
    ck_init("ckpt_resume", true);
    RUN(test_single_rank_dropout);
    RUN(test_dp2_distopt_async);
    RUN(test_dp2_plain);
    RUN(test_dp4_distopt);
    RUN(test_tp2_sp);
    RUN(test_fp16_loss_scale_mid_state);
    RUN(test_ckpt_step);
    RUN(test_finetune_and_no_load_optim);
    RUN(test_sigterm_saves_and_resumes);
    RUN(test_sigterm_exit_code);
    RUN(test_sigterm_one_rank_of_two);
    RUN(test_sigusr1_through_mpirun);
    RUN(test_exit_duration);
    RUN(test_load_without_checkpoint_starts_fresh);
    RUN(test_no_save_rng);
    ck_cleanup();
    return check_summary();
}
