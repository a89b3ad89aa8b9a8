/* test_hf_convert.c: Hugging Face <-> Megatron-C conversion on the golden fixtures:
 * round trips, the per-group QKV interleave against hand-computed indices, vocabulary
 * padding, gradients, error messages, and HF checkpoint loading (single file, sharded). */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/hf_convert.h"

static char g_dir[256];

/* A golden fixture: tests/fixtures/golden/NAME under the source root (ctest's working
 * directory), else beside this source file (when run from elsewhere). */
static const char *golden_path(const char *name) {
    static char buf[8][1024];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "tests/fixtures/golden/%s", name);
    if (access(buf[k], R_OK) == 0) return buf[k];
    const char *slash = strrchr(__FILE__, '/');
    int dir_len = slash ? (int)(slash - __FILE__) : 1;
    snprintf(buf[k], sizeof buf[k], "%.*s/fixtures/golden/%s", dir_len, slash ? __FILE__ : ".", name);
    return buf[k];
}

/* The fixture's model section as an mc_model_config (fields already derived). */
static int load_config(const char *family, mc_model_config *cfg, int *padded) {
    char file[64];
    snprintf(file, sizeof file, "%s_config.json", family);
    const char *path = golden_path(file);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!m) return -1;
#define NUM(key) cJSON_GetObjectItemCaseSensitive(m, key)->valuedouble
#define BOOL(key) cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, key))
#define STR(key) cJSON_GetObjectItemCaseSensitive(m, key)->valuestring
    memset(cfg, 0, sizeof *cfg);
    cfg->num_layers = (int)NUM("num_layers");
    cfg->hidden_size = (int)NUM("hidden_size");
    cfg->ffn_hidden_size = (int)NUM("ffn_hidden_size");
    cfg->num_attention_heads = (int)NUM("num_attention_heads");
    cfg->group_query_attention = BOOL("group_query_attention");
    cfg->num_query_groups = (int)NUM("num_query_groups");
    cfg->kv_channels = (int)NUM("kv_channels");
    cfg->seq_length = (int)NUM("seq_length");
    cfg->max_position_embeddings = (int)NUM("max_position_embeddings");
    cfg->normalization = strcmp(STR("normalization"), "RMSNorm") == 0 ? MC_NORM_RMSNORM : MC_NORM_LAYERNORM;
    cfg->norm_epsilon = (float)NUM("norm_epsilon");
    cfg->position_embedding_type =
        strcmp(STR("position_embedding_type"), "rope") == 0 ? MC_POS_ROPE : MC_POS_LEARNED_ABSOLUTE;
    cfg->swiglu = BOOL("swiglu");
    cfg->untie_embeddings_and_output_weights = BOOL("untie_embeddings_and_output_weights");
    cfg->add_bias_linear = BOOL("add_bias_linear");
    cfg->vocab_size = (int)NUM("vocab_size");
    cfg->make_vocab_size_divisible_by = (int)NUM("make_vocab_size_divisible_by");
    *padded = (int)NUM("padded_vocab_size");
#undef NUM
#undef BOOL
#undef STR
    cJSON_Delete(root);
    return 0;
}

static int load_weights(const char *family, mc_host_params *p) {
    char file[64];
    snprintf(file, sizeof file, "%s_weights.safetensors", family);
    const char *path = golden_path(file);
    mc_err err = {{0}};
    mc_host_params_init(p);
    int rc = mc_host_params_load_hf(p, path, &err);
    CHECK(rc == MC_OK, "%s", err.msg);
    return rc;
}

static const float *get(const mc_host_params *p, const char *name, int64_t d0, int64_t d1) {
    const mc_host_tensor *t = mc_host_params_find(p, name);
    CHECK(t != NULL, "no tensor %s", name);
    if (!t) return NULL;
    CHECK(t->shape[0] == d0 && (d1 < 0 ? t->ndim == 1 : (t->ndim == 2 && t->shape[1] == d1)),
          "%s: shape [%lld, %lld]", name, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : -1));
    return t->data;
}

