/* trainer_internal.h: the trainer behind mc_trainer (megatron.h). */
#ifndef MC_TRAIN_TRAINER_INTERNAL_H
#define MC_TRAIN_TRAINER_INTERNAL_H

#include "ckpt/ckpt.h"
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

/* The host side of one micro-batch in flight, in backend host memory (pinned on CUDA) so
 * that its upload and the copy of its losses back run without waiting for the device: the
 * batch staged in [s, b] order, and the per-token losses coming back. */
typedef struct mc_batch_slot {
    int32_t *tokens, *labels, *pos, *seg_start;
    void *mask;          /* the micro-batch's loss-mask dtype */
    void *loss;          /* mc_model_loss_dtype */
    int64_t first_index; /* its first sample */
    double ntok;         /* loss-masked tokens */
    bool has_loss;       /* a training micro-batch ran on it: harvest its losses */
} mc_batch_slot;
/* Micro-batches in flight at most (a step with more waits for the device every so many);
 * one more slot holds the next step's prefetched micro-batch or an evaluation batch. */
enum { MC_BATCH_SLOTS_MAX = 9 };

struct mc_trainer {
    mc_config cfg;             /* validated copy; strings owned */
    mc_comm comm;
    mc_backend *be;
    mc_model model;
    mc_optimizer opt;
    mc_ddp ddp;
    mc_lr_schedule sched;
    /* --fp16's loss scaler; a constant 1 otherwise. Checkpoints keep its state with the
     * optimizer's. */
    mc_loss_scaler scaler;
    mc_data *data;
    mc_loader *train_loader;   /* prefetches training micro-batches on its own thread */
    int dp, num_microbatches;
    int64_t train_iters;
    int64_t iteration, consumed_train_samples, consumed_valid_samples;
    /* Samples the LR schedule has advanced by (Megatron's OptimizerParamScheduler
     * num_steps): the consumed samples less those of iterations skipped on fp16 overflow.
     * Checkpoints save it beside the consumed samples. */
    int64_t sched_samples;
    double peak_tflops;        /* per device, for MFU */
    double flops_per_iteration;

    /* The device's micro-batch (one at a time: an upload is queued behind the work of the
     * previous micro-batch, which has then read it), the slots of the micro-batches in
     * flight, and the host batch that evaluation reads into. */
    mc_arena batch_arena;      /* backend memory for mc_microbatch */
    mc_microbatch mb;
    mc_batch_slot slots[MC_BATCH_SLOTS_MAX];
    int nslots;
    int slot_first, slots_used; /* ring: slots_used slots from slot_first are in flight */
    /* The next iteration's first micro-batch, fetched, staged and uploaded before the end of
     * the previous step (its slot is the newest in use), or -1; mb_stale: an evaluation
     * has overwritten t->mb since, so it is uploaded again. */
    int prefetched_slot;
    bool mb_stale;
    double step_loss[2];       /* Megatron's [sum of masked losses, tokens] of the slots harvested */
    mc_batch host_batch;
    /* A step returns with its update still running on the device (the next step's work
     * queues behind it and its gradient-norm read waits for it); only the first step waits
     * for its update, so that its line comes when all of it is done. A step's time runs
     * from step_mark, the previous step's return (for the first step: the moment before
     * its wait), to its own return (the moment before its wait): every step counts one
     * update, its predecessor's, and the times add up to the job's. Evaluation waits for
     * the pending update, keeps that wait in step_carry for the next step, and clears
     * step_chained: the next step then runs from its own start. */
    bool step_chained;
    double step_mark, step_carry;

    mc_metrics_file metrics;

    /* Checkpoints (checkpoint.c): the writer when --save is given, the iteration last saved
     * (-1: none this run), and the job's start for --exit-duration-in-mins. */
    mc_ckpt_saver *saver;
    int64_t saved_iteration;
    double start_time;
};

/* checkpoint.c */
/* --load / --pretrained-checkpoint into the freshly built state, the --save writer, and the
 * SIGTERM handler of --exit-signal-handler (collective). */
int mc_trainer_setup_checkpoints(mc_trainer *t, mc_err *err);
/* Publishes a finished async save (wait: waits for it), printing Megatron's line. */
int mc_trainer_poll_checkpoint(mc_trainer *t, bool wait, mc_err *err);
/* Whether any rank has received SIGTERM (collective; with --exit-signal-handler). */
bool mc_trainer_signal_received(mc_trainer *t);
void mc_trainer_free_checkpoints(mc_trainer *t);


#endif
