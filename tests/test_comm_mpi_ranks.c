/* test_comm_mpi_ranks.c: the comm layer over real ranks.
 *
 * Alone (ctest, no launcher) it checks the single-process path: world size 1, every group
 * of size 1, collectives as identities. Under mpirun (tests/test_comm_mpi.sh), or started
 * torchrun-style, it runs, for several layouts of the world, every collective on every
 * group against values computed here, for several dtypes and sizes, plus the async
 * variants and the consistency check. MC_TEST_COMM_MODE picks a failure scenario instead:
 *   mismatch  the config hash differs on the last rank: every rank reports it, exits 2
 *   layout    an impossible layout (TP 3): every rank reports it, exits 2
 *   timeout   rank 1 never joins an all_reduce: the others' watchdogs end the job
 *   die       rank 2 dies (SIGKILL) while the others are inside an all_reduce
 * MC_TEST_COMM_DEVICE=cuda runs the same checks on GPU memory over NCCL (one GPU per rank:
 *   mpirun -np 2 -x MC_TEST_COMM_DEVICE=cuda build/test_comm_mpi_ranks), and with
 *   MC_TEST_COMM_OVER_MPI=1 over MPI through host memory (--distributed-backend mpi; ranks
 *   may share a GPU). MC_TEST_COMM_DEVICE=staged checks that staging on the CPU: the CPU
 *   backend presented as a device one, so every device collective takes the staged path.
 * Every rank contributes its failures to a world-wide count; rank 0 prints
 * "N passed, N failed" and every rank exits 1 on any failure. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "tensor/backend.h"

static mc_backend *be;
static mc_comm world; /* tp = pp = cp = 1: keeps MPI alive across the layouts */
static int g_fail, g_passed, g_failed;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            if (g_fail++ < 5) {                                                                   \
                fprintf(stderr, "  rank %d FAIL %s:%d: %s: ", world.rank, __FILE__, __LINE__, #cond); \
                fprintf(stderr, "" __VA_ARGS__);                                                  \
                fputc('\n', stderr);                                                              \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* Ends a named test: failed if it failed on any rank. */
static void finish(const char *name) {
    double f = g_fail;
    mc_comm_all_reduce_host_f64(&world.world, &f, 1, MC_REDUCE_SUM);
    if (f == 0)
        g_passed++;
    else
        g_failed++;
    if (world.rank == 0) {
        printf("%s %s\n", f == 0 ? "ok  " : "FAIL", name);
        fflush(stdout);
    }
    g_fail = 0;
}

/* ---- values ---- */

/* Exact: small integers, so any summation order gives the same (checkable) result,
 * in every dtype including BF16 (sums stay below 256). */
static double exact_val(int q, int64_t i) { return (double)(q + 1) + (double)(i % 5); }
/* Inexact: sums depend on the order, which the determinism checks pin down. */
static double rough_val(int q, int64_t i) { return 3.7 * sin(12.9898 * q + 78.233 * (double)(i % 10007) + 0.5); }

static void put(mc_dtype dt, void *buf, int64_t i, double v) {
    switch (dt) {
    case MC_F32: ((float *)buf)[i] = (float)v; break;
    case MC_F64: ((double *)buf)[i] = v; break;
    case MC_BF16: ((uint16_t *)buf)[i] = mc_f32_to_bf16((float)v); break;
    case MC_F16: { /* exact small integers only */
        float f = (float)v;
        uint32_t x;
        memcpy(&x, &f, 4);
        uint16_t h = 0;
        if (f != 0) {
            int e = (int)((x >> 23) & 0xff) - 127 + 15;
            h = (uint16_t)(((x >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((x & 0x7fffffu) >> 13));
        }
        ((uint16_t *)buf)[i] = h;
        break;
    }
    case MC_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case MC_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: abort();
    }
}

static double get(mc_dtype dt, const void *buf, int64_t i) {
    switch (dt) {
    case MC_F32: return ((const float *)buf)[i];
    case MC_F64: return ((const double *)buf)[i];
    case MC_BF16: return mc_bf16_to_f32(((const uint16_t *)buf)[i]);
    case MC_F16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        if (!(h & 0x7fff)) return 0;
        int e = (h >> 10) & 0x1f;
        double m = 1.0 + (h & 0x3ff) / 1024.0;
        return (h & 0x8000 ? -1 : 1) * ldexp(m, e - 15);
    }
    case MC_I32: return ((const int32_t *)buf)[i];
    case MC_I64: return (double)((const int64_t *)buf)[i];
    default: abort();
    }
}

static void *buf_new(mc_dtype dt, int64_t n) { return calloc((size_t)(n ? n : 1), mc_dtype_size(dt)); }

/* ---- backend memory: host memory on the CPU backend, device memory on CUDA ---- */

static bool on_gpu;
static bool over_mpi; /* device memory over MPI (mc_comm_set_device_over_mpi) */
static void *dev_new(size_t bytes) { return be->alloc(be, bytes ? bytes : 16); }
static void dev_free(void *d) { be->free(be, d); }
static void *dev_up(const void *h, size_t bytes) {
    void *d = dev_new(bytes);
    be->copy_h2d(be, d, h, bytes);
    return d;
}
static void dev_down(void *h, const void *d, size_t bytes) {
    be->copy_d2h(be, h, d, bytes);
    be->sync(be);
}

/* ---- checks on one group ---- */

static void check_membership(mc_group *g) {
    /* The communicator's order is the group's order: gather the global ranks. */
    int32_t me = world.rank, *all = calloc((size_t)g->size, 4);
    void *din = dev_up(&me, 4), *dout = dev_new((size_t)g->size * 4);
    mc_tensor in = mc_tensor_1d(din, MC_I32, 1), out = mc_tensor_1d(dout, MC_I32, g->size);
    mc_comm_all_gather(g, be, &out, &in);
    dev_down(all, dout, (size_t)g->size * 4);
    for (int j = 0; j < g->size; j++)
        CHECK(all[j] == g->ranks[j], "group %s member %d: %d vs %d", g->name, j, all[j], g->ranks[j]);
    dev_free(din);
    dev_free(dout);
    free(all);
}

static const char *op_name(mc_reduce_op op) { return op == MC_REDUCE_SUM ? "sum" : op == MC_REDUCE_MAX ? "max" : "min"; }

static void check_all_reduce_exact(mc_group *g, mc_dtype dt, int64_t n, mc_reduce_op op, bool async) {
    size_t bytes = (size_t)n * mc_dtype_size(dt);
    void *x = buf_new(dt, n);
    for (int64_t i = 0; i < n; i++) put(dt, x, i, exact_val(world.rank, i));
    void *d = dev_up(x, bytes);
    mc_tensor t = mc_tensor_1d(d, dt, n);
    if (async)
        mc_comm_wait(mc_comm_all_reduce_async(g, be, &t, op));
    else
        mc_comm_all_reduce(g, be, &t, op);
    dev_down(x, d, bytes);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = op == MC_REDUCE_SUM ? 0 : exact_val(g->ranks[0], i);
        for (int j = 0; j < g->size; j++) {
            double v = exact_val(g->ranks[j], i);
            want = op == MC_REDUCE_SUM ? want + v : op == MC_REDUCE_MAX ? fmax(want, v) : fmin(want, v);
        }
        if (get(dt, x, i) != want && bad++ < 3)
            CHECK(0, "all_reduce %s %s%s group %s n=%lld [%lld]: %g vs %g", mc_dtype_name(dt), op_name(op),
                  async ? " async" : "", g->name, (long long)n, (long long)i, get(dt, x, i), want);
    }
    dev_free(d);
    free(x);
}

/* The documented order on the CPU: ((x_0 + x_1) + x_2) + ..., in F32 (or F64), bit for
 * bit (NCCL's order is its own: close, then). Either way the same bits on every rank. */
static void check_all_reduce_order(mc_group *g, mc_dtype dt, int64_t n, bool async) {
    size_t bytes = (size_t)n * mc_dtype_size(dt);
    void *x = buf_new(dt, n);
    for (int64_t i = 0; i < n; i++) put(dt, x, i, rough_val(world.rank, i));
    void *d = dev_up(x, bytes);
    mc_tensor t = mc_tensor_1d(d, dt, n);
    if (async)
        mc_comm_wait(mc_comm_all_reduce_async(g, be, &t, MC_REDUCE_SUM));
    else
        mc_comm_all_reduce(g, be, &t, MC_REDUCE_SUM);
    dev_down(x, d, bytes);
    void *want = buf_new(dt, n);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MC_F64) {
            double acc = rough_val(g->ranks[0], i);
            for (int j = 1; j < g->size; j++) acc += rough_val(g->ranks[j], i);
            put(dt, want, i, acc);
        } else { /* F32, or BF16 accumulated in F32 from the rounded inputs */
            float acc = dt == MC_F32 ? (float)rough_val(g->ranks[0], i)
                                     : mc_bf16_to_f32(mc_f32_to_bf16((float)rough_val(g->ranks[0], i)));
            for (int j = 1; j < g->size; j++)
                acc += dt == MC_F32 ? (float)rough_val(g->ranks[j], i)
                                    : mc_bf16_to_f32(mc_f32_to_bf16((float)rough_val(g->ranks[j], i)));
            put(dt, want, i, acc);
        }
    }
    if (!on_gpu) {
        CHECK(!memcmp(x, want, bytes), "all_reduce %s group %s n=%lld is not the rank-ordered sum", mc_dtype_name(dt),
              g->name, (long long)n);
    } else {
        double tol = dt == MC_BF16 ? 2e-2 : dt == MC_F32 ? 1e-5 : 1e-12;
        for (int64_t i = 0; i < n; i++)
            if (fabs(get(dt, x, i) - get(dt, want, i)) > tol * (1 + fabs(get(dt, want, i)))) {
                CHECK(0, "all_reduce %s group %s [%lld]: %g vs %g", mc_dtype_name(dt), g->name, (long long)i,
                      get(dt, x, i), get(dt, want, i));
                break;
            }
    }
    mc_err err;
    CHECK(mc_comm_check_same_u64(g, mc_comm_hash64(x, bytes, 0), "the all_reduce result", &err) == MC_OK, "%s",
          err.msg);
    dev_free(d);
    free(x);
    free(want);
}

