/* model_params.c: the parameter table (names, shard shapes, offsets) and its init. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/philox.h"
#include "model/model_internal.h"

#define PARAM_ALIGN 64 /* elements: Megatron pads each param start to 64 for the distributed optimizer */

typedef struct {
    mc_model *m;
    int cap;
} table_builder;

static int add_param(table_builder *tb, const char *name, int ndim, int64_t g0, int64_t g1, mc_tp_split split,
                     mc_init_kind init, float std) {
    mc_model *m = tb->m;
    if (m->nparams == tb->cap) {
        tb->cap = tb->cap ? 2 * tb->cap : 64;
        m->params = mc_xrealloc(m->params, sizeof(mc_param) * (size_t)tb->cap);
    }
    mc_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->global_shape[0] = g0;
    p->global_shape[1] = ndim == 2 ? g1 : 1;
    p->shape[0] = g0;
    p->shape[1] = p->global_shape[1];
    int tp = m->tp;
    switch (split) {
    case MC_TP_REPLICATED: break;
    case MC_TP_ROWS: p->shape[0] = g0 / tp; break;
    case MC_TP_COLS: p->shape[1] = g1 / tp; break;
    case MC_TP_QKV_ROWS: p->shape[0] = m->qkv_local; break;
    case MC_TP_SWIGLU_ROWS: p->shape[0] = m->fc1_local; break;
    }
    p->split = split;
    p->numel = p->shape[0] * p->shape[1];
    p->no_weight_decay = ndim == 1;
    p->init = init;
    p->init_std = std;
    m->numel_unpadded += p->numel;
    return m->nparams++;
}

static int64_t aligned(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

/* Buckets in backward order (from the last parameter), each closed once it holds at least
 * bucket_elems elements; then offsets in forward order with every parameter start 64-aligned
 * and every bucket padded at its high end to a multiple of pad_multiple. */
static void assign_offsets(mc_model *m, const mc_model_layout *layout) {
    int64_t target = layout && layout->bucket_elems > 0 ? layout->bucket_elems : INT64_MAX;
    int64_t pad = layout && layout->pad_multiple > 0 ? layout->pad_multiple : 1;
    int *bucket_of = mc_xmalloc(sizeof(int) * (size_t)m->nparams);
    int nb = 0;
    int64_t fill = 0;
    for (int i = m->nparams - 1; i >= 0; i--) {
        bucket_of[i] = nb;
        fill += aligned(m->params[i].numel, PARAM_ALIGN);
        if (fill >= target && i > 0) {
            nb++;
            fill = 0;
        }
    }
    nb = nb + 1;
    m->nbuckets = nb;
    m->buckets = mc_xcalloc((size_t)nb, sizeof(mc_grad_bucket));
    int64_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        int b = bucket_of[i];
        mc_grad_bucket *bk = &m->buckets[b];
        if (i == 0 || bucket_of[i - 1] != b) { /* the bucket's first parameter (lowest offset) */
            bk->lo = off;
            bk->first_param = i;
        }
        m->params[i].offset = off;
        off += aligned(m->params[i].numel, PARAM_ALIGN);
        bk->last_param = i;
        if (i == m->nparams - 1 || bucket_of[i + 1] != b) {
            off = bk->lo + aligned(off - bk->lo, pad);
            bk->hi = off;
        }
    }
    m->numel = off;
    free(bucket_of);
}

