/* cuda_internal.h: private to the CUDA backend (src/backend/cuda/). The backend state
 * behind be->impl, the checked-call macros, the scratch workspace, launch sizing, the op
 * entries and size limits cuda_backend.cu's table holds, and the device helpers the kernels
 * share (bf16/f16 loads and stores in 16-byte packs, warp and block reductions).
 *
 * Conventions of the op files (gemm.cu, norm.cu, ...):
 * - The op layer (tensor/ops.h) has checked every operand before an entry runs: shapes as
 *   backend.h says, activations and weights F32, BF16 or F16 (compute_dtypes; one dtype
 *   per op call, dispatched by MC_CUDA_DISPATCH_FLOAT), statistics, RoPE tables, masks and
 *   weight gradients F32, and the sizes within the limits the files' *_supports answer.
 * - Every launch goes on the backend's one stream and is followed by MC_CUDA_LAUNCHED(op),
 *   which checks cudaGetLastError (and, with MC_CUDA_DEBUG_SYNC=1 in the environment,
 *   synchronizes and checks the kernel's own completion, naming the op).
 * - Kernels compute in F32 and are templated on the element type T (float,
 *   __nv_bfloat16 or __half); 16-byte vector paths are taken only when the host has checked the
 *   alignment of every pointer and the divisibility of the row length.
 * - No floating-point atomics, except in the attention backward's fused dQ (which
 *   --deterministic-mode turns off): every other reduction has a fixed order.
 * - While the stream is captured into a graph (graph.cu) launches are recorded, not run:
 *   nothing may wait for them, time them or read their results, and the pointers they are
 *   given are replayed later. So a call that synchronizes, allocates, copies to or from
 *   host memory or hands out the scratch workspace (which moves when it grows) refuses the
 *   capture first (mc_cuda_capture_refuse), and GEMM autotuning waits for a call outside
 *   one. */
#ifndef MC_BACKEND_CUDA_INTERNAL_H
#define MC_BACKEND_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <type_traits>

#include "base/error.h"
#include "base/philox.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

/* ---- checked calls: abort with the call, the op and the CUDA error ---- */
#define MC_CUDA_CHECK(call, op)                                                                               \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            mc_assert_fail(#call, __FILE__, __LINE__, "cuda %s: %s failed: %s (%s)", (op), #call,             \
                           cudaGetErrorString(e_), cudaGetErrorName(e_));                                     \
    } while (0)

#define MC_CUBLAS_CHECK(call, op)                                                                             \
    do {                                                                                                      \
        cublasStatus_t s_ = (call);                                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                      \
            mc_assert_fail(#call, __FILE__, __LINE__, "cuda %s: %s failed: %s (%s)", (op), #call,             \
                           cublasLtGetStatusString(s_), cublasLtGetStatusName(s_));                           \
    } while (0)

/* After every kernel launch (st is the mc_cuda_state of the op). */
#define MC_CUDA_LAUNCHED(st, op) mc_cuda_after_launch((st), (op), __FILE__, __LINE__)

/* Device-side invariant violations (no printf/assert in kernels): the first one is
 * recorded in a host-mapped word and reported at the next synchronizing entry. */
enum {
    MC_CUDA_DEVERR_NONE = 0,
    MC_CUDA_DEVERR_ROPE_POS = 1, /* a = token, b = position, c = table rows */
    MC_CUDA_DEVERR_KV_POS = 2,   /* attention_kv_fwd: a = token, b = position, c = cache positions */
};

/* ---- backend state ---- */
typedef struct mc_cuda_alloc_rec {
    void *ptr;
    size_t bytes;
} mc_cuda_alloc_rec;

struct mc_cuda_gemm_cache; /* gemm.cu */
typedef struct mc_cuda_gemm_prof mc_cuda_gemm_prof; /* gemm_profile.cu */

/* Partial sums of the deterministic reductions (sumsq, sumsq_segments): at most this many
 * blocks, each writing one double. */