/* Every tensor of `a` is in `b`, bit-identical, and the counts agree. */
static void check_same_params(const mc_host_params *a, const mc_host_params *b) {
    CHECK(a->count == b->count, "%d vs %d tensors", a->count, b->count);
    for (int i = 0; i < a->count; i++) {
        const mc_host_tensor *x = &a->items[i], *y = mc_host_params_find(b, x->name);
        CHECK(y != NULL, "'%s' missing after the round trip", x->name);
        if (!y) continue;
        CHECK(x->ndim == y->ndim && memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim) == 0, "%s shape",
              x->name);
        CHECK(x->numel == y->numel && memcmp(x->data, y->data, (size_t)x->numel * sizeof(float)) == 0, "%s data",
              x->name);
    }
}

static void roundtrip(const char *family, mc_hf_arch arch, int expect_mc_count) {
    mc_model_config cfg;
    int vp;
    CHECK(load_config(family, &cfg, &vp) == 0, "config of %s", family);
    mc_host_params hf, mc, back;
    if (load_weights(family, &hf) != MC_OK) return;
    mc_host_params_init(&mc);
    mc_host_params_init(&back);
    mc_err err = {{0}};
    const int padded = vp + 128; /* pad beyond the fixture's own vocabulary */
    CHECK(mc_hf_import(arch, &cfg, padded, &hf, &mc, &err) == MC_OK, "%s", err.msg);
    CHECK(mc.count == expect_mc_count, "%s: %d Megatron-C tensors", family, mc.count);
    /* Vocabulary padding: HF rows copied, padded rows zero (embedding and untied head). */
    const char *vocab_names[2] = {"embedding.word_embeddings.weight", "output_layer.weight"};
    const char *hf_names[2][2] = {{"transformer.wte.weight", NULL}, {"model.embed_tokens.weight", "lm_head.weight"}};
    for (int k = 0; k < 2; k++) {
        const char *hn = hf_names[arch][k];
        if (!hn) {
            CHECK(mc_host_params_find(&mc, vocab_names[k]) == NULL, "tied model has %s", vocab_names[k]);
            continue;
        }
        const float *w = get(&mc, vocab_names[k], padded, cfg.hidden_size);
        const float *src = get(&hf, hn, cfg.vocab_size, cfg.hidden_size);
        if (!w || !src) continue;
        size_t live = (size_t)cfg.vocab_size * (size_t)cfg.hidden_size;
        CHECK(memcmp(w, src, live * sizeof(float)) == 0, "%s rows", vocab_names[k]);
        int nonzero = 0;
        for (size_t i = live; i < (size_t)padded * (size_t)cfg.hidden_size; i++) nonzero += w[i] != 0.0f;
        CHECK(nonzero == 0, "%s: %d non-zero padded entries", vocab_names[k], nonzero);
    }
    CHECK(mc_hf_export(arch, &cfg, padded, &mc, &back, &err) == MC_OK, "%s", err.msg);
    check_same_params(&hf, &back);
    mc_host_params_free(&hf);
    mc_host_params_free(&mc);
    mc_host_params_free(&back);
}

static void test_gpt2_roundtrip(void) { roundtrip("gpt2", MC_HF_GPT2, 2 + 12 * 2 + 2); }
static void test_llama_roundtrip(void) { roundtrip("llama", MC_HF_LLAMA, 1 + 6 * 2 + 1 + 1); }

