/* test_tokenizer_common.h: helpers of test_tokenizer*.c: opening the shared tokenizers,
 * reading JSON lines, a GPT-2 tokenizer.json built from gpt2-vocab.json + gpt2-merges.txt,
 * and the id-sequence hash of the corpus fixtures. */
#ifndef MC_TESTS_TOKENIZER_COMMON_H
#define MC_TESTS_TOKENIZER_COMMON_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer/tokenizer.h"

#define TOK_FIX "tests/fixtures/tokenizer/"

static char *tt_read(const char *path, size_t *len) { return check_read_file(path, len); }

static const char *tt_shared(const char *rel) {
    static char bufs[8][512];
    static int k = 0;
    char *b = bufs[k++ % 8];
    return check_shared_path(rel, b, 512);
}

/* Skips the whole test binary when the shared data is not there. */
static void tt_need_shared(void) {
    if (access(tt_shared("data/gpt2/gpt2-vocab.json"), R_OK) != 0)
        check_skip("no shared test data (../shared/data; set MC_SHARED_DIR)");
}

/* JSON lines of a file, parsed; NULL-terminated array. */
static cJSON **tt_jsonl(const char *path, int *count) {
    char *data = tt_read(path, NULL);
    if (!data) {
        fprintf(stderr, "missing %s\n", path);
        exit(1);
    }
    int cap = 64, n = 0;
    cJSON **rows = malloc((size_t)cap * sizeof *rows);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        if (!*line || *line == '#') continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            fprintf(stderr, "bad JSON line in %s\n", path);
            exit(1);
        }
        if (n + 1 >= cap) rows = realloc(rows, (size_t)(cap *= 2) * sizeof *rows);
        rows[n++] = j;
    }
    rows[n] = NULL;
    free(data);
    if (count) *count = n;
    return rows;
}

static void tt_jsonl_free(cJSON **rows) {
    for (int i = 0; rows[i]; i++) cJSON_Delete(rows[i]);
    free(rows);
}

static mc_tokenizer *tt_open(const mc_tokenizer_options *o) {
    mc_tokenizer *t = NULL;
    mc_err e = {{0}};
    if (mc_tokenizer_open(&t, o, &e) != MC_OK) {
        fprintf(stderr, "open failed: %s\n", e.msg);
        exit(1);
    }
    return t;
}

static mc_tokenizer *tt_gpt2(void) {
    mc_tokenizer_options o = {.type = MC_TOKENIZER_GPT2BPE,
                              .vocab_file = tt_shared("data/gpt2/gpt2-vocab.json"),
                              .merge_file = tt_shared("data/gpt2/gpt2-merges.txt")};
    return tt_open(&o);
}

static mc_tokenizer *tt_hf(const char *path, bool include_special, bool split_special) {
    mc_tokenizer_options o = {.type = MC_TOKENIZER_HF, .tokenizer_model = path,
                              .hf_include_special_tokens = include_special, .split_special_tokens = split_special};
    return tt_open(&o);
}

static mc_tokenizer *tt_spm(const char *path) {
    mc_tokenizer_options o = {.type = MC_TOKENIZER_SENTENCEPIECE, .tokenizer_model = path};
    return tt_open(&o);
}

/* A GPT-2 tokenizer.json (as HF's gpt2 repository has it) written from the Megatron files:
 * ByteLevel pre-tokenizer/decoder, BPE, <|endoftext|> as a special added token. */
static const char *tt_gpt2_json(void) {
    static char path[256];
    if (path[0]) return path;
    char *vocab = tt_read(tt_shared("data/gpt2/gpt2-vocab.json"), NULL);
    char *merges = tt_read(tt_shared("data/gpt2/gpt2-merges.txt"), NULL);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 50256);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddBoolToObject(eot, "single_word", 0);
    cJSON_AddBoolToObject(eot, "lstrip", 0);
    cJSON_AddBoolToObject(eot, "rstrip", 0);
    cJSON_AddBoolToObject(eot, "normalized", 0);
    cJSON_AddBoolToObject(eot, "special", 1);
    cJSON_AddItemToArray(added, eot);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pre, "trim_offsets", 1);
    cJSON_AddBoolToObject(pre, "use_regex", 1);
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "ByteLevel");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddItemToObject(model, "vocab", cJSON_Parse(vocab));
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    int lineno = 0;
    for (char *line = strtok(merges, "\n"); line; line = strtok(NULL, "\n"))
        if (lineno++ > 0 && *line) cJSON_AddItemToArray(ml, cJSON_CreateString(line));
    char *text = cJSON_PrintUnformatted(root);
    snprintf(path, sizeof path, "/tmp/mc_test_gpt2_%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(root);
    free(vocab);
    free(merges);
    return path;
}

static inline uint64_t tt_fnv1a64(const int32_t *ids, int64_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    const uint8_t *p = (const uint8_t *)ids; /* little-endian host */
    for (int64_t i = 0; i < n * 4; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

static inline bool tt_ids_eq(const mc_ids *got, const cJSON *want) {
    if (got->len != cJSON_GetArraySize(want)) return false;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, want) if (got->data[i++] != (int32_t)x->valuedouble) return false;
    return true;
}

static inline void tt_print_ids(const char *label, const int32_t *ids, int64_t n) {
    fprintf(stderr, "    %s (%lld):", label, (long long)n);
    for (int64_t i = 0; i < n && i < 48; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 48 ? " ...\n" : "\n");
}

#endif
