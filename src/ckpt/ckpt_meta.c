/* ckpt_meta.c: metadata.json. The ranks describe their own files (rank-N.json beside the
 * file), world rank 0 merges the descriptions with the common part; readers validate
 * every field before trusting it. */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "base/file.h"

void mc_ckpt_iter_name(int64_t iteration, char out[32]) { snprintf(out, 32, "iter_%07lld", (long long)iteration); }

void mc_ckpt_file_name(int rank, int world, char *out, size_t cap) {
    snprintf(out, cap, "rank-%05d-of-%05d.safetensors", rank, world);
}

void mc_ckpt_crc_hex(uint32_t crc, char out[9]) { snprintf(out, 9, "%08x", crc); }

bool mc_ckpt_crc_parse(const char *s, uint32_t *crc) {
    if (!s || strlen(s) != 8) return false;
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    if (*end) return false;
    *crc = (uint32_t)v;
    return true;
}

/* ---- agreement ---- */

int mc_ckpt_agree(mc_comm *c, int rc, mc_err *err) {
    double first = rc == MC_OK ? (double)c->world_size : (double)c->rank;
    mc_comm_all_reduce_host_f64(&c->world, &first, 1, MC_REDUCE_MIN);
    if (first >= c->world_size) return MC_OK;
    /* The failing rank's message, to every rank. */
    mc_backend *host = mc_backend_cpu_create();
    int32_t buf[sizeof err->msg / 4];
    memset(buf, 0, sizeof buf);
    if (c->rank == (int)first) memcpy(buf, err->msg, sizeof buf);
    mc_tensor t = mc_tensor_1d(buf, MC_I32, (int64_t)(sizeof buf / 4));
    mc_comm_broadcast(&c->world, host, &t, (int)first);
    host->destroy(host);
    memcpy(err->msg, buf, sizeof err->msg);
    err->msg[sizeof err->msg - 1] = 0;
    return MC_ERR;
}

/* ---- the model config ---- */

typedef enum { F_INT, F_FLOAT, F_BOOL, F_NORM, F_POS } field_type;
typedef struct cfg_field {
    const char *key, *flag;
    field_type type;
    size_t off;    /* in mc_model_config */
    bool compared; /* part of the model's definition: must match on load */
} cfg_field;

#define MF(field) offsetof(mc_model_config, field)
static const cfg_field k_model_fields[] = {
    {"num_layers", "--num-layers", F_INT, MF(num_layers), true},
    {"hidden_size", "--hidden-size", F_INT, MF(hidden_size), true},
    {"ffn_hidden_size", "--ffn-hidden-size", F_INT, MF(ffn_hidden_size), true},
    {"num_attention_heads", "--num-attention-heads", F_INT, MF(num_attention_heads), true},
    {"num_query_groups", "--num-query-groups", F_INT, MF(num_query_groups), true},
    {"kv_channels", "--kv-channels", F_INT, MF(kv_channels), true},
    {"max_position_embeddings", "--max-position-embeddings", F_INT, MF(max_position_embeddings), true},
    {"normalization", "--normalization", F_NORM, MF(normalization), true},
    {"norm_epsilon", "--norm-epsilon", F_FLOAT, MF(norm_epsilon), true},
    {"position_embedding_type", "--position-embedding-type", F_POS, MF(position_embedding_type), true},
    {"rotary_base", "--rotary-base", F_FLOAT, MF(rotary_base), true},
    {"rotary_percent", "--rotary-percent", F_FLOAT, MF(rotary_percent), true},
    {"use_rope_scaling", "--use-rope-scaling", F_BOOL, MF(use_rope_scaling), true},
    {"rope_scaling_factor", "--rope-scaling-factor", F_FLOAT, MF(rope_scaling_factor), true},
    {"swiglu", "--swiglu", F_BOOL, MF(swiglu), true},
    {"openai_gelu", "--openai-gelu", F_BOOL, MF(openai_gelu), true},
    {"untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", F_BOOL,
     MF(untie_embeddings_and_output_weights), true},
    {"add_bias_linear", "--disable-bias-linear", F_BOOL, MF(add_bias_linear), true},
    {"vocab_size", "--vocab-size (or the tokenizer's vocabulary)", F_INT, MF(vocab_size), true},
    {"make_vocab_size_divisible_by", "--make-vocab-size-divisible-by", F_INT, MF(make_vocab_size_divisible_by), false},
    {"seq_length", "--seq-length", F_INT, MF(seq_length), false},
    {"init_method_std", "--init-method-std", F_FLOAT, MF(init_method_std), false},
    {"attention_dropout", "--attention-dropout", F_FLOAT, MF(attention_dropout), false},
    {"hidden_dropout", "--hidden-dropout", F_FLOAT, MF(hidden_dropout), false},
};
#define NMODEL_FIELDS ((int)(sizeof k_model_fields / sizeof k_model_fields[0]))

