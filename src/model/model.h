/* model.h: the GPT/Llama decoder with explicit forward and backward.
 *
 * One model serves both families; Megatron's flags choose the pieces (LayerNorm/RMSNorm,
 * learned/rotary positions, GELU/SwiGLU, biases, GQA, tied/untied head).
 *
 * Memory (all planned at creation, nothing allocated per step):
 * - parameters: one flat buffer in `param_dtype`, laid out layer by layer in forward
 *   order, every tensor starting at a multiple of 64 elements; each tensor is this rank's
 *   tensor-parallel shard, named by its global Megatron name (model_params.c).
 * - gradients: one flat buffer in `grad_dtype` (Megatron's main_grad), same layout, so
 *   buckets for data-parallel reduction are contiguous ranges taken from the end.
 * - activations: one arena holding what backward needs for one micro-batch, plus
 *   scratch for backward; sized from (micro_batch_size, seq_length) up front.
 * An inference model (mc_model_options.inference: generation) has no gradients and keeps
 * one layer's activations, which every layer reuses.
 *
 * Activations are [s, b, h] (token t = s*B + b). Tensor-parallel collectives are called on
 * the tp group; with TP = 1 they are no-ops. */
#ifndef MC_MODEL_MODEL_H
#define MC_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "comm/comm.h"
#include "megatron.h"
#include "tensor/backend.h"

typedef enum { MC_INIT_NORMAL = 0, MC_INIT_ZEROS, MC_INIT_ONES } mc_init_kind;
/* How a tensor is split across tensor-parallel ranks. */
typedef enum {
    MC_TP_REPLICATED = 0,
    MC_TP_ROWS,        /* column-parallel linear / vocab-parallel embedding: output rows split */
    MC_TP_COLS,        /* row-parallel linear: input columns split */
    MC_TP_QKV_ROWS,    /* QKV rows by query group (kv heads replicated when groups < TP) */
    MC_TP_SWIGLU_ROWS, /* fc1 rows: this rank's gate rows then its up rows */
} mc_tp_split;

/* Gradients that are partial on each tensor-parallel rank and must be summed over a TP
 * group once per step, before the data-parallel reduction: the norm weights and the
 * position embeddings with sequence parallelism (each rank saw only its tokens), and the
 * key/value rows of QKV when a query group's KV heads are replicated over several TP
 * ranks (each rank's query heads contribute their part). */
typedef enum { MC_SYNC_NONE = 0, MC_SYNC_TP, MC_SYNC_TP_KV_ROWS } mc_grad_sync;

typedef struct mc_param {
    char name[96];       /* global Megatron name, e.g. decoder.layers.0.mlp.linear_fc1.weight */
    int ndim;
    int64_t shape[2];    /* this rank's shard */
    int64_t global_shape[2];
    int64_t offset;      /* element offset in the flat buffers */
    int64_t numel;
    bool no_weight_decay;/* biases and norm weights (Megatron: 1-D params) */
    mc_tp_split split;
    mc_grad_sync sync;
    mc_init_kind init;
    float init_std;
    /* Every backward pass writes this gradient exactly once per micro-batch through
     * linear_bwd (the linear layers' weights and biases; an untied output layer per head
     * chunk), so after mc_model_zero_grads the first micro-batch overwrites it and it needs
     * no zeroing pass. A parameter some micro-batch may leave untouched (say, an expert
     * that got no tokens) must not have it. */
    bool grad_overwritten;
} mc_param;

/* A contiguous range of the flat buffers that data-parallel ranks reduce (or shard)
 * together. Buckets are numbered in backward order: bucket 0 holds the last parameters,
 * whose gradients are final first. hi - lo is a multiple of the layout's pad multiple, so
 * the range splits into equal shards for reduce-scatter/all-gather; the padding is zero
 * and belongs to no parameter. */
typedef struct mc_grad_bucket {
    int64_t lo, hi;
    int first_param, last_param; /* parameter indices in the bucket, inclusive (forward order) */
} mc_grad_bucket;

