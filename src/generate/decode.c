/* decode.c: generation's forwards and token choices over a model (decode.h). */
#include "generate/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/ops.h"

static size_t act_size(const mc_model *m) { return mc_dtype_size(m->act_dtype); }

void mc_decoder_bytes(const mc_model *m, int slots, int64_t cap, size_t *device, size_t *host) {
    const size_t io = (size_t)m->max_tokens * 2 * sizeof(int32_t), ids = (size_t)slots * sizeof(int32_t);
    const size_t gathered = m->tp > 1 ? (size_t)slots * (size_t)m->padded_vocab * act_size(m) : 0;
    *device = (cap > 0 ? mc_kv_cache_bytes(m, cap, slots) : 0) + io + gathered + ids;
    *host = io + ids * (1 + MC_DECODE_DEPTH) + (size_t)slots * (size_t)m->padded_vocab * act_size(m) +
            (size_t)m->padded_vocab * (sizeof(float) + sizeof(mc_gen_scored));
}

/* Whether decode steps replay graphs (decode.h's banner). */
static bool graphs_wanted(const mc_model *m) {
    const char *e = getenv("MC_DECODE_GRAPHS");
    return m->be->graph_capture_begin && m->tp == 1 && !(e && strcmp(e, "0") == 0);
}

void mc_decoder_init(mc_decoder *d, mc_model *m, int slots, int64_t cap) {
    MC_ASSERT(slots >= 1 && slots <= m->head_chunk, "a decoder of %d slots over logits of %lld rows", slots,
              (long long)m->head_chunk);
    mc_backend *be = m->be;
    memset(d, 0, sizeof *d);
    d->m = m;
    d->be = be;
    d->slots = slots;
    if (cap > 0) mc_kv_cache_alloc(m, &d->cache, cap, slots);
    const int64_t T = m->max_tokens;
    d->mb = (mc_microbatch){.tokens = mc_tensor_1d(be->alloc(be, (size_t)T * 4), MC_I32, T),
                            .pos = mc_tensor_1d(be->alloc(be, (size_t)T * 4), MC_I32, T),
                            .labels = mc_tensor_none(),
                            .loss_mask = mc_tensor_none(),
                            .seg_start = mc_tensor_none()};
    d->host_tokens = be->host_alloc(be, (size_t)T * 4);
    d->host_pos = be->host_alloc(be, (size_t)T * 4);
    if (m->tp > 1) {
        const int64_t rows = (int64_t)m->tp * slots;
        d->gathered = mc_tensor_2d(be->alloc(be, (size_t)(rows * m->vocab_local) * act_size(m)), m->act_dtype, rows,
                                   m->vocab_local);
    }
    d->ids = mc_tensor_1d(be->alloc(be, (size_t)slots * 4), MC_I32, slots);
    d->host_ids = be->host_alloc(be, (size_t)slots * 4);
    d->host_ring = be->host_alloc(be, (size_t)slots * 4 * MC_DECODE_DEPTH);
    d->host_logits = be->host_alloc(be, (size_t)slots * (size_t)m->padded_vocab * act_size(m));
    d->row = mc_xmalloc(sizeof(float) * (size_t)m->padded_vocab);
    d->tmp = mc_xmalloc(sizeof(mc_gen_scored) * (size_t)m->padded_vocab);
    d->graphs = cap > 0 && graphs_wanted(m);
    if (d->graphs) {
        d->graph = mc_xcalloc((size_t)slots, sizeof(void *));
        d->stepped = mc_xcalloc((size_t)slots, sizeof(bool));
        d->greedy_graph = mc_xcalloc((size_t)slots, sizeof(void *));
        d->greedy_stepped = mc_xcalloc((size_t)slots, sizeof(bool));
    }
}

