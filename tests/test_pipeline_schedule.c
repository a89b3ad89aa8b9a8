/* test_pipeline_schedule.c: the pipeline schedule tables (train/pipeline_schedule.h) as
 * pure arithmetic: every (micro-batch, chunk) runs forward and backward once on every
 * rank; all ranks simulated together finish with their transfers matched in order (eager
 * sends, and rendezvous sends batched with the next receives as Megatron posts them);
 * 1F1B's warmup / steady / cooldown shape; the interleaved orders written out by
 * hand from Megatron's schedules.py (and its own docstring example); the errors; the
 * bubble fractions and the activations held. */
#include <stdbool.h>

#include "check.h"
#include "train/pipeline_schedule.h"

static const int k_pps[] = {1, 2, 3, 4, 8};
static const int k_vs[] = {1, 2, 3};

/* The table as "F0c0 F1c0 B0c1 ..." (micro-batch, then chunk), for readable comparisons. */
static void format_table(const mc_pp_schedule *s, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n_actions && at < size; i++) {
        const mc_pp_action *a = &s->actions[i];
        at += (size_t)snprintf(buf + at, size - at, "%s%c%dc%d", i ? " " : "", a->op == MC_PP_FORWARD ? 'F' : 'B',
                               a->microbatch, a->chunk);
    }
}

static bool build(mc_pp_schedule *s, int pp, int rank, int m, int v, int g) {
    mc_err err = {{0}};
    int rc = mc_pp_schedule_build(s, pp, rank, m, v, g, &err);
    CHECK(rc == MC_OK, "PP %d rank %d M %d v %d G %d: %s", pp, rank, m, v, g, err.msg);
    return rc == MC_OK;
}

/* Calls fn(pp, v, m) for the valid combinations swept: M from 1 (1F1B) or PP (interleaved)
 * up to 4 x PP + 3, and for interleaving only multiples of PP (the default G). */
static void sweep(void (*fn)(int pp, int v, int m)) {
    for (size_t i = 0; i < sizeof k_pps / sizeof k_pps[0]; i++)
        for (size_t j = 0; j < sizeof k_vs / sizeof k_vs[0]; j++) {
            int pp = k_pps[i], v = k_vs[j];
            if (v > 1 && pp == 1) continue;
            for (int m = 1; m <= 4 * pp + 3; m++)
                if (v == 1 || m % pp == 0) fn(pp, v, m);
        }
}

/* ---- each (micro-batch, chunk) once forward, once backward, backward after forward ---- */

static void check_coverage_grouped(int pp, int v, int m, int g) {
    for (int r = 0; r < pp; r++) {
        mc_pp_schedule s;
        if (!build(&s, pp, r, m, v, g)) return;
        CHECK(s.n_actions == 2 * m * v, "PP %d v %d M %d rank %d: %d actions", pp, v, m, r, s.n_actions);
        int *fwd = calloc((size_t)(m * v), sizeof(int)), *bwd = calloc((size_t)(m * v), sizeof(int));
        for (int i = 0; i < s.n_actions; i++) {
            const mc_pp_action *a = &s.actions[i];
            if (a->microbatch < 0 || a->microbatch >= m || a->chunk < 0 || a->chunk >= v) {
                CHECK(0, "PP %d v %d M %d rank %d: action %d out of range (mb %d chunk %d)", pp, v, m, r, i,
                      a->microbatch, a->chunk);
                continue;
            }
            int id = a->microbatch * v + a->chunk;
            if (a->op == MC_PP_FORWARD)
                fwd[id]++;
            else {
                CHECK(fwd[id] == 1, "PP %d v %d M %d rank %d: B%dc%d before its forward", pp, v, m, r, a->microbatch,
                      a->chunk);
                bwd[id]++;
            }
        }
        for (int id = 0; id < m * v; id++)
            CHECK(fwd[id] == 1 && bwd[id] == 1, "PP %d v %d M %d rank %d: mb %d chunk %d ran F %d, B %d times", pp, v,
                  m, r, id / v, id % v, fwd[id], bwd[id]);
        free(fwd);
        free(bwd);
        mc_pp_schedule_free(&s);
    }
}

