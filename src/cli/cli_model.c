/* cli_model.c: the flags, checkpoint and tokenizer of generate and serve (cli_model.h). */
#include "cli/cli_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "ckpt/ckpt.h"
#include "data/data.h"
#include "train/convert.h"

/* 0: not one of own; 1: a switch, or a flag written --flag=value; 2: a flag whose value follows */
static int own_flag(const mc_arg_spec *own, int n, const char *a) {
    const char *eq = strchr(a, '=');
    const size_t len = eq ? (size_t)(eq - a) : strlen(a);
    for (int i = 0; i < n; i++)
        if (strlen(own[i].name) == len && !strncmp(a, own[i].name, len))
            return own[i].kind == MC_ARG_TRUE || eq ? 1 : 2;
    return 0;
}

mc_cli_argv_split mc_cli_split_flags(const mc_arg_spec *own, int nown_specs, int argc, char **argv) {
    mc_cli_argv_split s = {.own = mc_xmalloc(sizeof(char *) * (size_t)(argc + 1)),
                           .rest = mc_xmalloc(sizeof(char *) * (size_t)(argc + 1))};
    for (int i = 0; i < argc; i++) {
        int kind = own_flag(own, nown_specs, argv[i]);
        if (kind) {
            s.own[s.nown++] = argv[i];
            if (kind == 2 && i + 1 < argc) s.own[s.nown++] = argv[++i];
        } else {
            s.rest[s.nrest++] = argv[i];
        }
    }
    return s;
}

void mc_cli_argv_split_free(mc_cli_argv_split *s) {
    free(s->own);
    free(s->rest);
    memset(s, 0, sizeof *s);
}

/* --load-hf's temporary checkpoint, removed however the process ends (exit, an error's
 * exit, and the signals when the caller asks for it). */
static char g_tmp_ckpt[4096];

static void remove_tmp_ckpt(void) {
    mc_err ignored;
    if (g_tmp_ckpt[0]) mc_remove_tree(g_tmp_ckpt, &ignored);
}

void mc_cli_load_model(mc_config *cfg, const char *load_hf, bool remove_on_signals, const char *cmd) {
    if (!!cfg->ckpt.load == !!load_hf) mc_die_usage("%s: give one of --load DIR and --load-hf DIR", cmd);
    mc_err err;
    if (load_hf) {
        snprintf(g_tmp_ckpt, sizeof g_tmp_ckpt, "%s/megatron-c-%s-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                 cmd, (long)getpid());
        atexit(remove_tmp_ckpt);
        mc_cleanup_register(g_tmp_ckpt);
        if (remove_on_signals) mc_cleanup_on_signals();
        mc_convert_opts co = {.input = load_hf, .output = g_tmp_ckpt, .make_vocab_size_divisible_by = 128,
                              .shard_bytes = 5000000000ll};
        if (mc_convert(&co, &err) != MC_OK) mc_die_usage("--load-hf: %s", err.msg);
        free(cfg->ckpt.load);
        cfg->ckpt.load = mc_xstrdup(g_tmp_ckpt);
    }
    int64_t it;
    if (mc_ckpt_read_model_config(cfg->ckpt.load, &cfg->model, &it, &err) != MC_OK)
        mc_die_usage("%s %s", load_hf ? "--load-hf" : "--load", err.msg);
}

mc_tokenizer *mc_cli_open_tokenizer(const mc_config *cfg, const char *cmd) {
    mc_config probe = *cfg;
    if (probe.data.tokenizer_type == MC_TOKENIZER_NONE) probe.data.tokenizer_type = MC_TOKENIZER_NULL;
    mc_tokenizer_options opt = mc_data_tokenizer_options(&probe);
    mc_tokenizer *tok;
    mc_err err;
    if (mc_tokenizer_open(&tok, &opt, &err) != MC_OK) mc_die_usage("%s: %s", cmd, err.msg);
    return tok;
}
