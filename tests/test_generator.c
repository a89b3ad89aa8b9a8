/* test_generator.c: generate/generator.h on the tiny Llama 3.1 transformers wrote
 * (tests/fixtures/hf/llama31), on the CPU. Sequences of different prompt lengths, token
 * budgets, sampling settings and seeds continued together each get the tokens they get
 * alone, and the greedy ones transformers' tokens (greedy.json: a prompt extended by its
 * first k greedy tokens continues with the rest); fewer slots than sequences (they wait for
 * one) change nothing; sequences that end early, at their end of document or at their
 * callback's word, leave the others' tokens as they were; the callback sees every token in
 * order; bad sequences are refused naming the sequence. And the inference model's plan:
 * no gradients, and activations that do not grow with the layers. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "check.h"
#include "comm/comm.h"
#include "generate/generator.h"
#include "model/model.h"
#include "tiny_llama.h"
#include "train/convert.h"
#include "train/model_options.h"

#define FIX "tests/fixtures/hf/llama31"
enum { NSEQ = 6, MAX_NEW = 14, POSITIONS = 24 };

static char g_tmp[256], g_ckpt[300];
static int32_t g_prompt[2][8], g_greedy[2][16]; /* greedy.json: two prompts and transformers' continuations */

/* The sequences: prompt p extended by its first k greedy tokens, budget, sampling. */
typedef struct seq_spec {
    int p, k, max_new;
    double temperature, top_p;
    int top_k;
    uint64_t seed;
} seq_spec;
static const seq_spec k_specs[NSEQ] = {
    {0, 0, 12, 0, 1, 0, 0},    /* greedy, 8 prompt tokens */
    {1, 5, 9, 0, 1, 0, 0},     /* greedy, 13 */
    {0, 3, 10, 0.9, 1, 50, 7}, /* drawn, 11 */
    {1, 0, 6, 1.2, 0.8, 0, 8}, /* drawn with a nucleus, 8 */
    {1, 2, 3, 0, 1, 0, 0},     /* greedy, 10, a short budget */
    {0, 1, 14, 1.0, 1, 0, 7},  /* drawn, 9, the seed of sequence 3 */
};

typedef struct seq_set {
    mc_gen_seq s[NSEQ];
    int32_t prompt[NSEQ][24], out[NSEQ][MAX_NEW];
} seq_set;

static void make_seqs(seq_set *set) {
    memset(set, 0, sizeof *set);
    for (int i = 0; i < NSEQ; i++) {
        const seq_spec *sp = &k_specs[i];
        memcpy(set->prompt[i], g_prompt[sp->p], sizeof g_prompt[0]);
        memcpy(set->prompt[i] + 8, g_greedy[sp->p], sizeof(int32_t) * (size_t)sp->k);
        set->s[i] = (mc_gen_seq){.prompt = set->prompt[i],
                                 .prompt_len = 8 + sp->k,
                                 .params = {.max_new_tokens = sp->max_new,
                                            .temperature = sp->temperature,
                                            .top_k = sp->top_k,
                                            .top_p = sp->top_p,
                                            .seed = sp->seed},
                                 .out = set->out[i]};
    }
}

static mc_generator *open_generator(int max_batch) {
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.ckpt.load = mc_xstrdup(g_ckpt);
    cfg.train.device = MC_DEVICE_CPU_ONLY;
    cfg.log.quiet = true;
    mc_err err;
    mc_generator *g = mc_generator_create_batched(&cfg, POSITIONS, max_batch, &err);
    CHECK(g, "%s", err.msg);
    mc_config_free(&cfg);
    return g;
}

/* A run's record of the callback: every (sequence, token) in the order they came. */
typedef struct calls {
    int n, seq[NSEQ * MAX_NEW];
    int32_t token[NSEQ * MAX_NEW];
    int stop_seq, stop_after; /* return false on this sequence's stop_after-th token (-1: never) */
} calls;

static bool record(void *ctx, int i, int32_t token) {
    calls *c = ctx;
    c->seq[c->n] = i;
    c->token[c->n++] = token;
    int seen = 0;
    for (int k = 0; k < c->n; k++) seen += c->seq[k] == i;
    return !(i == c->stop_seq && seen == c->stop_after);
}

/* Sequence i of a set run alone (a set of one), into out / *produced. */
static void run_alone(mc_generator *g, const seq_set *all, int i, int32_t *out, int *produced) {
    mc_gen_seq one = all->s[i];
    one.out = out;
    mc_err err;
    CHECK(mc_generator_run(g, &one, 1, NULL, NULL, NULL, &err) == MC_OK, "%s", err.msg);
    *produced = one.produced;
}

static void same_as(const seq_set *got, const int32_t want[NSEQ][MAX_NEW], const int *want_n, const char *what) {
    for (int i = 0; i < NSEQ; i++) {
        CHECK(got->s[i].produced == want_n[i], "%s: sequence %d made %d tokens, alone %d", what, i + 1,
              got->s[i].produced, want_n[i]);
        for (int k = 0; k < want_n[i] && k < got->s[i].produced; k++)
            CHECK(got->out[i][k] == want[i][k], "%s: sequence %d token %d: %d, alone %d", what, i + 1, k,
                  got->out[i][k], want[i][k]);
    }
}