static const char *const k_norm_names[] = {"LayerNorm", "RMSNorm"};
static const char *const k_pos_names[] = {"learned_absolute", "rope", "none"};

/* Fields that do not matter for this model (no learned positions, no rope scaling). */
static bool field_applies(const cfg_field *f, const mc_model_config *m) {
    if (!strcmp(f->key, "max_position_embeddings")) return m->position_embedding_type == MC_POS_LEARNED_ABSOLUTE;
    if (!strcmp(f->key, "rotary_base") || !strcmp(f->key, "rotary_percent") || !strcmp(f->key, "use_rope_scaling"))
        return m->position_embedding_type == MC_POS_ROPE;
    if (!strcmp(f->key, "rope_scaling_factor")) return m->position_embedding_type == MC_POS_ROPE && m->use_rope_scaling;
    if (!strcmp(f->key, "openai_gelu")) return !m->swiglu;
    return true;
}

/* The field's value; `exact`: printed with every digit (for writing), else a plain number
 * (for comparing with a parsed one). */
static cJSON *field_json(const cfg_field *f, const mc_model_config *m, bool exact) {
    const char *p = (const char *)m + f->off;
    switch (f->type) {
    case F_INT: return exact ? mc_json_number(*(const int *)p) : cJSON_CreateNumber(*(const int *)p);
    case F_FLOAT: return exact ? mc_json_number(*(const float *)p) : cJSON_CreateNumber(*(const float *)p);
    case F_BOOL: return cJSON_CreateBool(*(const bool *)p);
    case F_NORM: return cJSON_CreateString(k_norm_names[*(const int *)p]);
    case F_POS: return cJSON_CreateString(k_pos_names[*(const int *)p]);
    }
    return cJSON_CreateNull();
}

static void field_text(const cJSON *v, char *out, size_t cap) {
    if (cJSON_IsString(v)) snprintf(out, cap, "%s", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(out, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) snprintf(out, cap, "%.9g", v->valuedouble);
    else snprintf(out, cap, "(missing)");
}

cJSON *mc_ckpt_config_json(const mc_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NMODEL_FIELDS; i++) cJSON_AddItemToObject(o, k_model_fields[i].key, field_json(&k_model_fields[i], &cfg->model, true));
    return o;
}

int mc_ckpt_config_check(const cJSON *stored, const mc_config *cfg, const char *what, mc_err *err) {
    if (!cJSON_IsObject(stored)) return mc_err_set(err, "%s: metadata.json has no model config", what);
    for (int i = 0; i < NMODEL_FIELDS; i++) {
        const cfg_field *f = &k_model_fields[i];
        if (!f->compared || !field_applies(f, &cfg->model)) continue;
        const cJSON *have = cJSON_GetObjectItemCaseSensitive(stored, f->key);
        cJSON *want = field_json(f, &cfg->model, false);
        bool same = have && cJSON_Compare(have, want, true);
        if (!same && cJSON_IsNumber(have) && cJSON_IsNumber(want)) same = have->valuedouble == want->valuedouble;
        if (!same) {
            char a[64], b[64];
            field_text(have, a, sizeof a);
            field_text(want, b, sizeof b);
            cJSON_Delete(want);
            return mc_err_set(err, "%s: the checkpoint's model differs from the flags: %s is %s in the checkpoint and "
                                   "%s here (the model's %s)",
                              what, f->flag, a, b, f->key);
        }
        cJSON_Delete(want);
    }
    return MC_OK;
}

