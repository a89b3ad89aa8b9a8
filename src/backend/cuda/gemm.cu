/* gemm.cu: general GEMM and the linear layer (forward and backward) through cuBLASLt, the
 * bias-gradient column sums, and a plain tiled kernel as the fallback for shapes or
 * alignments cuBLASLt has no algorithm for.
 *
 * Row-major through a column-major library: C[m,n] = op(A) op(B) row-major is, seen
 * column-major, C^T[n,m] = op(B)^T op(A)^T, so cuBLASLt's A is our B and its B our A, with
 * the same transposes, and every leading dimension is the row length of the row-major
 * matrix.
 *
 * Precision: CUBLAS_COMPUTE_32F everywhere (never TF32: the F32 path must match the CPU to
 * 1e-5), F32 scale type. BF16 and F16 inputs write their own dtype (y, dx) or accumulate
 * with beta = 1 into F32 (dW += into Megatron's main_grad).
 *
 * Descriptor cache: matmul/layout descriptors and the heuristic's algorithm are made once
 * per distinct (m, n, k, transposes, dtypes, epilogue, bias and aux operands, beta != 0,
 * pointer alignments) and kept in a small LRU table; the steady state makes no heuristic
 * query. The pointer alignments are part of the key because parameters live at arbitrary
 * element offsets of one flat buffer, and an algorithm picked for 256-byte aligned
 * operands may not run on 2-byte aligned ones; the heuristic reads the bias and aux
 * alignments from the pointers set in the descriptor.
 *
 * Epilogues beyond BIAS (GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADB) are requested through
 * mc_cuda_matmul_epilogue, which never aborts for want of an algorithm: it reports false
 * and the caller runs the unfused kernels (cuBLASLt supports these epilogues for some
 * dtype, layout and alignment combinations only). */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GEMM_CACHE_SIZE = 256, GEMM_CANDIDATES = 8 };

typedef struct gemm_key {
    int64_t m, n, k;
    int64_t aux_ld; /* 0: no aux operand */
    int32_t ta, tb;
    int32_t ab_dt, c_dt, bias_dt; /* bias_dt -1: no bias (or bias gradient) operand */
    int32_t epilogue;             /* a cublasLtEpilogue_t */
    int32_t beta_nonzero;
    uint32_t al_a, al_b, al_c, al_bias, al_aux;
    uint32_t al_cin; /* the C input's alignment (C is also D, the output, except in mc_cuda_matmul_add) */
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    bool used, has_algo;
    uint64_t last_use;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    /* With autotuning, the heuristic's candidates until the first call times them (then 1) */
    cublasLtMatmulAlgo_t cand[GEMM_CANDIDATES];
    int ncand;
} gemm_entry;

struct mc_cuda_gemm_cache {
    gemm_entry e[GEMM_CACHE_SIZE];
    uint64_t tick;
    bool warned_fallback;
    int32_t warned_epilogues[8]; /* epilogues already reported as unavailable (0: free slot) */
};

static void entry_release(gemm_entry *e) {
    if (e->op) cublasLtMatmulDescDestroy(e->op);
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->lc) cublasLtMatrixLayoutDestroy(e->lc);
    memset(e, 0, sizeof *e);
}

void mc_cuda_gemm_cache_destroy(mc_cuda_state *st) {
    if (!st->gemm) return;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++)
        if (st->gemm->e[i].used) entry_release(&st->gemm->e[i]);
    free(st->gemm);
    st->gemm = NULL;
}

/* Largest power of two (at most 256) dividing the address. */
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}

static cudaDataType_t cuda_type(mc_dtype dt) {
    switch (dt) {
    case MC_F32: return CUDA_R_32F;
    case MC_BF16: return CUDA_R_16BF;
    case MC_F16: return CUDA_R_16F;
    default: mc_assert_fail("dtype", __FILE__, __LINE__, "cuda gemm: dtype %s has no cuBLAS type", mc_dtype_name(dt));
    }
}

/* ---- fallback: a tiled kernel (F32 accumulation), for correctness, not speed ---- */

enum { FB_TILE = 16 };