static void check_coverage(int pp, int v, int m) { check_coverage_grouped(pp, v, m, 0); }

static void test_each_microbatch_once(void) { sweep(check_coverage); }

/* ---- all ranks together: dependencies and point-to-point matching ---- */

/* A rank runs its actions in steps: receive, compute, send. Each (sender, receiver,
 * direction) link is FIFO: the n-th send there meets the n-th receive. The receives of a
 * step are posted in one batch with the sends of the step before, and the step computes
 * once its batch completed:
 *   - eager: a step is one action and a send completes at once (buffered): the table's
 *     dependencies alone;
 *   - rendezvous: a send also waits for its receive to be posted, as NCCL's does. 1F1B's
 *     steps are single actions (Megatron's send_forward_recv_backward and
 *     send_backward_recv_forward); the interleaved steady state's step is its (F, B) pair
 *     (send_forward_backward_recv_forward_backward, both next receives posted at once).
 *     Interleaved tables posted one action at a time do deadlock under rendezvous; the
 *     runtime has to post as Megatron does, or not block. So do groups G > PP: the last
 *     rank's chunk-0 output reaches rank 0 up to G - PP forwards before rank 0's chunk 1
 *     asks for it (Megatron keeps G - PP + 1 receive buffers there, with
 *     --overlap-p2p-communication), so those are checked eager only.
 * No rank able to move while some are not finished is a deadlock. */
typedef struct {
    int mb, from_chunk, to_chunk;
} sim_msg;

typedef struct {
    int link, seq;
    bool send;
} sim_op;

typedef struct {
    int pp, v, m;
    bool rendezvous;
    mc_pp_schedule *ranks;
    int *begin, *end;                 /* (pp) the step being waited for: actions [begin, end) */
    sim_op (*batch)[4];               /* (pp) its batch */
    int *n_ops;                       /* (pp) */
    int **recv_link, **recv_seq;      /* (pp, actions) where each action's receive was posted */
    int *posted_sends, *posted_recvs; /* (links) */
    sim_msg **log;                    /* (links) messages by sequence number */
    bool *fwd_done, *bwd_done;        /* (m * v * pp) by (micro-batch, virtual stage) */
} sim;

static int sim_link(const sim *w, int from, int to, mc_pp_op dir) { return (from * w->pp + to) * 2 + (int)dir; }

/* The end of the step starting at action i: the interleaved steady (F, B) pairs are one
 * step under rendezvous, everything else one action. */
static int sim_step_end(const sim *w, int r, int i) {
    const mc_pp_schedule *s = &w->ranks[r];
    int steady_end = s->warmup + 2 * (s->n_actions / 2 - s->warmup);
    bool pair = w->rendezvous && s->vstages > 1 && i >= s->warmup && i < steady_end;
    return i + (pair ? 2 : 1);
}

/* Posts rank r's batch: the sends of actions [sent, begin) and the receives of
 * [begin, end). */
static void sim_post(sim *w, int r, int sent) {
    const mc_pp_action *acts = w->ranks[r].actions;
    w->n_ops[r] = 0;
    for (int i = sent; i < w->begin[r]; i++) {
        const mc_pp_action *a = &acts[i];
        if (a->send_rank < 0) continue;
        int l = sim_link(w, r, a->send_rank, a->op), seq = w->posted_sends[l]++;
        w->log[l][seq] = (sim_msg){a->microbatch, a->chunk, a->send_chunk};
        w->batch[r][w->n_ops[r]++] = (sim_op){l, seq, true};
    }
    for (int i = w->begin[r]; i < w->end[r]; i++) {
        const mc_pp_action *a = &acts[i];
        if (a->recv_rank < 0) continue;
        int l = sim_link(w, a->recv_rank, r, a->op), seq = w->posted_recvs[l]++;
        w->recv_link[r][i] = l;
        w->recv_seq[r][i] = seq;
        w->batch[r][w->n_ops[r]++] = (sim_op){l, seq, false};
    }
}