/* Llama: n = 4 heads, g = 2 groups, d = 16: each group's block is 2 q heads + k + v = 64 rows. */
static void test_llama_qkv_interleave(void) {
    mc_model_config cfg;
    int vp;
    CHECK(load_config("llama", &cfg, &vp) == 0);
    mc_host_params hf, mc;
    if (load_weights("llama", &hf) != MC_OK) return;
    mc_host_params_init(&mc);
    mc_err err = {{0}};
    CHECK(mc_hf_import(MC_HF_LLAMA, &cfg, vp, &hf, &mc, &err) == MC_OK, "%s", err.msg);
    const int h = 64, d = 16, f = 96;
    for (int layer = 0; layer < 2; layer++) {
        char name[128];
        snprintf(name, sizeof name, "decoder.layers.%d.self_attention.linear_qkv.weight", layer);
        const float *qkv = get(&mc, name, 128, h);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", layer);
        const float *q = get(&hf, name, 64, h);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.weight", layer);
        const float *k = get(&hf, name, 32, h);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.weight", layer);
        const float *v = get(&hf, name, 32, h);
        if (!qkv || !q || !k || !v) continue;
        for (int t = 0; t < d; t++)
            for (int c = 0; c < h; c++) {
                /* group 0: rows 0..31 q heads 0,1 (q rows 0..31); 32..47 k head 0; 48..63 v head 0 */
                CHECK(qkv[(0 + t) * h + c] == q[(0 + t) * h + c]);
                CHECK(qkv[(16 + t) * h + c] == q[(16 + t) * h + c]);
                CHECK(qkv[(32 + t) * h + c] == k[(0 + t) * h + c]);
                CHECK(qkv[(48 + t) * h + c] == v[(0 + t) * h + c]);
                /* group 1: rows 64..95 q heads 2,3 (q rows 32..63); key head 1 = k rows d..2d-1 at 96..111;
                 * value head 1 = v rows 16..31 at 112..127 */
                CHECK(qkv[(64 + t) * h + c] == q[(32 + t) * h + c]);
                CHECK(qkv[(80 + t) * h + c] == q[(48 + t) * h + c]);
                CHECK(qkv[(96 + t) * h + c] == k[(d + t) * h + c], "layer %d group 1 key row %d", layer, t);
                CHECK(qkv[(112 + t) * h + c] == v[(d + t) * h + c], "layer %d group 1 value row %d", layer, t);
            }
        /* fc1 = [gate; up] */
        snprintf(name, sizeof name, "decoder.layers.%d.mlp.linear_fc1.weight", layer);
        const float *fc1 = get(&mc, name, 2 * f, h);
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate_proj.weight", layer);
        const float *gate = get(&hf, name, f, h);
        snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", layer);
        const float *up = get(&hf, name, f, h);
        if (fc1 && gate && up) {
            CHECK(memcmp(fc1, gate, sizeof(float) * f * h) == 0);
            CHECK(memcmp(fc1 + f * h, up, sizeof(float) * f * h) == 0);
        }
        snprintf(name, sizeof name, "decoder.layers.%d.pre_mlp_layernorm.weight", layer);
        const float *ln = get(&mc, name, h, -1);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", layer);
        const float *ln_hf = get(&hf, name, h, -1);
        if (ln && ln_hf) CHECK(memcmp(ln, ln_hf, sizeof(float) * h) == 0);
    }
    CHECK(mc_host_params_find(&mc, "decoder.layers.0.self_attention.linear_qkv.bias") == NULL, "no biases");
    mc_host_params_free(&hf);
    mc_host_params_free(&mc);
}

/* GPT-2: n = g = 4, d = 16: head j's block is rows 48j..48j+47 = [q_j; k_j; v_j], taken
 * from c_attn's columns 16j.., 64+16j.., 128+16j.. (Conv1D weights are [in, out]). */
