/* backend.h: the op API. Every backend (cpu/, cuda/) fills one mc_backend vtable; model
 * and optimizer code call only these entries and never a BLAS or CUDA library directly.
 * The CPU backend is the reference: tests compare every other backend against it.
 *
 * Conventions for every op:
 * - Tensors are views in the backend's memory (host memory for cpu, device for cuda).
 * - "N" is the number of tokens, N = S*B, in [s, b] order (sequence first, as Megatron).
 * - Outputs are overwritten unless the entry says "+=" (accumulated): weight gradients
 *   accumulate (gradient accumulation over micro-batches; linear_bwd overwrites instead
 *   when told to, for the first micro-batch after the gradients were reset, which then
 *   need no zeroing pass), and so do the input gradients of norms (they add into the
 *   residual-stream gradient).
 * - Optional operands are passed as mc_tensor_none() (data == NULL).
 * - Dtypes: the CPU backend computes in F32, and in F64 for gradient checks; the CUDA
 *   backend in F32, BF16 and F16. Statistics (mean, rstd, lse, rowmax, xent stats, loss), RoPE
 *   tables and masks are F32, or F64 when the activations are F64. Weight gradients are
 *   F32 (Megatron's main_grad) or F64 with F64 activations; optimizer state is F32 (a
 *   split master's low halves U16).
 *   Token ids and positions are I32.
 * - Ops are asynchronous with respect to the host on devices; sync() waits.
 * - Callers go through the op layer (tensor/ops.h), which checks every operand against
 *   these rules once, whichever backend runs; the entries below assume valid operands. */
#ifndef MC_TENSOR_BACKEND_H
#define MC_TENSOR_BACKEND_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/hostdev.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MC_DEVICE_CPU = 0, MC_DEVICE_CUDA = 1 } mc_device_kind;

/* A set of dtypes: the OR of MC_DTYPE_BIT(dt). */
#define MC_DTYPE_BIT(dt) (1u << (unsigned)(dt))

/* Marks a backend keeps for mark/wait_mark (below). */
#define MC_BACKEND_MARKS 4

/* The dtype of statistics, RoPE tables, masks and weight gradients for activations of
 * dtype `act` (the conventions above): F64 with F64 activations, else F32. */
static inline mc_dtype mc_stat_dtype(mc_dtype act) { return act == MC_F64 ? MC_F64 : MC_F32; }

/* Causal self-attention over a packed QKV activation.
 * qkv: [S, B, groups, heads/groups + 2, head_dim] (Megatron's per-group layout: a group's
 *      query heads, then its key head, then its value head).
 * out: [S, B, heads, head_dim].  lse: [B, heads, S], the log-sum-exp of each softmax
 *      row (saved for backward, flash-attention style; probabilities are never stored). */
typedef struct mc_attn_desc {
    int64_t seq;     /* S */
    int64_t batch;   /* B */
    int heads;       /* query heads on this rank */
    int groups;      /* key/value heads on this rank; heads % groups == 0 */
    int head_dim;    /* d */
    float softmax_scale;
    float dropout;   /* attention-dropout probability on the softmax output; 0 in eval */
    uint64_t seed, stream; /* dropout draws: element (b, head, i, j) of stream `stream` */
    /* Optional [B, S] I32: the first key position query (s, b) may attend to (document
     * start, for --reset-attention-mask), 0 <= seg_start[b, s] <= s. Absent: 0 for all,
     * i.e. plain causal. */
    mc_tensor seg_start;
    /* true: a bitwise-reproducible backward (no floating-point atomics; --deterministic-mode);
     * false lets a backend sum in a run-dependent order where that is faster. */
    bool deterministic;
    /* Optional (NULL: none): the rotary embedding the forward's q and k went through, whose
     * backward attention_bwd then applies to dqkv as well (see there). */
    const struct mc_rope_desc *rope;
} mc_attn_desc;

/* Rotary embedding on the q and k heads of a packed QKV activation, in place
 * (HF Llama's rotate-half layout on the first rot_dim dims of each head). */
typedef struct mc_rope_desc {
    int64_t seq, batch;
    int heads, groups, head_dim;
    int rot_dim;     /* rotated dims per head (head_dim * --rotary-percent), even */
    mc_tensor cos, sin; /* [max_positions, rot_dim/2] F32 tables */
    mc_tensor pos;   /* optional [S*B] I32 position of each token; absent: s */
} mc_rope_desc;