static bool sim_batch_done(const sim *w, int r) {
    for (int k = 0; k < w->n_ops[r]; k++) {
        sim_op o = w->batch[r][k];
        if (!o.send && w->posted_sends[o.link] <= o.seq) return false;
        if (o.send && w->rendezvous && w->posted_recvs[o.link] <= o.seq) return false;
    }
    return true;
}

/* Computes action i of rank r: the message it received is the one it expects, and the
 * virtual stage it depends on already ran. */
static bool sim_compute(sim *w, int r, int i) {
    const mc_pp_action *a = &w->ranks[r].actions[i];
    int pp = w->pp, stage = a->chunk * pp + r, last = w->v * pp - 1;
    const char *what = a->op == MC_PP_FORWARD ? "F" : "B";
    bool ok = true;
    if (a->recv_rank >= 0) {
        sim_msg got = w->log[w->recv_link[r][i]][w->recv_seq[r][i]];
        ok = got.mb == a->microbatch && got.from_chunk == a->recv_chunk && got.to_chunk == a->chunk;
        CHECK(ok, "PP %d v %d M %d rank %d %s%dc%d: received mb %d chunk %d -> %d", pp, w->v, w->m, r, what,
              a->microbatch, a->chunk, got.mb, got.from_chunk, got.to_chunk);
    }
    int id = a->microbatch * (w->v * pp) + stage;
    bool dep;
    if (a->op == MC_PP_FORWARD) {
        dep = stage == 0 || w->fwd_done[id - 1];
        CHECK(dep, "PP %d v %d M %d rank %d F%dc%d before stage %d's forward", pp, w->v, w->m, r, a->microbatch,
              a->chunk, stage - 1);
        w->fwd_done[id] = true;
    } else {
        dep = w->fwd_done[id] && (stage == last || w->bwd_done[id + 1]);
        CHECK(dep, "PP %d v %d M %d rank %d B%dc%d before its forward or stage %d's backward", pp, w->v, w->m, r,
              a->microbatch, a->chunk, stage + 1);
        w->bwd_done[id] = true;
    }
    return ok && dep;
}

