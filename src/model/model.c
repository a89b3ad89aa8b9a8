/* model.c: creation (shard sizes, buffers, activation plan) of the decoder. The forward
 * and backward passes are in model_forward.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

/* Llama 3.1 frequency scaling (Megatron's apply_rope_scaling): factor from the flag,
 * low/high frequency factors 1 and 4, original context 8192. */
static double llama31_scale(double freq, double factor) {
    const double low_ff = 1.0, high_ff = 4.0, old_ctx = 8192.0;
    double low_wavelen = old_ctx / low_ff, high_wavelen = old_ctx / high_ff;
    double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) return freq;
    if (wavelen > low_wavelen) return freq / factor;
    double smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff);
    return (1.0 - smooth) * freq / factor + smooth * freq;
}

static void build_rope_tables(mc_model *m, mc_arena *a) {
    const mc_model_config *c = &m->cfg;
    m->rot_dim = (int)(c->kv_channels * c->rotary_percent);
    /* an inference model's positions stop at its seq_length (the generator's max positions) */
    int64_t half = m->rot_dim / 2, P = m->inference ? m->seq : c->max_position_embeddings;
    mc_dtype dt = mc_stat_dtype(m->act_dtype);
    size_t bytes = (size_t)(P * half) * mc_dtype_size(dt);
    m->rope_cos = mc_tensor_2d(mc_arena_alloc(a, bytes), dt, P, half);
    m->rope_sin = mc_tensor_2d(mc_arena_alloc(a, bytes), dt, P, half);
    if (a->measuring) return;
    void *hc = mc_xmalloc(bytes), *hs = mc_xmalloc(bytes);
    for (int64_t k = 0; k < half; k++) {
        /* inv_freq as Megatron/HF compute it: in fp32 from (2k / rot_dim). */
        float expo = (float)(2 * k) / (float)m->rot_dim;
        double inv = 1.0 / pow((double)c->rotary_base, (double)expo);
        if (c->use_rope_scaling) inv = llama31_scale(inv, c->rope_scaling_factor);
        for (int64_t p = 0; p < P; p++) {
            double ang = (double)p * inv;
            if (dt == MC_F64) {
                ((double *)hc)[p * half + k] = cos(ang);
                ((double *)hs)[p * half + k] = sin(ang);
            } else {
                ((float *)hc)[p * half + k] = (float)cos(ang);
                ((float *)hs)[p * half + k] = (float)sin(ang);
            }
        }
    }
    m->be->copy_h2d(m->be, m->rope_cos.data, hc, bytes);
    m->be->copy_h2d(m->be, m->rope_sin.data, hs, bytes);
    free(hc);
    free(hs);
}

static mc_tensor alloc2(mc_arena *a, mc_dtype dt, int64_t r, int64_t c) {
    return mc_tensor_2d(mc_arena_alloc(a, (size_t)(r * c) * mc_dtype_size(dt)), dt, r, c);
}

static mc_tensor alloc1(mc_arena *a, mc_dtype dt, int64_t n) {
    return mc_tensor_1d(mc_arena_alloc(a, (size_t)n * mc_dtype_size(dt)), dt, n);
}

/* The largest run of the gradient buffer the first backward's head may borrow: all of it
 * but the output layer's gradient, before it or after it (from a 64-element boundary). */
static void borrow_range(const mc_model *m, int64_t *lo, int64_t *hi) {
    const mc_param *o = &m->params[m->out_w];
    int64_t after = (o->offset + o->numel + 63) / 64 * 64;
    if (after > m->numel) after = m->numel;
    /* not the hosted range: the layers' activations live there while the head runs */
    const int64_t first = (m->host_hi + 63) / 64 * 64;
    if (o->offset - first >= m->numel - after) *lo = first, *hi = o->offset;
    else *lo = after, *hi = m->numel;
}

/* Logits rows that range holds. */
static int64_t borrow_rows(const mc_model *m) {
    int64_t lo, hi;
    borrow_range(m, &lo, &hi);
    return (int64_t)((size_t)(hi - lo) * mc_dtype_size(m->grad_dtype) /
                     ((size_t)m->vocab_local * mc_dtype_size(m->act_dtype)));
}

