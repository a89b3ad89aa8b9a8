/* trainer.c: building a training job (backend, groups, model, optimizer, data) and one
 * iteration: micro-batches of forward/backward with gradient accumulation, the DP
 * reduction, clipping and the AdamW step, as Megatron's train_step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "comm/comm.h"
#include "train/flops.h"
#include "train/model_options.h"
#include "train/trainer_internal.h"

static void plan_batch_buffers(mc_trainer *t, mc_arena *a) {
    int64_t S = t->cfg.model.seq_length, B = t->cfg.train.micro_batch_size, N = S * B;
    mc_dtype mdt = t->model.act_dtype == MC_F64 ? MC_F64 : MC_F32;
    mc_microbatch *mb = &t->mb;
    mb->seq = S;
    mb->batch = B;
    mb->tokens = mc_tensor_1d(mc_arena_alloc(a, (size_t)N * 4), MC_I32, N);
    mb->labels = mc_tensor_1d(mc_arena_alloc(a, (size_t)N * 4), MC_I32, N);
    mb->pos = mc_tensor_1d(mc_arena_alloc(a, (size_t)N * 4), MC_I32, N);
    mb->loss_mask = mc_tensor_1d(mc_arena_alloc(a, (size_t)N * mc_dtype_size(mdt)), mdt, N);
    mc_tensor seg = mc_tensor_2d(mc_arena_alloc(a, (size_t)N * 4), MC_I32, B, S);
    mb->seg_start = t->cfg.data.reset_attention_mask ? seg : mc_tensor_none();
}

/* ---- micro-batches in flight ----
 *
 * A step queues its micro-batches' uploads, forward and backward passes and loss copies
 * without waiting for the device (a wait drains its queue, and it idles while the host
 * catches up), and sums the losses once the gradient norm has made it wait anyway. Slots
 * are used in ring order; the losses are summed in micro-batch order by
 * mc_model_sum_losses, as mc_model_forward_backward sums them, so the lm loss is the same
 * to the bit. */

static void slots_create(mc_trainer *t) {
    mc_backend *be = t->be;
    size_t N = (size_t)t->cfg.train.micro_batch_size * (size_t)t->cfg.model.seq_length;
    size_t mask_sz = mc_dtype_size(t->mb.loss_mask.dtype), loss_sz = mc_dtype_size(mc_model_loss_dtype(&t->model));
    int M = t->num_microbatches;
    t->nslots = (M < MC_BATCH_SLOTS_MAX - 1 ? M : MC_BATCH_SLOTS_MAX - 1) + 1;
    for (int i = 0; i < t->nslots; i++) {
        mc_batch_slot *s = &t->slots[i];
        s->tokens = be->host_alloc(be, N * 4);
        s->labels = be->host_alloc(be, N * 4);
        s->pos = be->host_alloc(be, N * 4);
        s->seg_start = mc_tensor_present(&t->mb.seg_start) ? be->host_alloc(be, N * 4) : NULL;
        s->mask = be->host_alloc(be, N * mask_sz);
        s->loss = be->host_alloc(be, N * loss_sz);
    }
    t->prefetched_slot = -1;
}

static void slots_free(mc_trainer *t) {
    mc_backend *be = t->be;
    for (int i = 0; i < t->nslots; i++) {
        mc_batch_slot *s = &t->slots[i];
        be->host_free(be, s->tokens);
        be->host_free(be, s->labels);
        be->host_free(be, s->pos);
        be->host_free(be, s->seg_start);
        be->host_free(be, s->mask);
        be->host_free(be, s->loss);
    }
}

static mc_batch_slot *slot_in_flight(mc_trainer *t, int k) { return &t->slots[(t->slot_first + k) % t->nslots]; }

/* Adds the losses of the slots in flight to step_loss, oldest first, and frees those slots;
 * the caller has synchronized. A slot without losses (the next step's prefetched
 * micro-batch) ends the walk and stays in flight. */
