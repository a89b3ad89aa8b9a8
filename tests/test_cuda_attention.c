/* test_cuda_attention.c: the CUDA attention kernels (backend/cuda/cuda_flash.h) against
 * the CPU reference backend's attention on random inputs.
 *  - F32 (the simple tiled kernels): out, lse, dq, dk, dv to relative L2 < 1e-5;
 *  - BF16 (the tensor-core kernels for head_dim 64 and 128, the simple kernels otherwise):
 *    inputs rounded to BF16, the CPU reference in F32 on the rounded values, relative
 *    L2 < 1e-2;
 *  over head dims 16..128, GQA (groups < heads) and MHA (groups == heads), S not a
 *  multiple of any tile, seg_start (document-style and arbitrary), dropout 0.1, B > 1;
 *  outputs and dqkv are pre-filled with NaN so that every element must be written;
 *  the backward both ways: dQ summed with atomics (the default) and deterministic, and
 *  two deterministic backward runs are bitwise equal.
 * The kernels are called directly (device buffers from cudaMalloc, the default stream), so
 * the test does not depend on the rest of the CUDA backend.
 *
 * MC_BENCH_ATTN=1 adds a timing mode (MC_BENCH_ATTN=only: the timing mode alone): BF16 forward and forward+backward with CUDA events
 * (median of 20 after warm-up) at B=4, heads 32, groups 8, d 64, S 2048 (Llama-style) and
 * B=64, heads 12, d 64, S 1024 (GPT-2), printing TFLOP/s with forward FLOPs
 * 4 B H S^2 d / 2 (causal) and forward+backward = 3.5 x forward. Skipped (exit 77) without
 * a GPU. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/philox.h"
#include "check.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

#if defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define TEST_HAVE_CUDA_HEADERS 1
#endif
#endif

#ifdef TEST_HAVE_CUDA_HEADERS
#include <cuda_runtime.h>

#include "backend/cuda/cuda_flash.h"

static mc_backend *cpu;

typedef struct attn_shape {
    int64_t S, B;
    int heads, groups, d;
    float dropout;
    int seg; /* 0: none, 1: documents, 2: arbitrary first keys in [0, i] */
} attn_shape;

static float *host_normals(int64_t n, uint64_t stream, float scale) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = scale * (float)mc_philox_normal(0xa77e, stream, (uint64_t)i);
    return x;
}

static void round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = mc_bf16_to_f32(mc_f32_to_bf16(x[i]));
}