/* One parameter segment for AdamW: `count` elements at `offset` in the optimizer's state
 * buffers (param, exp_avg, exp_avg_sq) and at `grad_offset` in grad and param_copy (the
 * model's buffers; the two differ when the state holds only this rank's shard, as with
 * the distributed optimizer), with its weight decay. */
typedef struct mc_adamw_segment {
    int64_t offset, count;
    int64_t grad_offset;
    float weight_decay;
} mc_adamw_segment;

/* The F32 master weights kept as two halves (Megatron-Core's store_param_remainders, as
 * Transformer Engine's FusedAdam): the model's BF16 parameter is the master's high half
 * plus one when its low half is >= 0x8000, i.e. the master rounded to nearest with ties
 * away from zero (round-to-nearest-even differs only on exact ties), and the remainder is
 * the low half. Joining them gives the master back bit for bit, so the master costs 2
 * bytes a parameter beside the BF16 copy instead of 4. (A NaN whose high half is 0x7fff or
 * 0xffff shows in BF16 as another value; joining still restores it.) The backends and the
 * optimizer share these definitions. */
MC_HOSTDEV uint16_t mc_master_hi(uint32_t bits) { return (uint16_t)((bits >> 16) + ((bits >> 15) & 1u)); }
MC_HOSTDEV uint32_t mc_master_join(uint16_t hi, uint16_t lo) {
    return ((uint32_t)(uint16_t)(hi - (lo >> 15)) << 16) | lo;
}

/* AdamW as Megatron's `adam`, operation for operation as torch.optim.AdamW on F32 tensors:
 *   g = grad * grad_scale; p *= 1 - lr wd; m = lerp(m, g, 1 - b1); v = b2 v + (1-b2) g^2;
 *   p -= (lr / (1 - b1^step)) m / (sqrt(v) / sqrt(1 - b2^step) + eps)
 * (bias corrections in double). All buffers F32 except the optional `param_copy` (the
 * model's low-precision parameters), which is rewritten over the segments' ranges. With
 * `param_lo` the master is split (mc_master_hi): `param` is NULL, param_copy is BF16, and
 * each element's master is joined from param_copy and param_lo, updated by the same
 * arithmetic and split back into both. */
typedef struct mc_adamw_desc {
    float *param, *grad, *exp_avg, *exp_avg_sq; /* flat F32 buffers, backend memory */
    mc_tensor param_copy;                     /* optional flat copy (e.g. BF16) to refresh */
    uint16_t *param_lo;                       /* optional [state_numel]: the master's low halves */
    const mc_adamw_segment *segments;         /* host array */
    int nsegments;
    float lr, beta1, beta2, eps, grad_scale;
    int64_t step;                             /* 1-based, for bias correction */
    /* Clipping by the global gradient norm, decided by the update itself (NULL: grad_scale
     * as given): grad_sumsq is a backend-memory double, the gradients' sum of squares (from
     * sumsq_segments, reduced over ranks), and grad_scale becomes mc_adamw_clip_scale's
     * factor; when the norm is not finite nothing is written. So the host need not read the
     * norm between the reduction and the update. */
    const double *grad_sumsq;
    double loss_scale, clip_grad;
    /* Elements of param (or param_lo), exp_avg and exp_avg_sq, and of grad: the ranges the
     * segments may address (the op layer checks them). */
    int64_t state_numel, grad_numel;
} mc_adamw_desc;

/* The gradient factor of a clipped step: 1 / loss_scale (the fp16 loss scale, else 1) times
 * Megatron's clip coefficient min(1, clip_grad / (norm + 1e-6)) of the unscaled norm
 * sqrt(sumsq) / loss_scale (clip_grad <= 0: none), in double, rounded once to float. Returns
 * false, and no factor, when the norm is inf or NaN. The backends and the optimizer share
 * this one definition, so they agree bit for bit. */