static void slots_harvest(mc_trainer *t) {
    int64_t N = t->mb.seq * (int64_t)t->cfg.train.micro_batch_size;
    while (t->slots_used > 0) {
        mc_batch_slot *s = slot_in_flight(t, 0);
        if (!s->has_loss) break;
        double lsum, ntok;
        mc_model_sum_losses(s->loss, mc_model_loss_dtype(&t->model), s->mask, t->mb.loss_mask.dtype, N, &lsum, &ntok);
        t->step_loss[0] += lsum;
        t->step_loss[1] += ntok;
        s->has_loss = false;
        t->slot_first = (t->slot_first + 1) % t->nslots;
        t->slots_used--;
    }
}

/* A free slot; when every one is in flight, waits for the device and harvests first. */
static mc_batch_slot *slot_take(mc_trainer *t) {
    if (t->slots_used == t->nslots) {
        t->be->sync(t->be);
        slots_harvest(t);
    }
    MC_ASSERT(t->slots_used < t->nslots, "micro-batch slots: all %d in flight", t->nslots);
    mc_batch_slot *s = slot_in_flight(t, t->slots_used++);
    s->has_loss = false;
    return s;
}

/* Host batch hb ([b, s], a full micro-batch) into slot s as [s, b], the activations' order. */
static void slot_stage(mc_trainer *t, mc_batch_slot *s, const mc_batch *hb) {
    int64_t S = t->cfg.model.seq_length, B = hb->mbs;
    MC_ASSERT(B == t->cfg.train.micro_batch_size, "micro-batch of %lld samples, expected %d", (long long)B,
              t->cfg.train.micro_batch_size);
    bool f64 = t->mb.loss_mask.dtype == MC_F64;
    double ntok = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t q = 0; q < S; q++) {
            int64_t src = b * S + q, dst = q * B + b;
            s->tokens[dst] = hb->tokens[src];
            s->labels[dst] = hb->labels[src];
            s->pos[dst] = hb->position_ids[src];
            if (f64)
                ((double *)s->mask)[dst] = hb->loss_mask[src];
            else
                ((float *)s->mask)[dst] = hb->loss_mask[src];
            ntok += hb->loss_mask[src];
        }
    if (s->seg_start) memcpy(s->seg_start, hb->seg_start, (size_t)(S * B) * 4); /* already [B, S] */
    s->ntok = ntok;
}

/* Queues slot s's upload into t->mb, behind the work that reads the previous micro-batch. */
static void slot_upload(mc_trainer *t, const mc_batch_slot *s) {
    mc_backend *be = t->be;
    mc_microbatch *mb = &t->mb;
    size_t N = (size_t)mb->seq * (size_t)mb->batch;
    be->copy_h2d_async(be, mb->tokens.data, s->tokens, N * 4);
    be->copy_h2d_async(be, mb->labels.data, s->labels, N * 4);
    be->copy_h2d_async(be, mb->pos.data, s->pos, N * 4);
    be->copy_h2d_async(be, mb->loss_mask.data, s->mask, N * mc_dtype_size(mb->loss_mask.dtype));
    if (s->seg_start) be->copy_h2d_async(be, mb->seg_start.data, s->seg_start, N * 4);
}

/* Training micro-batch `micro` of the iteration starting at `consumed` samples: from the
 * loader into a slot, its upload queued. NULL when the data ended or failed (err says). */
static mc_batch_slot *fetch_train(mc_trainer *t, int64_t consumed, int micro, int64_t iteration, mc_err *err) {
    int mbs = t->cfg.train.micro_batch_size;
    int64_t first = mc_data_sample_index(consumed, micro, mbs, t->dp, t->comm.dp_rank);
    mc_loader_request req;
    const mc_batch *hb = mc_loader_next(t->train_loader, &req);
    if (!hb) {
        if (mc_loader_error(t->train_loader, err)) return NULL;
        mc_err_set(err, "the training data ended before iteration %lld", (long long)iteration);
        return NULL;
    }
    MC_ASSERT(req.first_index == first, "loader out of step: sample %lld vs %lld", (long long)req.first_index,
              (long long)first);
    mc_batch_slot *s = slot_take(t);
    slot_stage(t, s, hb);
    s->first_index = first;
    slot_upload(t, s);
    return s;
}

