/* Kill safety (checkpoint issue, acceptance 2): a training run saving every 2 iterations,
 * its writes slowed by the test-only switches (16 KiB checksum blocks, 2 ms after each), is
 * killed with SIGKILL at random moments 20 times, each time resuming from the same
 * directory. After every kill the tracked checkpoint verifies (inspect-ckpt --verify), the
 * next run loads it (never a partial one: unfinished saves live in iter_N.tmp, which
 * loading ignores), and at most one save interval of the iterations logged is lost. The
 * run finally completes, and its parameters equal an uninterrupted run's bit for bit. */
#include <dirent.h>
#include <signal.h>

#include "ckpt_util.h"

#define ITERS 120
#define INTERVAL 2
#define KILLS 20

static char g_args[2048];

static long tracked_iteration(void) {
    char *t = ck_read("kill_ckpt/latest_checkpointed_iteration.txt");
    long v = t ? atol(t) : 0;
    free(t);
    return v;
}

/* The newest published checkpoint (the tracker may lag it by one, if a kill came between
 * the directory's rename and the tracker's update). */
static long newest_checkpoint(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/kill_ckpt", ck_tmp);
    DIR *d = opendir(path);
    long newest = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "iter_", 5) && strlen(e->d_name) == 12 && atol(e->d_name + 5) > newest)
            newest = atol(e->d_name + 5);
    if (d) closedir(d);
    return newest;
}

static bool tmp_dir_present(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -d %s/kill_ckpt/*.tmp > /dev/null 2>&1", ck_tmp);
    return system(cmd) == 0;
}

static void test_kill_during_saves(void) {
    char args[8192];
    snprintf(args, sizeof args, "%s --export-params straight/p.st --log-dir straight", g_args);
    CHECK(ck_train(1, NULL, args, "straight.log") == 0, "uninterrupted run");
    unsigned seed = 20261202;
    int mid_save = 0;
    long progress = 0; /* the newest iteration a run has logged */
    for (int k = 0; k < KILLS; k++) {
        char cmd[8192];
        long before = tracked_iteration(); /* what a resume loads */
        snprintf(cmd, sizeof cmd,
                 "cd %s && (MC_TEST_CKPT_BLOCK_BYTES=16384 MC_TEST_CKPT_WRITE_DELAY_MS=2 OMP_NUM_THREADS=1 %s train %s "
                 "--save kill_ckpt --load kill_ckpt --save-interval %d --log-dir kill_%d > kill_%d.log 2>&1 & "
                 "echo $! > kill.pid)",
                 ck_tmp, ck_bin, g_args, INTERVAL, k, k);
        CHECK(system(cmd) == 0, "start run %d", k);
        char *pid = ck_read("kill.pid");
        seed = seed * 1103515245u + 12345u;
        usleep(250000 + (seed >> 8) % 700000); /* 250-950 ms: startup, then mostly saves */
        bool saving = tmp_dir_present();
        snprintf(cmd, sizeof cmd, "kill -KILL %ld 2>/dev/null; while kill -0 %ld 2>/dev/null; do sleep 0.01; done",
                 pid ? atol(pid) : 0, pid ? atol(pid) : 0);
        (void)system(cmd);
        free(pid);
        mid_save += saving;
        char dir[32], log[32];
        snprintf(dir, sizeof dir, "kill_%d", k);
        snprintf(log, sizeof log, "kill_%d.log", k);
        ck_metrics m = ck_read_metrics(dir);
        if (m.n) progress = m.v[m.n - 1].iteration;
        /* it resumed from the newest checkpoint (the one the tracker named before it): its
         * first iteration follows it, and its log names it (when it got that far) */
        CHECK(m.n == 0 || m.v[0].iteration == before + 1, "run %d started at iteration %ld, not after %ld (see %s/%s)", k,
              m.n ? m.v[0].iteration : 0, before, ck_tmp, log);
        ck_free_metrics(&m);
        long t = tracked_iteration(), newest = newest_checkpoint();
        CHECK(newest - t <= INTERVAL, "kill %d: the tracker (%ld) lags the newest checkpoint (%ld) by more than a save", k,
              t, newest);
        char *text = ck_read(log), *at = text ? strstr(text, "loading checkpoint from kill_ckpt at iteration ") : NULL;
        CHECK(!at || atol(at + strlen("loading checkpoint from kill_ckpt at iteration ")) == before,
              "run %d loaded another checkpoint than iteration %ld (see %s/%s)", k, before, ck_tmp, log);
        free(text);
        CHECK(progress - t <= INTERVAL, "kill %d: logged up to iteration %ld but the tracked checkpoint is %ld", k, progress,
              t);
        if (t > 0) {
            snprintf(cmd, sizeof cmd, "cd %s && %s inspect-ckpt kill_ckpt --verify > inspect_%d.log 2>&1", ck_tmp, ck_bin, k);
            CHECK(system(cmd) == 0, "kill %d: the tracked checkpoint %ld does not verify (see %s/inspect_%d.log)", k, t,
                  ck_tmp, k);
        }
    }
    printf("   %d of %d kills landed while a save was being written\n", mid_save, KILLS);
    CHECK(mid_save >= KILLS / 4, "only %d kills landed during a save", mid_save);
    snprintf(args, sizeof args, "%s --save kill_ckpt --load kill_ckpt --save-interval %d --log-dir final --export-params final/p.st", g_args,
             INTERVAL);
    CHECK(ck_train(1, NULL, args, "final.log") == 0, "the final run completes");
    ck_check_same_params("after 20 kills", "straight/p.st", "final/p.st");
}

int main(void) {
    ck_init("ckpt_kill", false);
    snprintf(g_args, sizeof g_args, "%s --global-batch-size 8 --train-iters %d", ck_llama, ITERS);
    RUN(test_kill_during_saves);
    ck_cleanup();
    return check_summary();
}