static void test_gpt2_qkv_interleave(void) {
    mc_model_config cfg;
    int vp;
    CHECK(load_config("gpt2", &cfg, &vp) == 0);
    mc_host_params hf, mc;
    if (load_weights("gpt2", &hf) != MC_OK) return;
    mc_host_params_init(&mc);
    mc_err err = {{0}};
    CHECK(mc_hf_import(MC_HF_GPT2, &cfg, vp, &hf, &mc, &err) == MC_OK, "%s", err.msg);
    const int h = 64, f = 256;
    const float *qkv = get(&mc, "decoder.layers.1.self_attention.linear_qkv.weight", 192, h);
    const float *qkvb = get(&mc, "decoder.layers.1.self_attention.linear_qkv.bias", 192, -1);
    const float *attn = get(&hf, "transformer.h.1.attn.c_attn.weight", h, 192);
    const float *attnb = get(&hf, "transformer.h.1.attn.c_attn.bias", 192, -1);
    if (qkv && qkvb && attn && attnb) {
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 16; t++) {
                for (int c = 0; c < h; c++) {
                    CHECK(qkv[(48 * j + t) * h + c] == attn[c * 192 + 16 * j + t]);
                    CHECK(qkv[(48 * j + 16 + t) * h + c] == attn[c * 192 + 64 + 16 * j + t], "head %d k", j);
                    CHECK(qkv[(48 * j + 32 + t) * h + c] == attn[c * 192 + 128 + 16 * j + t], "head %d v", j);
                }
                CHECK(qkvb[48 * j + t] == attnb[16 * j + t]);
                CHECK(qkvb[48 * j + 16 + t] == attnb[64 + 16 * j + t]);
                CHECK(qkvb[48 * j + 32 + t] == attnb[128 + 16 * j + t]);
            }
    }
    /* Transposed Conv1D weights. */
    const float *proj = get(&mc, "decoder.layers.0.self_attention.linear_proj.weight", h, h);
    const float *cproj = get(&hf, "transformer.h.0.attn.c_proj.weight", h, h);
    const float *fc1 = get(&mc, "decoder.layers.0.mlp.linear_fc1.weight", f, h);
    const float *cfc = get(&hf, "transformer.h.0.mlp.c_fc.weight", h, f);
    const float *fc2 = get(&mc, "decoder.layers.0.mlp.linear_fc2.weight", h, f);
    const float *cfc2 = get(&hf, "transformer.h.0.mlp.c_proj.weight", f, h);
    if (proj && cproj && fc1 && cfc && fc2 && cfc2) {
        CHECK(proj[5 * h + 17] == cproj[17 * h + 5]);
        CHECK(fc1[200 * h + 3] == cfc[3 * f + 200]);
        CHECK(fc2[3 * f + 200] == cfc2[200 * h + 3]);
    }
    const float *pos = get(&mc, "embedding.position_embeddings.weight", 32, h);
    const float *wpe = get(&hf, "transformer.wpe.weight", 32, h);
    if (pos && wpe) CHECK(memcmp(pos, wpe, sizeof(float) * 32 * h) == 0);
    CHECK(mc_host_params_find(&mc, "decoder.final_layernorm.bias") != NULL);
    mc_host_params_free(&hf);
    mc_host_params_free(&mc);
}