int mc_ckpt_config_parse(const cJSON *stored, mc_model_config *m, const char *what, mc_err *err) {
    if (!cJSON_IsObject(stored)) return mc_err_set(err, "%s: metadata.json has no model config", what);
    for (int i = 0; i < NMODEL_FIELDS; i++) {
        const cfg_field *f = &k_model_fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(stored, f->key);
        char *p = (char *)m + f->off;
        bool ok = false;
        switch (f->type) {
        case F_INT:
            ok = cJSON_IsNumber(v) && v->valuedouble == (int)v->valuedouble;
            if (ok) *(int *)p = (int)v->valuedouble;
            break;
        case F_FLOAT:
            ok = cJSON_IsNumber(v);
            if (ok) *(float *)p = (float)v->valuedouble;
            break;
        case F_BOOL:
            ok = cJSON_IsBool(v);
            if (ok) *(bool *)p = cJSON_IsTrue(v);
            break;
        case F_NORM:
        case F_POS: {
            const char *const *names = f->type == F_NORM ? k_norm_names : k_pos_names;
            int n = f->type == F_NORM ? 2 : 3;
            for (int k = 0; k < n && cJSON_IsString(v); k++)
                if (!strcmp(v->valuestring, names[k])) {
                    *(int *)p = k;
                    ok = true;
                }
            break;
        }
        }
        /* fields that do not apply to this model may be absent or null */
        if (!ok && !(cJSON_IsNull(v) || !v))
            return mc_err_set(err, "%s: metadata.json's model field %s has a wrong type or value", what, f->key);
        if (!ok && f->compared && field_applies(f, m))
            return mc_err_set(err, "%s: metadata.json's model config has no %s", what, f->key);
    }
    m->group_query_attention = m->num_query_groups != m->num_attention_heads;
    return MC_OK;
}

/* ---- the LR scheduler ---- */

typedef struct sched_field {
    const char *key, *what, *flag; /* Megatron's state_dict key and message name, our flag */
    bool is_int;                   /* an enum stored as a number */
    size_t off;                    /* in mc_lr_schedule */
} sched_field;

#define SF(field) offsetof(mc_lr_schedule, field)
static const sched_field k_sched_fields[] = {
    {"max_lr", "learning rate", "--lr", false, SF(max_lr)},
    {"min_lr", "minimum learning rate", "--min-lr", false, SF(min_lr)},
    {"init_lr", "warmup initial learning rate", "--lr-warmup-init", false, SF(init_lr)},
    {"lr_warmup_steps", "warmup steps (samples)", "--lr-warmup-iters/-samples/-fraction", false, SF(warmup_steps)},
    {"lr_decay_steps", "decay steps (samples)", "--lr-decay-iters/-samples, --train-iters/-samples", false,
     SF(decay_steps)},
    {"lr_decay_style", "learning rate decay style", "--lr-decay-style", true, SF(style)},
    {"lr_wsd_decay_steps", "WSD decay steps (samples)", "--lr-wsd-decay-iters/-samples", false, SF(wsd_decay_steps)},
    {"lr_wsd_decay_style", "WSD decay style", "--lr-wsd-decay-style", true, SF(wsd_style)},
    {"start_wd", "start weight decay", "--start-weight-decay/--weight-decay", false, SF(start_wd)},
    {"end_wd", "end weight decay", "--end-weight-decay/--weight-decay", false, SF(end_wd)},
    {"wd_incr_steps", "total number of weight decay steps", "--train-iters/-samples", false, SF(wd_incr_steps)},
    {"wd_incr_style", "weight decay incr style", "--weight-decay-incr-style", true, SF(wd_incr_style)},
};
#define NSCHED_FIELDS ((int)(sizeof k_sched_fields / sizeof k_sched_fields[0]))

static double sched_get(const mc_lr_schedule *s, const sched_field *f) {
    const char *p = (const char *)s + f->off;
    return f->is_int ? (double)*(const int *)p : *(const double *)p;
}

static void sched_set(mc_lr_schedule *s, const sched_field *f, double v) {
    char *p = (char *)s + f->off;
    if (f->is_int) *(int *)p = (int)v;
    else *(double *)p = v;
}

