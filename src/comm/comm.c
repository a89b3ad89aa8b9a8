#include "comm/comm.h"

#include <string.h>

/* Position of a rank on the dense grid (tp fastest, then cp, dp, pp). */
typedef struct {
    int tp, cp, dp, pp;
} grid_pos;

static grid_pos grid_of(const mc_parallel_sizes *s, int rank) {
    grid_pos p;
    p.tp = rank % s->tp;
    rank /= s->tp;
    p.cp = rank % s->cp;
    rank /= s->cp;
    p.dp = rank % s->dp;
    rank /= s->dp;
    p.pp = rank;
    return p;
}

static int rank_of(const mc_parallel_sizes *s, grid_pos p) {
    return p.tp + s->tp * (p.cp + s->cp * (p.dp + s->dp * p.pp));
}

int mc_layout_group_ranks(int world_size, const mc_parallel_sizes *s, const char *which, int rank, int *out,
                          int cap) {
    (void)world_size;
    grid_pos me = grid_of(s, rank);
    int n = 0;
    /* Enumerate members in group-rank order: the varying coordinates, fastest first. */
    bool vary_tp = !strcmp(which, "tp") || !strcmp(which, "mp") || !strcmp(which, "world");
    bool vary_cp = !strcmp(which, "cp") || !strcmp(which, "dp_cp") || !strcmp(which, "world");
    bool vary_dp = !strcmp(which, "dp") || !strcmp(which, "dp_cp") || !strcmp(which, "world");
    bool vary_pp = !strcmp(which, "pp") || !strcmp(which, "mp") || !strcmp(which, "world");
    for (int pp = 0; pp < (vary_pp ? s->pp : 1); pp++)
        for (int dp = 0; dp < (vary_dp ? s->dp : 1); dp++)
            for (int cp = 0; cp < (vary_cp ? s->cp : 1); cp++)
                for (int tp = 0; tp < (vary_tp ? s->tp : 1); tp++) {
                    grid_pos p = {vary_tp ? tp : me.tp, vary_cp ? cp : me.cp, vary_dp ? dp : me.dp,
                                  vary_pp ? pp : me.pp};
                    if (n < cap) out[n] = rank_of(s, p);
                    n++;
                }
    return n;
}

static void group_build(mc_group *g, const char *name, int world_size, const mc_parallel_sizes *s, int rank) {
    int n = mc_layout_group_ranks(world_size, s, name, rank, NULL, 0);
    g->name = name;
    g->size = n;
    g->ranks = mc_xmalloc(sizeof(int) * (size_t)n);
    mc_layout_group_ranks(world_size, s, name, rank, g->ranks, n);
    g->rank = -1;
    for (int i = 0; i < n; i++)
        if (g->ranks[i] == rank) g->rank = i;
    MC_ASSERT(g->rank >= 0);
    g->impl = NULL;
}

int mc_comm_init(mc_comm *c, int world_size, int rank, int local_rank, int tp, int pp, int cp, int ep, mc_err *err) {
    memset(c, 0, sizeof *c);
    if (tp < 1 || pp < 1 || cp < 1 || ep < 1)
        return mc_err_set(err, "parallel sizes must be >= 1 (tensor %d, pipeline %d, context %d, expert %d)", tp, pp,
                          cp, ep);
    if (world_size % (tp * pp * cp) != 0)
        return mc_err_set(err,
                          "world size %d is not divisible by tensor (%d) x pipeline (%d) x context (%d) parallel "
                          "sizes = %d",
                          world_size, tp, pp, cp, tp * pp * cp);
    c->world_size = world_size;
    c->rank = rank;
    c->local_rank = local_rank;
    c->sizes = (mc_parallel_sizes){.tp = tp, .pp = pp, .cp = cp, .ep = ep, .dp = world_size / (tp * pp * cp)};
    grid_pos p = grid_of(&c->sizes, rank);
    c->tp_rank = p.tp;
    c->cp_rank = p.cp;
    c->dp_rank = p.dp;
    c->pp_rank = p.pp;
    group_build(&c->world, "world", world_size, &c->sizes, rank);
    group_build(&c->tp, "tp", world_size, &c->sizes, rank);
    group_build(&c->cp, "cp", world_size, &c->sizes, rank);
    group_build(&c->dp, "dp", world_size, &c->sizes, rank);
    group_build(&c->pp, "pp", world_size, &c->sizes, rank);
    group_build(&c->dp_cp, "dp_cp", world_size, &c->sizes, rank);
    group_build(&c->mp, "mp", world_size, &c->sizes, rank);
    if (world_size > 1)
        return mc_err_set(err, "this build runs one process only (world size %d requested); multi-rank "
                          "training arrives with the MPI/NCCL transport", world_size);
    return MC_OK;
}

void mc_comm_free(mc_comm *c) {
    mc_group *gs[] = {&c->world, &c->tp, &c->cp, &c->dp, &c->pp, &c->dp_cp, &c->mp};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        free(gs[i]->ranks);
        gs[i]->ranks = NULL;
    }
}

/* ---- collectives: size-1 groups are the identity. Larger groups need a transport. ---- */

static void need_transport(const mc_group *g, const char *op) {
    MC_ASSERT(g->size == 1, "%s over group '%s' of size %d needs a transport (not in this build)", op, g->name,
              g->size);
}

void mc_comm_all_reduce(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op) {
    (void)be; (void)x; (void)op;
    need_transport(g, "all_reduce");
}

void mc_comm_all_gather(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    need_transport(g, "all_gather");
    if (out->data != in->data) be->copy_d2d(be, out->data, in->data, mc_tensor_bytes(in));
}

void mc_comm_reduce_scatter(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    need_transport(g, "reduce_scatter");
    if (out->data != in->data) be->copy_d2d(be, out->data, in->data, mc_tensor_bytes(out));
}

void mc_comm_broadcast(mc_group *g, mc_backend *be, mc_tensor *x, int root) {
    (void)be; (void)x; (void)root;
    need_transport(g, "broadcast");
}

void mc_comm_all_reduce_host_f64(mc_group *g, double *vals, int n, mc_reduce_op op) {
    (void)vals; (void)n; (void)op;
    need_transport(g, "all_reduce");
}

void mc_comm_barrier(mc_group *g) { need_transport(g, "barrier"); }