/* Official GPT-2 files have no "transformer." prefix; both spellings convert alike. */
static void test_unprefixed_names(void) {
    mc_model_config cfg;
    int vp;
    CHECK(load_config("gpt2", &cfg, &vp) == 0);
    mc_host_params hf, bare, a, b;
    if (load_weights("gpt2", &hf) != MC_OK) return;
    mc_host_params_init(&bare);
    mc_host_params_init(&a);
    mc_host_params_init(&b);
    for (int i = 0; i < hf.count; i++) {
        const mc_host_tensor *t = &hf.items[i];
        const char *name = strncmp(t->name, "transformer.", 12) == 0 ? t->name + 12 : t->name;
        memcpy(mc_host_params_add(&bare, name, t->ndim, t->shape), t->data, sizeof(float) * (size_t)t->numel);
    }
    /* HF's non-parameter buffers are ignored. */
    int64_t mask_shape[2] = {32, 32};
    mc_host_params_add(&bare, "h.0.attn.bias", 2, mask_shape);
    mc_host_params_add(&bare, "h.1.attn.masked_bias", 0, NULL);
    mc_err err = {{0}};
    CHECK(mc_hf_import(MC_HF_GPT2, &cfg, vp, &hf, &a, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_hf_import(MC_HF_GPT2, &cfg, vp, &bare, &b, &err) == MC_OK, "%s", err.msg);
    check_same_params(&a, &b);
    mc_host_params_free(&hf);
    mc_host_params_free(&bare);
    mc_host_params_free(&a);
    mc_host_params_free(&b);
}

/* Gradients have the weights' layouts: the golden HF gradients convert the same way. */
static void test_gradients_convert(void) {
    mc_model_config cfg;
    int vp;
    CHECK(load_config("llama", &cfg, &vp) == 0);
    mc_err err = {{0}};
    mc_safetensors *st;
    if (mc_safetensors_open(golden_path("llama_reference.safetensors"), &st, &err) != MC_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mc_host_params all, grads, mc;
    mc_host_params_init(&all);
    mc_host_params_init(&grads);
    mc_host_params_init(&mc);
    CHECK(mc_host_params_load_safetensors(&all, st, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_close(st);
    CHECK(mc_host_params_find(&all, "tokens") == NULL, "I32 tensors are skipped");
    for (int i = 0; i < all.count; i++) {
        const mc_host_tensor *t = &all.items[i];
        if (strncmp(t->name, "grad.", 5) != 0) continue;
        memcpy(mc_host_params_add(&grads, t->name + 5, t->ndim, t->shape), t->data, sizeof(float) * (size_t)t->numel);
    }
    CHECK(grads.count == 21, "%d gradients", grads.count);
    CHECK(mc_hf_import(MC_HF_LLAMA, &cfg, vp, &grads, &mc, &err) == MC_OK, "%s", err.msg);
    const float *gq = get(&mc, "decoder.layers.0.self_attention.linear_qkv.weight", 128, 64);
    const float *gk = get(&grads, "model.layers.0.self_attn.k_proj.weight", 32, 64);
    if (gq && gk) CHECK(memcmp(gq + 96 * 64, gk + 16 * 64, sizeof(float) * 16 * 64) == 0);
    mc_host_params_free(&all);
    mc_host_params_free(&grads);
    mc_host_params_free(&mc);
}

static void expect_import_error(mc_hf_arch arch, const mc_model_config *cfg, int vp, const mc_host_params *hf,
                                const char *needle1, const char *needle2) {
    mc_host_params out;
    mc_host_params_init(&out);
    mc_err err = {{0}};
    CHECK(mc_hf_import(arch, cfg, vp, hf, &out, &err) == MC_ERR, "import succeeded");
    CHECK(out.count == 0, "output touched on failure");
    if (needle1) CHECK(strstr(err.msg, needle1) != NULL, "'%s' not in: %s", needle1, err.msg);
    if (needle2) CHECK(strstr(err.msg, needle2) != NULL, "'%s' not in: %s", needle2, err.msg);
    CHECK(strchr(err.msg, '\n') == NULL);
    mc_host_params_free(&out);
}

static void test_errors(void) {
    mc_model_config cfg, bad;
    int vp;
    CHECK(load_config("llama", &cfg, &vp) == 0);
    mc_host_params hf;
    if (load_weights("llama", &hf) != MC_OK) return;

    /* Wrongly shaped: a config with a different ffn size. */
    bad = cfg;
    bad.ffn_hidden_size = 128;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "model.layers.0.mlp.gate_proj.weight", "[96, 64], expected [128, 64]");
    /* More query groups than the checkpoint has. */
    bad = cfg;
    bad.num_query_groups = 4;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "k_proj.weight", "expected [64, 64]");
    /* Fewer layers than the checkpoint: the extra layer is reported. */
    bad = cfg;
    bad.num_layers = 1;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "model.layers.1.", "1-layer Llama");
    /* A tied config leaves lm_head unused: allowed (HF keeps a tied copy); untied needs it. */
    mc_host_tensor *head = mc_host_params_find(&hf, "lm_head.weight");
    CHECK(head != NULL);
    if (head) head->name[0] = 'X'; /* hide it */
    expect_import_error(MC_HF_LLAMA, &cfg, vp, &hf, "missing tensor 'lm_head.weight'", NULL);
    if (head) head->name[0] = 'l';
    /* Biases requested but absent. */
    bad = cfg;
    bad.add_bias_linear = true;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "missing tensor 'model.layers.0.self_attn.q_proj.bias'", NULL);
    /* Family / config mismatches. */
    expect_import_error(MC_HF_GPT2, &cfg, vp, &hf, "GPT-2", "LayerNorm");
    bad = cfg;
    bad.num_query_groups = 3;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "num_query_groups 3", NULL);
    expect_import_error(MC_HF_LLAMA, &cfg, 100, &hf, "padded vocab 100", NULL);
    /* Vocabulary of a different size. */
    bad = cfg;
    bad.vocab_size = 200;
    expect_import_error(MC_HF_LLAMA, &bad, vp, &hf, "model.embed_tokens.weight", "[256, 64], expected [200, 64]");

    /* Export: a missing Megatron-C tensor, an unexpected one. */
    mc_host_params mc, out;
    mc_host_params_init(&mc);
    mc_host_params_init(&out);
    mc_err err = {{0}};
    CHECK(mc_hf_import(MC_HF_LLAMA, &cfg, vp, &hf, &mc, &err) == MC_OK, "%s", err.msg);
    mc_host_tensor *ol = mc_host_params_find(&mc, "output_layer.weight");
    if (ol) ol->name[0] = 'X';
    CHECK(mc_hf_export(MC_HF_LLAMA, &cfg, vp, &mc, &out, &err) == MC_ERR);
    CHECK(strstr(err.msg, "Megatron-C parameters: missing tensor 'output_layer.weight'"), "%s", err.msg);
    CHECK(out.count == 0);
    if (ol) ol->name[0] = 'o';
    int64_t one = 1;
    mc_host_params_add(&mc, "decoder.layers.7.extra", 1, &one);
    CHECK(mc_hf_export(MC_HF_LLAMA, &cfg, vp, &mc, &out, &err) == MC_ERR && strstr(err.msg, "decoder.layers.7.extra"),
          "%s", err.msg);
    /* Converting into a list that already holds the names fails cleanly. */
    mc_host_params again;
    mc_host_params_init(&again);
    CHECK(mc_hf_import(MC_HF_LLAMA, &cfg, vp, &hf, &again, &err) == MC_OK);
    int before = again.count;
    CHECK(mc_hf_import(MC_HF_LLAMA, &cfg, vp, &hf, &again, &err) == MC_ERR && strstr(err.msg, "already present"), "%s",
          err.msg);
    CHECK(again.count == before);
    mc_host_params_free(&again);
    mc_host_params_free(&mc);
    mc_host_params_free(&out);
    mc_host_params_free(&hf);

    CHECK(mc_hf_arch_parse("GPT2LMHeadModel") == MC_HF_GPT2 && mc_hf_arch_parse("LlamaForCausalLM") == MC_HF_LLAMA);
    CHECK(mc_hf_arch_parse("MistralForCausalLM") == -1);
}

