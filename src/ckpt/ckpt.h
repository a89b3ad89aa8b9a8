/* ckpt.h: sharded, resumable checkpoints in Megatron's directory layout, in a format of
 * our own that any parallel layout can load.
 *
 * Layout (Megatron's): SAVE/latest_checkpointed_iteration.txt holds the iteration of the
 * newest complete checkpoint, SAVE/iter_0000100/ holds it:
 *   metadata.json                      iteration, model config, parallel layout, progress
 *                                      (consumed samples, LR scheduler, loss scaler, Adam's
 *                                      step), every rank's RNG state, every file with its
 *                                      size and CRC-32C (whole file and per block), and
 *                                      every tensor: global name, global shape, dtype, and
 *                                      the pieces it was saved in (file, key, global
 *                                      offsets, shape, byte range)
 *   rank-00003-of-00008.safetensors    the pieces world rank 3 owns
 * No pickle anywhere: safetensors and JSON only.
 *
 * Tensors are stored under their global Megatron names with their global shapes, in F32:
 * the weights (the optimizer's fp32 master values, so bf16 training loses nothing, whether
 * the master is kept whole or split into the bf16 parameters and their remainders) as
 * `decoder.layers.0.mlp.linear_fc1.weight`, Adam's moments as
 * `optimizer.exp_avg.<name>` and `optimizer.exp_avg_sq.<name>`. Each element is written
 * once, by one rank: the data-parallel rank that owns it (its distributed-optimizer shard;
 * without the distributed optimizer the same equal split of each gradient bucket), and
 * among tensor-parallel replicas the one mc_model_unique_prefix names. A rank's piece is
 * a box of the global tensor, contiguous in the rank's memory.
 *
 * Loading reshards: every rank computes the boxes of the global tensors its own shards
 * cover, under its own layout, and copies the intersections with the stored pieces. So a
 * checkpoint saved under any TP / DP / distributed-optimizer layout loads under any other
 * valid one, and into one process. (Pipeline, context and expert parallelism add only
 * their slicing rules: which global rows and layers a rank's tensors are.) Vocabulary
 * padding may differ between layouts (Megatron pads to a multiple of 128 x TP): rows a
 * layout pads beyond the stored ones keep their initial values, with zero moments.
 *
 * Crash safety: a save writes every file into SAVE/iter_N.tmp/, fsyncs it, writes
 * metadata.json last, renames the directory to iter_N (atomically exchanging it with an
 * older iter_N where the filesystem allows) and only then replaces the tracker (temporary
 * file, fsync, rename). A checkpoint is valid only when its metadata, its files' sizes and
 * its checksums hold; loading takes the tracker's (without a tracker, the newest), or if
 * it is damaged the newest older valid one, naming each damaged one it skips in one line.
 *
 * Every function here is collective over the world: all ranks call it, with the same
 * arguments, and all get the same status. */
#ifndef MC_CKPT_CKPT_H
#define MC_CKPT_CKPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "io/hf_convert.h"
#include "megatron.h"
#include "model/model.h"
#include "optim/loss_scale.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

/* The live state a checkpoint is taken from and loaded into. A model without training
 * state (generation's inference model) loads with opt and sched NULL: its weights alone. */
typedef struct mc_ckpt_state {
    mc_model *model;
    mc_optimizer *opt;     /* NULL: loading the weights only */
    mc_lr_schedule *sched; /* NULL with opt */
    mc_comm *comm;
    const mc_config *cfg; /* validated */
} mc_ckpt_state;

/* Where training stands, besides the tensors. */
typedef struct mc_ckpt_progress {
    int64_t iteration;
    int64_t consumed_train_samples, consumed_valid_samples;
    int64_t sched_samples;  /* the LR scheduler's num_steps (samples of the updates taken) */
    int64_t optimizer_step; /* Adam's step count, for its bias correction */
    mc_loss_scaler scaler;
    /* The random state: Megatron-C draws from counter-based Philox streams named by (seed,
     * iteration, micro-batch, data-parallel rank, site), so a rank's whole RNG state is the
     * seed; the iteration restores the rest. */
    uint64_t rng_seed;
    double floating_point_operations_so_far;
} mc_ckpt_progress;

/* ---- saving ---- */

typedef struct mc_ckpt_save_opts {
    const char *dir;
    bool save_optim, save_rng;
    /* The save snapshots the state (into spare device memory when there is room, else host
     * memory) and a background thread writes it while training goes on; the next save,
     * mc_ckpt_saver_wait, or free waits for it. */
    bool async;
} mc_ckpt_save_opts;

