/* checkpoint.c: the trainer's checkpoints: what goes into one (ckpt/ckpt.h holds the
 * format), loading at start, saving at intervals and early exits, and the exit signal. */
#include <signal.h>
#include <string.h>

#include "base/log.h"
#include "base/timer.h"
#include "train/trainer_internal.h"

static mc_ckpt_state ckpt_state(mc_trainer *t) {
    return (mc_ckpt_state){.model = &t->model, .opt = &t->opt, .sched = &t->sched, .comm = &t->comm, .cfg = &t->cfg};
}

static mc_ckpt_progress progress_of(const mc_trainer *t) {
    return (mc_ckpt_progress){
        .iteration = t->iteration,
        .consumed_train_samples = t->consumed_train_samples,
        .consumed_valid_samples = t->consumed_valid_samples,
        .sched_samples = t->sched_samples,
        .optimizer_step = t->opt.step,
        .scaler = t->scaler,
        .rng_seed = t->model.seed,
        .floating_point_operations_so_far = t->flops_per_iteration * (double)t->iteration,
    };
}

/* ---- --exit-signal-handler (SIGTERM by default, --exit-signal) ---- */

static volatile sig_atomic_t g_signalled;
static struct sigaction g_prev_action;
static int g_installed_signal; /* 0: none */

static void on_exit_signal(int sig) {
    (void)sig;
    g_signalled = 1;
}

static void install_signal_handler(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_signal;
    sa.sa_flags = SA_RESTART; /* the interrupted reads and writes carry on */
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_prev_action); /* over the comm layer's note-and-die SIGTERM handler */
    g_installed_signal = sig;
}

bool mc_trainer_signal_received(mc_trainer *t) {
    double got = g_signalled;
    mc_comm_all_reduce_host_f64(&t->comm.world, &got, 1, MC_REDUCE_MAX);
    return got > 0;
}

/* ---- setup ---- */

static int load(mc_trainer *t, mc_err *err) {
    const mc_ckpt_config *k = &t->cfg.ckpt;
    mc_ckpt_state st = ckpt_state(t);
    mc_ckpt_progress pr = progress_of(t);
    mc_ckpt_load_opts o = {
        .dir = k->load,
        .step = k->ckpt_step,
        .load_optim = !k->no_load_optim,
        .load_rng = !k->no_load_rng,
        .finetune = k->finetune,
        .sched_policy = k->override_opt_param_scheduler       ? MC_CKPT_SCHED_OVERRIDE
                        : k->use_checkpoint_opt_param_scheduler ? MC_CKPT_SCHED_CHECKPOINT
                                                                : MC_CKPT_SCHED_CHECK,
        .flag = "--load",
    };
    bool loaded = false;
    if (o.dir) MC_TRY(mc_ckpt_load(&st, &o, &pr, &loaded, err));
    if (!loaded && k->pretrained_checkpoint) { /* Megatron: the pretrained weights, as with --finetune */
        o.dir = k->pretrained_checkpoint;
        o.step = -1;
        o.finetune = true;
        o.flag = "--pretrained-checkpoint";
        MC_TRY(mc_ckpt_load(&st, &o, &pr, &loaded, err));
        if (!loaded) return mc_err_set(err, "--pretrained-checkpoint %s holds no checkpoint", o.dir);
    }
    if (!loaded && k->exit_on_missing_checkpoint)
        return mc_err_set(err, "--load %s holds no checkpoint (--exit-on-missing-checkpoint)", k->load);
    if (!loaded) return MC_OK;
    t->iteration = pr.iteration;
    t->consumed_train_samples = pr.consumed_train_samples;
    t->consumed_valid_samples = pr.consumed_valid_samples;
    t->sched_samples = pr.sched_samples;
    t->opt.step = pr.optimizer_step;
    t->scaler = pr.scaler;
    t->model.seed = pr.rng_seed;
    t->saved_iteration = t->iteration; /* it is saved: the end of a job that trains no further saves nothing */
    if (t->iteration > t->train_iters)
        return mc_err_set(err, "--load %s: the checkpoint is at iteration %lld, past --train-iters %lld", k->load,
                          (long long)t->iteration, (long long)t->train_iters);
    return MC_OK;
}

int mc_trainer_setup_checkpoints(mc_trainer *t, mc_err *err) {
    t->start_time = mc_time_now();
    const mc_ckpt_config *k = &t->cfg.ckpt;
    if (t->cfg.train.exit_signal_handler) install_signal_handler(t->cfg.train.exit_signal);
    MC_TRY(load(t, err));
    if (k->save) {
        mc_ckpt_state st = ckpt_state(t);
        mc_ckpt_save_opts o = {.dir = k->save, .save_optim = !k->no_save_optim, .save_rng = !k->no_save_rng,
                               .async = k->async_save};
        t->saver = mc_ckpt_saver_create(&st, &o, err);
        if (!t->saver) return mc_err_prefix(err, "--save: ");
    }
    return MC_OK;
}

/* ---- saving ---- */

static void print_saved(const mc_trainer *t, int64_t iteration) {
    if (t->cfg.log.quiet) return;
    mc_ckpt_save_stats s = mc_ckpt_saver_stats(t->saver);
    mc_log_info("  successfully saved checkpoint from iteration %7lld to %s [ t %d/%d, p %d/%d ]", (long long)iteration,
                t->cfg.ckpt.save, t->comm.tp_rank + 1, t->comm.sizes.tp, t->comm.pp_rank + 1, t->comm.sizes.pp);
    if (s.bytes >= 1e9)
        mc_log_info("  checkpoint: %.2f GB in %.2f s (%.2f GB/s)%s", s.bytes / 1e9, s.total_s, s.bytes / 1e9 / s.total_s,
                    t->cfg.ckpt.async_save ? "; written in the background" : "");
}

int mc_trainer_poll_checkpoint(mc_trainer *t, bool wait, mc_err *err) {
    if (!t->saver) return MC_OK;
    int64_t published = -1;
    MC_TRY(wait ? mc_ckpt_saver_wait(t->saver, &published, err) : mc_ckpt_saver_poll(t->saver, &published, err));
    if (published >= 0) print_saved(t, published);
    return MC_OK;
}

int mc_trainer_save_checkpoint(mc_trainer *t, mc_err *err) {
    if (!t->saver) return mc_err_set(err, "no --save directory");
    mc_trainer_finish(t); /* the last update lands; the save stays out of the next step's time */
    MC_TRY(mc_trainer_poll_checkpoint(t, true, err)); /* an async save still being written */
    if (!t->cfg.log.quiet) mc_log_info(" saving checkpoint at iteration %7lld to %s", (long long)t->iteration, t->cfg.ckpt.save);
    mc_ckpt_progress pr = progress_of(t);
    MC_TRY(mc_ckpt_save(t->saver, &pr, err));
    t->saved_iteration = t->iteration;
    if (!t->cfg.ckpt.async_save) print_saved(t, t->iteration);
    else if (!t->cfg.log.quiet)
        mc_log_info("  async save of iteration %lld: training held for %.3f s", (long long)t->iteration,
                    mc_ckpt_saver_stats(t->saver).held_s);
    return MC_OK;
}


void mc_trainer_free_checkpoints(mc_trainer *t) {
    if (t->saver) {
        mc_err err;
        if (mc_trainer_poll_checkpoint(t, true, &err) != MC_OK) fprintf(stderr, "megatron-c: error: %s\n", err.msg);
        mc_ckpt_saver_free(t->saver);
        t->saver = NULL;
    }
    if (g_installed_signal) {
        sigaction(g_installed_signal, &g_prev_action, NULL);
        g_installed_signal = 0;
    }
}