/* How to lay out the flat buffers for data parallelism. */
typedef struct mc_model_layout {
    int64_t bucket_elems; /* target bucket size in elements; 0: one bucket for everything */
    int64_t pad_multiple; /* every bucket's size is a multiple of this (Megatron: lcm(DP, 128)); 0: 1 */
} mc_model_layout;

/* What a model is built from: its settings and the facts of the run it needs, filled by
 * the caller from a validated configuration (train/model_options.h does so from an
 * mc_config). The model checks none of it again. */
typedef struct mc_model_options {
    mc_model_config cfg;      /* validated, derived fields set (kv_channels, num_query_groups, ffn_hidden_size) */
    int padded_vocab;         /* vocab_size padded to a multiple of make_vocab_size_divisible_by x TP */
    uint64_t seed;            /* init and dropout streams */
    bool sequence_parallel;   /* (with TP > 1) the residual stream holds N/TP tokens a rank */
    bool selective_recompute; /* --recompute-granularity selective: the MLP activation is rewritten in backward */
    bool deterministic;       /* --deterministic-mode: kernels that sum in a fixed order only */
    int micro_batches;        /* a step (gradient accumulation) */
    int64_t max_batch;        /* sequences a micro-batch holds at most */
    mc_dtype param_dtype, grad_dtype, act_dtype;
    mc_model_layout layout;   /* the buckets; zeros: one bucket, no padding multiple */
    /* Forward only (generation): no gradient buffer, one layer's activations reused by every
     * layer, no losses; a forward holds max(max_batch, seq_length) tokens, so up to max_batch
     * sequences of one token (a decode step) or one sequence of up to seq_length (a prompt, a
     * recomputed window). Without sequence parallelism. */
    bool inference;
    /* Keep the activations in memory of their own even where a training pass's could live in
     * the embedding's gradient (mc_model.host_hi); the same results, for tests. */
    bool keep_activations_apart;
} mc_model_options;

/* Callbacks that let data parallelism overlap with the passes (all optional). */
typedef struct mc_model_hooks {
    void *ctx;
    /* Backward: the gradients at offsets >= frontier are final for this micro-batch. */
    void (*grads_ready)(void *ctx, int64_t frontier);
    /* Forward: the parameters in [lo, hi) are about to be read. */
    void (*params_needed)(void *ctx, int64_t lo, int64_t hi);
} mc_model_hooks;

/* Indices into mc_model.params; -1 when the model has no such tensor. */
typedef struct mc_layer_params {
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
} mc_layer_params;

/* Saved activations of one layer for one micro-batch (views into the arena). */
/* With sequence parallelism the residual-stream tensors and norm statistics hold this
 * rank's N/TP tokens ("Nl" below; Nl = N without SP).
 * The norm outputs are never saved: each norm's backward writes its output again in the
 * pass it makes anyway (from the saved input and statistics, bit for bit), just before
 * the next linear's weight gradient needs it. Nor is SwiGLU's activation: its backward
 * writes it again the same way. That is 2h (+ ffn) values per token and layer less, at no
 * measurable cost (3.0 GiB on the 1.5B bench shape, H200, bench/RESULTS.md). GELU's
 * activation is saved unless --recompute-granularity selective, which recomputes it in a
 * pass of its own. With SP the norm outputs are gathered again in backward, as Megatron
 * re-gathers the inputs of its sequence-parallel linears. */
typedef struct mc_layer_acts {
    mc_tensor x_in;      /* [Nl, h] layer input (residual stream) */
    mc_tensor mean1, rstd1; /* first norm's statistics [Nl] */
    mc_tensor qkv;       /* [N, qkv_local] after RoPE */
    mc_tensor att, lse;  /* [N, heads_local*d], [B, heads_local, S] */
    mc_tensor x_mid;     /* [Nl, h] after the attention residual */
    mc_tensor mean2, rstd2;
    mc_tensor fc1;       /* [N, ffn_local] or [N, 2*ffn_local] with SwiGLU */
    mc_tensor act;       /* [N, ffn_local] GELU's activation (absent when recomputed) */
} mc_layer_acts;

