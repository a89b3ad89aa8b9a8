/* hf_convert.c: Hugging Face GPT-2 / Llama <-> Megatron-C names and layouts. */
#include "io/hf_convert.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- named host tensors --------------------------------------------------- */

void mc_host_params_init(mc_host_params *p) { memset(p, 0, sizeof *p); }

void mc_host_params_free(mc_host_params *p) {
    for (int i = 0; i < p->count; i++) {
        free(p->items[i].name);
        free(p->items[i].data);
    }
    free(p->items);
    memset(p, 0, sizeof *p);
}

mc_host_tensor *mc_host_params_find(const mc_host_params *p, const char *name) {
    for (int i = 0; i < p->count; i++)
        if (strcmp(p->items[i].name, name) == 0) return &p->items[i];
    return NULL;
}

static mc_host_tensor *host_params_push(mc_host_params *p) {
    if (p->count == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = mc_xrealloc(p->items, (size_t)p->cap * sizeof(mc_host_tensor));
    }
    mc_host_tensor *t = &p->items[p->count++];
    memset(t, 0, sizeof *t);
    return t;
}

float *mc_host_params_add(mc_host_params *p, const char *name, int ndim, const int64_t *shape) {
    MC_ASSERT(!mc_host_params_find(p, name), "host tensor '%s' added twice", name);
    MC_ASSERT(ndim >= 0 && ndim <= MC_MAX_DIMS, "host tensor '%s': %d dims", name, ndim);
    mc_host_tensor *t = host_params_push(p);
    t->name = mc_xstrdup(name);
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        MC_ASSERT(shape[i] >= 0);
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    t->data = mc_xcalloc((size_t)(t->numel ? t->numel : 1), sizeof(float));
    return t->data;
}

/* Moves every tensor of `from` to the end of `to`; `from` is left empty. */
static int host_params_move(mc_host_params *to, mc_host_params *from, mc_err *err) {
    for (int i = 0; i < from->count; i++)
        if (mc_host_params_find(to, from->items[i].name))
            return mc_err_set(err, "converted tensor '%s' is already present in the destination", from->items[i].name);
    for (int i = 0; i < from->count; i++) *host_params_push(to) = from->items[i];
    free(from->items);
    memset(from, 0, sizeof *from);
    return MC_OK;
}

int mc_host_params_load_safetensors(mc_host_params *p, const mc_safetensors *st, mc_err *err) {
    for (int i = 0; i < mc_safetensors_count(st); i++) {
        const mc_st_tensor *t = mc_safetensors_at(st, i);
        if (t->dtype != MC_F32 && t->dtype != MC_F64 && t->dtype != MC_BF16 && t->dtype != MC_F16) continue;
        if (t->ndim > MC_MAX_DIMS)
            return mc_err_set(err, "%s: tensor '%s' has %d dimensions, at most %d supported", mc_safetensors_path(st),
                              t->name, t->ndim, MC_MAX_DIMS);
        if (mc_host_params_find(p, t->name))
            return mc_err_set(err, "%s: tensor '%s' was already loaded (from another shard?)", mc_safetensors_path(st),
                              t->name);
        float *dst = mc_host_params_add(p, t->name, t->ndim, t->shape);
        MC_TRY(mc_safetensors_read_f32_n(st, t->name, t->numel, dst, err));
    }
    return MC_OK;
}

static int load_one_file(mc_host_params *p, const char *path, mc_err *err) {
    mc_safetensors *st;
    MC_TRY(mc_safetensors_open(path, &st, err));
    int rc = mc_host_params_load_safetensors(p, st, err);
    mc_safetensors_close(st);
    return rc;
}

static char *read_text_file(const char *path, mc_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mc_err_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = mc_xmalloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len - 1 == 0) buf = mc_xrealloc(buf, cap *= 2);
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        mc_err_set(err, "%s: read error", path);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