/* World rank 0 opens the data first, building any index caches (Megatron's rank-0 build);
 * then the others open it and load those caches. A failure on rank 0 reaches every rank. */
static int open_data(mc_trainer *t, mc_err *err) {
    const mc_config *cfg = &t->cfg;
    int64_t want[MC_NUM_SPLITS];
    mc_split_requested_samples(cfg, want);
    int rc = MC_OK;
    if (t->comm.rank == 0) rc = mc_data_open(&t->data, cfg, want[0], want[1], want[2], err);
    double rank0_ok = rc == MC_OK ? 1.0 : 0.0;
    mc_comm_all_reduce_host_f64(&t->comm.world, &rank0_ok, 1, MC_REDUCE_MIN);
    if (rank0_ok < 1.0)
        return t->comm.rank == 0 ? MC_ERR : mc_err_set(err, "rank 0 could not open the training data (its error says why)");
    if (t->comm.rank != 0) MC_TRY(mc_data_open(&t->data, cfg, want[0], want[1], want[2], err));
    return MC_OK;
}

/* A file training will write at its end (--export-params): its directory is made now, as
 * --log-dir's and --save's are, and must take files; the path must not be a directory. */
static int check_output_file(const char *path, mc_err *err) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return mc_err_set(err, "--export-params %s is a directory (give a file name)", path);
    char *dir = mc_path_dirname(path);
    mc_err why;
    bool ok = mc_mkdirs(dir, &why) == MC_OK && mc_dir_writable(dir, &why);
    if (!ok) mc_err_set(err, "--export-params %s: cannot write there: %s", path, why.msg);
    free(dir);
    return ok ? MC_OK : MC_ERR;
}

/* The planned model, gradients, optimizer state and activations against what the backend
 * can still allocate: a model too large for the memory is the user's error, one line,
 * before any of it is allocated (an allocation failing later would abort). */
static int check_memory(mc_trainer *t, mc_err *err) {
    const mc_model_config *c = &t->cfg.model;
    size_t params, grads, acts, state = mc_optimizer_state_bytes(&t->opt);
    mc_model_bytes(&t->model, &params, &grads, &acts);
    size_t need = params + grads + state + acts; /* mc_model_plan bounded each far below 2^62 */
    size_t have = t->be->memory_available(t->be);
    if (need <= have) return MC_OK;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return mc_err_set(err,
                      "a model of %d layers, hidden size %d, sequence length %d and micro-batch %d needs %.1f GiB "
                      "(parameters %.1f, gradients %.1f, optimizer state %.1f, activations %.1f) but the %s backend "
                      "has %.1f GiB available",
                      c->num_layers, c->hidden_size, c->seq_length, t->cfg.train.micro_batch_size, (double)need / gib,
                      (double)params / gib, (double)grads / gib, (double)state / gib, (double)acts / gib, t->be->name,
                      (double)have / gib);
}