static int32_t g_alone[NSEQ][MAX_NEW];
static int g_alone_n[NSEQ];

/* Each sequence alone, once: the reference of the batched runs; the greedy ones are
 * transformers'. */
static void test_alone_greedy_equals_transformers(void) {
    mc_generator *g = open_generator(NSEQ);
    if (!g) return;
    seq_set set;
    make_seqs(&set);
    for (int i = 0; i < NSEQ; i++) {
        run_alone(g, &set, i, g_alone[i], &g_alone_n[i]);
        const seq_spec *sp = &k_specs[i];
        CHECK(g_alone_n[i] == sp->max_new, "sequence %d made %d of %d tokens", i + 1, g_alone_n[i], sp->max_new);
        if (sp->temperature > 0) continue;
        for (int k = 0; k < sp->max_new; k++)
            CHECK(g_alone[i][k] == g_greedy[sp->p][sp->k + k], "sequence %d token %d: %d, transformers %d", i + 1, k,
                  g_alone[i][k], g_greedy[sp->p][sp->k + k]);
    }
    CHECK(memcmp(g_alone[2], &g_greedy[0][3], sizeof(int32_t) * 10) != 0,
          "sequence 3 drew the greedy tokens: the sampled checks see nothing");
    mc_generator_free(g);
}

/* All six together, with room for all, then two at a time (the others waiting for a slot,
 * which each takes as one ends); the callback sees each sequence's tokens in order. */
