/* generator.c: mc_generator (generator.h): an inference model built from a checkpoint, and
 * its sequences continued together.
 *
 * Building: the process groups, the backend and an inference model (no gradients, optimizer
 * state, data or training buffers; model.h) of the checkpoint's shape, its weights loaded
 * from the checkpoint under this run's tensor-parallel layout, and a decoder (decode.h)
 * whose key/value cache has a slot of max_positions for each of max_batch sequences.
 *
 * Running: sequences take the lowest free slots in order; a sequence's prompt is one
 * forward into its slot (prefill), which chooses its first token; then every decode step is
 * one forward over slots 0 .. the highest held one, a token each. A slot whose sequence has
 * ended is masked (its row computed and ignored) until the next sequence takes it, straight
 * after: slots never move, so no cache is ever copied, and a decode step has one of at most
 * max_batch shapes (a CUDA graph each); the batch shrinks from the top as sequences end,
 * and on a GPU a decode step costs about the same at batch 1 as at 32 (it reads every
 * weight once either way), so masked rows cost little. While every held slot's sequence
 * is greedy, steps run pipelined (decode.h), the host a step behind the device, until a
 * sequence ends. */
#include "generate/generator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "ckpt/ckpt.h"
#include "generate/decode.h"
#include "train/model_options.h"

struct mc_generator {
    mc_config cfg; /* validated, the model's shape from the checkpoint */
    mc_comm comm;
    mc_backend *be;
    mc_model model;
    mc_decoder dec;
    int64_t max_positions;
    int32_t eod;
    bool recompute;
};

/* "1.5 MiB" */
static const char *bytes_text(double b, char buf[32]) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

/* Everything after the process groups; cfg holds the user's flags and the checkpoint's
 * model. */
static int build(mc_generator *g, int max_batch, mc_err *err) {
    mc_config *cfg = &g->cfg;
    MC_TRY(mc_config_validate(cfg, g->comm.world_size, err));
    MC_TRY(mc_backend_from_config(cfg, &g->comm, &g->be, err));
    /* no choice timed on first use: the same prompt gives the same tokens run to run, and
     * a new batch size's first decode step does not stall on GEMM algorithm timing (a
     * decode step's GEMMs are bound by reading the weights, whatever the algorithm) */
    g->be->reproducible = true;
    const mc_dtype dt = mc_model_dtype_from_config(cfg, g->be);
    mc_model_options mo = mc_model_options_from_config(cfg, g->comm.sizes.dp, dt, MC_F32, dt, max_batch, NULL);
    mo.inference = true;
    MC_TRY(mc_model_plan(&g->model, &mo, g->be, &g->comm, err));
    size_t params, grads, acts, dec_dev, dec_host;
    mc_model_bytes(&g->model, &params, &grads, &acts);
    mc_decoder_bytes(&g->model, max_batch, g->max_positions, &dec_dev, &dec_host);
    const size_t need = params + acts + dec_dev, have = g->be->memory_available(g->be);
    if (need > have) {
        char a[32], b[32];
        return mc_err_set(err,
                          "generate: the model and a key/value cache of %d sequences x %lld positions need %s, the %s "
                          "backend has %s (ask for fewer sequences at once, or fewer positions)",
                          max_batch, (long long)g->max_positions, bytes_text((double)need, a), g->be->name,
                          bytes_text((double)have, b));
    }
    mc_model_alloc(&g->model);
    mc_decoder_init(&g->dec, &g->model, max_batch, g->max_positions);
    return MC_OK;
}

static int load_weights(mc_generator *g, mc_err *err) {
    const mc_ckpt_config *k = &g->cfg.ckpt;
    mc_ckpt_state st = {.model = &g->model, .comm = &g->comm, .cfg = &g->cfg};
    mc_ckpt_load_opts o = {.dir = k->load, .step = k->ckpt_step, .finetune = true, .flag = "--load"};
    mc_ckpt_progress pr = {0};
    bool loaded = false;
    MC_TRY(mc_ckpt_load(&st, &o, &pr, &loaded, err));
    if (!loaded) return mc_err_set(err, "--load %s holds no checkpoint", k->load);
    return MC_OK;
}

