/* cmd_bench.c: `megatron-c bench comm`, collective bandwidth over message sizes, in the
 * manner of nccl-tests' all_reduce_perf:
 *
 *   mpirun -np 8 megatron-c bench comm [--sizes 8B-8GB] [--ops all_reduce,all_gather,
 *       reduce_scatter] [--device cpu|cuda] [--dtype float] [--iters 20] [--warmup 5]
 *
 * Per op and size: the time of one call (us), algbw = size / time and busbw = algbw x
 * nccl-tests' factor (all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n), in
 * GB/s (1e9 bytes/s). "size" is nccl-tests' too: the buffer for all_reduce, the gathered
 * (output) buffer for all_gather, the scattered (input) buffer for reduce_scatter. The time
 * is the mean over --iters calls after --warmup calls, the slowest rank's: CUDA events on
 * the backend's stream, the host clock on the CPU. After timing, one more call on known
 * values is checked (#wrong: elements that differ, summed over ranks, among up to 16M
 * elements per size: the first, last and evenly spaced 4M-element chunks). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "tensor/backend.h"

enum { OP_ALL_REDUCE = 1, OP_ALL_GATHER = 2, OP_REDUCE_SCATTER = 4 };
enum { DEV_CPU = 0, DEV_CUDA = 1, DEV_AUTO = 2 };

typedef struct bench_opts {
    char *sizes, *ops;
    int device, dtype, iters, warmup;
    double factor;
} bench_opts;

#define F(member) offsetof(bench_opts, member)
static const mc_arg_choice k_devices[] = {{"auto", DEV_AUTO}, {"cpu", DEV_CPU}, {"cuda", DEV_CUDA}, {NULL, 0}};
static const mc_arg_choice k_dtypes[] = {
    {"float", MC_F32}, {"bf16", MC_BF16}, {"half", MC_F16}, {"double", MC_F64}, {NULL, 0}};
static const mc_arg_spec k_flags[] = {
    {"--sizes", MC_ARG_STRING, F(sizes), "message sizes: MIN-MAX (x --step-factor), a list A,B,C or one size; "
                                         "units B, KB, MB, GB (powers of 1024); default 8B-8GB"},
    {"--ops", MC_ARG_STRING, F(ops), "comma-separated: all_reduce, all_gather, reduce_scatter (default: all three)"},
    {"--device", MC_ARG_CHOICE, F(device), "cpu (MPI on host memory) or cuda (NCCL on device memory); default "
                                           "auto: cuda when a GPU is present",
     .choices = k_devices},
    {"--dtype", MC_ARG_CHOICE, F(dtype), "element type (default float)", .choices = k_dtypes},
    {"--iters", MC_ARG_INT, F(iters), "timed calls per size (default 20)", .min = 1, .max = 1e6},
    {"--warmup", MC_ARG_INT, F(warmup), "untimed calls before timing (default 5)", .min = 0, .max = 1e6},
    {"--step-factor", MC_ARG_DOUBLE, F(factor), "size multiplier between MIN and MAX (default 2)", .min = 1.0001,
     .max = 1e6},
};
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

static const char *dtype_name(int dt) {
    for (const mc_arg_choice *d = k_dtypes; d->name; d++)
        if (d->value == dt) return d->name;
    return "?";
}

static void usage(void) {
    printf("usage: megatron-c bench comm [flags]   (launch with mpirun/srun for more than one rank)\n\n");
    mc_args_print_help(k_flags, NFLAGS);
}

/* "8", "8B", "64KB", "1MiB", "8G" -> bytes (K = 1024, as nccl-tests). */
static int parse_size(const char *s, int64_t *out, mc_err *err) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return mc_err_set(err, "--sizes: '%s' is not a size (e.g. 8B, 64KB, 1MB, 8GB)", s);
    double mult = 1;
    char unit[8] = "";
    snprintf(unit, sizeof unit, "%s", end);
    for (char *p = unit; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
    if (!strcmp(unit, "") || !strcmp(unit, "B"))
        mult = 1;
    else if (!strcmp(unit, "K") || !strcmp(unit, "KB") || !strcmp(unit, "KIB"))
        mult = 1024.0;
    else if (!strcmp(unit, "M") || !strcmp(unit, "MB") || !strcmp(unit, "MIB"))
        mult = 1024.0 * 1024;
    else if (!strcmp(unit, "G") || !strcmp(unit, "GB") || !strcmp(unit, "GIB"))
        mult = 1024.0 * 1024 * 1024;
    else
        return mc_err_set(err, "--sizes: unknown unit in '%s' (B, KB, MB, GB)", s);
    double b = v * mult;
    if (b < 1 || b > 1e15) return mc_err_set(err, "--sizes: '%s' is out of range", s);
    *out = (int64_t)b;
    return MC_OK;
}

