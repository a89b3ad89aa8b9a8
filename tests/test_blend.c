/* test_blend.c: GPTDataset over Megatron .bin/.idx files, blends, and the index cache,
 * against tools/reference/make_data_golden.py (numpy restatements of gpt_dataset.py,
 * blended_dataset.py, blended_megatron_dataset_builder.py and helpers.cpp; the cache
 * files in tests/fixtures/data/cache_* are what numpy.save and json.dumps write):
 *   - one prefix with Megatron's legacy default split "969, 30, 1", a 6-epoch train split
 *     whose final epoch is separated: indices, the first 200 samples, the cache files
 *     byte for byte (names = md5 of the description), and reuse on the next open;
 *   - a cache written by "Megatron" (the fixture) is loaded, not rebuilt; a tampered one is
 *     an error; the default cache location <prefix>/cache/GPTDataset_indices;
 *   - a weighted blend (0.3/0.7, 0.5% surplus), an unweighted blend, per-split blends, the
 *     exhaustive blending indices, and the blend parsing rules. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/blend.h"
#include "data/data.h"
#include "fixture_util.h"

#define FIX "tests/fixtures/data/"
#define IDX_A FIX "idx_a"
#define IDX_B FIX "idx_b"

static char *g_tmp;

static uint64_t cs_sample(uint64_t acc, int64_t *pos, const int32_t *s, int n) {
    for (int i = 0; i < n; i++) acc += (uint64_t)(++*pos) * (uint64_t)(int64_t)s[i];
    return acc;
}

/* Checksum of the first min(len, 200) samples of a split, as the golden script computes. */
static uint64_t split_checksum(const mc_data *d, int split) {
    int64_t n = mc_data_split_len(d, split), pos = 0;
    if (n > 200) n = 200;
    int S = mc_data_seq_length(d);
    int32_t *s = malloc((size_t)(S + 1) * sizeof *s);
    uint64_t acc = 0;
    for (int64_t i = 0; i < n; i++) {
        mc_data_get_sample(d, split, i, s);
        acc = cs_sample(acc, &pos, s, S + 1);
    }
    free(s);
    return acc;
}

/* The golden line "case split len checksum". */
static bool golden(const char *cs, const char *split, long long *len, unsigned long long *sum) {
    FILE *f = fopen(FIX "idx_gpt.txt", "r");
    if (!f) return false;
    char line[256], c[64], k[16];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%63s %15s %lld %llu", c, k, len, sum) == 4 && !strcmp(c, cs) && !strcmp(k, split)) {
            found = true;
            break;
        }
    fclose(f);
    return found;
}

static void check_split(const mc_data *d, const char *cs, int split) {
    static const char *const names[3] = {"train", "valid", "test"};
    long long len;
    unsigned long long sum;
    CHECK(golden(cs, names[split], &len, &sum), "no golden line for %s %s", cs, names[split]);
    CHECK(mc_data_split_len(d, split) == len, "%s %s: len %lld, golden %lld", cs, names[split],
          (long long)mc_data_split_len(d, split), len);
    CHECK(split_checksum(d, split) == sum, "%s %s: samples differ from the golden ones", cs, names[split]);
}

static void base_config(mc_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->model.seq_length = 32;
    cfg->model.vocab_size = 1000;
    cfg->train.seed = 1234;
    cfg->data.tokenizer_type = MC_TOKENIZER_NULL;
}

static void single_wants(int64_t want[3]) {
    FILE *f = fopen(FIX "idx_single.txt", "r");
    long long a = 0, b = 0;
    if (f) {
        CHECK(fscanf(f, "want %lld %lld", &a, &b) == 2);
        fclose(f);
    }
    want[0] = a;
    want[1] = b;
    want[2] = 0;
}

/* Every file of the fixture cache directory exists, byte-identical, in `dir`. */
static int same_cache(const char *fixture_dir, const char *dir) {
    DIR *d = opendir(fixture_dir);
    if (!d) return -1;
    struct dirent *e;
    int n = 0, bad = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/%s", fixture_dir, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dir, e->d_name);
        if (!fu_same_file(a, b)) {
            fprintf(stderr, "  cache file %s differs or is missing\n", e->d_name);
            bad++;
        }
        n++;
    }
    closedir(d);
    return bad ? -bad : n;
}