/* host F32 -> new device buffer of dtype dt */
static void *to_device(const float *x, int64_t n, mc_dtype dt) {
    void *d = NULL;
    size_t es = dt == MC_BF16 ? 2 : 4;
    CU(cudaMalloc(&d, (size_t)n * es));
    if (dt == MC_BF16) {
        uint16_t *h = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) h[i] = mc_f32_to_bf16(x[i]);
        CU(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        CU(cudaMemcpy(d, x, (size_t)n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}

/* device buffer of dtype dt -> new host F32 array */
static float *to_host(const void *d, int64_t n, mc_dtype dt) {
    float *x = malloc((size_t)n * sizeof(float));
    if (dt == MC_BF16) {
        uint16_t *h = malloc((size_t)n * 2);
        CU(cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < n; i++) x[i] = mc_bf16_to_f32(h[i]);
        free(h);
    } else {
        CU(cudaMemcpy(x, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    return x;
}

/* Which part of the packed [S, B, G, hpg + 2, d] layout element e belongs to: 0 q, 1 k, 2 v. */
static int qkv_part(int64_t e, int hpg, int d) {
    const int slot = (int)((e / d) % (hpg + 2));
    return slot < hpg ? 0 : slot == hpg ? 1 : 2;
}

/* relative L2 over the elements of one part of dqkv */
static double part_rel_l2(const float *x, const float *y, int64_t n, int hpg, int d, int part) {
    double num = 0, den = 0;
    for (int64_t e = 0; e < n; e++) {
        if (qkv_part(e, hpg, d) != part) continue;
        const double diff = (double)x[e] - (double)y[e];
        num += diff * diff;
        den += (double)y[e] * (double)y[e];
    }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}

static void check_l2(const char *what, const char *name, double err, double tol) {
    CHECK(err < tol, "%s: %s relative L2 %.3g >= %.3g", name, what, err, tol);
}

/* The backward's partial column sums parts [rows, ts] (device) against the column sums of
 * the reference dqkv [n, ts]: per column, summed over rows in double. */
static void colsums_check(const char *name, const float *parts, int64_t rows, const float *ref, int64_t n, int64_t ts,
                          double tol) {
    float *hp = malloc((size_t)(rows * ts) * sizeof(float)), *got = calloc((size_t)ts, sizeof(float)),
          *want = calloc((size_t)ts, sizeof(float));
    CU(cudaMemcpy(hp, parts, (size_t)(rows * ts) * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t c = 0; c < ts; c++) {
        double a = 0, b = 0;
        for (int64_t r = 0; r < rows; r++) a += hp[r * ts + c];
        for (int64_t t = 0; t < n; t++) b += ref[t * ts + c];
        got[c] = (float)a, want[c] = (float)b;
    }
    const double e = check_rel_l2(got, want, ts);
    printf("  %-50s dqkv column sums %.2e (%lld partial rows)\n", name, e, (long long)rows);
    check_l2("dqkv column sums", name, e, tol);
    free(hp), free(got), free(want);
}

static void run_case(const char *name, attn_shape sh, mc_dtype dt) {
    const double tol = dt == MC_F32 ? 1e-5 : 1e-2;
    const int64_t S = sh.S, B = sh.B;
    const int H = sh.heads, G = sh.groups, d = sh.d, hpg = H / G;
    const int64_t nqkv = S * B * (H + 2 * G) * d, nout = S * B * H * d, nlse = B * H * S;
    static uint64_t stream = 1;
    float *qkv = host_normals(nqkv, stream++, 1.0f), *dout = host_normals(nout, stream++, 1.0f);
    if (dt == MC_BF16) round_bf16(qkv, nqkv), round_bf16(dout, nout);
    int32_t *seg = NULL;
    if (sh.seg) {
        seg = malloc((size_t)(B * S) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            int32_t start = 0;
            for (int64_t i = 0; i < S; i++) {
                const uint32_t r = mc_philox_bits(77, (uint64_t)b, (uint64_t)i);
                if (sh.seg == 1) { /* documents of random length (mean ~ 90) */
                    if (i > 0 && r % 90 == 0) start = (int32_t)i;
                    seg[b * S + i] = start;
                } else { /* anything in [0, i], often near i */
                    const int64_t back = (r & 1) ? (int64_t)(r >> 1) % (i + 1) : (int64_t)(r >> 1) % 40;
                    seg[b * S + i] = (int32_t)(back > i ? 0 : i - back);
                }
            }
        }
    }
    mc_attn_desc desc = {.seq = S, .batch = B, .heads = H, .groups = G, .head_dim = d,
                         .softmax_scale = (float)(1.0 / sqrt((double)d)), .dropout = sh.dropout,
                         .seed = 0x5eed5eedULL, .stream = 4242};

    /* CPU reference in F32 */
    float *ref_out = malloc((size_t)nout * 4), *ref_lse = malloc((size_t)nlse * 4), *ref_dqkv = malloc((size_t)nqkv * 4);
    {
        mc_attn_desc hd = desc;
        if (seg) hd.seg_start = mc_tensor_2d(seg, MC_I32, B, S);
        mc_tensor Q = mc_tensor_1d(qkv, MC_F32, nqkv), O = mc_tensor_1d(ref_out, MC_F32, nout),
                  L = mc_tensor_1d(ref_lse, MC_F32, nlse), DO = mc_tensor_1d(dout, MC_F32, nout),
                  DQ = mc_tensor_1d(ref_dqkv, MC_F32, nqkv);
        mc_op_attention_fwd(cpu, &O, &L, &Q, &hd);
        mc_op_attention_bwd(cpu, &DQ, NULL, &DO, &Q, &O, &L, &hd);
    }

    /* GPU */
    const size_t es = dt == MC_BF16 ? 2 : 4;
    void *d_qkv = to_device(qkv, nqkv, dt), *d_dout = to_device(dout, nout, dt), *d_out, *d_dqkv;
    float *d_lse;
    int32_t *d_seg = NULL;
    CU(cudaMalloc(&d_out, (size_t)nout * es));
    CU(cudaMalloc((void **)&d_lse, (size_t)nlse * 4));
    CU(cudaMalloc(&d_dqkv, (size_t)nqkv * es));
    CU(cudaMemset(d_out, 0xff, (size_t)nout * es)); /* NaN: every element must be written */
    CU(cudaMemset(d_lse, 0xff, (size_t)nlse * 4));
    CU(cudaMemset(d_dqkv, 0xff, (size_t)nqkv * es));
    if (seg) {
        CU(cudaMalloc((void **)&d_seg, (size_t)(B * S) * 4));
        CU(cudaMemcpy(d_seg, seg, (size_t)(B * S) * 4, cudaMemcpyHostToDevice));
        desc.seg_start = mc_tensor_2d(d_seg, MC_I32, B, S);
    }
    desc.deterministic = false; /* the larger workspace (with the dQ accumulator) */
    const size_t ws_bytes = mc_cuda_flash_bwd_workspace(&desc, dt, true);
    void *ws = NULL;
    CU(cudaMalloc(&ws, ws_bytes));
    mc_tensor Q = mc_tensor_1d(d_qkv, dt, nqkv), O = mc_tensor_1d(d_out, dt, nout), L = mc_tensor_1d(d_lse, MC_F32, nlse),
              DO = mc_tensor_1d(d_dout, dt, nout), DQ = mc_tensor_1d(d_dqkv, dt, nqkv);
    mc_cuda_flash_fwd(0, &O, &L, &Q, &desc);
    CU(cudaDeviceSynchronize());
    float *out = to_host(d_out, nout, dt), *lse = to_host(d_lse, nlse, MC_F32), *dqkv = NULL;
    const double e_out = check_rel_l2(out, ref_out, nout), e_lse = check_rel_l2(lse, ref_lse, nlse);
    check_l2("out", name, e_out, tol);
    check_l2("lse", name, e_lse, tol);

    /* the backward takes the GPU's own out and lse (as in training): first with dQ summed by
     * atomics (the default), then the deterministic kernels */
    for (int det = 0; det < 2; det++) {
        desc.deterministic = det == 1;
        CU(cudaMemset(d_dqkv, 0xff, (size_t)nqkv * es)); /* NaN: every element must be written */
        const float *parts = NULL;
        const int64_t prows = mc_cuda_flash_bwd(0, ws, ws_bytes, &DQ, &DO, &Q, &O, &L, &desc, true, &parts, NULL);
        CU(cudaDeviceSynchronize());
        free(dqkv);
        dqkv = to_host(d_dqkv, nqkv, dt);
        if (prows > 0) colsums_check(name, parts, prows, ref_dqkv, S * B, (int64_t)(H + 2 * G) * d, tol);
        const double e_dq = part_rel_l2(dqkv, ref_dqkv, nqkv, hpg, d, 0),
                     e_dk = part_rel_l2(dqkv, ref_dqkv, nqkv, hpg, d, 1), e_dv = part_rel_l2(dqkv, ref_dqkv, nqkv, hpg, d, 2);
        char label[96];
        snprintf(label, sizeof label, "%s%s", name, det ? " (deterministic)" : "");
        printf("  %-50s out %.2e  lse %.2e  dq %.2e  dk %.2e  dv %.2e\n", label, e_out, e_lse, e_dq, e_dk, e_dv);
        if (S > 1) {
            check_l2("dq", label, e_dq, tol);
            check_l2("dk", label, e_dk, tol);
        } else { /* one key per row: P = 1, so dq = dk = 0 up to rounding (relative error means nothing) */
            double mx = 0;
            for (int64_t e = 0; e < nqkv; e++)
                if (qkv_part(e, hpg, d) != 2) mx = fmax(mx, fabs((double)dqkv[e]));
            CHECK(mx < 1e-4, "%s: dq/dk should vanish with one key, max |.| = %.3g", label, mx);
        }
        check_l2("dv", label, e_dv, tol);
    }

    /* determinism: a second deterministic backward (into a NaN-filled buffer) is bitwise equal */
    CU(cudaMemset(d_dqkv, 0xff, (size_t)nqkv * es));
    mc_cuda_flash_bwd(0, ws, ws_bytes, &DQ, &DO, &Q, &O, &L, &desc, false, NULL, NULL);
    CU(cudaDeviceSynchronize());
    void *again = malloc((size_t)nqkv * es), *first = malloc((size_t)nqkv * es);
    CU(cudaMemcpy(again, d_dqkv, (size_t)nqkv * es, cudaMemcpyDeviceToHost));
    if (dt == MC_BF16) {
        uint16_t *f = first;
        for (int64_t i = 0; i < nqkv; i++) f[i] = mc_f32_to_bf16(dqkv[i]);
    } else {
        memcpy(first, dqkv, (size_t)nqkv * 4);
    }
    CHECK(memcmp(first, again, (size_t)nqkv * es) == 0, "%s: two deterministic backward runs differ", name);

    free(first), free(again), free(out), free(lse), free(dqkv);
    free(ref_out), free(ref_lse), free(ref_dqkv), free(qkv), free(dout), free(seg);
    void *bufs[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, ws};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) CU(cudaFree(bufs[k]));
    if (d_seg) CU(cudaFree(d_seg));
}

/* ---- F32: the simple kernels, to 1e-5 ---- */
static void test_f32_d64_gqa(void) { run_case("f32 d64 gqa S200", (attn_shape){200, 2, 8, 2, 64, 0, 0}, MC_F32); }
static void test_f32_d32_mha_seg_dropout(void) {
    run_case("f32 d32 mha seg dropout S77", (attn_shape){77, 2, 2, 2, 32, 0.1f, 1}, MC_F32);
}
static void test_f32_d128_anyseg_dropout(void) {
    run_case("f32 d128 gqa anyseg dropout S130", (attn_shape){130, 2, 8, 2, 128, 0.1f, 2}, MC_F32);
}
static void test_f32_d16_odd(void) { run_case("f32 d16 S50", (attn_shape){50, 3, 3, 1, 16, 0, 0}, MC_F32); }
static void test_f32_d24_one_row(void) { run_case("f32 d24 S1", (attn_shape){1, 2, 2, 1, 24, 0.1f, 0}, MC_F32); }

/* ---- BF16: the tensor-core kernels (d 64, 128) and the simple fallback, to 1e-2 ---- */
static void test_bf16_d64_gqa(void) { run_case("bf16 d64 gqa S200", (attn_shape){200, 2, 8, 2, 64, 0, 0}, MC_BF16); }
static void test_bf16_d64_mha_seg_dropout(void) {
    run_case("bf16 d64 mha seg dropout S333", (attn_shape){333, 2, 4, 4, 64, 0.1f, 1}, MC_BF16);
}
static void test_bf16_d64_anyseg(void) {
    run_case("bf16 d64 gqa anyseg S257", (attn_shape){257, 3, 8, 2, 64, 0, 2}, MC_BF16);
}
static void test_bf16_d64_long(void) { run_case("bf16 d64 S1100", (attn_shape){1100, 1, 4, 1, 64, 0, 0}, MC_BF16); }
static void test_bf16_d128_gqa_anyseg_dropout(void) {
    run_case("bf16 d128 gqa anyseg dropout S200", (attn_shape){200, 2, 8, 2, 128, 0.1f, 2}, MC_BF16);
}
static void test_bf16_d128_exact_tiles(void) {
    run_case("bf16 d128 S256", (attn_shape){256, 1, 2, 1, 128, 0, 1}, MC_BF16);
}
static void test_bf16_d64_one_row(void) { run_case("bf16 d64 S1", (attn_shape){1, 2, 4, 2, 64, 0, 0}, MC_BF16); }
/* d 64 without dropout or seg_start runs the Hopper wgmma kernels on an H100/H200 (the
 * cases above with those, both backward modes: dQ by bulk adds, and deterministic, dQ by
 * its own wgmma pass); these add tile
 * edges (S a multiple of both tile sizes, and one past), MHA, and the same shapes on the
 * mma.sync kernels with MC_ATTN_WGMMA=0. */
static void test_bf16_d64_exact_tiles(void) {
    run_case("bf16 d64 gqa S384", (attn_shape){384, 1, 8, 2, 64, 0, 0}, MC_BF16);
}
static void test_bf16_d64_mha_tail(void) { run_case("bf16 d64 mha S513", (attn_shape){513, 2, 3, 3, 64, 0, 0}, MC_BF16); }
static void test_bf16_d64_mma_sync(void) {
    setenv("MC_ATTN_WGMMA", "0", 1);
    run_case("bf16 d64 gqa S200 mma.sync", (attn_shape){200, 2, 8, 2, 64, 0, 0}, MC_BF16);
    run_case("bf16 d64 mha S513 mma.sync", (attn_shape){513, 2, 3, 3, 64, 0, 0}, MC_BF16);
    unsetenv("MC_ATTN_WGMMA");
}
/* The wgmma backward's pipelined key-side kernel on tile edges and on the item counts that
 * exercise the pipeline's prologue and end (one item per block: S <= 64 with one head a
 * group; many: GQA with S > 11 tiles). */
static void test_bf16_d64_wgmma_bwd(void) {
    static const struct {
        const char *name;
        attn_shape sh;
    } cases[] = {
        {"gqa S200", {200, 2, 8, 2, 64, 0, 0}},  {"gqa S700", {700, 2, 8, 2, 64, 0, 0}},
        {"mha S513", {513, 2, 3, 3, 64, 0, 0}},  {"mha S50 (one item)", {50, 2, 2, 2, 64, 0, 0}},
        {"mha S65", {65, 3, 2, 2, 64, 0, 0}},    {"gqa S1", {1, 2, 4, 2, 64, 0, 0}},
        {"gqa S384", {384, 1, 8, 2, 64, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[80];
        snprintf(name, sizeof name, "bf16 d64 %s wgmma bwd", cases[c].name);
        run_case(name, cases[c].sh, MC_BF16);
    }
}
static void test_bf16_d32_fallback(void) {
    run_case("bf16 d32 fallback dropout S100", (attn_shape){100, 2, 4, 2, 32, 0.1f, 1}, MC_BF16);
}

/* ---- timing mode ---- */

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void bench_shape(const char *name, int64_t S, int64_t B, int H, int G, int d) {
    const int64_t nqkv = S * B * (H + 2 * G) * d, nout = S * B * H * d, nlse = B * H * S;
    float *h = host_normals(nqkv > nout ? nqkv : nout, 9, 1.0f);
    void *qkv = to_device(h, nqkv, MC_BF16), *dout = to_device(h, nout, MC_BF16), *out, *dqkv;
    float *lse;
    free(h);
    CU(cudaMalloc(&out, (size_t)nout * 2));
    CU(cudaMalloc((void **)&lse, (size_t)nlse * 4));
    CU(cudaMalloc(&dqkv, (size_t)nqkv * 2));
    mc_attn_desc desc = {.seq = S, .batch = B, .heads = H, .groups = G, .head_dim = d,
                         .softmax_scale = (float)(1.0 / sqrt((double)d)), .deterministic = false};
    const size_t ws_bytes = mc_cuda_flash_bwd_workspace(&desc, MC_BF16, true);
    void *ws;
    CU(cudaMalloc(&ws, ws_bytes));
    mc_tensor Q = mc_tensor_1d(qkv, MC_BF16, nqkv), O = mc_tensor_1d(out, MC_BF16, nout),
              L = mc_tensor_1d(lse, MC_F32, nlse), DO = mc_tensor_1d(dout, MC_BF16, nout),
              DQ = mc_tensor_1d(dqkv, MC_BF16, nqkv);
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    const double fwd_flops = 4.0 * (double)B * H * (double)S * (double)S * d / 2;
    /* 0: fwd, 1: bwd alone, 2: fwd + bwd; 3, 4: the same, deterministic; 5: bwd with dqkv's
     * column sums (the partial sums, without their final small reduction) */
    for (int mode = 0; mode < 6; mode++) {
        desc.deterministic = mode == 3 || mode == 4;
        const float *parts = NULL;
        float ms[20];
        for (int rep = -3; rep < 20; rep++) {
            CU(cudaEventRecord(e0, 0));
            if (mode == 0 || mode == 2 || mode == 4) mc_cuda_flash_fwd(0, &O, &L, &Q, &desc);
            if (mode != 0) mc_cuda_flash_bwd(0, ws, ws_bytes, &DQ, &DO, &Q, &O, &L, &desc, mode == 5, &parts, NULL);
            CU(cudaEventRecord(e1, 0));
            CU(cudaEventSynchronize(e1));
            if (rep >= 0) CU(cudaEventElapsedTime(&ms[rep], e0, e1));
        }
        qsort(ms, 20, sizeof(float), cmp_float);
        const double med = ms[10] * 1e-3;
        const double flops =
            mode == 0 ? fwd_flops : (mode == 1 || mode == 3 || mode == 5) ? 2.5 * fwd_flops : 3.5 * fwd_flops;
        static const char *const what[] = {"fwd", "bwd", "fwd+bwd", "bwd-det", "fwd+bwd-det", "bwd-colsum"};
        printf("BENCH attention %-8s %-11s B=%lld H=%d G=%d d=%d S=%lld: %8.3f ms  %6.1f TFLOP/s\n", name, what[mode],
               (long long)B, H, G, d, (long long)S, med * 1e3, flops / med / 1e12);
    }
    CU(cudaGetLastError());
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    void *bufs[] = {qkv, dout, out, lse, dqkv, ws};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) CU(cudaFree(bufs[k]));
}

static void run_tests(void) {
    RUN(test_f32_d64_gqa);
    RUN(test_f32_d32_mha_seg_dropout);
    RUN(test_f32_d128_anyseg_dropout);
    RUN(test_f32_d16_odd);
    RUN(test_f32_d24_one_row);
    RUN(test_bf16_d64_gqa);
    RUN(test_bf16_d64_mha_seg_dropout);
    RUN(test_bf16_d64_anyseg);
    RUN(test_bf16_d64_long);
    RUN(test_bf16_d128_gqa_anyseg_dropout);
    RUN(test_bf16_d128_exact_tiles);
    RUN(test_bf16_d64_one_row);
    RUN(test_bf16_d64_exact_tiles);
    RUN(test_bf16_d64_mha_tail);
    RUN(test_bf16_d64_mma_sync);
    RUN(test_bf16_d64_wgmma_bwd);
    RUN(test_bf16_d32_fallback);
}

int main(void) {
    if (!mc_backend_cuda_available()) check_skip("no CUDA GPU");
    const char *bench = getenv("MC_BENCH_ATTN");
    const bool timing = bench && bench[0] && strcmp(bench, "0") != 0, timing_only = bench && strcmp(bench, "only") == 0;
    if (!timing_only) {
        cpu = mc_backend_cpu_create();
        run_tests();
        cpu->destroy(cpu);
    }
    if (timing) {
        bench_shape("llama", 2048, 4, 32, 8, 64);
        bench_shape("gpt2", 1024, 64, 12, 12, 64);
        /* the GPT-2 shape's tokens in longer sequences, and its S with grouped heads: how
         * much of the GPT-2 backward is per-block cost (few items a 128-key block) */
        bench_shape("gpt2-s2k", 2048, 32, 12, 12, 64);
        bench_shape("gpt2-s4k", 4096, 16, 12, 12, 64);
        bench_shape("gpt2-g3", 1024, 64, 12, 3, 64);
        bench_shape("d128", 2048, 4, 16, 4, 128);
    }
    return check_summary();
}

#else /* no CUDA headers: this build has no CUDA backend */

int main(void) {
    if (!mc_backend_cuda_available()) check_skip("no CUDA GPU (built without CUDA)");
    check_skip("built without the CUDA headers");
    return 0;
}

#endif