void mc_decoder_free(mc_decoder *d) {
    if (!d->m) return;
    mc_backend *be = d->be;
    if (d->graph)
        for (int n = 0; n < d->slots; n++) {
            be->graph_free(be, d->graph[n]);
            be->graph_free(be, d->greedy_graph[n]);
        }
    free(d->graph);
    free(d->stepped);
    free(d->greedy_graph);
    free(d->greedy_stepped);
    if (d->cache.buf) mc_kv_cache_free(d->m, &d->cache);
    be->free(be, d->mb.tokens.data);
    be->free(be, d->mb.pos.data);
    if (mc_tensor_present(&d->gathered)) be->free(be, d->gathered.data);
    be->free(be, d->ids.data);
    be->host_free(be, d->host_tokens);
    be->host_free(be, d->host_pos);
    be->host_free(be, d->host_ids);
    be->host_free(be, d->host_ring);
    be->host_free(be, d->host_logits);
    free(d->row);
    free(d->tmp);
    memset(d, 0, sizeof *d);
}

/* The forward's shape: [seq, batch] tokens and positions. */
static void set_shape(mc_decoder *d, int64_t seq, int64_t batch) {
    d->mb.seq = seq;
    d->mb.batch = batch;
    d->mb.tokens.shape[0] = d->mb.pos.shape[0] = seq * batch;
}

/* The forward's [seq, batch] tokens and positions, from the host mirrors, queued: the
 * mirrors are page-locked and not written again before the choice waits for the device
 * (or, pipelined, before the steps in flight are waited for). */
static void upload(mc_decoder *d, int64_t seq, int64_t batch) {
    mc_backend *be = d->be;
    MC_ASSERT(d->launched == d->waited, "new inputs of %lld tokens while %lld greedy steps are in flight",
              (long long)(seq * batch), (long long)(d->launched - d->waited));
    const int64_t n = seq * batch;
    set_shape(d, seq, batch);
    be->copy_h2d_async(be, d->mb.tokens.data, d->host_tokens, (size_t)n * 4);
    be->copy_h2d_async(be, d->mb.pos.data, d->host_pos, (size_t)n * 4);
}

void mc_decoder_prefill(mc_decoder *d, int slot, const int32_t *tokens, int n) {
    MC_ASSERT(d->cache.buf && slot >= 0 && slot < d->slots && n >= 1 && n <= d->m->seq && n <= d->cache.cap,
              "prefill of %d tokens into slot %d of %d (cache of %lld positions)", n, slot, d->slots,
              (long long)d->cache.cap);
    memcpy(d->host_tokens, tokens, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) d->host_pos[i] = i;
    upload(d, n, 1);
    mc_model_forward_cached(d->m, &d->mb, &d->cache, slot);
}

static void step_forward(mc_decoder *d) { mc_model_forward_cached(d->m, &d->mb, &d->cache, 0); }

/* Rows row0 .. row0 + n - 1's logits over the whole vocabulary, on every rank: this rank's
 * shard, or with tensor parallelism all ranks' shards gathered ([tp x n, vocab_local]). */
static mc_tensor choice_logits(mc_decoder *d, int64_t row0, int n) {
    mc_model *m = d->m;
    mc_tensor local = mc_model_head_logits(m, row0, n), x = local;
    if (m->tp > 1) {
        x = mc_tensor_rows(&d->gathered, 0, (int64_t)m->tp * n);
        mc_comm_all_gather(&m->comm->tp, d->be, &x, &local);
    }
    return x;
}

/* A pipelined greedy step's device work over the mb's current inputs: the forward, the
 * argmax into ids and the next step's inputs from it. */
static void greedy_step(mc_decoder *d) {
    const int n = (int)d->mb.batch;
    step_forward(d);
    mc_tensor x = choice_logits(d, 0, n), ids = mc_tensor_1d(d->ids.data, MC_I32, n);
    mc_op_argmax_rows(d->be, &ids, &x, d->m->cfg.vocab_size);
    mc_tensor tokens = mc_tensor_1d(d->mb.tokens.data, MC_I32, n), pos = mc_tensor_1d(d->mb.pos.data, MC_I32, n);
    mc_op_decode_advance(d->be, &tokens, &pos, &ids, d->cache.cap);
}