/* Saving and loading HF checkpoints: one file, a directory, a sharded directory, BF16. */
static void test_checkpoint_files(void) {
    mc_host_params hf, got;
    if (load_weights("llama", &hf) != MC_OK) return;
    mc_err err = {{0}};
    char path[512], dir[300];

    snprintf(dir, sizeof dir, "%s/single", g_dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(mc_host_params_save_safetensors(&hf, path, MC_F32, &err) == MC_OK, "%s", err.msg);
    mc_host_params_init(&got);
    CHECK(mc_host_params_load_hf(&got, dir, &err) == MC_OK, "%s", err.msg);
    check_same_params(&hf, &got);
    mc_host_params_free(&got);

    /* Two shards and an index. */
    snprintf(dir, sizeof dir, "%s/sharded", g_dir);
    CHECK(mkdir(dir, 0755) == 0);
    mc_host_params s1, s2;
    mc_host_params_init(&s1);
    mc_host_params_init(&s2);
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < hf.count; i++) {
        const mc_host_tensor *t = &hf.items[i];
        mc_host_params *dst = i % 2 ? &s2 : &s1;
        memcpy(mc_host_params_add(dst, t->name, t->ndim, t->shape), t->data, sizeof(float) * (size_t)t->numel);
        cJSON_AddStringToObject(map, t->name, i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
    }
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(mc_host_params_save_safetensors(&s1, path, MC_F32, &err) == MC_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(mc_host_params_save_safetensors(&s2, path, MC_F64, &err) == MC_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *text = cJSON_Print(index);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    mc_host_params_init(&got);
    CHECK(mc_host_params_load_hf(&got, dir, &err) == MC_OK, "%s", err.msg);
    check_same_params(&hf, &got);
    mc_host_params_free(&got);
    /* An index naming a tensor that no shard holds. */
    cJSON_AddStringToObject(map, "model.ghost.weight", "model-00001-of-00002.safetensors");
    text = cJSON_Print(index);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    mc_host_params_init(&got);
    CHECK(mc_host_params_load_hf(&got, dir, &err) == MC_ERR && strstr(err.msg, "model.ghost.weight"), "%s", err.msg);
    mc_host_params_free(&got);
    cJSON_Delete(index);
    mc_host_params_free(&s1);
    mc_host_params_free(&s2);

    /* BF16: values come back rounded to bf16. */
    snprintf(path, sizeof path, "%s/bf16.safetensors", g_dir);
    CHECK(mc_host_params_save_safetensors(&hf, path, MC_BF16, &err) == MC_OK, "%s", err.msg);
    mc_host_params_init(&got);
    CHECK(mc_host_params_load_hf(&got, path, &err) == MC_OK, "%s", err.msg);
    const mc_host_tensor *a = mc_host_params_find(&hf, "model.norm.weight"), *b = mc_host_params_find(&got, "model.norm.weight");
    CHECK(a && b);
    if (a && b)
        for (int i = 0; i < 64; i++) CHECK(b->data[i] == mc_bf16_to_f32(mc_f32_to_bf16(a->data[i])));
    mc_host_params_free(&got);
    CHECK(mc_host_params_save_safetensors(&hf, path, MC_I32, &err) == MC_ERR);

    snprintf(dir, sizeof dir, "%s/empty", g_dir);
    CHECK(mkdir(dir, 0755) == 0);
    mc_host_params_init(&got);
    CHECK(mc_host_params_load_hf(&got, dir, &err) == MC_ERR && strstr(err.msg, "model.safetensors"), "%s", err.msg);
    /* Loading the same file twice collides. */
    CHECK(mc_host_params_load_hf(&got, golden_path("llama_weights.safetensors"), &err) == MC_OK, "%s", err.msg);
    CHECK(mc_host_params_load_hf(&got, golden_path("llama_weights.safetensors"), &err) == MC_ERR &&
              strstr(err.msg, "already loaded"),
          "%s", err.msg);
    mc_host_params_free(&got);
    mc_host_params_free(&hf);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mc_test_hf_convert_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_gpt2_roundtrip);
    RUN(test_llama_roundtrip);
    RUN(test_llama_qkv_interleave);
    RUN(test_gpt2_qkv_interleave);
    RUN(test_unprefixed_names);
    RUN(test_gradients_convert);
    RUN(test_errors);
    RUN(test_checkpoint_files);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_summary();
}