static void test_single_prefix(void) {
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = IDX_A; /* no --split: Megatron's legacy "969, 30, 1" */
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache_single", g_tmp);
    cfg.data.data_cache_path = cache;
    int64_t want[3];
    single_wants(want);
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_OK, "%s", err.msg);
    if (!d) return;
    const mc_gpt_dataset *t = mc_data_split(d, MC_SPLIT_TRAIN);
    CHECK(t->num_epochs == 6 && t->separate_final_epoch, "epochs %lld separate %d", (long long)t->num_epochs,
          t->separate_final_epoch);
    check_split(d, "single", MC_SPLIT_TRAIN);
    check_split(d, "single", MC_SPLIT_VALID);
    CHECK(mc_data_split_len(d, MC_SPLIT_TEST) == 0);
    /* The first 200 samples, token for token. */
    size_t n;
    int32_t *want200 = (int32_t *)fu_read(FIX "idx_single_train_samples200.i32", &n);
    CHECK(want200 && n == 200 * 33 * 4);
    int32_t s[33];
    int bad = 0;
    for (int i = 0; want200 && i < 200; i++) {
        mc_data_get_sample(d, MC_SPLIT_TRAIN, i, s);
        bad += memcmp(s, want200 + 33 * i, sizeof s) != 0;
    }
    CHECK(bad == 0, "%d of the first 200 samples differ", bad);
    free(want200);
    int loaded, built;
    mc_data_cache_stats(d, &loaded, &built);
    CHECK(loaded == 0 && built == 2, "loaded %d built %d", loaded, built);
    mc_data_close(d);
    /* The cache files are Megatron's, byte for byte (so their names, the md5 of the
     * description, match too). */
    CHECK(same_cache(FIX "cache_single", cache) == 8, "cache files differ from numpy/json's");
    char names[4096];
    CHECK(fu_list(cache, names, sizeof names) == 8, "no temporary files left: %s", names);

    /* The next run loads them. */
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_OK, "%s", err.msg);
    if (!d) return;
    mc_data_cache_stats(d, &loaded, &built);
    CHECK(loaded == 2 && built == 0, "loaded %d built %d", loaded, built);
    check_split(d, "single", MC_SPLIT_TRAIN);
    mc_data_close(d);

    /* Another --seq-length is another description: a new cache, the old one untouched. */
    cfg.model.seq_length = 16;
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_OK, "%s", err.msg);
    if (d) {
        mc_data_cache_stats(d, &loaded, &built);
        CHECK(loaded == 0 && built == 2);
        mc_data_close(d);
    }
    CHECK(fu_list(cache, NULL, 0) == 16);
}

static void copy_dir(const char *from, const char *to) {
    mkdir(to, 0755);
    DIR *d = opendir(from);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        fu_copy(a, b);
    }
    if (d) closedir(d);
}

static void test_megatron_cache_is_loaded(void) {
    char cache[600];
    snprintf(cache, sizeof cache, "%s/megatron_cache", g_tmp);
    copy_dir(FIX "cache_single", cache);
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = IDX_A;
    cfg.data.data_cache_path = cache;
    int64_t want[3];
    single_wants(want);
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_OK, "%s", err.msg);
    if (d) {
        int loaded, built;
        mc_data_cache_stats(d, &loaded, &built);
        CHECK(loaded == 2 && built == 0, "the Megatron cache was not used (loaded %d, built %d)", loaded, built);
        check_split(d, "single", MC_SPLIT_TRAIN);
        mc_data_close(d);
    }
    /* A cache whose description text differs (edited, or an md5 collision) is an error. */
    DIR *dir = opendir(cache);
    struct dirent *e;
    char desc[1200] = "", npy[1200] = "";
    while (dir && (e = readdir(dir))) {
        if (strstr(e->d_name, "-train-description.txt")) snprintf(desc, sizeof desc, "%s/%s", cache, e->d_name);
        if (strstr(e->d_name, "-train-sample_index.npy")) snprintf(npy, sizeof npy, "%s/%s", cache, e->d_name);
    }
    if (dir) closedir(dir);
    size_t n;
    unsigned char *orig = fu_read(desc, &n);
    CHECK(orig != NULL);
    fu_write_str(desc, "{}");
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_ERR && strstr(err.msg, "does not match"),
          "%s", err.msg);
    fu_write(desc, orig, n);
    free(orig);
    /* A truncated index file is an error naming it. */
    unsigned char *raw = fu_read(npy, &n);
    fu_write(npy, raw, n - 8);
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_ERR && strstr(err.msg, "sample_index.npy"),
          "%s", err.msg);
    /* An index that points outside the dataset is caught before training reads it. */
    unsigned char *bad = malloc(n);
    memcpy(bad, raw, n);
    int32_t big = 1 << 20;
    memcpy(bad + n - 8, &big, 4);
    fu_write(npy, bad, n);
    CHECK(mc_data_open(&d, &cfg, want[0], want[1], want[2], &err) == MC_ERR && strstr(err.msg, "sample_index"),
          "%s", err.msg);
    free(bad);
    free(raw);
}

