/* train_loop.c: the whole job as `megatron-c train` runs it (Megatron's pretrain()):
 * iterations with the log line every --log-interval, validation every --eval-interval,
 * and the final validation and test evaluations. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/timer.h"
#include "train/trainer_internal.h"

static void print_setup(const mc_trainer *t) {
    const mc_config *c = &t->cfg;
    const mc_model *m = &t->model;
    mc_log_info("> backend: %s | world size: %d | TP: %d | PP: %d | CP: %d | DP: %d", t->be->name,
                t->comm.world_size, t->comm.sizes.tp, t->comm.sizes.pp, t->comm.sizes.cp, t->dp);
    mc_log_info("> model: %d layers, hidden %d, %d heads (%d query groups, head dim %d), ffn %d%s, vocab %d "
                "(padded %d), seq %d, %s, %s%s%s",
                c->model.num_layers, c->model.hidden_size, c->model.num_attention_heads, c->model.num_query_groups,
                c->model.kv_channels, c->model.ffn_hidden_size, c->model.swiglu ? " (SwiGLU)" : " (GELU)",
                c->model.vocab_size, m->padded_vocab, c->model.seq_length,
                c->model.normalization == MC_NORM_RMSNORM ? "RMSNorm" : "LayerNorm",
                c->model.position_embedding_type == MC_POS_ROPE ? "RoPE" : "learned positions",
                c->model.add_bias_linear ? ", biases" : "",
                c->model.untie_embeddings_and_output_weights ? ", untied head" : "");
    mc_log_info(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %lld", t->comm.tp_rank,
                t->comm.pp_rank, (long long)m->numel_unpadded);
    mc_log_info("> global batch size %d = micro batch %d x data parallel %d x %d micro-batches; %lld iterations",
                c->train.global_batch_size, c->train.micro_batch_size, t->dp, t->num_microbatches,
                (long long)t->train_iters);
    const mc_loss_scaler *ls = &t->scaler;
    if (c->precision.fp16 && ls->dynamic)
        mc_log_info("> fp16: dynamic loss scale from %.1f (min %.1f, window %lld, hysteresis %d)", ls->scale,
                    ls->min_scale, (long long)ls->window, ls->hysteresis);
    else if (c->precision.fp16)
        mc_log_info("> fp16: constant loss scale %.1f", ls->scale);
    mc_log_info("> MFU peak: %.3f TFLOP/s per device (%s)", t->peak_tflops,
                c->log.peak_tflops > 0 ? "--peak-tflops"
                : t->be->device == MC_DEVICE_CUDA ? "dense bf16 peak"
                                                  : "measured sgemm");
}

static void print_memory(const mc_trainer *t, int64_t iteration) {
    size_t allocated, max_allocated, reserved;
    t->be->memory_stats(t->be, &allocated, &max_allocated, &reserved);
    double mb = 1.0 / (1024.0 * 1024.0);
    mc_log_info("[Rank %d] (after %lld iterations) memory (MB) | allocated: %.1f | max allocated: %.1f | reserved: "
                "%.1f | max reserved: %.1f",
                t->comm.rank, (long long)iteration, allocated * mb, max_allocated * mb, reserved * mb, reserved * mb);
}

static int evaluate_and_print(mc_trainer *t, int split, const char *prefix, mc_err *err) {
    double loss;
    MC_TRY(mc_trainer_evaluate(t, split, t->cfg.train.eval_iters, &loss, err));
    mc_log_print_validation(prefix, loss);
    mc_metrics_write_validation(&t->metrics, t->iteration, split == MC_SPLIT_VALID ? "valid" : "test", loss);
    return MC_OK;
}

/* After each iteration's log and evaluation, as Megatron's checkpoint_and_decide_exit: a
 * SIGTERM (with --exit-signal-handler), the save interval, the time limit and the exit
 * interval, each exit saving first (with --save) unless this iteration just saved. */
static int checkpoint_and_decide_exit(mc_trainer *t, bool *exit_now, mc_err *err) {
    const mc_config *c = &t->cfg;
    int64_t it = t->iteration;
    bool save = c->ckpt.save != NULL;
    MC_TRY(mc_trainer_poll_checkpoint(t, false, err));
    if (c->train.exit_signal_handler && mc_trainer_signal_received(t)) {
        if (save) MC_TRY(mc_trainer_save_checkpoint(t, err));
        int sig = c->train.exit_signal;
        mc_log_info("exiting program after receiving %s (iteration %lld).",
                    sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGUSR2 ? "SIGUSR2" : "SIGTERM",
                    (long long)it);
        *exit_now = true;
        return MC_OK;
    }
    if (save && c->ckpt.save_interval > 0 && it % c->ckpt.save_interval == 0) MC_TRY(mc_trainer_save_checkpoint(t, err));
    if (c->train.exit_duration_in_mins > 0) {
        double minutes = (mc_time_now() - t->start_time) / 60.0, over = minutes > c->train.exit_duration_in_mins;
        mc_comm_all_reduce_host_f64(&t->comm.world, &over, 1, MC_REDUCE_MAX);
        if (over > 0) {
            if (save && t->saved_iteration != it) MC_TRY(mc_trainer_save_checkpoint(t, err));
            mc_log_info("exiting program after %.2f minutes (--exit-duration-in-mins) at iteration %lld", minutes,
                        (long long)it);
            *exit_now = true;
            return MC_OK;
        }
    }
    if (c->train.exit_interval > 0 && it % c->train.exit_interval == 0) {
        if (save && t->saved_iteration != it) MC_TRY(mc_trainer_save_checkpoint(t, err));
        mc_log_info("exiting program at iteration %lld (--exit-interval)", (long long)it);
        *exit_now = true;
    }
    return MC_OK;
}