static void check_all_gather(mc_group *g, mc_dtype dt, int64_t c, bool async, bool in_place) {
    size_t es = mc_dtype_size(dt), cb = (size_t)c * es;
    void *hin = buf_new(dt, c), *hout = buf_new(dt, c * g->size);
    for (int64_t i = 0; i < c; i++) put(dt, hin, i, exact_val(world.rank, i));
    void *dout = dev_new(cb * (size_t)g->size);
    void *din = in_place ? (char *)dout + (size_t)g->rank * cb : dev_new(cb);
    be->copy_h2d(be, din, hin, cb);
    mc_tensor ti = mc_tensor_1d(din, dt, c), to = mc_tensor_1d(dout, dt, c * g->size);
    if (async)
        mc_comm_wait(mc_comm_all_gather_async(g, be, &to, &ti));
    else
        mc_comm_all_gather(g, be, &to, &ti);
    dev_down(hout, dout, cb * (size_t)g->size);
    int bad = 0;
    for (int j = 0; j < g->size; j++)
        for (int64_t i = 0; i < c; i++)
            if (get(dt, hout, j * c + i) != exact_val(g->ranks[j], i) && bad++ < 3)
                CHECK(0, "all_gather %s%s%s group %s c=%lld block %d [%lld]: %g vs %g", mc_dtype_name(dt),
                      async ? " async" : "", in_place ? " in place" : "", g->name, (long long)c, j, (long long)i,
                      get(dt, hout, j * c + i), exact_val(g->ranks[j], i));
    if (!in_place) dev_free(din);
    dev_free(dout);
    free(hin);
    free(hout);
}

