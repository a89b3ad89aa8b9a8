/* cmd_generate.c: `megatron-c generate`: continuations of prompts by a trained model.
 *
 *   megatron-c generate (--load DIR | --load-hf DIR)
 *                       (--prompt TEXT | --prompt-ids "ID ID ..." | --prompts-file FILE.jsonl)
 *                       [--max-new-tokens 64] [--temperature 0] [--top-k 0] [--top-p 1] [--seed N]
 *                       [--batch-size N] [--no-kv-cache]
 *                       [the tokenizer's flags, --device, --bf16, --tensor-model-parallel-size ...]
 *
 * The model's shape comes from the checkpoint (--load: a --save directory; --load-hf: a
 * Hugging Face directory, imported first as `convert` does, into a temporary checkpoint);
 * any other flag is train's (`megatron-c train --help`): the tokenizer that encodes the
 * prompts and decodes the tokens, the device, the precision, tensor parallelism under
 * mpirun. Greedy by default; --temperature > 0 draws from Philox streams of --seed (the
 * same draw on every rank and every run). A continuation stops at the tokenizer's end of
 * document. One prompt: its continuation on stdout; several (a JSONL file of
 * {"prompt": TEXT} or {"text": TEXT} lines): one JSON line each. The prefill and decode
 * speeds go to stderr.
 *
 * Decoding goes through generate/generator.h's key/value cache: each prompt in one forward,
 * then one forward a step for all the prompts under way, a token each, --batch-size of
 * them at most (default: all; the others start as those end); every prompt gets the tokens
 * it gets alone. --no-kv-cache recomputes the whole window for every token instead, one
 * prompt after another (the cache's check). Prompt and continuation must fit the model's
 * positions. The generator's memory (weights, cache, activations) goes to stderr first. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "generate/generator.h"
#include "megatron.h"
#include "tokenizer/tokenizer.h"

typedef struct gen_flags {
    char *load_hf, *prompt, *prompt_ids, *prompts_file;
    int max_new_tokens;
    double temperature, top_p;
    int top_k;
    int batch_size;
    bool no_kv_cache;
} gen_flags;

#define F(member) offsetof(gen_flags, member)
static const mc_arg_spec k_flags[] = {
    {"--load-hf", MC_ARG_STRING, F(load_hf), "a Hugging Face model directory (instead of --load)"},
    {"--prompt", MC_ARG_STRING, F(prompt), "the text to continue"},
    {"--prompt-ids", MC_ARG_STRING, F(prompt_ids), "the token ids to continue, space-separated"},
    {"--prompts-file", MC_ARG_STRING, F(prompts_file), "a JSONL file of {\"prompt\": TEXT} lines"},
    {"--max-new-tokens", MC_ARG_INT, F(max_new_tokens), "tokens to generate a prompt (default 64)"},
    {"--temperature", MC_ARG_DOUBLE, F(temperature), "0 (default): greedy; else the sampling temperature"},
    {"--top-k", MC_ARG_INT, F(top_k), "draw from the k most likely tokens (default 0: all)"},
    {"--top-p", MC_ARG_DOUBLE, F(top_p), "draw from the most likely tokens up to this probability (default 1)"},
    {"--batch-size", MC_ARG_INT, F(batch_size), "prompts continued together at most (default 0: all of them)"},
    {"--no-kv-cache", MC_ARG_TRUE, F(no_kv_cache), "recompute the whole window for every new token (the check of the cache)"},
};
#undef F
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

/* The prompts as token ids (malloc'd arrays), from the one source given. */
typedef struct prompt_set {
    mc_ids *ids;
    char **text; /* NULL entries for --prompt-ids */
    int n;
} prompt_set;

static void add_prompt(prompt_set *p, const mc_tokenizer *tok, const char *text, const char *what) {
    mc_ids ids = {0};
    mc_err err;
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(tok);
    if (mc_tokenizer_encode(tok, s, text, strlen(text), &ids, &err) != MC_OK) mc_die_usage("%s: %s", what, err.msg);
    mc_tokenizer_scratch_free(s);
    if (ids.len == 0) mc_die_usage("%s: '%s' encodes to no tokens", what, text);
    p->ids = mc_xrealloc(p->ids, sizeof(mc_ids) * (size_t)(p->n + 1));
    p->text = mc_xrealloc(p->text, sizeof(char *) * (size_t)(p->n + 1));
    p->ids[p->n] = ids;
    p->text[p->n++] = mc_xstrdup(text);
}

