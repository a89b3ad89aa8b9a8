/* test_data_open.c: the trainer-facing API end to end: mock data through the sampler
 * (against the numpy fixture), an in-memory corpus through --split, a text file, and the
 * one-line errors for bad inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/data.h"
#include "tokenizer/byte_tokenizer.h"

#define FIX "tests/fixtures/data/"

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

static void base_config(mc_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->model.seq_length = 64;
    cfg->train.seed = 1234;
    cfg->train.micro_batch_size = 4;
}

static void test_mock_sampler(void) {
    mc_config cfg;
    base_config(&cfg);
    cfg.data.mock_data = true;
    cfg.model.vocab_size = 1000;
    cfg.data.split = "99,1,0"; /* ignored: mock data is always split 1,1,1 */
    cfg.data.eod_mask_loss = true;
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 1500000, 5000, -1, &err) == MC_OK, "%s", err.msg);
    if (!d) return;
    CHECK(mc_data_vocab_size(d) == 1000 && mc_data_eod(d) == 999 && mc_data_seq_length(d) == 64);
    CHECK(mc_data_split_len(d, MC_SPLIT_TRAIN) == 2130946 && mc_data_split_len(d, MC_SPLIT_VALID) == 1064995 &&
              mc_data_split_len(d, MC_SPLIT_TEST) == 1066985,
          "lens %lld %lld %lld", (long long)mc_data_split_len(d, 0), (long long)mc_data_split_len(d, 1),
          (long long)mc_data_split_len(d, 2));
    int64_t b, e;
    mc_data_split_range(d, MC_SPLIT_VALID, &b, &e);
    CHECK(b == 33333 && e == 66667);

    /* 5 iterations of gbs 40 = mbs 4 x dp 2 x 5 micro-batches cover samples [0, 200). */
    int64_t n;
    int32_t *want = read_fixture("mock_train_samples200.i32", 4, &n);
    CHECK(n == 200 * 65);
    const int mbs = 4, dp = 2, micro = 5;
    int seen[200] = {0}, bad = 0;
    mc_batch batch;
    mc_batch_init(&batch, mbs, 64);
    for (int64_t consumed = 0; consumed < 200; consumed += mbs * dp * micro)
        for (int r = 0; r < dp; r++)
            for (int m = 0; m < micro; m++) {
                int64_t first = mc_data_sample_index(consumed, m, mbs, dp, r);
                mc_data_get_batch(d, MC_SPLIT_TRAIN, first, mbs, &batch);
                CHECK(batch.mbs == mbs);
                for (int row = 0; row < mbs; row++) {
                    int64_t idx = batch.sample_ids[row];
                    CHECK(idx == first + row && idx < 200);
                    if (idx < 0 || idx >= 200) continue;
                    seen[idx]++;
                    const int32_t *w = want + idx * 65;
                    for (int i = 0; i < 64; i++) {
                        bad += batch.tokens[row * 64 + i] != w[i] || batch.labels[row * 64 + i] != w[i + 1];
                        bad += batch.loss_mask[row * 64 + i] != (w[i] == 999 ? 0.0f : 1.0f);
                        bad += batch.position_ids[row * 64 + i] != i || batch.seg_start[row * 64 + i] != 0;
                    }
                }
            }
    CHECK(bad == 0, "%d mismatches against the numpy samples", bad);
    int once = 1;
    for (int i = 0; i < 200; i++) once &= seen[i] == 1;
    CHECK(once, "the sampler must visit samples 0..199 exactly once");
    mc_batch_free(&batch);
    free(want);
    mc_data_close(d);
}

