/* cpu_internal.h: private to the CPU backend (src/backend/cpu/). The op entry points that
 * cpu_backend.c puts into the vtable, the backend's scratch workspace, and small numeric
 * helpers shared by several op files. The entries take operands the op layer
 * (tensor/ops.h) has checked: F32 or F64 activations (compute_dtypes), shapes as
 * backend.h says.
 *
 * Layout of an op file (norm.c, attention.c, ...): the dtype-generic kernels sit under
 * `#ifdef REAL` and are compiled twice, for float and double, by cpu_instantiate.h; the
 * rest of the file (dispatch on dtype) is compiled once. */
#ifndef MC_BACKEND_CPU_INTERNAL_H
#define MC_BACKEND_CPU_INTERNAL_H

/* Floating-point selects (clamps, causal masks) only if-convert, and so vectorize, when the
 * compiler may assume FP operations do not trap; this backend never unmasks FP exceptions. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "base/philox.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

/* ---- backend state ---- */
typedef struct mc_cpu_state {
    void *workspace; /* grown on demand, never shrunk: no allocation once the shapes repeat */
    size_t workspace_bytes;
    size_t allocated, max_allocated; /* through be->alloc, for the memory log line */
} mc_cpu_state;

/* At least `bytes` of 64-byte aligned scratch owned by the backend. Valid until the next
 * call; called on the host thread only (outside parallel regions). */
void *mc_cpu_workspace(mc_backend *be, size_t bytes);
/* Host allocation with 64-byte alignment; aborts with a message on failure. */
void *mc_cpu_aligned_alloc(size_t bytes);
/* Number of OpenMP threads a parallel region will use. */
int mc_cpu_threads(void);
/* dst[i0 .. i0+n) = src[0 .. n) converted to dt (one of storage_dtypes), serially. */
void mc_cpu_store_f32(void *dst, mc_dtype dt, int64_t i0, const float *src, int64_t n);

/* A tensor seen as [rows, last dim]. */
static inline int64_t mc_cpu_cols(const mc_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }
static inline int64_t mc_cpu_rows(const mc_tensor *t) {
    int64_t c = mc_cpu_cols(t);
    return c ? mc_tensor_numel(t) / c : 0;
}

/* ---- Philox, vectorized: u[k] = mc_philox_uniform(seed, stream, index0 + k), k < n ---- */
void mc_cpu_philox_uniforms(uint64_t seed, uint64_t stream, uint64_t index0, int64_t n, float *u);

/* ---- exp for float kernels ----
 * Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7 Taylor polynomial
 * (truncation error < 1e-8 relative, below float rounding) scaled by 2^n through the
 * exponent bits. Branch-free so loops calling it vectorize (libm's expf does not without
 * -ffast-math, and exp is the inner cost of softmax, GELU and SwiGLU). Inputs below -86.5
 * give exactly 0 (true value < 3e-38, so -inf works as a mask), above 88.73 +inf (the
 * clamp at 89 overflows the product); NaN propagates. */
static inline float mc_cpu_expf(float x) {
    const float lo = -86.5f, hi = 89.0f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = fmaf(n, -0.693145751953125f, xc);
    r = fmaf(n, -1.428606765330187045e-06f, r);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* 2^n as 2 * 2^(n-1): n reaches 128 at the top of the range, where 2^n is no float */
    int32_t bits = ((int32_t)n + 126) * (1 << 23);
    float half_scale;
    memcpy(&half_scale, &bits, sizeof half_scale);
    float y = (p * half_scale) * 2.0f;
    return x < lo ? 0.0f : y;
}

