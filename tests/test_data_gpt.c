/* test_data_gpt.c: GPTDataset's document, sample and shuffle indices and its samples,
 * against tools/reference/make_data_golden.py: a small in-memory corpus (one epoch, a
 * separated final epoch, a joined final epoch) and Megatron's mock data (seed 1234,
 * seq 64, the three "1,1,1" splits). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/gpt_dataset.h"
#include "data/lowlevel.h"
#include "data/split.h"

#define FIX "tests/fixtures/data/"

static uint64_t cs_i64(const int64_t *a, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (uint64_t)(i + 1) * (uint64_t)a[i];
    return s;
}

static uint64_t cs_i32(const int32_t *a, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (uint64_t)(i + 1) * (uint64_t)(int64_t)a[i];
    return s;
}

/* Reads a raw fixture array; *n = number of elements of size `item`. */
static void *read_fixture(const char *name, size_t item, int64_t *n) {
    char p[512];
    snprintf(p, sizeof p, FIX "%s", name);
    size_t bytes;
    void *buf = check_read_file(p, &bytes);
    if (!buf) {
        fprintf(stderr, "missing fixture %s (run tools/reference/make_data_golden.py)\n", p);
        exit(1);
    }
    *n = (int64_t)(bytes / item);
    return buf;
}

static int next_line(FILE *f, char *buf, int size) {
    while (fgets(buf, size, f))
        if (buf[0] != '#' && buf[0] != '\n') return 1;
    return 0;
}

static void test_corpus_cases(void) {
    int64_t ntok, noff;
    int32_t *tokens = read_fixture("corpus_tokens.i32", 4, &ntok);
    int64_t *offsets = read_fixture("corpus_offsets.i64", 8, &noff);
    mc_lowlevel *ll;
    mc_err err;
    CHECK(mc_lowlevel_open_memory(&ll, tokens, offsets, noff - 1, false, &err) == MC_OK, "%s", err.msg);

    FILE *f = fopen(FIX "corpus_gpt.txt", "r");
    CHECK(f != NULL, "corpus_gpt.txt");
    if (!f) return;
    char line[512];
    int cases = 0;
    while (next_line(f, line, sizeof line)) {
        char name[64];
        long long begin, end, requested, tokens_per_epoch, epochs, len;
        int seq, separate;
        unsigned seed;
        CHECK(sscanf(line, "%63s %lld %lld %d %u %lld %lld %lld %d %lld", name, &begin, &end, &seq, &seed, &requested,
                     &tokens_per_epoch, &epochs, &separate, &len) == 10);
        mc_gpt_dataset ds;
        CHECK(mc_gpt_dataset_build(&ds, ll, begin, end, requested, seq, seed, &err) == MC_OK, "%s", err.msg);
        CHECK(ds.tokens_per_epoch == tokens_per_epoch && ds.num_epochs == epochs && ds.separate_final_epoch == separate &&
                  ds.len == len,
              "%s: tokens %lld epochs %lld separate %d len %lld", name, (long long)ds.tokens_per_epoch,
              (long long)ds.num_epochs, ds.separate_final_epoch, (long long)ds.len);

        char fn[128];
        int64_t n;
        snprintf(fn, sizeof fn, "corpus_%s_document_index.i32", name);
        int32_t *di = read_fixture(fn, 4, &n);
        CHECK(n == ds.document_index_len && memcmp(di, ds.document_index, (size_t)n * 4) == 0, "%s: document index",
              name);
        snprintf(fn, sizeof fn, "corpus_%s_sample_index.i64", name);
        int64_t *si = read_fixture(fn, 8, &n);
        CHECK(n == 2 * (ds.len + 1) && memcmp(si, ds.sample_index, (size_t)n * 8) == 0, "%s: sample index", name);
        snprintf(fn, sizeof fn, "corpus_%s_shuffle_index.i64", name);
        int64_t *sh = read_fixture(fn, 8, &n);
        CHECK(n == ds.len && memcmp(sh, ds.shuffle_index, (size_t)n * 8) == 0, "%s: shuffle index", name);
        snprintf(fn, sizeof fn, "corpus_%s_samples.i32", name);
        int32_t *want = read_fixture(fn, 4, &n);
        CHECK(n == ds.len * (seq + 1), "%s: %lld sample tokens", name, (long long)n);
        int32_t *got = malloc((size_t)(seq + 1) * sizeof *got);
        int bad = 0;
        for (int64_t i = 0; i < ds.len && n == ds.len * (seq + 1); i++) {
            mc_gpt_dataset_get(&ds, i, got);
            bad += memcmp(got, want + i * (seq + 1), (size_t)(seq + 1) * 4) != 0;
        }
        CHECK(bad == 0, "%s: %d of %lld samples differ", name, bad, (long long)ds.len);
        free(got);
        free(di);
        free(si);
        free(sh);
        free(want);
        mc_gpt_dataset_free(&ds);
        cases++;
    }
    fclose(f);
    CHECK(cases == 4, "%d cases", cases);
    mc_lowlevel_close(ll);
    free(tokens);
    free(offsets);
}