/* One line on stderr (rank 0): what the generator holds, by kind. */
static void report_memory(const mc_generator *g) {
    if (g->comm.rank != 0) return;
    size_t params, grads, acts, dec_dev, dec_host;
    mc_model_bytes(&g->model, &params, &grads, &acts);
    mc_decoder_bytes(&g->model, g->dec.slots, g->max_positions, &dec_dev, &dec_host);
    const size_t cache = mc_kv_cache_bytes(&g->model, g->max_positions, g->dec.slots);
    char w[32], c[32], a[32], b[32], h[32];
    fprintf(stderr,
            "generate: memory per rank (%s backend): weights %s (%s), key/value cache %s (%d sequences x %lld "
            "positions), activations %s, buffers %s; host %s\n",
            g->be->name, bytes_text((double)params, w), mc_dtype_name(g->model.param_dtype),
            bytes_text((double)cache, c), g->dec.slots, (long long)g->max_positions, bytes_text((double)acts, a),
            bytes_text((double)(dec_dev - cache), b), bytes_text((double)dec_host, h));
    fflush(stderr);
}

mc_generator *mc_generator_create_batched(const mc_config *user, int64_t max_positions, int max_batch, mc_err *err) {
    if (!user->ckpt.load) {
        mc_err_set(err, "generate: no checkpoint (--load DIR)");
        return NULL;
    }
    if (max_batch < 1) {
        mc_err_set(err, "generate: %d sequences at once (--batch-size): at least 1 please", max_batch);
        return NULL;
    }
    mc_generator *g = mc_xcalloc(1, sizeof *g);
    mc_config_copy(&g->cfg, user);
    mc_config *cfg = &g->cfg;
    int64_t it;
    if (mc_ckpt_read_model_config(cfg->ckpt.load, &cfg->model, &it, err) != MC_OK) {
        mc_config_free(cfg);
        free(g);
        return NULL;
    }
    const int64_t P = cfg->model.max_position_embeddings > 0 ? cfg->model.max_position_embeddings : cfg->model.seq_length;
    if (max_positions <= 0) max_positions = P;
    if (cfg->model.max_position_embeddings > 0 && max_positions > P) {
        mc_err_set(err, "generate: %lld positions asked for, the model has %lld", (long long)max_positions, (long long)P);
        mc_config_free(cfg);
        free(g);
        return NULL;
    }
    g->max_positions = max_positions;
    g->eod = -1;
    /* A training configuration that validates: no dropout, one sequence of max_positions
     * a micro-batch (the model's window), mock data never opened; the key/value cache runs
     * without sequence parallelism, a training-memory scheme. */
    cfg->ckpt.finetune = true;
    cfg->data.mock_data = true;
    cfg->data.tokenizer_type = MC_TOKENIZER_NULL; /* the data's; prompts come as ids */
    cfg->model.attention_dropout = cfg->model.hidden_dropout = 0.0f;
    cfg->model.seq_length = (int)max_positions;
    cfg->parallel.sequence_parallel = false;
    if (cfg->optim.lr <= 0) cfg->optim.lr = 1e-4;
    cfg->train.train_iters = 1;
    cfg->train.micro_batch_size = 1;
    cfg->train.global_batch_size = 0;
    const mc_parallel_config *p = &cfg->parallel;
    if (mc_comm_init_from_env(&g->comm, p->tensor_model_parallel_size, p->pipeline_model_parallel_size,
                              p->context_parallel_size, p->expert_model_parallel_size, p->distributed_timeout_minutes,
                              err) != MC_OK) {
        mc_config_free(cfg);
        free(g);
        return NULL;
    }
    const int rc = build(g, max_batch, err);
    if (mc_comm_agree_on_setup(&g->comm, rc, mc_config_hash(&g->cfg), "the generation configuration", err) != MC_OK ||
        load_weights(g, err) != MC_OK) {
        mc_generator_free(g);
        return NULL;
    }
    report_memory(g);
    return g;
}

mc_generator *mc_generator_create(const mc_config *cfg, int64_t max_positions, mc_err *err) {
    return mc_generator_create_batched(cfg, max_positions, 1, err);
}

const mc_config *mc_generator_config(const mc_generator *g) { return &g->cfg; }

void mc_generator_set_eod(mc_generator *g, int32_t eod) { g->eod = eod; }

void mc_generator_set_recompute(mc_generator *g, bool on) { g->recompute = on; }

