/* cmd_train.c: `megatron-c train [Megatron flags]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "data/byte_tokenizer.h"
#include "megatron.h"
#include "train/flags.h"

/* Parses the prompt for --sample-prompt: text for the byte tokenizer, space-separated ids
 * for NullTokenizer. Returns the number of ids. */
static int encode_prompt(const mc_config *cfg, const char *text, int32_t *ids, int cap) {
    if (cfg->data.tokenizer_type == MC_TOKENIZER_BYTE) {
        int64_t n = (int64_t)strlen(text);
        if (n > cap) n = cap;
        return (int)mc_byte_tokenizer_encode(text, n, ids);
    }
    int n = 0;
    char *end;
    for (const char *p = text; *p && n < cap;) {
        long v = strtol(p, &end, 10);
        if (end == p) mc_die_usage("--sample-prompt: with NullTokenizer the prompt is space-separated token ids, got '%s'", text);
        if (v < 0 || v >= cfg->model.vocab_size)
            mc_die_usage("--sample-prompt: token id %ld is outside the vocabulary [0, %d)", v, cfg->model.vocab_size);
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

static void print_sample(mc_trainer *t, const mc_config *cfg, const int32_t *prompt, int n) {
    int32_t *out = malloc(sizeof(int32_t) * (size_t)cfg->log.sample_tokens);
    mc_err err;
    if (mc_trainer_generate(t, prompt, n, cfg->log.sample_tokens, out, &err) != MC_OK) mc_die_usage("%s", err.msg);
    mc_log_info("-------------------------------------------------------------------------------");
    mc_log_info("greedy sample (%d tokens):", cfg->log.sample_tokens);
    if (cfg->data.tokenizer_type == MC_TOKENIZER_BYTE) {
        int64_t len = mc_byte_tokenizer_decode(out, cfg->log.sample_tokens, NULL, 0);
        char *text = malloc((size_t)len + 1);
        mc_byte_tokenizer_decode(out, cfg->log.sample_tokens, text, len + 1);
        mc_log_info("%s%s", cfg->log.sample_prompt, text);
        free(text);
    } else {
        char line[65536];
        int at = 0;
        for (int i = 0; i < cfg->log.sample_tokens && at < (int)sizeof line - 16; i++)
            at += snprintf(line + at, sizeof line - (size_t)at, "%s%d", i ? " " : "", out[i]);
        mc_log_info("%s -> %s", cfg->log.sample_prompt, line);
    }
    mc_log_info("-------------------------------------------------------------------------------");
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
    if (mc_config_validate(&cfg, 1, &err) != MC_OK) mc_die_usage("%s", err.msg);
    /* The sample prompt is checked before training, not after. */
    int prompt_cap = 1 << 16, prompt_len = 0;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_cap);
    if (cfg.log.sample_prompt) prompt_len = encode_prompt(&cfg, cfg.log.sample_prompt, prompt, prompt_cap);
    mc_trainer *t = mc_trainer_create(&cfg, &err);
    if (!t) mc_die_usage("%s", err.msg);
    if (mc_trainer_run(t, &err) != MC_OK) {
        fprintf(stderr, "megatron-c: error: %s\n", err.msg);
        mc_trainer_free(t);
        mc_config_free(&cfg);
        free(prompt);
        return 1;
    }
    if (cfg.log.sample_prompt) print_sample(t, &cfg, prompt, prompt_len);
    free(prompt);
    mc_trainer_free(t);
    mc_config_free(&cfg);
    return 0;
}

