/* cmd_inspect_data.c: `megatron-c inspect-data`: the samples a training run would see.
 *
 *   megatron-c inspect-data --data-path 0.3 a_text_document 0.7 b_text_document --split 99,1,0 \
 *       --tokenizer-type GPT2BPETokenizer --vocab-file V --merge-file M --seq-length 1024 \
 *       --split-name train --num-samples 100000 --start 0 --count 4 --decode
 *
 * Takes the data flags of `train` (--data-path / --train-data-path ..., --split, --seed,
 * --seq-length, --data-cache-path, the tokenizer flags, --mock-data, --text-data-path,
 * and --train-iters/--global-batch-size/--eval-* which decide the sample counts) and
 * prints one JSON object per sample on stdout:
 *     {"index": I, "tokens": [...], "labels": [...]}
 * plus "dataset"/"dataset_sample" for a blended split and "text" with --decode.
 * --num-samples N is the size asked of the split, as the trainer asks it (the default is
 * what the trainer would ask given the other flags); it changes the order of the samples
 * (more epochs, another shuffle), so pass the same value as the run being inspected. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/pyjson.h"
#include "cli/commands.h"
#include "data/data.h"
#include "data/index_cache.h"
#include "megatron.h"
#include "tokenizer/tokenizer.h"
#include "train/flags.h"

typedef struct inspect_args {
    mc_config cfg; /* first: the train table's offsets apply unchanged */
    int split_name;
    int64_t num_samples, start, count;
    bool decode;
} inspect_args;

static const mc_arg_choice k_split_names[] = {
    {"train", MC_SPLIT_TRAIN}, {"valid", MC_SPLIT_VALID}, {"test", MC_SPLIT_TEST}, {NULL, 0}};

static const mc_arg_spec k_inspect_extra[] = {
    {"--split-name", MC_ARG_CHOICE, offsetof(inspect_args, split_name), "train, valid or test (default train)",
     .choices = k_split_names},
    {"--num-samples", MC_ARG_INT64, offsetof(inspect_args, num_samples),
     "samples requested of the split, as the trainer requests them (default: from the training flags)", .min = 0,
     .max = 1e15},
    {"--start", MC_ARG_INT64, offsetof(inspect_args, start), "first sample index (default 0)", .min = 0, .max = 1e15},
    {"--count", MC_ARG_INT64, offsetof(inspect_args, count), "samples to print (default 10)", .min = 0, .max = 1e15},
    {"--decode", MC_ARG_TRUE, offsetof(inspect_args, decode), "add the text of the tokens"},
};
#define NEXTRA ((int)(sizeof k_inspect_extra / sizeof k_inspect_extra[0]))

static void print_ids(const int32_t *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

int mc_cmd_inspect_data(int argc, char **argv) {
    int ntrain;
    const mc_arg_spec *train = mc_flags_table(&ntrain);
    int n = ntrain + NEXTRA;
    mc_arg_spec *table = mc_xmalloc((size_t)n * sizeof *table);
    memcpy(table, train, (size_t)ntrain * sizeof *table);
    memcpy(table + ntrain, k_inspect_extra, sizeof k_inspect_extra);
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c inspect-data [train's data flags] --seq-length S [--split-name train|valid|test] "
                   "[--num-samples N] [--start I] [--count K] [--decode]\n\n");
            mc_args_print_help(k_inspect_extra, NEXTRA);
            printf("\n  and the data, tokenizer and schedule flags of `megatron-c train --help`\n");
            free(table);
            return 0;
        }
    inspect_args a;
    memset(&a, 0, sizeof a);
    mc_config_init(&a.cfg);
    a.num_samples = -1;
    a.count = 10;
    mc_err err;
    if (mc_args_parse(table, n, &a, argc, argv, NULL, false, &err) != MC_OK) mc_die_usage("%s", err.msg);
    free(table);
    mc_config *cfg = &a.cfg;
    if (cfg->model.seq_length <= 0) mc_die_usage("inspect-data: --seq-length is required");
    if (mc_config_validate_data(cfg, &err) != MC_OK) mc_die_usage("%s", err.msg);

    int64_t want[MC_NUM_SPLITS];
    mc_split_requested_samples(cfg, want);
    if (a.num_samples >= 0) want[a.split_name] = a.num_samples;
    mc_data *d;
    if (mc_data_open(&d, cfg, want[0], want[1], want[2], &err) != MC_OK) mc_die_usage("%s", err.msg);
    int k = a.split_name;
    int64_t len = mc_data_split_len(d, k);
    const int16_t *di;
    const int64_t *dsi;
    int blended = mc_data_split_blend(d, k, &di, &dsi);
    /* No count (no --num-samples, nothing from the training flags) builds one epoch. */
    char requested[96];
    if (want[k] > 0)
        snprintf(requested, sizeof requested, "requested %lld", (long long)want[k]);
    else
        snprintf(requested, sizeof requested, "one epoch, as no sample count was requested");
    fprintf(stderr, "%s: %s split, %lld samples (%s) of %d tokens + 1\n", mc_data_source(d), mc_split_names[k],
            (long long)len, requested, mc_data_seq_length(d));
    if (a.start > len || a.count > len - a.start) {
        mc_data_close(d);
        mc_die_usage("inspect-data: samples [%lld, %lld) are outside the %lld samples of the %s split",
                     (long long)a.start, (long long)(a.start + a.count), (long long)len, mc_split_names[k]);
    }

    mc_tokenizer *tok = NULL;
    if (a.decode) {
        mc_tokenizer_options o = mc_data_tokenizer_options(cfg);
        if (mc_tokenizer_open(&tok, &o, &err) != MC_OK) mc_die_usage("--decode: %s", err.msg);
    }
    int S = mc_data_seq_length(d);
    int32_t *sample = mc_xmalloc((size_t)(S + 1) * sizeof *sample);
    mc_strbuf js = {0};
    for (int64_t i = a.start; i < a.start + a.count; i++) {
        mc_data_get_sample(d, k, i, sample);
        printf("{\"index\": %lld", (long long)i);
        if (blended) printf(", \"dataset\": %d, \"dataset_sample\": %lld", di[i], (long long)dsi[i]);
        printf(", \"tokens\": ");
        print_ids(sample, S);
        printf(", \"labels\": ");
        print_ids(sample + 1, S);
        if (tok) {
            size_t tlen;
            char *text = mc_tokenizer_decode(tok, sample, S, &tlen);
            js.len = 0;
            mc_json_string(&js, text);
            printf(", \"text\": %s", js.s);
            free(text);
        }
        printf("}\n");
    }
    mc_strbuf_free(&js);
    free(sample);
    if (tok) mc_tokenizer_free(tok);
    mc_data_close(d);
    mc_config_free(cfg);
    return 0;
}