static void check_reduce_scatter(mc_group *g, mc_dtype dt, int64_t c, bool async, bool rough, bool in_place) {
    int64_t n = c * g->size;
    size_t es = mc_dtype_size(dt);
    void *hin = buf_new(dt, n), *hout = buf_new(dt, c);
    for (int64_t i = 0; i < n; i++) put(dt, hin, i, rough ? rough_val(world.rank, i) : exact_val(world.rank, i));
    void *din = dev_up(hin, (size_t)n * es);
    void *dout = in_place ? (char *)din + (size_t)g->rank * (size_t)c * es : dev_new((size_t)c * es);
    mc_tensor ti = mc_tensor_1d(din, dt, n), to = mc_tensor_1d(dout, dt, c);
    if (async)
        mc_comm_wait(mc_comm_reduce_scatter_async(g, be, &to, &ti));
    else
        mc_comm_reduce_scatter(g, be, &to, &ti);
    dev_down(hout, dout, (size_t)c * es);
    int bad = 0;
    for (int64_t i = 0; i < c; i++) {
        int64_t e = (int64_t)g->rank * c + i; /* rank r gets [r*n/S, (r+1)*n/S) */
        double want;
        if (rough && dt == MC_F32) {
            float acc = (float)rough_val(g->ranks[0], e);
            for (int j = 1; j < g->size; j++) acc += (float)rough_val(g->ranks[j], e);
            want = acc;
        } else {
            want = 0;
            for (int j = 0; j < g->size; j++) want += exact_val(g->ranks[j], e);
        }
        double got = get(dt, hout, i), tol = rough && on_gpu ? 1e-5 * (1 + fabs(want)) : 0;
        if (fabs(got - want) > tol && bad++ < 3)
            CHECK(0, "reduce_scatter %s%s%s group %s c=%lld [%lld]: %g vs %g", mc_dtype_name(dt), async ? " async" : "",
                  in_place ? " in place" : "", g->name, (long long)c, (long long)i, got, want);
    }
    dev_free(din);
    if (!in_place) dev_free(dout);
    free(hin);
    free(hout);
}

