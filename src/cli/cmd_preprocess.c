/* cmd_preprocess.c: `megatron-c preprocess`, Megatron's tools/preprocess_data.py.
 *
 *   megatron-c preprocess --input corpus.jsonl --output-prefix out/corpus \
 *       --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt \
 *       --append-eod --workers 16
 * writes out/corpus_text_document.bin/.idx (see src/data/preprocess.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/file.h"
#include "cli/commands.h"
#include "data/preprocess.h"
#include "train/flags.h"

typedef struct pp_args {
    char *input, *output_prefix, *json_keys;
    bool append_eod, keep_sequential_samples, skip_bad_lines;
    int workers, partitions;
    int64_t log_interval;
    int tokenizer_type;
    char *vocab_file, *merge_file, *tokenizer_model;
    int vocab_size;
    bool hf_no_special_tokens;
} pp_args;

#define P(member) offsetof(pp_args, member)

static mc_arg_spec k_pp_flags[] = {
    {"--input", MC_ARG_STRING, P(input), "JSON Lines file (.jsonl or .jsonl.gz; a glob with --partitions > 1)"},
    {"--output-prefix", MC_ARG_STRING, P(output_prefix), "writes PREFIX_{key}_document.bin/.idx"},
    {"--json-keys", MC_ARG_LIST, P(json_keys), "keys to extract from each line (default: text)"},
    {"--append-eod", MC_ARG_TRUE, P(append_eod), "append the tokenizer's EOD to every non-empty document"},
    {"--workers", MC_ARG_INT, P(workers), "tokenizer threads (required)", .min = 1, .max = 4096},
    {"--partitions", MC_ARG_INT, P(partitions), "split the input into this many parts, then merge (default 1)",
     .min = 1, .max = 4096},
    {"--log-interval", MC_ARG_INT64, P(log_interval), "documents between progress lines (default 1000)", .min = 1,
     .max = 1e15},
    {"--keep-sequential-samples", MC_ARG_TRUE, P(keep_sequential_samples),
     "with --partitions: keep the input order (consecutive runs of lines per partition)"},
    {"--skip-bad-lines", MC_ARG_TRUE, P(skip_bad_lines),
     "count and skip malformed lines instead of stopping (Megatron-C extension)"},
    {"--tokenizer-type", MC_ARG_CHOICE, P(tokenizer_type), "tokenizer"},
    {"--vocab-file", MC_ARG_STRING, P(vocab_file), "GPT-2 vocab.json"},
    {"--merge-file", MC_ARG_STRING, P(merge_file), "GPT-2 merges.txt"},
    {"--tokenizer-model", MC_ARG_STRING, P(tokenizer_model), "tokenizer.json / tokenizer.model"},
    {"--vocab-size", MC_ARG_INT, P(vocab_size), "vocabulary (NullTokenizer)", .min = 2, .max = 1e9},
    {"--tokenizer-hf-no-include-special-tokens", MC_ARG_TRUE, P(hf_no_special_tokens),
     "HuggingFaceTokenizer: no BOS/EOS from the post-processor"},
    {"--split-sentences", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0,
     .note = "sentence splitting needs NLTK's punkt models and is not in this version"},
    {"--keep-newlines", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "only meaningful with --split-sentences"},
    {"--lang", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "only used by --split-sentences (ignored)"},
    {"--find-optimal-num-workers", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0,
     .note = "the worker-count search is not in this version; run bench/preprocess.sh"},
    {"--workers-to-check", MC_ARG_NOTE, 0, NULL, .nvalues = -1, .note = "only used by --find-optimal-num-workers (ignored)"},
    {"--max-documents", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "only used by --find-optimal-num-workers (ignored)"},
    {"--performance-dir", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "only used by --find-optimal-num-workers (ignored)"},
    {"--vocab-extra-ids", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "extra T5 ids are not supported (ignored)"},
    {"--legacy-tokenizer", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "one tokenizer implementation (ignored)"},
    {"--tokenizer-hf-use-fast", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "one tokenizer implementation (ignored)"},
    {"--trust-remote-code", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "no remote code is run (ignored)"},
};
#define NPP ((int)(sizeof k_pp_flags / sizeof k_pp_flags[0]))

/* The --tokenizer-type choices are the train command's. */
static void bind_tokenizer_choices(void) {
    int n;
    const mc_arg_spec *train = mc_flags_table(&n);
    int row = mc_args_find(train, n, "--tokenizer-type");
    MC_ASSERT(row >= 0);
    k_pp_flags[mc_args_find(k_pp_flags, NPP, "--tokenizer-type")].choices = train[row].choices;
}

int mc_cmd_preprocess(int argc, char **argv) {
    bind_tokenizer_choices();
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c preprocess --input FILE --output-prefix PREFIX --workers N --tokenizer-type T "
                   "[flags]\n(Megatron's tools/preprocess_data.py)\n\n");
            mc_args_print_help(k_pp_flags, NPP);
            return 0;
        }
    pp_args a = {.partitions = 1, .log_interval = 1000};
    mc_err err;
    if (mc_args_parse(k_pp_flags, NPP, &a, argc, argv, NULL, true, &err) != MC_OK) mc_die_usage("%s", err.msg);
    if (!a.input) mc_die_usage("preprocess: --input is required");
    if (!a.output_prefix) mc_die_usage("preprocess: --output-prefix is required");
    if (!a.workers) mc_die_usage("preprocess: --workers is required");
    if (a.tokenizer_type == MC_TOKENIZER_NONE) mc_die_usage("preprocess: --tokenizer-type is required");

    mc_preprocess_options o = {.input = a.input,
                               .output_prefix = a.output_prefix,
                               .append_eod = a.append_eod,
                               .workers = a.workers,
                               .partitions = a.partitions,
                               .log_interval = a.log_interval,
                               .keep_sequential_samples = a.keep_sequential_samples,
                               .skip_bad_lines = a.skip_bad_lines,
                               .tokenizer = {.type = (mc_tokenizer_type)a.tokenizer_type,
                                             .vocab_file = a.vocab_file,
                                             .merge_file = a.merge_file,
                                             .tokenizer_model = a.tokenizer_model,
                                             .vocab_size = a.vocab_size,
                                             .hf_include_special_tokens = !a.hf_no_special_tokens}};
    /* --json-keys arrives space-joined (nargs='+'). */
    char *keys = a.json_keys;
    if (keys) {
        for (char *save = NULL, *k = strtok_r(keys, " ", &save); k; k = strtok_r(NULL, " ", &save)) {
            if (o.njson_keys == MC_PREPROCESS_MAX_KEYS)
                mc_die_usage("--json-keys: at most %d keys", MC_PREPROCESS_MAX_KEYS);
            o.json_keys[o.njson_keys++] = k;
        }
    }
    /* SIGTERM / SIGINT remove the temporary and partition files before the process ends */
    mc_cleanup_on_signals();
    int rc = mc_preprocess_run(&o, NULL, &err);
    if (rc != MC_OK) fprintf(stderr, "megatron-c: error: %s\n", err.msg);
    free(a.input);
    free(a.output_prefix);
    free(a.json_keys);
    free(a.vocab_file);
    free(a.merge_file);
    free(a.tokenizer_model);
    /* Nearly every failure here is about the input (a bad line, a missing file, a
     * tokenizer that rejects the text): the usage exit code. */
    return rc == MC_OK ? 0 : MC_EXIT_USAGE;
}