static int check_seq(const mc_generator *g, const mc_gen_seq *s, int i, mc_err *err) {
    const mc_gen_params *p = &s->params;
    const int vocab = g->cfg.model.vocab_size;
    if (s->prompt_len < 1) return mc_err_set(err, "generate: sequence %d: the prompt is empty", i + 1);
    if (p->max_new_tokens < 1) return mc_err_set(err, "generate: sequence %d: max_new_tokens must be >= 1", i + 1);
    if (!g->recompute && (int64_t)s->prompt_len + p->max_new_tokens > g->max_positions)
        return mc_err_set(err, "generate: sequence %d: %d prompt and %d new tokens exceed the %lld positions", i + 1,
                          s->prompt_len, p->max_new_tokens, (long long)g->max_positions);
    if (!(p->temperature >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1))
        return mc_err_set(err, "generate: sequence %d: temperature >= 0, top_k >= 0 and top_p in (0, 1] please",
                          i + 1);
    for (int k = 0; k < s->prompt_len; k++)
        if (s->prompt[k] < 0 || s->prompt[k] >= vocab)
            return mc_err_set(err, "generate: sequence %d: token id %d is outside the vocabulary [0, %d)", i + 1,
                              s->prompt[k], vocab);
    return MC_OK;
}

/* ---- one run ---- */

typedef struct run {
    mc_generator *g;
    mc_gen_seq *seqs;
    mc_gen_on_token on_token;
    void *ctx;
    bool *ended_at_eod; /* [n] */
} run;

/* Sequence i's new token: kept in its out; whether the sequence goes on (not at its end of
 * document, the caller's callback willing, budget left). */
static bool take(run *r, int i, int32_t token) {
    mc_gen_seq *s = &r->seqs[i];
    s->out[s->produced++] = token;
    if (s->params.stop_at_eod && r->g->eod >= 0 && token == r->g->eod) {
        r->ended_at_eod[i] = true;
        return false;
    }
    if (r->on_token && !r->on_token(r->ctx, i, token)) return false;
    return s->produced < s->params.max_new_tokens;
}

typedef struct window_keep {
    run *r;
    int i;
} window_keep;

/* (continue_window has written the token at the same place of out already) */
static bool keep_window(void *p, int32_t token) {
    window_keep *w = p;
    return take(w->r, w->i, token);
}

/* --no-kv-cache: each sequence alone, every token a forward over its window (the check of
 * the cache, not a fast path). */
static void run_window(run *r, int n, mc_gen_stats *stats) {
    mc_generator *g = r->g;
    for (int i = 0; i < n; i++) {
        mc_gen_seq *s = &r->seqs[i];
        window_keep w = {.r = r, .i = i};
        const double t0 = mc_time_now();
        s->produced = 0;
        mc_decoder_continue_window(&g->dec, s->prompt, s->prompt_len, s->params.max_new_tokens, &s->params, s->out,
                                   keep_window, &w);
        if (stats) {
            stats->decode_s += mc_time_now() - t0;
            stats->decode_tokens += s->produced;
        }
    }
}

/* A decode step's chosen ids given to the `active` sequences in slots order[0 .. active)
 * (sequence order): each one's next token and position, or its slot freed (seq_of -1) when
 * it has ended; order keeps the ones going on. Returns how many do. */
static int take_step(run *r, int *seq_of, int *order, int active, const int32_t *chosen, int32_t *tokens,
                     int32_t *pos) {
    int going = 0;
    for (int k = 0; k < active; k++) {
        const int b = order[k], i = seq_of[b];
        if (take(r, i, chosen[b])) {
            tokens[b] = chosen[b];
            pos[b]++;
            order[going++] = b;
        } else {
            seq_of[b] = -1;
        }
    }
    return going;
}