static void test_default_cache_location(void) {
    char dir[600], prefix[700], p[800];
    snprintf(dir, sizeof dir, "%s/data", g_tmp);
    mkdir(dir, 0755);
    snprintf(prefix, sizeof prefix, "%s/idx_a", dir);
    snprintf(p, sizeof p, "%s.bin", prefix);
    fu_copy(IDX_A ".bin", p);
    snprintf(p, sizeof p, "%s.idx", prefix);
    fu_copy(IDX_A ".idx", p);
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = prefix;
    cfg.data.split = "99,1,0";
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 64, 8, 0, &err) == MC_OK, "%s", err.msg);
    if (d) mc_data_close(d);
    /* gpt_dataset.py: os.path.join(path_prefix, "cache", "GPTDataset_indices"). */
    snprintf(p, sizeof p, "%s/cache/GPTDataset_indices", prefix);
    char names[4096];
    CHECK(fu_list(p, names, sizeof names) == 8, "%s: %s", p, names);
}

static void test_weighted_blend(void) {
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = "0.3 " IDX_A " 0.7 " IDX_B;
    cfg.data.split = "90,10,0";
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache_blend", g_tmp);
    cfg.data.data_cache_path = cache;
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 300, 20, 0, &err) == MC_OK, "%s", err.msg);
    if (!d) return;
    const int16_t *di;
    const int64_t *dsi;
    CHECK(mc_data_split_blend(d, MC_SPLIT_TRAIN, &di, &dsi) == 2);
    size_t n1, n2;
    int16_t *want_di = (int16_t *)fu_read(FIX "idx_blend_train_dataset_index.i16", &n1);
    int64_t *want_dsi = (int64_t *)fu_read(FIX "idx_blend_train_dataset_sample_index.i64", &n2);
    CHECK(want_di && want_dsi && n1 == 300 * 2 && n2 == 300 * 8);
    CHECK(want_di && !memcmp(di, want_di, 600) && !memcmp(dsi, want_dsi, 2400), "blending indices differ");
    free(want_di);
    free(want_dsi);
    /* Components asked for ceil(ceil(300 w) * 1.005): 91 of a, 212 of b. */
    CHECK(mc_data_split_component(d, MC_SPLIT_TRAIN, 0)->num_samples_requested == 91 &&
          mc_data_split_component(d, MC_SPLIT_TRAIN, 1)->num_samples_requested == 212);
    check_split(d, "blend", MC_SPLIT_TRAIN);
    check_split(d, "blend", MC_SPLIT_VALID);
    size_t n;
    int32_t *want200 = (int32_t *)fu_read(FIX "idx_blend_train_samples200.i32", &n);
    int32_t s[33];
    int bad = 0;
    for (int i = 0; want200 && i < 200; i++) {
        mc_data_get_sample(d, MC_SPLIT_TRAIN, i, s);
        bad += memcmp(s, want200 + 33 * i, sizeof s) != 0;
    }
    CHECK(want200 && bad == 0, "%d blended samples differ", bad);
    free(want200);
    /* Batches come out of the blend too. */
    mc_batch b;
    mc_batch_init(&b, 4, 32);
    mc_data_get_batch(d, MC_SPLIT_TRAIN, 8, 4, &b);
    mc_data_get_sample(d, MC_SPLIT_TRAIN, 9, s);
    CHECK(b.sample_ids[1] == 9 && !memcmp(b.tokens + 32, s, 32 * 4) && !memcmp(b.labels + 32, s + 1, 32 * 4));
    mc_batch_free(&b);
    mc_data_close(d);
    CHECK(same_cache(FIX "cache_blend", cache) == 22, "blend cache files differ from numpy/json's");

    CHECK(mc_data_open(&d, &cfg, 300, 20, 0, &err) == MC_OK, "%s", err.msg);
    if (d) {
        int loaded, built;
        mc_data_cache_stats(d, &loaded, &built);
        CHECK(loaded == 4 && built == 0, "loaded %d built %d", loaded, built);
        check_split(d, "blend", MC_SPLIT_TRAIN);
        mc_data_close(d);
    }

    /* A blend that needs more of a dataset than it has is an error (Megatron: IndexError):
     * idx_c has 10 tokens, not one sample of 33. */
    cfg.data.data_path = "0.5 " FIX "idx_c 0.5 " IDX_A;
    cfg.model.vocab_size = 100000; /* idx_c holds id 99999 */
    cfg.data.data_cache_path = NULL;
    snprintf(cache, sizeof cache, "%s/cache_over", g_tmp);
    cfg.data.data_cache_path = cache;
    CHECK(mc_data_open(&d, &cfg, 300, 20, 0, &err) == MC_ERR && strstr(err.msg, "oversamples") &&
              strstr(err.msg, "idx_c"),
          "%s", err.msg);
}