static void check_broadcast(mc_group *g, int64_t n) {
    int root = g->size - 1;
    float *x = calloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) x[i] = (float)exact_val(world.rank, i);
    void *d = dev_up(x, (size_t)n * 4);
    mc_tensor t = mc_tensor_1d(d, MC_F32, n);
    mc_comm_broadcast(g, be, &t, root);
    dev_down(x, d, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        if (x[i] != (float)exact_val(g->ranks[root], i)) {
            CHECK(0, "broadcast group %s [%lld]: %g", g->name, (long long)i, x[i]);
            break;
        }
    dev_free(d);
    free(x);
}

static void check_p2p(mc_group *g, int64_t n) {
    int S = g->size, r = g->rank;
    size_t bytes = (size_t)n * 4;
    float *s = calloc((size_t)n, 4), *h = calloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) s[i] = (float)exact_val(world.rank, i);
    void *ds = dev_up(s, bytes), *dd = dev_up(h, bytes);
    mc_tensor ts = mc_tensor_1d(ds, MC_F32, n), td = mc_tensor_1d(dd, MC_F32, n);
    /* Ring exchange: everyone sends forward and receives from behind at once. */
    mc_comm_sendrecv(g, be, &ts, (r + 1) % S, &td, (r + S - 1) % S);
    dev_down(h, dd, bytes);
    for (int64_t i = 0; i < n; i++)
        if (h[i] != (float)exact_val(g->ranks[(r + S - 1) % S], i)) {
            CHECK(0, "sendrecv ring group %s [%lld]: %g", g->name, (long long)i, h[i]);
            break;
        }
    /* Pairs: even ranks send, odd ranks receive (pipeline-style one-way messages). */
    if (r % 2 == 0 && r + 1 < S) mc_comm_send(g, be, &ts, r + 1);
    if (r % 2 == 1) {
        be->zero(be, dd, bytes);
        mc_comm_recv(g, be, &td, r - 1);
        dev_down(h, dd, bytes);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != (float)exact_val(g->ranks[r - 1], i)) {
                CHECK(0, "send/recv group %s [%lld]: %g", g->name, (long long)i, h[i]);
                break;
            }
    }
    be->sync(be);
    dev_free(ds);
    dev_free(dd);
    free(s);
    free(h);
}

static void check_host_and_check_same(mc_group *g) {
    double v[3] = {world.rank + 1.0, -(double)world.rank, world.rank * 0.5};
    mc_comm_all_reduce_host_f64(g, v, 3, MC_REDUCE_SUM);
    double want = 0;
    for (int j = 0; j < g->size; j++) want += g->ranks[j] + 1.0;
    CHECK(v[0] == want, "host f64 sum group %s: %g vs %g", g->name, v[0], want);
    double m = world.rank;
    mc_comm_all_reduce_host_f64(g, &m, 1, MC_REDUCE_MAX);
    CHECK(m == g->ranks[g->size - 1], "host f64 max group %s: %g", g->name, m);
    mc_comm_barrier(g);
    mc_err err;
    CHECK(mc_comm_check_same_u64(g, 0x1234, "value", &err) == MC_OK, "%s", err.msg);
    if (g->size >= 3) { /* ranks from group rank 2 on differ: the message names the first */
        uint64_t v2 = g->rank >= 2 ? 99 : 7;
        int rc = mc_comm_check_same_u64(g, v2, "the config hash", &err);
        char want_msg[64];
        snprintf(want_msg, sizeof want_msg, "rank %d has 0x0000000000000063", g->ranks[2]);
        CHECK(rc == MC_ERR && strstr(err.msg, want_msg) && strstr(err.msg, "the config hash differs across ranks"),
              "check_same message: %s", rc == MC_ERR ? err.msg : "(no error)");
    }
}