MC_HOSTDEV bool mc_adamw_clip_scale(double sumsq, double loss_scale, double clip_grad, float *factor) {
    double norm = sqrt(sumsq) / loss_scale, scale = 1.0 / loss_scale;
    if (!isfinite(norm)) return false;
    if (clip_grad > 0) {
        double coeff = clip_grad / (norm + 1.0e-6); /* Megatron's clip_grad_by_total_norm_fp32 */
        if (coeff < 1.0) scale *= coeff;
    }
    *factor = (float)scale;
    return true;
}

/* The ops of this API, for a backend's limits (mc_backend.supports). */
typedef enum {
    MC_OP_CONVERT, MC_OP_FILL, MC_OP_INIT_NORMAL,
    MC_OP_GEMM, MC_OP_LINEAR_FWD, MC_OP_LINEAR_BWD, MC_OP_LINEAR_RESIDUAL_FWD, MC_OP_LINEAR_GELU_FWD,
    MC_OP_LINEAR_DGELU_BWD,
    MC_OP_EMBEDDING_FWD, MC_OP_EMBEDDING_BWD,
    MC_OP_LAYERNORM_FWD, MC_OP_LAYERNORM_BWD, MC_OP_RMSNORM_FWD, MC_OP_RMSNORM_BWD,
    MC_OP_ROPE, MC_OP_GELU_FWD, MC_OP_GELU_BWD, MC_OP_SWIGLU_FWD, MC_OP_SWIGLU_BWD,
    MC_OP_ATTENTION_FWD, MC_OP_ATTENTION_BWD, MC_OP_ATTENTION_KV_FWD, MC_OP_ARGMAX_ROWS,
    MC_OP_DROPOUT_FWD, MC_OP_DROPOUT_BWD, MC_OP_DROPOUT_ADD_FWD, MC_OP_ADD_INPLACE, MC_OP_SCALE_INPLACE,
    MC_OP_XENT_ROWSTATS, MC_OP_XENT_RESCALE, MC_OP_XENT_LOSS_GRAD, MC_OP_XENT_FUSED,
    MC_OP_ADAMW, MC_OP_MASTER_JOIN, MC_OP_MASTER_SPLIT, MC_OP_SUMSQ, MC_OP_SUMSQ_SEGMENTS, MC_OP_COUNT_ZEROS,
} mc_op_kind;

/* The sizes one op call runs at, as a backend's limits see them (fields an op has no use
 * for are 0): GEMM-shaped ops (gemm and the linears) multiply op(A) [m, k] by op(B) [k, n];
 * row-wise ops (embeddings, cross-entropy) run over `rows` rows of `cols`, embeddings over
 * a table of table_rows; attention at its descriptor's sizes. */
typedef struct mc_op_sizes {
    mc_op_kind op;
    int64_t m, n, k;
    int64_t rows, cols, table_rows;
    const mc_attn_desc *attn;
} mc_op_sizes;

/* A backend's reason for refusing sizes: the operand, the limit and what was given, which
 * the op layer words as its other operand errors. */
typedef struct mc_op_refusal {
    const char *operand;
    char expected[96], given[64];
} mc_op_refusal;

struct mc_err;
typedef struct mc_backend mc_backend;
struct mc_backend {
    const char *name;
    mc_device_kind device;
    void *impl; /* backend-private state (streams, handles, workspaces) */
    /* true (--deterministic-mode; the trainer sets it before the first op): no choice that
     * depends on timings, such as the CUDA backend's GEMM algorithm autotuning, so two runs
     * compute alike bit for bit. */
    bool reproducible;

    /* ---- what this backend supports, asked by the op layer before every op ----
     * compute_dtypes: the activation dtypes its kernels compute on (statistics, weight
     * gradients and the rest follow from them by the conventions above); storage_dtypes:
     * those convert, fill, init_normal and adamw's param_copy take. Sets of MC_DTYPE_BIT. */
    uint32_t compute_dtypes, storage_dtypes;
    /* Sizes past the backend's reach (32-bit BLAS dimensions, a kernel's largest head_dim,
     * grid limits): false, saying which in *why. NULL: no limits. */
    bool (*supports)(mc_backend *, const mc_op_sizes *sizes, mc_op_refusal *why);

