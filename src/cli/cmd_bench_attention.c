/* cmd_bench_attention.c: `megatron-c bench attention`, causal attention through the CUDA
 * backend's attention op (cuDNN's fused attention where it takes the shape, else our own
 * kernels; MC_ATTN_CUDNN=0 forces ours), timed as ../shared/bench/sdpa_backends.py times
 * PyTorch's SDPA backends, so the two print comparable numbers side by side:
 *
 *   megatron-c bench attention [--shapes B:H:G:D:S,...] [--iters 20] [--warmup 3]
 *                              [--deterministic-mode] [--dtype bf16|half]
 *
 * Per shape (batch B, H query heads, G key/value heads, head dim D, sequence S; default the
 * three of issue 21: 1:32:8:128:8192, 1:32:8:128:16384, 4:32:8:64:2048): the forward, the
 * backward alone and forward+backward, each the median of --iters runs after --warmup,
 * timed with CUDA events on the backend's stream; TFLOP/s with causal FLOPs at half
 * (forward 4 B H S^2 D / 2, backward 2.5x that, forward+backward 3.5x, as sdpa_backends.py).
 * One `RESULT {json}` line per shape. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "cli/commands.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

#ifdef MC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

typedef struct attn_bench_opts {
    char *shapes;
    int iters, warmup, dtype;
    bool deterministic;
} attn_bench_opts;

#define F(member) offsetof(attn_bench_opts, member)
static const mc_arg_choice k_dtypes[] = {{"bf16", MC_BF16}, {"half", MC_F16}, {NULL, 0}};
static const mc_arg_spec k_flags[] = {
    {"--shapes", MC_ARG_STRING, F(shapes), "comma-separated B:H:G:D:S (batch, query heads, key/value heads, "
                                           "head dim, sequence); default 1:32:8:128:8192,1:32:8:128:16384,4:32:8:64:2048"},
    {"--iters", MC_ARG_INT, F(iters), "timed runs per measurement (median; default 20)"},
    {"--warmup", MC_ARG_INT, F(warmup), "untimed runs first (default 3)"},
    {"--dtype", MC_ARG_CHOICE, F(dtype), "activations: bf16 (default) or half", k_dtypes},
    {"--deterministic-mode", MC_ARG_TRUE, F(deterministic), "the bitwise-reproducible backward"},
};
#undef F
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

typedef struct attn_shape {
    int64_t B, S;
    int H, G, D;
} attn_shape;

/* "B:H:G:D:S,..." into shapes; the count, or dies naming the bad entry. */
static int parse_shapes(const char *text, attn_shape *out, int cap) {
    int n = 0;
    const char *p = text;
    while (*p) {
        long long b, h, g, d, s;
        int used = 0;
        if (sscanf(p, "%lld:%lld:%lld:%lld:%lld%n", &b, &h, &g, &d, &s, &used) != 5 || (p[used] && p[used] != ','))
            mc_die_usage("bench attention --shapes: '%s' is not B:H:G:D:S[,B:H:G:D:S...]", p);
        if (b < 1 || h < 1 || g < 1 || d < 1 || s < 1 || h % g != 0 || h > 4096 || d > 4096)
            mc_die_usage("bench attention --shapes: %lld:%lld:%lld:%lld:%lld: every size positive and the query heads "
                         "a multiple of the key/value heads", b, h, g, d, s);
        if (n == cap) mc_die_usage("bench attention --shapes: more than %d shapes", cap);
        out[n++] = (attn_shape){.B = b, .S = s, .H = (int)h, .G = (int)g, .D = (int)d};
        p += used;
        if (*p == ',') p++;
    }
    if (n == 0) mc_die_usage("bench attention --shapes: no shape given");
    return n;
}