int mc_host_params_load_hf(mc_host_params *p, const char *path, mc_err *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return mc_err_set(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return load_one_file(p, path, err);

    size_t size = strlen(path) + 64;
    char *file = mc_xmalloc(size);
    snprintf(file, size, "%s/model.safetensors.index.json", path);
    if (stat(file, &sb) != 0) {
        snprintf(file, size, "%s/model.safetensors", path);
        if (stat(file, &sb) != 0) {
            free(file);
            return mc_err_set(err, "%s: holds neither model.safetensors nor model.safetensors.index.json", path);
        }
        int rc = load_one_file(p, file, err);
        free(file);
        return rc;
    }
    char *text = read_text_file(file, err);
    if (!text) {
        free(file);
        return MC_ERR;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    int rc = MC_OK;
    if (!cJSON_IsObject(map)) {
        rc = mc_err_set(err, "%s: not JSON with a \"weight_map\" object", file);
    } else {
        /* Each shard once, in order of first mention. */
        int n = cJSON_GetArraySize(map), nshards = 0;
        const char **shards = mc_xcalloc((size_t)n + 1, sizeof(char *));
        for (const cJSON *e = map->child; e && rc == MC_OK; e = e->next) {
            if (!cJSON_IsString(e)) {
                rc = mc_err_set(err, "%s: weight_map entry '%s' is not a file name", file, e->string);
                break;
            }
            bool seen = false;
            for (int i = 0; i < nshards && !seen; i++) seen = strcmp(shards[i], e->valuestring) == 0;
            if (!seen) shards[nshards++] = e->valuestring;
        }
        for (int i = 0; i < nshards && rc == MC_OK; i++) {
            if (strchr(shards[i], '/')) {
                rc = mc_err_set(err, "%s: shard name '%s' must be a plain file name", file, shards[i]);
                break;
            }
            size_t s2 = strlen(path) + strlen(shards[i]) + 2;
            char *shard = mc_xmalloc(s2);
            snprintf(shard, s2, "%s/%s", path, shards[i]);
            rc = load_one_file(p, shard, err);
            free(shard);
        }
        for (const cJSON *e = map->child; e && rc == MC_OK; e = e->next)
            if (!mc_host_params_find(p, e->string))
                rc = mc_err_set(err, "%s: tensor '%s' is listed in the index but missing from %s", file, e->string,
                                e->valuestring);
        free(shards);
    }
    cJSON_Delete(root);
    free(file);
    return rc;
}

int mc_host_params_save_safetensors(const mc_host_params *p, const char *path, mc_dtype dtype, mc_err *err) {
    if (dtype != MC_F32 && dtype != MC_BF16 && dtype != MC_F64)
        return mc_err_set(err, "%s: cannot save host tensors as %s (F32, BF16 or F64)", path, mc_dtype_name(dtype));
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    int rc = MC_OK;
    for (int i = 0; i < p->count && rc == MC_OK; i++) {
        const mc_host_tensor *t = &p->items[i];
        if (dtype == MC_F32) {
            rc = mc_safetensors_writer_add(w, t->name, MC_F32, t->ndim, t->shape, t->data, err);
            continue;
        }
        void *conv = mc_xmalloc((size_t)(t->numel ? t->numel : 1) * mc_dtype_size(dtype));
        for (int64_t k = 0; k < t->numel; k++) {
            if (dtype == MC_BF16)
                ((uint16_t *)conv)[k] = mc_f32_to_bf16(t->data[k]);
            else
                ((double *)conv)[k] = t->data[k];
        }
        rc = mc_safetensors_writer_add_copy(w, t->name, dtype, t->ndim, t->shape, conv, err);
        free(conv);
    }
    if (rc == MC_OK) rc = mc_safetensors_writer_save(w, path, err);
    mc_safetensors_writer_free(w);
    return rc;
}

/* ---- model dimensions ------------------------------------------------------ */

typedef struct {
    mc_hf_arch arch;
    int L, h, n, g, d, f, V, Vp, max_pos;
    bool norm_bias;    /* LayerNorm (GPT-2) has a bias, RMSNorm none */
    bool linear_bias;  /* add_bias_linear */
    bool learned_pos;
    bool untied;
} hf_dims;

int mc_hf_arch_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "GPT2LMHeadModel") == 0 || strcmp(s, "gpt2") == 0 || strcmp(s, "GPT2Model") == 0) return MC_HF_GPT2;
    if (strcmp(s, "LlamaForCausalLM") == 0 || strcmp(s, "llama") == 0 || strcmp(s, "LlamaModel") == 0)
        return MC_HF_LLAMA;
    return -1;
}