void mc_model_build_table(mc_model *m, const mc_model_layout *layout) {
    const mc_model_config *c = &m->cfg;
    table_builder tb = {.m = m};
    int64_t h = c->hidden_size, d = c->kv_channels, n = c->num_attention_heads, g = c->num_query_groups;
    int64_t f = c->ffn_hidden_size, L = c->num_layers;
    float std = c->init_method_std;
    float out_std = std / sqrtf(2.0f * (float)L);
    bool ln = c->normalization == MC_NORM_LAYERNORM, bias = c->add_bias_linear;
    char name[96];
    m->nparams = 0;
    m->numel = m->numel_unpadded = 0;

    m->emb_w = add_param(&tb, "embedding.word_embeddings.weight", 2, m->padded_vocab, h, MC_TP_ROWS, MC_INIT_NORMAL, std);
    m->pos_w = -1;
    if (c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE)
        m->pos_w = add_param(&tb, "embedding.position_embeddings.weight", 2, c->max_position_embeddings, h,
                             MC_TP_REPLICATED, MC_INIT_NORMAL, std);
    m->layers = mc_xmalloc(sizeof(mc_layer_params) * (size_t)L);
    for (int64_t l = 0; l < L; l++) {
        mc_layer_params *lp = &m->layers[l];
        memset(lp, -1, sizeof *lp);
#define P(field, suffix, ...)                                                    \
    do {                                                                         \
        snprintf(name, sizeof name, "decoder.layers.%lld.%s", (long long)l, suffix); \
        lp->field = add_param(&tb, name, __VA_ARGS__);                           \
    } while (0)
        P(ln1_w, "input_layernorm.weight", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ONES, 0);
        if (ln) P(ln1_b, "input_layernorm.bias", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ZEROS, 0);
        P(qkv_w, "self_attention.linear_qkv.weight", 2, (n + 2 * g) * d, h, MC_TP_QKV_ROWS, MC_INIT_NORMAL, std);
        if (bias) P(qkv_b, "self_attention.linear_qkv.bias", 1, (n + 2 * g) * d, 1, MC_TP_QKV_ROWS, MC_INIT_ZEROS, 0);
        P(proj_w, "self_attention.linear_proj.weight", 2, h, n * d, MC_TP_COLS, MC_INIT_NORMAL, out_std);
        if (bias) P(proj_b, "self_attention.linear_proj.bias", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ZEROS, 0);
        P(ln2_w, "pre_mlp_layernorm.weight", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ONES, 0);
        if (ln) P(ln2_b, "pre_mlp_layernorm.bias", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ZEROS, 0);
        mc_tp_split fc1_split = c->swiglu ? MC_TP_SWIGLU_ROWS : MC_TP_ROWS;
        int64_t fc1_rows = c->swiglu ? 2 * f : f;
        P(fc1_w, "mlp.linear_fc1.weight", 2, fc1_rows, h, fc1_split, MC_INIT_NORMAL, std);
        if (bias) P(fc1_b, "mlp.linear_fc1.bias", 1, fc1_rows, 1, fc1_split, MC_INIT_ZEROS, 0);
        P(fc2_w, "mlp.linear_fc2.weight", 2, h, f, MC_TP_COLS, MC_INIT_NORMAL, out_std);
        if (bias) P(fc2_b, "mlp.linear_fc2.bias", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ZEROS, 0);
#undef P
    }
    m->lnf_w = add_param(&tb, "decoder.final_layernorm.weight", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ONES, 0);
    m->lnf_b = ln ? add_param(&tb, "decoder.final_layernorm.bias", 1, h, 1, MC_TP_REPLICATED, MC_INIT_ZEROS, 0) : -1;
    m->out_w = c->untie_embeddings_and_output_weights
                   ? add_param(&tb, "output_layer.weight", 2, m->padded_vocab, h, MC_TP_ROWS, MC_INIT_NORMAL, std)
                   : m->emb_w;
    /* model_forward.c's layer_bwd writes these through linear_bwd; the bias gradients the
     * norm backward sums into (mc_model_bias_by_norm's projection and fc2 biases) and the
     * attention backward sums into (mc_model_qkv_bias_by_attention's) accumulate from zero
     * instead */
    const bool out_b_summed = mc_model_bias_by_norm(m), qkv_b_summed = mc_model_qkv_bias_by_attention(m);
    for (int64_t l = 0; l < L; l++) {
        const mc_layer_params *lp = &m->layers[l];
        const int linear[] = {lp->qkv_w,
                              qkv_b_summed ? -1 : lp->qkv_b,
                              lp->proj_w,
                              out_b_summed ? -1 : lp->proj_b,
                              lp->fc1_w,
                              lp->fc1_b,
                              lp->fc2_w,
                              out_b_summed ? -1 : lp->fc2_b};
        for (size_t k = 0; k < sizeof linear / sizeof linear[0]; k++)
            if (linear[k] >= 0) m->params[linear[k]].grad_overwritten = true;
    }
    if (m->out_w != m->emb_w) m->params[m->out_w].grad_overwritten = true; /* tied: the embedding's backward adds */
    for (int i = 0; i < m->nparams; i++) {
        mc_param *p = &m->params[i];
        bool norm = strstr(p->name, "layernorm") != NULL;
        if (m->sp && (norm || i == m->pos_w)) p->sync = MC_SYNC_TP;
        if (p->split == MC_TP_QKV_ROWS && c->num_query_groups < m->tp) p->sync = MC_SYNC_TP_KV_ROWS;
    }
    assign_offsets(m, layout);
}

/* Global row of local row r of a QKV shard. Per-group layout: group j owns rows
 * [j*(hpg+2)*d, (j+1)*(hpg+2)*d) = its hpg query heads, its key head, its value head. */