#ifdef MC_HAVE_CUDA
static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) mc_die_usage("bench attention: %s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

typedef struct attn_bufs {
    mc_tensor qkv, out, lse, dout, dqkv;
    mc_attn_desc desc;
} attn_bufs;

/* 0: forward, 1: backward, 2: forward then backward. */
static void run_once(mc_backend *be, attn_bufs *a, int what) {
    if (what != 1) mc_op_attention_fwd(be, &a->out, &a->lse, &a->qkv, &a->desc);
    if (what != 0) mc_op_attention_bwd(be, &a->dqkv, NULL, &a->dout, &a->qkv, &a->out, &a->lse, &a->desc);
}

static double median_ms(mc_backend *be, attn_bufs *a, int what, const attn_bench_opts *o, cudaStream_t stream,
                        cudaEvent_t e0, cudaEvent_t e1) {
    float *ms = mc_xmalloc(sizeof(float) * (size_t)o->iters);
    for (int i = 0; i < o->warmup; i++) run_once(be, a, what);
    for (int i = 0; i < o->iters; i++) {
        CU(cudaEventRecord(e0, stream));
        run_once(be, a, what);
        CU(cudaEventRecord(e1, stream));
        CU(cudaEventSynchronize(e1));
        CU(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)o->iters, sizeof(float), cmp_float);
    double m = ms[o->iters / 2];
    free(ms);
    return m;
}

static void bench_shape(mc_backend *be, const attn_shape *s, const attn_bench_opts *o) {
    const mc_dtype dt = (mc_dtype)o->dtype;
    const int64_t nqkv = s->S * s->B * (s->H + 2 * s->G) * s->D, nout = s->S * s->B * s->H * s->D;
    attn_bufs a;
    a.qkv = mc_tensor_1d(be->alloc(be, (size_t)nqkv * mc_dtype_size(dt)), dt, nqkv);
    a.dqkv = mc_tensor_1d(be->alloc(be, (size_t)nqkv * mc_dtype_size(dt)), dt, nqkv);
    a.out = mc_tensor_1d(be->alloc(be, (size_t)nout * mc_dtype_size(dt)), dt, nout);
    a.dout = mc_tensor_1d(be->alloc(be, (size_t)nout * mc_dtype_size(dt)), dt, nout);
    a.lse = mc_tensor_1d(be->alloc(be, sizeof(float) * (size_t)(s->B * s->H * s->S)), MC_F32, s->B * s->H * s->S);
    /* random inputs (never zeros: they hide unwritten outputs and can run faster) */
    int64_t row = 0;
    be->init_normal(be, &a.qkv, 1234, 1, 1.0, &row, 0, 0);
    be->init_normal(be, &a.dout, 1234, 2, 1.0, &row, 0, 0);
    a.desc = (mc_attn_desc){.seq = s->S, .batch = s->B, .heads = s->H, .groups = s->G, .head_dim = s->D,
                            .softmax_scale = (float)(1.0 / sqrt((double)s->D)), .seg_start = mc_tensor_none(),
                            .deterministic = o->deterministic};
    cudaStream_t stream = (cudaStream_t)be->native_stream(be);
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    const double fwd = median_ms(be, &a, 0, o, stream, e0, e1), bwd = median_ms(be, &a, 1, o, stream, e0, e1),
                 both = median_ms(be, &a, 2, o, stream, e0, e1);
    be->sync(be);
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    const double flops = 4.0 * (double)s->B * s->H * (double)s->S * (double)s->S * s->D / 2;
    const char *path = getenv("MC_ATTN_CUDNN");
    printf("RESULT {\"impl\": \"megatron-c\", \"attn_cudnn_env\": \"%s\", \"b\": %lld, \"h\": %d, \"kv\": %d, \"d\": %d, "
           "\"s\": %lld, \"deterministic\": %s, \"fwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"bwd_ms\": %.4f, "
           "\"bwd_tflops\": %.1f, \"fwdbwd_ms\": %.4f, \"fwdbwd_tflops\": %.1f}\n",
           path ? path : "", (long long)s->B, s->H, s->G, s->D, (long long)s->S, o->deterministic ? "true" : "false",
           fwd, flops / (fwd * 1e-3) / 1e12, bwd, 2.5 * flops / (bwd * 1e-3) / 1e12, both,
           3.5 * flops / (both * 1e-3) / 1e12);
    fflush(stdout);
    mc_tensor *bufs[] = {&a.qkv, &a.dqkv, &a.out, &a.dout, &a.lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]->data);
}
#endif

int mc_cmd_bench_attention(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c bench attention [flags]   (one GPU)\n\n");
            mc_args_print_help(k_flags, NFLAGS);
            return 0;
        }
    attn_bench_opts o = {.iters = 20, .warmup = 3, .dtype = MC_BF16};
    mc_err err;
    if (mc_args_parse(k_flags, NFLAGS, &o, argc, argv, NULL, false, &err) != MC_OK) {
        char *p = strstr(err.msg, "megatron-c train --help");
        if (p) snprintf(p, sizeof err.msg - (size_t)(p - err.msg), "megatron-c bench attention --help)");
        mc_die_usage("%s", err.msg);
    }
    if (o.iters < 1 || o.warmup < 0) mc_die_usage("bench attention: --iters must be >= 1 and --warmup >= 0");
    attn_shape shapes[64];
    const int n = parse_shapes(o.shapes ? o.shapes : "1:32:8:128:8192,1:32:8:128:16384,4:32:8:64:2048", shapes, 64);
#ifdef MC_HAVE_CUDA
    if (!mc_backend_cuda_available()) mc_die_usage("bench attention: no CUDA GPU (it times the CUDA backend's attention)");
    mc_backend *be = mc_backend_cuda_create(0, &err);
    if (!be) mc_die_usage("bench attention: %s", err.msg);
    for (int i = 0; i < n; i++) bench_shape(be, &shapes[i], &o);
    be->destroy(be);
    free(o.shapes);
    return 0;
#else
    (void)n;
    mc_die_usage("bench attention: this build has no CUDA backend (it times the CUDA backend's attention)");
#endif
}