cJSON *mc_ckpt_sched_json(const mc_lr_schedule *s, int64_t num_steps) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NSCHED_FIELDS; i++) cJSON_AddItemToObject(o, k_sched_fields[i].key, mc_json_number(sched_get(s, &k_sched_fields[i])));
    cJSON_AddItemToObject(o, "num_steps", mc_json_number((double)num_steps));
    return o;
}

int mc_ckpt_sched_restore(const cJSON *stored, mc_lr_schedule *s, mc_ckpt_sched_policy policy, const char *what,
                          mc_err *err) {
    if (policy == MC_CKPT_SCHED_OVERRIDE) return MC_OK;
    if (!cJSON_IsObject(stored)) return mc_err_set(err, "%s: metadata.json has no opt_param_scheduler", what);
    mc_lr_schedule from_ckpt = *s;
    for (int i = 0; i < NSCHED_FIELDS; i++) {
        const sched_field *f = &k_sched_fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(stored, f->key);
        if (!cJSON_IsNumber(v)) return mc_err_set(err, "%s: metadata.json: opt_param_scheduler.%s is missing", what, f->key);
        if (policy == MC_CKPT_SCHED_CHECK && v->valuedouble != sched_get(s, f))
            return mc_err_set(err, "%s: the optimizer parameter scheduler differs: %s is %.9g in the checkpoint and %.9g "
                                   "from the flags (%s); pass --override-opt_param-scheduler to use the flags' values or "
                                   "--use-checkpoint-opt_param-scheduler to use the checkpoint's",
                              what, f->what, v->valuedouble, sched_get(s, f), f->flag);
        sched_set(&from_ckpt, f, v->valuedouble);
    }
    *s = from_ckpt;
    return MC_OK;
}

/* ---- merging the ranks' descriptions ---- */

cJSON *mc_ckpt_meta_merge(cJSON *common, cJSON **ranks, int nranks, mc_err *err) {
    cJSON *files = cJSON_AddArrayToObject(common, "files");
    cJSON *tensors = cJSON_AddObjectToObject(common, "tensors");
    cJSON *rng = cJSON_GetObjectItemCaseSensitive(common, "rng");
    cJSON *rng_ranks = rng ? cJSON_AddArrayToObject(rng, "ranks") : NULL;
    for (int r = 0; r < nranks; r++) {
        cJSON *d = ranks[r];
        cJSON *f = cJSON_CreateObject();
        const char *keys[] = {"name", "bytes", "crc32c", "block_bytes", "block_crc32c"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(d, keys[k]);
            if (!v) {
                cJSON_Delete(f);
                mc_err_set(err, "rank %d's description has no '%s'", r, keys[k]);
                return NULL;
            }
            cJSON_AddItemToObject(f, keys[k], cJSON_Duplicate(v, true));
        }
        cJSON_AddItemToArray(files, f);
        if (rng_ranks) {
            cJSON *rr = cJSON_GetObjectItemCaseSensitive(d, "rng");
            if (rr) cJSON_AddItemToArray(rng_ranks, cJSON_Duplicate(rr, true));
        }
        cJSON *shapes = cJSON_GetObjectItemCaseSensitive(d, "tensors"), *t;
        cJSON_ArrayForEach(t, shapes) {
            cJSON *have = cJSON_GetObjectItemCaseSensitive(tensors, t->string);
            cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
            if (!have) {
                have = cJSON_AddObjectToObject(tensors, t->string);
                cJSON_AddStringToObject(have, "dtype", "F32");
                cJSON_AddItemToObject(have, "shape", cJSON_Duplicate(shape, true));
                cJSON_AddArrayToObject(have, "pieces");
            } else if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(have, "shape"), shape, true)) {
                mc_err_set(err, "tensor %s has different global shapes on different ranks", t->string);
                return NULL;
            }
        }
        cJSON *pieces = cJSON_GetObjectItemCaseSensitive(d, "pieces"), *p;
        cJSON_ArrayForEach(p, pieces) {
            /* [name, key, offset, shape, data_offsets] */
            cJSON *name = cJSON_GetArrayItem(p, 0);
            cJSON *tensor = cJSON_GetObjectItemCaseSensitive(tensors, name ? name->valuestring : "");
            if (!tensor) {
                mc_err_set(err, "rank %d describes a piece of an undeclared tensor", r);
                return NULL;
            }
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToObject(e, "file", mc_json_number(r));
            cJSON_AddItemToObject(e, "key", cJSON_Duplicate(cJSON_GetArrayItem(p, 1), true));
            cJSON_AddItemToObject(e, "offset", cJSON_Duplicate(cJSON_GetArrayItem(p, 2), true));
            cJSON_AddItemToObject(e, "shape", cJSON_Duplicate(cJSON_GetArrayItem(p, 3), true));
            cJSON_AddItemToObject(e, "data_offsets", cJSON_Duplicate(cJSON_GetArrayItem(p, 4), true));
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(tensor, "pieces"), e);
        }
    }
    return common;
}