/* Fills sizes[] (ascending); returns the count. */
static int parse_sizes(const char *spec, double factor, int64_t *sizes, int cap, mc_err *err) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    int n = 0;
    char *dash = strchr(buf, '-');
    if (dash) {
        *dash = 0;
        int64_t lo, hi;
        MC_TRY(parse_size(buf, &lo, err));
        MC_TRY(parse_size(dash + 1, &hi, err));
        if (hi < lo) return mc_err_set(err, "--sizes: %s is above %s", buf, dash + 1);
        for (double s = (double)lo; s <= (double)hi * (1 + 1e-12) && n < cap; s *= factor) {
            int64_t b = (int64_t)(s + 0.5);
            if (n == 0 || b > sizes[n - 1]) sizes[n++] = b;
        }
        return n;
    }
    for (char *tok = strtok(buf, ","); tok && n < cap; tok = strtok(NULL, ",")) MC_TRY(parse_size(tok, &sizes[n++], err));
    for (int i = 1; i < n; i++)
        if (sizes[i] <= sizes[i - 1]) return mc_err_set(err, "--sizes: list sizes in ascending order");
    return n;
}

static int parse_ops(const char *spec, mc_err *err) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    int ops = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "all_reduce") || !strcmp(tok, "allreduce"))
            ops |= OP_ALL_REDUCE;
        else if (!strcmp(tok, "all_gather") || !strcmp(tok, "allgather"))
            ops |= OP_ALL_GATHER;
        else if (!strcmp(tok, "reduce_scatter") || !strcmp(tok, "reducescatter"))
            ops |= OP_REDUCE_SCATTER;
        else
            return mc_err_set(err, "--ops: unknown operation '%s' (all_reduce, all_gather, reduce_scatter)", tok);
    }
    if (!ops) return mc_err_set(err, "--ops: no operation given");
    return ops;
}

/* Bytes of host memory this process may use: MemAvailable / ranks on this host. */
static double host_budget(int local_size) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb <= 0) kb = 4.0 * 1024 * 1024; /* 4 GB if unknown */
    return kb * 1024.0 / (local_size > 0 ? local_size : 1);
}

static const char *human(int64_t b, char *buf, size_t n) {
    if (b >= (int64_t)1 << 30 && b % ((int64_t)1 << 30) == 0)
        snprintf(buf, n, "%lld GB", (long long)(b >> 30));
    else if (b >= (int64_t)1 << 20)
        snprintf(buf, n, "%.0f MB", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%lld B", (long long)b);
    return buf;
}

/* ---- data: a known pattern, small integers so every dtype sums exactly ---- */

static double pattern(int rank, int64_t i) { return (double)((rank + i) % 4); }

static void put_value(mc_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case MC_F32: ((float *)p)[i] = (float)v; break;
    case MC_F64: ((double *)p)[i] = v; break;
    case MC_BF16: ((uint16_t *)p)[i] = mc_f32_to_bf16((float)v); break;
    case MC_F16: { /* small non-negative integers: exact */
        uint16_t h = 0;
        if (v > 0) {
            int e = (int)floor(log2(v));
            h = (uint16_t)(((e + 15) << 10) | (int)((v / ldexp(1, e) - 1) * 1024));
        }
        ((uint16_t *)p)[i] = h;
        break;
    }
    default: break;
    }
}

static double get_value(mc_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case MC_F32: return ((const float *)p)[i];
    case MC_F64: return ((const double *)p)[i];
    case MC_BF16: return mc_bf16_to_f32(((const uint16_t *)p)[i]);
    case MC_F16: {
        uint16_t h = ((const uint16_t *)p)[i];
        if (!(h & 0x7fff)) return 0;
        return ldexp(1.0 + (h & 0x3ff) / 1024.0, ((h >> 10) & 0x1f) - 15);
    }
    default: return NAN;
    }
}

#define STAGE_ELEMS ((int64_t)1 << 22) /* a multiple of the pattern's period, 4 */
#define CHECK_CHUNKS 4                   /* at most this many staging chunks are checked */