typedef struct mc_ckpt_saver mc_ckpt_saver;

/* Creates the save directory and checks that every rank can write into it, so that a bad
 * --save fails before training starts. */
mc_ckpt_saver *mc_ckpt_saver_create(const mc_ckpt_state *st, const mc_ckpt_save_opts *opts, mc_err *err);
/* Saves the state at `progress` (blocking, or started in the background with async). An
 * async save still in flight is finished first. */
int mc_ckpt_save(mc_ckpt_saver *s, const mc_ckpt_progress *progress, mc_err *err);
/* Publishes an async save whose files every rank has written (metadata, rename, tracker);
 * returns at once when one is still being written or none is pending. Call between
 * iterations. *published: the iteration it published, or -1. */
int mc_ckpt_saver_poll(mc_ckpt_saver *s, int64_t *published, mc_err *err);
/* Waits for an async save and publishes it (*published as for poll; may be NULL). */
int mc_ckpt_saver_wait(mc_ckpt_saver *s, int64_t *published, mc_err *err);

/* The last save's numbers: seconds it held training (all of a blocking save; an async
 * one's snapshot), seconds from its start until it was published, and bytes written by
 * all ranks. */
typedef struct mc_ckpt_save_stats {
    double held_s, total_s, bytes;
} mc_ckpt_save_stats;
mc_ckpt_save_stats mc_ckpt_saver_stats(const mc_ckpt_saver *s);
void mc_ckpt_saver_free(mc_ckpt_saver *s);

/* ---- loading ---- */

typedef enum {
    MC_CKPT_SCHED_CHECK = 0, /* Megatron's default: the flags' schedule must equal the checkpoint's */
    MC_CKPT_SCHED_OVERRIDE,  /* --override-opt_param-scheduler: the flags' values win */
    MC_CKPT_SCHED_CHECKPOINT /* --use-checkpoint-opt_param-scheduler: the checkpoint's win */
} mc_ckpt_sched_policy;

typedef struct mc_ckpt_load_opts {
    const char *dir;
    int64_t step;           /* --ckpt-step: that iteration exactly; < 0: the newest valid */
    bool load_optim, load_rng;
    bool finetune;          /* weights only; iteration, samples and schedule start at 0 */
    mc_ckpt_sched_policy sched_policy;
    const char *flag;       /* the flag that named dir, for messages ("--load") */
} mc_ckpt_load_opts;

/* Loads the tracker's checkpoint of opts->dir, or the newest older valid one (or opts->step),
 * into the state, which must
 * hold freshly initialized parameters (rows a checkpoint does not cover keep them).
 * *loaded is false, with MC_OK, when the directory holds no checkpoint at all (Megatron
 * then starts from scratch). Damaged checkpoints are named on stderr and skipped; none
 * valid, a model config that differs from the flags, a schedule that differs (under
 * MC_CKPT_SCHED_CHECK) or missing optimizer or RNG state that was asked for is an error. */
int mc_ckpt_load(const mc_ckpt_state *st, const mc_ckpt_load_opts *opts, mc_ckpt_progress *progress, bool *loaded,
                 mc_err *err);

/* ---- inspecting (one process, no training state) ---- */

/* Prints a checkpoint's iteration, layout, config, progress and tensors (shapes, dtypes,
 * sizes). `path` is a save directory (its newest checkpoint) or one iter_N directory. With
 * `verify`, re-reads every file against its checksums; a damaged checkpoint is then an
 * error naming the file and the bytes. */
int mc_ckpt_inspect(const char *path, bool verify, FILE *out, mc_err *err);

/* "iter_0000100": Megatron's directory name of an iteration (7 digits). */
void mc_ckpt_iter_name(int64_t iteration, char out[32]);

/* ---- the weights alone (megatron-c convert --to hf) ---- */

/* The weights of the checkpoint in dir that --load would take (the tracker's iteration,
 * else the newest), each a whole global F32 tensor under its global name appended to out,
 * with the stored model config (into *m: the fields a checkpoint records), padded
 * vocabulary and iteration. Every file's size and CRC-32C are checked first. Needs neither
 * a model nor a backend; not collective. */
int mc_ckpt_read_weights(const char *dir, mc_model_config *m, int *padded_vocab, int64_t *iteration,
                         mc_host_params *out, mc_err *err);
/* The model config alone (and the iteration) of that checkpoint: what `generate` builds. */
int mc_ckpt_read_model_config(const char *dir, mc_model_config *m, int64_t *iteration, mc_err *err);

#endif