const char *mc_hf_arch_name(mc_hf_arch arch) { return arch == MC_HF_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM"; }

static int hf_resolve(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, hf_dims *D, mc_err *err) {
    const char *fam = arch == MC_HF_GPT2 ? "GPT-2" : arch == MC_HF_LLAMA ? "Llama" : NULL;
    if (!fam) return mc_err_set(err, "HF conversion: unknown architecture %d", (int)arch);
    memset(D, 0, sizeof *D);
    D->arch = arch;
    D->L = cfg->num_layers;
    D->h = cfg->hidden_size;
    D->n = cfg->num_attention_heads;
    if (D->L <= 0 || D->h <= 0 || D->n <= 0)
        return mc_err_set(err, "HF %s conversion: num_layers %d, hidden_size %d, num_attention_heads %d must be positive",
                          fam, D->L, D->h, D->n);
    if (cfg->kv_channels > 0) {
        D->d = cfg->kv_channels;
    } else {
        if (D->h % D->n)
            return mc_err_set(err, "HF %s conversion: hidden_size %d is not divisible by num_attention_heads %d", fam,
                              D->h, D->n);
        D->d = D->h / D->n;
    }
    D->g = cfg->group_query_attention ? cfg->num_query_groups : D->n;
    if (D->g <= 0 || D->n % D->g)
        return mc_err_set(err, "HF %s conversion: num_query_groups %d must divide num_attention_heads %d", fam, D->g,
                          D->n);
    D->f = cfg->ffn_hidden_size > 0 ? cfg->ffn_hidden_size
           : cfg->swiglu            ? (int)((4.0 * D->h * 2.0 / 3.0) / 64) * 64
                                    : 4 * D->h;
    if (D->f <= 0) return mc_err_set(err, "HF %s conversion: ffn_hidden_size %d must be positive", fam, D->f);
    D->V = cfg->vocab_size;
    D->Vp = padded_vocab;
    if (D->V <= 0 || D->Vp < D->V)
        return mc_err_set(err, "HF %s conversion: vocab_size %d must be positive and <= padded vocab %d", fam, D->V,
                          D->Vp);
    D->max_pos = cfg->max_position_embeddings > 0 ? cfg->max_position_embeddings : cfg->seq_length;
    D->norm_bias = cfg->normalization == MC_NORM_LAYERNORM;
    D->linear_bias = cfg->add_bias_linear;
    D->learned_pos = cfg->position_embedding_type == MC_POS_LEARNED_ABSOLUTE;
    D->untied = cfg->untie_embeddings_and_output_weights;

    if (arch == MC_HF_GPT2) {
        if (cfg->normalization != MC_NORM_LAYERNORM || !D->learned_pos || cfg->swiglu || !D->linear_bias || D->untied)
            return mc_err_set(err, "HF GPT-2 conversion: the config must be LayerNorm, learned_absolute positions, no "
                                   "swiglu, add_bias_linear, tied embeddings (got %s, %s, swiglu %d, bias %d, untied %d)",
                              cfg->normalization == MC_NORM_LAYERNORM ? "LayerNorm" : "RMSNorm",
                              D->learned_pos ? "learned_absolute" : "not learned_absolute", (int)cfg->swiglu,
                              (int)D->linear_bias, (int)D->untied);
        if (D->g != D->n || D->n * D->d != D->h)
            return mc_err_set(err, "HF GPT-2 conversion: needs heads * kv_channels == hidden_size and no GQA "
                                   "(heads %d, kv_channels %d, groups %d, hidden %d)",
                              D->n, D->d, D->g, D->h);
        if (D->max_pos <= 0)
            return mc_err_set(err, "HF GPT-2 conversion: max_position_embeddings (or seq_length) must be positive");
    } else {
        if (cfg->normalization != MC_NORM_RMSNORM || cfg->position_embedding_type != MC_POS_ROPE || !cfg->swiglu)
            return mc_err_set(err, "HF Llama conversion: the config must be RMSNorm, rope, swiglu (got %s, position %d, "
                                   "swiglu %d)",
                              cfg->normalization == MC_NORM_LAYERNORM ? "LayerNorm" : "RMSNorm",
                              (int)cfg->position_embedding_type, (int)cfg->swiglu);
    }
    return MC_OK;
}

int mc_hf_check_config(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, mc_err *err) {
    hf_dims D;
    return hf_resolve(arch, cfg, padded_vocab, &D, err);
}

/* Row r of Megatron's fused QKV weight comes from query (part 0), key (1) or value (2)
 * row *src of the separate projections. Per group j, the block of (n/g + 2) d rows is:
 * query heads j n/g .. (j+1) n/g - 1, key head j, value head j. */
static void qkv_source(int64_t r, const hf_dims *D, int *part, int64_t *src) {
    int64_t q_per_group = (int64_t)(D->n / D->g) * D->d, block = q_per_group + 2 * (int64_t)D->d;
    int64_t j = r / block, o = r % block;
    if (o < q_per_group) {
        *part = 0;
        *src = j * q_per_group + o;
    } else if (o < q_per_group + D->d) {
        *part = 1;
        *src = j * D->d + (o - q_per_group);
    } else {
        *part = 2;
        *src = j * D->d + (o - q_per_group - D->d);
    }
}

/* ---- tensor lookup with checks ------------------------------------------------ */

typedef struct {
    const mc_host_params *src;
    bool *used;         /* per tensor of src */
    const char *prefix; /* tried first: "transformer." / "model." / "" */
    const char *what;   /* "HF checkpoint" or "Megatron-C parameters" */
    mc_host_params out; /* the converted tensors, moved to the caller's list on success */
    mc_err *err;
} conv_ctx;

static void fmt_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* The tensor named prefix+name (or name) with the expected shape (d1 < 0: 1-D), or NULL
 * with the error set. */
static const float *need(conv_ctx *c, bool use_prefix, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static const float *need(conv_ctx *c, bool use_prefix, int64_t d0, int64_t d1, const char *fmt, ...) {
    char name[256], full[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const mc_host_tensor *t = NULL;
    if (use_prefix && c->prefix[0]) {
        snprintf(full, sizeof full, "%s%s", c->prefix, name);
        t = mc_host_params_find(c->src, full);
    }
    if (!t) t = mc_host_params_find(c->src, name);
    if (!t) {
        mc_err_set(c->err, "%s: missing tensor '%s%s'", c->what, use_prefix ? c->prefix : "", name);
        return NULL;
    }
    int64_t want[2] = {d0, d1};
    int ndim = d1 < 0 ? 1 : 2;
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char have_s[96], want_s[96];
        fmt_shape(have_s, sizeof have_s, t->ndim, t->shape);
        fmt_shape(want_s, sizeof want_s, ndim, want);
        mc_err_set(c->err, "%s: tensor '%s' has shape %s, expected %s for this config", c->what, t->name, have_s,
                   want_s);
        return NULL;
    }
    c->used[t - c->src->items] = true;
    return t->data;
}

static float *emit(conv_ctx *c, int64_t d0, int64_t d1, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static float *emit(conv_ctx *c, int64_t d0, int64_t d1, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    return mc_host_params_add(&c->out, name, d1 < 0 ? 1 : 2, shape);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Every source tensor must have been used, except HF's non-parameter buffers. */
static int check_all_used(conv_ctx *c, const hf_dims *D, bool from_hf) {
    for (int i = 0; i < c->src->count; i++) {
        if (c->used[i]) continue;
        const char *name = c->src->items[i].name;
        if (from_hf && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
                        ends_with(name, "rotary_emb.inv_freq") || (!D->untied && strcmp(name, "lm_head.weight") == 0)))
            continue;
        return mc_err_set(c->err, "%s: tensor '%s' is not part of a %d-layer %s with this config (config mismatch?)",
                          c->what, name, D->L, D->arch == MC_HF_GPT2 ? "GPT-2" : "Llama");
    }
    return MC_OK;
}

static void copy_rows(float *dst, const float *src, int64_t rows, int64_t cols) {
    memcpy(dst, src, (size_t)(rows * cols) * sizeof(float));
}

/* dst [cols, rows] = src [rows, cols]^T */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) dst[k * rows + r] = src[r * cols + k];
}

#define NEED(var, ...)                                \
    const float *var = need(c, __VA_ARGS__);         \
    if (!var) goto fail

/* ---- import -------------------------------------------------------------------- */

static int import_gpt2(conv_ctx *c, const hf_dims *D) {
    const int64_t h = D->h, f = D->f, V = D->V, Vp = D->Vp, q3 = 3 * h;
    NEED(wte, true, V, h, "wte.weight");
    copy_rows(emit(c, Vp, h, "embedding.word_embeddings.weight"), wte, V, h);
    NEED(wpe, true, D->max_pos, h, "wpe.weight");
    copy_rows(emit(c, D->max_pos, h, "embedding.position_embeddings.weight"), wpe, D->max_pos, h);
    for (int i = 0; i < D->L; i++) {
        NEED(ln1w, true, h, -1, "h.%d.ln_1.weight", i);
        NEED(ln1b, true, h, -1, "h.%d.ln_1.bias", i);
        NEED(attw, true, h, q3, "h.%d.attn.c_attn.weight", i);
        NEED(attb, true, q3, -1, "h.%d.attn.c_attn.bias", i);
        NEED(projw, true, h, h, "h.%d.attn.c_proj.weight", i);
        NEED(projb, true, h, -1, "h.%d.attn.c_proj.bias", i);
        NEED(ln2w, true, h, -1, "h.%d.ln_2.weight", i);
        NEED(ln2b, true, h, -1, "h.%d.ln_2.bias", i);
        NEED(fcw, true, h, f, "h.%d.mlp.c_fc.weight", i);
        NEED(fcb, true, f, -1, "h.%d.mlp.c_fc.bias", i);
        NEED(fc2w, true, f, h, "h.%d.mlp.c_proj.weight", i);
        NEED(fc2b, true, h, -1, "h.%d.mlp.c_proj.bias", i);

        copy_rows(emit(c, h, -1, "decoder.layers.%d.input_layernorm.weight", i), ln1w, 1, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.input_layernorm.bias", i), ln1b, 1, h);
        float *qkv = emit(c, q3, h, "decoder.layers.%d.self_attention.linear_qkv.weight", i);
        float *qkvb = emit(c, q3, -1, "decoder.layers.%d.self_attention.linear_qkv.bias", i);
        for (int64_t r = 0; r < q3; r++) {
            int part;
            int64_t src;
            qkv_source(r, D, &part, &src);
            int64_t col = part * h + src; /* c_attn column: [q | k | v] */
            for (int64_t k = 0; k < h; k++) qkv[r * h + k] = attw[k * q3 + col];
            qkvb[r] = attb[col];
        }
        transpose(emit(c, h, h, "decoder.layers.%d.self_attention.linear_proj.weight", i), projw, h, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.self_attention.linear_proj.bias", i), projb, 1, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.pre_mlp_layernorm.weight", i), ln2w, 1, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.pre_mlp_layernorm.bias", i), ln2b, 1, h);
        transpose(emit(c, f, h, "decoder.layers.%d.mlp.linear_fc1.weight", i), fcw, h, f);
        copy_rows(emit(c, f, -1, "decoder.layers.%d.mlp.linear_fc1.bias", i), fcb, 1, f);
        transpose(emit(c, h, f, "decoder.layers.%d.mlp.linear_fc2.weight", i), fc2w, f, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.mlp.linear_fc2.bias", i), fc2b, 1, h);
    }
    NEED(lnfw, true, h, -1, "ln_f.weight");
    NEED(lnfb, true, h, -1, "ln_f.bias");
    copy_rows(emit(c, h, -1, "decoder.final_layernorm.weight"), lnfw, 1, h);
    copy_rows(emit(c, h, -1, "decoder.final_layernorm.bias"), lnfb, 1, h);
    return MC_OK;
fail:
    return MC_ERR;
}

static int import_llama(conv_ctx *c, const hf_dims *D) {
    const int64_t h = D->h, f = D->f, V = D->V, Vp = D->Vp, n = D->n, g = D->g, d = D->d;
    const int64_t nq = n * d, nkv = g * d, nqkv = nq + 2 * nkv;
    const bool bias = D->linear_bias;
    NEED(emb, true, V, h, "embed_tokens.weight");
    copy_rows(emit(c, Vp, h, "embedding.word_embeddings.weight"), emb, V, h);
    for (int i = 0; i < D->L; i++) {
        NEED(ln1, true, h, -1, "layers.%d.input_layernorm.weight", i);
        NEED(qw, true, nq, h, "layers.%d.self_attn.q_proj.weight", i);
        NEED(kw, true, nkv, h, "layers.%d.self_attn.k_proj.weight", i);
        NEED(vw, true, nkv, h, "layers.%d.self_attn.v_proj.weight", i);
        NEED(ow, true, h, nq, "layers.%d.self_attn.o_proj.weight", i);
        NEED(ln2, true, h, -1, "layers.%d.post_attention_layernorm.weight", i);
        NEED(gw, true, f, h, "layers.%d.mlp.gate_proj.weight", i);
        NEED(uw, true, f, h, "layers.%d.mlp.up_proj.weight", i);
        NEED(dw, true, h, f, "layers.%d.mlp.down_proj.weight", i);
        const float *qb = NULL, *kb = NULL, *vb = NULL, *ob = NULL, *gb = NULL, *ub = NULL, *db = NULL;
        if (bias) {
            if (!(qb = need(c, true, nq, -1, "layers.%d.self_attn.q_proj.bias", i))) goto fail;
            if (!(kb = need(c, true, nkv, -1, "layers.%d.self_attn.k_proj.bias", i))) goto fail;
            if (!(vb = need(c, true, nkv, -1, "layers.%d.self_attn.v_proj.bias", i))) goto fail;
            if (!(ob = need(c, true, h, -1, "layers.%d.self_attn.o_proj.bias", i))) goto fail;
            if (!(gb = need(c, true, f, -1, "layers.%d.mlp.gate_proj.bias", i))) goto fail;
            if (!(ub = need(c, true, f, -1, "layers.%d.mlp.up_proj.bias", i))) goto fail;
            if (!(db = need(c, true, h, -1, "layers.%d.mlp.down_proj.bias", i))) goto fail;
        }
        copy_rows(emit(c, h, -1, "decoder.layers.%d.input_layernorm.weight", i), ln1, 1, h);
        float *qkv = emit(c, nqkv, h, "decoder.layers.%d.self_attention.linear_qkv.weight", i);
        float *qkvb = bias ? emit(c, nqkv, -1, "decoder.layers.%d.self_attention.linear_qkv.bias", i) : NULL;
        for (int64_t r = 0; r < nqkv; r++) {
            int part;
            int64_t src;
            qkv_source(r, D, &part, &src);
            const float *w = part == 0 ? qw : part == 1 ? kw : vw;
            copy_rows(qkv + r * h, w + src * h, 1, h);
            if (bias) qkvb[r] = (part == 0 ? qb : part == 1 ? kb : vb)[src];
        }
        copy_rows(emit(c, h, nq, "decoder.layers.%d.self_attention.linear_proj.weight", i), ow, h, nq);
        if (bias) copy_rows(emit(c, h, -1, "decoder.layers.%d.self_attention.linear_proj.bias", i), ob, 1, h);
        copy_rows(emit(c, h, -1, "decoder.layers.%d.pre_mlp_layernorm.weight", i), ln2, 1, h);
        float *fc1 = emit(c, 2 * f, h, "decoder.layers.%d.mlp.linear_fc1.weight", i);
        copy_rows(fc1, gw, f, h);
        copy_rows(fc1 + f * h, uw, f, h);
        if (bias) {
            float *fc1b = emit(c, 2 * f, -1, "decoder.layers.%d.mlp.linear_fc1.bias", i);
            copy_rows(fc1b, gb, 1, f);
            copy_rows(fc1b + f, ub, 1, f);
        }
        copy_rows(emit(c, h, f, "decoder.layers.%d.mlp.linear_fc2.weight", i), dw, h, f);
        if (bias) copy_rows(emit(c, h, -1, "decoder.layers.%d.mlp.linear_fc2.bias", i), db, 1, h);
    }
    NEED(norm, true, h, -1, "norm.weight");
    copy_rows(emit(c, h, -1, "decoder.final_layernorm.weight"), norm, 1, h);
    if (D->untied) {
        NEED(head, false, V, h, "lm_head.weight");
        copy_rows(emit(c, Vp, h, "output_layer.weight"), head, V, h);
    }
    return MC_OK;
fail:
    return MC_ERR;
}

/* ---- export -------------------------------------------------------------------- */

static int export_gpt2(conv_ctx *c, const hf_dims *D) {
    const int64_t h = D->h, f = D->f, V = D->V, Vp = D->Vp, q3 = 3 * h;
    NEED(wte, false, Vp, h, "embedding.word_embeddings.weight");
    copy_rows(emit(c, V, h, "transformer.wte.weight"), wte, V, h);
    NEED(wpe, false, D->max_pos, h, "embedding.position_embeddings.weight");
    copy_rows(emit(c, D->max_pos, h, "transformer.wpe.weight"), wpe, D->max_pos, h);
    for (int i = 0; i < D->L; i++) {
        NEED(ln1w, false, h, -1, "decoder.layers.%d.input_layernorm.weight", i);
        NEED(ln1b, false, h, -1, "decoder.layers.%d.input_layernorm.bias", i);
        NEED(qkv, false, q3, h, "decoder.layers.%d.self_attention.linear_qkv.weight", i);
        NEED(qkvb, false, q3, -1, "decoder.layers.%d.self_attention.linear_qkv.bias", i);
        NEED(projw, false, h, h, "decoder.layers.%d.self_attention.linear_proj.weight", i);
        NEED(projb, false, h, -1, "decoder.layers.%d.self_attention.linear_proj.bias", i);
        NEED(ln2w, false, h, -1, "decoder.layers.%d.pre_mlp_layernorm.weight", i);
        NEED(ln2b, false, h, -1, "decoder.layers.%d.pre_mlp_layernorm.bias", i);
        NEED(fc1w, false, f, h, "decoder.layers.%d.mlp.linear_fc1.weight", i);
        NEED(fc1b, false, f, -1, "decoder.layers.%d.mlp.linear_fc1.bias", i);
        NEED(fc2w, false, h, f, "decoder.layers.%d.mlp.linear_fc2.weight", i);
        NEED(fc2b, false, h, -1, "decoder.layers.%d.mlp.linear_fc2.bias", i);

        copy_rows(emit(c, h, -1, "transformer.h.%d.ln_1.weight", i), ln1w, 1, h);
        copy_rows(emit(c, h, -1, "transformer.h.%d.ln_1.bias", i), ln1b, 1, h);
        float *attw = emit(c, h, q3, "transformer.h.%d.attn.c_attn.weight", i);
        float *attb = emit(c, q3, -1, "transformer.h.%d.attn.c_attn.bias", i);
        for (int64_t r = 0; r < q3; r++) {
            int part;
            int64_t src;
            qkv_source(r, D, &part, &src);
            int64_t col = part * h + src;
            for (int64_t k = 0; k < h; k++) attw[k * q3 + col] = qkv[r * h + k];
            attb[col] = qkvb[r];
        }
        transpose(emit(c, h, h, "transformer.h.%d.attn.c_proj.weight", i), projw, h, h);
        copy_rows(emit(c, h, -1, "transformer.h.%d.attn.c_proj.bias", i), projb, 1, h);
        copy_rows(emit(c, h, -1, "transformer.h.%d.ln_2.weight", i), ln2w, 1, h);
        copy_rows(emit(c, h, -1, "transformer.h.%d.ln_2.bias", i), ln2b, 1, h);
        transpose(emit(c, h, f, "transformer.h.%d.mlp.c_fc.weight", i), fc1w, f, h);
        copy_rows(emit(c, f, -1, "transformer.h.%d.mlp.c_fc.bias", i), fc1b, 1, f);
        transpose(emit(c, f, h, "transformer.h.%d.mlp.c_proj.weight", i), fc2w, h, f);
        copy_rows(emit(c, h, -1, "transformer.h.%d.mlp.c_proj.bias", i), fc2b, 1, h);
    }
    NEED(lnfw, false, h, -1, "decoder.final_layernorm.weight");
    NEED(lnfb, false, h, -1, "decoder.final_layernorm.bias");
    copy_rows(emit(c, h, -1, "transformer.ln_f.weight"), lnfw, 1, h);
    copy_rows(emit(c, h, -1, "transformer.ln_f.bias"), lnfb, 1, h);
    return MC_OK;
fail:
    return MC_ERR;
}

static int export_llama(conv_ctx *c, const hf_dims *D) {
    const int64_t h = D->h, f = D->f, V = D->V, Vp = D->Vp, n = D->n, g = D->g, d = D->d;
    const int64_t nq = n * d, nkv = g * d, nqkv = nq + 2 * nkv;
    const bool bias = D->linear_bias;
    NEED(emb, false, Vp, h, "embedding.word_embeddings.weight");
    copy_rows(emit(c, V, h, "model.embed_tokens.weight"), emb, V, h);
    for (int i = 0; i < D->L; i++) {
        NEED(ln1, false, h, -1, "decoder.layers.%d.input_layernorm.weight", i);
        NEED(qkv, false, nqkv, h, "decoder.layers.%d.self_attention.linear_qkv.weight", i);
        NEED(proj, false, h, nq, "decoder.layers.%d.self_attention.linear_proj.weight", i);
        NEED(ln2, false, h, -1, "decoder.layers.%d.pre_mlp_layernorm.weight", i);
        NEED(fc1, false, 2 * f, h, "decoder.layers.%d.mlp.linear_fc1.weight", i);
        NEED(fc2, false, h, f, "decoder.layers.%d.mlp.linear_fc2.weight", i);
        const float *qkvb = NULL, *projb = NULL, *fc1b = NULL, *fc2b = NULL;
        if (bias) {
            if (!(qkvb = need(c, false, nqkv, -1, "decoder.layers.%d.self_attention.linear_qkv.bias", i))) goto fail;
            if (!(projb = need(c, false, h, -1, "decoder.layers.%d.self_attention.linear_proj.bias", i))) goto fail;
            if (!(fc1b = need(c, false, 2 * f, -1, "decoder.layers.%d.mlp.linear_fc1.bias", i))) goto fail;
            if (!(fc2b = need(c, false, h, -1, "decoder.layers.%d.mlp.linear_fc2.bias", i))) goto fail;
        }
        copy_rows(emit(c, h, -1, "model.layers.%d.input_layernorm.weight", i), ln1, 1, h);
        float *qw = emit(c, nq, h, "model.layers.%d.self_attn.q_proj.weight", i);
        float *kw = emit(c, nkv, h, "model.layers.%d.self_attn.k_proj.weight", i);
        float *vw = emit(c, nkv, h, "model.layers.%d.self_attn.v_proj.weight", i);
        float *qb = NULL, *kb = NULL, *vb = NULL;
        if (bias) {
            qb = emit(c, nq, -1, "model.layers.%d.self_attn.q_proj.bias", i);
            kb = emit(c, nkv, -1, "model.layers.%d.self_attn.k_proj.bias", i);
            vb = emit(c, nkv, -1, "model.layers.%d.self_attn.v_proj.bias", i);
        }
        for (int64_t r = 0; r < nqkv; r++) {
            int part;
            int64_t src;
            qkv_source(r, D, &part, &src);
            float *w = part == 0 ? qw : part == 1 ? kw : vw;
            copy_rows(w + src * h, qkv + r * h, 1, h);
            if (bias) (part == 0 ? qb : part == 1 ? kb : vb)[src] = qkvb[r];
        }
        copy_rows(emit(c, h, nq, "model.layers.%d.self_attn.o_proj.weight", i), proj, h, nq);
        if (bias) copy_rows(emit(c, h, -1, "model.layers.%d.self_attn.o_proj.bias", i), projb, 1, h);
        copy_rows(emit(c, h, -1, "model.layers.%d.post_attention_layernorm.weight", i), ln2, 1, h);
        copy_rows(emit(c, f, h, "model.layers.%d.mlp.gate_proj.weight", i), fc1, f, h);
        copy_rows(emit(c, f, h, "model.layers.%d.mlp.up_proj.weight", i), fc1 + f * h, f, h);
        copy_rows(emit(c, h, f, "model.layers.%d.mlp.down_proj.weight", i), fc2, h, f);
        if (bias) {
            copy_rows(emit(c, f, -1, "model.layers.%d.mlp.gate_proj.bias", i), fc1b, 1, f);
            copy_rows(emit(c, f, -1, "model.layers.%d.mlp.up_proj.bias", i), fc1b + f, 1, f);
            copy_rows(emit(c, h, -1, "model.layers.%d.mlp.down_proj.bias", i), fc2b, 1, h);
        }
    }
    NEED(norm, false, h, -1, "decoder.final_layernorm.weight");
    copy_rows(emit(c, h, -1, "model.norm.weight"), norm, 1, h);
    if (D->untied) {
        NEED(head, false, Vp, h, "output_layer.weight");
        copy_rows(emit(c, V, h, "lm_head.weight"), head, V, h);
    }
    return MC_OK;
fail:
    return MC_ERR;
}

static int hf_run(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, const mc_host_params *src,
                  mc_host_params *out, bool import, mc_err *err) {
    hf_dims D;
    MC_TRY(hf_resolve(arch, cfg, padded_vocab, &D, err));
    conv_ctx c = {.src = src,
                  .used = mc_xcalloc((size_t)src->count + 1, sizeof(bool)),
                  .prefix = !import ? "" : arch == MC_HF_GPT2 ? "transformer." : "model.",
                  .what = import ? "HF checkpoint" : "Megatron-C parameters",
                  .err = err};
    mc_host_params_init(&c.out);
    int rc = import ? (arch == MC_HF_GPT2 ? import_gpt2(&c, &D) : import_llama(&c, &D))
                    : (arch == MC_HF_GPT2 ? export_gpt2(&c, &D) : export_llama(&c, &D));
    if (rc == MC_OK) rc = check_all_used(&c, &D, import);
    if (rc == MC_OK) rc = host_params_move(out, &c.out, err);
    mc_host_params_free(&c.out);
    free(c.used);
    return rc;
}

int mc_hf_import(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, const mc_host_params *hf,
                 mc_host_params *out, mc_err *err) {
    return hf_run(arch, cfg, padded_vocab, hf, out, true, err);
}

int mc_hf_export(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, const mc_host_params *mc,
                 mc_host_params *out, mc_err *err) {
    return hf_run(arch, cfg, padded_vocab, mc, out, false, err);
}