/* Returns true when every rank ran its table and every transfer met its partner. */
static bool simulate(int pp, int v, int m, int g, bool rendezvous) {
    sim w = {.pp = pp, .v = v, .m = m, .rendezvous = rendezvous};
    int links = pp * pp * 2, n = 2 * m * v;
    w.ranks = calloc((size_t)pp, sizeof *w.ranks);
    w.begin = calloc((size_t)pp, sizeof(int));
    w.end = calloc((size_t)pp, sizeof(int));
    w.batch = calloc((size_t)pp, sizeof *w.batch);
    w.n_ops = calloc((size_t)pp, sizeof(int));
    w.recv_link = calloc((size_t)pp, sizeof *w.recv_link);
    w.recv_seq = calloc((size_t)pp, sizeof *w.recv_seq);
    w.posted_sends = calloc((size_t)links, sizeof(int));
    w.posted_recvs = calloc((size_t)links, sizeof(int));
    w.log = calloc((size_t)links, sizeof *w.log);
    for (int l = 0; l < links; l++) w.log[l] = calloc((size_t)n, sizeof(sim_msg));
    w.fwd_done = calloc((size_t)(m * v * pp), sizeof(bool));
    w.bwd_done = calloc((size_t)(m * v * pp), sizeof(bool));
    bool ok = true;
    for (int r = 0; r < pp; r++) {
        ok = build(&w.ranks[r], pp, r, m, v, g) && ok;
        w.recv_link[r] = calloc((size_t)n, sizeof(int));
        w.recv_seq[r] = calloc((size_t)n, sizeof(int));
    }
    for (int r = 0; ok && r < pp; r++) {
        w.end[r] = sim_step_end(&w, r, 0);
        sim_post(&w, r, 0);
    }

    int finished = 0; /* ranks past their last action with their last batch complete */
    bool progress = ok;
    while (ok && finished < pp && progress) {
        progress = false;
        for (int r = 0; r < pp && ok; r++) {
            if (w.begin[r] > n || !sim_batch_done(&w, r)) continue;
            progress = true;
            if (w.begin[r] == n) { /* the last sends met their receives */
                w.begin[r]++;
                finished++;
                continue;
            }
            for (int i = w.begin[r]; i < w.end[r]; i++) ok = sim_compute(&w, r, i) && ok;
            int sent = w.begin[r];
            w.begin[r] = w.end[r];
            w.end[r] = w.begin[r] < n ? sim_step_end(&w, r, w.begin[r]) : n;
            sim_post(&w, r, sent);
        }
    }
    if (ok && finished < pp) {
        char where[256];
        size_t at = 0;
        for (int r = 0; r < pp && at < sizeof where; r++)
            at += (size_t)snprintf(where + at, sizeof where - at, " r%d@%d/%d", r, w.begin[r], n);
        CHECK(finished == pp, "PP %d v %d M %d (%s): deadlock at%s", pp, v, m, rendezvous ? "rendezvous" : "eager",
              where);
    }
    for (int l = 0; l < links; l++) {
        CHECK(finished < pp || w.posted_sends[l] == w.posted_recvs[l], "PP %d v %d M %d link %d: %d sends, %d receives",
              pp, v, m, l, w.posted_sends[l], w.posted_recvs[l]);
        free(w.log[l]);
    }
    for (int r = 0; r < pp; r++) {
        mc_pp_schedule_free(&w.ranks[r]);
        free(w.recv_link[r]);
        free(w.recv_seq[r]);
    }
    free(w.ranks), free(w.begin), free(w.end), free(w.batch), free(w.n_ops), free(w.recv_link), free(w.recv_seq);
    free(w.posted_sends), free(w.posted_recvs), free(w.log), free(w.fwd_done), free(w.bwd_done);
    return ok && finished == pp;
}

static void check_simulation_eager(int pp, int v, int m) {
    CHECK(simulate(pp, v, m, 0, false), "PP %d v %d M %d: eager simulation failed", pp, v, m);
}

static void check_simulation_rendezvous(int pp, int v, int m) {
    CHECK(simulate(pp, v, m, 0, true), "PP %d v %d M %d: rendezvous simulation failed", pp, v, m);
}

static void test_simulation_eager(void) { sweep(check_simulation_eager); }
static void test_simulation_rendezvous(void) { sweep(check_simulation_rendezvous); }

/* ---- 1F1B: warmup forwards, then F/B pairs, then cooldown backwards ---- */