static void test_unweighted_and_per_split(void) {
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache_unweighted", g_tmp);
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = IDX_A " " IDX_B;
    cfg.data.split = "1,0,0";
    cfg.data.data_cache_path = cache;
    mc_data *d;
    mc_err err;
    CHECK(mc_data_open(&d, &cfg, 50, 0, 0, &err) == MC_OK, "%s", err.msg);
    if (d) {
        check_split(d, "unweighted", MC_SPLIT_TRAIN);
        const int16_t *di;
        CHECK(mc_data_split_blend(d, MC_SPLIT_TRAIN, &di, NULL) == 2);
        size_t n;
        int16_t *want = (int16_t *)fu_read(FIX "idx_unweighted_dataset_index.i16", &n);
        CHECK(want && n == 100 && !memcmp(want, di, 100));
        free(want);
        /* One epoch each: Megatron's num_samples None. */
        CHECK(mc_data_split_component(d, MC_SPLIT_TRAIN, 0)->num_epochs == 1);
        CHECK(mc_data_split_len(d, MC_SPLIT_VALID) == 0 && mc_data_split_blend(d, MC_SPLIT_VALID, NULL, NULL) == 0);
        mc_data_close(d);
    }
    CHECK(same_cache(FIX "cache_unweighted", cache) == 11, "unweighted blend cache differs from numpy/json's");

    base_config(&cfg);
    cfg.data.train_data_path = IDX_A;
    cfg.data.valid_data_path = "0.5 " IDX_A " 0.5 " IDX_B;
    snprintf(cache, sizeof cache, "%s/cache_per_split", g_tmp);
    cfg.data.data_cache_path = cache;
    CHECK(mc_data_open(&d, &cfg, 100, 20, 0, &err) == MC_OK, "%s", err.msg);
    if (d) {
        check_split(d, "per_split", MC_SPLIT_TRAIN);
        check_split(d, "per_split", MC_SPLIT_VALID);
        int64_t b, e;
        mc_data_split_range(d, MC_SPLIT_TRAIN, &b, &e);
        CHECK(b == 0 && e == 56, "the whole dataset: [%lld, %lld)", (long long)b, (long long)e);
        CHECK(mc_data_split_len(d, MC_SPLIT_TEST) == 0);
        mc_data_close(d);
    }
    CHECK(same_cache(FIX "cache_per_split", cache) == 15, "per-split cache differs from numpy/json's");
    cfg.data.split = "1,1,1";
    CHECK(mc_data_open(&d, &cfg, 100, 20, 0, &err) == MC_ERR && strstr(err.msg, "--split"), "%s", err.msg);
    cfg.data.split = NULL;
    cfg.data.data_path = IDX_A;
    CHECK(mc_data_open(&d, &cfg, 100, 20, 0, &err) == MC_ERR && strstr(err.msg, "exclusive"), "%s", err.msg);

    /* A missing prefix names it. */
    base_config(&cfg);
    cfg.data.data_path = FIX "no_such_dataset";
    CHECK(mc_data_open(&d, &cfg, 100, 20, 0, &err) == MC_ERR && strstr(err.msg, "no_such_dataset"), "%s", err.msg);
    cfg.data.data_path = IDX_A;
    cfg.data.tokenizer_type = MC_TOKENIZER_NONE;
    CHECK(mc_data_open(&d, &cfg, 100, 20, 0, &err) == MC_ERR && strstr(err.msg, "--tokenizer-type"), "%s", err.msg);
}

static int g_barriers;
static void count_barrier(void *ctx) { (void)ctx, g_barriers++; }

/* Rank 0 builds the caches, the ranks meet at the barrier, the others only load. */
static void test_rank0_builds(void) {
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache_ranks", g_tmp);
    mc_config cfg;
    base_config(&cfg);
    cfg.data.data_path = "0.3 " IDX_A " 0.7 " IDX_B;
    cfg.data.split = "90,10,0";
    cfg.data.data_cache_path = cache;
    mc_data *d;
    mc_err err;
    mc_data_dist r1 = {.rank = 1, .barrier = count_barrier};
    /* A rank other than 0 never builds: with nothing cached it fails. */
    CHECK(mc_data_open_dist(&d, &cfg, 300, 20, 0, &r1, &err) == MC_ERR && strstr(err.msg, "rank 0"), "%s", err.msg);
    CHECK(g_barriers == 1 && !fu_exists(cache), "rank 1 wrote nothing");
    mc_data_dist r0 = {.rank = 0, .barrier = count_barrier};
    CHECK(mc_data_open_dist(&d, &cfg, 300, 20, 0, &r0, &err) == MC_OK, "%s", err.msg);
    int loaded, built;
    if (d) {
        mc_data_cache_stats(d, &loaded, &built);
        CHECK(loaded == 0 && built == 4);
        mc_data_close(d);
    }
    CHECK(mc_data_open_dist(&d, &cfg, 300, 20, 0, &r1, &err) == MC_OK, "%s", err.msg);
    if (d) {
        mc_data_cache_stats(d, &loaded, &built);
        CHECK(loaded == 4 && built == 0, "rank 1 loads what rank 0 wrote");
        check_split(d, "blend", MC_SPLIT_TRAIN);
        mc_data_close(d);
    }
    CHECK(g_barriers == 3);
}

static void test_blend_helpers(void) {
    size_t n1, n2;
    int16_t *want_di = (int16_t *)fu_read(FIX "exhaustive_7_3_11_dataset_index.i16", &n1);
    int64_t *want_dsi = (int64_t *)fu_read(FIX "exhaustive_7_3_11_dataset_sample_index.i64", &n2);
    int16_t di[21];
    int64_t dsi[21];
    const int64_t sizes[3] = {7, 3, 11};
    mc_blend_build_exhaustive(sizes, 3, di, dsi);
    CHECK(want_di && want_dsi && n1 == sizeof di && n2 == sizeof dsi && !memcmp(di, want_di, sizeof di) &&
          !memcmp(dsi, want_dsi, sizeof dsi));
    free(want_di);
    free(want_dsi);

    /* numpy.sum is pairwise: it differs from a left-to-right sum for some inputs. */
    double x[10] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1e-17};
    double seq = 0;
    for (int i = 0; i < 10; i++) seq += x[i];
    double pw = ((0.1 + 0.2) + (0.3 + 0.4)) + ((0.5 + 0.6) + (0.7 + 0.8));
    pw += 0.9;
    pw += 1e-17;
    CHECK(mc_numpy_sum(x, 10) == pw);
    (void)seq;
    CHECK(mc_blend_dataset_size(300, 0.3, 0.005) == 91 && mc_blend_dataset_size(300, 0.3, 0.0) == 90);

    mc_blend_spec s;
    mc_err err;
    CHECK(mc_blend_parse("a", "--data-path", &s, &err) == MC_OK && s.n == 1 && !s.weights);
    mc_blend_spec_free(&s);
    CHECK(mc_blend_parse(" 30 a  70 b ", "--data-path", &s, &err) == MC_OK && s.n == 2 && s.weights &&
          s.weights[1] == 70 && !strcmp(s.prefixes[1], "b"));
    mc_blend_spec_free(&s);
    CHECK(mc_blend_parse("a b", "--data-path", &s, &err) == MC_OK && s.n == 2 && !s.weights);
    mc_blend_spec_free(&s);
    CHECK(mc_blend_parse("a b c", "--data-path", &s, &err) == MC_OK && s.n == 3 && !s.weights);
    mc_blend_spec_free(&s);
    CHECK(mc_blend_parse("0.5 a b c", "--data-path", &s, &err) == MC_ERR && strstr(err.msg, "mix"), "%s", err.msg);
    CHECK(mc_blend_parse("-1 a 2 b", "--data-path", &s, &err) == MC_ERR && strstr(err.msg, "positive"), "%s",
          err.msg);
    CHECK(mc_blend_parse("  ", "--train-data-path", &s, &err) == MC_ERR && strstr(err.msg, "--train-data-path"));
}

int main(void) {
    g_tmp = fu_tmpdir("blend");
    RUN(test_single_prefix);
    RUN(test_megatron_cache_is_loaded);
    RUN(test_default_cache_location);
    RUN(test_weighted_blend);
    RUN(test_unweighted_and_per_split);
    RUN(test_rank0_builds);
    RUN(test_blend_helpers);
    fu_rmtree(g_tmp);
    free(g_tmp);
    return check_summary();
}