static void read_prompts(prompt_set *p, const gen_flags *g, const mc_tokenizer *tok, int vocab) {
    int given = !!g->prompt + !!g->prompt_ids + !!g->prompts_file;
    if (given != 1) mc_die_usage("generate: give one of --prompt, --prompt-ids or --prompts-file");
    if (g->prompt) add_prompt(p, tok, g->prompt, "--prompt");
    if (g->prompt_ids) {
        mc_ids ids = {0};
        const char *s = g->prompt_ids;
        while (*s) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s) mc_die_usage("--prompt-ids: '%s' is not a list of token ids", g->prompt_ids);
            if (v < 0 || v >= vocab) mc_die_usage("--prompt-ids: %ld is outside the vocabulary [0, %d)", v, vocab);
            ids.data = mc_xrealloc(ids.data, sizeof(int32_t) * (size_t)(ids.len + 1));
            ids.data[ids.len++] = (int32_t)v;
            s = end;
            while (*s == ' ' || *s == ',') s++;
        }
        if (ids.len == 0) mc_die_usage("--prompt-ids: no ids");
        p->ids = mc_xrealloc(p->ids, sizeof(mc_ids));
        p->text = mc_xrealloc(p->text, sizeof(char *));
        p->ids[0] = ids;
        p->text[0] = NULL;
        p->n = 1;
    }
    if (g->prompts_file) {
        FILE *f = fopen(g->prompts_file, "r");
        if (!f) mc_die_usage("--prompts-file %s: cannot open", g->prompts_file);
        char *line = NULL;
        size_t cap = 0;
        long lineno = 0;
        while (getline(&line, &cap, f) > 0) {
            lineno++;
            if (strspn(line, " \t\r\n") == strlen(line)) continue;
            cJSON *o = cJSON_Parse(line);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "prompt");
            if (!t) t = cJSON_GetObjectItemCaseSensitive(o, "text");
            if (!cJSON_IsString(t))
                mc_die_usage("--prompts-file %s:%ld: not a JSON object with a \"prompt\" (or \"text\") string",
                             g->prompts_file, lineno);
            char what[600];
            snprintf(what, sizeof what, "--prompts-file %s:%ld", g->prompts_file, lineno);
            add_prompt(p, tok, t->valuestring, what);
            cJSON_Delete(o);
        }
        free(line);
        fclose(f);
        if (p->n == 0) mc_die_usage("--prompts-file %s: no prompts", g->prompts_file);
    }
    for (int i = 0; i < p->n; i++)
        for (int64_t k = 0; k < p->ids[i].len; k++)
            if (p->ids[i].data[k] < 0 || p->ids[i].data[k] >= vocab)
                mc_die_usage("generate: prompt %d has token id %d, outside the model's vocabulary [0, %d)", i + 1,
                             p->ids[i].data[k], vocab);
}

/* Each token of a one-prompt continuation as it comes, printed: all the tokens so far
 * decoded again, less what was printed (a token may complete a character that an earlier
 * one began). */
typedef struct stream_ctx {
    const mc_tokenizer *tok;
    const int32_t *ids; /* the continuation so far (the sequence's out) */
    int count;
    size_t printed;
    bool print;
} stream_ctx;

static bool on_token(void *p, int i, int32_t token) {
    (void)i; /* streaming is for one prompt */
    (void)token;
    stream_ctx *c = p;
    c->count++;
    if (!c->print) return true;
    size_t len;
    char *text = mc_tokenizer_decode(c->tok, c->ids, c->count, &len);
    if (len > c->printed) fwrite(text + c->printed, 1, len - c->printed, stdout);
    fflush(stdout);
    c->printed = len;
    free(text);
    return true;
}