/* Everything after the process groups: validation, backend, data, model, optimizer. */
static int setup(mc_trainer *t, mc_err *err) {
    mc_config *cfg = &t->cfg;
    MC_TRY(mc_config_validate(cfg, t->comm.world_size, err));
    t->dp = t->comm.sizes.dp;
    t->num_microbatches = mc_config_num_microbatches(cfg, t->dp);
    t->train_iters = cfg->train.train_iters > 0 ? cfg->train.train_iters
                                                : cfg->train.train_samples / cfg->train.global_batch_size;
    MC_TRY(mc_backend_from_config(cfg, &t->comm, &t->be, err));

    MC_TRY(open_data(t, err));

    const mc_dtype pdt = mc_model_dtype_from_config(cfg, t->be), adt = pdt;
    mc_model_layout layout = mc_ddp_layout(cfg, t->comm.dp_cp.size);
    mc_model_options mo = mc_model_options_from_config(cfg, t->dp, pdt, MC_F32, adt, cfg->train.micro_batch_size, &layout);
    MC_TRY(mc_model_plan(&t->model, &mo, t->be, &t->comm, err));
    MC_TRY(mc_optimizer_plan(&t->opt, &t->model, cfg, err));
    MC_TRY(check_memory(t, err));
    mc_model_alloc(&t->model);
    mc_model_init_params(&t->model, cfg->train.seed);
    mc_optimizer_alloc(&t->opt);
    mc_ddp_init(&t->ddp, &t->model, cfg->parallel.use_distributed_optimizer, cfg->parallel.overlap_grad_reduce,
                cfg->parallel.overlap_param_gather);
    mc_lr_schedule_init(&t->sched, cfg);
    const mc_precision_config *pr = &cfg->precision;
    if (pr->fp16 && pr->loss_scale == 0)
        mc_loss_scaler_init_dynamic(&t->scaler, pr->initial_loss_scale, pr->min_loss_scale, pr->loss_scale_window,
                                    pr->hysteresis);
    else
        mc_loss_scaler_init_constant(&t->scaler, pr->fp16 ? pr->loss_scale : 1.0);

    mc_batch_init(&t->host_batch, cfg->train.micro_batch_size, cfg->model.seq_length);
    mc_arena measure;
    mc_arena_init_measure(&measure, "micro-batch (plan)");
    plan_batch_buffers(t, &measure);
    mc_arena_allocator backend_memory = mc_backend_arena_allocator(t->be);
    mc_arena_init(&t->batch_arena, "micro-batch", &backend_memory, measure.peak);
    plan_batch_buffers(t, &t->batch_arena);
    slots_create(t);

    t->flops_per_iteration = mc_flops_per_iteration(cfg, t->model.padded_vocab, cfg->train.global_batch_size);
    if (cfg->log.peak_tflops > 0)
        t->peak_tflops = cfg->log.peak_tflops;
    else if (t->be->device == MC_DEVICE_CUDA)
        t->peak_tflops = 989.0; /* H100/H200 dense bf16, Megatron's MFU denominator */
    else
        t->peak_tflops = mc_measure_gemm_tflops(t->be);
    /* The metrics file is the last rank's, where Megatron writes its logs. */
    if (cfg->log.log_dir && t->comm.rank == t->comm.world_size - 1)
        MC_TRY(mc_metrics_open(&t->metrics, cfg->log.log_dir, err));
    /* --export-params is written after training: find a bad path before the first step. */
    if (cfg->log.export_params && t->comm.rank == 0) MC_TRY(check_output_file(cfg->log.export_params, err));
    return MC_OK;
}

mc_trainer *mc_trainer_create(const mc_config *cfg_in, mc_err *err) {
    mc_trainer *t = mc_xcalloc(1, sizeof *t);
    mc_config_copy(&t->cfg, cfg_in);
    const mc_parallel_config *p = &t->cfg.parallel;
    if (mc_comm_init_from_env(&t->comm, p->tensor_model_parallel_size, p->pipeline_model_parallel_size,
                              p->context_parallel_size, p->expert_model_parallel_size, p->distributed_timeout_minutes,
                              err) != MC_OK) {
        mc_config_free(&t->cfg);
        free(t);
        return NULL;
    }
    t->saved_iteration = -1;
    const int rc = setup(t, err);
    if (mc_comm_agree_on_setup(&t->comm, rc, mc_config_hash(&t->cfg), "the training configuration", err) != MC_OK ||
        mc_trainer_setup_checkpoints(t, err) != MC_OK) {
        mc_trainer_free(t);
        return NULL;
    }
    return t;
}