/* One micro-batch in backend memory, [s, b] token order. */
typedef struct mc_microbatch {
    int64_t seq, batch;
    mc_tensor tokens;    /* [N] I32 */
    mc_tensor labels;    /* [N] I32 */
    mc_tensor loss_mask; /* [N] act dtype (F32/F64) */
    mc_tensor pos;       /* [N] I32 position ids */
    mc_tensor seg_start; /* optional [B, S] I32 (--reset-attention-mask) */
} mc_microbatch;

typedef struct mc_model {
    mc_model_config cfg; /* validated and derived (kv_channels, groups, ffn set) */
    int padded_vocab;
    mc_backend *be;
    mc_comm *comm;
    mc_dtype param_dtype, grad_dtype, act_dtype;
    uint64_t seed;

    /* This rank's shard sizes. */
    int tp, tp_rank;
    bool sp;              /* sequence parallel: the residual stream holds N/TP tokens */
    int heads_local, groups_local, qkv_local, ffn_local, fc1_local, vocab_local;
    int64_t vocab_start;

    mc_param *params;
    int nparams;
    mc_grad_bucket *buckets;
    int nbuckets;
    mc_model_hooks hooks;
    int64_t numel;        /* flat buffer length including alignment and bucket padding */
    int64_t numel_unpadded;
    mc_layer_params *layers;
    int emb_w, pos_w, lnf_w, lnf_b, out_w; /* out_w == emb_w when tied */

    void *param_buf;      /* [numel] param_dtype */
    void *grad_buf;       /* [numel] grad_dtype; NULL in an inference model */
    /* Gradient elements [0, host_hi) (the embedding's) hold act_hosted bytes of a training
     * pass's activations until its embedding backward zeroes and writes them (0: none; see
     * model.c's hosting_possible). The activations that do not fit come just before
     * grad_buf in one allocation, grad_block; the rest (act_keep_bytes) in act_keep. */
    int64_t host_hi;
    size_t act_hosted, act_keep_bytes;
    void *grad_block;
    mc_arena act_keep;
    /* Set by mc_model_zero_grads: the next backward overwrites the grad_overwritten
     * gradients (whose contents are stale until then) instead of accumulating. */
    bool grads_reset;
    /* A backward has written gradients since the last mc_model_zero_grads (until then the
     * buffer holds only zeros and stale values, and may lend itself as scratch). */
    bool grads_held;

    /* RoPE tables [max_pos, rot_dim/2] in act dtype precision (F32/F64). */
    mc_tensor rope_cos, rope_sin;
    int rot_dim;

    /* Activations for one micro-batch of up to (max_batch, seq) tokens; micro_batches
     * of them a step (the gradient accumulation). An inference model's forward holds up to
     * max_tokens tokens (max_batch x seq for training). */
    int64_t max_batch, seq, max_tokens;
    bool inference;
    int micro_batches;
    mc_arena act_arena;
    mc_layer_acts *acts;  /* [num_layers] */
    mc_tensor emb_out;    /* [Nl, h] input of layer 0 */
    bool recompute_act;   /* the MLP activation rewritten in backward (SwiGLU; GELU with selective) */
    bool deterministic;   /* --deterministic-mode: kernels that sum in a fixed order only */
    mc_tensor ytmp;       /* [N, h] a norm output (gathered with SP), any layer */
    mc_tensor act_tmp;    /* [N, ffn_local] with recompute_act: an MLP activation, any layer */
    mc_tensor x_final, yf, meanf, rstdf; /* final residual [Nl, h], final norm output [N, h], stats [Nl] */
    /* dres [Nl, h]: residual-stream gradient; dtmp [N, h]: full-width temporaries (row-
     * parallel outputs, gathered gradients); dqkv, datt, dact: backward scratch (the MLP's
     * fc1 gradient overwrites the layer's saved fc1 output instead) */
    mc_tensor dres, dtmp, dqkv, datt, dact;
    /* LM head in token chunks: logits [chunk, vocab_local] (reused as dlogits); an inference
     * model's chunk is max_batch rows */
    mc_tensor logits, rowmax, gmax, stats, tok_loss; /* gmax: the TP group's row maxima */
    int64_t head_chunk;
    /* The first backward after mc_model_zero_grads: its head chunk (0: head_chunk) and the
     * logits [head_chunk_first, vocab_local] it uses, held in the gradient buffer's
     * elements [borrow_lo, borrow_hi): all of it but the output layer's gradient, which
     * the head writes, is written or zeroed only after the head in that pass
     * (mc_model_zero_grads leaves the range's zeroing to the pass, after its head). */
    int64_t head_chunk_first, borrow_lo, borrow_hi;
    mc_tensor logits_first;
    size_t act_bytes;
    /* host staging: a pass's per-token losses and loss mask as stored (F32 or F64) */
    void *host_loss, *host_mask;
} mc_model;

