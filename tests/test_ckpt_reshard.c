/* Resharding (checkpoint issue, acceptance 4): a checkpoint saved under TP2 x DP2 with the
 * distributed optimizer (4 CPU ranks) loads under one rank, TP4, DP4 with the distributed
 * optimizer, TP2 + SP and TP2 x DP4; the next 5 iterations' losses and grad norms equal the
 * unresharded continuation's within 1e-6 relative. Also one rank to TP2, and a vocabulary
 * padded differently (TP4 pads 200 to 512, TP2 to 256): the padding rows the checkpoint
 * lacks keep their initial values and training carries on. */
#include "ckpt_util.h"

static char g_args[2048];

static void continuation(const char *name, int np, const char *layout, const char *ckpt, const ck_metrics *ref) {
    char args[8192], log[96], dir[64];
    snprintf(dir, sizeof dir, "%s_out", name);
    snprintf(args, sizeof args, "%s %s --load %s --log-dir %s", g_args, layout, ckpt, dir);
    snprintf(log, sizeof log, "%s.log", name);
    int rc = ck_train(np, NULL, args, log);
    CHECK(rc == 0, "%s exited with %d (see %s/%s)", name, rc, ck_tmp, log);
    ck_metrics m = ck_read_metrics(dir);
    CHECK(m.n == 5 && ref->n == 5, "%s: %d lines, reference %d", name, m.n, ref->n);
    double worst = 0;
    for (int i = 0; i < m.n && i < ref->n; i++) {
        CHECK(m.v[i].iteration == ref->v[i].iteration, "%s: iteration %ld vs %ld", name, m.v[i].iteration,
              ref->v[i].iteration);
        CHECK_REL(m.v[i].loss, ref->v[i].loss, 1e-6, "%s: loss at iteration %ld", name, m.v[i].iteration);
        CHECK_REL(m.v[i].norm, ref->v[i].norm, 1e-6, "%s: grad norm at iteration %ld", name, m.v[i].iteration);
        worst = fmax(worst, fabs(m.v[i].loss - ref->v[i].loss) / fabs(ref->v[i].loss));
    }
    printf("   %-24s worst loss difference %.2e\n", name, worst);
    ck_free_metrics(&m);
}

static void test_from_tp2_dp2_distopt(void) {
    const char *src = "--tensor-model-parallel-size 2 --use-distributed-optimizer";
    char args[8192];
    snprintf(args, sizeof args, "%s %s --save from4 --exit-interval 5", g_args, src);
    CHECK(ck_train(4, NULL, args, "save4.log") == 0, "the TP2 x DP2 run that saves");
    snprintf(args, sizeof args, "%s %s --load from4 --log-dir ref4", g_args, src);
    CHECK(ck_train(4, NULL, args, "ref4.log") == 0, "the unresharded continuation");
    ck_metrics ref = ck_read_metrics("ref4");
    continuation("to_single_rank", 1, "", "from4", &ref);
    continuation("to_tp4", 4, "--tensor-model-parallel-size 4", "from4", &ref);
    continuation("to_dp4_distopt", 4, "--use-distributed-optimizer", "from4", &ref);
    continuation("to_tp2_sp", 2, "--tensor-model-parallel-size 2 --sequence-parallel", "from4", &ref);
    continuation("to_tp2_dp4_distopt", 8, "--tensor-model-parallel-size 2 --use-distributed-optimizer", "from4", &ref);
    ck_free_metrics(&ref);
}

static void test_single_rank_to_tp2(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --save from1 --exit-interval 5", g_args);
    CHECK(ck_train(1, NULL, args, "save1.log") == 0, "the single-rank run that saves");
    snprintf(args, sizeof args, "%s --load from1 --log-dir ref1", g_args);
    CHECK(ck_train(1, NULL, args, "ref1.log") == 0, "the unresharded continuation");
    ck_metrics ref = ck_read_metrics("ref1");
    continuation("single_to_tp2", 2, "--tensor-model-parallel-size 2", "from1", &ref);
    ck_free_metrics(&ref);
}

static void test_vocab_padding_differs(void) {
    char args[8192];
    const char *vocab = "--vocab-size 200 --make-vocab-size-divisible-by 128";
    snprintf(args, sizeof args, "%s %s --tensor-model-parallel-size 2 --save pad2 --exit-interval 5", g_args, vocab);
    CHECK(ck_train(2, NULL, args, "pad_save.log") == 0, "TP2 run (vocabulary padded to 256)");
    snprintf(args, sizeof args, "%s %s --tensor-model-parallel-size 4 --load pad2 --log-dir pad4", g_args, vocab);
    CHECK(ck_train(4, NULL, args, "pad_load.log") == 0, "TP4 run (vocabulary padded to 512) from it");
    ck_metrics m = ck_read_metrics("pad4");
    CHECK(m.n == 5 && isfinite(m.v[0].loss), "the TP4 run trains on (%d lines)", m.n);
    ck_free_metrics(&m);
}

int main(void) {
    ck_init("ckpt_reshard", true);
    snprintf(g_args, sizeof g_args, "%s --global-batch-size 16 --train-iters 10 --attention-dropout 0 --hidden-dropout 0",
             ck_llama);
    RUN(test_from_tp2_dp2_distopt);
    RUN(test_single_rank_to_tp2);
    RUN(test_vocab_padding_differs);
    ck_cleanup();
    return check_summary();
}