void mc_trainer_free(mc_trainer *t) {
    if (!t) return;
    mc_metrics_close(&t->metrics);
    if (t->be) {
        mc_trainer_finish(t);
        mc_trainer_free_checkpoints(t);
        slots_free(t);
        mc_arena_free(&t->batch_arena);
        mc_ddp_free(&t->ddp);
        mc_optimizer_free(&t->opt);
        mc_model_free(&t->model);
    }
    if (t->train_loader) mc_loader_free(t->train_loader);
    mc_batch_free(&t->host_batch);
    if (t->data) mc_data_close(t->data);
    mc_comm_free(&t->comm); /* NCCL communicators before the device's backend */
    if (t->be) t->be->destroy(t->be);
    mc_config_free(&t->cfg);
    free(t);
}

int64_t mc_trainer_num_params(const mc_trainer *t) { return mc_model_num_params_global(&t->model); }

/* The training stream starts where training stands (0, or a resumed count). */
static int start_train_loader(mc_trainer *t, mc_err *err) {
    const mc_config *cfg = &t->cfg;
    mc_loader_train_stream s = {
        .consumed = t->consumed_train_samples,
        .mbs = cfg->train.micro_batch_size,
        .dp = t->dp,
        .dp_rank = t->comm.dp_rank,
        .num_microbatches = t->num_microbatches,
        .global_batch = cfg->train.global_batch_size,
        .end = t->train_iters * cfg->train.global_batch_size,
    };
    return mc_loader_create_train(&t->train_loader, t->data, &s, 4, err);
}

/* Fault injection for the tests of a rank that dies mid-step: MC_TEST_EXIT_RANK=r and
 * MC_TEST_EXIT_AT_ITERATION=i make world rank r exit abruptly at the start of iteration i. */
static void maybe_inject_exit(const mc_trainer *t) {
    const char *it = getenv("MC_TEST_EXIT_AT_ITERATION"), *rank = getenv("MC_TEST_EXIT_RANK");
    if (!it || !rank || t->iteration + 1 != atoll(it) || t->comm.rank != atoi(rank)) return;
    fprintf(stderr, "megatron-c: fault injection: rank %d exits at iteration %s\n", t->comm.rank, it);
    fflush(stderr);
    _exit(1);
}

/* Fault injection for the loss-scaling tests: MC_TEST_INF_GRAD_AT_ITERATION=i[,j...] puts
 * +inf into one gradient (the first element of the final norm's weight: the embedding's
 * gradient may hold the pass's activations until its backward) on world rank
 * MC_TEST_INF_GRAD_RANK (default 0) before iteration i's backward, as an fp16 overflow
 * would: backward accumulates onto it, and the data-parallel reduction carries it to the
 * ranks that share the gradient. */
static void maybe_inject_inf_grad(mc_trainer *t) {
    const char *list = getenv("MC_TEST_INF_GRAD_AT_ITERATION"), *rank = getenv("MC_TEST_INF_GRAD_RANK");
    if (!list || t->comm.rank != (rank ? atoi(rank) : 0)) return;
    for (const char *p = list; *p;) {
        char *end;
        long long it = strtoll(p, &end, 10);
        if (end == p) return;
        if (it == t->iteration + 1) {
            const float inf = INFINITY;
            t->be->copy_h2d(t->be, (float *)t->model.grad_buf + t->model.params[t->model.lnf_w].offset, &inf, sizeof inf);
            return;
        }
        p = *end == ',' ? end + 1 : end;
    }
}