enum { MC_CUDA_RED_MAX_BLOCKS = 2048 };

/* attention_kv.cu's split partials (output sums, max and sum of each token, query head and
 * split), F32. A fixed buffer, allocated with the backend, because decode steps are
 * captured into CUDA graphs, which neither the scratch workspace (it moves when it grows)
 * nor an allocation may enter: the kernel chooses fewer splits where more would not fit.
 * 4 MiB: its splits fill an H200 (4 blocks a multiprocessor), which takes fewer than
 * 4 x 132 + 1024 blocks of up to 4 heads and (head_dim + 2) floats each, under 2^20
 * floats for head_dim <= 128 (beyond, the kernel takes fewer splits). */
enum { MC_CUDA_KV_PARTIAL_FLOATS = 1 << 20 };
/* ... and its counters, one a (token, group, head chunk) of a split launch, after the
 * partials in the same allocation: each split's block counts itself in, and the last of a
 * row's combines them (each counter back to 0 for the next launch). A launch of more
 * (token, group, head chunk) blocks than this runs one split (it fills the machine). */
enum { MC_CUDA_KV_COUNTERS = 1024 };

typedef struct mc_cuda_state {
    const mc_backend *be; /* the backend this state belongs to (its public flags) */
    int device;
    int sm_count;
    int max_threads_per_sm;
    size_t smem_optin;  /* largest dynamic shared memory one block may ask for */
    size_t smem_per_sm; /* shared memory per multiprocessor */
    cudaStream_t stream;
    bool debug_sync; /* MC_CUDA_DEBUG_SYNC=1: synchronize and check after every launch */

    /* cuBLASLt */
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    struct mc_cuda_gemm_cache *gemm;
    mc_cuda_gemm_prof *gprof; /* MC_GEMM_PROFILE=1 */
    bool gprof_off;           /* MC_GEMM_PROFILE read and unset */

    /* cuDNN attention (attention_cudnn.cu): handle and graphs, made on first use */
    struct mc_cudnn_attn *cudnn;
    bool cudnn_off; /* not built with it, turned off, or libcudnn absent */

    /* scratch: grown on demand (first steps only), never shrunk */
    void *workspace;
    size_t workspace_bytes;

    /* reductions: partials and result (device), result mirror (pinned host) */
    double *red_partials; /* [MC_CUDA_RED_MAX_BLOCKS] */
    void *red_result;     /* 64 bytes */
    void *host_result;    /* 64 bytes, pinned */

    /* attention_kv_fwd's split partials (device), [MC_CUDA_KV_PARTIAL_FLOATS], and then
     * its counters in the same allocation */
    float *kv_partials;
    unsigned *kv_counters; /* [MC_CUDA_KV_COUNTERS], zero between launches */

    /* segment tables (adamw, sumsq_segments): pinned staging + device copy */
    void *seg_host, *seg_dev;
    size_t seg_host_bytes, seg_dev_bytes;
    cudaEvent_t seg_event; /* recorded after the last upload from seg_host */
    bool seg_event_recorded;
    cudaEvent_t copy_event; /* recorded after the last asynchronous copy (wait_copies) */
    bool copy_event_recorded;
    cudaEvent_t marks[MC_BACKEND_MARKS]; /* mark/wait_mark */
    bool mark_recorded[MC_BACKEND_MARKS];

    /* graph capture (graph.cu): the stream is being captured; why the last capture was
     * refused (mc_cuda_capture_refuse) */
    bool capturing;
    char capture_refusal[256];

    /* device error word: host-mapped pinned int[4] */
    int *err_host;
    int *err_dev;

    /* allocation records, for the byte counters */
    mc_cuda_alloc_rec *allocs;
    size_t nallocs, cap_allocs;
    size_t allocated, max_allocated;
} mc_cuda_state;

static inline mc_cuda_state *mc_cuda_st(mc_backend *be) { return (mc_cuda_state *)be->impl; }