/* Several async collectives in flight on different groups, waited out of order; each
 * equals the blocking result bit for bit. Then a distributed-optimizer step. */
static void check_async_overlap(mc_comm *c) {
    mc_group *gs[3] = {&c->dp_cp, &c->tp, &c->world};
    const int64_t n = 1000 + 7;
    const size_t bytes = (size_t)n * 4;
    float *hx[3], *hy[3];
    void *dx[3], *dy[3];
    mc_comm_work *w[3];
    for (int k = 0; k < 3; k++) {
        hx[k] = calloc(n, 4);
        hy[k] = calloc(n, 4);
        for (int64_t i = 0; i < n; i++) hx[k][i] = (float)rough_val(world.rank + 17 * k, i);
        dx[k] = dev_up(hx[k], bytes);
        dy[k] = dev_up(hx[k], bytes);
    }
    for (int k = 0; k < 3; k++) {
        mc_tensor t = mc_tensor_1d(dx[k], MC_F32, n);
        w[k] = mc_comm_all_reduce_async(gs[k], be, &t, MC_REDUCE_SUM);
    }
    for (int k = 2; k >= 0; k--) mc_comm_wait(w[k]);
    for (int k = 0; k < 3; k++) {
        mc_tensor t = mc_tensor_1d(dy[k], MC_F32, n);
        mc_comm_all_reduce(gs[k], be, &t, MC_REDUCE_SUM);
        dev_down(hx[k], dx[k], bytes);
        dev_down(hy[k], dy[k], bytes);
        CHECK(!memcmp(hx[k], hy[k], bytes), "async all_reduce on %s differs from the blocking one", gs[k]->name);
        dev_free(dx[k]);
        dev_free(dy[k]);
        free(hx[k]);
        free(hy[k]);
    }
    /* Reduce-scatter the grads into this rank's shard of the params, all-gather in place. */
    mc_group *g = &c->dp_cp;
    int64_t shard = 96, total = shard * g->size;
    float *hg = calloc(total, 4);
    for (int64_t i = 0; i < total; i++) hg[i] = (float)exact_val(world.rank, i);
    float *dg = dev_up(hg, (size_t)total * 4), *dp = dev_new((size_t)total * 4);
    mc_tensor tg = mc_tensor_1d(dg, MC_F32, total), ts = mc_tensor_1d(dp + g->rank * shard, MC_F32, shard);
    mc_comm_work *rs = mc_comm_reduce_scatter_async(g, be, &ts, &tg);
    CHECK(rs == NULL || g->size > 1, "size-1 groups give NULL handles");
    mc_comm_wait(rs);
    mc_tensor tp = mc_tensor_1d(dp, MC_F32, total);
    mc_comm_work *ag = mc_comm_all_gather_async(g, be, &tp, &ts);
    while (!mc_comm_test(ag)) {
    }
    mc_comm_wait(ag);
    dev_down(hg, dp, (size_t)total * 4);
    for (int64_t i = 0; i < total; i++) {
        double want = 0;
        for (int j = 0; j < g->size; j++) want += exact_val(g->ranks[j], i);
        if (hg[i] != want) {
            CHECK(0, "reduce_scatter + all_gather on %s [%lld]: %g vs %g", g->name, (long long)i, hg[i], want);
            break;
        }
    }
    dev_free(dg);
    dev_free(dp);
    free(hg);
    CHECK(mc_comm_test(NULL), "mc_comm_test(NULL)");
}