template <typename TA, typename TC>
__global__ void gemm_fallback_kernel(TC *C, const TA *A, const TA *B, const TA *bias, int64_t m, int64_t n, int64_t k,
                                     bool ta, bool tb, float alpha, float beta) {
    __shared__ float As[FB_TILE][FB_TILE + 1], Bs[FB_TILE][FB_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * FB_TILE + ty, col = (int64_t)blockIdx.x * FB_TILE + tx;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += FB_TILE) {
        int64_t ka = k0 + tx, kb = k0 + ty;
        /* op(A)(i, kk) = ta ? A[kk, i] : A[i, kk];  op(B)(kk, j) = tb ? B[j, kk] : B[kk, j] */
        As[ty][tx] = (row < m && ka < k) ? mc_ld(ta ? A + ka * m + row : A + row * k + ka) : 0.0f;
        Bs[ty][tx] = (col < n && kb < k) ? mc_ld(tb ? B + col * k + kb : B + kb * n + col) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < FB_TILE; kk++) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (row < m && col < n) {
        float v = alpha * acc;
        if (beta != 0.0f) v += beta * mc_ld(C + row * n + col);
        if (bias) v += mc_ld(bias + col);
        mc_st(C + row * n + col, v);
    }
}

template <typename TA, typename TC>
static void launch_fallback(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                            const void *B, bool tb, void *C, float alpha, float beta, const void *bias) {
    MC_ASSERT((m + FB_TILE - 1) / FB_TILE <= 65535, "cuda %s: fallback gemm: m = %lld rows is too many", op, (long long)m);
    dim3 block(FB_TILE, FB_TILE), grid((unsigned)((n + FB_TILE - 1) / FB_TILE), (unsigned)((m + FB_TILE - 1) / FB_TILE));
    gemm_fallback_kernel<TA, TC><<<grid, block, 0, st->stream>>>((TC *)C, (const TA *)A, (const TA *)B,
                                                                 (const TA *)bias, m, n, k, ta, tb, alpha, beta);
    MC_CUDA_LAUNCHED(st, op);
}

static void fallback_gemm(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                          const void *B, bool tb, mc_dtype ab_dt, void *C, mc_dtype c_dt, float alpha, float beta,
                          const void *bias) {
    if (ab_dt == MC_F32 && c_dt == MC_F32)
        launch_fallback<float, float>(st, op, m, n, k, A, ta, B, tb, C, alpha, beta, bias);
    else if (ab_dt == MC_BF16 && c_dt == MC_BF16)
        launch_fallback<__nv_bfloat16, __nv_bfloat16>(st, op, m, n, k, A, ta, B, tb, C, alpha, beta, bias);
    else if (ab_dt == MC_BF16 && c_dt == MC_F32)
        launch_fallback<__nv_bfloat16, float>(st, op, m, n, k, A, ta, B, tb, C, alpha, beta, bias);
    else if (ab_dt == MC_F16 && c_dt == MC_F16)
        launch_fallback<__half, __half>(st, op, m, n, k, A, ta, B, tb, C, alpha, beta, bias);
    else if (ab_dt == MC_F16 && c_dt == MC_F32)
        launch_fallback<__half, float>(st, op, m, n, k, A, ta, B, tb, C, alpha, beta, bias);
    else
        mc_assert_fail("dtypes", __FILE__, __LINE__, "cuda %s: no gemm for inputs %s, output %s", op,
                       mc_dtype_name(ab_dt), mc_dtype_name(c_dt));
}

/* ---- cuBLASLt ---- */

static gemm_entry *cache_lookup(mc_cuda_state *st, const gemm_key *key) {
    if (!st->gemm) st->gemm = (struct mc_cuda_gemm_cache *)mc_xcalloc(1, sizeof(struct mc_cuda_gemm_cache));
    struct mc_cuda_gemm_cache *c = st->gemm;
    c->tick++;
    gemm_entry *victim = &c->e[0];
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        gemm_entry *e = &c->e[i];
        if (e->used && memcmp(&e->key, key, sizeof *key) == 0) {
            e->last_use = c->tick;
            return e;
        }
        if (!e->used) {
            if (victim->used) victim = e;
        } else if (victim->used && e->last_use < victim->last_use) {
            victim = e;
        }
    }
    if (victim->used) entry_release(victim);
    return victim; /* unused now: the caller builds it */
}

/* Time the heuristic's first GEMM_CANDIDATES algorithms on each GEMM shape's first call and
 * keep the fastest, instead of taking the heuristic's first (0.3-0.5% of the 1.5B and GPT-2
 * steps on an H200, bench/RESULTS.md). Only for beta = 0 (the timing runs rewrite the
 * output with the same values; a beta != 0 product, such as the weight gradients
 * accumulating into main_grad, would add itself up again). The residual-add GEMMs (their C
 * read apart from the output) could be timed too, and their tuned algorithm ran in half
 * the time, yet the steps did not speed up (the GPU runs at its power cap; bench/RESULTS.md),
 * so they keep the heuristic's first. The choice depends on timings, so
 * two runs may pick differently and differ at rounding level: off when the backend is
 * reproducible (--deterministic-mode), and with MC_GEMM_AUTOTUNE=0. */
