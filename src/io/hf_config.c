/* hf_config.c: config.json <-> mc_model_config (hf_config.h). */
#include "io/hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"

/* A float as the shortest decimal that reads back as the same float (an epsilon of 1e-6
 * stays 1e-06 rather than its double's 9.9999999747524271e-07). */
static cJSON *float_number(float v) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    return cJSON_CreateNumber(strtod(buf, NULL));
}

typedef struct reader {
    const char *path;
    const cJSON *root;
    mc_err *err;
    bool failed;
} reader;

static const cJSON *field(const reader *r, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number field: *out, or the default when absent (required: an error when absent). */
static double number(reader *r, const char *key, bool required, double dflt) {
    if (r->failed) return dflt;
    const cJSON *v = field(r, key);
    if (!v) {
        if (required) {
            mc_err_set(r->err, "%s: \"%s\" is missing", r->path, key);
            r->failed = true;
        }
        return dflt;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        mc_err_set(r->err, "%s: \"%s\" must be a number", r->path, key);
        r->failed = true;
        return dflt;
    }
    return v->valuedouble;
}

/* A positive integer field that fits an int. */
static int count(reader *r, const char *key, bool required, int dflt) {
    double v = number(r, key, required, dflt);
    if (r->failed) return dflt;
    if (v != floor(v) || v < 1 || v > 1e9) {
        mc_err_set(r->err, "%s: \"%s\" is %.17g: must be a positive integer", r->path, key, v);
        r->failed = true;
        return dflt;
    }
    return (int)v;
}

static bool boolean(reader *r, const char *key, bool dflt) {
    if (r->failed) return dflt;
    const cJSON *v = field(r, key);
    if (!v) return dflt;
    if (!cJSON_IsBool(v)) {
        mc_err_set(r->err, "%s: \"%s\" must be true or false", r->path, key);
        r->failed = true;
        return dflt;
    }
    return cJSON_IsTrue(v);
}

static const char *string(const reader *r, const char *key) {
    const cJSON *v = field(r, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int refuse(reader *r, const char *fmt, const char *what) {
    mc_err_set(r->err, fmt, r->path, what);
    r->failed = true;
    return MC_ERR;
}

/* RoPE: rope_theta + rope_scaling (transformers 4) or rope_parameters (5). */
static int read_rope(reader *r, mc_model_config *m) {
    const cJSON *params = field(r, "rope_parameters");
    const cJSON *scaling = params ? params : field(r, "rope_scaling");
    double theta = 10000.0;
    reader sub = *r;
    if (params) {
        if (!cJSON_IsObject(params)) return refuse(r, "%s: \"%s\" must be an object", "rope_parameters");
        sub.root = params;
        theta = number(&sub, "rope_theta", false, number(r, "rope_theta", false, 10000.0));
    } else {
        theta = number(r, "rope_theta", false, 10000.0);
    }
    if (sub.failed || r->failed) return MC_ERR;
    if (!(theta > 0)) return refuse(r, "%s: %s must be positive", "rope_theta");
    m->rotary_base = (float)theta;
    m->use_rope_scaling = false;
    if (!scaling) return MC_OK;
    if (!cJSON_IsObject(scaling)) return refuse(r, "%s: \"%s\" must be an object or null", "rope_scaling");
    sub.root = scaling;
    const char *type = string(&sub, "rope_type");
    if (!type) type = string(&sub, "type");
    if (!type || !strcmp(type, "default")) return MC_OK;
    if (strcmp(type, "llama3"))
        return refuse(r, "%s: rope type \"%s\" is not supported (only the default and Llama 3.1's \"llama3\")", type);
    double factor = number(&sub, "factor", true, 0), low = number(&sub, "low_freq_factor", false, 1.0),
           high = number(&sub, "high_freq_factor", false, 4.0),
           orig = number(&sub, "original_max_position_embeddings", false, 8192);
    if (sub.failed) {
        *r->err = *sub.err;
        r->failed = true;
        return MC_ERR;
    }
    if (low != 1.0 || high != 4.0 || orig != 8192)
        return refuse(r, "%s: llama3 rope scaling %s: Megatron-C takes low_freq_factor 1, high_freq_factor 4 and "
                         "original_max_position_embeddings 8192 only (Llama 3.1's)", "with other factors");
    if (!(factor >= 1 && factor <= 1e6)) return refuse(r, "%s: rope scaling %s must be in [1, 1e6]", "factor");
    m->use_rope_scaling = true;
    m->rope_scaling_factor = (float)factor;
    return MC_OK;
}

static int read_gpt2(reader *r, mc_model_config *m) {
    m->num_layers = count(r, "n_layer", true, 0);
    m->hidden_size = count(r, "n_embd", true, 0);
    m->num_attention_heads = count(r, "n_head", true, 0);
    m->max_position_embeddings = count(r, "n_positions", true, 0);
    m->ffn_hidden_size = field(r, "n_inner") ? count(r, "n_inner", true, 0) : 4 * m->hidden_size;
    m->norm_epsilon = (float)number(r, "layer_norm_epsilon", false, 1e-5);
    if (r->failed) return MC_ERR;
    const char *act = string(r, "activation_function");
    if (!act) act = "gelu_new";
    if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) m->openai_gelu = true;
    else if (!strcmp(act, "gelu")) m->openai_gelu = false;
    else return refuse(r, "%s: activation_function \"%s\" is not supported (gelu_new, gelu_pytorch_tanh or gelu)", act);
    if (!boolean(r, "tie_word_embeddings", true))
        return refuse(r, "%s: %s: a GPT-2 model with an untied head is not supported", "tie_word_embeddings false");
    if (!boolean(r, "scale_attn_weights", true) || boolean(r, "scale_attn_by_inverse_layer_idx", false) ||
        boolean(r, "reorder_and_upcast_attn", false))
        return refuse(r, "%s: %s are not supported", "scale_attn_weights false, scale_attn_by_inverse_layer_idx or "
                                                     "reorder_and_upcast_attn");
    m->normalization = MC_NORM_LAYERNORM;
    m->position_embedding_type = MC_POS_LEARNED_ABSOLUTE;
    m->swiglu = false;
    m->add_bias_linear = true;
    m->untie_embeddings_and_output_weights = false;
    m->group_query_attention = false;
    m->num_query_groups = m->num_attention_heads;
    m->kv_channels = 0;
    return r->failed ? MC_ERR : MC_OK;
}

static int read_llama(reader *r, mc_model_config *m, bool mistral) {
    m->num_layers = count(r, "num_hidden_layers", true, 0);
    m->hidden_size = count(r, "hidden_size", true, 0);
    m->ffn_hidden_size = count(r, "intermediate_size", true, 0);
    m->num_attention_heads = count(r, "num_attention_heads", true, 0);
    int groups = count(r, "num_key_value_heads", false, m->num_attention_heads);
    m->max_position_embeddings = count(r, "max_position_embeddings", false, 2048);
    m->norm_epsilon = (float)number(r, "rms_norm_eps", false, 1e-6);
    if (r->failed) return MC_ERR;
    if (m->num_attention_heads % groups)
        return refuse(r, "%s: num_key_value_heads %s must divide num_attention_heads", "");
    int head_dim = field(r, "head_dim") ? count(r, "head_dim", true, 0) : 0;
    if (r->failed) return MC_ERR;
    if (head_dim == 0 && m->hidden_size % m->num_attention_heads)
        return refuse(r, "%s: hidden_size is not divisible by num_attention_heads%s and there is no head_dim", "");
    m->kv_channels = head_dim && head_dim * m->num_attention_heads != m->hidden_size ? head_dim : 0;
    const char *act = string(r, "hidden_act");
    if (act && strcmp(act, "silu"))
        return refuse(r, "%s: hidden_act \"%s\" is not supported (SwiGLU, \"silu\", only)", act);
    bool attn_bias = boolean(r, "attention_bias", false), mlp_bias = boolean(r, "mlp_bias", false);
    if (attn_bias != mlp_bias)
        return refuse(r, "%s: %s: Megatron-C's --disable-bias-linear is one switch for both",
                      "attention_bias and mlp_bias differ");
    if (number(r, "partial_rotary_factor", false, 1.0) != 1.0)
        return refuse(r, "%s: %s is not supported", "a partial_rotary_factor other than 1");
    if (mistral && field(r, "sliding_window"))
        return refuse(r, "%s: %s: sliding-window attention is not supported (Mistral v0.2 and later have none)",
                      "sliding_window is set");
    if (field(r, "use_sliding_window") && boolean(r, "use_sliding_window", false))
        return refuse(r, "%s: %s is not supported", "use_sliding_window");
    if (read_rope(r, m) != MC_OK) return MC_ERR;
    m->normalization = MC_NORM_RMSNORM;
    m->position_embedding_type = MC_POS_ROPE;
    m->rotary_percent = 1.0f;
    m->swiglu = true;
    m->add_bias_linear = attn_bias;
    m->untie_embeddings_and_output_weights = !boolean(r, "tie_word_embeddings", false);
    m->group_query_attention = groups != m->num_attention_heads;
    m->num_query_groups = groups;
    return r->failed ? MC_ERR : MC_OK;
}

static int token_id(const reader *r, const char *key) {
    const cJSON *v = field(r, key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0); /* Llama 3.1 Instruct lists several eos ids */
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e9 ? (int)v->valuedouble : -1;
}

int mc_hf_config_read(const char *path, mc_hf_arch *arch, mc_model_config *m, mc_hf_tokens *tok, mc_err *err) {
    size_t len;
    char *text;
    if (mc_read_file(path, &text, &len, err) != MC_OK) return MC_ERR;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mc_err_set(err, "%s: not a JSON object (a Hugging Face config.json is expected)", path);
    }
    reader r = {.path = path, .root = root, .err = err};
    const char *type = string(&r, "model_type");
    int rc = MC_OK;
    if (!type) {
        rc = mc_err_set(err, "%s: no \"model_type\" (a Hugging Face config.json names its family there)", path);
    } else if (!strcmp(type, "gpt2")) {
        *arch = MC_HF_GPT2;
        rc = read_gpt2(&r, m);
    } else if (!strcmp(type, "llama") || !strcmp(type, "mistral")) {
        *arch = MC_HF_LLAMA;
        rc = read_llama(&r, m, !strcmp(type, "mistral"));
    } else {
        rc = mc_err_set(err, "%s: model_type \"%s\" is not supported (gpt2, llama, mistral)", path, type);
    }
    if (rc == MC_OK) {
        m->vocab_size = count(&r, "vocab_size", true, 0);
        rc = r.failed ? MC_ERR : MC_OK;
    }
    if (rc == MC_OK) {
        tok->bos = token_id(&r, "bos_token_id");
        tok->eos = token_id(&r, "eos_token_id");
        m->attention_dropout = 0.0f;
        m->hidden_dropout = 0.0f;
        double std = number(&r, "initializer_range", false, 0.02);
        if (!r.failed && std > 0) m->init_method_std = (float)std;
        rc = r.failed ? MC_ERR : MC_OK;
    }
    cJSON_Delete(root);
    return rc;
}

int mc_hf_arch_of(const mc_model_config *m, mc_hf_arch *arch, mc_err *err) {
    if (m->normalization == MC_NORM_LAYERNORM && m->position_embedding_type == MC_POS_LEARNED_ABSOLUTE && !m->swiglu) {
        *arch = MC_HF_GPT2;
        return MC_OK;
    }
    if (m->normalization == MC_NORM_RMSNORM && m->position_embedding_type == MC_POS_ROPE && m->swiglu &&
        m->rotary_percent == 1.0f) {
        *arch = MC_HF_LLAMA;
        return MC_OK;
    }
    return mc_err_set(err, "this model has no Hugging Face family: GPT-2 is LayerNorm + learned positions + GELU, "
                           "Llama is RMSNorm + RoPE (rotary percent 1) + SwiGLU");
}

static void add_token(cJSON *o, const char *key, int id) {
    if (id >= 0) cJSON_AddItemToObject(o, key, mc_json_number(id));
    else cJSON_AddNullToObject(o, key);
}

char *mc_hf_config_text(mc_hf_arch arch, const mc_model_config *m, const mc_hf_tokens *tok, const char *dtype) {
    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    int heads = m->num_attention_heads, d = m->kv_channels > 0 ? m->kv_channels : m->hidden_size / heads;
    int ffn = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : m->swiglu ? (int)((4.0 * m->hidden_size * 2.0 / 3.0) / 64) * 64
                                                                      : 4 * m->hidden_size;
    int positions = m->max_position_embeddings > 0 ? m->max_position_embeddings : m->seq_length;
    if (arch == MC_HF_GPT2) {
        cJSON_AddItemToArray(archs, cJSON_CreateString("GPT2LMHeadModel"));
        cJSON_AddStringToObject(o, "model_type", "gpt2");
        cJSON_AddItemToObject(o, "n_layer", mc_json_number(m->num_layers));
        cJSON_AddItemToObject(o, "n_embd", mc_json_number(m->hidden_size));
        cJSON_AddItemToObject(o, "n_head", mc_json_number(heads));
        cJSON_AddItemToObject(o, "n_inner", mc_json_number(ffn));
        cJSON_AddItemToObject(o, "n_positions", mc_json_number(positions));
        cJSON_AddItemToObject(o, "n_ctx", mc_json_number(positions));
        cJSON_AddStringToObject(o, "activation_function", m->openai_gelu ? "gelu_new" : "gelu");
        cJSON_AddItemToObject(o, "layer_norm_epsilon", float_number(m->norm_epsilon));
        cJSON_AddItemToObject(o, "resid_pdrop", float_number(m->hidden_dropout));
        cJSON_AddItemToObject(o, "embd_pdrop", float_number(m->hidden_dropout));
        cJSON_AddItemToObject(o, "attn_pdrop", float_number(m->attention_dropout));
        cJSON_AddTrueToObject(o, "scale_attn_weights");
        cJSON_AddTrueToObject(o, "tie_word_embeddings");
    } else {
        cJSON_AddItemToArray(archs, cJSON_CreateString("LlamaForCausalLM"));
        cJSON_AddStringToObject(o, "model_type", "llama");
        cJSON_AddItemToObject(o, "num_hidden_layers", mc_json_number(m->num_layers));
        cJSON_AddItemToObject(o, "hidden_size", mc_json_number(m->hidden_size));
        cJSON_AddItemToObject(o, "intermediate_size", mc_json_number(ffn));
        cJSON_AddItemToObject(o, "num_attention_heads", mc_json_number(heads));
        cJSON_AddItemToObject(o, "num_key_value_heads",
                              mc_json_number(m->group_query_attention ? m->num_query_groups : heads));
        cJSON_AddItemToObject(o, "head_dim", mc_json_number(d));
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddItemToObject(o, "max_position_embeddings", mc_json_number(positions));
        cJSON_AddItemToObject(o, "rms_norm_eps", float_number(m->norm_epsilon));
        cJSON_AddItemToObject(o, "rope_theta", float_number(m->rotary_base));
        if (m->use_rope_scaling) {
            cJSON *s = cJSON_AddObjectToObject(o, "rope_scaling");
            cJSON_AddStringToObject(s, "rope_type", "llama3");
            cJSON_AddItemToObject(s, "factor", float_number(m->rope_scaling_factor));
            cJSON_AddItemToObject(s, "low_freq_factor", mc_json_number(1.0));
            cJSON_AddItemToObject(s, "high_freq_factor", mc_json_number(4.0));
            cJSON_AddItemToObject(s, "original_max_position_embeddings", mc_json_number(8192));
        } else {
            cJSON_AddNullToObject(o, "rope_scaling");
        }
        cJSON_AddBoolToObject(o, "attention_bias", m->add_bias_linear);
        cJSON_AddBoolToObject(o, "mlp_bias", m->add_bias_linear);
        cJSON_AddItemToObject(o, "attention_dropout", float_number(m->attention_dropout));
        cJSON_AddBoolToObject(o, "tie_word_embeddings", !m->untie_embeddings_and_output_weights);
    }
    cJSON_AddItemToObject(o, "vocab_size", mc_json_number(m->vocab_size));
    cJSON_AddItemToObject(o, "initializer_range", float_number(m->init_method_std));
    add_token(o, "bos_token_id", tok->bos);
    add_token(o, "eos_token_id", tok->eos);
    cJSON_AddStringToObject(o, "torch_dtype", dtype);
    cJSON_AddTrueToObject(o, "use_cache");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

char *mc_hf_generation_config_text(const mc_hf_tokens *tok) {
    cJSON *o = cJSON_CreateObject();
    add_token(o, "bos_token_id", tok->bos);
    add_token(o, "eos_token_id", tok->eos);
    cJSON_AddFalseToObject(o, "do_sample");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}