/* ---- reading ---- */

typedef struct reader {
    const char *path; /* for messages */
    mc_err *err;
    int failed;
} reader;

static int bad(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(reader *r, const char *fmt, ...) {
    if (r->failed) return MC_ERR;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mc_err_set(r->err, "%s: %s", r->path, msg);
    r->failed = 1;
    return MC_ERR;
}

/* An integer field in [lo, hi]. */
static int get_i64(reader *r, const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return bad(r, "'%s' is missing or not a number", key);
    double d = v->valuedouble;
    if (d != floor(d) || d < (double)lo || d > (double)hi) return bad(r, "'%s' is %.17g, not an integer in [%lld, %lld]", key, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return MC_OK;
}

/* An array of n integers >= lo (n = 0: 1 or 2 of them, returned in *n_out). */
static int get_dims(reader *r, const cJSON *a, const char *what, int64_t lo, int64_t out[2], int *n_out) {
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1 || n > 2) return bad(r, "%s is not a list of 1 or 2 integers", what);
    out[1] = lo == 0 ? 0 : 1;
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
            v->valuedouble > 9.0e15)
            return bad(r, "%s has a bad entry", what);
        out[i] = (int64_t)v->valuedouble;
    }
    *n_out = n;
    return MC_OK;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const mc_ckpt_tensor_meta *)a)->name, ((const mc_ckpt_tensor_meta *)b)->name);
}

static int cmp_piece_row(const void *a, const void *b) {
    const mc_ckpt_piece_meta *x = a, *y = b;
    return x->row < y->row ? -1 : x->row > y->row ? 1 : x->col < y->col ? -1 : x->col > y->col;
}

/* The pieces tile the tensor: inside it, no two overlapping, their areas adding up. */
static int check_tiling(reader *r, mc_ckpt_tensor_meta *t) {
    mc_ckpt_piece_meta *p = mc_xmalloc(sizeof *p * (size_t)(t->npieces ? t->npieces : 1));
    memcpy(p, t->pieces, sizeof *p * (size_t)t->npieces);
    qsort(p, (size_t)t->npieces, sizeof *p, cmp_piece_row);
    double area = 0;
    int rc = MC_OK;
    for (int i = 0; i < t->npieces && rc == MC_OK; i++) {
        area += (double)p[i].rows * (double)p[i].cols;
        for (int j = i + 1; j < t->npieces && p[j].row < p[i].row + p[i].rows; j++)
            if (p[j].col < p[i].col + p[i].cols && p[i].col < p[j].col + p[j].cols)
                rc = bad(r, "tensor %s: pieces %s and %s overlap", t->name, p[i].key, p[j].key);
    }
    if (rc == MC_OK && area != (double)t->shape[0] * (double)t->shape[1])
        rc = bad(r, "tensor %s: its pieces cover %.0f of its %lld elements", t->name, area,
                 (long long)(t->shape[0] * t->shape[1]));
    free(p);
    return rc;
}