static bool gemm_autotune_wanted(const mc_cuda_state *st, const gemm_key *key) {
    const char *e = getenv("MC_GEMM_AUTOTUNE"); /* read per new entry: tests switch it */
    return !st->be->reproducible && !(e && strcmp(e, "0") == 0) && !key->beta_nonzero;
}

/* Builds the descriptors and picks the algorithm for `key` (bias and aux pointers set,
 * since the heuristic reads their alignment). Returns the heuristic's status. */
static cublasStatus_t entry_build(mc_cuda_state *st, gemm_entry *e, const gemm_key *key, const void *bias,
                                  const void *aux, const char *op) {
    e->key = *key;
    e->used = true;
    e->last_use = st->gemm->tick;
    const int64_t m = key->m, n = key->n, k = key->k;
    const bool ta = key->ta != 0, tb = key->tb != 0;
    cudaDataType_t abt = cuda_type((mc_dtype)key->ab_dt), ct = cuda_type((mc_dtype)key->c_dt);
    MC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), op);
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), op);
    MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), op);
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
    if (key->bias_dt >= 0) {
        int32_t bt = (int32_t)cuda_type((mc_dtype)key->bias_dt);
        MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), op);
        MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
    }
    /* The GELU input matrix has D's layout and, left unset, D's dtype (the only one the
     * 16-bit and F32 kernels take); only its leading dimension is ours to give. */
    if (key->aux_ld > 0) {
        int64_t ld = key->aux_ld;
        MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                        op);
        MC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), op);
    }
    /* column-major views: Lt A = our B, Lt B = our A, Lt C = our C transposed */
    uint64_t la_rows = tb ? (uint64_t)k : (uint64_t)n, la_cols = tb ? (uint64_t)n : (uint64_t)k;
    uint64_t lb_rows = ta ? (uint64_t)m : (uint64_t)k, lb_cols = ta ? (uint64_t)k : (uint64_t)m;
    MC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->la, abt, la_rows, la_cols, (int64_t)la_rows), op);
    MC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->lb, abt, lb_rows, lb_cols, (int64_t)lb_rows), op);
    MC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->lc, ct, (uint64_t)n, (uint64_t)m, n), op);

    cublasLtMatmulPreference_t pref;
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), op);
    uint64_t ws = st->lt_workspace_bytes;
    uint32_t al_a = key->al_b, al_b = key->al_a, al_c = key->al_cin, al_d = key->al_c; /* Lt's A is our B */
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), op);
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a), op);
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b), op);
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c), op);
    MC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d), op);
    cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES];
    memset(res, 0, sizeof res);
    int nres = 0;
    const int want = gemm_autotune_wanted(st, key) ? GEMM_CANDIDATES : 1;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, e->op, e->la, e->lb, e->lc, e->lc, pref, want, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    e->ncand = 0;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < nres; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= st->lt_workspace_bytes)
            e->cand[e->ncand++] = res[i].algo;
    e->has_algo = e->ncand > 0;
    if (e->has_algo) e->algo = e->cand[0];
    return s;
}

static const char *epilogue_name(int32_t epi) {
    switch (epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "other";
    }
}

/* One line the first time a plain GEMM has no algorithm, and the first time each epilogue
 * beyond BIAS has none (the op then runs unfused: slower, still correct). */
static void warn_no_algo(mc_cuda_state *st, const gemm_key *key, const char *op, cublasStatus_t s) {
    struct mc_cuda_gemm_cache *c = st->gemm;
    bool fused = key->epilogue != CUBLASLT_EPILOGUE_DEFAULT && key->epilogue != CUBLASLT_EPILOGUE_BIAS;
    if (!fused) {
        if (c->warned_fallback) return;
        c->warned_fallback = true;
    } else {
        int slot = 0;
        while (slot < 8 && c->warned_epilogues[slot] != 0 && c->warned_epilogues[slot] != key->epilogue) slot++;
        if (slot == 8 || c->warned_epilogues[slot] == key->epilogue) return;
        c->warned_epilogues[slot] = key->epilogue;
    }
    fprintf(stderr,
            "megatron-c: %s: cuda %s: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld (%s%s, %s -> %s, "
            "alignments %u/%u/%u, epilogue %s, bias %s%s, aux ld %lld) (%s); %s\n",
            fused ? "note" : "warning", op, (long long)key->m, (long long)key->n, (long long)key->k,
            key->ta ? "T" : "N", key->tb ? "T" : "N", mc_dtype_name((mc_dtype)key->ab_dt),
            mc_dtype_name((mc_dtype)key->c_dt), key->al_a, key->al_b, key->al_c, epilogue_name(key->epilogue),
            key->bias_dt >= 0 ? mc_dtype_name((mc_dtype)key->bias_dt) : "none",
            key->bias_dt >= 0 && key->al_bias < 16 ? " (unaligned)" : "", (long long)key->aux_ld,
            cublasLtGetStatusString(s),
            fused ? "running this epilogue's work as separate kernels (reported once per epilogue)"
                  : "operands aligned to < 16 bytes are staged through aligned scratch, and the slow fallback "
                    "kernel runs when that does not help");
}