int mc_trainer_run(mc_trainer *t, mc_err *err) {
    const mc_config *c = &t->cfg;
    if (!c->log.quiet) print_setup(t);
    bool do_valid = c->train.eval_iters > 0 && mc_data_split_len(t->data, MC_SPLIT_VALID) > 0;
    bool do_test = c->train.eval_iters > 0 && mc_data_split_len(t->data, MC_SPLIT_TEST) > 0;
    double acc_loss = 0, acc_ms = 0, acc_tflops = 0, acc_tok = 0;
    int64_t acc_n = 0, acc_advanced = 0, acc_skipped = 0, acc_nan = 0;
    bool memory_reported = false;
    while (t->iteration < t->train_iters) {
        mc_step_stats st;
        MC_TRY(mc_trainer_step(t, &st, err));
        if (st.skipped) { /* Megatron's training_log: skipped iterations stay out of the loss */
            acc_skipped++;
            acc_nan += !isfinite(st.lm_loss);
        } else {
            acc_loss += st.lm_loss;
            acc_advanced++;
        }
        acc_ms += st.elapsed_ms;
        acc_n++;
        int64_t it = t->iteration;
        if (it % c->train.log_interval == 0 || it == 1) {
            double ms = acc_ms / (double)acc_n;
            double dt = ms / 1e3;
            int world = t->comm.world_size;
            acc_tflops = t->flops_per_iteration / (dt * 1e12 * world);
            if (acc_tflops > t->peak_tflops) { /* a peak is what nothing exceeds: MFU stays at most 100% */
                if (!c->log.quiet)
                    mc_log_info("note: %.3g TFLOP/s achieved, above the MFU peak of %.3g%s: MFU uses it from now on",
                                acc_tflops, t->peak_tflops,
                                c->log.peak_tflops > 0 ? " (--peak-tflops)" : " (measured at start-up, under load?)");
                t->peak_tflops = acc_tflops;
            }
            acc_tok = (double)c->train.global_batch_size * c->model.seq_length / dt / world;
            mc_iter_log l = {
                .iteration = it,
                .train_iters = t->train_iters,
                .consumed_samples = t->consumed_train_samples,
                .elapsed_ms = ms,
                .tflops_per_gpu = acc_tflops,
                .learning_rate = st.learning_rate,
                .global_batch_size = c->train.global_batch_size,
                .have_lm_loss = acc_advanced > 0,
                .lm_loss = acc_advanced > 0 ? acc_loss / (double)acc_advanced : 0.0,
                .loss_scale = st.loss_scale,
                .have_grad_norm = !st.skipped,
                .grad_norm = st.grad_norm,
                .have_num_zeros = c->log.log_num_zeros_in_grad && !st.skipped,
                .num_zeros = st.num_zeros,
                .have_params_norm = c->log.log_params_norm,
                .params_norm = c->log.log_params_norm ? mc_optimizer_params_norm(&t->opt) : 0.0,
                .skipped_iters = acc_skipped,
                .nan_iters = acc_nan,
                .tokens_per_sec_per_gpu = acc_tok,
                .mfu = acc_tflops / t->peak_tflops,
            };
            char line[1024];
            mc_log_format_iteration(line, sizeof line, &l);
            if (!c->log.quiet) mc_log_last("%s", line);
            mc_metrics_write_iteration(&t->metrics, &l);
            if (!memory_reported && !c->log.quiet) {
                print_memory(t, it);
                memory_reported = true;
            }
            acc_loss = acc_ms = 0;
            acc_n = acc_advanced = acc_skipped = acc_nan = 0;
        }
        if (c->train.eval_interval > 0 && it % c->train.eval_interval == 0 && do_valid) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "iteration %lld", (long long)it);
            MC_TRY(evaluate_and_print(t, MC_SPLIT_VALID, prefix, err));
        }
        bool exit_now = false;
        MC_TRY(checkpoint_and_decide_exit(t, &exit_now, err));
        if (exit_now) {
            mc_trainer_finish(t);
            return mc_trainer_poll_checkpoint(t, true, err);
        }
    }
    mc_trainer_finish(t);
    /* Megatron saves at the end unless the last iteration just did */
    if (c->ckpt.save && t->iteration > 0 && t->saved_iteration != t->iteration)
        MC_TRY(mc_trainer_save_checkpoint(t, err));
    MC_TRY(mc_trainer_poll_checkpoint(t, true, err));
    char prefix[96];
    if (do_valid) {
        snprintf(prefix, sizeof prefix, "iteration %lld on validation set", (long long)t->iteration);
        MC_TRY(evaluate_and_print(t, MC_SPLIT_VALID, prefix, err));
    }
    if (do_test) {
        snprintf(prefix, sizeof prefix, "iteration %lld on test set", (long long)t->iteration);
        MC_TRY(evaluate_and_print(t, MC_SPLIT_TEST, prefix, err));
    }
    return MC_OK;
}