    /* ---- memory ---- */
    void *(*alloc)(mc_backend *, size_t bytes); /* aborts with a message when out of memory */
    void (*free)(mc_backend *, void *);
    void (*copy_h2d)(mc_backend *, void *dst, const void *src, size_t bytes);
    void (*copy_d2h)(mc_backend *, void *dst, const void *src, size_t bytes);
    void (*copy_d2d)(mc_backend *, void *dst, const void *src, size_t bytes);
    /* Host memory for the asynchronous copies below (page-locked on CUDA, so that a copy
     * can run while the host goes on; plain memory on the CPU). host_alloc aborts with a
     * message when out of memory. */
    void *(*host_alloc)(mc_backend *, size_t bytes);
    void (*host_free)(mc_backend *, void *);
    /* Copies queued behind the work already issued, returning at once (copy_h2d and
     * copy_d2h wait for the device instead): the host buffer must come from host_alloc; an
     * h2d source must keep its contents, and a d2h destination is written, only by the
     * next sync (or copy_h2d/copy_d2h, which synchronize). On the CPU they are memcpy. */
    void (*copy_h2d_async)(mc_backend *, void *dst, const void *src, size_t bytes);
    void (*copy_d2h_async)(mc_backend *, void *dst, const void *src, size_t bytes);
    /* Waits until every asynchronous copy issued so far, and the work queued before it, is
     * done; not for the work queued after the last one (as sync would). */
    void (*wait_copies)(mc_backend *);
    /* Host waits on part of the queued work, for pipelines that queue step k + 1 before
     * they read step k's results (generation's greedy decode): mark(be, i) records mark i
     * (0 <= i < MC_BACKEND_MARKS) behind the work queued so far, moving it if it was
     * recorded before; wait_mark(be, i) returns when the work queued before mark i is done
     * (at once for a mark never recorded). On the CPU work is done when queued: both do
     * nothing. */
    void (*mark)(mc_backend *, int i);
    void (*wait_mark)(mc_backend *, int i);
    /* A device-to-host copy off the backend's stream, for another thread (a checkpoint
     * writer) while the stream runs other work: it returns when the copy is done, without
     * waiting for the stream or ordering with it, so the caller makes sure nothing writes
     * src meanwhile. dst from host_alloc is fastest. On the CPU it is memcpy. */
    void (*copy_d2h_side)(mc_backend *, void *dst, const void *src, size_t bytes);
    void (*zero)(mc_backend *, void *dst, size_t bytes);
    void (*sync)(mc_backend *);
    /* dst = src converted elementwise (F32 <-> BF16/F16, same numel). */
    void (*convert)(mc_backend *, mc_tensor *dst, const mc_tensor *src);
    /* Every element of x set to `value` (converted to x's dtype). */
    void (*fill)(mc_backend *, mc_tensor *x, double value);
    /* Weight init: p[r, c] = std * mc_philox_normal(seed, stream, row_index[r] * row_stride
     * + col_offset + c) for p [rows, cols] (a 1-D p is one row), so a shard of a tensor gets
     * the values the whole tensor would have. row_index is a host array of `rows` entries. */
    void (*init_normal)(mc_backend *, mc_tensor *p, uint64_t seed, uint64_t stream, double std,
                        const int64_t *row_index, int64_t row_stride, int64_t col_offset);
    /* Bytes allocated now, at most so far, and held from the system (the memory log line). */
    void (*memory_stats)(mc_backend *, size_t *allocated, size_t *max_allocated, size_t *reserved);
    /* Bytes alloc could still hand out (the host's MemAvailable on the CPU, the device's free
     * memory on CUDA), for refusing a plan that cannot fit before allocating any of it. */
    size_t (*memory_available)(mc_backend *);