static void check_1f1b_shape(int pp, int v, int m) {
    if (v != 1) return;
    for (int r = 0; r < pp; r++) {
        mc_pp_schedule s;
        if (!build(&s, pp, r, m, 1, 0)) return;
        int warmup = pp - r - 1 < m ? pp - r - 1 : m;
        CHECK(s.warmup == warmup && mc_pp_warmup_forwards(pp, r, m, 1, 0) == warmup,
              "PP %d M %d rank %d: warmup %d, wanted %d", pp, m, r, s.warmup, warmup);
        /* Expected: F0..F(w-1), then (F(w+i), B(i)) for i < M - w, then B(M-w)..B(M-1). */
        int i = 0;
        bool same = true;
        for (int k = 0; k < warmup; k++, i++)
            same = same && s.actions[i].op == MC_PP_FORWARD && s.actions[i].microbatch == k;
        for (int k = 0; k < m - warmup; k++, i += 2) {
            same = same && s.actions[i].op == MC_PP_FORWARD && s.actions[i].microbatch == warmup + k;
            same = same && s.actions[i + 1].op == MC_PP_BACKWARD && s.actions[i + 1].microbatch == k;
        }
        for (int k = m - warmup; k < m; k++, i++)
            same = same && s.actions[i].op == MC_PP_BACKWARD && s.actions[i].microbatch == k;
        char buf[4096];
        format_table(&s, buf, sizeof buf);
        CHECK(same && i == 2 * m, "PP %d M %d rank %d: %s", pp, m, r, buf);
        int peak = mc_pp_schedule_peak_in_flight(&s);
        CHECK(peak <= pp - r && peak == (pp - r < m ? pp - r : m), "PP %d M %d rank %d: peak %d", pp, m, r, peak);
        /* Peers: the previous and next ranks, none past the ends. */
        for (int k = 0; k < s.n_actions; k++) {
            const mc_pp_action *a = &s.actions[k];
            int before = r > 0 ? r - 1 : -1, after = r < pp - 1 ? r + 1 : -1;
            int want_recv = a->op == MC_PP_FORWARD ? before : after,
                want_send = a->op == MC_PP_FORWARD ? after : before;
            CHECK(a->recv_rank == want_recv && a->send_rank == want_send && a->chunk == 0,
                  "PP %d M %d rank %d action %d: recv %d send %d", pp, m, r, k, a->recv_rank, a->send_rank);
        }
        mc_pp_schedule_free(&s);
    }
}

static void test_1f1b_shape(void) { sweep(check_1f1b_shape); }

static void expect_table(int pp, int rank, int m, int v, int g, const char *want) {
    mc_pp_schedule s;
    if (!build(&s, pp, rank, m, v, g)) return;
    char buf[4096];
    format_table(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, want), "PP %d rank %d M %d v %d G %d:\n    got  %s\n    want %s", pp, rank, m, v, g, buf, want);
    mc_pp_schedule_free(&s);
}

static void test_no_pipelining(void) {
    expect_table(1, 0, 3, 1, 0, "F0c0 B0c0 F1c0 B1c0 F2c0 B2c0");
    mc_pp_schedule s;
    if (!build(&s, 1, 0, 3, 1, 0)) return;
    for (int i = 0; i < s.n_actions; i++)
        CHECK(s.actions[i].recv_rank == -1 && s.actions[i].send_rank == -1, "PP 1 action %d talks to a peer", i);
    CHECK(mc_pp_schedule_peak_in_flight(&s) == 1, "PP 1 holds %d", mc_pp_schedule_peak_in_flight(&s));
    mc_pp_schedule_free(&s);
}

static void test_1f1b_hand_worked(void) {
    expect_table(4, 0, 6, 1, 0, "F0c0 F1c0 F2c0 F3c0 B0c0 F4c0 B1c0 F5c0 B2c0 B3c0 B4c0 B5c0");
    expect_table(4, 2, 6, 1, 0, "F0c0 F1c0 B0c0 F2c0 B1c0 F3c0 B2c0 F4c0 B3c0 F5c0 B4c0 B5c0");
    expect_table(4, 3, 6, 1, 0, "F0c0 B0c0 F1c0 B1c0 F2c0 B2c0 F3c0 B3c0 F4c0 B4c0 F5c0 B5c0");
    /* M < PP: the warmup is every forward. */
    expect_table(4, 0, 2, 1, 0, "F0c0 F1c0 B0c0 B1c0");
}

/* ---- interleaved: orders worked by hand from Megatron's schedules.py ----
 *
 * get_schedule_table(M, v, G) walks groups of G micro-batches through chunk 0, then chunk
 * 1, ...; forward k runs entry k, backward k runs entry k with the chunk mirrored
 * (v - 1 - c); rank r runs W = min((PP - r - 1) x 2 + (v - 1) x G, M x v) forwards, then
 * (forward W + k, backward k) pairs, then the remaining backwards.
 *
 * PP 2, v 2, M 4 (G 2): entries (mb, chunk) 0:(0,0) 1:(1,0) 2:(0,1) 3:(1,1) 4:(2,0) 5:(3,0)
 * 6:(2,1) 7:(3,1); rank 0 W = 2 + 2 = 4, rank 1 W = 0 + 2 = 2. */