/* ---- op entry points (the vtable's functions) ---- */
/* gemm.c */
void mc_cpu_gemm(mc_backend *, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                 float alpha, float beta);
void mc_cpu_linear_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b);
/* db[cols] += the column sums of dy[rows, cols] (same dtype) */
void mc_cpu_colsum_add(mc_tensor *db, const mc_tensor *dy);
/* The sizes BLAS takes (the backend's supports() for the GEMM-shaped ops). */
bool mc_cpu_gemm_supports(const mc_op_sizes *s, mc_op_refusal *why);
void mc_cpu_linear_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                       const mc_tensor *x, const mc_tensor *w, bool accumulate);
void mc_cpu_linear_residual_fwd(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                                const mc_tensor *w, const mc_tensor *b);
void mc_cpu_linear_gelu_fwd(mc_backend *, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                            const mc_tensor *b);
void mc_cpu_linear_dgelu_bwd(mc_backend *, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                             const mc_tensor *pre);
/* embedding.c */
void mc_cpu_embedding_fwd(mc_backend *, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                          int64_t vocab_start, bool accumulate);
void mc_cpu_embedding_bwd(mc_backend *, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                          int64_t vocab_start);
/* norm.c */
void mc_cpu_layernorm_fwd(mc_backend *, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                          const mc_tensor *w, const mc_tensor *b, float eps);
void mc_cpu_layernorm_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum,
                          mc_tensor *y, const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                          const mc_tensor *mean, const mc_tensor *rstd);
void mc_cpu_rmsnorm_fwd(mc_backend *, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                        float eps);
void mc_cpu_rmsnorm_bwd(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                        const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd);
/* rope.c */
void mc_cpu_rope(mc_backend *, mc_tensor *qkv, const mc_rope_desc *d, bool inverse);
/* activation.c */
void mc_cpu_fill(mc_backend *, mc_tensor *x, double value);
void mc_cpu_init_normal(mc_backend *, mc_tensor *p, uint64_t seed, uint64_t stream, double std, const int64_t *row_index,
                        int64_t row_stride, int64_t col_offset);
void mc_cpu_gelu_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, bool tanh);
void mc_cpu_gelu_bwd(mc_backend *, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh);
void mc_cpu_swiglu_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x);
void mc_cpu_swiglu_bwd(mc_backend *, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x);
/* attention.c */
void mc_cpu_attention_fwd(mc_backend *, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv, const mc_attn_desc *d);
/* attention_kv.c (head_dim <= 512) */
void mc_cpu_attention_kv_fwd(mc_backend *, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                             const mc_tensor *pos, const mc_attn_desc *d);
/* argmax.c */
void mc_cpu_argmax_rows(mc_backend *, mc_tensor *ids, const mc_tensor *x, int64_t vocab);
void mc_cpu_decode_advance(mc_backend *, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap);
void mc_cpu_attention_bwd(mc_backend *, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                          const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d);
/* dropout.c */
void mc_cpu_dropout_fwd(mc_backend *, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream);
void mc_cpu_dropout_bwd(mc_backend *, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream);
void mc_cpu_dropout_add_fwd(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                            uint64_t seed, uint64_t stream);
void mc_cpu_add_inplace(mc_backend *, mc_tensor *y, const mc_tensor *x);
void mc_cpu_scale_inplace(mc_backend *, mc_tensor *x, float s);
/* xent.c */
void mc_cpu_xent_rowstats(mc_backend *, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                          const mc_tensor *targets, int64_t vocab_start);
void mc_cpu_xent_rescale(mc_backend *, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max);
void mc_cpu_xent_loss_grad(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                           const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                           const mc_tensor *mask, int64_t vocab_start, float grad_scale);
void mc_cpu_xent_fused(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                       const mc_tensor *targets, const mc_tensor *mask, float grad_scale);
/* adamw.c */
void mc_cpu_adamw(mc_backend *, const mc_adamw_desc *d);
void mc_cpu_master_join(mc_backend *, float *master, const uint16_t *copy, const uint16_t *lo,
                        const mc_adamw_segment *segments, int nsegments);
void mc_cpu_master_split(mc_backend *, uint16_t *copy, uint16_t *lo, const float *master,
                         const mc_adamw_segment *segments, int nsegments);
double mc_cpu_sumsq(mc_backend *, const mc_tensor *x);
void mc_cpu_sumsq_segments(mc_backend *, double *out, const float *buf, const mc_adamw_segment *segments,
                           int nsegments);
int64_t mc_cpu_count_zeros(mc_backend *, const mc_tensor *x);

/* Calls name_f32(...) or name_f64(...) by dtype (F32 or F64, as the op layer admits). */
#define MC_CPU_DISPATCH(dtype, name, ...)         \
    do {                                         \
        if ((dtype) == MC_F32) name##_f32(__VA_ARGS__); \
        else name##_f64(__VA_ARGS__);            \
    } while (0)

#endif