static void check_group(mc_group *g) {
    if (g->size == 1) return;
    check_membership(g);
    int S = g->size;
    /* MC_TEST_COMM_QUICK: fewer sizes and dtypes (slow transports, e.g. TCP between the
     * separately started processes of the torchrun-style test). */
    bool quick = getenv("MC_TEST_COMM_QUICK") != NULL;
    const int64_t sizes[] = {1, 7 * S + 3, S - 1, 5000 * S + 1};
    const mc_dtype dts[] = {MC_F32, MC_BF16, MC_F64, MC_F16, MC_I32, MC_I64};
    size_t nsizes = quick ? 2 : sizeof sizes / sizeof sizes[0], ndts = quick ? 2 : sizeof dts / sizeof dts[0];
    for (size_t k = 0; k < nsizes; k++) {
        for (size_t d = 0; d < ndts; d++)
            for (int op = 0; op < 3; op++) check_all_reduce_exact(g, dts[d], sizes[k], (mc_reduce_op)op, false);
        check_all_reduce_order(g, MC_F32, sizes[k], false);
        check_all_reduce_order(g, MC_F64, sizes[k], false);
        check_all_reduce_order(g, MC_BF16, sizes[k], false);
        check_all_reduce_order(g, MC_F32, sizes[k], true);
        check_all_reduce_exact(g, MC_BF16, sizes[k], MC_REDUCE_SUM, true);
    }
    for (int64_t c = 1; c <= (quick ? 1 : 4097); c += 4096) {
        check_all_gather(g, MC_F32, c, false, false);
        check_all_gather(g, MC_BF16, c, false, true);
        check_all_gather(g, MC_I64, c, true, false);
        check_all_gather(g, MC_F32, c, true, true);
        check_reduce_scatter(g, MC_F32, c, false, false, false);
        check_reduce_scatter(g, MC_BF16, c, false, false, true);
        check_reduce_scatter(g, MC_F32, c, false, true, false);
        check_reduce_scatter(g, MC_F64, c, true, false, false);
    }
    check_broadcast(g, 1);
    check_broadcast(g, 3001);
    check_p2p(g, 1);
    check_p2p(g, 2049);
    check_host_and_check_same(g);
}

static void run_layout(int tp, int pp, int cp) {
    char name[96];
    snprintf(name, sizeof name, "layout tp%d pp%d cp%d on %d ranks", tp, pp, cp, world.world_size);
    mc_comm c;
    mc_err err;
    int rc = mc_comm_init_from_env(&c, tp, pp, cp, 1, 0, &err);
    if (rc == MC_OK) {
        mc_comm_set_device_over_mpi(&c, over_mpi);
        rc = mc_comm_init_device(&c, be, &err);
    }
    if (rc != MC_OK) {
        CHECK(0, "%s", err.msg);
        finish(name);
        return;
    }
    /* The groups agree with the pure layout. */
    mc_group *gs[] = {&c.world, &c.tp, &c.cp, &c.dp, &c.pp, &c.dp_cp, &c.mp};
    for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) {
        int r[64];
        int n = mc_layout_group_ranks(c.world_size, &c.sizes, gs[k]->name, c.rank, r, 64);
        CHECK(n == gs[k]->size && !memcmp(r, gs[k]->ranks, sizeof(int) * (size_t)n), "group %s", gs[k]->name);
        check_group(gs[k]);
    }
    check_async_overlap(&c);
    mc_comm_free(&c);
    finish(name);
}

/* ---- single process: every group has size 1 ---- */

static void single_process(void) {
    CHECK(world.world_size == 1 && world.rank == 0 && world.local_rank == 0, "world %d rank %d", world.world_size,
          world.rank);
    if (on_gpu) return; /* host pointers below */
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    mc_tensor tx = mc_tensor_1d(x, MC_F32, 4), ty = mc_tensor_1d(y, MC_F32, 4);
    mc_comm_all_reduce(&world.dp, be, &tx, MC_REDUCE_SUM);
    CHECK(x[0] == 1 && x[3] == 4, "all_reduce changed the data");
    mc_comm_all_gather(&world.tp, be, &ty, &tx);
    CHECK(!memcmp(x, y, sizeof x), "all_gather is a copy");
    memset(y, 0, sizeof y);
    mc_comm_reduce_scatter(&world.dp_cp, be, &ty, &tx);
    CHECK(!memcmp(x, y, sizeof x), "reduce_scatter is a copy");
    memset(y, 0, sizeof y);
    CHECK(mc_comm_reduce_scatter_async(&world.dp_cp, be, &ty, &tx) == NULL, "size-1 async returns NULL");
    CHECK(!memcmp(x, y, sizeof x), "async reduce_scatter is a copy");
    mc_comm_wait(NULL);
    double v = 5;
    mc_comm_all_reduce_host_f64(&world.world, &v, 1, MC_REDUCE_SUM);
    CHECK(v == 5, "host all_reduce");
    mc_comm_broadcast(&world.pp, be, &tx, 0);
    mc_comm_barrier(&world.world);
    mc_err err;
    CHECK(mc_comm_check_same_u64(&world.world, 42, "x", &err) == MC_OK, "check_same");
    CHECK(mc_comm_init_device(&world, be, &err) == MC_OK, "init_device on the CPU is a no-op");
    CHECK(mc_comm_hash64("abc", 3, 0) == 0xe71fa2190541574bull, "FNV-1a of 'abc': %llx",
          (unsigned long long)mc_comm_hash64("abc", 3, 0));
    finish("single process: size-1 groups are identities");
}

