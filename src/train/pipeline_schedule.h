/* pipeline_schedule.h: the pipeline-parallel schedules as tables (issue 23). For one rank of
 * a pipeline it lists, in order, the forwards and backwards that rank runs in one training
 * step, and for each one the peer it receives from and sends to. No communication and no
 * model code: a runtime walks the table and posts the point-to-point transfers.
 *
 * The orders are Megatron-Core's (megatron/core/pipeline_parallel/schedules.py):
 *   - PP 1: forward_backward_no_pipelining, F then B per micro-batch (gradient
 *     accumulation order);
 *   - v 1: forward_backward_pipelining_without_interleaving (1F1B): PP - r - 1 warmup
 *     forwards (at most M), then (1 forward, 1 backward) pairs, then the cooldown backwards;
 *   - v > 1: forward_backward_pipelining_with_interleaving: virtual micro-batch k picks its
 *     (micro-batch, chunk) from get_schedule_table (groups of G micro-batches run through
 *     chunk 0, then chunk 1, ...; backwards walk the chunks in reverse), with
 *     (PP - r - 1) x 2 + (v - 1) x G warmup forwards, at most M x v. This is the rule since
 *     Megatron-LM commit 4295be1a (Nov 2024, "tunable schedule"); before it, M == PP put
 *     every forward in the warmup.
 *
 * Virtual stages: chunk c of rank r is virtual stage c x PP + r of the v x PP in the model, so
 * with 16 layers, PP 4 and v 2, rank 0 holds layers 1-2 (chunk 0) and 9-10 (chunk 1).
 * A forward receives its input from the virtual stage before (rank r - 1, or rank PP - 1's
 * chunk c - 1 when r is 0) and sends its output to the one after; a backward the reverse.
 * The first virtual stage's forward reads the data instead, the last one's computes the loss.
 *
 * Transfers on one (sender, receiver, direction) link match in order: the k-th send there,
 * in the sender's table order, is the k-th receive, in the receiver's. Blocking transfers
 * run through when posted as Megatron posts them: 1F1B each send with the next action's
 * receive, interleaved each steady (F, B) pair's two sends with the next pair's two
 * receives. The interleaved table posted one action at a time, or with G > PP, needs
 * receives posted ahead or buffered (Megatron: --overlap-p2p-communication). The test
 * simulates all ranks together under both disciplines. */
#ifndef MC_TRAIN_PIPELINE_SCHEDULE_H
#define MC_TRAIN_PIPELINE_SCHEDULE_H

#include "base/error.h"

typedef enum { MC_PP_FORWARD = 0, MC_PP_BACKWARD } mc_pp_op;

/* One step of a rank's table. A forward receives activations (shape [s/CP, mbs, h]) and
 * sends activations; a backward receives and sends their gradients. Peers are pipeline
 * ranks; the peer's chunk tells the two sides' transfers apart when both are on one rank
 * pair (PP 2, or the wrap from rank PP - 1 to rank 0). */
typedef struct mc_pp_action {
    mc_pp_op op;
    int microbatch; /* 0..M-1 */
    int chunk;      /* model chunk on this rank, 0..v-1 */
    int recv_rank;  /* -1: nothing to receive (first virtual stage's F, last one's B) */
    int recv_chunk; /* the sender's chunk */
    int send_rank;  /* -1: nothing to send (last virtual stage's F, first one's B) */
    int send_chunk; /* the receiver's chunk */
} mc_pp_action;

typedef struct mc_pp_schedule {
    int pp, rank, microbatches, vstages, group_size; /* group_size: G (v > 1), else 0 */
    int warmup;                                      /* forwards before the F/B pairs */
    int n_actions;                                   /* 2 x M x v */
    mc_pp_action *actions;                           /* (n_actions) */
} mc_pp_schedule;

/* Checks PP, M, v and G (group_size; 0: the default, PP) against Megatron's constraints;
 * the message names the flag: M >= 1 (from --global-batch-size); v > 1 needs PP > 1, and
 * PP <= G <= M, and M % G == 0 or M % G >= PP (with the default G: M a multiple of PP).
 * Megatron also wants PP > 2 for v > 1 unless --overlap-p2p-communication, because a
 * batched send/receive would carry two transfers between the same two ranks; the table
 * itself is sound with PP 2, so it is accepted here and the runtime decides. */
int mc_pp_schedule_check(int pp, int microbatches, int vstages, int group_size, mc_err *err);

/* Builds rank's table (0 <= rank < pp) into s; mc_pp_schedule_free releases it. */
int mc_pp_schedule_build(mc_pp_schedule *s, int pp, int rank, int microbatches, int vstages, int group_size,
                         mc_err *err);
void mc_pp_schedule_free(mc_pp_schedule *s);

/* The warmup, forwards a rank runs before its steady F/B pairs (arguments already
 * checked): 1F1B min(PP - r - 1, M); interleaved min((PP - r - 1) x 2 + (v - 1) x G, M x v);
 * PP 1: 0. The first backward comes one forward later unless every forward is warmup. */
int mc_pp_warmup_forwards(int pp, int rank, int microbatches, int vstages, int group_size);

/* Idle fraction of a step relative to its compute, with equal forward and backward times
 * per stage: (PP - 1)/M for 1F1B, (PP - 1)/(v x M) interleaved (Narayanan et al. 2021). */
double mc_pp_bubble_fraction(int pp, int microbatches, int vstages);

/* The most (micro-batch, chunk) activations the rank holds at once (forward done, backward
 * not yet) while running s, in units of one chunk's activations: with v 1, micro-batches,
 * min(PP - r, M) for 1F1B. */
int mc_pp_schedule_peak_in_flight(const mc_pp_schedule *s);

#endif