    /* ---- GEMM ----
     * C[m,n] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T, row-major. */
    void (*gemm)(mc_backend *, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b,
                 bool trans_b, float alpha, float beta);
    /* y[N,out] = x[N,in] w[out,in]^T (+ b[out]). */
    void (*linear_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b);
    /* dx[N,in] = dy w (overwritten; optional); dw += dy^T x; db += sum_rows(dy) (optional);
     * without `accumulate`, dw = and db = instead of += (no read of their old contents). */
    void (*linear_bwd)(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                       const mc_tensor *x, const mc_tensor *w, bool accumulate);
    /* A linear layer whose output lands on the residual stream (the row-parallel linears
     * at TP 1 without dropout): y[N,out] = residual[N,out] + x[N,in] w[out,in]^T (+ b[out]),
     * as linear_fwd into y then dropout_add_fwd(y, residual, y, p = 0), in one pass where the
     * backend can (a GEMM that reads the residual as its C input). y must not alias
     * residual. */
    void (*linear_residual_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                                const mc_tensor *w, const mc_tensor *b);
    /* A linear layer and the tanh GELU after it (an MLP's fc1 with --openai-gelu; the exact
     * GELU has no fused form): pre[N,out] = x[N,in] w[out,in]^T (+ b[out]), kept for the
     * backward, and y = gelu(pre) as gelu_fwd with tanh. linear_fwd then gelu_fwd, in one
     * pass where the backend can (cuBLASLt's GELU epilogue). y must not alias pre. */
    void (*linear_gelu_fwd)(mc_backend *, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                            const mc_tensor *b);
    /* Its backward from the layer after: dpre[N,f] = gelu'(pre) * (dy[N,out] w[out,f])
     * (overwritten; must not alias pre or dy) and db[f] += sum_rows dpre (optional; the bias
     * gradient of the linear that made pre). linear_bwd's dx, then gelu_bwd with tanh, then
     * linear_bwd's db, in one pass where the backend can. */
    void (*linear_dgelu_bwd)(mc_backend *, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                             const mc_tensor *pre);

    /* ---- embedding (vocab-parallel aware: ids outside [vocab_start, vocab_start+rows) give 0) ----
     * y[N,h] (=, or += when accumulate) table[ids - vocab_start]. */
    void (*embedding_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                          int64_t vocab_start, bool accumulate);
    /* dtable[ids - vocab_start] += dy, deterministic (no float atomics' order dependence). */
    void (*embedding_bwd)(mc_backend *, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                          int64_t vocab_start);

    /* ---- norms (over the last dim); mean/rstd [N] F32 saved for backward ---- */
    void (*layernorm_fwd)(mc_backend *, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                          const mc_tensor *w, const mc_tensor *b, float eps);
    /* dx += ..., dw += ..., db += ... (each optional). With y, the forward's output again,
     * bit for bit (b: the forward's bias, optional), in the same pass: selective
     * recomputation keeps x and the statistics, not y, and reads y back from here for the
     * next linear's weight gradient. y must not alias dx, dy or x. With dxsum ([h], the
     * grads' dtype; needs dx), dxsum += the column sums of dx as updated and stored: dx is
     * the residual stream's gradient, whose column sums are the bias gradients of the
     * linears writing that stream (a pass over dx saved). */
    void (*layernorm_bwd)(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum, mc_tensor *y,
                          const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                          const mc_tensor *mean, const mc_tensor *rstd);
    void (*rmsnorm_fwd)(mc_backend *, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                        float eps);
    void (*rmsnorm_bwd)(mc_backend *, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                        const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd);

    /* ---- rotary embedding, in place on qkv (inverse = true applies the transpose, for
     * backward on dqkv) ---- */
    void (*rope)(mc_backend *, mc_tensor *qkv, const mc_rope_desc *d, bool inverse);

    /* ---- activations ---- */
    /* GELU: exact, 0.5 x (1 + erf(x / sqrt 2)) (Megatron's default), or with `tanh` the
     * approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (--openai-gelu,
     * GPT-2's gelu_new). dx may alias dy or x. */
    void (*gelu_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *x, bool tanh);
    void (*gelu_bwd)(mc_backend *, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh);
    /* y[N,f] = silu(x[:, :f]) * x[:, f:], x [N, 2f] as Megatron's fc1 [gate; up]. The
     * backward's dx [N, 2f] may alias x; with y (optional; it may alias dy, nothing else) it also writes
     * the forward's output again, bit for bit, for selective recomputation. */
    void (*swiglu_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *x);
    void (*swiglu_bwd)(mc_backend *, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x);