/* dev[i] = pattern(rank, i) for i in [0, n): the pattern repeats every 4 elements, so one
 * staging chunk serves every copy. */
static void fill(mc_backend *be, void *dev, mc_dtype dt, int64_t n, int rank, void *stage) {
    size_t es = mc_dtype_size(dt);
    int64_t len0 = n < STAGE_ELEMS ? n : STAGE_ELEMS;
    for (int64_t i = 0; i < len0; i++) put_value(dt, stage, i, pattern(rank, i));
    for (int64_t at = 0; at < n; at += STAGE_ELEMS) {
        int64_t len = n - at < STAGE_ELEMS ? n - at : STAGE_ELEMS;
        be->copy_h2d(be, (char *)dev + (size_t)at * es, stage, (size_t)len * es);
    }
    be->sync(be);
}

/* Elements of dev[0, n) that differ from want(i) (i counted from 0). */
typedef double (*want_fn)(int64_t i, int nranks, int rank, int64_t chunk);

static double want_sum(int64_t i, int nranks, int rank, int64_t chunk) {
    (void)rank;
    (void)chunk;
    double s = 0;
    for (int r = 0; r < nranks; r++) s += pattern(r, i);
    return s;
}
static double want_gather(int64_t i, int nranks, int rank, int64_t chunk) {
    (void)nranks;
    (void)rank;
    return pattern((int)(i / chunk), i % chunk);
}
static double want_scatter(int64_t i, int nranks, int rank, int64_t chunk) {
    return want_sum((int64_t)rank * chunk + i, nranks, rank, chunk);
}

/* Elements that differ from want() among at most CHECK_CHUNKS staging chunks of dev[0, n)
 * (the first, the last and evenly spaced ones between), so that checking 8 GB stays quick. */
static int64_t count_wrong(mc_backend *be, const void *dev, mc_dtype dt, int64_t n, want_fn want, int nranks,
                           int rank, int64_t chunk, void *stage) {
    size_t es = mc_dtype_size(dt);
    int64_t wrong = 0, nchunks = (n + STAGE_ELEMS - 1) / STAGE_ELEMS;
    int ncheck = nchunks < CHECK_CHUNKS ? (int)nchunks : CHECK_CHUNKS;
    be->sync(be);
    for (int k = 0; k < ncheck; k++) {
        int64_t c = ncheck == 1 ? 0 : k * (nchunks - 1) / (ncheck - 1), at = c * STAGE_ELEMS;
        int64_t len = n - at < STAGE_ELEMS ? n - at : STAGE_ELEMS;
        be->copy_d2h(be, stage, (const char *)dev + (size_t)at * es, (size_t)len * es);
        be->sync(be);
        for (int64_t i = 0; i < len; i++)
            if (get_value(dt, stage, i) != want(at + i, nranks, rank, chunk)) wrong++;
    }
    return wrong;
}

/* ---- the benchmark ---- */

typedef struct {
    mc_comm *c;
    mc_backend *be;
    mc_dtype dt;
    int iters, warmup;
    void *a, *b, *stage; /* device buffers of max_bytes each, host staging */
} bench_ctx;

static void run_op(bench_ctx *x, int op, int64_t count) {
    mc_group *g = &x->c->world;
    int n = g->size;
    if (op == OP_ALL_REDUCE) {
        mc_tensor t = mc_tensor_1d(x->a, x->dt, count);
        mc_comm_all_reduce(g, x->be, &t, MC_REDUCE_SUM);
    } else if (op == OP_ALL_GATHER) {
        mc_tensor in = mc_tensor_1d(x->a, x->dt, count / n), out = mc_tensor_1d(x->b, x->dt, count);
        mc_comm_all_gather(g, x->be, &out, &in);
    } else {
        mc_tensor in = mc_tensor_1d(x->a, x->dt, count), out = mc_tensor_1d(x->b, x->dt, count / n);
        mc_comm_reduce_scatter(g, x->be, &out, &in);
    }
}