void mc_model_set_first_head_chunk(mc_model *m, int64_t rows) {
    m->head_chunk_first = 0;
    m->logits_first = mc_tensor_none();
    if (rows <= 0) return;
    MC_ASSERT(rows <= borrow_rows(m) && rows <= m->rowmax.shape[0],
              "first head chunk of %lld rows: the gradient buffer holds %lld, the row statistics %lld", (long long)rows,
              (long long)borrow_rows(m), (long long)m->rowmax.shape[0]);
    borrow_range(m, &m->borrow_lo, &m->borrow_hi);
    m->head_chunk_first = rows;
    m->logits_first = mc_tensor_2d((char *)m->grad_buf + (size_t)m->borrow_lo * mc_dtype_size(m->grad_dtype),
                                   m->act_dtype, rows, m->vocab_local);
}

/* Rows of a head chunk of at most `fit` rows for N tokens: from 256 up a power of two (see
 * plan_activations), at least 1, at most N. */
static int64_t head_rows(int64_t fit, int64_t N) {
    int64_t rows = fit;
    if (rows >= 256) {
        rows = 256;
        while (rows * 2 <= fit) rows *= 2;
    }
    if (rows < 1) rows = 1;
    return rows > N ? N : rows;
}

/* LM head chunk: at most 2^24 logits at a time on the CPU (64 MB in fp32, cache-sized
 * work); on a GPU 2^28 (512 MB in bf16), or as many as fit in the layers' backward scratch
 * when that is more (GPT-2 124M at batch 64: 0.9 GB, 8192 rows). Every chunk's
 * weight-gradient GEMM reads and writes the whole fp32 main_grad of the output layer (2.1
 * GB for a 128256 x 2048 head), so halving the chunk cost 0.9% of the 1.5B step
 * (measured). The token count is rounded down to a power of two from 256 up, so that the
 * chunks tile N exactly and the GEMMs keep whole tiles (odd remainders made cuBLASLt pick
 * split-K).
 * On a GPU, a whole micro-batch's logits at once (as Megatron and PyTorch hold them) when
 * some training backward would run its head in chunks otherwise (micro-batches accumulate,
 * or the gradient buffer cannot lend the first backward a whole micro-batch's logits) and
 * they take no more than the activations the layers keep: one GEMM each way instead of
 * chunks, and the output layer's gradient read and written once a micro-batch instead of
 * once a chunk (GPT-2 124M at batch 64: a 1.7% faster step for 5.3 GiB more, still below
 * PyTorch's peak; bench/RESULTS.md). With one micro-batch a step the 1.5B shape's backward
 * borrows (mc_model_set_first_head_chunk) and its plan keeps the short chunk. */
int64_t mc_model_head_chunk(const mc_head_plan *hp) {
    const int64_t N = hp->tokens;
    int64_t limit = hp->gpu ? (int64_t)1 << 28 : (int64_t)1 << 24;
    int64_t in_scratch = (int64_t)(hp->scratch / hp->elem);
    if (hp->gpu && in_scratch > limit) limit = in_scratch;
    int64_t chunk = head_rows(limit / hp->vocab, N);
    const size_t whole = (size_t)(N * hp->vocab) * hp->elem;
    if (hp->gpu && chunk < N && (hp->micro_batches > 1 || hp->borrow_rows < N) && whole <= hp->kept) chunk = N;
    return chunk;
}

/* A forward-only (inference) model's activations: one layer's buffers, which every layer
 * reuses since no backward needs them kept, the residual stream alternating between two;
 * no backward scratch, no losses; the LM head's logits for max_batch rows (a decode step's
 * new tokens). A forward holds up to max_tokens tokens (mc_model_options.inference). */
static void plan_inference(mc_model *m, mc_arena *a) {
    const mc_model_config *c = &m->cfg;
    const int64_t N = m->max_tokens, h = c->hidden_size, d = c->kv_channels;
    const mc_dtype at = m->act_dtype, st = mc_stat_dtype(at);
    const bool ln = c->normalization == MC_NORM_LAYERNORM;
    const mc_tensor res[2] = {alloc2(a, at, N, h), alloc2(a, at, N, h)};
    mc_layer_acts one = {
        .mean1 = ln ? alloc1(a, st, N) : mc_tensor_none(),
        .rstd1 = alloc1(a, st, N),
        .qkv = alloc2(a, at, N, m->qkv_local),
        .att = alloc2(a, at, N, (int64_t)m->heads_local * d),
        .lse = alloc1(a, st, N * m->heads_local),
        .x_mid = alloc2(a, at, N, h),
        .mean2 = ln ? alloc1(a, st, N) : mc_tensor_none(),
        .rstd2 = alloc1(a, st, N),
        .fc1 = alloc2(a, at, N, m->fc1_local),
        .act = m->recompute_act ? mc_tensor_none() : alloc2(a, at, N, m->ffn_local),
    };
    m->emb_out = res[0];
    for (int l = 0; l < c->num_layers; l++) {
        m->acts[l] = one;
        m->acts[l].x_in = res[l % 2];
    }
    m->x_final = res[c->num_layers % 2];
    m->yf = alloc2(a, at, N, h);
    m->meanf = ln ? alloc1(a, st, N) : mc_tensor_none();
    m->rstdf = alloc1(a, st, N);
    m->dtmp = alloc2(a, at, N, h); /* the row-parallel linears' partial sums */
    m->ytmp = alloc2(a, at, N, h);
    m->act_tmp = m->recompute_act ? alloc2(a, at, N, m->ffn_local) : mc_tensor_none();
    m->head_chunk = m->max_batch;
    m->logits = alloc2(a, at, m->max_batch, m->vocab_local);
    if (c->position_embedding_type == MC_POS_ROPE) build_rope_tables(m, a);
}

/* The whole activation plan; run once on measuring arenas, once on the real ones. `keep`
 * holds what outlives a pass or is read by the embedding's backward (the RoPE tables, the
 * residual-stream gradient dres, dtmp), `a` the rest, which may live in the embedding's
 * gradient (mc_model.host_hi); without hosting both are the one arena. */
static void plan_activations(mc_model *m, mc_arena *keep, mc_arena *a) {
    if (m->inference) {
        plan_inference(m, a);
        return;
    }
    const mc_model_config *c = &m->cfg;
    int64_t N = m->max_batch * m->seq, h = c->hidden_size, d = c->kv_channels;
    int64_t Nl = m->sp ? N / m->tp : N; /* residual-stream tokens on this rank */
    mc_dtype at = m->act_dtype, st = mc_stat_dtype(at);
    size_t plan_start = a->used, keep_start = keep->used;
    bool ln = c->normalization == MC_NORM_LAYERNORM;
    /* Backward's residual-stream gradient, and the [N, h] temporary of forward, head and
     * backward (dtmp). */
    m->dres = alloc2(keep, at, Nl, h);
    m->dtmp = alloc2(keep, at, N, h);
    const size_t kept_apart = keep == a ? 0 : keep->used - keep_start;
    /* Residual stream: res[l] is the input of layer l, res[L] the final residual. */
    mc_tensor prev = alloc2(a, at, Nl, h);
    m->emb_out = prev;
    for (int l = 0; l < c->num_layers; l++) {
        mc_layer_acts *la = &m->acts[l];
        la->x_in = prev;
        la->mean1 = ln ? alloc1(a, st, Nl) : mc_tensor_none();
        la->rstd1 = alloc1(a, st, Nl);
        la->qkv = alloc2(a, at, N, m->qkv_local);
        la->att = alloc2(a, at, N, (int64_t)m->heads_local * d);
        la->lse = alloc1(a, st, m->max_batch * m->heads_local * m->seq);
        la->x_mid = alloc2(a, at, Nl, h);
        la->mean2 = ln ? alloc1(a, st, Nl) : mc_tensor_none();
        la->rstd2 = alloc1(a, st, Nl);
        la->fc1 = alloc2(a, at, N, m->fc1_local);
        la->act = m->recompute_act ? mc_tensor_none() : alloc2(a, at, N, m->ffn_local);
        prev = alloc2(a, at, Nl, h);
    }
    m->x_final = prev;
    m->yf = alloc2(a, at, N, h);
    m->meanf = ln ? alloc1(a, st, Nl) : mc_tensor_none();
    m->rstdf = alloc1(a, st, Nl);
    /* The layers' backward scratch (their gradients, the norm output and the rewritten
     * activation) and the LM head's logits chunk are never live at once: the head runs after
     * the last layer's forward and before the first layer's backward. They share bytes (0.4
     * GB of scratch on the 1.5B bench shape). */
    size_t shared_from = a->used;
    m->dqkv = alloc2(a, at, N, m->qkv_local);
    m->datt = alloc2(a, at, N, (int64_t)m->heads_local * d);
    m->dact = alloc2(a, at, N, m->ffn_local);
    m->ytmp = alloc2(a, at, N, h);
    /* SwiGLU's backward writes the activation again over dact, element by element after
     * reading it (mc_op_swiglu_bwd); the recomputed GELU needs both at once. */
    m->act_tmp = !m->recompute_act ? mc_tensor_none() : c->swiglu ? m->dact : alloc2(a, at, N, m->ffn_local);
    size_t scratch = a->used - shared_from;
    bool gpu = m->be->device == MC_DEVICE_CUDA;
    const int64_t lend = gpu && m->out_w >= 0 ? borrow_rows(m) : 0; /* rows the gradient buffer lends */
    mc_head_plan hp = {.gpu = gpu,
                       .tokens = N,
                       .vocab = m->vocab_local,
                       .borrow_rows = lend,
                       .micro_batches = m->micro_batches,
                       .elem = mc_dtype_size(at),
                       .scratch = scratch,
                       .kept = shared_from - plan_start + kept_apart};
    int64_t chunk = mc_model_head_chunk(&hp);
    m->head_chunk = chunk;
    mc_arena_rewind(a, shared_from);
    m->logits = alloc2(a, at, chunk, m->vocab_local);
    mc_arena_skip_to_peak(a);
    /* The first backward after mc_model_zero_grads may run its head in longer chunks held in
     * the gradient buffer, which holds nothing that pass reads before writing it but the
     * output layer's gradient (mc_model_set_first_head_chunk): the 1.5B bench shape's single
     * micro-batch a step then runs one chunk instead of four, with no memory added. */
    int64_t first = lend > 0 ? head_rows(lend, N) : 0;
    if (first <= chunk) first = 0;
    int64_t rows_max = first > chunk ? first : chunk;
    m->rowmax = alloc1(a, st, rows_max);
    m->gmax = alloc1(a, st, rows_max);
    m->stats = alloc2(a, st, 2, rows_max);
    m->tok_loss = alloc1(a, st, N); /* every token's loss, copied to the host once per pass */
    mc_model_set_first_head_chunk(m, first);
    if (c->position_embedding_type == MC_POS_ROPE) build_rope_tables(m, keep);
}

/* Whether a training pass's activations may live in the embedding's gradient: it is written
 * by the pass's last op (the embedding's backward, which reads only dres and dtmp of them),
 * and read by the step after it, before the next pass; so with one micro-batch a step (the
 * gradient of the first is not held while the second runs) and an output layer of its own
 * (a tied one's gradient is written by the head, first). PyTorch likewise allocates the
 * gradients only as the backward frees the activations. */
static bool hosting_possible(const mc_model *m, const mc_model_options *o) {
    return !o->inference && !o->keep_activations_apart && o->micro_batches == 1 && m->out_w != m->emb_w;
}

/* Plans the activations on measuring arenas: act_bytes, and with hosting the bytes that
 * live in the embedding's gradient (act_hosted) and the rest (act_keep_bytes). */
static void measure_activations(mc_model *m, bool host) {
    mc_arena body, keep;
    mc_arena_init_measure(&body, "activations (plan)");
    mc_arena_init_measure(&keep, "activations kept apart (plan)");
    m->host_hi = host ? m->params[m->emb_w].numel : 0; /* borrow_range reads it while planning */
    plan_activations(m, host ? &keep : &body, &body);
    const size_t room = (size_t)m->host_hi * mc_dtype_size(m->grad_dtype);
    m->act_hosted = body.peak < room ? body.peak : room / MC_ARENA_ALIGN * MC_ARENA_ALIGN;
    m->act_keep_bytes = keep.peak;
    m->act_bytes = keep.peak + body.peak;
}

/* Whether every size of the model can be counted in 64 bits. A bound in double (which
 * cannot wrap) on the elements the model holds, below 2^60 bytes' worth: every buffer has
 * at most R rows (tokens, positions, vocabulary, or W), and a layer's parameters,
 * gradients and activations take at most 16 W + R columns of them together, W being the sum
 * of a layer's widths (global, so at least the shard's); the embeddings, the head and the
 * backward scratch count as 4 layers more. Past this check the exact sizes below (ints for
 * shard widths, int64 offsets, size_t bytes) cannot overflow. */
static bool sizes_countable(const mc_model_options *o) {
    const mc_model_config *c = &o->cfg;
    double d = c->kv_channels, heads = c->num_attention_heads, f = c->ffn_hidden_size;
    double W = c->hidden_size + (heads + 2.0 * c->num_query_groups) * d + heads * d + (c->swiglu ? 3 : 2) * f + 64;
    double N = (double)o->max_batch * (double)c->seq_length; /* at least an inference model's max_tokens */
    double R = fmax(fmax(N, (double)c->max_position_embeddings), fmax((double)o->padded_vocab, W));
    double elems = ((double)c->num_layers + 4) * R * (16 * W + R);
    return elems * 8 < 0x1p60;
}

int mc_model_plan(mc_model *m, const mc_model_options *o, mc_backend *be, mc_comm *comm, mc_err *err) {
    memset(m, 0, sizeof *m);
    if (!sizes_countable(o))
        return mc_err_set(err,
                          "a model of %d layers, hidden size %d, sequence length %d and micro-batch %lld is too large to "
                          "plan: its buffers may exceed 2^60 bytes",
                          o->cfg.num_layers, o->cfg.hidden_size, o->cfg.seq_length, (long long)o->max_batch);
    m->cfg = o->cfg;
    m->padded_vocab = o->padded_vocab;
    m->be = be;
    m->comm = comm;
    m->param_dtype = o->param_dtype;
    m->grad_dtype = o->grad_dtype;
    m->act_dtype = o->act_dtype;
    m->seed = o->seed;
    const mc_model_config *c = &m->cfg;
    m->tp = comm->tp.size;
    m->tp_rank = comm->tp.rank;
    int tp = m->tp;
    m->sp = o->sequence_parallel && tp > 1;
    m->recompute_act = c->swiglu || o->selective_recompute;
    m->deterministic = o->deterministic;
    m->heads_local = c->num_attention_heads / tp;
    m->groups_local = c->num_query_groups >= tp ? c->num_query_groups / tp : 1;
    m->qkv_local = (m->heads_local + 2 * m->groups_local) * c->kv_channels;
    m->ffn_local = c->ffn_hidden_size / tp;
    m->fc1_local = c->swiglu ? 2 * m->ffn_local : m->ffn_local;
    m->vocab_local = m->padded_vocab / tp;
    m->vocab_start = (int64_t)m->tp_rank * m->vocab_local;
    m->max_batch = o->max_batch;
    m->seq = c->seq_length;
    m->inference = o->inference;
    m->max_tokens = o->inference ? (m->max_batch > m->seq ? m->max_batch : m->seq) : m->max_batch * m->seq;
    MC_ASSERT(!(m->inference && m->sp), "an inference model runs without sequence parallelism");
    m->micro_batches = o->micro_batches;

    mc_model_build_table(m, &o->layout);
    m->acts = mc_xcalloc((size_t)c->num_layers, sizeof(mc_layer_acts));
    measure_activations(m, hosting_possible(m, o));
    return MC_OK;
}

void mc_model_bytes(const mc_model *m, size_t *params, size_t *grads, size_t *acts) {
    *params = (size_t)m->numel * mc_dtype_size(m->param_dtype);
    *grads = m->inference ? 0 : (size_t)m->numel * mc_dtype_size(m->grad_dtype);
    *acts = m->act_bytes - m->act_hosted;
}

/* An arena over memory someone else owns: the hosted activations' block. */
static void *fixed_memory(void *ctx, size_t bytes) {
    (void)bytes;
    return ctx;
}
static void not_freed(void *ctx, void *p) { (void)ctx, (void)p; }