/* cudaGetLastError after a launch; with debug_sync also a stream synchronize. */
void mc_cuda_after_launch(mc_cuda_state *st, const char *op, const char *file, int line);
/* Synchronizes the stream (naming op on failure) and reports device-side errors. */
void mc_cuda_sync_checked(mc_cuda_state *st, const char *op);
/* At least `bytes` of 256-byte aligned device scratch, valid until the next call (stream
 * ordered, so consecutive ops may reuse it). Growing synchronizes once. */
void *mc_cuda_workspace(mc_cuda_state *st, size_t bytes, const char *op);
/* Segment tables (adamw, sumsq_segments) go up through one pinned staging buffer:
 * mc_cuda_table_staging returns it with room for `bytes` (after the previous upload from
 * it has completed), the caller fills it, and mc_cuda_table_commit queues the copy on the
 * stream and returns the device copy (valid for the ops queued after it, until the next
 * commit). */
void *mc_cuda_table_staging(mc_cuda_state *st, size_t bytes, const char *op);
void *mc_cuda_table_commit(mc_cuda_state *st, size_t bytes, const char *op);

/* graph.cu: the backend's graph entries (backend.h). mc_cuda_capture_refuse, made by a
 * call that cannot be recorded before it does its work: while the stream is captured, the
 * capture ends there as failed, its reason "cuda <op> <what>", and the call and those after
 * it run at once; otherwise nothing. */
bool mc_cuda_graph_capture_begin(mc_backend *, mc_err *why);
void *mc_cuda_graph_capture_end(mc_backend *, mc_err *why);
void mc_cuda_graph_launch(mc_backend *, void *graph);
void mc_cuda_graph_free(mc_backend *, void *graph);
void mc_cuda_capture_refuse(mc_cuda_state *st, const char *op, const char *what);

/* Grid size for a grid-stride loop over `items` with `threads` per block: enough blocks
 * to fill every multiprocessor once at full occupancy, no more than needed. */
static inline unsigned mc_cuda_grid(const mc_cuda_state *st, int64_t items, int threads) {
    int64_t need = (items + threads - 1) / threads;
    int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / threads);
    if (cap < 1) cap = 1;
    if (need > cap) need = cap;
    if (need < 1) need = 1;
    return (unsigned)need;
}

/* Whether a grid-stride loop over `items` with `grid` blocks of `threads` fits in 32 bits,
 * its index one grid step past the end included: it may then index in uint32_t (the
 * index splits become 32-bit divisions; 64-bit ones held elementwise kernels at ~3 TB/s on
 * the H200). */
static inline bool mc_cuda_loop_fits_u32(int64_t items, unsigned grid, int threads) {
    return items + (int64_t)grid * threads <= (int64_t)UINT32_MAX;
}

static inline bool mc_cuda_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* A tensor seen as [rows, last dim]. */
static inline int64_t mc_cuda_cols(const mc_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }
static inline int64_t mc_cuda_rows(const mc_tensor *t) {
    int64_t c = mc_cuda_cols(t);
    return c ? mc_tensor_numel(t) / c : 0;
}

/* Runs the statements `...` with T the element type of the activation dtype dt (float,
 * __nv_bfloat16 or __half); any other dtype aborts naming op. The statements may hold
 * commas (kernel launches): they are the macro's variadic tail. */
#define MC_CUDA_DISPATCH_FLOAT(dt, op, T, ...)                                                                  \
    do {                                                                                                      \
        switch (dt) {                                                                                         \
        case MC_F32: {                                                                                        \
            typedef float T;                                                                                  \
            __VA_ARGS__;                                                                                      \
        } break;                                                                                              \
        case MC_BF16: {                                                                                       \
            typedef __nv_bfloat16 T;                                                                          \
            __VA_ARGS__;                                                                                      \
        } break;                                                                                              \
        case MC_F16: {                                                                                        \
            typedef __half T;                                                                                 \
            __VA_ARGS__;                                                                                      \
        } break;                                                                                              \
        default: /* the op layer admits compute_dtypes only */                                                \
            mc_assert_fail("dtype", __FILE__, __LINE__, "cuda %s: no kernel for dtype %s", (op),              \
                           mc_dtype_name(dt));                                                                \
        }                                                                                                     \
    } while (0)
/* MC_CUDA_DISPATCH_FLOAT's inverse: the dtype of element type T */
template <typename T>
constexpr mc_dtype mc_dtype_of() {
    return sizeof(T) == 4 ? MC_F32 : std::is_same<T, __half>::value ? MC_F16 : MC_BF16;
}
/* attention_kv.cu */
bool mc_cuda_attention_kv_supports(const mc_op_sizes *s, mc_op_refusal *why);
void mc_cuda_attention_kv_fwd(mc_backend *, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                              const mc_tensor *pos, const mc_attn_desc *d);
/* argmax.cu */
/* gemv.cu: linear_fwd / linear_residual_fwd (residual non-NULL) of at most
 * MC_CUDA_GEMV_ROWS rows as matrix-vector products; mc_cuda_gemv_fits says whether x and w
 * suit it (bf16/f16, aligned rows of a multiple of 8; not with MC_GEMV=0). */
enum { MC_CUDA_GEMV_ROWS = 8 };
bool mc_cuda_gemv_fits(const mc_tensor *x, const mc_tensor *w);
void mc_cuda_gemv(mc_backend *, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                  const mc_tensor *residual);
void mc_cuda_argmax_rows(mc_backend *, mc_tensor *ids, const mc_tensor *x, int64_t vocab);
void mc_cuda_decode_advance(mc_backend *, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap);
/* ---- op entry points (the vtable's functions) ---- */
/* gemm.cu */
void mc_cuda_gemm(mc_backend *, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                  float alpha, float beta);
void mc_cuda_linear_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b);
void mc_cuda_linear_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                        const mc_tensor *x, const mc_tensor *w, bool accumulate);
void mc_cuda_linear_residual_fwd(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                                 const mc_tensor *w, const mc_tensor *b);
void mc_cuda_gemm_cache_destroy(mc_cuda_state *st);
/* gemm_profile.cu (MC_GEMM_PROFILE=1): start returns a slot (-1 when not profiling) just
 * before a cuBLASLt call; stop, just after it, files the call under label (shape,
 * epilogue, algorithm) with its flop count; report_free prints the table and frees. */
int mc_cuda_gemm_prof_start(mc_cuda_state *st);
void mc_cuda_gemm_prof_stop(mc_cuda_state *st, int slot, const char *label, double flops);
void mc_cuda_gemm_prof_report_free(mc_cuda_state *st);
/* The GEMM engine under those entries, for the fused ops (linear_gelu.cu). Row-major
 * C[m,n] = alpha op(A) op(B) + beta C, m, n, k > 0, A and B of ab_dt, C of c_dt; with an
 * optional bias[n] of ab_dt. Always runs (cuBLASLt, staged operands or a plain kernel). */
void mc_cuda_matmul(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                    const void *B, bool tb, mc_dtype ab_dt, void *C, mc_dtype c_dt, float alpha, float beta,
                    const void *bias);
/* A cuBLASLt epilogue and its operands, in the row-major terms of mc_cuda_matmul (P is
 * alpha op(A) op(B) + beta C, aux an [m, n] matrix with row length aux_ld):
 *   GELU_AUX(_BIAS): aux = P (+ bias[n] on every row), written; C = gelu_tanh(aux);
 *   DGELU(_BGRAD):   C = P * gelu_tanh'(aux), aux read; bias[n] = column sums of C, written;
 *   BGRADB:          bias[m] = sums of op(A) over k, written.
 * bias_dt is the bias's (or bias gradient's) dtype: cuBLASLt's default is C's; a request
 * for another one is answered by the heuristic like any other. */
typedef struct mc_cuda_epilogue {
    cublasLtEpilogue_t kind;
    void *bias; /* NULL: none */
    mc_dtype bias_dt;
    void *aux; /* NULL: none */
    int64_t aux_ld;
} mc_cuda_epilogue;
/* mc_cuda_matmul with an epilogue, or false (nothing queued) when cuBLASLt has no
 * algorithm for it (the caller then runs the unfused kernels). */
bool mc_cuda_matmul_epilogue(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                             const void *B, bool tb, mc_dtype ab_dt, void *C, mc_dtype c_dt, float alpha, float beta,
                             const mc_cuda_epilogue *epi);
/* D[m,n] = op(A) op(B) (+ bias[n]) + Cin[m,n] (D and Cin of c_dt, distinct buffers: the
 * product lands on a copy of Cin without the copy), or false (nothing queued) when
 * cuBLASLt has no algorithm for it. */
bool mc_cuda_matmul_add(mc_cuda_state *st, const char *op, int64_t m, int64_t n, int64_t k, const void *A, bool ta,
                        const void *B, bool tb, mc_dtype ab_dt, void *D, const void *Cin, mc_dtype c_dt,
                        const void *bias);
/* db[cols] (F32) += column sums of dy[rows, cols] (dtype dt); deterministic. */
void mc_cuda_colsum_add(mc_cuda_state *st, const char *op, float *db, const void *dy, mc_dtype dt, int64_t rows,
                        int64_t cols);
/* db[cols] (F32) += column sums of part[nparts, cols] (F32 partial sums), in row order. */
void mc_cuda_colsum_parts_add(mc_cuda_state *st, const char *op, float *db, const float *part, int64_t nparts,
                              int64_t cols);
/* linear_gelu.cu */
void mc_cuda_linear_gelu_fwd(mc_backend *, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                             const mc_tensor *b);
void mc_cuda_linear_dgelu_bwd(mc_backend *, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                              const mc_tensor *pre);
/* embedding.cu */
void mc_cuda_embedding_fwd(mc_backend *, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                           int64_t vocab_start, bool accumulate);
void mc_cuda_embedding_bwd(mc_backend *, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                           int64_t vocab_start);
bool mc_cuda_embedding_bwd_supports(const mc_op_sizes *s, mc_op_refusal *why);
/* norm.cu */
void mc_cuda_layernorm_fwd(mc_backend *, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                           const mc_tensor *w, const mc_tensor *b, float eps);
void mc_cuda_layernorm_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum,
                           mc_tensor *y, const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                           const mc_tensor *mean, const mc_tensor *rstd);
void mc_cuda_rmsnorm_fwd(mc_backend *, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                         float eps);
void mc_cuda_rmsnorm_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                         const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd);
/* rope.cu */
void mc_cuda_rope(mc_backend *, mc_tensor *qkv, const mc_rope_desc *d, bool inverse);
/* The same, of the key heads only with keys_only (their query heads rotated elsewhere). */
void mc_cuda_rope_heads(mc_cuda_state *st, mc_tensor *qkv, const mc_rope_desc *d, bool inverse, bool keys_only);
/* attention_op.cu (over the kernels of cuda_flash.h) */
void mc_cuda_attention_fwd(mc_backend *, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv, const mc_attn_desc *d);
void mc_cuda_attention_bwd(mc_backend *, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                           const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d);
bool mc_cuda_attention_supports(const mc_op_sizes *s, mc_op_refusal *why);
/* activation.cu */
void mc_cuda_gelu_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, bool tanh);
void mc_cuda_gelu_bwd(mc_backend *, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh);
void mc_cuda_swiglu_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x);
void mc_cuda_swiglu_bwd(mc_backend *, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x);
/* dropout.cu */
void mc_cuda_dropout_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream);
void mc_cuda_dropout_bwd(mc_backend *, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream);
void mc_cuda_dropout_add_fwd(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                             uint64_t seed, uint64_t stream);
void mc_cuda_add_inplace(mc_backend *, mc_tensor *y, const mc_tensor *x);
void mc_cuda_scale_inplace(mc_backend *, mc_tensor *x, float s);
/* xent.cu */
void mc_cuda_xent_rowstats(mc_backend *, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                           const mc_tensor *targets, int64_t vocab_start);
void mc_cuda_xent_rescale(mc_backend *, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max);
void mc_cuda_xent_loss_grad(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                            const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                            const mc_tensor *mask, int64_t vocab_start, float grad_scale);
void mc_cuda_xent_fused(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                        const mc_tensor *targets, const mc_tensor *mask, float grad_scale);
/* rowstats, loss_grad and fused */
bool mc_cuda_xent_supports(const mc_op_sizes *s, mc_op_refusal *why);
/* adamw.cu */
void mc_cuda_adamw(mc_backend *, const mc_adamw_desc *d);
void mc_cuda_master_join(mc_backend *, float *master, const uint16_t *copy, const uint16_t *lo,
                         const mc_adamw_segment *segments, int nsegments);
void mc_cuda_master_split(mc_backend *, uint16_t *copy, uint16_t *lo, const float *master,
                          const mc_adamw_segment *segments, int nsegments);
double mc_cuda_sumsq(mc_backend *, const mc_tensor *x);
void mc_cuda_sumsq_segments(mc_backend *, double *out, const float *buf, const mc_adamw_segment *segments,
                            int nsegments);
int64_t mc_cuda_count_zeros(mc_backend *, const mc_tensor *x);
/* init.cu */
void mc_cuda_fill(mc_backend *, mc_tensor *x, double value);
void mc_cuda_init_normal(mc_backend *, mc_tensor *p, uint64_t seed, uint64_t stream, double std,
                         const int64_t *row_index, int64_t row_stride, int64_t col_offset);
void mc_cuda_convert(mc_backend *, mc_tensor *dst, const mc_tensor *src);

/* ======================= device helpers (kernels only) ======================= */
#ifdef __CUDACC__

/* Scalar loads and stores through F32. */
__device__ __forceinline__ float mc_ld(const float *p) { return *p; }
__device__ __forceinline__ float mc_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float mc_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void mc_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void mc_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void mc_st(__half *p, float v) { *p = __float2half_rn(v); }

/* bf16 bit patterns <-> F32 (bf16 is the high half of a float). */
__device__ __forceinline__ float mc_bf16lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float mc_bf16hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint32_t mc_bf16pair(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* f16 bit patterns <-> F32 (lo: the element at the lower address). */
__device__ __forceinline__ float mc_f16lo(uint32_t w) {
    return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
__device__ __forceinline__ float mc_f16hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
__device__ __forceinline__ uint32_t mc_f16pair(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}

/* 8 bf16 or f16 elements as loaded (one uint4) to F32; the pointer type only picks the
 * dtype. */
__device__ __forceinline__ void mc_unpack8(const __nv_bfloat16 *, uint4 u, float v[8]) {
    v[0] = mc_bf16lo(u.x), v[1] = mc_bf16hi(u.x), v[2] = mc_bf16lo(u.y), v[3] = mc_bf16hi(u.y);
    v[4] = mc_bf16lo(u.z), v[5] = mc_bf16hi(u.z), v[6] = mc_bf16lo(u.w), v[7] = mc_bf16hi(u.w);
}
__device__ __forceinline__ void mc_unpack8(const __half *, uint4 u, float v[8]) {
    v[0] = mc_f16lo(u.x), v[1] = mc_f16hi(u.x), v[2] = mc_f16lo(u.y), v[3] = mc_f16hi(u.y);
    v[4] = mc_f16lo(u.z), v[5] = mc_f16hi(u.z), v[6] = mc_f16lo(u.w), v[7] = mc_f16hi(u.w);
}

/* Groups of 8 elements: 16 bytes of bf16 or f16 (one uint4) or 32 bytes of F32 (two
 * float4). p must be 16-byte aligned. */
__device__ __forceinline__ void mc_load8(const float *p, float v[8]) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void mc_load8(const __nv_bfloat16 *p, float v[8]) {
    mc_unpack8(p, *reinterpret_cast<const uint4 *>(p), v);
}
__device__ __forceinline__ void mc_load8(const __half *p, float v[8]) {
    mc_unpack8(p, *reinterpret_cast<const uint4 *>(p), v);
}
__device__ __forceinline__ void mc_store8(float *p, const float v[8]) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4 *>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void mc_store8(__nv_bfloat16 *p, const float v[8]) {
    uint4 u;
    u.x = mc_bf16pair(v[0], v[1]), u.y = mc_bf16pair(v[2], v[3]);
    u.z = mc_bf16pair(v[4], v[5]), u.w = mc_bf16pair(v[6], v[7]);
    *reinterpret_cast<uint4 *>(p) = u;
}
__device__ __forceinline__ void mc_store8(__half *p, const float v[8]) {
    uint4 u;
    u.x = mc_f16pair(v[0], v[1]), u.y = mc_f16pair(v[2], v[3]);
    u.z = mc_f16pair(v[4], v[5]), u.w = mc_f16pair(v[6], v[7]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* Group g = elements [8g, 8g + 8) of an n-element array: vectorized when VEC and the
 * group is whole, element by element (zeros past n) otherwise. */
template <typename T, bool VEC>
__device__ __forceinline__ void mc_load_group(const T *p, int64_t i0, int64_t n, float v[8]) {
    if (VEC && i0 + 8 <= n) {
        mc_load8(p + i0, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = i0 + k < n ? mc_ld(p + i0 + k) : 0.0f;
    }
}
template <typename T, bool VEC>
__device__ __forceinline__ void mc_store_group(T *p, int64_t i0, int64_t n, const float v[8]) {
    if (VEC && i0 + 8 <= n) {
        mc_store8(p + i0, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i0 + k < n) mc_st(p + i0 + k, v[k]);
    }
}

__device__ __forceinline__ float mc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double mc_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float mc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sums/max (blockDim.x a multiple of 32, at most 1024), the same value returned
 * to every thread; the order of the additions is fixed. `red` is __shared__ scratch of 32
 * entries per value; the function ends with a barrier, so it can be called again at once. */
__device__ __forceinline__ float mc_block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = mc_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nwarps ? red[lane] : 0.0f;
    t = mc_warp_sum(t);
    __syncthreads();
    return t;
}
__device__ __forceinline__ double mc_block_sum_d(double v, double *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = mc_warp_sum_d(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double t = lane < nwarps ? red[lane] : 0.0;
    t = mc_warp_sum_d(t);
    __syncthreads();
    return t;
}
__device__ __forceinline__ void mc_block_sum2(float &a, float &b, float *red_a, float *red_b) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    a = mc_warp_sum(a);
    b = mc_warp_sum(b);
    if (lane == 0) red_a[warp] = a, red_b[warp] = b;
    __syncthreads();
    float ta = lane < nwarps ? red_a[lane] : 0.0f, tb = lane < nwarps ? red_b[lane] : 0.0f;
    a = mc_warp_sum(ta);
    b = mc_warp_sum(tb);
    __syncthreads();
}
__device__ __forceinline__ float mc_block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = mc_warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nwarps ? red[lane] : -INFINITY;
    t = mc_warp_max(t);
    __syncthreads();
    return t;
}

/* Records the first device-side error (code and three details) in the mapped word. */
__device__ __forceinline__ void mc_cuda_device_error(int *err, int code, int a, int b, int c) {
    if (atomicCAS(err, 0, code) == 0) {
        err[1] = a;
        err[2] = b;
        err[3] = c;
        __threadfence_system();
    }
}

#endif /* __CUDACC__ */

#endif