static int64_t qkv_global_row(const mc_model *m, int tp_rank, int64_t r) {
    const mc_model_config *c = &m->cfg;
    int64_t d = c->kv_channels, n = c->num_attention_heads, g = c->num_query_groups;
    int64_t hpg = n / g;
    if (g >= m->tp) /* whole groups per rank: a contiguous block */
        return (int64_t)tp_rank * m->qkv_local + r;
    /* groups < TP: this rank has heads_local query heads of group j, plus j's k and v. */
    int64_t hl = m->heads_local;
    int64_t first_head = (int64_t)tp_rank * hl;
    int64_t j = first_head / hpg;
    int64_t base = j * (hpg + 2) * d;
    int64_t head_in_local = r / d, k = r % d;
    if (head_in_local < hl) return base + (first_head - j * hpg + head_in_local) * d + k;
    return base + (hpg + (head_in_local - hl)) * d + k; /* key (hl) or value (hl + 1) */
}

void mc_model_local_to_global(const mc_model *m, const mc_param *p, int64_t row, int64_t col, int64_t *grow,
                              int64_t *gcol) {
    mc_model_local_to_global_on(m, p, m->tp_rank, row, col, grow, gcol);
}

void mc_model_local_to_global_on(const mc_model *m, const mc_param *p, int tp_rank, int64_t row, int64_t col,
                                 int64_t *grow, int64_t *gcol) {
    *grow = row;
    *gcol = col;
    switch (p->split) {
    case MC_TP_REPLICATED: break;
    case MC_TP_ROWS: *grow = (int64_t)tp_rank * p->shape[0] + row; break;
    case MC_TP_COLS: *gcol = (int64_t)tp_rank * p->shape[1] + col; break;
    case MC_TP_QKV_ROWS: *grow = qkv_global_row(m, tp_rank, row); break;
    case MC_TP_SWIGLU_ROWS: {
        int64_t fl = m->ffn_local, f = m->cfg.ffn_hidden_size;
        *grow = row < fl ? (int64_t)tp_rank * fl + row : f + (int64_t)tp_rank * fl + (row - fl);
        break;
    }
    }
}

int64_t mc_model_unique_prefix(const mc_model *m, const mc_param *p) {
    if (p->split == MC_TP_REPLICATED) return m->tp_rank == 0 ? p->numel : 0;
    int g = m->cfg.num_query_groups;
    if (p->split == MC_TP_QKV_ROWS && g < m->tp && m->tp_rank % (m->tp / g) != 0) {
        int64_t q_rows = (int64_t)m->heads_local * m->cfg.kv_channels;
        return q_rows * p->shape[1]; /* the query heads are this rank's own; k and v repeat */
    }
    return p->numel;
}

void mc_model_init_params(mc_model *m, uint64_t seed) {
    mc_backend *be = m->be;
    be->zero(be, m->param_buf, (size_t)m->numel * mc_dtype_size(m->param_dtype));
    int64_t max_rows = 1;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].shape[0] > max_rows) max_rows = m->params[i].shape[0];
    int64_t *row_index = mc_xmalloc(sizeof(int64_t) * (size_t)max_rows);
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        mc_tensor v = mc_model_param(m, i);
        if (p->init == MC_INIT_ONES) mc_op_fill(be, &v, 1.0);
        if (p->init != MC_INIT_NORMAL) continue;
        /* Global (row, col) of every local element: row_index[r] * global_cols + col0 + c. */
        int64_t col0, unused;
        mc_model_local_to_global(m, p, 0, 0, &unused, &col0);
        for (int64_t r = 0; r < p->shape[0]; r++) mc_model_local_to_global(m, p, r, 0, &row_index[r], &unused);
        /* Vocabulary padding rows are random too, like Megatron's (they are real parameters). */
        mc_op_init_normal(be, &v, seed, mc_stream_of_name(p->name), p->init_std, row_index, p->global_shape[1], col0);
    }
    free(row_index);
}

int mc_model_find_param(const mc_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return i;
    return -1;
}

static mc_tensor view_of(const mc_param *p, void *buf, mc_dtype dt) {
    char *base = (char *)buf + (size_t)p->offset * mc_dtype_size(dt);
    return p->ndim == 2 ? mc_tensor_2d(base, dt, p->shape[0], p->shape[1]) : mc_tensor_1d(base, dt, p->shape[0]);
}

mc_tensor mc_model_param(const mc_model *m, int idx) {
    if (idx < 0) return mc_tensor_none();
    return view_of(&m->params[idx], m->param_buf, m->param_dtype);
}

mc_tensor mc_model_grad(const mc_model *m, int idx) {
    if (idx < 0) return mc_tensor_none();
    return view_of(&m->params[idx], m->grad_buf, m->grad_dtype);
}

int64_t mc_model_num_params_global(const mc_model *m) {
    int64_t total = 0;
    for (int i = 0; i < m->nparams; i++) total += m->params[i].global_shape[0] * m->params[i].global_shape[1];
    return total;
}