static void test_interleaved_hand_worked(void) {
    expect_table(2, 0, 4, 2, 0,
                 "F0c0 F1c0 F0c1 F1c1 "
                 "F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 "
                 "B2c1 B3c1 B2c0 B3c0");
    expect_table(2, 1, 4, 2, 0,
                 "F0c0 F1c0 "
                 "F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 "
                 "B2c0 B3c0");
    /* PP 4, v 2, M 8 (G 4), rank 0: W = 3 x 2 + 4 = 10 of 16. Entries: 0-3 mb 0-3 chunk 0,
     * 4-7 mb 0-3 chunk 1, 8-11 mb 4-7 chunk 0, 12-15 mb 4-7 chunk 1. */
    expect_table(4, 0, 8, 2, 0,
                 "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 F4c0 F5c0 "
                 "F6c0 B0c1 F7c0 B1c1 F4c1 B2c1 F5c1 B3c1 F6c1 B0c0 F7c1 B1c0 "
                 "B2c0 B3c0 B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0");
    /* Same, rank 3 (the last): W = 0 + 4. */
    expect_table(4, 3, 8, 2, 0,
                 "F0c0 F1c0 F2c0 F3c0 "
                 "F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c1 B3c1 F4c0 B0c0 F5c0 B1c0 F6c0 B2c0 F7c0 B3c0 "
                 "F4c1 B4c1 F5c1 B5c1 F6c1 B6c1 F7c1 B7c1 "
                 "B4c0 B5c0 B6c0 B7c0");
    /* Megatron's own example (cuda_graphs.py convert_schedule_table_to_order docstring):
     * PP 2, G 3, M 5, v 2, warmup 5 (rank 0): chunk order
     * 1 1 1 2 2 2 -2 1 -2 1 -2 2 -1 2 -1 -1 -2 -2 -1 -1 over entries with micro-batches
     * 0 1 2 0 1 2 3 4 3 4 (the last group holds the 2 left over). */
    expect_table(2, 0, 5, 2, 3,
                 "F0c0 F1c0 F2c0 F0c1 F1c1 "
                 "F2c1 B0c1 F3c0 B1c1 F4c0 B2c1 F3c1 B0c0 F4c1 B1c0 "
                 "B2c0 B3c1 B4c1 B3c0 B4c0");
    /* PP 2, v 3, M 2 (G 2), rank 0: W = 2 + 4 = 6 = M x v, every forward in the warmup. */
    expect_table(2, 0, 2, 3, 0, "F0c0 F1c0 F0c1 F1c1 F0c2 F1c2 B0c2 B1c2 B0c1 B1c1 B0c0 B1c0");
}

/* The peers of PP 2, v 2: rank 0 chunk 1 (virtual stage 2) takes its input from rank 1
 * chunk 0 and passes its output to rank 1 chunk 1; rank 0 chunk 0 reads the data. */
static void test_interleaved_peers(void) {
    mc_pp_schedule s;
    if (!build(&s, 2, 0, 4, 2, 0)) return;
    const mc_pp_action *f00 = &s.actions[0], *f01 = &s.actions[2], *b01 = &s.actions[5], *b00 = &s.actions[9];
    CHECK(f00->recv_rank == -1 && f00->send_rank == 1 && f00->send_chunk == 0, "F0c0");
    CHECK(f01->recv_rank == 1 && f01->recv_chunk == 0 && f01->send_rank == 1 && f01->send_chunk == 1, "F0c1");
    CHECK(b01->op == MC_PP_BACKWARD && b01->chunk == 1 && b01->recv_rank == 1 && b01->recv_chunk == 1 &&
              b01->send_rank == 1 && b01->send_chunk == 0,
          "B0c1");
    CHECK(b00->op == MC_PP_BACKWARD && b00->chunk == 0 && b00->recv_rank == 1 && b00->recv_chunk == 0 &&
              b00->send_rank == -1,
          "B0c0");
    mc_pp_schedule_free(&s);
    if (!build(&s, 2, 1, 4, 2, 0)) return;
    const mc_pp_action *f01_last = &s.actions[2]; /* virtual stage 3: computes the loss */
    CHECK(f01_last->chunk == 1 && f01_last->recv_rank == 0 && f01_last->recv_chunk == 1 && f01_last->send_rank == -1,
          "rank 1 F0c1");
    mc_pp_schedule_free(&s);
}