static void key_init(gemm_key *key, int64_t m, int64_t n, int64_t k, const void *A, bool ta, const void *B, bool tb,
                     mc_dtype ab_dt, const void *C, mc_dtype c_dt, float beta) {
    memset(key, 0, sizeof *key); /* padding too: keys are compared with memcmp */
    key->m = m, key->n = n, key->k = k;
    key->ta = ta, key->tb = tb;
    key->ab_dt = ab_dt, key->c_dt = c_dt, key->bias_dt = -1;
    key->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    key->beta_nonzero = beta != 0.0f;
    key->al_a = align_of(A), key->al_b = align_of(B), key->al_c = align_of(C);
    key->al_cin = key->al_c;
}

/* The cached entry for key, built on first use (its heuristic miss reported once). */
static gemm_entry *entry_for(mc_cuda_state *st, const gemm_key *key, const void *bias, const void *aux,
                             const char *op) {
    gemm_entry *e = cache_lookup(st, key);
    if (!e->used) {
        cublasStatus_t s = entry_build(st, e, key, bias, aux, op);
        if (!e->has_algo) warn_no_algo(st, key, op, s);
    }
    return e;
}

/* Times each candidate of a fresh entry (one warm-up, then 3 runs between CUDA events, on
 * the backend's stream) and keeps the fastest; a candidate cublasLtMatmul refuses is
 * skipped. Every run computes this call's product (beta = 0), so the output stays right. */
static void entry_tune(mc_cuda_state *st, gemm_entry *e, const void *A, const void *B, void *C, float alpha,
                       float beta, const char *op) {
    cudaEvent_t t0, t1;
    MC_CUDA_CHECK(cudaEventCreate(&t0), op);
    MC_CUDA_CHECK(cudaEventCreate(&t1), op);
    float best = 0.0f;
    int best_i = 0;
    bool any = false;
    for (int i = 0; i < e->ncand; i++) {
        const cublasLtMatmulAlgo_t *algo = &e->cand[i];
        if (cublasLtMatmul(st->lt, e->op, &alpha, B, e->la, A, e->lb, &beta, C, e->lc, C, e->lc, algo,
                           st->lt_workspace, st->lt_workspace_bytes, st->stream) != CUBLAS_STATUS_SUCCESS)
            continue;
        MC_CUDA_CHECK(cudaEventRecord(t0, st->stream), op);
        for (int r = 0; r < 3; r++)
            MC_CUBLAS_CHECK(cublasLtMatmul(st->lt, e->op, &alpha, B, e->la, A, e->lb, &beta, C, e->lc, C, e->lc,
                                           algo, st->lt_workspace, st->lt_workspace_bytes, st->stream),
                            op);
        MC_CUDA_CHECK(cudaEventRecord(t1, st->stream), op);
        MC_CUDA_CHECK(cudaEventSynchronize(t1), op);
        float ms = 0.0f;
        MC_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1), op);
        if (!any || ms < best) best = ms, best_i = i, any = true;
    }
    MC_CUDA_CHECK(cudaEventDestroy(t0), op);
    MC_CUDA_CHECK(cudaEventDestroy(t1), op);
    e->algo = e->cand[best_i];
    e->ncand = 1;
}

static uint32_t algo_attr(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0; /* every attribute read here is 32 bits wide */
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS) return 0;
    return v;
}

/* The profile's name for an entry: our row-major shape and operands, then cuBLASLt's
 * algorithm (id, tile, split-K count, reduction scheme, stages). */