    /* ---- attention (causal, GQA, flash-style: O(S) memory per row) ---- */
    void (*attention_fwd)(mc_backend *, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                          const mc_attn_desc *d);
    /* dqkv overwritten (all of q, k and v parts). With d->rope, what rope(dqkv, d->rope,
     * inverse) would then make of it: the q and k heads rotated back, in the same call so
     * that a backend may rotate dq before its rounding to dqkv's dtype (CUDA does, as it
     * stores dq). dbias, optional (F32 [qkv width], the QKV bias gradient where nothing
     * acts on dqkv before that linear): += the final dqkv's column sums over all S B
     * positions, which a backend may form from the values before their rounding. */
    void (*attention_bwd)(mc_backend *, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                          const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d);
    /* Generation with a key/value cache, each of the d->batch sequences at its own length:
     * token (s, b) of qkv (row s B + b, as everywhere) is at position pos[s B + b] of
     * sequence b (pos: I32 [S B], the positions RoPE read; the tokens of one sequence at
     * distinct positions). First every new token's key and value heads are stored into
     * cache [B, cap, groups, 2, head_dim] (sequence b's positions one after another, a
     * group's key head then its value head) at (b, its position); then the query of token
     * (s, b) at position p attends causally to cache[b, 0 .. p], which this call or earlier
     * ones wrote. out [S, B, heads, head_dim]. Forward only: no dropout, no seg_start, no
     * lse. cache has qkv's dtype. A position outside [0, cap) is the caller's bug, caught by
     * the backend (the CPU aborts; CUDA stores nothing for it and reports it at the next
     * synchronization), as rope's table positions are: pos lives in backend memory, which
     * the op layer does not read. */
    void (*attention_kv_fwd)(mc_backend *, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                             const mc_tensor *pos, const mc_attn_desc *d);

    /* ---- the greedy choice of generation ----
     * ids[n] (I32) = for each row b < n of logits gathered from `shards` vocabulary shards
     * (x [shards n, V_s]: rows r n .. r n + n - 1 hold ids [r V_s, (r + 1) V_s), as a
     * tensor-parallel all-gather lays them out; 1 shard: x [n, V]), the id < vocab of the
     * largest value, the lowest id among equals; NaN counts as -inf (an all -inf row gives
     * 0). So only n ids, not the logits, need to reach the host. */
    void (*argmax_rows)(mc_backend *, mc_tensor *ids, const mc_tensor *x, int64_t vocab);
    /* The next decode step's inputs from this step's choice, on the device, so that a
     * pipelined decode can queue a step before the host has read the last one's ids: for
     * each b < n = ids' elements, tokens[b] = ids[b] and pos[b] = pos[b] + 1, held at
     * cap - 1 (a slot whose sequence has ended may run a step past its end; what it writes
     * there is never read). All I32. */
    void (*decode_advance)(mc_backend *, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap);

    /* ---- dropout and residual (masks regenerated from Philox, never stored) ----
     * y = x * keep / (1 - p), keep = uniform(seed, stream, i) >= p, 0 <= p < 1. y may
     * alias x. */
    void (*dropout_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream);
    void (*dropout_bwd)(mc_backend *, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream);
    /* y = residual + dropout(x); y may alias residual. */
    void (*dropout_add_fwd)(mc_backend *, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                            uint64_t seed, uint64_t stream);
    /* y += x. */
    void (*add_inplace)(mc_backend *, mc_tensor *y, const mc_tensor *x);
    /* x *= s. */
    void (*scale_inplace)(mc_backend *, mc_tensor *x, float s);

    /* ---- softmax cross-entropy, vocab-parallel: one pass for the row statistics, with
     * tensor parallelism an all-reduce (max) of the row maxima and a rescale of the sums
     * before an all-reduce (sum) of the statistics, then loss and gradient. logits are
     * [N, V_local]; this rank holds vocab ids [vocab_start, vocab_start + V_local). ---- */
    /* rowmax[N] = max_j logits[i, j]; stats[2, N]: row 0 = sum_j exp(logits - rowmax), row
     * 1 = the target's logit on this rank (0 when the target id is not on this rank). */
    void (*xent_rowstats)(mc_backend *, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                          const mc_tensor *targets, int64_t vocab_start);
    /* stats[0, i] *= exp(local_max[i] - global_max[i]) (local_max: this rank's rowmax,
     * global_max: the group's), so that the ranks' sums add up to the row's. */
    void (*xent_rescale)(mc_backend *, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max);
    /* loss[i] = log(stats[0,i]) + rowmax[i] - stats[1,i] for every token (the mask does not
     * zero it: the caller weights losses by the mask when reducing); if dlogits is present,
     * it gets (softmax - onehot(target)) * grad_scale * mask[i] (mask optional, [N]).
     * dlogits may alias logits. */
    void (*xent_loss_grad)(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                           const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                           const mc_tensor *mask, int64_t vocab_start, float grad_scale);
    /* Without tensor parallelism (the whole vocabulary on this rank, vocab_start 0): loss
     * and, if dlogits is present, the gradient exactly as xent_rowstats followed by
     * xent_loss_grad define them, in one pass where the backend can (each row of logits read
     * once). Targets outside [0, V) count a target logit of 0, as there. dlogits may alias
     * logits. */
    void (*xent_fused)(mc_backend *, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                       const mc_tensor *targets, const mc_tensor *mask, float grad_scale);