static void test_mock_splits(void) {
    mc_lowlevel *ll;
    mc_err err;
    CHECK(mc_lowlevel_open_mock(&ll, 1000, 999, &err) == MC_OK, "%s", err.msg);
    mc_split split;
    CHECK(mc_split_parse(MC_SPLIT_MOCK, &split, &err) == MC_OK, "%s", err.msg);

    FILE *f = fopen(FIX "mock_gpt.txt", "r");
    CHECK(f != NULL, "mock_gpt.txt");
    if (!f) return;
    char line[1024];
    int k = 0;
    while (next_line(f, line, sizeof line)) {
        char name[16];
        long long begin, end, requested, tokens_per_epoch, epochs, len;
        int separate;
        unsigned long long cs_doc, cs_sample, cs_shuffle, cs_samples;
        CHECK(sscanf(line, "%15s %lld %lld %lld %lld %lld %d %lld %llu %llu %llu %llu", name, &begin, &end, &requested,
                     &tokens_per_epoch, &epochs, &separate, &len, &cs_doc, &cs_sample, &cs_shuffle, &cs_samples) == 12);
        int64_t b, e;
        mc_split_range(&split, k, ll->num_sequences, &b, &e);
        CHECK(b == begin && e == end, "%s range [%lld, %lld)", name, (long long)b, (long long)e);
        mc_gpt_dataset ds;
        CHECK(mc_gpt_dataset_build(&ds, ll, b, e, requested, 64, 1234, &err) == MC_OK, "%s", err.msg);
        CHECK(ds.tokens_per_epoch == tokens_per_epoch && ds.num_epochs == epochs && ds.separate_final_epoch == separate &&
                  ds.len == len,
              "%s: tokens %lld epochs %lld separate %d len %lld", name, (long long)ds.tokens_per_epoch,
              (long long)ds.num_epochs, ds.separate_final_epoch, (long long)ds.len);
        CHECK(cs_i32(ds.document_index, ds.document_index_len) == cs_doc, "%s: document index", name);
        CHECK(cs_i64(ds.sample_index, 2 * (ds.len + 1)) == cs_sample, "%s: sample index", name);
        CHECK(cs_i64(ds.shuffle_index, ds.len) == cs_shuffle, "%s: shuffle index", name);
        int32_t *samples = malloc(200 * 65 * sizeof *samples);
        for (int i = 0; i < 200; i++) mc_gpt_dataset_get(&ds, i, samples + i * 65);
        CHECK(cs_i32(samples, 200 * 65) == cs_samples, "%s: first 200 samples", name);

        if (k == MC_SPLIT_TRAIN) {
            int64_t n;
            int32_t *want = read_fixture("mock_train_samples200.i32", 4, &n);
            int bad = 0;
            for (int i = 0; i < 200 && n == 200 * 65; i++) bad += memcmp(samples + i * 65, want + i * 65, 65 * 4) != 0;
            CHECK(n == 200 * 65 && bad == 0, "train: %d of the first 200 samples differ", bad);
            free(want);
            int32_t *di = read_fixture("mock_train_document_index_first1000.i32", 4, &n);
            CHECK(n == 1000 && memcmp(di, ds.document_index, 1000 * 4) == 0, "train: document index [0, 1000)");
            free(di);
            int64_t *si = read_fixture("mock_train_sample_index_first1000.i64", 8, &n);
            CHECK(n == 2000 && memcmp(si, ds.sample_index, 2000 * 8) == 0, "train: sample index rows [0, 1000)");
            free(si);
            int64_t *sh = read_fixture("mock_train_shuffle_index_first1000.i64", 8, &n);
            CHECK(n == 1000 && memcmp(sh, ds.shuffle_index, 1000 * 8) == 0, "train: shuffle index [0, 1000)");
            free(sh);
            /* Separated final epoch: the shuffle keeps [0, S0) and [S0, len) apart. */
            int64_t s0 = ds.num_samples_sans_final_epoch, misplaced = 0;
            for (int64_t i = 0; i < ds.len; i++) misplaced += (i < s0) != (ds.shuffle_index[i] < s0);
            CHECK(misplaced == 0, "train: %lld shuffle entries cross the final-epoch boundary", (long long)misplaced);
        }
        free(samples);
        mc_gpt_dataset_free(&ds);
        k++;
    }
    fclose(f);
    CHECK(k == 3, "%d splits", k);
    mc_lowlevel_close(ll);
}