static void entry_label(const gemm_entry *e, char *buf, size_t len) {
    const gemm_key *k = &e->key;
    snprintf(buf, len, "m=%lld n=%lld k=%lld %s%s %s->%s %s%s | algo %u tile %u splitK %u red %u stages %u",
             (long long)k->m, (long long)k->n, (long long)k->k, k->ta ? "T" : "N", k->tb ? "T" : "N",
             mc_dtype_name((mc_dtype)k->ab_dt), mc_dtype_name((mc_dtype)k->c_dt), epilogue_name(k->epilogue),
             k->beta_nonzero ? " beta=1" : "", algo_attr(&e->algo, CUBLASLT_ALGO_CONFIG_ID),
             algo_attr(&e->algo, CUBLASLT_ALGO_CONFIG_TILE_ID), algo_attr(&e->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
             algo_attr(&e->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
             algo_attr(&e->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
}

/* Runs a built entry with this call's pointers (the descriptor keeps the last ones set);
 * C is read (beta != 0) from Cin and written to C. */
static cublasStatus_t entry_run(mc_cuda_state *st, gemm_entry *e, const void *A, const void *B, void *C,
                                const void *Cin, float alpha, float beta, const void *bias, const void *aux) {
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (bias) s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s == CUBLAS_STATUS_SUCCESS && aux)
        s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    /* a captured call is recorded, not run: nothing to time (the first call outside a
     * capture tunes the entry; the profile counts calls made op by op) */
    if (e->ncand > 1 && !st->capturing) entry_tune(st, e, A, B, C, alpha, beta, "gemm autotune");
    int slot = st->capturing ? -1 : mc_cuda_gemm_prof_start(st);
    s = cublasLtMatmul(st->lt, e->op, &alpha, B, e->la, A, e->lb, &beta, Cin, e->lc, C, e->lc, &e->algo,
                       st->lt_workspace, st->lt_workspace_bytes, st->stream);
    if (slot >= 0) {
        char label[200];
        entry_label(e, label, sizeof label);
        mc_cuda_gemm_prof_stop(st, slot, label, 2.0 * (double)e->key.m * (double)e->key.n * (double)e->key.k);
    }
    return s;
}

/* C[m,n] = alpha op(A) op(B) + beta C (+ bias[n] broadcast over rows), row-major; m, n, k > 0.
 * A, B of dtype ab_dt; C of c_dt; bias (optional) of ab_dt, 16-byte aligned.
 * When cuBLASLt has no algorithm for the operands' alignments, the operands aligned to
 * less than 16 bytes are staged through aligned scratch (a copy is O(size) next to the
 * product's O(m n k)); only if that fails too does the plain kernel run. */
void mc_cuda_matmul(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                    const void *B, bool tb, mc_dtype ab_dt, void *C, mc_dtype c_dt, float alpha, float beta,
                    const void *bias) {
    gemm_key key;
    key_init(&key, m, n, k, A, ta, B, tb, ab_dt, C, c_dt, beta);
    if (bias) {
        key.epilogue = CUBLASLT_EPILOGUE_BIAS;
        key.bias_dt = ab_dt;
        key.al_bias = align_of(bias);
    }
    gemm_entry *e = entry_for(st, &key, bias, NULL, op);
    if (e->has_algo) {
        MC_CUBLAS_CHECK(entry_run(st, e, A, B, C, C, alpha, beta, bias, NULL), op);
        MC_CUDA_LAUNCHED(st, op);
        return;
    }
    bool sa = key.al_a < 16, sb = key.al_b < 16, sc = key.al_c < 16;
    if (!(sa || sb || sc)) {
        fallback_gemm(st, op, m, n, k, A, ta, B, tb, ab_dt, C, c_dt, alpha, beta, bias);
        return;
    }
    const size_t es = mc_dtype_size(ab_dt), ces = mc_dtype_size(c_dt);
    const size_t a_bytes = (size_t)(m * k) * es, b_bytes = (size_t)(k * n) * es, c_bytes = (size_t)(m * n) * ces;
    const size_t a_room = sa ? (a_bytes + 255) & ~(size_t)255 : 0, b_room = sb ? (b_bytes + 255) & ~(size_t)255 : 0;
    char *ws = (char *)mc_cuda_workspace(st, a_room + b_room + (sc ? c_bytes : 0), op);
    const void *A2 = A, *B2 = B;
    void *C2 = C;
    if (sa) {
        MC_CUDA_CHECK(cudaMemcpyAsync(ws, A, a_bytes, cudaMemcpyDeviceToDevice, st->stream), op);
        A2 = ws;
    }
    if (sb) {
        MC_CUDA_CHECK(cudaMemcpyAsync(ws + a_room, B, b_bytes, cudaMemcpyDeviceToDevice, st->stream), op);
        B2 = ws + a_room;
    }
    if (sc) {
        C2 = ws + a_room + b_room;
        if (beta != 0.0f) MC_CUDA_CHECK(cudaMemcpyAsync(C2, C, c_bytes, cudaMemcpyDeviceToDevice, st->stream), op);
    }
    mc_cuda_matmul(st, op, m, n, k, A2, ta, B2, tb, ab_dt, C2, c_dt, alpha, beta, bias); /* staged: aligned to 256 */
    if (sc) MC_CUDA_CHECK(cudaMemcpyAsync(C, C2, c_bytes, cudaMemcpyDeviceToDevice, st->stream), op);
}

/* Runs the cached entry for `key` (built on first use), or false when cuBLASLt has no
 * algorithm for it. The heuristic can offer an algorithm that cublasLtMatmul then refuses
 * for an epilogue or C operand; that is one more "not available here", not an error. */
static bool entry_try(mc_cuda_state *st, const gemm_key *key, const char *op, const void *A, const void *B, void *D,
                      const void *Cin, float alpha, float beta, const void *bias, const void *aux) {
    gemm_entry *e = entry_for(st, key, bias, aux, op);
    if (!e->has_algo) return false;
    cublasStatus_t s = entry_run(st, e, A, B, D, Cin, alpha, beta, bias, aux);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
        e->has_algo = false;
        warn_no_algo(st, key, op, s);
        return false;
    }
    MC_CUBLAS_CHECK(s, op);
    MC_CUDA_LAUNCHED(st, op);
    return true;
}

bool mc_cuda_matmul_epilogue(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                             const void *B, bool tb, mc_dtype ab_dt, void *C, mc_dtype c_dt, float alpha, float beta,
                             const mc_cuda_epilogue *epi) {
    gemm_key key;
    key_init(&key, m, n, k, A, ta, B, tb, ab_dt, C, c_dt, beta);
    key.epilogue = epi->kind;
    if (epi->bias) {
        key.bias_dt = epi->bias_dt;
        key.al_bias = align_of(epi->bias);
    }
    if (epi->aux) {
        key.aux_ld = epi->aux_ld;
        key.al_aux = align_of(epi->aux);
    }
    return entry_try(st, &key, op, A, B, C, C, alpha, beta, epi->bias, epi->aux);
}

bool mc_cuda_matmul_add(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                        const void *B, bool tb, mc_dtype ab_dt, void *D, const void *Cin, mc_dtype c_dt,
                        const void *bias) {
    gemm_key key;
    key_init(&key, m, n, k, A, ta, B, tb, ab_dt, D, c_dt, 1.0f);
    key.al_cin = align_of(Cin);
    if (bias) {
        key.epilogue = CUBLASLT_EPILOGUE_BIAS;
        key.bias_dt = ab_dt;
        key.al_bias = align_of(bias);
    }
    return entry_try(st, &key, op, A, B, D, Cin, 1.0f, 1.0f, bias, NULL);
}

/* ---- small kernels: C *= beta, bias broadcast, column sums ---- */

template <typename T>
__global__ void scale_or_zero_kernel(T *c, int64_t count, float beta) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        mc_st(c + i, beta == 0.0f ? 0.0f : mc_ld(c + i) * beta);
}

static void scale_or_zero(mc_cuda_state *st, const char *op, void *c, mc_dtype dt, int64_t count, float beta) {
    if (count <= 0) return;
    unsigned grid = mc_cuda_grid(st, count, 256);
    MC_CUDA_DISPATCH_FLOAT(dt, op, T, scale_or_zero_kernel<T><<<grid, 256, 0, st->stream>>>((T *)c, count, beta));
    MC_CUDA_LAUNCHED(st, op);
}

/* y[r, c] = bias[c] */
template <typename T>
__global__ void bias_fill_kernel(T *y, const T *bias, int64_t rows, int64_t cols) {
    int64_t total = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bias[i % cols];
}

/* part[chunk, c] = sum over rows [chunk*rpc, (chunk+1)*rpc) of dy[r, c]: 32 columns x 8 row
 * lanes per block, the lanes' sums added in lane order. */
template <typename T>
__global__ void colsum_partial_kernel(float *part, const T *dy, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
    __shared__ float sh[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t col = (int64_t)blockIdx.x * 32 + tx, chunk = blockIdx.y;
    const int64_t r0 = chunk * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float s = 0.0f;
    if (col < cols)
        for (int64_t r = r0 + ty; r < r1; r += 8) s += mc_ld(dy + r * cols + col);
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < cols) {
        float t = sh[0][tx];
#pragma unroll
        for (int j = 1; j < 8; j++) t += sh[j][tx];
        part[chunk * cols + col] = t;
    }
}

/* db[c] += sum over chunks of part[chunk, c]: block (32 columns x 32 lanes); lane ty sums
 * chunks ty, ty + 32, ... in double, then the lanes are added in order (deterministic). */
__global__ void colsum_finish_kernel(float *db, const float *part, int64_t nchunks, int64_t cols) {
    __shared__ double sh[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t col = (int64_t)blockIdx.x * 32 + tx;
    double s = 0.0;
    if (col < cols)
        for (int64_t ch = ty; ch < nchunks; ch += 32) s += (double)part[ch * cols + col];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < cols) {
        double t = 0.0;
        for (int j = 0; j < 32; j++) t += sh[j][tx];
        db[col] += (float)t;
    }
}

/* db[cols] (F32) += column sums of dy[rows, cols]; deterministic (fixed chunking). */
void mc_cuda_colsum_add(mc_cuda_state *st, const char *op, float *db, const void *dy, mc_dtype dt, int64_t rows,
                        int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    int64_t colblocks = (cols + 31) / 32;
    int64_t target = (int64_t)st->sm_count * 8; /* blocks of 256 threads: about one full wave */
    int64_t nchunks = (target + colblocks - 1) / colblocks;
    int64_t max_chunks = (rows + 7) / 8; /* at least 8 rows (one per lane) per chunk */
    if (nchunks > max_chunks) nchunks = max_chunks;
    if (nchunks > 4096) nchunks = 4096;
    if (nchunks < 1) nchunks = 1;
    int64_t rpc = (rows + nchunks - 1) / nchunks;
    nchunks = (rows + rpc - 1) / rpc;
    MC_ASSERT(colblocks <= 0x7fffffff, "cuda %s: %lld columns", op, (long long)cols);
    float *part = (float *)mc_cuda_workspace(st, (size_t)(nchunks * cols) * sizeof(float), op);
    dim3 block(32, 8), grid((unsigned)colblocks, (unsigned)nchunks);
    MC_CUDA_DISPATCH_FLOAT(dt, op, T,
                           colsum_partial_kernel<T><<<grid, block, 0, st->stream>>>(part, (const T *)dy, rows, cols,
                                                                                    rpc));
    MC_CUDA_LAUNCHED(st, op);
    mc_cuda_colsum_parts_add(st, op, db, part, nchunks, cols);
}

void mc_cuda_colsum_parts_add(mc_cuda_state *st, const char *op, float *db, const float *part, int64_t nparts,
                              int64_t cols) {
    if (nparts <= 0 || cols <= 0) return;
    MC_ASSERT((cols + 31) / 32 <= 0x7fffffff, "cuda %s: %lld columns", op, (long long)cols);
    colsum_finish_kernel<<<(unsigned)((cols + 31) / 32), dim3(32, 32), 0, st->stream>>>(db, part, nparts, cols);
    MC_CUDA_LAUNCHED(st, op);
}

/* ---- entries ---- */

void mc_cuda_gemm(mc_backend *be, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                  float alpha, float beta) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "gemm";
    int64_t a_rows = mc_cuda_rows(a), a_cols = mc_cuda_cols(a);
    int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols, n = trans_b ? mc_cuda_rows(b) : mc_cuda_cols(b);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        scale_or_zero(st, op, c->data, c->dtype, m * n, beta);
        return;
    }
    mc_cuda_matmul(st, op, m, n, k, a->data, trans_a, b->data, trans_b, a->dtype, c->data, c->dtype, alpha, beta, NULL);
}