static int read_files(reader *r, mc_ckpt_meta *m) {
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m->root, "files");
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1) return bad(r, "'files' is missing or empty");
    m->nfiles = cJSON_GetArraySize(files);
    m->files = mc_xcalloc((size_t)m->nfiles, sizeof *m->files);
    for (int i = 0; i < m->nfiles; i++) {
        const cJSON *f = cJSON_GetArrayItem(files, i);
        mc_ckpt_file_meta *fm = &m->files[i];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name) || strchr(name->valuestring, '/') || !strcmp(name->valuestring, "..") ||
            !name->valuestring[0])
            return bad(r, "files[%d] has no valid name", i);
        fm->name = mc_xstrdup(name->valuestring);
        MC_TRY(get_i64(r, f, "bytes", 8, INT64_MAX / 2, &fm->bytes));
        MC_TRY(get_i64(r, f, "block_bytes", 64, INT64_MAX / 2, &fm->block_bytes));
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32c");
        if (!mc_ckpt_crc_parse(cJSON_GetStringValue(crc), &fm->crc)) return bad(r, "files[%d] (%s): bad crc32c", i, fm->name);
        const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(f, "block_crc32c");
        fm->nblocks = (fm->bytes + fm->block_bytes - 1) / fm->block_bytes;
        if (!cJSON_IsArray(blocks) || cJSON_GetArraySize(blocks) != fm->nblocks)
            return bad(r, "files[%d] (%s): block_crc32c should list %lld checksums", i, fm->name, (long long)fm->nblocks);
        fm->block_crc = mc_xmalloc(sizeof(uint32_t) * (size_t)fm->nblocks);
        for (int64_t b = 0; b < fm->nblocks; b++)
            if (!mc_ckpt_crc_parse(cJSON_GetStringValue(cJSON_GetArrayItem(blocks, (int)b)), &fm->block_crc[b]))
                return bad(r, "files[%d] (%s): bad block checksum %lld", i, fm->name, (long long)b);
        /* present, with its recorded size: a truncated or missing shard is found here */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", m->dir, fm->name);
        struct stat st;
        if (stat(path, &st) != 0) {
            r->failed = 1;
            return mc_err_set(r->err, "%s is missing (%s)", path, strerror(errno));
        }
        if ((int64_t)st.st_size != fm->bytes) {
            r->failed = 1;
            return mc_err_set(r->err, "%s has %lld bytes, %s records %lld (truncated or overwritten)", path,
                              (long long)st.st_size, MC_CKPT_METADATA, (long long)fm->bytes);
        }
    }
    return MC_OK;
}