/* Every sample is seq+1 consecutive tokens of the concatenated document stream, and
 * consecutive samples (before shuffling) overlap by one token. */
static void test_overlap_and_edges(void) {
    /* 5 documents of lengths 1, 2, 7, 3, 20: eod 99 last. */
    const int64_t offsets[6] = {0, 1, 3, 10, 13, 33};
    int32_t tokens[33];
    for (int d = 0; d < 5; d++)
        for (int64_t i = offsets[d]; i < offsets[d + 1]; i++) tokens[i] = i == offsets[d + 1] - 1 ? 99 : (int32_t)i;
    mc_lowlevel *ll;
    mc_err err;
    CHECK(mc_lowlevel_open_memory(&ll, tokens, offsets, 5, false, &err) == MC_OK, "%s", err.msg);
    mc_gpt_dataset ds;
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 5, -1, 4, 7, &err) == MC_OK, "%s", err.msg);
    CHECK(ds.len == (33 - 1) / 4, "len %lld", (long long)ds.len);
    int64_t *row_of = malloc((size_t)ds.len * sizeof *row_of);
    for (int64_t i = 0; i < ds.len; i++) row_of[ds.shuffle_index[i]] = i;
    int32_t prev[5], cur[5];
    for (int64_t j = 0; j < ds.len; j++) {
        mc_gpt_dataset_get(&ds, row_of[j], cur);
        if (j > 0) CHECK(cur[0] == prev[4], "sample %lld does not start on the previous one's last token", (long long)j);
        memcpy(prev, cur, sizeof cur);
    }
    free(row_of);
    mc_gpt_dataset_free(&ds);

    /* An empty range and a range shorter than one sample give len 0 and draw nothing. */
    CHECK(mc_gpt_dataset_build(&ds, ll, 2, 2, 100, 4, 7, &err) == MC_OK && ds.len == 0);
    mc_gpt_dataset_free(&ds);
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 2, -1, 4, 7, &err) == MC_OK && ds.len == 0, "len %lld", (long long)ds.len);
    mc_gpt_dataset_free(&ds);
    /* ... but a short range with requested samples repeats epochs. */
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 2, 10, 4, 7, &err) == MC_OK && ds.len >= 10 && ds.num_epochs == 14,
          "len %lld epochs %lld", (long long)ds.len, (long long)ds.num_epochs);
    mc_gpt_dataset_free(&ds);

    /* Errors. */
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 5, -1, 0, 7, &err) == MC_ERR && strstr(err.msg, "--seq-length"), "%s",
          err.msg);
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 5, -1, 4, 1ull << 32, &err) == MC_ERR && strstr(err.msg, "--seed"), "%s",
          err.msg);
    CHECK(mc_gpt_dataset_build(&ds, ll, 0, 6, -1, 4, 7, &err) == MC_ERR && strstr(err.msg, "outside"), "%s", err.msg);
    mc_lowlevel_close(ll);
}

int main(void) {
    RUN(test_corpus_cases);
    RUN(test_mock_splits);
    RUN(test_overlap_and_edges);
    return check_summary();
}