int mc_cmd_generate(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c generate (--load DIR | --load-hf DIR) (--prompt TEXT | --prompt-ids IDS | "
                   "--prompts-file FILE.jsonl) [flags]\n\n");
            mc_args_print_help(k_flags, NFLAGS);
            printf("\nand train's flags for the tokenizer, device, precision and parallelism (megatron-c train --help)\n");
            return 0;
        }
    /* generate's own flags apart, train's to the config parser */
    mc_cli_argv_split args = mc_cli_split_flags(k_flags, NFLAGS, argc, argv);
    gen_flags g = {.max_new_tokens = 64, .top_p = 1.0};
    mc_err err;
    if (mc_args_parse(k_flags, NFLAGS, &g, args.nown, args.own, NULL, false, &err) != MC_OK)
        mc_die_usage("%s", err.msg);
    if (g.max_new_tokens < 1) mc_die_usage("--max-new-tokens must be >= 1");
    if (g.batch_size < 0) mc_die_usage("--batch-size must be >= 0 (0: all the prompts together)");
    if (g.temperature < 0 || g.top_k < 0 || !(g.top_p > 0 && g.top_p <= 1))
        mc_die_usage("generate: --temperature >= 0, --top-k >= 0 and --top-p in (0, 1] please");
    mc_config cfg;
    mc_config_init(&cfg);
    if (mc_config_parse_args(&cfg, args.nrest, args.rest, &err) != MC_OK) mc_die_usage("%s", err.msg);
    mc_cli_load_model(&cfg, g.load_hf, true, "generate");
    mc_tokenizer *tok = mc_cli_open_tokenizer(&cfg, "generate");
    prompt_set ps = {0};
    read_prompts(&ps, &g, tok, cfg.model.vocab_size);
    /* the positions: the longest prompt and its continuation (learned positions cap it; the
     * recomputing path then slides its window) */
    int64_t longest = 0;
    for (int i = 0; i < ps.n; i++) longest = ps.ids[i].len > longest ? ps.ids[i].len : longest;
    int64_t S = longest + g.max_new_tokens;
    if (cfg.model.max_position_embeddings > 0 && S > cfg.model.max_position_embeddings) {
        if (!g.no_kv_cache)
            mc_die_usage("generate: the longest prompt (%lld tokens) and --max-new-tokens %d exceed the model's %d "
                         "positions",
                         (long long)longest, g.max_new_tokens, cfg.model.max_position_embeddings);
        S = cfg.model.max_position_embeddings;
    }
    const int batch = g.batch_size > 0 && g.batch_size < ps.n ? g.batch_size : ps.n;
    mc_generator *gen = mc_generator_create_batched(&cfg, S, batch, &err);
    if (!gen) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    mc_generator_set_eod(gen, mc_tokenizer_eod(tok));
    mc_generator_set_recompute(gen, g.no_kv_cache);
    mc_gen_seq *seqs = mc_xcalloc((size_t)ps.n, sizeof *seqs);
    for (int i = 0; i < ps.n; i++)
        seqs[i] = (mc_gen_seq){.prompt = ps.ids[i].data,
                               .prompt_len = (int)ps.ids[i].len,
                               .params = {.max_new_tokens = g.max_new_tokens,
                                          .temperature = g.temperature,
                                          .top_k = g.top_k,
                                          .top_p = g.top_p,
                                          .seed = (uint64_t)cfg.train.seed,
                                          .stop_at_eod = true},
                               .out = mc_xmalloc(sizeof(int32_t) * (size_t)g.max_new_tokens)};
    const bool stream = ps.n == 1 && !g.no_kv_cache && mc_log_rank() == 0; /* one prompt: printed as it comes */
    stream_ctx sc = {.tok = tok, .ids = seqs[0].out, .print = stream};
    mc_gen_stats st = {0};
    int rc = mc_generator_run(gen, seqs, ps.n, on_token, &sc, &st, &err) == MC_OK ? 0 : 1;
    if (stream) printf("\n");
    for (int i = 0; i < ps.n && rc == 0 && mc_log_rank() == 0 && !stream; i++) {
        size_t text_len;
        char *text = mc_tokenizer_decode(tok, seqs[i].out, seqs[i].produced, &text_len);
        if (ps.n == 1) {
            printf("%s\n", text);
        } else {
            cJSON *o = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(o, "ids");
            if (ps.text[i]) cJSON_AddStringToObject(o, "prompt", ps.text[i]);
            for (int k = 0; k < seqs[i].produced; k++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(seqs[i].out[k]));
            cJSON_AddStringToObject(o, "text", text);
            char *line = cJSON_PrintUnformatted(o);
            printf("%s\n", line);
            free(line);
            cJSON_Delete(o);
        }
        fflush(stdout);
        free(text);
    }
    if (rc) fprintf(stderr, "megatron-c: error: %s\n", err.msg);
    else if (mc_log_rank() == 0 && g.no_kv_cache)
        fprintf(stderr, "generate: %d prompt(s), %.1f tok/s (no KV cache: every token recomputes the window)\n", ps.n,
                st.decode_s > 0 ? st.decode_tokens / st.decode_s : 0.0);
    else if (mc_log_rank() == 0)
        fprintf(stderr, "generate: %d prompt(s), prefill %.1f tok/s, decode %.1f tok/s (KV cache)\n", ps.n,
                st.prefill_s > 0 ? st.prefill_tokens / st.prefill_s : 0.0,
                st.decode_s > 0 ? st.decode_tokens / st.decode_s : 0.0);
    for (int i = 0; i < ps.n; i++) free(seqs[i].out);
    free(seqs);
    mc_generator_free(gen);
    mc_cli_argv_split_free(&args);
    return rc;
}