/* One row: returns busbw (GB/s); adds the elements found wrong to *wrong_total. */
static double bench_size(bench_ctx *x, int op, int64_t bytes, double *wrong_total) {
    mc_comm *c = x->c;
    int n = c->world_size, r = c->rank;
    size_t es = mc_dtype_size(x->dt);
    int64_t count = bytes / (int64_t)es;
    if (op != OP_ALL_REDUCE) count -= count % n; /* equal chunks */
    if (count < (op == OP_ALL_REDUCE ? 1 : n)) count = op == OP_ALL_REDUCE ? 1 : n;
    int64_t real_bytes = count * (int64_t)es, chunk = count / n;

    /* Timing: all_gather and reduce_scatter on the check pattern (their input does not
     * change); all_reduce in place on zeros, so that repeated sums stay finite. */
    if (op == OP_ALL_REDUCE) {
        x->be->zero(x->be, x->a, (size_t)real_bytes);
        x->be->sync(x->be);
    } else {
        fill(x->be, x->a, x->dt, op == OP_ALL_GATHER ? chunk : count, r, x->stage);
    }
    for (int i = 0; i < x->warmup; i++) run_op(x, op, count);
    x->be->sync(x->be);
    mc_comm_barrier(&c->world);
    mc_comm_mark m0 = {0}, m1 = {0};
    mc_comm_mark_record(x->be, &m0);
    for (int i = 0; i < x->iters; i++) run_op(x, op, count);
    mc_comm_mark_record(x->be, &m1);
    double t = mc_comm_mark_elapsed(x->be, &m0, &m1) / x->iters;
    mc_comm_mark_release(&m0);
    mc_comm_mark_release(&m1);
    mc_comm_all_reduce_host_f64(&c->world, &t, 1, MC_REDUCE_MAX);

    /* Check one call on known values. */
    int64_t wrong;
    if (op == OP_ALL_REDUCE) {
        fill(x->be, x->a, x->dt, count, r, x->stage);
        run_op(x, op, count);
        wrong = count_wrong(x->be, x->a, x->dt, count, want_sum, n, r, chunk, x->stage);
    } else if (op == OP_ALL_GATHER) {
        wrong = count_wrong(x->be, x->b, x->dt, count, want_gather, n, r, chunk, x->stage);
    } else {
        wrong = count_wrong(x->be, x->b, x->dt, chunk, want_scatter, n, r, chunk, x->stage);
    }
    double w = (double)wrong;
    mc_comm_all_reduce_host_f64(&c->world, &w, 1, MC_REDUCE_SUM);
    *wrong_total += w;

    double algbw = t > 0 ? (double)real_bytes / t / 1e9 : 0;
    double factor = op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    double busbw = algbw * factor;
    if (r == 0) {
        printf("%14lld %14lld %8s %6s %12.2f %8.2f %8.2f %8.0f\n", (long long)real_bytes, (long long)count, dtype_name(x->dt),
               op == OP_ALL_GATHER ? "none" : "sum", t * 1e6, algbw, busbw, w);
        fflush(stdout);
    }
    return busbw;
}

