/* pipeline_schedule.c: the schedule tables of pipeline_schedule.h. */
#include "train/pipeline_schedule.h"

#include <stdlib.h>
#include <string.h>

#define VP_FLAG "--num-layers-per-virtual-pipeline-stage"
#define GROUP_FLAG "--microbatch-group-size-per-virtual-pipeline-stage"

int mc_pp_schedule_check(int pp, int microbatches, int vstages, int group_size, mc_err *err) {
    if (pp < 1) return mc_err_set(err, "--pipeline-model-parallel-size: must be at least 1, got %d", pp);
    if (microbatches < 1)
        return mc_err_set(err,
                          "--global-batch-size: a step needs at least one micro-batch per pipeline, got M=%d "
                          "(--global-batch-size / (--micro-batch-size x data-parallel size))",
                          microbatches);
    if (vstages < 1) return mc_err_set(err, VP_FLAG ": needs at least 1 virtual stage per rank, got v=%d", vstages);
    if (group_size < 0) return mc_err_set(err, GROUP_FLAG ": must be positive, got %d", group_size);
    if (vstages == 1) return MC_OK; /* 1F1B (or no pipelining) runs any M; G plays no part */
    if (pp == 1)
        return mc_err_set(err,
                          VP_FLAG
                          ": the interleaved schedule (v=%d virtual stages per rank) needs "
                          "--pipeline-model-parallel-size > 1, got 1",
                          vstages);
    if (group_size == 0) { /* the default G = PP: the two rules below fold into one */
        if (microbatches % pp != 0)
            return mc_err_set(err,
                              VP_FLAG
                              ": the interleaved schedule needs micro-batches (M=%d) to be a multiple of "
                              "the pipeline size (%d)",
                              microbatches, pp);
        return MC_OK;
    }
    if (group_size < pp || group_size > microbatches)
        return mc_err_set(err, GROUP_FLAG " %d: must lie between the pipeline size (%d) and the micro-batches (M=%d)",
                          group_size, pp, microbatches);
    /* A last group shorter than PP would leave stages waiting on one another each round. */
    int last = microbatches % group_size;
    if (last != 0 && last < pp)
        return mc_err_set(err,
                          GROUP_FLAG
                          " %d: the micro-batches left after whole groups (M=%d mod %d = %d) must be 0 "
                          "or at least the pipeline size (%d)",
                          group_size, microbatches, group_size, last, pp);
    return MC_OK;
}

int mc_pp_warmup_forwards(int pp, int rank, int microbatches, int vstages, int group_size) {
    int total = microbatches * vstages, warmup;
    if (pp == 1)
        warmup = 0;
    else if (vstages == 1)
        warmup = pp - rank - 1;
    else {
        /* (v - 1) x G forwards fill the later chunks on every rank; earlier ranks run two more
         * per stage after them, so that later stages can start 1F1B at once. */
        warmup = (pp - rank - 1) * 2 + (vstages - 1) * (group_size ? group_size : pp);
    }
    return warmup < total ? warmup : total;
}

/* Megatron's get_schedule_table: virtual micro-batch k -> (micro-batch, chunk) of the
 * forwards. Micro-batches go in groups of G; a group runs through chunk 0, then chunk 1,
 * and so on; the last group holds what is left (G, or M % G when that is at least PP). */
static void fill_forward_order(int microbatches, int vstages, int group, int *mb, int *chunk) {
    int k = 0;
    for (int first = 0; first < microbatches; first += group) {
        int end = first + group < microbatches ? first + group : microbatches;
        for (int c = 0; c < vstages; c++)
            for (int m = first; m < end; m++) {
                mb[k] = m;
                chunk[k] = c;
                k++;
            }
    }
}

/* Peers of (rank, chunk) for op, from its virtual stage chunk x PP + rank. */
static void set_peers(mc_pp_action *a, int pp, int rank, int vstages) {
    int stage = a->chunk * pp + rank, last = vstages * pp - 1;
    int from = a->op == MC_PP_FORWARD ? stage - 1 : stage + 1;
    int to = a->op == MC_PP_FORWARD ? stage + 1 : stage - 1;
    a->recv_rank = a->recv_chunk = a->send_rank = a->send_chunk = -1;
    if (from >= 0 && from <= last) {
        a->recv_rank = from % pp;
        a->recv_chunk = from / pp;
    }
    if (to >= 0 && to <= last) {
        a->send_rank = to % pp;
        a->send_chunk = to / pp;
    }
}

int mc_pp_schedule_build(mc_pp_schedule *s, int pp, int rank, int microbatches, int vstages, int group_size,
                         mc_err *err) {
    memset(s, 0, sizeof *s);
    MC_TRY(mc_pp_schedule_check(pp, microbatches, vstages, group_size, err));
    if (rank < 0 || rank >= pp)
        return mc_err_set(err, "pipeline rank %d is outside 0..%d (--pipeline-model-parallel-size %d)", rank, pp - 1,
                          pp);
    int group = vstages > 1 ? (group_size ? group_size : pp) : microbatches;
    int total = microbatches * vstages;
    int warmup = mc_pp_warmup_forwards(pp, rank, microbatches, vstages, group_size);

    int *mb = mc_xmalloc((size_t)total * sizeof(int)), *chunk = mc_xmalloc((size_t)total * sizeof(int));
    fill_forward_order(microbatches, vstages, group, mb, chunk);
    s->actions = mc_xcalloc((size_t)(2 * total), sizeof(mc_pp_action));

    /* Forward k and backward k take entry k of the table; a backward runs the mirrored chunk
     * (v - 1 - c). Within one chunk both go in micro-batch order, so backward k meets the
     * activations of the oldest forward still held on its chunk, as Megatron's pop(0) does. */
    int n = 0;
    for (int k = 0; k < total + warmup; k++) {
        /* k-th forward first, then the backward that trails it by `warmup`: the warmup is
         * forwards alone, the steady state F/B pairs, the cooldown backwards alone. */
        if (k < total) s->actions[n++] = (mc_pp_action){.op = MC_PP_FORWARD, .microbatch = mb[k], .chunk = chunk[k]};
        int b = k - warmup;
        if (b >= 0)
            s->actions[n++] =
                (mc_pp_action){.op = MC_PP_BACKWARD, .microbatch = mb[b], .chunk = vstages - 1 - chunk[b]};
    }
    MC_ASSERT(n == 2 * total, "built %d actions, expected %d", n, 2 * total);
    for (int i = 0; i < n; i++) set_peers(&s->actions[i], pp, rank, vstages);
    free(mb);
    free(chunk);

    s->pp = pp;
    s->rank = rank;
    s->microbatches = microbatches;
    s->vstages = vstages;
    s->group_size = vstages > 1 ? group : 0;
    s->warmup = warmup;
    s->n_actions = n;
    return MC_OK;
}

void mc_pp_schedule_free(mc_pp_schedule *s) {
    free(s->actions);
    memset(s, 0, sizeof *s);
}

double mc_pp_bubble_fraction(int pp, int microbatches, int vstages) {
    return (double)(pp - 1) / ((double)vstages * (double)microbatches);
}

int mc_pp_schedule_peak_in_flight(const mc_pp_schedule *s) {
    int held = 0, peak = 0;
    for (int i = 0; i < s->n_actions; i++) {
        held += s->actions[i].op == MC_PP_FORWARD ? 1 : -1;
        if (held > peak) peak = held;
    }
    return peak;
}
