/* trainer_internal.h: the trainer behind mc_trainer (megatron.h). */
#ifndef MC_TRAIN_TRAINER_INTERNAL_H
#define MC_TRAIN_TRAINER_INTERNAL_H

#include "comm/comm.h"
#include "data/data.h"
#include "data/loader.h"
#include "megatron.h"
#include "model/model.h"
#include "optim/ddp.h"
#include "optim/loss_scale.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/train_log.h"

struct mc_trainer {
    mc_config cfg;             /* validated copy; strings owned */
    mc_comm comm;
    mc_backend *be;
    mc_model model;
    mc_optimizer opt;
    mc_ddp ddp;
    mc_lr_schedule sched;
    /* --fp16's loss scaler; a constant 1 otherwise. Its state goes into checkpoints with
     * the optimizer's when they arrive (optim/loss_scale.h). */
    mc_loss_scaler scaler;
    mc_data *data;
    mc_loader *train_loader;   /* prefetches training micro-batches on its own thread */
    int dp, num_microbatches;
    int64_t train_iters;
    int64_t iteration, consumed_train_samples, consumed_valid_samples;
    /* Samples the LR schedule has advanced by (Megatron's OptimizerParamScheduler
     * num_steps): the consumed samples less those of iterations skipped on fp16 overflow.
     * Checkpoints will save it beside the consumed samples. */
    int64_t sched_samples;
    double peak_tflops;        /* per device, for MFU */
    double flops_per_iteration;

    /* One micro-batch: host batch from the data pipeline ([b, s]) and its [s, b] upload. */
    mc_batch host_batch;
    int32_t *stage_tokens, *stage_labels, *stage_pos;
    void *stage_mask;          /* act dtype */
    mc_arena batch_arena;      /* backend memory for mc_microbatch */
    mc_microbatch mb;

    mc_metrics_file metrics;
};

/* Uploads a host micro-batch into t->mb ([b, s] -> [s, b], host -> backend); returns the
 * number of loss-masked tokens. */
double mc_trainer_upload_batch(mc_trainer *t, const mc_batch *hb);

#endif