int mc_trainer_step(mc_trainer *t, mc_step_stats *st, mc_err *err) {
    const mc_config *cfg = &t->cfg;
    int mbs = cfg->train.micro_batch_size, M = t->num_microbatches;
    mc_backend *be = t->be;
    if (t->iteration >= t->train_iters)
        return mc_err_set(err, "training is complete (%lld iterations)", (long long)t->train_iters);
    if (!t->train_loader) MC_TRY(start_train_loader(t, err));
    maybe_inject_exit(t);
    maybe_inject_inf_grad(t);
    const double loss_scale = t->scaler.scale;
    double t0 = t->step_chained ? t->step_mark : mc_time_now(), carried = t->step_carry;
    t->step_carry = 0;
    t->step_loss[0] = t->step_loss[1] = 0;
    for (int micro = 0; micro < M; micro++) {
        mc_batch_slot *s;
        if (micro == 0 && t->prefetched_slot >= 0) {
            s = &t->slots[t->prefetched_slot];
            t->prefetched_slot = -1;
            int64_t first = mc_data_sample_index(t->consumed_train_samples, 0, mbs, t->dp, t->comm.dp_rank);
            MC_ASSERT(s->first_index == first, "prefetched sample %lld vs %lld", (long long)s->first_index,
                      (long long)first);
            if (t->mb_stale) slot_upload(t, s);
        } else {
            s = fetch_train(t, t->consumed_train_samples, micro, t->iteration + 1, err);
            if (!s) return MC_ERR;
        }
        t->mb_stale = false;
        /* Megatron: each micro-batch's loss is its token mean divided by the number of
         * micro-batches; DDP then averages over data-parallel ranks. With --fp16 the
         * backward seed is also multiplied by the loss scale. */
        double grad_scale = s->ntok > 0 ? loss_scale / (s->ntok * M * t->dp) : 0.0;
        uint64_t stream = 1 + (uint64_t)(t->iteration * M + micro) * (uint64_t)t->dp + (uint64_t)t->comm.dp_rank;
        mc_ddp_begin_microbatch(&t->ddp, micro == M - 1);
        mc_model_train_microbatch(&t->model, &t->mb, grad_scale, stream, s->loss);
        s->has_loss = true;
    }
    mc_ddp_finish_grads(&t->ddp);
    /* The update is queued before the host learns the norm: the device decides the clip
     * factor and whether to skip (mc_optimizer_step), so it goes from the norm straight to
     * AdamW, and the host reads the norm while AdamW runs. */
    int64_t zeros = cfg->log.log_num_zeros_in_grad ? mc_optimizer_count_zeros(&t->opt) : 0;
    double lr = mc_lr_at(&t->sched, (double)t->sched_samples);
    double wd = mc_wd_at(&t->sched, (double)t->sched_samples);
    mc_optimizer_step(&t->opt, lr, wd, loss_scale);
    mc_ddp_gather_params(&t->ddp); /* a skipped update leaves the shards as they were: gathering them is harmless */
    double gnorm;
    bool taken = mc_optimizer_finish_step(&t->opt, &gnorm); /* waits for the norm, and the losses before it */
    slots_harvest(t);
    double pair[2] = {t->step_loss[0], t->step_loss[1]}; /* Megatron's [sum of masked losses, tokens] */
    mc_comm_all_reduce_host_f64(&t->comm.dp_cp, pair, 2, MC_REDUCE_SUM);
    double loss = pair[1] > 0 ? pair[0] / pair[1] : 0.0;
    /* fp16: an inf or NaN gradient (the norm is then inf or NaN on every rank, and the
     * update wrote nothing) is an overflow of the scaled loss: the step is skipped and the
     * scaler backs off. Otherwise a non-finite loss or gradient is an error, as Megatron's
     * NaN check. */
    bool found_inf = !taken, skipped = found_inf && cfg->precision.fp16;
    if (!skipped && (!isfinite(loss) || found_inf))
        return mc_err_set(err, "iteration %lld: %s is %s (learning rate too high, or bad data); stopping",
                          (long long)(t->iteration + 1), isfinite(loss) ? "the gradient norm" : "the lm loss",
                          isnan(isfinite(loss) ? gnorm : loss) ? "NaN" : "Inf");
    if (skipped) zeros = 0; /* Megatron reports neither the norm nor the zeros of a skipped step */
    else t->sched_samples += cfg->train.global_batch_size; /* Megatron steps the scheduler on success only */
    mc_loss_scaler_update(&t->scaler, found_inf);
    /* The next iteration's first micro-batch: fetched, staged and its upload queued while
     * the device finishes this step (a failure is left for that step to report). */
    if (t->iteration + 1 < t->train_iters) {
        mc_err ignored;
        mc_batch_slot *s = fetch_train(t, t->consumed_train_samples + cfg->train.global_batch_size, 0,
                                       t->iteration + 2, &ignored);
        if (s) t->prefetched_slot = (int)(s - t->slots);
    }
    /* Only the first step waits for its update here (see step_mark in trainer_internal.h;
     * mc_trainer_finish waits for the last). Not waiting spares the device the gap while
     * the host would wake, log and launch the next step (~180 us a step on the H200). */
    double mark = mc_time_now();
    if (t->iteration == 0) be->sync(be);
    t->consumed_train_samples += cfg->train.global_batch_size;
    t->iteration++;
    double dt = mark - t0 + carried;
    t->step_chained = true;
    t->step_mark = mark;

    if (st) {
        memset(st, 0, sizeof *st);
        st->iteration = t->iteration;
        st->consumed_samples = t->consumed_train_samples;
        st->lm_loss = loss;
        st->grad_norm = gnorm;
        /* Megatron prints the scheduler's value after its step: the next update's rate. */
        st->learning_rate = mc_lr_at(&t->sched, (double)t->sched_samples);
        st->elapsed_ms = dt * 1e3;
        int world = t->comm.world_size;
        st->tflops_per_gpu = t->flops_per_iteration / (dt * 1e12 * world);
        st->tokens_per_sec_per_gpu = (double)cfg->train.global_batch_size * cfg->model.seq_length / dt / world;
        st->num_zeros = zeros;
        st->skipped = skipped;
        st->loss_scale = t->scaler.scale;
    }
    return MC_OK;
}