static void test_batched_equals_alone(void) {
    for (int slots = NSEQ; slots >= 1; slots = slots == NSEQ ? 2 : 0) {
        mc_generator *g = open_generator(slots);
        if (!g) return;
        seq_set set;
        make_seqs(&set);
        calls c = {.stop_seq = -1};
        mc_gen_stats st = {0};
        mc_err err;
        CHECK(mc_generator_run(g, set.s, NSEQ, record, &c, &st, &err) == MC_OK, "%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "%d slots", slots);
        same_as(&set, g_alone, g_alone_n, what);
        int at[NSEQ] = {0};
        for (int k = 0; k < c.n; k++) {
            const int i = c.seq[k];
            CHECK(at[i] < set.s[i].produced && c.token[k] == set.out[i][at[i]], "%s: callback %d: sequence %d's "
                  "token %d out of order", what, k, i + 1, at[i]);
            at[i]++;
        }
        CHECK(c.n == st.decode_tokens + NSEQ, "%s: %d callbacks, %lld tokens (a prompt's first, then decoded)", what,
              c.n, (long long)(st.decode_tokens + NSEQ));
        int64_t prompt_tokens = 0;
        for (int i = 0; i < NSEQ; i++) prompt_tokens += set.s[i].prompt_len;
        CHECK(st.prefill_tokens == prompt_tokens, "%s: prefill of %lld tokens, the prompts hold %lld", what,
              (long long)st.prefill_tokens, (long long)prompt_tokens);
        mc_generator_free(g);
    }
}

/* Sequence 1 stops at its end of document (the first token it makes alone that it had not
 * made before; not returned), sequence 2 at its callback's word (on its third token,
 * returned); the others (which may make that id too: no stop_at_eod) are as alone. */
static void test_early_ends_leave_the_others(void) {
    mc_generator *g = open_generator(NSEQ);
    if (!g) return;
    int k = 1; /* the first token of sequence 1 alone not among those before it */
    for (; k < g_alone_n[0]; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen = seen || g_alone[0][j] == g_alone[0][k];
        if (!seen) break;
    }
    CHECK(k < g_alone_n[0] && k >= 1, "sequence 1 alone repeats itself: no token to end it at");
    const int32_t eod = g_alone[0][k];
    seq_set set;
    make_seqs(&set);
    set.s[0].params.stop_at_eod = true;
    mc_generator_set_eod(g, eod);
    calls c = {.stop_seq = 1, .stop_after = 3};
    mc_err err;
    CHECK(mc_generator_run(g, set.s, NSEQ, record, &c, NULL, &err) == MC_OK, "%s", err.msg);
    int want_n[NSEQ];
    memcpy(want_n, g_alone_n, sizeof want_n);
    want_n[0] = k;
    want_n[1] = 3;
    same_as(&set, g_alone, want_n, "early ends");
    for (int j = 0; j < c.n; j++) CHECK(!(c.seq[j] == 0 && c.token[j] == eod), "the end of document reached the callback");
    mc_generator_free(g);
}

/* Bad sequences: refused, naming the sequence, and nothing run. */
static void test_bad_sequences(void) {
    mc_generator *g = open_generator(2);
    if (!g) return;
    seq_set set;
    make_seqs(&set);
    mc_err err;
    set.prompt[1][3] = 300; /* the vocabulary is [0, 300) */
    set.s[0].produced = -7;
    CHECK(mc_generator_run(g, set.s, NSEQ, NULL, NULL, NULL, &err) == MC_ERR);
    CHECK(strstr(err.msg, "sequence 2") && strstr(err.msg, "300"), "%s", err.msg);
    CHECK(set.s[0].produced == -7, "a refused run changed sequence 1");
    make_seqs(&set);
    set.s[3].params.max_new_tokens = POSITIONS; /* 8 + 24 positions */
    CHECK(mc_generator_run(g, set.s, NSEQ, NULL, NULL, NULL, &err) == MC_ERR);
    CHECK(strstr(err.msg, "sequence 4") && strstr(err.msg, "positions"), "%s", err.msg);
    make_seqs(&set);
    set.s[5].params.top_p = 0;
    CHECK(mc_generator_run(g, set.s, NSEQ, NULL, NULL, NULL, &err) == MC_ERR);
    CHECK(strstr(err.msg, "sequence 6") && strstr(err.msg, "top_p"), "%s", err.msg);
    mc_generator_free(g);
}

/* The inference plan of the tiny Llama at 2 and at 8 layers: no gradient buffer, and the
 * same activation bytes (one layer's, reused), where the training plan's grow. */
static void plan_bytes(int layers, bool inference, size_t *grads, size_t *acts) {
    mc_config cfg;
    tiny_llama_base(&cfg);
    cfg.model.num_layers = layers;
    cfg.model.seq_length = 32;
    cfg.model.max_position_embeddings = 64;
    cfg.train.micro_batch_size = 4;
    cfg.train.train_iters = 1;
    mc_err err;
    CHECK(mc_config_validate(&cfg, 1, &err) == MC_OK, "%s", err.msg);
    mc_comm comm;
    CHECK(mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK, "%s", err.msg);
    mc_backend *be = mc_backend_cpu_create();
    mc_model_options mo = mc_model_options_from_config(&cfg, 1, MC_F32, MC_F32, MC_F32, 4, NULL);
    mo.inference = inference;
    mc_model m;
    size_t params;
    CHECK(mc_model_plan(&m, &mo, be, &comm, &err) == MC_OK, "%s", err.msg);
    mc_model_bytes(&m, &params, grads, acts);
    mc_model_free(&m);
    be->destroy(be);
    mc_comm_free(&comm);
    mc_config_free(&cfg);
}

static void test_inference_plan(void) {
    size_t g2, a2, g8, a8, tg2, ta2, tg8, ta8;
    plan_bytes(2, true, &g2, &a2);
    plan_bytes(8, true, &g8, &a8);
    plan_bytes(2, false, &tg2, &ta2);
    plan_bytes(8, false, &tg8, &ta8);
    CHECK(g2 == 0 && g8 == 0, "an inference model plans %zu and %zu gradient bytes", g2, g8);
    CHECK(a2 == a8, "inference activations of 2 layers %zu bytes, of 8 %zu", a2, a8);
    CHECK(ta8 > ta2 && tg8 > 0, "the training plan's activations (%zu, %zu) do not grow: the check sees nothing", ta2,
          ta8);
}

static void read_fixture(void) {
    char *text = check_read_file(FIX "/greedy.json", NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompts"), *gr = cJSON_GetObjectItemCaseSensitive(j, "greedy");
    CHECK(cJSON_GetArraySize(pr) == 2 && cJSON_GetArraySize(gr) == 2, FIX "/greedy.json: two prompts and continuations");
    for (int p = 0; p < 2 && j; p++) {
        const cJSON *a = cJSON_GetArrayItem(pr, p), *b = cJSON_GetArrayItem(gr, p);
        CHECK(cJSON_GetArraySize(a) == 8 && cJSON_GetArraySize(b) == 16, "prompt %d: 8 ids and 16 continuing", p);
        for (int k = 0; k < 8; k++) g_prompt[p][k] = cJSON_GetArrayItem(a, k)->valueint;
        for (int k = 0; k < 16; k++) g_greedy[p][k] = cJSON_GetArrayItem(b, k)->valueint;
    }
    cJSON_Delete(j);
    free(text);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mc_test_generator_%ld", (long)getpid());
    snprintf(g_ckpt, sizeof g_ckpt, "%s/ckpt", g_tmp);
    mc_err err;
    CHECK(mc_mkdirs(g_tmp, &err) == MC_OK, "%s", err.msg);
    read_fixture();
    mc_convert_opts o = {.input = FIX, .output = g_ckpt, .make_vocab_size_divisible_by = 128, .shard_bytes = 5000000000ll};
    CHECK(mc_convert(&o, &err) == MC_OK, "%s", err.msg);
    RUN(test_alone_greedy_equals_transformers);
    RUN(test_batched_equals_alone);
    RUN(test_early_ends_leave_the_others);
    RUN(test_bad_sequences);
    RUN(test_inference_plan);
    mc_remove_tree(g_tmp, &err);
    return check_summary();
}
