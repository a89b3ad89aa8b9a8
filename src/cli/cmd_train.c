/* cmd_train.c: `megatron-c train [Megatron flags]`, under mpirun/srun/torchrun as well as
 * alone. Errors in the flags end every rank with one line and exit code 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "data/data.h"
#include "generate/trainer_sample.h"
#include "megatron.h"
#include "tokenizer/tokenizer.h"
#include "train/flags.h"

/* The tokenizer of the training data, for --sample-prompt (encode) and the sample (decode). */
static mc_tokenizer *open_tokenizer(const mc_config *cfg) {
    mc_tokenizer_options opt = mc_data_tokenizer_options(cfg);
    mc_tokenizer *tok;
    mc_err err;
    if (mc_tokenizer_open(&tok, &opt, &err) != MC_OK) mc_die_usage("--sample-prompt: %s", err.msg);
    return tok;
}

/* The prompt's ids, checked before training so a bad prompt costs no training time. */
static mc_ids encode_prompt(const mc_config *cfg, const mc_tokenizer *tok) {
    mc_ids ids = {0};
    mc_err err;
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(tok);
    const char *text = cfg->log.sample_prompt;
    if (mc_tokenizer_encode(tok, s, text, strlen(text), &ids, &err) != MC_OK) mc_die_usage("--sample-prompt: %s", err.msg);
    mc_tokenizer_scratch_free(s);
    if (ids.len == 0) mc_die_usage("--sample-prompt: '%s' encodes to no tokens", text);
    for (int64_t i = 0; i < ids.len; i++)
        if (ids.data[i] < 0 || ids.data[i] >= cfg->model.vocab_size)
            mc_die_usage("--sample-prompt: token id %d is outside the vocabulary [0, %d)", ids.data[i],
                         cfg->model.vocab_size);
    return ids;
}

static void print_sample(mc_trainer *t, const mc_config *cfg, const mc_tokenizer *tok, const mc_ids *prompt) {
    int n = cfg->log.sample_tokens;
    int32_t *out = mc_xmalloc(sizeof(int32_t) * (size_t)n);
    mc_err err;
    if (mc_gen_trainer_sample(t, prompt->data, (int)prompt->len, n, out, &err) != MC_OK) {
        fprintf(stderr, "megatron-c: error: %s\n", err.msg);
        free(out);
        return;
    }
    /* The prompt's ids and the new ones decoded together, so that the tokenizer joins them
     * as it joins any text (the Null tokenizer's spaces between numbers among them). */
    int64_t total = prompt->len + n;
    int32_t *all = mc_xmalloc(sizeof(int32_t) * (size_t)total);
    memcpy(all, prompt->data, sizeof(int32_t) * (size_t)prompt->len);
    memcpy(all + prompt->len, out, sizeof(int32_t) * (size_t)n);
    size_t len;
    char *text = mc_tokenizer_decode(tok, all, total, &len);
    free(all);
    mc_log_last("-------------------------------------------------------------------------------");
    const mc_log_config *o = &cfg->log;
    if (o->sample_temperature > 0)
        mc_log_last("sample (%d tokens, temperature %g, top-k %d, top-p %g, seed %llu):", n, o->sample_temperature,
                    o->sample_top_k, o->sample_top_p, (unsigned long long)cfg->train.seed);
    else
        mc_log_last("greedy sample (%d tokens):", n);
    mc_log_last("%s", text);
    mc_log_last("-------------------------------------------------------------------------------");
    free(text);
    free(out);
}

int mc_cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c train [flags]   (Megatron-LM's flag names and meanings)\n\n");
            mc_flags_print_help();
            return 0;
        }
    mc_config cfg;
    mc_config_init(&cfg);
    mc_err err;
    if (mc_config_parse_args(&cfg, argc, argv, &err) != MC_OK) mc_die_usage("%s", err.msg);
    /* The data part of the configuration does not depend on the world size: check it and
     * the sample prompt now, before any rank starts. The trainer validates the rest. */
    mc_config probe = cfg;
    if (mc_config_validate_data(&probe, &err) != MC_OK) mc_die_usage("%s", err.msg);
    mc_tokenizer *tok = NULL;
    mc_ids prompt = {0};
    if (cfg.log.sample_prompt) {
        tok = open_tokenizer(&probe);
        prompt = encode_prompt(&probe, tok);
    }
    mc_trainer *t = mc_trainer_create(&cfg, &err);
    if (!t) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    int rc = 0;
    if (mc_trainer_run(t, &err) != MC_OK) {
        fprintf(stderr, "megatron-c: error: %s\n", err.msg);
        rc = 1;
    } else {
        if (cfg.log.export_params && mc_trainer_export_params(t, cfg.log.export_params, &err) != MC_OK) {
            fprintf(stderr, "megatron-c: error: %s\n", err.msg);
            rc = 1;
        }
        if (tok) print_sample(t, &probe, tok, &prompt);
    }
    mc_trainer_free(t);
    if (tok) mc_tokenizer_free(tok);
    mc_ids_free(&prompt);
    mc_config_free(&cfg);
    return rc;
}