void mc_trainer_finish(mc_trainer *t) {
    if (!t->step_chained) return;
    t->be->sync(t->be);
    t->step_carry += mc_time_now() - t->step_mark;
    t->step_chained = false;
}

int mc_trainer_evaluate(mc_trainer *t, int split, int64_t iters, double *loss_out, mc_err *err) {
    const mc_config *cfg = &t->cfg;
    mc_trainer_finish(t);
    int mbs = cfg->train.micro_batch_size, M = t->num_microbatches;
    int64_t gbs = cfg->train.global_batch_size;
    int64_t start = split == MC_SPLIT_VALID ? t->consumed_valid_samples : 0;
    int64_t have = mc_data_split_len(t->data, split);
    if (start + iters * gbs > have)
        return mc_err_set(err, "the %s split has %lld samples; %lld iterations of %lld need %lld",
                          split == MC_SPLIT_VALID ? "validation" : "test", (long long)have, (long long)iters,
                          (long long)gbs, (long long)(start + iters * gbs));
    double pair[2] = {0, 0};
    for (int64_t it = 0; it < iters; it++) {
        for (int micro = 0; micro < M; micro++) {
            int64_t first = mc_data_sample_index(start + it * gbs, micro, mbs, t->dp, t->comm.dp_rank);
            mc_data_get_batch(t->data, split, first, mbs, &t->host_batch);
            mc_batch_slot *s = slot_take(t);
            slot_stage(t, s, &t->host_batch);
            slot_upload(t, s);
            t->mb_stale = true;
            double loss_sum, num_tokens;
            mc_model_forward_backward(&t->model, &t->mb, false, 0.0, 0, false, &loss_sum, &num_tokens);
            t->slots_used--; /* the newest, free again: the forward waited for the device */
            pair[0] += loss_sum;
            pair[1] += num_tokens;
        }
    }
    mc_comm_all_reduce_host_f64(&t->comm.dp_cp, pair, 2, MC_REDUCE_SUM);
    if (split == MC_SPLIT_VALID) t->consumed_valid_samples += iters * gbs;
    *loss_out = pair[1] > 0 ? pair[0] / pair[1] : 0.0;
    return MC_OK;
}