    /* ---- optimizer ---- */
    void (*adamw)(mc_backend *, const mc_adamw_desc *d);
    /* The split master (mc_master_hi) over the segments, to and from F32: master_join
     * writes master[grad_offset + i] = join(copy[grad_offset + i], lo[offset + i]);
     * master_split writes copy and lo from master, the reverse. master F32 and copy BF16 are
     * indexed as the model's buffers (grad_offset), lo as the optimizer state (offset). */
    void (*master_join)(mc_backend *, float *master, const uint16_t *copy, const uint16_t *lo,
                        const mc_adamw_segment *segments, int nsegments);
    void (*master_split)(mc_backend *, uint16_t *copy, uint16_t *lo, const float *master,
                         const mc_adamw_segment *segments, int nsegments);
    /* Sum of squares of a F32 buffer, accumulated in double, returned to the host. */
    double (*sumsq)(mc_backend *, const mc_tensor *x);
    /* Sum of squares over several ranges of one flat F32 buffer (the segments' offset and
     * count; weight_decay ignored), in one pass, written to the backend-memory double *out
     * (for the ops queued after it, such as adamw's clipping; no host round trip). */
    void (*sumsq_segments)(mc_backend *, double *out, const float *buf, const mc_adamw_segment *segments,
                           int nsegments);
    /* Number of exact zeros in a F32 buffer (--log-num-zeros-in-grad). */
    int64_t (*count_zeros)(mc_backend *, const mc_tensor *x);

    /* The stream the backend's ops run on (a cudaStream_t on CUDA), for the comm layer's NCCL
     * calls; NULL entry or NULL result: the legacy default stream. */
    void *(*native_stream)(mc_backend *);

    /* ---- graphs: a fixed sequence of ops recorded once and replayed by one launch (CUDA
     * graphs). Optional: NULL on a backend without them, whose callers run the ops
     * themselves. ----
     * Between graph_capture_begin and graph_capture_end the ops this thread issues are
     * recorded, not run, with the pointers and sizes they are given; no op that returns a
     * value to the host (sumsq, count_zeros) belongs in a capture. graph_capture_begin
     * returns false, with the reason in *why, when no capture could start; graph_capture_end
     * returns the recorded graph, or NULL with the reason when the ops could not be recorded:
     * a call that synchronizes, allocates, copies to or from host memory or uses scratch
     * that may move ends the capture there as failed, and it and the ops after it run at
     * once, so of a failed capture's ops some ran and some did not, and the caller issues
     * them all again (ops that rewrite what they write). graph_launch queues a graph's ops
     * as recorded (asynchronous, as ops are), valid while every buffer they use stays
     * allocated; graph_free releases one once its launches are done. */
    bool (*graph_capture_begin)(mc_backend *, struct mc_err *why);
    void *(*graph_capture_end)(mc_backend *, struct mc_err *why);
    void (*graph_launch)(mc_backend *, void *graph);
    void (*graph_free)(mc_backend *, void *graph);

    /* Backend teardown. */
    void (*destroy)(mc_backend *);
};

/* The arena allocator (base/arena.h) over be's alloc and free. */
mc_arena_allocator mc_backend_arena_allocator(mc_backend *be);

/* The CPU reference backend (OpenMP + OpenBLAS). */
mc_backend *mc_backend_cpu_create(void);
/* The CUDA backend for `device` (NULL with a message in err when unavailable). */
mc_backend *mc_backend_cuda_create(int device, struct mc_err *err);
/* Whether this build has CUDA and a GPU is visible. */
bool mc_backend_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif
