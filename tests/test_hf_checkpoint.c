/* test_hf_checkpoint.c: megatron-c convert (train/convert.h) on tiny models that transformers
 * wrote (tests/fixtures/hf, tools/reference/make_hf_fixtures.py):
 *  - import: the checkpoint's weights, in our model on the CPU, give transformers' float32
 *    logits within 1e-4;
 *  - export of the import: every tensor bit for bit the original's, and a config.json that
 *    reads back as the same model;
 *  - bad input (an unknown family, a missing shard, shapes that do not fit the config, a
 *    safetensors header that lies, a sliding window, an existing output): one error naming
 *    what was wrong, and no output directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "check.h"
#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "io/hf_config.h"
#include "io/hf_convert.h"
#include "model/model.h"
#include "train/convert.h"
#include "train/model_options.h"

static const char *const k_families[] = {"gpt2", "llama2", "llama31", "llama32_tied", "mistral"};
#define FIX "tests/fixtures/hf"

static char g_tmp[256];

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_tmp, name); }

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int convert(const char *in, const char *out, bool to_hf, mc_err *err) {
    mc_convert_opts o = {.input = in, .output = out, .to_hf = to_hf, .dtype = MC_F32,
                         .make_vocab_size_divisible_by = 128, .shard_bytes = 5000000000ll};
    return mc_convert(&o, err);
}

/* Our CPU model's logits [B, S, V] for the fixture's tokens, from the checkpoint at dir. */
static float max_logit_diff(const char *ckpt, const char *family) {
    mc_err err;
    mc_config cfg;
    mc_config_init(&cfg);
    mc_host_params w;
    mc_host_params_init(&w);
    int padded = 0;
    int64_t it = -1;
    CHECK(mc_ckpt_read_weights(ckpt, &cfg.model, &padded, &it, &w, &err) == MC_OK, "%s", err.msg);
    CHECK(it == 0);
    char path[512];
    snprintf(path, sizeof path, FIX "/%s/reference.safetensors", family);
    mc_safetensors *ref = NULL;
    CHECK(mc_safetensors_open(path, &ref, &err) == MC_OK, "%s", err.msg);
    const mc_st_tensor *tok = ref ? mc_safetensors_find(ref, "tokens") : NULL;
    const mc_st_tensor *lg = ref ? mc_safetensors_find(ref, "logits") : NULL;
    CHECK(tok && lg && tok->ndim == 2 && lg->ndim == 3);
    if (!tok || !lg) return INFINITY;
    const int64_t B = tok->shape[0], S = tok->shape[1], V = lg->shape[2], N = B * S;
    cfg.model.seq_length = (int)S;
    cfg.train.micro_batch_size = cfg.train.global_batch_size = (int)B;
    cfg.train.train_iters = 1;
    cfg.optim.lr = 1e-4;
    cfg.data.mock_data = true;
    CHECK(mc_config_validate(&cfg, 1, &err) == MC_OK, "%s", err.msg);
    mc_comm comm;
    CHECK(mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK, "%s", err.msg);
    mc_backend *be = mc_backend_cpu_create();
    mc_model m;
    mc_model_options mo = mc_model_options_from_config(&cfg, 1, MC_F32, MC_F32, MC_F32, B, NULL);
    CHECK(mc_model_create(&m, &mo, be, &comm, &err) == MC_OK, "%s", err.msg);
    CHECK(m.padded_vocab == padded && V == cfg.model.vocab_size, "padded %d/%d V %lld/%d", m.padded_vocab, padded,
          (long long)V, cfg.model.vocab_size);
    for (int i = 0; i < m.nparams; i++) {
        mc_host_tensor *t = mc_host_params_find(&w, m.params[i].name);
        CHECK(t && t->numel == m.params[i].numel, "%s", m.params[i].name);
        if (t) memcpy((float *)m.param_buf + m.params[i].offset, t->data, (size_t)t->numel * sizeof(float));
    }
    int32_t *tokens = malloc((size_t)N * 4), *pos = malloc((size_t)N * 4);
    float *mask = malloc((size_t)N * 4), *out = malloc((size_t)(N * m.vocab_local) * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++) { /* fixture [b, s] -> activations [s, b] */
            tokens[s * B + b] = ((const int32_t *)tok->data)[b * S + s];
            pos[s * B + b] = (int32_t)s;
            mask[s * B + b] = 1.0f;
        }
    mc_microbatch mb = {.seq = S, .batch = B, .tokens = mc_tensor_1d(tokens, MC_I32, N),
                        .labels = mc_tensor_1d(tokens, MC_I32, N), .loss_mask = mc_tensor_1d(mask, MC_F32, N),
                        .pos = mc_tensor_1d(pos, MC_I32, N), .seg_start = mc_tensor_none()};
    mc_model_logits(&m, &mb, out);
    float worst = 0;
    const float *want = lg->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t v = 0; v < V; v++) {
                float d = fabsf(out[(s * B + b) * m.vocab_local + v] - want[(b * S + s) * V + v]);
                if (!(d <= worst)) worst = d; /* NaN too */
            }
    free(tokens);
    free(pos);
    free(mask);
    free(out);
    mc_model_free(&m);
    be->destroy(be);
    mc_comm_free(&comm);
    mc_safetensors_close(ref);
    mc_host_params_free(&w);
    mc_config_free(&cfg);
    return worst;
}

/* Every tensor of a equals b's, bit for bit, and neither has one the other lacks. */
static void check_same_tensors(const char *a_dir, const char *b_dir, const char *family) {
    mc_err err;
    mc_host_params a, b;
    mc_host_params_init(&a);
    mc_host_params_init(&b);
    CHECK(mc_host_params_load_hf(&a, a_dir, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_host_params_load_hf(&b, b_dir, &err) == MC_OK, "%s", err.msg);
    CHECK(a.count > 0 && a.count == b.count, "%s: %d tensors vs %d", family, a.count, b.count);
    for (int i = 0; i < a.count; i++) {
        mc_host_tensor *t = mc_host_params_find(&b, a.items[i].name);
        CHECK(t != NULL, "%s: the export has no %s", family, a.items[i].name);
        if (!t) continue;
        CHECK(t->numel == a.items[i].numel && !memcmp(t->data, a.items[i].data, (size_t)t->numel * sizeof(float)),
              "%s: %s differs", family, t->name);
    }
    mc_host_params_free(&a);
    mc_host_params_free(&b);
}

static void test_import_logits_and_export_roundtrip(void) {
    for (size_t f = 0; f < sizeof k_families / sizeof k_families[0]; f++) {
        const char *fam = k_families[f];
        char src[256], ck[512], hf[512], cfg_a[600], cfg_b[600];
        mc_err err;
        snprintf(src, sizeof src, FIX "/%s", fam);
        path_of(ck, sizeof ck, "ckpt");
        path_of(hf, sizeof hf, "hf");
        mc_remove_tree(ck, &err);
        mc_remove_tree(hf, &err);
        CHECK(convert(src, ck, false, &err) == MC_OK, "%s: %s", fam, err.msg);
        float d = max_logit_diff(ck, fam);
        CHECK(d <= 1e-4f, "%s: our logits differ from transformers' by %g", fam, d);
        printf("  %s: max |logit - transformers'| %.3g\n", fam, d);
        CHECK(convert(ck, hf, true, &err) == MC_OK, "%s: %s", fam, err.msg);
        check_same_tensors(src, hf, fam);
        /* the exported config reads back as the same model */
        snprintf(cfg_a, sizeof cfg_a, "%s/config.json", src);
        snprintf(cfg_b, sizeof cfg_b, "%s/config.json", hf);
        mc_config a, b;
        mc_config_init(&a);
        mc_config_init(&b);
        mc_hf_arch arch_a, arch_b;
        mc_hf_tokens ta, tb;
        CHECK(mc_hf_config_read(cfg_a, &arch_a, &a.model, &ta, &err) == MC_OK, "%s", err.msg);
        CHECK(mc_hf_config_read(cfg_b, &arch_b, &b.model, &tb, &err) == MC_OK, "%s", err.msg);
        CHECK(arch_a == arch_b && !memcmp(&a.model, &b.model, sizeof a.model), "%s: the exported config.json differs",
              fam);
        mc_config_free(&a);
        mc_config_free(&b);
    }
}

/* Real models ship bf16 weights: a bf16 copy of a fixture imported and exported as bf16
 * comes back bit for bit (bf16 -> f32 -> bf16 is exact). */
static void test_bf16_roundtrip(void) {
    mc_err err;
    char dir[512], ck[512], hf[512], from[600], to[600];
    path_of(dir, sizeof dir, "bf16");
    path_of(ck, sizeof ck, "bf16_ckpt");
    path_of(hf, sizeof hf, "bf16_hf");
    mc_remove_tree(dir, &err);
    mc_remove_tree(ck, &err);
    mc_remove_tree(hf, &err);
    CHECK(mc_mkdirs(dir, &err) == MC_OK, "%s", err.msg);
    mc_host_params w;
    mc_host_params_init(&w);
    CHECK(mc_host_params_load_hf(&w, FIX "/llama31", &err) == MC_OK, "%s", err.msg);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    CHECK(mc_host_params_save_safetensors(&w, to, MC_BF16, &err) == MC_OK, "%s", err.msg);
    mc_host_params_free(&w);
    snprintf(from, sizeof from, FIX "/llama31/config.json");
    snprintf(to, sizeof to, "%s/config.json", dir);
    char *text;
    size_t n;
    CHECK(mc_read_file(from, &text, &n, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_write_file_atomic(to, text, n, &err) == MC_OK, "%s", err.msg);
    free(text);
    CHECK(convert(dir, ck, false, &err) == MC_OK, "%s", err.msg);
    mc_convert_opts o = {.input = ck, .output = hf, .to_hf = true, .dtype = MC_BF16, .shard_bytes = 5000000000ll};
    CHECK(mc_convert(&o, &err) == MC_OK, "%s", err.msg);
    check_same_tensors(dir, hf, "llama31 in bf16");
    snprintf(to, sizeof to, "%s/model.safetensors", hf);
    mc_safetensors *st = NULL;
    CHECK(mc_safetensors_open(to, &st, &err) == MC_OK, "%s", err.msg);
    const mc_st_tensor *t = st ? mc_safetensors_find(st, "model.embed_tokens.weight") : NULL;
    CHECK(t && t->dtype == MC_BF16, "the export is not bf16");
    if (st) mc_safetensors_close(st);
}

/* Export in shards: a tiny shard size splits the weights over several files with the index,
 * which reads back as the same tensors. */
static void test_sharded_export(void) {
    mc_err err;
    char ck[512], hf[512], idx[600];
    path_of(ck, sizeof ck, "shard_ckpt");
    path_of(hf, sizeof hf, "shard_hf");
    mc_remove_tree(ck, &err);
    mc_remove_tree(hf, &err);
    CHECK(convert(FIX "/mistral", ck, false, &err) == MC_OK, "%s", err.msg);
    mc_convert_opts o = {.input = ck, .output = hf, .to_hf = true, .dtype = MC_F32, .shard_bytes = 40000};
    CHECK(mc_convert(&o, &err) == MC_OK, "%s", err.msg);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", hf);
    CHECK(exists(idx), "no index for a sharded export");
    snprintf(idx, sizeof idx, "%s/model.safetensors", hf);
    CHECK(!exists(idx), "a sharded export also wrote model.safetensors");
    /* every shard's data within the limit (mistral's largest tensor, 38.4 kB, fits one) */
    int shards = 0;
    for (int k = 1; k <= 9; k++) {
        char name[640];
        snprintf(name, sizeof name, "%s/model-%05d-of-%05d.safetensors", hf, k, 4);
        struct stat sb;
        if (stat(name, &sb) != 0) continue;
        shards++;
        CHECK(sb.st_size < 40000 + 2048, "%s: %lld bytes", name, (long long)sb.st_size);
    }
    CHECK(shards == 4, "%d shards, 4 expected at 40 kB a shard", shards);
    check_same_tensors(FIX "/mistral", hf, "mistral in shards");
}

/* ---- bad input ---- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "%s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    char *data;
    size_t n;
    mc_err err;
    CHECK(mc_read_file(from, &data, &n, &err) == MC_OK, "%s", err.msg);
    FILE *f = fopen(to, "wb");
    CHECK(f != NULL, "%s", to);
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
    free(data);
}

/* A copy of fixture family's directory at tmp/name. */
static void copy_fixture(const char *family, const char *name, char *dir, size_t cap) {
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    mc_err err;
    path_of(dir, cap, name);
    mc_remove_tree(dir, &err);
    CHECK(mc_mkdirs(dir, &err) == MC_OK, "%s", err.msg);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char from[512], to[512];
        snprintf(from, sizeof from, FIX "/%s/%s", family, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        if (access(from, R_OK) == 0) copy_file(from, to);
    }
}

/* convert fails with an error containing `want`, and leaves no output directory. */
static void expect_failure(const char *in, bool to_hf, const char *want) {
    char out[512];
    mc_err err;
    path_of(out, sizeof out, "out");
    mc_remove_tree(out, &err);
    err.msg[0] = 0;
    CHECK(convert(in, out, to_hf, &err) != MC_OK, "%s: converted", in);
    CHECK(strstr(err.msg, want) != NULL, "error \"%s\" does not say \"%s\"", err.msg, want);
    printf("  refused: %s\n", err.msg);
    CHECK(!exists(out), "%s was left behind", out);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s.tmp-%ld", out, (long)getpid());
    CHECK(!exists(pattern), "%s was left behind", pattern);
}

static void test_bad_input(void) {
    char dir[512], p[600];
    mc_err err;
    /* an unknown family */
    copy_fixture("llama2", "bert", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\": \"bert\", \"vocab_size\": 300}");
    expect_failure(dir, false, "model_type \"bert\" is not supported");
    /* a missing shard */
    copy_fixture("gpt2", "noshard", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    unlink(p);
    expect_failure(dir, false, "model-00002-of-00002.safetensors");
    /* shapes that do not fit the config: hidden size 48 for weights of 32 */
    copy_fixture("llama2", "shapes", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 48, \"intermediate_size\": 64, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
                  "\"max_position_embeddings\": 128, \"tie_word_embeddings\": false}");
    expect_failure(dir, false, "[300, 32]");
    /* a safetensors header whose offsets run past the file */
    copy_fixture("llama2", "liar", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    {
        char *data;
        size_t n;
        CHECK(mc_read_file(p, &data, &n, &err) == MC_OK, "%s", err.msg);
        char *off = strstr(data + 8, "\"data_offsets\":[");
        CHECK(off != NULL);
        if (off) { /* the first tensor's end pushed far past the file: same length, bigger number */
            char *comma = strchr(off, ',');
            if (comma) comma[1] = '9';
        }
        FILE *f = fopen(p, "wb");
        fwrite(data, 1, n, f);
        fclose(f);
        free(data);
    }
    expect_failure(dir, false, "model.safetensors");
    /* Mistral with a sliding window */
    copy_fixture("mistral", "window", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text;
    size_t n;
    CHECK(mc_read_file(p, &text, &n, &err) == MC_OK, "%s", err.msg);
    char *sw = strstr(text, "\"sliding_window\": null");
    CHECK(sw != NULL);
    if (sw) {
        memcpy(sw, "\"sliding_window\": 4096", strlen("\"sliding_window\": 4096"));
        write_text(p, text);
    }
    free(text);
    expect_failure(dir, false, "sliding_window");
    /* a checkpoint directory without a checkpoint, to export */
    path_of(dir, sizeof dir, "empty");
    mc_remove_tree(dir, &err);
    mc_mkdirs(dir, &err);
    expect_failure(dir, true, "holds no checkpoint");
    /* an output that exists */
    char out[512];
    path_of(out, sizeof out, "exists");
    mc_mkdirs(out, &err);
    CHECK(convert(FIX "/llama2", out, false, &err) != MC_OK && strstr(err.msg, "already exists"), "%s", err.msg);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mc_test_hf_%ld", (long)getpid());
    mc_err err;
    mc_mkdirs(g_tmp, &err);
    RUN(test_import_logits_and_export_roundtrip);
    RUN(test_bf16_roundtrip);
    RUN(test_sharded_export);
    RUN(test_bad_input);
    mc_remove_tree(g_tmp, &err);
    return check_summary();
}