/* body's work (a step's) recorded as a graph, or NULL when the backend could not record it:
 * then graphs are off for this decoder, said once on stderr, and the caller runs the work
 * op by op (all of it: a failed capture may have run part of it, which rewrites the same
 * activations and cache entries). */
static void *step_capture(mc_decoder *d, void (*body)(mc_decoder *)) {
    mc_backend *be = d->be;
    mc_err why = {{0}};
    void *graph = NULL;
    if (be->graph_capture_begin(be, &why)) {
        body(d);
        graph = be->graph_capture_end(be, &why);
    }
    if (!graph) {
        fprintf(stderr, "megatron-c: warning: decode graphs off, every decode step runs op by op: %s\n", why.msg);
        d->graphs = false;
    }
    return graph;
}

/* body's work over n slots (a step's, its inputs in place): op by op the first time (one-time
 * work outside a capture) or when graphs are off, recorded into graph[n - 1] the second
 * time, replayed from then on; stepped[n - 1] says the first time has been. */
static void run_step(mc_decoder *d, int n, void **graph, bool *stepped, void (*body)(mc_decoder *)) {
    if (d->graphs) {
        void **g = &graph[n - 1];
        if (!*g && stepped[n - 1]) *g = step_capture(d, body);
        stepped[n - 1] = true;
        if (*g) {
            d->be->graph_launch(d->be, *g);
            return;
        }
    }
    body(d);
}

void mc_decoder_step(mc_decoder *d, int n, const int32_t *tokens, const int32_t *pos) {
    MC_ASSERT(d->cache.buf && n >= 1 && n <= d->slots, "a decode step over %d slots of %d", n, d->slots);
    memcpy(d->host_tokens, tokens, sizeof(int32_t) * (size_t)n);
    memcpy(d->host_pos, pos, sizeof(int32_t) * (size_t)n);
    upload(d, 1, n); /* outside the graph: its buffers are the graph's input */
    run_step(d, n, d->graph, d->stepped, step_forward);
}

void mc_decoder_greedy_launch(mc_decoder *d, int n, const int32_t *tokens, const int32_t *pos) {
    mc_backend *be = d->be;
    MC_ASSERT(d->cache.buf && n >= 1 && n <= d->slots && (tokens != NULL) == (pos != NULL),
              "a pipelined greedy step over %d slots of %d", n, d->slots);
    MC_ASSERT(d->launched - d->waited < MC_DECODE_DEPTH, "%lld greedy steps in flight, at most %d",
              (long long)(d->launched - d->waited), MC_DECODE_DEPTH);
    if (tokens) { /* (upload asserts that no step is in flight: the mirrors may be its source) */
        memcpy(d->host_tokens, tokens, sizeof(int32_t) * (size_t)n);
        memcpy(d->host_pos, pos, sizeof(int32_t) * (size_t)n);
        upload(d, 1, n);
    } else {
        MC_ASSERT(d->launched > 0 && n == d->greedy_n, "a greedy step over %d slots continuing one over %d", n,
                  d->launched > 0 ? d->greedy_n : 0);
        set_shape(d, 1, n);
    }
    run_step(d, n, d->greedy_graph, d->greedy_stepped, greedy_step);
    const int k = (int)(d->launched % MC_DECODE_DEPTH);
    be->copy_d2h_async(be, d->host_ring + (size_t)k * (size_t)d->slots, d->ids.data, (size_t)n * 4);
    be->mark(be, k);
    d->launched++;
    d->greedy_n = n;
}

const int32_t *mc_decoder_greedy_wait(mc_decoder *d) {
    MC_ASSERT(d->waited < d->launched, "a wait for a greedy step with none in flight");
    const int k = (int)(d->waited % MC_DECODE_DEPTH);
    d->be->wait_mark(d->be, k);
    d->waited++;
    return d->host_ring + (size_t)k * (size_t)d->slots;
}

void mc_decoder_window(mc_decoder *d, const int32_t *ctx, int len) {
    const int64_t W = d->m->seq;
    MC_ASSERT(len >= 1 && len <= W, "a window of %d tokens, the model's is %lld", len, (long long)W);
    memcpy(d->host_tokens, ctx, sizeof(int32_t) * (size_t)len);
    memset(d->host_tokens + len, 0, sizeof(int32_t) * (size_t)(W - len));
    for (int64_t s = 0; s < W; s++) d->host_pos[s] = (int32_t)s;
    upload(d, W, 1);
    mc_model_forward_only(d->m, &d->mb);
}

/* Element i of host logits of dtype dt, widened. */
static float widened(const char *host, mc_dtype dt, int64_t i) {
    switch (dt) {
    case MC_F64: return (float)((const double *)host)[i];
    case MC_F32: return ((const float *)host)[i];
    case MC_BF16: return mc_bf16_to_f32(((const uint16_t *)host)[i]);
    default: return mc_f16_to_f32(((const uint16_t *)host)[i]); /* MC_F16 */
    }
}

void mc_decoder_choose(mc_decoder *d, int64_t row0, int n, const mc_gen_params *const *params, const uint64_t *index,
                       int32_t *out) {
    mc_model *m = d->m;
    mc_backend *be = d->be;
    MC_ASSERT(n >= 1 && n <= d->slots && d->launched == d->waited, "a choice of %d rows, %d slots, %lld greedy steps in flight", n, d->slots, (long long)(d->launched - d->waited));
    mc_tensor x = choice_logits(d, row0, n);
    mc_tensor ids = mc_tensor_1d(d->ids.data, MC_I32, n);
    mc_op_argmax_rows(be, &ids, &x, m->cfg.vocab_size);
    bool draws = false;
    for (int i = 0; i < n; i++) draws = draws || (params[i] && params[i]->temperature > 0);
    if (draws) be->copy_d2h_async(be, d->host_logits, x.data, mc_tensor_bytes(&x));
    be->copy_d2h(be, d->host_ids, ids.data, (size_t)n * 4); /* the one wait of a greedy step */
    const int64_t V = m->vocab_local;
    const int vocab = m->cfg.vocab_size;
    for (int i = 0; i < n; i++) {
        if (!params[i]) continue;
        if (params[i]->temperature <= 0) {
            out[i] = d->host_ids[i];
            continue;
        }
        for (int r = 0; r < m->tp; r++) /* row i of each shard: ids [r V, (r + 1) V) */
            for (int64_t j = 0; j < V && r * V + j < vocab; j++)
                d->row[r * V + j] = widened(d->host_logits, m->act_dtype, ((int64_t)r * n + i) * V + j);
        out[i] = mc_gen_pick(d->row, vocab, params[i], index[i], d->tmp);
    }
}

int mc_decoder_continue_window(mc_decoder *d, const int32_t *prompt, int prompt_len, int n, const mc_gen_params *p,
                               int32_t *out, bool (*keep)(void *ctx, int32_t token), void *ctx) {
    const int W = (int)d->m->seq;
    int32_t *win = mc_xmalloc(sizeof(int32_t) * (size_t)W);
    int len = prompt_len < W ? prompt_len : W; /* the prompt's last W tokens */
    memcpy(win, prompt + (prompt_len - len), sizeof(int32_t) * (size_t)len);
    int made = 0;
    while (made < n) {
        if (len == W) { /* a full window: slide by one */
            memmove(win, win + 1, sizeof(int32_t) * (size_t)(W - 1));
            len--;
        }
        mc_decoder_window(d, win, len);
        const uint64_t index = (uint64_t)made;
        mc_decoder_choose(d, len - 1, 1, &p, &index, &out[made]);
        const int32_t token = out[made++];
        win[len++] = token;
        if (keep && !keep(ctx, token)) break;
    }
    free(win);
    return made;
}