static int bench_comm(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        }
    bench_opts o = {.device = DEV_AUTO, .dtype = MC_F32, .iters = 20, .warmup = 5, .factor = 2.0};
    mc_err err;
    mc_comm c;
    /* The launcher first, so that a bad flag is reported once per rank and ends the job. */
    if (mc_comm_init_from_env(&c, 1, 1, 1, 1, 0, &err) != MC_OK) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    if (mc_args_parse(k_flags, NFLAGS, &o, argc, argv, NULL, false, &err) != MC_OK) {
        char *p = strstr(err.msg, "megatron-c train --help");
        if (p) snprintf(p, sizeof err.msg - (size_t)(p - err.msg), "megatron-c bench comm --help)");
        mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    }
    int64_t sizes[128];
    int nsizes = parse_sizes(o.sizes ? o.sizes : "8B-8GB", o.factor, sizes, 128, &err);
    if (nsizes < 0) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    int ops = parse_ops(o.ops ? o.ops : "all_reduce,all_gather,reduce_scatter", &err);
    if (ops < 0) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);

    if (o.device == DEV_AUTO) o.device = mc_backend_cuda_available() ? DEV_CUDA : DEV_CPU;
    mc_backend *be;
    if (o.device == DEV_CUDA) {
        int dev = mc_comm_pick_device(&c, &err);
        be = dev >= 0 ? mc_backend_cuda_create(dev, &err) : NULL;
        if (!be || mc_comm_init_device(&c, be, &err) != MC_OK) {
            fprintf(stderr, "megatron-c: error: rank %d: %s\n", c.rank, err.msg);
            mc_comm_abort(MC_EXIT_USAGE);
        }
    } else {
        be = mc_backend_cpu_create();
    }

    /* Largest size that fits: two buffers of it (plus the comm layer's 64 MiB scratch on the
     * CPU) within 60% of this rank's share of memory; the same on every rank. */
    double budget = o.device == DEV_CUDA ? 0.8 * (double)mc_comm_device_free_bytes(be)
                                         : 0.6 * host_budget(c.local_size) - 64.0 * (1 << 20);
    double cap = budget / 2;
    mc_comm_all_reduce_host_f64(&c.world, &cap, 1, MC_REDUCE_MIN);
    int kept = 0;
    for (int i = 0; i < nsizes; i++)
        if ((double)sizes[i] <= cap) kept++;
    if (kept == 0) mc_comm_exit_error(1, "bench comm: not even %lld bytes fit in memory here", (long long)sizes[0]);
    int64_t max_bytes = sizes[kept - 1];
    size_t es = mc_dtype_size((mc_dtype)o.dtype);
    if (max_bytes < (int64_t)(es * (size_t)c.world_size)) max_bytes = (int64_t)(es * (size_t)c.world_size);

    char h1[32], h2[32], h3[32];
    if (c.rank == 0) {
        printf("# megatron-c bench comm: %d rank%s (%s), device %s, dtype %s, %d iterations after %d warm-up\n",
               c.world_size, c.world_size == 1 ? "" : "s", mc_comm_launcher_name(c.launcher),
               o.device == DEV_CUDA ? "cuda (NCCL)" : "cpu (MPI)", dtype_name(o.dtype), o.iters, o.warmup);
        if (kept < nsizes)
            printf("# sizes above %s skipped: two buffers of %s do not fit in %s per rank (%s)\n",
                   human(max_bytes, h1, sizeof h1), human(sizes[kept], h2, sizeof h2), human((int64_t)budget, h3, sizeof h3),
                   o.device == DEV_CUDA ? "80% of free GPU memory" : "60% of this rank's share of available host memory");
        if (c.world_size == 1)
            printf("# one rank: every collective is a no-op here; launch with mpirun -np N (or srun)\n");
        printf("# time: mean of one call over the iterations, slowest rank; algbw = size/time; busbw = algbw x "
               "2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter)\n");
    }
    bench_ctx x = {.c = &c, .be = be, .dt = (mc_dtype)o.dtype, .iters = o.iters, .warmup = o.warmup};
    x.a = be->alloc(be, (size_t)max_bytes);
    x.b = be->alloc(be, (size_t)max_bytes);
    x.stage = mc_xmalloc((size_t)STAGE_ELEMS * es);
    static const int order[3] = {OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER};
    static const char *names[3] = {"all_reduce", "all_gather", "reduce_scatter"};
    double total_wrong = 0;
    for (int k = 0; k < 3; k++) {
        if (!(ops & order[k])) continue;
        if (c.rank == 0) {
            printf("#\n# %s\n#%13s %14s %8s %6s %12s %8s %8s %8s\n#%13s %14s %8s %6s %12s %8s %8s %8s\n", names[k],
                   "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "",
                   "(us)", "(GB/s)", "(GB/s)", "");
            fflush(stdout);
        }
        double sum_bw = 0;
        for (int i = 0; i < kept; i++) sum_bw += bench_size(&x, order[k], sizes[i], &total_wrong);
        if (c.rank == 0) printf("# Avg bus bandwidth (%s): %.3f GB/s\n", names[k], sum_bw / kept);
    }
    be->free(be, x.a);
    be->free(be, x.b);
    free(x.stage);
    be->destroy(be);
    free(o.sizes);
    free(o.ops);
    mc_comm_free(&c);
    if (total_wrong > 0) {
        fprintf(stderr, "megatron-c: error: bench comm: %.0f elements had wrong values (#wrong column)\n", total_wrong);
        return 1;
    }
    return 0;
}

int mc_cmd_bench(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "comm")) return bench_comm(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "attention")) return mc_cmd_bench_attention(argc - 1, argv + 1);
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: megatron-c bench <what> [flags]\n\n  comm        collective bus bandwidth over message sizes "
               "(all_reduce, all_gather, reduce_scatter)\n  attention   causal attention forward and backward on the "
               "GPU, beside ../shared/bench/sdpa_backends.py\n");
        return 0;
    }
    if (argc == 0) mc_die_usage("bench: which benchmark? (benchmarks: comm, attention)");
    mc_die_usage("bench: unknown benchmark '%s' (benchmarks: comm, attention)", argv[0]);
}