void mc_model_alloc(mc_model *m) {
    mc_backend *be = m->be;
    size_t params, grads, acts;
    mc_model_bytes(m, &params, &grads, &acts);
    m->param_buf = be->alloc(be, params);
    be->zero(be, m->param_buf, params);
    mc_arena_allocator backend_memory = mc_backend_arena_allocator(be);
    if (m->host_hi > 0) {
        /* One block: the activations that do not fit the embedding's gradient, then the
         * gradient buffer, the embedding's first; the activations run from the block's start
         * into that gradient. */
        const size_t body = m->act_bytes - m->act_keep_bytes, spill = body - m->act_hosted;
        m->grad_block = be->alloc(be, spill + grads);
        m->grad_buf = (char *)m->grad_block + spill;
        be->zero(be, m->grad_buf, grads);
        mc_arena_allocator hosted = {.alloc = fixed_memory, .free = not_freed, .ctx = m->grad_block};
        mc_arena_init(&m->act_keep, "activations kept apart", &backend_memory, m->act_keep_bytes);
        mc_arena_init(&m->act_arena, "activations", &hosted, body);
        plan_activations(m, &m->act_keep, &m->act_arena);
    } else {
        if (!m->inference) { /* before the activations: the first backward's head borrows from it */
            m->grad_buf = be->alloc(be, grads);
            be->zero(be, m->grad_buf, grads);
        }
        mc_arena_init(&m->act_arena, "activations", &backend_memory, m->act_bytes);
        plan_activations(m, &m->act_arena, &m->act_arena);
        m->act_bytes = m->act_arena.capacity;
    }
    if (m->inference) return;
    size_t ntok = (size_t)(m->max_batch * m->seq);
    m->host_loss = mc_xmalloc(sizeof(double) * ntok); /* room for F32 or F64 elements */
    m->host_mask = mc_xmalloc(sizeof(double) * ntok);
}

int mc_model_create(mc_model *m, const mc_model_options *o, mc_backend *be, mc_comm *comm, mc_err *err) {
    MC_TRY(mc_model_plan(m, o, be, comm, err));
    mc_model_alloc(m);
    return MC_OK;
}

static int by_offset(const void *a, const void *b) {
    int64_t x = (*(const mc_param *const *)a)->offset, y = (*(const mc_param *const *)b)->offset;
    return (x > y) - (x < y);
}

/* Zeroes the gradients of [lo, hi) outside the grad_overwritten ranges (so padding stays
 * zero too), one backend call per gap between them. */
static void zero_gaps(mc_model *m, int64_t lo, int64_t hi) {
    const mc_param **over = mc_xmalloc(sizeof(mc_param *) * (size_t)(m->nparams + 1));
    int n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].grad_overwritten) over[n++] = &m->params[i];
    qsort(over, (size_t)n, sizeof *over, by_offset);
    size_t esz = mc_dtype_size(m->grad_dtype);
    int64_t at = lo;
    for (int i = 0; i <= n && at < hi; i++) {
        int64_t end = i < n ? over[i]->offset : hi;
        if (end > hi) end = hi;
        if (end > at) m->be->zero(m->be, (char *)m->grad_buf + (size_t)at * esz, (size_t)(end - at) * esz);
        if (i < n && over[i]->offset + over[i]->numel > at) at = over[i]->offset + over[i]->numel;
    }
    free(over);
}

void mc_model_zero_grads(mc_model *m) {
    /* the hosted range is zeroed by the next backward, before the embedding's (which adds),
     * the borrowed one after its head */
    if (m->head_chunk_first > 0) {
        zero_gaps(m, m->host_hi, m->borrow_lo);
        zero_gaps(m, m->borrow_hi, m->numel);
    } else {
        zero_gaps(m, m->host_hi, m->numel);
    }
    m->grads_reset = true;
    m->grads_held = false;
}

void mc_model_zero_borrowed(mc_model *m) { zero_gaps(m, m->borrow_lo, m->borrow_hi); }

void mc_model_zero_hosted(mc_model *m) { zero_gaps(m, 0, m->host_hi); }

void mc_model_free(mc_model *m) {
    if (!m->be) return;
    mc_arena_free(&m->act_arena);
    mc_arena_free(&m->act_keep);
    m->be->free(m->be, m->param_buf);
    if (m->grad_block) m->be->free(m->be, m->grad_block);
    else if (m->grad_buf) m->be->free(m->be, m->grad_buf);
    free(m->params);
    free(m->buckets);
    free(m->layers);
    free(m->acts);
    free(m->host_loss);
    free(m->host_mask);
    memset(m, 0, sizeof *m);
}
