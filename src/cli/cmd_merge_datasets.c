/* cmd_merge_datasets.c: `megatron-c merge-datasets`, Megatron's tools/merge_datasets.py.
 *
 *   megatron-c merge-datasets --input a_text_document b_text_document --output-prefix ab_text_document
 *   megatron-c merge-datasets --input DIR --output-prefix OUT     (every pair in DIR, sorted)
 * concatenates the datasets with IndexedDatasetBuilder.add_index (same token dtype). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/file.h"
#include "cli/commands.h"
#include "data/preprocess.h"

typedef struct merge_args {
    char *input, *output_prefix;
} merge_args;

static const mc_arg_spec k_merge_flags[] = {
    {"--input", MC_ARG_LIST, offsetof(merge_args, input), "dataset prefixes, or directories of .bin/.idx pairs"},
    {"--output-prefix", MC_ARG_STRING, offsetof(merge_args, output_prefix), "writes PREFIX.bin/.idx"},
    {"--multimodal", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "multimodal datasets are not supported"},
};
#define NMERGE ((int)(sizeof k_merge_flags / sizeof k_merge_flags[0]))

int mc_cmd_merge_datasets(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c merge-datasets --input PREFIX|DIR ... --output-prefix OUT\n"
                   "(Megatron's tools/merge_datasets.py)\n\n");
            mc_args_print_help(k_merge_flags, NMERGE);
            return 0;
        }
    merge_args a = {0};
    mc_err err;
    if (mc_args_parse(k_merge_flags, NMERGE, &a, argc, argv, NULL, true, &err) != MC_OK) mc_die_usage("%s", err.msg);
    if (!a.input) mc_die_usage("merge-datasets: --input is required");
    if (!a.output_prefix) mc_die_usage("merge-datasets: --output-prefix is required");
    const char *inputs[4096];
    int n = 0;
    for (char *save = NULL, *p = strtok_r(a.input, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        if (n == (int)(sizeof inputs / sizeof inputs[0])) mc_die_usage("merge-datasets: too many inputs");
        inputs[n++] = p;
    }
    mc_cleanup_on_signals(); /* SIGTERM / SIGINT remove the temporary .bin/.idx */
    int rc = mc_merge_datasets(inputs, n, a.output_prefix, stdout, &err);
    if (rc != MC_OK) fprintf(stderr, "megatron-c: error: %s\n", err.msg);
    free(a.input);
    free(a.output_prefix);
    return rc == MC_OK ? 0 : MC_EXIT_USAGE;
}