/* The sequences through the cache's slots (see the banner). */
static void run_cached(run *r, int n, mc_gen_stats *stats) {
    mc_decoder *d = &r->g->dec;
    const int B = d->slots;
    int *seq_of = mc_xmalloc(sizeof(int) * (size_t)B); /* a slot's sequence, or -1 */
    int32_t *tokens = mc_xcalloc((size_t)B, sizeof(int32_t)), *pos = mc_xcalloc((size_t)B, sizeof(int32_t));
    int32_t *chosen = mc_xmalloc(sizeof(int32_t) * (size_t)B);
    const mc_gen_params **params = mc_xmalloc(sizeof(*params) * (size_t)B);
    uint64_t *index = mc_xmalloc(sizeof(uint64_t) * (size_t)B);
    int *order = mc_xmalloc(sizeof(int) * (size_t)B);
    for (int b = 0; b < B; b++) seq_of[b] = -1;
    int next = 0; /* the next sequence to take a slot */
    for (;;) {
        /* free slots, lowest first, to the waiting sequences: the prompt in, the first token out */
        for (int b = 0; b < B; b++)
            while (seq_of[b] < 0 && next < n) {
                const int i = next++;
                mc_gen_seq *s = &r->seqs[i];
                const double t0 = mc_time_now();
                mc_decoder_prefill(d, b, s->prompt, s->prompt_len);
                const mc_gen_params *p = &s->params;
                const uint64_t first = 0;
                int32_t token;
                mc_decoder_choose(d, s->prompt_len - 1, 1, &p, &first, &token);
                if (stats) {
                    stats->prefill_s += mc_time_now() - t0;
                    stats->prefill_tokens += s->prompt_len;
                }
                if (!take(r, i, token)) continue;
                seq_of[b] = i;
                tokens[b] = token;
                pos[b] = s->prompt_len;
            }
        int rows = 0;
        for (int b = 0; b < B; b++)
            if (seq_of[b] >= 0) rows = b + 1;
        if (rows == 0) break;
        /* decode steps over slots 0 .. rows - 1 */
        double t0 = mc_time_now();
        int active = 0;
        bool greedy = true;
        int budget = INT32_MAX; /* steps before the first sequence runs out of new tokens */
        for (int b = 0; b < rows; b++) {
            const int i = seq_of[b];
            params[b] = i >= 0 ? &r->seqs[i].params : NULL;
            index[b] = i >= 0 ? (uint64_t)r->seqs[i].produced : 0;
            if (i < 0) {
                tokens[b] = pos[b] = 0; /* masked: its own slot's position 0 */
                continue;
            }
            order[active++] = b;
            greedy = greedy && params[b]->temperature <= 0;
            const int left = params[b]->max_new_tokens - r->seqs[i].produced;
            budget = left < budget ? left : budget;
        }
        for (int k = 1; k < active; k++) /* the tokens go out in sequence order */
            for (int j = k; j > 0 && seq_of[order[j]] < seq_of[order[j - 1]]; j--) {
                const int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        if (!greedy) { /* one step, its logits drawn from on the host */
            mc_decoder_step(d, rows, tokens, pos);
            mc_decoder_choose(d, 0, rows, params, index, chosen);
            take_step(r, seq_of, order, active, chosen, tokens, pos);
            if (stats) {
                stats->decode_s += mc_time_now() - t0;
                stats->decode_tokens += active;
            }
            continue;
        }
        /* greedy: pipelined steps while the slots' sequences stay the same (an end of
         * document seen one step late costs one step; budgets are known, so no step is
         * launched past the first sequence's end of budget) */
        mc_decoder_greedy_launch(d, rows, tokens, pos);
        int launched = 1, inflight = 1;
        bool same = true;
        while (inflight > 0) {
            if (same && inflight < MC_DECODE_DEPTH && launched < budget) {
                mc_decoder_greedy_launch(d, rows, NULL, NULL);
                launched++;
                inflight++;
                continue;
            }
            const int32_t *ids = mc_decoder_greedy_wait(d); /* valid until the next launch */
            inflight--;
            const int before = active;
            active = take_step(r, seq_of, order, active, ids, tokens, pos);
            same = same && active == before;
            if (stats) {
                const double now = mc_time_now();
                stats->decode_s += now - t0;
                stats->decode_tokens += before;
                t0 = now;
            }
        }
    }
    free(seq_of);
    free(tokens);
    free(pos);
    free(chosen);
    free(params);
    free(index);
    free(order);
}

int mc_generator_run(mc_generator *g, mc_gen_seq *seqs, int n, mc_gen_on_token on_token, void *ctx,
                     mc_gen_stats *stats, mc_err *err) {
    for (int i = 0; i < n; i++)
        if (check_seq(g, &seqs[i], i, err) != MC_OK) return MC_ERR;
    run r = {.g = g, .seqs = seqs, .on_token = on_token, .ctx = ctx, .ended_at_eod = mc_xcalloc((size_t)n + 1, sizeof(bool))};
    for (int i = 0; i < n; i++) seqs[i].produced = 0;
    if (g->recompute) run_window(&r, n, stats);
    else run_cached(&r, n, stats);
    for (int i = 0; i < n; i++) /* the end of document that ended a sequence is not returned */
        seqs[i].produced -= r.ended_at_eod[i];
    free(r.ended_at_eod);
    return MC_OK;
}

void mc_generator_free(mc_generator *g) {
    if (!g) return;
    if (g->be) {
        mc_decoder_free(&g->dec);
        mc_model_free(&g->model);
    }
    mc_comm_free(&g->comm); /* NCCL communicators before the device's backend */
    if (g->be) g->be->destroy(g->be);
    mc_config_free(&g->cfg);
    free(g);
}