void mc_cuda_linear_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "linear_fwd";
    int64_t n = mc_cuda_rows(x), in = mc_cuda_cols(x), out = mc_cuda_rows(w);
    bool bias = mc_tensor_present(b);
    if (n == 0 || out == 0) return;
    if (in > 0 && mc_cuda_gemv_fits(x, w)) { /* a few rows (decode): a matrix-vector product */
        mc_cuda_gemv(be, y, x, w, b, NULL);
        return;
    }
    /* The BIAS epilogue needs an aligned bias; otherwise the bias is written into y first
     * and the product accumulated onto it (beta = 1), as the CPU backend does. */
    bool epilogue = bias && in > 0 && mc_cuda_aligned16(b->data);
    if (bias && !epilogue) {
        unsigned grid = mc_cuda_grid(st, n * out, 256);
        MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                               bias_fill_kernel<T><<<grid, 256, 0, st->stream>>>((T *)y->data, (const T *)b->data, n,
                                                                                 out));
        MC_CUDA_LAUNCHED(st, op);
    }
    if (in == 0) {
        if (!bias) scale_or_zero(st, op, y->data, y->dtype, n * out, 0.0f);
        return;
    }
    /* y[n, out] = x[n, in] w[out, in]^T (+ b) */
    mc_cuda_matmul(st, op, n, out, in, x->data, false, w->data, true, x->dtype, y->data, y->dtype, 1.0f,
                   bias && !epilogue ? 1.0f : 0.0f, epilogue ? b->data : NULL);
}

/* y = residual + x w^T (+ b): one GEMM reading the residual as its C input and writing y
 * (D), or linear_fwd into y and then the add (y = residual + y, the unfused ops' exact
 * order) where cuBLASLt has no algorithm for the operands or the bias is unaligned. */
void mc_cuda_linear_residual_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                                 const mc_tensor *w, const mc_tensor *b) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "linear_residual_fwd";
    int64_t n = mc_cuda_rows(x), in = mc_cuda_cols(x), out = mc_cuda_rows(w);
    bool bias = mc_tensor_present(b);
    if (n == 0 || out == 0) return;
    if (in > 0 && mc_cuda_gemv_fits(x, w)) {
        mc_cuda_gemv(be, y, x, w, b, residual);
        return;
    }
    if (in > 0 && (!bias || mc_cuda_aligned16(b->data)) &&
        mc_cuda_matmul_add(st, op, n, out, in, x->data, false, w->data, true, x->dtype, y->data, residual->data,
                           y->dtype, bias ? b->data : NULL))
        return;
    mc_cuda_linear_fwd(be, y, x, w, b);
    mc_cuda_dropout_add_fwd(be, y, residual, y, 0.0f, 0, 0);
}

/* dw[out, in] += dy^T x and db[out] += sum_rows dy in one GEMM, or false (nothing done) when
 * cuBLASLt has no algorithm for it. BGRADB sums cuBLASLt's op(B) over the GEMM's k: its B
 * is our dy (column-major [out, n], taken transposed, so op(B) is [k = n tokens, out]), and
 * that sum is the bias gradient. (BGRADA would sum our x; BGRADB needs op(B) = T, as here.)
 * The epilogue writes the sums, in the output's dtype (F32), and cannot add them, so they
 * go to scratch and are added to db. */
static bool wgrad_bgrad(mc_backend *be, const char *op, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                        const mc_tensor *x, int64_t n, int64_t in, int64_t out, bool accumulate) {
    mc_cuda_state *st = mc_cuda_st(be);
    /* the epilogue writes the column sums: straight into db, or beside it to be added */
    float *sums = accumulate ? (float *)mc_cuda_workspace(st, (size_t)out * sizeof(float), op) : (float *)db->data;
    mc_cuda_epilogue epi = {CUBLASLT_EPILOGUE_BGRADB, sums, MC_F32, NULL, 0};
    if (!mc_cuda_matmul_epilogue(st, op, out, in, n, dy->data, true, x->data, false, dy->dtype, dw->data, MC_F32, 1.0f,
                                 accumulate ? 1.0f : 0.0f, &epi))
        return false;
    if (accumulate) {
        mc_tensor s = mc_tensor_1d(sums, MC_F32, out);
        mc_cuda_add_inplace(be, db, &s);
    }
    return true;
}

void mc_cuda_linear_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                        const mc_tensor *x, const mc_tensor *w, bool accumulate) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "linear_bwd";
    int64_t n = mc_cuda_rows(dy), out = mc_cuda_cols(dy), in = mc_cuda_cols(w);
    if (mc_tensor_present(dx)) { /* dx[n, in] = dy[n, out] w[out, in] */
        if (n > 0 && in > 0) {
            if (out == 0) scale_or_zero(st, op, dx->data, dx->dtype, n * in, 0.0f);
            else mc_cuda_matmul(st, op, n, in, out, dy->data, false, w->data, false, dy->dtype, dx->data, dx->dtype, 1.0f, 0.0f, NULL);
        }
    }
    bool has_dw = mc_tensor_present(dw), has_db = mc_tensor_present(db), db_done = false;
    if (has_dw && n > 0 && in > 0 && out > 0) { /* dw[out, in] (+)= dy^T x, into F32 (main_grad) */
        if (has_db) db_done = wgrad_bgrad(be, op, dw, db, dy, x, n, in, out, accumulate);
        if (!db_done)
            mc_cuda_matmul(st, op, out, in, n, dy->data, true, x->data, false, dy->dtype, dw->data, MC_F32, 1.0f,
                           accumulate ? 1.0f : 0.0f, NULL);
    } else if (has_dw && !accumulate && out * in > 0) {
        MC_CUDA_CHECK(cudaMemsetAsync(dw->data, 0, (size_t)(out * in) * sizeof(float), st->stream), op);
    }
    if (has_db && !db_done) { /* db[out] (+)= sum_rows dy, into F32 */
        if (!accumulate && out > 0) MC_CUDA_CHECK(cudaMemsetAsync(db->data, 0, (size_t)out * sizeof(float), st->stream), op);
        mc_cuda_colsum_add(st, op, (float *)db->data, dy->data, dy->dtype, n, out);
    }
}
