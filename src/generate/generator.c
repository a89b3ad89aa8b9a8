/* generator.c: mc_generator (generator.h) over the trainer's model and its key/value cache
 * path (mc_trainer_sample_stream), one sequence after another. */
#include "generate/generator.h"

#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "ckpt/ckpt.h"
#include "train/trainer_internal.h"

struct mc_generator {
    mc_trainer *t;
    int64_t max_positions;
    int32_t eod;
    bool recompute;
};

mc_generator *mc_generator_create(const mc_config *user, int64_t max_positions, mc_err *err) {
    if (!user->ckpt.load) {
        mc_err_set(err, "generate: no checkpoint (--load DIR)");
        return NULL;
    }
    mc_config cfg = *user;
    int64_t it;
    if (mc_ckpt_read_model_config(cfg.ckpt.load, &cfg.model, &it, err) != MC_OK) return NULL;
    const int64_t P = cfg.model.max_position_embeddings > 0 ? cfg.model.max_position_embeddings : cfg.model.seq_length;
    if (max_positions <= 0) max_positions = P;
    if (cfg.model.max_position_embeddings > 0 && max_positions > P) {
        mc_err_set(err, "generate: %lld positions asked for, the model has %lld", (long long)max_positions,
                   (long long)P);
        return NULL;
    }
    cfg.ckpt.finetune = true;
    cfg.data.mock_data = true;
    cfg.model.attention_dropout = cfg.model.hidden_dropout = 0.0f;
    if (cfg.optim.lr <= 0) cfg.optim.lr = 1e-4; /* no training: any valid schedule */
    cfg.train.train_iters = 1;
    cfg.train.micro_batch_size = 1;
    cfg.train.global_batch_size = 0;
    cfg.model.seq_length = (int)max_positions;
    /* The trainer builds data it never reads here: Megatron's mock data, whose tokenizer is
     * the Null one over the model's vocabulary (prompts are the caller's token ids). */
    cfg.data.tokenizer_type = MC_TOKENIZER_NULL;
    mc_trainer *t = mc_trainer_create(&cfg, err);
    if (!t) return NULL;
    mc_generator *g = mc_xcalloc(1, sizeof *g);
    g->t = t;
    g->max_positions = max_positions;
    g->eod = -1;
    return g;
}

const mc_config *mc_generator_config(const mc_generator *g) { return &g->t->cfg; }

void mc_generator_set_eod(mc_generator *g, int32_t eod) { g->eod = eod; }

void mc_generator_set_recompute(mc_generator *g, bool on) { g->recompute = on; }

typedef struct relay {
    mc_gen_on_token user;
    void *ctx;
    int i;
    bool stop_at_eod;
    int32_t eod;
    double first_at;
} relay;

static bool relay_token(void *p, int32_t token) {
    relay *r = p;
    if (r->first_at == 0) r->first_at = mc_time_now();
    if (r->stop_at_eod && token == r->eod) return false;
    return r->user ? r->user(r->ctx, r->i, token) : true;
}

static int check_seq(const mc_generator *g, const mc_gen_seq *s, int i, mc_err *err) {
    const mc_gen_params *p = &s->params;
    const int vocab = g->t->cfg.model.vocab_size;
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

int mc_generator_run(mc_generator *g, mc_gen_seq *seqs, int n, mc_gen_on_token on_token, void *ctx,
                     mc_gen_stats *stats, mc_err *err) {
    for (int i = 0; i < n; i++)
        if (check_seq(g, &seqs[i], i, err) != MC_OK) return MC_ERR;
    mc_trainer *t = g->t;
    const mc_log_config saved_log = t->cfg.log;
    const uint64_t saved_seed = t->cfg.train.seed;
    int rc = MC_OK;
    for (int i = 0; i < n && rc == MC_OK; i++) {
        mc_gen_seq *s = &seqs[i];
        t->cfg.log.sample_temperature = s->params.temperature;
        t->cfg.log.sample_top_k = s->params.top_k;
        t->cfg.log.sample_top_p = s->params.top_p;
        t->cfg.train.seed = s->params.seed;
        relay r = {.user = on_token, .ctx = ctx, .i = i, .stop_at_eod = s->params.stop_at_eod && g->eod >= 0,
                   .eod = g->eod};
        const double t0 = mc_time_now();
        int made = 0;
        if (g->recompute) {
            rc = mc_trainer_sample(t, s->prompt, s->prompt_len, s->params.max_new_tokens, s->out, err);
            made = s->params.max_new_tokens;
            for (int k = 0; k < made && rc == MC_OK; k++) /* the same stops as the cached path's */
                if (!relay_token(&r, s->out[k])) made = k + 1;
            r.first_at = t0; /* no prefill: every token is a whole forward */
        } else {
            rc = mc_trainer_sample_stream(t, s->prompt, s->prompt_len, s->params.max_new_tokens, relay_token, &r,
                                          s->out, &made, err);
        }
        const double t2 = mc_time_now();
        /* the token that ended the sequence (an end of document) is not returned */
        s->produced = made;
        if (made > 0 && r.stop_at_eod && s->out[made - 1] == g->eod) s->produced = made - 1;
        if (stats && rc == MC_OK) {
            stats->prefill_s += r.first_at - t0;
            stats->prefill_tokens += s->prompt_len;
            stats->decode_s += t2 - r.first_at;
            stats->decode_tokens += g->recompute ? made : made - 1;
        }
    }
    t->cfg.log = saved_log;
    t->cfg.train.seed = saved_seed;
    return rc;
}

void mc_generator_free(mc_generator *g) {
    if (!g) return;
    mc_trainer_free(g->t);
    free(g);
}