/* mc_model_plan then mc_model_alloc. */
int mc_model_create(mc_model *m, const mc_model_options *o, mc_backend *be, mc_comm *comm, mc_err *err);
/* Everything but the backend memory: shard sizes, the parameter table and buckets, and the
 * activation plan, measured (act_bytes). A model whose sizes could not be counted in 64
 * bits is an error, nothing allocated. Then mc_model_bytes says what mc_model_alloc will
 * take, and mc_model_free releases a plan not allocated. */
int mc_model_plan(mc_model *m, const mc_model_options *o, mc_backend *be, mc_comm *comm, mc_err *err);
/* Backend bytes of the planned parameters, gradients (0 for an inference model) and
 * activations. */
void mc_model_bytes(const mc_model *m, size_t *params, size_t *grads, size_t *acts);
/* Allocates the planned buffers (zeroed parameters and gradients, the activation arena). */
void mc_model_alloc(mc_model *m);
void mc_model_free(mc_model *m);

/* Fills the parameters: normal(0, std) for matrices (std / sqrt(2 L) for the attention and
 * MLP output projections, Megatron's scaled init), 1 for norm weights, 0 for biases.
 * Each element is a pure function of (seed, global name, global index), so every
 * parallel layout starts from the same model. */
void mc_model_init_params(mc_model *m, uint64_t seed);

int mc_model_find_param(const mc_model *m, const char *name);
/* A view of a parameter (or its gradient) in backend memory. */
mc_tensor mc_model_param(const mc_model *m, int idx);
mc_tensor mc_model_grad(const mc_model *m, int idx);
/* Global (row, col) of a local element of parameter p on this rank (for init, checkpoints). */
void mc_model_local_to_global(const mc_model *m, const mc_param *p, int64_t row, int64_t col, int64_t *grow,
                              int64_t *gcol);
/* The same for the shard of TP rank tp_rank. */
void mc_model_local_to_global_on(const mc_model *m, const mc_param *p, int tp_rank, int64_t row, int64_t col,
                                 int64_t *grow, int64_t *gcol);

/* The elements of parameter p that no other tensor-parallel rank also holds, or that this
 * rank stands for among those that do: a count of leading elements (0: none). Replicated
 * parameters are TP rank 0's; the key and value rows of a query group replicated over
 * several TP ranks (groups < TP) are the group's first rank's, the others keeping their
 * query rows only. Norms count these once (as Megatron's get_grad_norm_fp32 leaves
 * duplicates out), and checkpoints store each element once. */
int64_t mc_model_unique_prefix(const mc_model *m, const mc_param *p);

/* The first backward's head chunk (see mc_model.head_chunk_first): `rows` (0: none), at
 * most what the borrowed range and the head's row statistics hold. The plan sets it on a
 * GPU, where it is longer than head_chunk (a GPU's chunk is bounded by memory; the CPU's
 * is sized for its caches); tests set it to exercise the path anywhere. */
void mc_model_set_first_head_chunk(mc_model *m, int64_t rows);

/* Resets the gradients for the next optimizer step: zeroes those that backward
 * accumulates into and marks the rest (mc_param.grad_overwritten) for the next backward
 * to overwrite, which saves a pass over most of the gradient buffer. Within the range the
 * next backward's head borrows (head_chunk_first > 0) that backward zeroes them instead,
 * after its head. */
