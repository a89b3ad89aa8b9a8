/* comm.c: the rank layout, the groups, and the dispatch of each collective to its
 * transport (MPI for host memory, NCCL for device memory). */
#include "comm/comm_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

mc_comm_runtime mc_rt = {.timeout_s = 600.0};

/* ---- layout ---- */

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

int mc_layout_check(int world_size, int tp, int pp, int cp, int ep, mc_err *err) {
    if (world_size < 1) return mc_err_set(err, "world size must be >= 1, got %d", world_size);
    if (tp < 1 || pp < 1 || cp < 1 || ep < 1)
        return mc_err_set(err, "parallel sizes must be >= 1 (tensor %d, pipeline %d, context %d, expert %d)", tp, pp,
                          cp, ep);
    long long dense = (long long)tp * pp * cp;
    if (world_size % dense != 0)
        return mc_err_set(err,
                          "world size %d is not divisible by --tensor-model-parallel-size %d x "
                          "--pipeline-model-parallel-size %d x --context-parallel-size %d = %lld",
                          world_size, tp, pp, cp, dense);
    long long expert = (long long)tp * ep * pp; /* expert grid: ETP (= TP here) x EP x PP */
    if (ep > 1 && world_size % expert != 0)
        return mc_err_set(err,
                          "world size %d is not divisible by the expert-tensor size %d x "
                          "--expert-model-parallel-size %d x --pipeline-model-parallel-size %d = %lld",
                          world_size, tp, ep, pp, expert);
    return MC_OK;
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

/* The groups of a comm in the fixed order every rank creates their transports in. */
#define MC_NGROUPS 7
static void groups_of(mc_comm *c, mc_group *gs[MC_NGROUPS]) {
    gs[0] = &c->world;
    gs[1] = &c->tp;
    gs[2] = &c->cp;
    gs[3] = &c->dp;
    gs[4] = &c->pp;
    gs[5] = &c->dp_cp;
    gs[6] = &c->mp;
}

int mc_comm_init(mc_comm *c, int world_size, int rank, int local_rank, int tp, int pp, int cp, int ep, mc_err *err) {
    memset(c, 0, sizeof *c);
    MC_TRY(mc_layout_check(world_size, tp, pp, cp, ep, err));
    MC_ASSERT(rank >= 0 && rank < world_size, "rank %d outside the world of %d", rank, world_size);
    c->world_size = world_size;
    c->rank = rank;
    c->local_rank = local_rank;
    c->local_size = 1;
    c->sizes = (mc_parallel_sizes){.tp = tp, .pp = pp, .cp = cp, .ep = ep, .dp = world_size / (tp * pp * cp)};
    grid_pos p = grid_of(&c->sizes, rank);
    c->tp_rank = p.tp;
    c->cp_rank = p.cp;
    c->dp_rank = p.dp;
    c->pp_rank = p.pp;
    mc_group *gs[MC_NGROUPS];
    groups_of(c, gs);
    static const char *names[MC_NGROUPS] = {"world", "tp", "cp", "dp", "pp", "dp_cp", "mp"};
    for (int i = 0; i < MC_NGROUPS; i++) group_build(gs[i], names[i], world_size, &c->sizes, rank);
    return MC_OK;
}

static bool same_members(const mc_group *a, const mc_group *b) {
    return a->size == b->size && !memcmp(a->ranks, b->ranks, sizeof(int) * (size_t)a->size);
}

/* Creates the transport of every group of size > 1. Collective over the world; the set of
 * groups of size > 1 and which of them share members are the same on every rank (they
 * depend only on the sizes), so every rank makes the same MPI calls in the same order. */
static void create_transports(mc_comm *c) {
    mc_group *gs[MC_NGROUPS];
    groups_of(c, gs);
    for (int i = 0; i < MC_NGROUPS; i++) {
        mc_group *g = gs[i];
        if (g->size == 1) continue;
        mc_group_impl *gi = mc_xcalloc(1, sizeof *gi);
        gi->name = g->name;
        gi->size = g->size;
        gi->rank = g->rank;
        gi->ranks = g->ranks;
        for (int j = 0; j < i && !gi->ch; j++)
            if (gs[j]->impl && same_members(gs[j], g)) {
                gi->ch = ((mc_group_impl *)gs[j]->impl)->ch;
                gi->ch->refs++;
            }
        if (!gi->ch) {
            gi->ch = mc_xcalloc(1, sizeof *gi->ch);
            gi->ch->refs = 1;
            mc_mpi_channel_create(gi, i == 0);
        }
        g->impl = gi;
    }
}

static double timeout_from_env(int timeout_minutes, mc_err *err, bool *ok) {
    *ok = true;
    double t = timeout_minutes > 0 ? 60.0 * timeout_minutes : 600.0;
    const char *env = getenv("MC_COMM_TIMEOUT_SECONDS");
    if (env && *env) {
        char *end;
        double v = strtod(env, &end);
        if (*end || !(v > 0)) {
            *ok = false;
            mc_err_set(err, "MC_COMM_TIMEOUT_SECONDS: expected a positive number of seconds, got '%s'", env);
        }
        t = v;
    }
    return t;
}

int mc_comm_init_from_env(mc_comm *c, int tp, int pp, int cp, int ep, int timeout_minutes, mc_err *err) {
    memset(c, 0, sizeof *c);
    bool ok;
    double timeout = timeout_from_env(timeout_minutes, err, &ok);
    if (!ok) return MC_ERR;
    mc_rt.timeout_s = timeout;
    MC_TRY(mc_bootstrap(err));
    if (mc_comm_init(c, mc_rt.world_size, mc_rt.world_rank, mc_rt.local_rank, tp, pp, cp, ep, err) != MC_OK)
        return MC_ERR; /* the same on every rank: the caller ends with mc_comm_exit_error */
    c->local_size = mc_rt.local_size;
    c->launcher = mc_rt.launcher;
    mc_log_set_rank(c->rank, c->world_size);
    if (c->world_size > 1) create_transports(c);
    c->impl = &mc_rt;
    mc_rt.refs++;
    return MC_OK;
}

void mc_comm_set_device_over_mpi(mc_comm *c, bool on) {
    mc_group *gs[MC_NGROUPS];
    groups_of(c, gs);
    for (int i = 0; i < MC_NGROUPS; i++)
        if (gs[i]->impl) ((mc_group_impl *)gs[i]->impl)->staged = on;
    c->device_over_mpi = on;
}

int mc_comm_init_device(mc_comm *c, mc_backend *be, mc_err *err) {
    if (!be || be->device != MC_DEVICE_CUDA || c->world_size == 1 || c->device_over_mpi) return MC_OK;
    if (!c->impl)
        return mc_err_set(err, "the NCCL communicators need a comm from mc_comm_init_from_env (this one is "
                               "layout-only)");
    if (!mc_nccl_available())
        return mc_err_set(err, "rank %d: the CUDA backend over %d ranks needs NCCL, and this build of megatron-c has "
                               "none (CMake did not find libnccl)",
                          c->rank, c->world_size);
    mc_group *gs[MC_NGROUPS];
    groups_of(c, gs);
    for (int i = 0; i < MC_NGROUPS; i++)
        if (gs[i]->impl) MC_TRY(mc_nccl_group_init(gs[i]->impl, err));
    return MC_OK;
}

int mc_comm_pick_device(const mc_comm *c, mc_err *err) {
    return mc_nccl_pick_device(c->local_rank, c->local_size, err);
}

void mc_comm_free(mc_comm *c) {
    mc_group *gs[MC_NGROUPS];
    groups_of(c, gs);
    bool last = c->impl && mc_rt.refs == 1;
    if (last) mc_mpi_async_shutdown();
    for (int i = MC_NGROUPS - 1; i >= 0; i--) {
        mc_group_impl *gi = gs[i]->impl;
        if (gi) {
            if (--gi->ch->refs == 0) {
                mc_nccl_channel_free(gi->ch);
                mc_mpi_channel_free(gi->ch);
                free(gi->ch);
            }
            free(gi);
            gs[i]->impl = NULL;
        }
        free(gs[i]->ranks);
        gs[i]->ranks = NULL;
    }
    if (c->impl) {
        c->impl = NULL;
        if (--mc_rt.refs == 0) {
            mc_watch_stop();
            mc_bootstrap_finalize();
        }
    }
}

void mc_comm_set_timeout_seconds(double seconds) {
    MC_ASSERT(seconds > 0, "the collective timeout must be positive, got %g s", seconds);
    mc_rt.timeout_s = seconds;
}

double mc_comm_timeout_seconds(void) { return mc_rt.timeout_s; }

const char *mc_comm_launcher_name(mc_launcher l) {
    switch (l) {
    case MC_LAUNCH_NONE: return "none";
    case MC_LAUNCH_MPIRUN: return "mpirun";
    case MC_LAUNCH_PMI: return "pmi";
    case MC_LAUNCH_SLURM: return "srun";
    case MC_LAUNCH_TORCHRUN: return "torchrun-env";
    }
    return "?";
}

const char *mc_reduce_op_name(mc_reduce_op op) {
    switch (op) {
    case MC_REDUCE_SUM: return "sum";
    case MC_REDUCE_MAX: return "max";
    case MC_REDUCE_MIN: return "min";
    }
    return "?";
}

/* ---- dispatch ---- */

static mc_group_impl *transport(mc_group *g, const char *op) {
    MC_ASSERT(g->impl != NULL,
              "%s over group '%s' of size %d needs a transport, and this comm has none (mc_comm_init builds the "
              "layout only; multi-rank runs use mc_comm_init_from_env)",
              op, g->name, g->size);
    return g->impl;
}

static bool on_device(const mc_backend *be) { return be && be->device == MC_DEVICE_CUDA; }
/* Device memory over NCCL (not staged through host memory: mc_comm_set_device_over_mpi). */
static bool over_nccl(const mc_group_impl *gi, const mc_backend *be) { return on_device(be) && !gi->staged; }

static void need_nccl(mc_group_impl *gi) {
    if (gi->ch->nccl) return;
    mc_err err;
    if (mc_nccl_group_init(gi, &err) != MC_OK) mc_comm_fatal("%s", err.msg);
}

static bool reducible(mc_dtype dt) {
    return dt == MC_F32 || dt == MC_F64 || dt == MC_BF16 || dt == MC_F16 || dt == MC_I32 || dt == MC_I64;
}

static void check_reduce_dtype(const mc_group *g, const char *op, mc_dtype dt) {
    MC_ASSERT(reducible(dt), "%s on group %s: dtype %s cannot be reduced (F32, F64, BF16, F16, I32, I64)", op, g->name,
              mc_dtype_name(dt));
}

static void check_all_gather(const mc_group *g, const mc_tensor *out, const mc_tensor *in, const char *op) {
    MC_ASSERT(out->dtype == in->dtype, "%s on group %s: out is %s but in is %s", op, g->name,
              mc_dtype_name(out->dtype), mc_dtype_name(in->dtype));
    MC_ASSERT(mc_tensor_numel(out) == (int64_t)g->size * mc_tensor_numel(in),
              "%s on group %s (size %d): numel(out) = %lld must be size x numel(in) = %d x %lld", op, g->name,
              g->size, (long long)mc_tensor_numel(out), g->size, (long long)mc_tensor_numel(in));
}

static void check_reduce_scatter(const mc_group *g, const mc_tensor *out, const mc_tensor *in, const char *op) {
    MC_ASSERT(out->dtype == in->dtype, "%s on group %s: out is %s but in is %s", op, g->name,
              mc_dtype_name(out->dtype), mc_dtype_name(in->dtype));
    check_reduce_dtype(g, op, in->dtype);
    MC_ASSERT(mc_tensor_numel(in) == (int64_t)g->size * mc_tensor_numel(out),
              "%s on group %s (size %d): numel(in) = %lld must split into %d equal chunks of numel(out) = %lld",
              op, g->name, g->size, (long long)mc_tensor_numel(in), g->size, (long long)mc_tensor_numel(out));
}

/* Size-1 group: the result is the input. */
static void copy_if_needed(mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    if (out->data != in->data && mc_tensor_bytes(in)) be->copy_d2d(be, out->data, in->data, mc_tensor_bytes(in));
}

void mc_comm_all_reduce(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op) {
    if (g->size == 1) return;
    mc_group_impl *gi = transport(g, "all_reduce");
    check_reduce_dtype(g, "all_reduce", x->dtype);
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return;
    if (over_nccl(gi, be)) {
        need_nccl(gi);
        mc_nccl_all_reduce(gi, be, x->data, n, x->dtype, op, NULL);
    } else if (on_device(be)) {
        mc_staged_all_reduce(gi, be, x->data, n, x->dtype, op);
    } else {
        mc_mpi_all_reduce(gi, false, x->data, n, x->dtype, op);
    }
}

void mc_comm_all_gather(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    check_all_gather(g, out, in, "all_gather");
    if (g->size == 1) {
        copy_if_needed(be, out, in);
        return;
    }
    mc_group_impl *gi = transport(g, "all_gather");
    int64_t n = mc_tensor_numel(in);
    if (n == 0) return;
    if (over_nccl(gi, be)) {
        need_nccl(gi);
        mc_nccl_all_gather(gi, be, out->data, in->data, n, in->dtype, NULL);
    } else if (on_device(be)) {
        mc_staged_all_gather(gi, be, out->data, in->data, n, in->dtype);
    } else {
        mc_mpi_all_gather(gi, false, out->data, in->data, n, in->dtype);
    }
}

void mc_comm_reduce_scatter(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    check_reduce_scatter(g, out, in, "reduce_scatter");
    if (g->size == 1) {
        copy_if_needed(be, out, in);
        return;
    }
    mc_group_impl *gi = transport(g, "reduce_scatter");
    int64_t n = mc_tensor_numel(out);
    if (n == 0) return;
    if (over_nccl(gi, be)) {
        need_nccl(gi);
        mc_nccl_reduce_scatter(gi, be, out->data, in->data, n, in->dtype, NULL);
    } else if (on_device(be)) {
        mc_staged_reduce_scatter(gi, be, out->data, in->data, n, in->dtype, MC_REDUCE_SUM);
    } else {
        mc_mpi_reduce_scatter(gi, false, out->data, in->data, n, in->dtype, MC_REDUCE_SUM);
    }
}

void mc_comm_broadcast(mc_group *g, mc_backend *be, mc_tensor *x, int root) {
    MC_ASSERT(root >= 0 && root < g->size, "broadcast on group %s (size %d): root %d is not a group rank", g->name,
              g->size, root);
    if (g->size == 1) return;
    mc_group_impl *gi = transport(g, "broadcast");
    size_t bytes = mc_tensor_bytes(x);
    if (bytes == 0) return;
    if (over_nccl(gi, be)) {
        need_nccl(gi);
        mc_nccl_broadcast(gi, be, x->data, bytes, root);
    } else if (on_device(be)) {
        mc_staged_broadcast(gi, be, x->data, bytes, root);
    } else {
        mc_mpi_broadcast(gi, x->data, bytes, root);
    }
}

void mc_comm_sendrecv(mc_group *g, mc_backend *be, const mc_tensor *send, int dst, mc_tensor *recv, int src) {
    bool has_send = send && send->data, has_recv = recv && recv->data;
    if (!has_send && !has_recv) return;
    MC_ASSERT(!has_send || (dst >= 0 && dst < g->size && dst != g->rank),
              "send on group %s (size %d): peer %d is not another group rank", g->name, g->size, dst);
    MC_ASSERT(!has_recv || (src >= 0 && src < g->size && src != g->rank),
              "recv on group %s (size %d): peer %d is not another group rank", g->name, g->size, src);
    mc_group_impl *gi = transport(g, has_send ? (has_recv ? "sendrecv" : "send") : "recv");
    size_t sb = has_send ? mc_tensor_bytes(send) : 0, rb = has_recv ? mc_tensor_bytes(recv) : 0;
    if (over_nccl(gi, be)) {
        need_nccl(gi);
        mc_nccl_sendrecv(gi, be, has_send ? send->data : NULL, sb, dst, has_recv ? recv->data : NULL, rb, src);
    } else if (on_device(be)) {
        mc_staged_sendrecv(gi, be, has_send ? send->data : NULL, sb, dst, has_recv ? recv->data : NULL, rb, src);
    } else {
        mc_mpi_sendrecv(gi, has_send ? send->data : NULL, sb, dst, has_recv ? recv->data : NULL, rb, src);
    }
}

void mc_comm_send(mc_group *g, mc_backend *be, const mc_tensor *x, int peer) {
    mc_comm_sendrecv(g, be, x, peer, NULL, -1);
}

void mc_comm_recv(mc_group *g, mc_backend *be, mc_tensor *x, int peer) { mc_comm_sendrecv(g, be, NULL, -1, x, peer); }

void mc_comm_all_reduce_host_f64(mc_group *g, double *vals, int n, mc_reduce_op op) {
    if (g->size == 1 || n <= 0) return;
    mc_mpi_all_reduce(transport(g, "all_reduce"), false, vals, n, MC_F64, op);
}

void mc_comm_barrier(mc_group *g) {
    if (g->size == 1) return;
    mc_mpi_barrier(transport(g, "barrier"));
}

void mc_comm_broadcast_host(mc_group *g, void *buf, size_t bytes, int root) {
    MC_ASSERT(root >= 0 && root < g->size, "broadcast on group %s (size %d): root %d is not a group rank", g->name,
              g->size, root);
    if (g->size == 1 || bytes == 0) return;
    mc_mpi_broadcast_idle(transport(g, "broadcast"), buf, bytes, root);
}

/* ---- async ---- */

#define MC_WORK_POOL 1024
static mc_comm_work g_pool[MC_WORK_POOL];
static mc_comm_work *g_free;
static bool g_pool_ready;
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;

mc_comm_work *mc_work_get(void) {
    pthread_mutex_lock(&g_pool_mu);
    if (!g_pool_ready) {
        for (int i = MC_WORK_POOL - 1; i >= 0; i--) {
            g_pool[i].next = g_free;
            g_free = &g_pool[i];
        }
        g_pool_ready = true;
    }
    mc_comm_work *w = g_free;
    MC_ASSERT(w != NULL, "more than %d async collectives in flight: call mc_comm_wait on them", MC_WORK_POOL);
    g_free = w->next;
    pthread_mutex_unlock(&g_pool_mu);
    /* Keep the event (created once per slot) across uses. */
    void *ev = w->event;
    memset(w, 0, sizeof *w);
    w->event = ev;
    w->in_use = true;
    return w;
}

void mc_work_put(mc_comm_work *w) {
    pthread_mutex_lock(&g_pool_mu);
    w->in_use = false;
    w->next = g_free;
    g_free = w;
    pthread_mutex_unlock(&g_pool_mu);
}

static mc_comm_work *submit(mc_group_impl *gi, mc_backend *be, mc_work_op op, void *out, const void *in, int64_t n,
                            mc_dtype dt, mc_reduce_op rop) {
    if (on_device(be) && gi->staged) { /* done at once, as a size-1 group's: no handle */
        switch (op) {
        case MC_WORK_ALL_REDUCE: mc_staged_all_reduce(gi, be, out, n, dt, rop); break;
        case MC_WORK_REDUCE_SCATTER: mc_staged_reduce_scatter(gi, be, out, in, n, dt, rop); break;
        case MC_WORK_ALL_GATHER: mc_staged_all_gather(gi, be, out, in, n, dt); break;
        }
        return NULL;
    }
    mc_comm_work *w = mc_work_get();
    w->op = op;
    w->gi = gi;
    w->be = be;
    w->out = out;
    w->in = in;
    w->n = n;
    w->dt = dt;
    w->rop = rop;
    if (on_device(be)) {
        w->device = true;
        need_nccl(gi);
        switch (op) {
        case MC_WORK_ALL_REDUCE: mc_nccl_all_reduce(gi, be, out, n, dt, rop, w); break;
        case MC_WORK_REDUCE_SCATTER: mc_nccl_reduce_scatter(gi, be, out, in, n, dt, w); break;
        case MC_WORK_ALL_GATHER: mc_nccl_all_gather(gi, be, out, in, n, dt, w); break;
        }
    } else {
        mc_mpi_async_submit(w);
    }
    return w;
}

mc_comm_work *mc_comm_all_reduce_async(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op) {
    if (g->size == 1) return NULL;
    mc_group_impl *gi = transport(g, "all_reduce");
    check_reduce_dtype(g, "all_reduce", x->dtype);
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return NULL;
    return submit(gi, be, MC_WORK_ALL_REDUCE, x->data, NULL, n, x->dtype, op);
}

mc_comm_work *mc_comm_reduce_scatter_async(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    check_reduce_scatter(g, out, in, "reduce_scatter");
    if (g->size == 1) {
        copy_if_needed(be, out, in);
        return NULL;
    }
    mc_group_impl *gi = transport(g, "reduce_scatter");
    int64_t n = mc_tensor_numel(out);
    if (n == 0) return NULL;
    return submit(gi, be, MC_WORK_REDUCE_SCATTER, out->data, in->data, n, in->dtype, MC_REDUCE_SUM);
}

mc_comm_work *mc_comm_all_gather_async(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in) {
    check_all_gather(g, out, in, "all_gather");
    if (g->size == 1) {
        copy_if_needed(be, out, in);
        return NULL;
    }
    mc_group_impl *gi = transport(g, "all_gather");
    int64_t n = mc_tensor_numel(in);
    if (n == 0) return NULL;
    return submit(gi, be, MC_WORK_ALL_GATHER, out->data, in->data, n, in->dtype, MC_REDUCE_SUM);
}

void mc_comm_wait(mc_comm_work *w) {
    if (!w) return;
    MC_ASSERT(w->in_use, "mc_comm_wait on a handle that was already waited");
    if (w->device)
        mc_nccl_work_wait(w);
    else
        mc_mpi_async_wait(w);
    mc_work_put(w);
}

bool mc_comm_test(mc_comm_work *w) {
    if (!w) return true;
    MC_ASSERT(w->in_use, "mc_comm_test on a handle that was already waited");
    return w->device ? mc_nccl_work_test(w) : mc_mpi_async_test(w);
}

/* ---- checks ---- */

int mc_comm_check_same_u64(mc_group *g, uint64_t value, const char *what, mc_err *err) {
    if (g->size == 1) return MC_OK;
    mc_group_impl *gi = transport(g, "check_same");
    uint64_t stack[64];
    uint64_t *all = g->size <= 64 ? stack : mc_xmalloc(sizeof(uint64_t) * (size_t)g->size);
    mc_mpi_all_gather_u64(gi, value, all);
    int bad = -1;
    for (int r = 1; r < g->size && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    int rc = MC_OK;
    if (bad >= 0)
        rc = mc_err_set(err, "%s differs across ranks: rank %d has 0x%016llx, rank %d has 0x%016llx", what, g->ranks[0],
                        (unsigned long long)all[0], g->ranks[bad], (unsigned long long)all[bad]);
    if (all != stack) free(all);
    return rc;
}

uint64_t mc_comm_hash64(const void *data, size_t bytes, uint64_t seed) {
    uint64_t h = seed ? seed : 0xcbf29ce484222325ull;
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ---- benchmark helpers ---- */

double mc_comm_wtime(void) { return mc_watch_now(); }

void mc_comm_mark_record(mc_backend *be, mc_comm_mark *m) {
    if (on_device(be)) {
        mc_cuda_mark_record(be, m);
    } else {
        m->event = NULL;
        m->host_s = mc_watch_now();
    }
}

double mc_comm_mark_elapsed(mc_backend *be, mc_comm_mark *start, mc_comm_mark *end) {
    if (on_device(be)) return mc_cuda_mark_elapsed(start, end);
    return end->host_s - start->host_s;
}

void mc_comm_mark_release(mc_comm_mark *m) {
    if (m->event) mc_cuda_mark_release(m);
    m->event = NULL;
}

size_t mc_comm_device_free_bytes(mc_backend *be) { return on_device(be) ? mc_cuda_free_bytes() : 0; }

int mc_comm_agree_on_setup(mc_comm *c, int rc, uint64_t config_hash, const char *what, mc_err *err) {
    double first_failed = rc == MC_OK ? (double)c->world_size : (double)c->rank;
    mc_comm_all_reduce_host_f64(&c->world, &first_failed, 1, MC_REDUCE_MIN);
    if (rc != MC_OK) return MC_ERR;
    if (first_failed < c->world_size)
        return mc_err_set(err, "rank %d failed while setting up (its error message says why)", (int)first_failed);
    return mc_comm_check_same_u64(&c->world, config_hash, what, err);
}