static void check_interleaved_warmup(int pp, int v, int m) {
    if (v == 1) return;
    for (int r = 0; r < pp; r++) {
        mc_pp_schedule s;
        if (!build(&s, pp, r, m, v, 0)) return;
        int want = (pp - r - 1) * 2 + (v - 1) * pp;
        if (want > m * v) want = m * v;
        int leading_forwards = 0;
        while (leading_forwards < s.n_actions && s.actions[leading_forwards].op == MC_PP_FORWARD) leading_forwards++;
        /* Forwards before the first backward: the warmup, plus the steady state's first. */
        int before_first_backward = want < m * v ? want + 1 : want;
        CHECK(s.warmup == want && leading_forwards == before_first_backward,
              "PP %d v %d M %d rank %d: warmup %d (%d F first), wanted %d", pp, v, m, r, s.warmup, leading_forwards,
              want);
        int peak = mc_pp_schedule_peak_in_flight(&s);
        CHECK(peak == before_first_backward, "PP %d v %d M %d rank %d: peak %d, wanted %d", pp, v, m, r, peak,
              before_first_backward);
        mc_pp_schedule_free(&s);
    }
}

static void test_interleaved_warmup(void) {
    sweep(check_interleaved_warmup);
    /* With an explicit G: (PP - r - 1) x 2 + (v - 1) x G. */
    CHECK(mc_pp_warmup_forwards(4, 1, 12, 2, 6) == 4 + 6, "G 6");
    CHECK(mc_pp_warmup_forwards(4, 0, 12, 3, 6) == 6 + 12, "G 6 v 3");
    CHECK(mc_pp_warmup_forwards(4, 0, 4, 2, 0) == 8, "capped at M x v");
}

/* Megatron's tunable groups: G between PP and M, a last group of 0 or >= PP (PP 2, G 3,
 * M 5 is the docstring's); every rank's table covers each (micro-batch, chunk) and the
 * ranks together run through. */