int main(void) {
    const char *mode = getenv("MC_TEST_COMM_MODE");
    mode = mode ? mode : "collectives";
    mc_err err;
    int tp = !strcmp(mode, "layout") ? 3 : 1;
    if (mc_comm_init_from_env(&world, tp, 1, 1, 1, 0, &err) != MC_OK) mc_comm_exit_error(2, "%s", err.msg);
    /* MC_TEST_COMM_DEVICE=cuda: the same checks on GPU memory over NCCL (one GPU a rank). */
    const char *dev = getenv("MC_TEST_COMM_DEVICE");
    on_gpu = dev && !strcmp(dev, "cuda");
    const bool staged = dev && !strcmp(dev, "staged");
    over_mpi = staged || getenv("MC_TEST_COMM_OVER_MPI") != NULL;
    mc_backend *owned = NULL, as_device;
    if (staged) { /* the CPU backend's entries, presented as a device backend */
        owned = mc_backend_cpu_create();
        as_device = *owned;
        as_device.device = MC_DEVICE_CUDA;
        be = &as_device;
    } else if (on_gpu) {
        int d = mc_comm_pick_device(&world, &err);
        be = d >= 0 ? mc_backend_cuda_create(d, &err) : NULL;
        if (!be) {
            fprintf(stderr, "megatron-c: error: rank %d: %s\n", world.rank, err.msg);
            mc_comm_abort(2);
        }
    } else {
        be = mc_backend_cpu_create();
    }
    int W = world.world_size, R = world.rank;
    if (W == 1) {
        single_process();
    } else if (!strcmp(mode, "mismatch")) {
        uint64_t hash = R == W - 1 ? 0xbad : 0x600d;
        if (mc_comm_check_same_u64(&world.world, hash, "the validated configuration", &err) != MC_OK)
            mc_comm_exit_error(2, "%s", err.msg); /* on every rank */
    } else if (!strcmp(mode, "timeout")) {
        const char *nap = getenv("MC_TEST_COMM_SLEEP");
        if (R == 1) sleep(nap ? (unsigned)atoi(nap) : 60); /* never joins (or joins too late) */
        double v = 1;
        mc_comm_all_reduce_host_f64(&world.world, &v, 1, MC_REDUCE_SUM);
        fprintf(stderr, "rank %d: the all_reduce completed, which it must not\n", R);
        return 3;
    } else if (!strcmp(mode, "die")) {
        for (int step = 0;; step++) {
            if (R == 2 && step == 5) {
                usleep(300 * 1000); /* the others are inside step 5's all_reduce by now */
                raise(SIGKILL);
            }
            float x[1000];
            for (int i = 0; i < 1000; i++) x[i] = (float)i;
            mc_tensor t = mc_tensor_1d(x, MC_F32, 1000);
            mc_comm_all_reduce(&world.world, be, &t, MC_REDUCE_SUM);
            if (step > 1000) return 3;
        }
    } else {
        const char *only = getenv("MC_TEST_COMM_LAYOUTS"); /* "tp,pp,cp;..." */
        if (only) {
            char *s = strdup(only);
            for (char *tok = strtok(s, ";"); tok; tok = strtok(NULL, ";")) {
                int a = 1, b = 1, d = 1;
                sscanf(tok, "%d,%d,%d", &a, &b, &d);
                run_layout(a, b, d);
            }
            free(s);
        } else {
            /* Every factorization of the world into tp x pp x cp (x dp). */
            for (int a = 1; a <= W; a++)
                for (int b = 1; b <= W / a; b++)
                    for (int d = 1; d <= W / (a * b); d++)
                        if (W % (a * b * d) == 0) run_layout(a, b, d);
        }
    }
    if (owned) owned->destroy(owned);
    else be->destroy(be);
    int failed = g_failed;
    if (R == 0) printf("%d passed, %d failed\n", g_passed, g_failed);
    mc_comm_free(&world);
    return failed ? 1 : 0;
}
