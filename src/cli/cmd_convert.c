/* cmd_convert.c: `megatron-c convert --input DIR --output DIR --to hf|megatron-c`: a Hugging
 * Face model directory to a Megatron-C checkpoint (iteration 0, weights only: train with
 * --load OUTPUT --finetune) or back (train/convert.h). A bad input is one line on stderr
 * and exit code 2, and leaves no output directory. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/file.h"
#include "cli/commands.h"
#include "train/convert.h"

typedef struct convert_flags {
    char *input, *output, *tokenizer_model;
    int to, dtype, divisible_by;
} convert_flags;

#define F(member) offsetof(convert_flags, member)
static const mc_arg_choice k_to[] = {{"hf", 1}, {"megatron-c", 2}, {NULL, 0}};
static const mc_arg_choice k_dtypes[] = {{"bf16", MC_BF16}, {"fp16", MC_F16}, {"fp32", MC_F32}, {NULL, 0}};
static const mc_arg_spec k_flags[] = {
    {"--input", MC_ARG_STRING, F(input), "a Hugging Face model directory (--to megatron-c) or a --save directory (--to hf)"},
    {"--output", MC_ARG_STRING, F(output), "the directory to write; must not exist"},
    {"--to", MC_ARG_CHOICE, F(to), "hf or megatron-c", k_to},
    {"--dtype", MC_ARG_CHOICE, F(dtype), "--to hf: the weights' dtype: bf16 (default), fp16 or fp32", k_dtypes},
    {"--tokenizer-model", MC_ARG_STRING, F(tokenizer_model),
     "--to hf: a tokenizer file, or a directory of them, to copy beside the weights"},
    {"--make-vocab-size-divisible-by", MC_ARG_INT, F(divisible_by),
     "--to megatron-c: pad the vocabulary to a multiple of this, as training does (default 128)"},
};
#undef F
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

int mc_cmd_convert(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c convert --input DIR --output DIR --to hf|megatron-c [flags]\n\n"
                   "Hugging Face GPT-2, Llama 2/3/3.1 and Mistral (no sliding window) <-> Megatron-C checkpoints.\n\n");
            mc_args_print_help(k_flags, NFLAGS);
            return 0;
        }
    convert_flags f = {.dtype = MC_BF16, .divisible_by = 128};
    mc_err err;
    if (mc_args_parse(k_flags, NFLAGS, &f, argc, argv, NULL, false, &err) != MC_OK) {
        char *p = strstr(err.msg, "megatron-c train --help");
        if (p) snprintf(p, sizeof err.msg - (size_t)(p - err.msg), "megatron-c convert --help)");
        mc_die_usage("%s", err.msg);
    }
    if (!f.input || !f.output || !f.to) mc_die_usage("convert: --input, --output and --to are required (megatron-c convert --help)");
    if (f.divisible_by < 1) mc_die_usage("convert: --make-vocab-size-divisible-by must be >= 1");
    if (f.to == 2 && f.tokenizer_model) mc_die_usage("convert: --tokenizer-model goes with --to hf");
    mc_convert_opts o = {.input = f.input, .output = f.output, .to_hf = f.to == 1, .dtype = (mc_dtype)f.dtype,
                         .tokenizer_model = f.tokenizer_model, .make_vocab_size_divisible_by = f.divisible_by,
                         .shard_bytes = 5000000000ll};
    mc_cleanup_on_signals();
    if (mc_convert(&o, &err) != MC_OK) mc_die_usage("%s", err.msg);
    printf("convert: wrote %s\n", f.output);
    free(f.input);
    free(f.output);
    free(f.tokenizer_model);
    return 0;
}