static void test_corpus_split(void) {
    int64_t ntok, noff, n;
    int32_t *tokens = read_fixture("corpus_tokens.i32", 4, &ntok);
    int64_t *offsets = read_fixture("corpus_offsets.i64", 8, &noff);
    mc_config cfg;
    base_config(&cfg);
    cfg.model.seq_length = 16;
    cfg.model.vocab_size = 50; /* NullTokenizer convention: eod 49 */
    cfg.data.corpus_tokens = tokens;
    cfg.data.corpus_doc_offsets = offsets;
    cfg.data.corpus_num_docs = noff - 1;
    cfg.data.split = "3,31,3"; /* valid = sequences [3, 34): the fixture's "joined" case */
    cfg.data.reset_position_ids = true;
    cfg.data.reset_attention_mask = true;
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 0, 90, 0, &err) == MC_OK, "%s", err.msg);
    if (!d) return;
    CHECK(mc_data_eod(d) == 49 && mc_data_vocab_size(d) == 50);
    const mc_gpt_dataset *v = mc_data_split(d, MC_SPLIT_VALID);
    CHECK(v->seq_begin == 3 && v->seq_end == 34 && v->num_epochs == 3 && !v->separate_final_epoch);
    int64_t *sh = read_fixture("corpus_joined_shuffle_index.i64", 8, &n);
    CHECK(n == v->len && memcmp(sh, v->shuffle_index, (size_t)n * 8) == 0, "valid shuffle index");
    free(sh);
    int32_t *want = read_fixture("corpus_joined_samples.i32", 4, &n);
    mc_batch batch;
    mc_batch_init(&batch, 3, 16);
    int bad = 0;
    for (int64_t first = 0; first + 3 <= v->len; first += 3) {
        mc_data_get_batch(d, MC_SPLIT_VALID, first, 3, &batch);
        for (int row = 0; row < 3; row++) {
            const int32_t *w = want + (first + row) * 17;
            int doc_start = 0;
            for (int i = 0; i < 16; i++) {
                bad += batch.tokens[row * 16 + i] != w[i] || batch.labels[row * 16 + i] != w[i + 1];
                bad += batch.position_ids[row * 16 + i] != i - doc_start || batch.seg_start[row * 16 + i] != doc_start;
                if (w[i] == 49) doc_start = i + 1;
            }
        }
    }
    CHECK(bad == 0, "%d mismatches", bad);
    mc_batch_free(&batch);
    free(want);
    mc_data_close(d);
    free(tokens);
    free(offsets);
}

static void test_text_file(void) {
    char dir[512], path[600];
    const char *bd = getenv("MC_BUILD_DIR");
    snprintf(dir, sizeof dir, "%s", bd ? bd : "/tmp");
    snprintf(path, sizeof path, "%s/test_data_open_%d.txt", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    /* 40 short documents: enough tokens for a few samples of 8 in each split. */
    for (int i = 0; i < 40; i++) fprintf(f, "document %d says hello\nand goodbye\n\n", i);
    fclose(f);

    mc_config cfg;
    base_config(&cfg);
    cfg.model.seq_length = 8;
    cfg.data.text_data_path = path;
    cfg.data.split = "90,5,5";
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 100, 10, 10, &err) == MC_OK, "%s", err.msg);
    if (d) {
        CHECK(mc_data_vocab_size(d) == 257 && mc_data_eod(d) == 256);
        int64_t b, e;
        mc_data_split_range(d, MC_SPLIT_TRAIN, &b, &e);
        CHECK(b == 0 && e == 36, "[%lld, %lld)", (long long)b, (long long)e);
        CHECK(mc_data_split_len(d, MC_SPLIT_TRAIN) >= 100 && mc_data_split_len(d, MC_SPLIT_TEST) >= 10);
        mc_batch batch;
        mc_batch_init(&batch, 2, 8);
        mc_data_get_batch(d, MC_SPLIT_TRAIN, 0, 2, &batch);
        char text[64];
        mc_byte_tokenizer_decode(batch.tokens, 8, text, sizeof text);
        /* Every token is a byte of the file or the EOD. */
        int ok = 1;
        for (int i = 0; i < 16; i++) ok &= batch.tokens[i] >= 0 && batch.tokens[i] <= 256;
        CHECK(ok, "tokens out of the byte vocabulary");
        mc_batch_free(&batch);
        mc_data_close(d);
    }
    remove(path);

    /* One epoch of a corpus shorter than one sample leaves train empty. (With a
     * requested sample count Megatron repeats the corpus over as many epochs as needed.) */
    f = fopen(path, "w");
    if (f) {
        fputs("tiny\n", f);
        fclose(f);
    }
    cfg.model.seq_length = 64;
    CHECK(mc_data_open(&d, &cfg, 0, 0, 0, &err) == MC_ERR && d == NULL);
    CHECK(strstr(err.msg, "train split") && strstr(err.msg, path) && strstr(err.msg, "empty"), "%s", err.msg);
    remove(path);
}