static int read_tensors(reader *r, mc_ckpt_meta *m) {
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(m->root, "tensors");
    if (!cJSON_IsObject(tensors)) return bad(r, "'tensors' is missing");
    m->ntensors = cJSON_GetArraySize(tensors);
    m->tensors = mc_xcalloc((size_t)(m->ntensors ? m->ntensors : 1), sizeof *m->tensors);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        mc_ckpt_tensor_meta *tm = &m->tensors[i++];
        tm->name = mc_xstrdup(t->string);
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32"))
            return bad(r, "tensor %s: dtype should be F32", tm->name);
        MC_TRY(get_dims(r, cJSON_GetObjectItemCaseSensitive(t, "shape"), "a tensor's shape", 1, tm->shape, &tm->ndim));
        const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(t, "pieces");
        if (!cJSON_IsArray(pieces)) return bad(r, "tensor %s has no pieces", tm->name);
        tm->npieces = cJSON_GetArraySize(pieces);
        tm->pieces = mc_xcalloc((size_t)(tm->npieces ? tm->npieces : 1), sizeof *tm->pieces);
        for (int k = 0; k < tm->npieces; k++) {
            const cJSON *p = cJSON_GetArrayItem(pieces, k);
            mc_ckpt_piece_meta *pm = &tm->pieces[k];
            int64_t file = 0, off[2], shape[2], span[2];
            int n_off, n_shape, n_span;
            MC_TRY(get_i64(r, p, "file", 0, m->nfiles - 1, &file));
            pm->file = (int)file;
            const cJSON *key = cJSON_GetObjectItemCaseSensitive(p, "key");
            if (!cJSON_IsString(key)) return bad(r, "tensor %s piece %d has no key", tm->name, k);
            pm->key = mc_xstrdup(key->valuestring);
            MC_TRY(get_dims(r, cJSON_GetObjectItemCaseSensitive(p, "offset"), "a piece's offset", 0, off, &n_off));
            MC_TRY(get_dims(r, cJSON_GetObjectItemCaseSensitive(p, "shape"), "a piece's shape", 1, shape, &n_shape));
            MC_TRY(get_dims(r, cJSON_GetObjectItemCaseSensitive(p, "data_offsets"), "a piece's data_offsets", 0, span,
                            &n_span));
            if (n_off != tm->ndim || n_shape != tm->ndim || n_span != 2)
                return bad(r, "tensor %s piece %s: offset and shape should have %d entries", tm->name, pm->key, tm->ndim);
            pm->row = off[0];
            pm->col = tm->ndim == 2 ? off[1] : 0;
            pm->rows = shape[0];
            pm->cols = tm->ndim == 2 ? shape[1] : 1;
            pm->begin = span[0];
            pm->end = span[1];
            if (pm->row + pm->rows > tm->shape[0] || pm->col + pm->cols > tm->shape[1])
                return bad(r, "tensor %s piece %s lies outside the tensor", tm->name, pm->key);
            if (pm->end - pm->begin != pm->rows * pm->cols * 4 || pm->begin < 8 || pm->end > m->files[pm->file].bytes)
                return bad(r, "tensor %s piece %s: data_offsets [%lld, %lld) do not fit its shape or %s", tm->name,
                           pm->key, (long long)pm->begin, (long long)pm->end, m->files[pm->file].name);
        }
        MC_TRY(check_tiling(r, tm));
    }
    qsort(m->tensors, (size_t)m->ntensors, sizeof *m->tensors, cmp_tensor);
    for (int k = 1; k < m->ntensors; k++)
        if (!strcmp(m->tensors[k].name, m->tensors[k - 1].name)) return bad(r, "tensor %s is listed twice", m->tensors[k].name);
    return MC_OK;
}

int mc_ckpt_meta_read(const char *dir, mc_ckpt_meta *m, mc_err *err) {
    memset(m, 0, sizeof *m);
    m->dir = mc_xstrdup(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MC_CKPT_METADATA);
    reader r = {.path = path, .err = err};
    char *text;
    size_t n;
    if (mc_read_file(path, &text, &n, err) != MC_OK) return MC_ERR;
    m->root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(m->root)) return bad(&r, "not valid JSON (cut short or overwritten?)");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(m->root, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, MC_CKPT_FORMAT))
        return bad(&r, "not a Megatron-C checkpoint (no \"format\": \"%s\")", MC_CKPT_FORMAT);
    int64_t version = 0;
    MC_TRY(get_i64(&r, m->root, "version", 1, 1000000, &version));
    if (version > MC_CKPT_VERSION)
        return bad(&r, "format version %lld is newer than this megatron-c reads (%d)", (long long)version, MC_CKPT_VERSION);
    MC_TRY(get_i64(&r, m->root, "iteration", 0, INT64_MAX / 2, &m->iteration));
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(m->root, "optimizer");
    m->has_optim = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(opt, "saved"));
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(m->root, "rng");
    m->has_rng = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rng, "saved"));
    MC_TRY(read_files(&r, m));
    MC_TRY(read_tensors(&r, m));
    return MC_OK;
}

void mc_ckpt_meta_free(mc_ckpt_meta *m) {
    for (int i = 0; i < m->nfiles; i++) {
        free(m->files[i].name);
        free(m->files[i].block_crc);
    }
    free(m->files);
    for (int i = 0; i < m->ntensors; i++) {
        for (int k = 0; k < m->tensors[i].npieces; k++) free(m->tensors[i].pieces[k].key);
        free(m->tensors[i].pieces);
        free(m->tensors[i].name);
    }
    free(m->tensors);
    cJSON_Delete(m->root);
    free(m->dir);
    memset(m, 0, sizeof *m);
}

const mc_ckpt_tensor_meta *mc_ckpt_meta_find(const mc_ckpt_meta *m, const char *name) {
    mc_ckpt_tensor_meta key = {.name = (char *)name};
    return bsearch(&key, m->tensors, (size_t)m->ntensors, sizeof key, cmp_tensor);
}
