/* cli_model.h: what the commands that run a trained model (generate, serve) share: their
 * own flags told apart from train's, the checkpoint they load (--load, or --load-hf
 * imported into a temporary checkpoint), the model's config read from it, and the user's
 * tokenizer. Bad input ends the process with one line, exit 2 (mc_die_usage). */
#ifndef MC_CLI_CLI_MODEL_H
#define MC_CLI_CLI_MODEL_H

#include <stdbool.h>

#include "base/args.h"
#include "megatron.h"
#include "tokenizer/tokenizer.h"

/* argv split into the flags of `own` (with their values; `--flag=value` too) and the rest,
 * train's, in their order. The arrays are malloc'd (argc + 1 entries), their strings argv's. */
typedef struct mc_cli_argv_split {
    char **own, **rest;
    int nown, nrest;
} mc_cli_argv_split;

mc_cli_argv_split mc_cli_split_flags(const mc_arg_spec *own, int nown_specs, int argc, char **argv);
void mc_cli_argv_split_free(mc_cli_argv_split *s);

/* cfg->ckpt.load, or with load_hf (exactly one of the two given) that Hugging Face directory
 * imported, as `convert` does, into a temporary checkpoint of this process, which becomes
 * cfg->ckpt.load and is removed at exit (an error's exit too) and, with
 * remove_on_signals, when SIGTERM or SIGINT ends the process (base/file.h's
 * mc_cleanup_on_signals; a caller that takes those signals itself passes false). Then
 * cfg->model is read from the checkpoint. cmd names the command in messages. */
void mc_cli_load_model(mc_config *cfg, const char *load_hf, bool remove_on_signals, const char *cmd);

/* The user's tokenizer flags (default: the Null tokenizer, text as ids) over the model's
 * vocabulary. */
mc_tokenizer *mc_cli_open_tokenizer(const mc_config *cfg, const char *cmd);

#endif