static void expect_open_error(mc_config *cfg, const char *needle) {
    mc_data *d = (mc_data *)1;
    mc_err err = {{0}};
    CHECK(mc_data_open(&d, cfg, 100, 10, 10, &err) == MC_ERR && d == NULL, "expected an error with \"%s\"", needle);
    CHECK(strstr(err.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", err.msg, needle);
    CHECK(err.msg[0] && !strchr(err.msg, '\n'), "one line: \"%s\"", err.msg);
}

static void test_errors(void) {
    mc_config cfg;
    base_config(&cfg);
    expect_open_error(&cfg, "no training data");

    cfg.data.mock_data = true;
    expect_open_error(&cfg, "--vocab-size");
    cfg.model.vocab_size = 100;
    cfg.data.text_data_path = "x.txt";
    expect_open_error(&cfg, "exclusive");
    cfg.data.mock_data = false;
    cfg.data.text_data_path = "/nonexistent/corpus.txt";
    expect_open_error(&cfg, "--text-data-path /nonexistent/corpus.txt: cannot open");
    cfg.data.text_data_path = NULL;
    cfg.data.data_path = "/data/my_text_document";
    expect_open_error(&cfg, "--data-path /data/my_text_document");

    /* In-memory corpus. */
    int32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = i % 10 == 9 ? 99 : i % 10;
    int64_t offsets[5] = {0, 10, 20, 30, 40};
    cfg.data.data_path = NULL;
    cfg.data.corpus_tokens = tokens;
    cfg.data.corpus_doc_offsets = offsets;
    cfg.data.corpus_num_docs = 4;
    cfg.model.vocab_size = 50;
    cfg.model.seq_length = 4;
    expect_open_error(&cfg, "outside the vocabulary");
    cfg.model.vocab_size = 100;
    cfg.data.split = "0,1,0";
    expect_open_error(&cfg, "--split \"0,1,0\": the train split");
    cfg.data.split = "1,2,x,3,4";
    expect_open_error(&cfg, "--split");
    cfg.data.split = "1,-1,0";
    expect_open_error(&cfg, "negative");
    cfg.data.split = NULL;
    cfg.model.seq_length = 0;
    expect_open_error(&cfg, "--seq-length");
    cfg.model.seq_length = 4;
    cfg.train.seed = 1ull << 40;
    expect_open_error(&cfg, "--seed");
    cfg.train.seed = 1;
    int64_t bad_offsets[5] = {0, 10, 5, 30, 40};
    cfg.data.corpus_doc_offsets = bad_offsets;
    expect_open_error(&cfg, "non-decreasing");
    cfg.data.corpus_doc_offsets = offsets;

    /* And the corpus works once the inputs are right (split 969,30,1 of 4 documents
     * leaves valid and test empty: they are len 0, not an error). */
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 0, 0, 0, &err) == MC_OK, "%s", err.msg);
    if (d) {
        CHECK(mc_data_split_len(d, MC_SPLIT_TRAIN) == (40 - 1) / 4 && mc_data_split_len(d, MC_SPLIT_VALID) == 0 &&
              mc_data_split_len(d, MC_SPLIT_TEST) == 0);
        mc_data_close(d);
    }
}

int main(void) {
    RUN(test_mock_sampler);
    RUN(test_corpus_split);
    RUN(test_text_file);
    RUN(test_errors);
    return check_summary();
}