static void test_interleaved_groups(void) {
    static const int cases[][3] = {{2, 5, 3}, {4, 9, 5},  {4, 14, 5},  {4, 13, 9},
                                   {2, 7, 4}, {3, 11, 4}, {4, 10, 10}, {8, 17, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int v = 2; v <= 3; v++) {
            int pp = cases[i][0], m = cases[i][1], g = cases[i][2];
            mc_err err = {{0}};
            CHECK(mc_pp_schedule_check(pp, m, v, g, &err) == MC_OK, "PP %d M %d G %d: %s", pp, m, g, err.msg);
            for (int r = 0; r < pp; r++) {
                mc_pp_schedule s;
                if (!build(&s, pp, r, m, v, g)) continue;
                int want = (pp - r - 1) * 2 + (v - 1) * g;
                CHECK(s.group_size == g && s.warmup == (want < m * v ? want : m * v), "PP %d M %d G %d v %d rank %d",
                      pp, m, g, v, r);
                mc_pp_schedule_free(&s);
            }
            check_coverage_grouped(pp, v, m, g);
            CHECK(simulate(pp, v, m, g, false), "PP %d v %d M %d G %d: eager simulation failed", pp, v, m, g);
        }
}

/* ---- errors ---- */

static void expect_error(int pp, int m, int v, int g, const char *want) {
    mc_err err = {{0}};
    mc_pp_schedule s;
    int rc = mc_pp_schedule_build(&s, pp, 0, m, v, g, &err);
    CHECK(rc == MC_ERR && strstr(err.msg, want), "PP %d M %d v %d G %d: wanted '%s', got: %s", pp, m, v, g, want,
          err.msg);
    CHECK(s.actions == NULL, "no table on error");
    if (rc == MC_OK) mc_pp_schedule_free(&s);
}

static void test_errors(void) {
    expect_error(4, 6, 2, 0,
                 "--num-layers-per-virtual-pipeline-stage: the interleaved schedule needs micro-batches (M=6) to be "
                 "a multiple of the pipeline size (4)");
    expect_error(4, 2, 2, 0, "micro-batches (M=2) to be a multiple of the pipeline size (4)");
    expect_error(1, 4, 2, 0,
                 "--num-layers-per-virtual-pipeline-stage: the interleaved schedule (v=2 virtual stages per rank) "
                 "needs --pipeline-model-parallel-size > 1, got 1");
    expect_error(4, 0, 1, 0, "--global-batch-size: a step needs at least one micro-batch per pipeline, got M=0");
    expect_error(1, 0, 1, 0, "got M=0");
    expect_error(4, 8, 0, 0,
                 "--num-layers-per-virtual-pipeline-stage: needs at least 1 virtual stage per rank, got v=0");
    expect_error(0, 8, 1, 0, "--pipeline-model-parallel-size: must be at least 1, got 0");
    expect_error(4, 8, 2, 3,
                 "--microbatch-group-size-per-virtual-pipeline-stage 3: must lie between the pipeline size (4) and "
                 "the micro-batches (M=8)");
    expect_error(4, 8, 2, 9, "--microbatch-group-size-per-virtual-pipeline-stage 9: must lie between");
    expect_error(4, 10, 2, 4,
                 "--microbatch-group-size-per-virtual-pipeline-stage 4: the micro-batches left after whole groups "
                 "(M=10 mod 4 = 2) must be 0 or at least the pipeline size (4)");
    mc_err err = {{0}};
    mc_pp_schedule s;
    CHECK(mc_pp_schedule_build(&s, 4, 4, 8, 1, 0, &err) == MC_ERR && strstr(err.msg, "pipeline rank 4 is outside 0..3"),
          "%s", err.msg);
    /* Accepted: 1F1B with fewer micro-batches than stages, and interleaving on PP 2. */
    CHECK(mc_pp_schedule_check(8, 3, 1, 0, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_pp_schedule_check(2, 6, 3, 0, &err) == MC_OK, "%s", err.msg);
}

/* ---- bubble fraction ---- */

static void test_bubble_fraction(void) {
    CHECK_REL(mc_pp_bubble_fraction(4, 8, 1), 3.0 / 8.0, 1e-15);
    CHECK_REL(mc_pp_bubble_fraction(4, 8, 2), 3.0 / 16.0, 1e-15);
    CHECK_REL(mc_pp_bubble_fraction(8, 32, 3), 7.0 / 96.0, 1e-15);
    CHECK_REL(mc_pp_bubble_fraction(2, 1, 1), 1.0, 1e-15);
    CHECK(mc_pp_bubble_fraction(1, 5, 1) == 0.0, "PP 1 has no bubble");
}

int main(void) {
    RUN(test_each_microbatch_once);
    RUN(test_simulation_eager);
    RUN(test_simulation_rendezvous);
    RUN(test_1f1b_shape);
    RUN(test_no_pipelining);
    RUN(test_1f1b_hand_worked);
    RUN(test_interleaved_hand_worked);
    RUN(test_interleaved_peers);
    RUN(test_interleaved_warmup);
    RUN(test_interleaved_groups);
    RUN(test_errors);
    RUN(test_bubble_fraction);
    return check_summary();
}
