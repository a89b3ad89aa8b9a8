/* ops.h: the op layer. Model, optimizer and every other caller run compute through these
 * functions, never through a backend's vtable entry directly.
 *
 * Each mc_op_<name> is the backend entry of the same name (tensor/backend.h says what it
 * computes) with its operands checked first, once, in one place: presence, dtypes (by
 * backend.h's conventions, and among the dtypes the backend computes on), shapes, the
 * descriptors' fields, and the backend's own limits (mc_backend.supports). Then it calls
 * the backend. An operand error is a bug in the caller, so it aborts (base/error.h's
 * policy) with one line, the same whichever backend runs:
 *
 *   ... mc_op_linear_fwd: operand w: expected [16, 8] (out x x's last dim), got [16, 4]
 *
 * naming the op, the operand, what was expected and what was given. */
#ifndef MC_TENSOR_OPS_H
#define MC_TENSOR_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conversion and init ---- */
void mc_op_convert(mc_backend *be, mc_tensor *dst, const mc_tensor *src);
void mc_op_fill(mc_backend *be, mc_tensor *x, double value);
void mc_op_init_normal(mc_backend *be, mc_tensor *p, uint64_t seed, uint64_t stream, double std,
                       const int64_t *row_index, int64_t row_stride, int64_t col_offset);

/* ---- GEMM and the linear layer ---- */
void mc_op_gemm(mc_backend *be, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                float alpha, float beta);
void mc_op_linear_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b);
void mc_op_linear_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                      const mc_tensor *x, const mc_tensor *w, bool accumulate);
void mc_op_linear_residual_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                               const mc_tensor *w, const mc_tensor *b);
void mc_op_linear_gelu_fwd(mc_backend *be, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                           const mc_tensor *b);
void mc_op_linear_dgelu_bwd(mc_backend *be, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                            const mc_tensor *pre);

/* ---- embedding ---- */
void mc_op_embedding_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                         int64_t vocab_start, bool accumulate);
void mc_op_embedding_bwd(mc_backend *be, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                         int64_t vocab_start);

/* ---- norms ---- */
void mc_op_layernorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                         const mc_tensor *w, const mc_tensor *b, float eps);
void mc_op_layernorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum,
                         mc_tensor *y, const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w,
                         const mc_tensor *b, const mc_tensor *mean, const mc_tensor *rstd);
void mc_op_rmsnorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                       float eps);
void mc_op_rmsnorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                       const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd);

/* ---- rotary embedding, activations, attention ---- */
void mc_op_rope(mc_backend *be, mc_tensor *qkv, const mc_rope_desc *d, bool inverse);
void mc_op_gelu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, bool tanh);
void mc_op_gelu_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh);
void mc_op_swiglu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x);
void mc_op_swiglu_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x);
void mc_op_attention_fwd(mc_backend *be, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                         const mc_attn_desc *d);
void mc_op_attention_bwd(mc_backend *be, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                         const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d);
/* backend.h's attention_kv_fwd (generation with a key/value cache). */
void mc_op_attention_kv_fwd(mc_backend *be, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                            const mc_tensor *pos, const mc_attn_desc *d);
/* backend.h's argmax_rows (the greedy choice of generation). */
void mc_op_argmax_rows(mc_backend *be, mc_tensor *ids, const mc_tensor *x, int64_t vocab);
/* backend.h's decode_advance (a pipelined decode's next inputs, on the device). */
void mc_op_decode_advance(mc_backend *be, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap);

/* ---- dropout and residual ---- */
void mc_op_dropout_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream);
void mc_op_dropout_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream);
void mc_op_dropout_add_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                           uint64_t seed, uint64_t stream);
void mc_op_add_inplace(mc_backend *be, mc_tensor *y, const mc_tensor *x);
void mc_op_scale_inplace(mc_backend *be, mc_tensor *x, float s);

/* ---- softmax cross-entropy ---- */
void mc_op_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                         const mc_tensor *targets, int64_t vocab_start);
void mc_op_xent_rescale(mc_backend *be, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max);
void mc_op_xent_loss_grad(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                          const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                          const mc_tensor *mask, int64_t vocab_start, float grad_scale);
void mc_op_xent_fused(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                      const mc_tensor *targets, const mc_tensor *mask, float grad_scale);

/* ---- optimizer ---- */
void mc_op_adamw(mc_backend *be, const mc_adamw_desc *d);
/* The backend's master_join and master_split with their buffers as tensors, so that the
 * segments are checked against them: master F32, copy BF16, lo U16. */
void mc_op_master_join(mc_backend *be, mc_tensor *master, const mc_tensor *copy, const mc_tensor *lo,
                       const mc_adamw_segment *segments, int nsegments);
void mc_op_master_split(mc_backend *be, mc_tensor *copy, mc_tensor *lo, const mc_tensor *master,
                        const mc_adamw_segment *segments, int nsegments);
double mc_op_sumsq(mc_backend *be, const mc_tensor *x);
/* The backend's sumsq_segments with its buffers as tensors, so that the segments are
 * checked against them: out [1] F64, buf F32. */
void mc_op_sumsq_segments(mc_backend *be, mc_tensor *out, const mc_tensor *buf, const mc_adamw_segment *segments,
                          int nsegments);
int64_t mc_op_count_zeros(mc_backend *be, const mc_tensor *x);

#ifdef __cplusplus
}
#endif

#endif