void mc_model_zero_grads(mc_model *m);

/* Forward (and, when `backward`, backward) of one micro-batch. Returns on the host the sum
 * of masked token losses and the number of masked tokens. Gradients accumulate into the
 * gradient buffer scaled by grad_scale (d loss_sum), the first backward after
 * mc_model_zero_grads writing the grad_overwritten ones; `rng_stream` names this
 * micro-batch's dropout draws (unique per micro-batch and iteration). */
void mc_model_forward_backward(mc_model *m, const mc_microbatch *mb, bool backward, double grad_scale,
                               uint64_t rng_stream, bool train, double *loss_sum, double *num_tokens);
/* A training micro-batch (forward and backward, train = true) as mc_model_forward_backward,
 * without waiting for the device: the per-token losses ([S*B], unmasked, in the element
 * type of mc_model_loss_dtype) are queued for copying into host_loss (memory from
 * be->host_alloc), where they are valid after the next be->sync(). The trainer sums them
 * with the loss mask it uploaded, so a step waits for the device once, not per micro-batch. */
void mc_model_train_microbatch(mc_model *m, const mc_microbatch *mb, double grad_scale, uint64_t rng_stream,
                               void *host_loss);
mc_dtype mc_model_loss_dtype(const mc_model *m); /* F32, or F64 for F64 activations */
/* Megatron's [sum of masked losses, number of tokens] of n per-token losses and their loss
 * mask (host arrays, each F32 or F64), summed in token order: the one definition both the
 * synchronous pass above and the trainer's deferred sums use, so they agree bit for bit. */
void mc_model_sum_losses(const void *loss, mc_dtype loss_dt, const void *mask, mc_dtype mask_dt, int64_t n,
                         double *loss_sum, double *num_tokens);

/* The final norm's output of a forward without the LM head (train = false): for
 * generation's window recompute, which then takes mc_model_head_logits of one row. */
void mc_model_forward_only(mc_model *m, const mc_microbatch *mb);

/* ---- generation with a key/value cache ----
 * Per layer [batch, cap, this rank's query groups, 2, kv_channels] in the activation dtype
 * (backend.h's attention_kv_fwd): a slot of cap positions for each of batch sequences.
 * mc_model_forward_cached runs mb's [seq, batch] new tokens, the sequences in the cache's
 * slots slot0 .. slot0 + batch - 1, each token at its own position mb->pos[s * batch + b]
 * (RoPE, learned positions and the cache read them on the device, so every sequence has
 * its own length), through every layer, storing their keys and values and attending over
 * their slots; then the final norm's output is in place for mc_model_head_logits. Not with
 * sequence parallelism; seq x batch at most the tokens a forward holds (max_tokens). */
typedef struct mc_kv_cache {
    mc_tensor *layers;
    int n;
    int64_t cap, batch;
    void *buf; /* all layers' caches, one allocation */
} mc_kv_cache;
/* Backend bytes of a cache of batch slots of cap positions. */
size_t mc_kv_cache_bytes(const mc_model *m, int64_t cap, int64_t batch);
void mc_kv_cache_alloc(mc_model *m, mc_kv_cache *c, int64_t cap, int64_t batch);
void mc_kv_cache_free(mc_model *m, mc_kv_cache *c);
void mc_model_forward_cached(mc_model *m, const mc_microbatch *mb, mc_kv_cache *c, int64_t slot0);

/* This rank's logits (its vocabulary shard, [n, vocab_local] in the activation dtype) of
 * rows row0 .. row0 + n - 1 (row t * batch + b) of the last forward's final-norm output, in
 * the model's logits buffer: valid until the next forward; n at most head_chunk. */
mc_tensor mc_model_head_logits(mc_model *m, int64_t row0, int64_t n);

/* This rank's logits [N, vocab_local] of a micro-batch into host memory, as F32 (for
 * tests and export checks; allocates a host staging buffer). */
void mc_model_logits(mc_model *m, const mc_microbatch *mb, float *out);

/* Parameter count of the whole model (all ranks), excluding padding. */
int64_t mc_model_num_params_global(const mc_model *m);

#endif
