/* model_forward.c: forward and backward of the decoder for one micro-batch.
 *
 * Per layer (Megatron's pre-norm block; tensor-parallel collectives on the tp group):
 *   y1 = norm1(x); qkv = y1 Wqkv^T (+b) [column-parallel]; rope(q, k); att = attention(qkv)
 *   t = att Wproj^T [row-parallel] (+b); x_mid = x + dropout(t)
 *   y2 = norm2(x_mid); fc1 = y2 W1^T (+b); act = gelu(fc1) | swiglu(fc1)
 *   (with the tanh GELU, fc1 and act come from one op, linear_gelu_fwd, and backward's
 *   fc2 input gradient and GELU backward from linear_dgelu_bwd; fc1's bias gradient then
 *   comes with its weight gradient, which a backend can fuse too, cuBLASLt's BGRAD
 *   epilogues refusing an F32 bias gradient next to DGELU on the H200)
 *   t = act W2^T [row-parallel] (+b); x_out = x_mid + dropout(t)
 * The projection's and fc2's bias gradients are the column sums of the residual stream's
 * gradient where that is their output gradient (mc_model_bias_by_norm): the norm backward
 * that updates the stream sums them as it writes it. QKV's is dqkv's column sums, summed
 * by the attention backward that writes dqkv when no RoPE follows it there
 * (mc_model_qkv_bias_by_attention).
 * Row-parallel biases are added by TP rank 0 only, before the reduction, so the sum holds
 * them once; every rank computes their (identical) gradient from the full output gradient.
 *
 * Tensor parallel without sequence parallel: the residual stream is replicated ([N, h] on
 * every TP rank); row-parallel outputs are all-reduced, and so are the input gradients of
 * column-parallel linears. With sequence parallel (Megatron's SP, arXiv 2205.05198) the
 * residual stream, norms and dropouts hold this rank's chunk of the sequence ([N/TP, h],
 * tokens [r*N/TP, (r+1)*N/TP) in [s, b] order); norm outputs are all-gathered before the
 * column-parallel linears and row-parallel outputs reduce-scattered (and the reverse in
 * backward). Collectives work in place: a rank's chunk sits at its own rows of the full
 * buffer. With TP = 1 every collective is a no-op and both paths are the same.
 *
 * The LM head runs in token chunks over all N tokens: logits, the vocab-parallel
 * cross-entropy and, when training, the head's backward happen chunk by chunk, so the
 * full [N, V] logits never exist at once. */
#include <math.h>
#include <string.h>

#include "model/model_internal.h"

/* Dropout streams: one per (micro-batch, site), sites numbered within the model. Sites on
 * data that differs between TP ranks (attention heads; sequence chunks with SP) also mix
 * in the TP rank, so ranks draw independent masks (Megatron's model-parallel RNG tracker). */
static uint64_t site_stream(uint64_t mb_stream, int site) { return mb_stream * 4096u + (uint64_t)site; }
static uint64_t rank_stream(uint64_t stream, int tp_rank) { return stream ^ ((uint64_t)tp_rank << 56); }
enum { SITE_EMB = 0 };
static int site_attn_res(int l) { return 1 + 3 * l; }
static int site_mlp_res(int l) { return 2 + 3 * l; }
static int site_attn_probs(int l) { return 3 + 3 * l; }

static mc_tensor rows_of(const mc_tensor *t, int64_t n) {
    mc_tensor r = *t;
    MC_ASSERT(t->ndim <= 2 && n <= t->shape[0]);
    r.shape[0] = n;
    return r;
}

static mc_tensor rows_at(const mc_tensor *t, int64_t r0, int64_t n) {
    if (t->ndim == 2) return mc_tensor_rows(t, r0, n);
    mc_tensor r = *t;
    r.data = (char *)t->data + (size_t)r0 * mc_dtype_size(t->dtype);
    r.shape[0] = n;
    return r;
}

typedef struct {
    mc_model *m;
    mc_backend *be;
    int64_t S, B, N; /* N = S*B tokens of the micro-batch */
    int64_t Nl, r0;  /* this rank's residual-stream tokens: rows [r0, r0 + Nl) (all of N without SP) */
    bool train;
    bool acc;        /* weight gradients accumulate (false: the first backward after a reset writes them) */
    uint64_t stream;
    const mc_microbatch *mb;
    mc_kv_cache *cache; /* generation: the new tokens attend over its slots slot0 .. slot0 + B - 1 */
    int64_t slot0;
} pass_ctx;

/* ---- tensor/sequence-parallel boundaries ---- */

/* The rows of a full [N, ...] buffer that hold this rank's chunk. */
static mc_tensor my_rows(const pass_ctx *p, const mc_tensor *full) { return rows_at(full, p->r0, p->Nl); }

/* Before a column-parallel linear: the full input from this rank's chunk (already written
 * at its rows of `full`). */
static void gather_seq(pass_ctx *p, mc_tensor *full) {
    if (!p->m->sp) return;
    mc_tensor all = rows_of(full, p->N), mine = my_rows(p, full);
    mc_comm_all_gather(&p->m->comm->tp, p->be, &all, &mine);
}

/* After a row-parallel linear (forward) or a column-parallel input gradient (backward):
 * sums the partial results over TP ranks. Returns the view holding this rank's result:
 * the full buffer, or with SP this rank's rows of it. */
static mc_tensor reduce_partial(pass_ctx *p, mc_tensor *full) {
    mc_tensor all = rows_of(full, p->N);
    if (!p->m->sp) {
        mc_comm_all_reduce(&p->m->comm->tp, p->be, &all, MC_REDUCE_SUM);
        return all;
    }
    mc_tensor mine = my_rows(p, full);
    mc_comm_reduce_scatter(&p->m->comm->tp, p->be, &mine, &all);
    return mine;
}

/* ---- pieces ---- */

static void norm_fwd(pass_ctx *p, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x, int wi, int bi) {
    mc_model *m = p->m;
    mc_tensor w = mc_model_param(m, wi), b = mc_model_param(m, bi);
    mc_tensor yy = my_rows(p, y), xx = rows_of(x, p->Nl), rs = rows_of(rstd, p->Nl);
    if (m->cfg.normalization == MC_NORM_LAYERNORM) {
        mc_tensor mu = rows_of(mean, p->Nl);
        mc_op_layernorm_fwd(p->be, &yy, &mu, &rs, &xx, &w, &b, m->cfg.norm_epsilon);
    } else {
        mc_op_rmsnorm_fwd(p->be, &yy, &rs, &xx, &w, m->cfg.norm_epsilon);
    }
}

/* dx (this rank's residual-stream rows) += the norm's input gradient for dy (same rows);
 * with y (optional, this rank's rows) the norm's forward output again, in the same pass;
 * with sum_idx >= 0, that parameter's gradient += dx's column sums (mc_model_bias_by_norm). */
static void norm_bwd(pass_ctx *p, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, const mc_tensor *mean,
                     const mc_tensor *rstd, int wi, int bi, mc_tensor *y, int sum_idx) {
    mc_model *m = p->m;
    mc_tensor w = mc_model_param(m, wi), b = mc_model_param(m, bi), gw = mc_model_grad(m, wi), gb = mc_model_grad(m, bi);
    mc_tensor dxx = rows_of(dx, p->Nl), xx = rows_of(x, p->Nl), rs = rows_of(rstd, p->Nl), none = mc_tensor_none();
    mc_tensor gs = mc_model_grad(m, sum_idx);
    mc_tensor *yy = y ? y : &none;
    if (m->cfg.normalization == MC_NORM_LAYERNORM) {
        mc_tensor mu = rows_of(mean, p->Nl);
        mc_op_layernorm_bwd(p->be, &dxx, &gw, &gb, &gs, yy, dy, &xx, &w, &b, &mu, &rs);
    } else {
        mc_op_rmsnorm_bwd(p->be, &dxx, &gw, &gs, yy, dy, &xx, &w, &rs);
    }
}

/* The parameter whose gradient the norm backward producing layer l's output gradient sums
 * (layer l's fc2 bias; that norm is layer l + 1's first, or the final one), or -1. */
static int fc2_bias_sum(const pass_ctx *p, int l) {
    return mc_model_bias_by_norm(p->m) ? p->m->layers[l].fc2_b : -1;
}

static mc_attn_desc attn_desc(pass_ctx *p, int l) {
    mc_model *m = p->m;
    mc_attn_desc d = {
        .seq = p->S,
        .batch = p->B,
        .heads = m->heads_local,
        .groups = m->groups_local,
        .head_dim = m->cfg.kv_channels,
        .softmax_scale = (float)(1.0 / sqrt((double)m->cfg.kv_channels)),
        .dropout = p->train ? m->cfg.attention_dropout : 0.0f,
        .seed = m->seed,
        .stream = rank_stream(site_stream(p->stream, site_attn_probs(l)), m->tp_rank),
        .seg_start = p->mb->seg_start,
        .deterministic = m->deterministic,
    };
    return d;
}

static mc_rope_desc rope_desc(pass_ctx *p) {
    mc_model *m = p->m;
    /* Megatron's rotary embedding uses the position within the sequence, also with
     * --reset-position-ids (which resets learned position embeddings only). */
    mc_rope_desc d = {
        .seq = p->S,
        .batch = p->B,
        .heads = m->heads_local,
        .groups = m->groups_local,
        .head_dim = m->cfg.kv_channels,
        .rot_dim = m->rot_dim,
        .cos = m->rope_cos,
        .sin = m->rope_sin,
        .pos = p->cache ? p->mb->pos : mc_tensor_none(), /* generation: absolute positions */
    };
    return d;
}

/* Dropout stream of a residual-stream site: per TP rank when the stream is split (SP). */
static uint64_t residual_stream(const pass_ctx *p, int site) {
    uint64_t s = site_stream(p->stream, site);
    return p->m->sp ? rank_stream(s, p->m->tp_rank) : s;
}

/* t = x W^T (+ b) of a row-parallel linear, reduced over TP; returns this rank's rows. */
static mc_tensor row_parallel_fwd(pass_ctx *p, const mc_tensor *x, int wi, int bi) {
    mc_model *m = p->m;
    mc_tensor w = mc_model_param(m, wi);
    mc_tensor b = m->tp_rank == 0 ? mc_model_param(m, bi) : mc_tensor_none();
    mc_tensor full = rows_of(&m->dtmp, p->N);
    mc_op_linear_fwd(p->be, &full, x, &w, &b);
    return reduce_partial(p, &m->dtmp);
}

/* out = residual + dropout(x W^T + b) for a row-parallel linear closing a residual branch:
 * at TP 1 without dropout one op (linear_residual_fwd: no separate add pass), otherwise the
 * linear, its TP reduction, then dropout_add. */
static void residual_branch_fwd(pass_ctx *p, mc_tensor *out, const mc_tensor *residual, const mc_tensor *x, int wi,
                                int bi, float hp, int site) {
    mc_model *m = p->m;
    if (m->tp == 1 && hp == 0.0f) {
        mc_tensor w = mc_model_param(m, wi), b = mc_model_param(m, bi);
        mc_op_linear_residual_fwd(p->be, out, residual, x, &w, &b);
        return;
    }
    mc_tensor t = row_parallel_fwd(p, x, wi, bi);
    mc_op_dropout_add_fwd(p->be, out, residual, &t, hp, m->seed, residual_stream(p, site));
}

/* Where layer l's MLP activation lives: its own saved buffer, or the shared scratch that
 * backward refills. (The norm outputs always live in the shared ytmp.) */
static mc_tensor *act_buf(pass_ctx *p, int l) { return p->m->recompute_act ? &p->m->act_tmp : &p->m->acts[l].act; }

/* fc1 and a tanh GELU as one op each way (linear_gelu_fwd / linear_dgelu_bwd), which a
 * backend can fuse into its GEMMs. fc1 is column-parallel, so its bias and the GELU are
 * local to each TP rank. */
static bool fused_gelu(const mc_model *m) { return !m->cfg.swiglu && m->cfg.openai_gelu; }

/* The MLP activation of fc1 (forward, and recomputed in backward). */
static mc_tensor activation_fwd(pass_ctx *p, int l, const mc_tensor *fc1) {
    mc_model *m = p->m;
    mc_tensor act = rows_of(act_buf(p, l), p->N);
    if (m->cfg.swiglu)
        mc_op_swiglu_fwd(p->be, &act, fc1);
    else
        mc_op_gelu_fwd(p->be, &act, fc1, m->cfg.openai_gelu);
    return act;
}

/* Whether the backward adds into parameter idx's gradient (linear_bwd's `accumulate`):
 * always, except for a grad_overwritten one in the first backward after a reset. */
static bool grad_acc(const pass_ctx *p, int idx) { return p->acc || !p->m->params[idx].grad_overwritten; }

/* Backward through a norm and the column-parallel linear it feeds (norm1 -> QKV, norm2 ->
 * fc1), from dout, the linear's output gradient: the linear's input gradient (through
 * dtmp, reduced over TP), then the norm's backward, dres += its input gradient, which also
 * writes the norm's output again into ytmp (no pass of its own) and sums dres's columns
 * into sum_idx's gradient (norm_bwd), then the linear's weight (and bias, lin_b >= 0)
 * gradient from it. */
static void norm_linear_bwd(pass_ctx *p, const mc_tensor *dout, const mc_tensor *x, const mc_tensor *mean,
                            const mc_tensor *rstd, int norm_w, int norm_b, int lin_w, int lin_b, int sum_idx) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    mc_tensor w = mc_model_param(m, lin_w), gw = mc_model_grad(m, lin_w), gb = mc_model_grad(m, lin_b);
    mc_tensor dy = rows_of(&m->dtmp, p->N), none = mc_tensor_none();
    mc_tensor y = rows_of(&m->ytmp, p->N), y_mine = my_rows(p, &m->ytmp);
    mc_op_linear_bwd(be, &dy, &none, &none, dout, &y, &w, true);
    mc_tensor dy_mine = reduce_partial(p, &m->dtmp);
    norm_bwd(p, &m->dres, &dy_mine, x, mean, rstd, norm_w, norm_b, &y_mine, sum_idx);
    gather_seq(p, &m->ytmp);
    mc_op_linear_bwd(be, &none, &gw, &gb, dout, &y, &w, grad_acc(p, lin_w));
}

static void layer_fwd(pass_ctx *p, int l, mc_tensor *x_out) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    mc_layer_acts *a = &m->acts[l];
    const mc_layer_params *lp = &m->layers[l];
    int64_t N = p->N;
    float hp = p->train ? m->cfg.hidden_dropout : 0.0f;

    norm_fwd(p, &m->ytmp, &a->mean1, &a->rstd1, &a->x_in, lp->ln1_w, lp->ln1_b);
    gather_seq(p, &m->ytmp);
    mc_tensor y1 = rows_of(&m->ytmp, N), qkv = rows_of(&a->qkv, N), att = rows_of(&a->att, N);
    mc_tensor wqkv = mc_model_param(m, lp->qkv_w), bqkv = mc_model_param(m, lp->qkv_b);
    mc_op_linear_fwd(be, &qkv, &y1, &wqkv, &bqkv);
    mc_attn_desc ad = attn_desc(p, l);
    if (m->cfg.position_embedding_type == MC_POS_ROPE) {
        mc_rope_desc rd = rope_desc(p);
        mc_op_rope(be, &qkv, &rd, false);
    }
    if (p->cache) {
        const mc_tensor *all = &p->cache->layers[l];
        const int64_t per_slot = mc_tensor_numel(all) / p->cache->batch;
        mc_tensor slots = mc_tensor_1d((char *)all->data + (size_t)(p->slot0 * per_slot) * mc_dtype_size(all->dtype),
                                       all->dtype, p->B * per_slot);
        mc_tensor pos = rows_of(&p->mb->pos, N);
        mc_op_attention_kv_fwd(be, &att, &slots, &qkv, &pos, &ad);
    } else {
        mc_tensor lse = rows_of(&a->lse, p->B * m->heads_local * p->S);
        mc_op_attention_fwd(be, &att, &lse, &qkv, &ad);
    }
    mc_tensor x_in = rows_of(&a->x_in, p->Nl), x_mid = rows_of(&a->x_mid, p->Nl);
    residual_branch_fwd(p, &x_mid, &x_in, &att, lp->proj_w, lp->proj_b, hp, site_attn_res(l));

    norm_fwd(p, &m->ytmp, &a->mean2, &a->rstd2, &a->x_mid, lp->ln2_w, lp->ln2_b);
    gather_seq(p, &m->ytmp);
    mc_tensor y2 = rows_of(&m->ytmp, N), fc1 = rows_of(&a->fc1, N);
    mc_tensor w1 = mc_model_param(m, lp->fc1_w), b1 = mc_model_param(m, lp->fc1_b), act;
    if (fused_gelu(m)) {
        act = rows_of(act_buf(p, l), N);
        mc_op_linear_gelu_fwd(be, &act, &fc1, &y2, &w1, &b1);
    } else {
        mc_op_linear_fwd(be, &fc1, &y2, &w1, &b1);
        act = activation_fwd(p, l, &fc1);
    }
    mc_tensor out = rows_of(x_out, p->Nl);
    residual_branch_fwd(p, &out, &x_mid, &act, lp->fc2_w, lp->fc2_b, hp, site_mlp_res(l));
}

/* Backward through a residual branch's dropout: the full gradient of the branch output
 * (gathered over the sequence with SP) in dtmp; without dropout and SP it is dres itself,
 * returned as a view (no copy: every reader of the branch gradient runs before the norm
 * backward adds into dres). */
static mc_tensor branch_grad(pass_ctx *p, int site) {
    mc_model *m = p->m;
    float hp = p->train ? m->cfg.hidden_dropout : 0.0f;
    if (hp == 0.0f && !m->sp) return rows_of(&m->dres, p->N);
    mc_tensor dres = rows_of(&m->dres, p->Nl), mine = my_rows(p, &m->dtmp);
    mc_op_dropout_bwd(p->be, &mine, &dres, hp, m->seed, residual_stream(p, site));
    gather_seq(p, &m->dtmp);
    return rows_of(&m->dtmp, p->N);
}

static void layer_bwd(pass_ctx *p, int l) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    mc_layer_acts *a = &m->acts[l];
    const mc_layer_params *lp = &m->layers[l];
    int64_t N = p->N;

    /* dres = d x_out. Through the MLP residual: d x_mid gets dres itself (identity path)
     * plus the norm2 input gradient, accumulated by norm_bwd below. With biases summed by
     * the norms, fc2's was summed by the norm backward that wrote dres, and the
     * projection's is summed by norm2's below. */
    const bool by_norm = mc_model_bias_by_norm(m);
    mc_tensor dt = branch_grad(p, site_mlp_res(l));
    mc_tensor dact = rows_of(&m->dact, N), fc1 = rows_of(&a->fc1, N), none = mc_tensor_none();
    mc_tensor w2 = mc_model_param(m, lp->fc2_w), gw2 = mc_model_grad(m, lp->fc2_w);
    mc_tensor gb2 = by_norm ? none : mc_model_grad(m, lp->fc2_b);
    mc_tensor dfc1 = fc1; /* in place: the layer's fc1 output is dead after its activation's backward */
    if (fused_gelu(m)) { /* d fc1 in dact's buffer; fc1's bias gradient comes with its weight gradient */
        mc_tensor act = m->recompute_act ? activation_fwd(p, l, &fc1) : rows_of(&a->act, N);
        mc_op_linear_bwd(be, &none, &gw2, &gb2, &dt, &act, &w2, grad_acc(p, lp->fc2_w));
        mc_op_linear_dgelu_bwd(be, &dact, &none, &dt, &w2, &fc1);
        dfc1 = dact;
    } else if (!m->recompute_act) { /* GELU, its activation saved */
        mc_tensor act = rows_of(&a->act, N);
        mc_op_linear_bwd(be, &dact, &gw2, &gb2, &dt, &act, &w2, grad_acc(p, lp->fc2_w));
        mc_op_gelu_bwd(be, &dfc1, &dact, &fc1, m->cfg.openai_gelu);
    } else { /* fc2's input gradient, the activation again (SwiGLU: written by its backward's
              * pass; GELU: a pass of its own), then fc2's weight gradient */
        mc_tensor act = rows_of(&m->act_tmp, N);
        mc_op_linear_bwd(be, &dact, &none, &none, &dt, &act, &w2, true);
        if (m->cfg.swiglu) {
            mc_op_swiglu_bwd(be, &dfc1, &act, &dact, &fc1);
        } else {
            activation_fwd(p, l, &fc1);
            mc_op_gelu_bwd(be, &dfc1, &dact, &fc1, m->cfg.openai_gelu);
        }
        mc_op_linear_bwd(be, &none, &gw2, &gb2, &dt, &act, &w2, grad_acc(p, lp->fc2_w));
    }
    norm_linear_bwd(p, &dfc1, &a->x_mid, &a->mean2, &a->rstd2, lp->ln2_w, lp->ln2_b, lp->fc1_w, lp->fc1_b,
                    by_norm ? lp->proj_b : -1);

    /* dres = d x_mid. Through the attention residual. */
    dt = branch_grad(p, site_attn_res(l));
    mc_tensor att = rows_of(&a->att, N), datt = rows_of(&m->datt, N);
    mc_tensor wp = mc_model_param(m, lp->proj_w), gwp = mc_model_grad(m, lp->proj_w);
    mc_tensor gbp = by_norm ? none : mc_model_grad(m, lp->proj_b);
    mc_op_linear_bwd(be, &datt, &gwp, &gbp, &dt, &att, &wp, grad_acc(p, lp->proj_w));
    mc_tensor qkv = rows_of(&a->qkv, N), lse = rows_of(&a->lse, p->B * m->heads_local * p->S);
    mc_tensor dqkv = rows_of(&m->dqkv, N);
    mc_attn_desc ad = attn_desc(p, l);
    mc_rope_desc rd;
    if (m->cfg.position_embedding_type == MC_POS_ROPE) { /* rope's backward too, in the same call */
        rd = rope_desc(p);
        ad.rope = &rd;
    }
    const bool qkv_b_by_attn = mc_model_qkv_bias_by_attention(m);
    mc_tensor gbq = qkv_b_by_attn ? mc_model_grad(m, lp->qkv_b) : none;
    mc_op_attention_bwd(be, &dqkv, &gbq, &datt, &qkv, &att, &lse, &ad);
    norm_linear_bwd(p, &dqkv, &a->x_in, &a->mean1, &a->rstd1, lp->ln1_w, lp->ln1_b, lp->qkv_w,
                    qkv_b_by_attn ? -1 : lp->qkv_b, l > 0 ? fc2_bias_sum(p, l - 1) : -1);
}

static void embedding_fwd(pass_ctx *p) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    /* Vocab-parallel lookup: each rank has the rows of its vocabulary range; the sum over
     * ranks (all-reduce, or reduce-scatter with SP) completes it. */
    mc_tensor we = mc_model_param(m, m->emb_w), out = rows_of(&m->emb_out, p->Nl);
    if (m->sp) {
        mc_tensor full = rows_of(&m->dtmp, p->N);
        mc_op_embedding_fwd(be, &full, &p->mb->tokens, &we, m->vocab_start, false);
        mc_tensor mine = reduce_partial(p, &m->dtmp);
        be->copy_d2d(be, out.data, mine.data, mc_tensor_bytes(&out));
    } else {
        mc_op_embedding_fwd(be, &out, &p->mb->tokens, &we, m->vocab_start, false);
        mc_comm_all_reduce(&m->comm->tp, be, &out, MC_REDUCE_SUM);
    }
    if (m->pos_w >= 0) {
        mc_tensor wp = mc_model_param(m, m->pos_w), pos = rows_at(&p->mb->pos, p->r0, p->Nl);
        mc_op_embedding_fwd(be, &out, &pos, &wp, 0, true);
    }
    float hp = p->train ? m->cfg.hidden_dropout : 0.0f;
    if (hp > 0) mc_op_dropout_fwd(be, &out, &out, hp, m->seed, residual_stream(p, SITE_EMB));
}

static void embedding_bwd(pass_ctx *p) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    mc_tensor dres = rows_of(&m->dres, p->Nl);
    float hp = p->train ? m->cfg.hidden_dropout : 0.0f;
    if (hp > 0) mc_op_dropout_bwd(be, &dres, &dres, hp, m->seed, residual_stream(p, SITE_EMB));
    if (m->pos_w >= 0) {
        mc_tensor gwp = mc_model_grad(m, m->pos_w), pos = rows_at(&p->mb->pos, p->r0, p->Nl);
        mc_op_embedding_bwd(be, &gwp, &dres, &pos, 0);
    }
    /* Every rank's vocabulary rows need the gradient of every token. */
    mc_tensor full = rows_of(&m->dtmp, p->N);
    if (m->sp) {
        mc_tensor mine = my_rows(p, &m->dtmp);
        be->copy_d2d(be, mine.data, dres.data, mc_tensor_bytes(&dres));
        gather_seq(p, &m->dtmp);
    } else {
        full = dres;
    }
    mc_tensor gwe = mc_model_grad(m, m->emb_w);
    mc_op_embedding_bwd(be, &gwe, &full, &p->mb->tokens, m->vocab_start);
}

/* Offsets of the parameter ranges the passes read: the embeddings, layer l, the head. */
static int64_t layer_lo(const mc_model *m, int l) { return m->params[m->layers[l].ln1_w].offset; }
static int64_t layer_hi(const mc_model *m, int l) {
    return l + 1 < m->cfg.num_layers ? layer_lo(m, l + 1) : m->params[m->lnf_w].offset;
}

static void need_params(const mc_model *m, int64_t lo, int64_t hi) {
    if (m->hooks.params_needed) m->hooks.params_needed(m->hooks.ctx, lo, hi);
}

static void grads_ready(const mc_model *m, int64_t frontier) {
    if (m->hooks.grads_ready) m->hooks.grads_ready(m->hooks.ctx, frontier);
}

static void run_forward(pass_ctx *p) {
    mc_model *m = p->m;
    need_params(m, 0, layer_lo(m, 0));
    embedding_fwd(p);
    for (int l = 0; l < m->cfg.num_layers; l++) {
        mc_tensor *out = l + 1 < m->cfg.num_layers ? &m->acts[l + 1].x_in : &m->x_final;
        need_params(m, layer_lo(m, l), layer_hi(m, l));
        layer_fwd(p, l, out);
    }
    need_params(m, m->params[m->lnf_w].offset, m->numel);
    norm_fwd(p, &m->yf, &m->meanf, &m->rstdf, &m->x_final, m->lnf_w, m->lnf_b);
    gather_seq(p, &m->yf);
}

void mc_model_sum_losses(const void *loss, mc_dtype loss_dt, const void *mask, mc_dtype mask_dt, int64_t n,
                         double *loss_sum, double *num_tokens) {
    double lsum = 0, ntok = 0;
    for (int64_t i = 0; i < n; i++) {
        double l = loss_dt == MC_F64 ? ((const double *)loss)[i] : (double)((const float *)loss)[i];
        double mk = mask_dt == MC_F64 ? ((const double *)mask)[i] : (double)((const float *)mask)[i];
        lsum += l * mk;
        ntok += mk;
    }
    *loss_sum = lsum;
    *num_tokens = ntok;
}

/* The LM head and loss in chunks over all N tokens; with `backward`, also the head's
 * backward into dtmp (the partial gradient of the final norm output). The per-token losses
 * come to the host once, after the last chunk: queued into host_loss when given (no
 * waiting), else copied and summed here (one synchronization per pass). */
static void head_loss(pass_ctx *p, bool backward, double grad_scale, void *host_loss, double *loss_sum,
                      double *num_tokens) {
    mc_model *m = p->m;
    mc_backend *be = p->be;
    mc_tensor w = mc_model_param(m, m->out_w), gw = mc_model_grad(m, m->out_w), none = mc_tensor_none();
    /* The first backward after a reset: the longer chunks in the gradient buffer, whose
     * range is zeroed (but where this pass overwrites it) once the head is done
     * (mc_model_zero_grads left it). */
    bool borrow = backward && !p->acc && m->head_chunk_first > 0;
    int64_t chunk = borrow ? m->head_chunk_first : m->head_chunk;
    const mc_tensor *lbuf = borrow ? &m->logits_first : &m->logits;
    for (int64_t c0 = 0; c0 < p->N; c0 += chunk) {
        int64_t nc = p->N - c0 < chunk ? p->N - c0 : chunk;
        mc_tensor x = rows_at(&m->yf, c0, nc), logits = rows_of(lbuf, nc), rowmax = rows_of(&m->rowmax, nc);
        mc_tensor stats = mc_tensor_2d(m->stats.data, m->stats.dtype, 2, nc), loss = rows_at(&m->tok_loss, c0, nc);
        mc_tensor labels = rows_at(&p->mb->labels, c0, nc), mask = rows_at(&p->mb->loss_mask, c0, nc);
        mc_op_linear_fwd(be, &logits, &x, &w, &none);
        mc_tensor dlogits = backward ? logits : none;
        if (m->tp == 1) { /* the whole vocabulary here: one pass over the logits */
            mc_op_xent_fused(be, &loss, &dlogits, &logits, &labels, &mask, (float)grad_scale);
        } else { /* the group's max, each rank's sum relative to it, then the sums */
            mc_op_xent_rowstats(be, &rowmax, &stats, &logits, &labels, m->vocab_start);
            mc_tensor gmax = rows_of(&m->gmax, nc);
            be->copy_d2d(be, gmax.data, rowmax.data, mc_tensor_bytes(&rowmax));
            mc_comm_all_reduce(&m->comm->tp, be, &gmax, MC_REDUCE_MAX);
            mc_op_xent_rescale(be, &stats, &rowmax, &gmax);
            mc_comm_all_reduce(&m->comm->tp, be, &stats, MC_REDUCE_SUM);
            mc_op_xent_loss_grad(be, &loss, &dlogits, &logits, &gmax, &stats, &labels, &mask, m->vocab_start,
                               (float)grad_scale);
        }
        if (backward) {
            mc_tensor dx = rows_at(&m->dtmp, c0, nc);
            mc_op_linear_bwd(be, &dx, &gw, &none, &logits, &x, &w, c0 > 0 || grad_acc(p, m->out_w));
        }
    }
    if (borrow) mc_model_zero_borrowed(m);
    mc_tensor loss = rows_of(&m->tok_loss, p->N), mask = rows_of(&p->mb->loss_mask, p->N);
    if (host_loss) {
        be->copy_d2h_async(be, host_loss, loss.data, mc_tensor_bytes(&loss));
        return;
    }
    be->copy_d2h(be, m->host_loss, loss.data, mc_tensor_bytes(&loss));
    be->copy_d2h(be, m->host_mask, mask.data, mc_tensor_bytes(&mask));
    mc_model_sum_losses(m->host_loss, loss.dtype, m->host_mask, mask.dtype, p->N, loss_sum, num_tokens);
}

static pass_ctx make_pass(mc_model *m, const mc_microbatch *mb, bool train, uint64_t stream) {
    /* an inference model takes shorter sequences too (max_tokens) */
    const bool fits = m->inference ? mb->seq >= 1 && mb->seq <= m->seq && mb->seq * mb->batch <= m->max_tokens
                                   : mb->seq == m->seq;
    MC_ASSERT(fits && mb->batch >= 1 && mb->batch <= m->max_batch, "micro-batch [%lld, %lld] vs plan [%lld, %lld]",
              (long long)mb->seq, (long long)mb->batch, (long long)m->seq, (long long)m->max_batch);
    MC_ASSERT(!(m->host_hi > 0 && m->grads_held),
              "a pass would overwrite the embedding's gradient, where a training pass's activations live with one "
              "micro-batch a step: take the optimizer step (or mc_model_zero_grads) after each backward");
    pass_ctx p = {.m = m, .be = m->be, .S = mb->seq, .B = mb->batch, .N = mb->seq * mb->batch,
                  .train = train, .acc = !m->grads_reset, .stream = stream, .mb = mb};
    p.Nl = m->sp ? p.N / m->tp : p.N;
    p.r0 = m->sp ? (int64_t)m->tp_rank * p.Nl : 0;
    return p;
}

static void forward_backward(mc_model *m, const mc_microbatch *mb, bool backward, double grad_scale,
                             uint64_t rng_stream, bool train, void *host_loss, double *loss_sum, double *num_tokens) {
    MC_ASSERT(!m->inference, "an inference model computes no losses");
    pass_ctx p = make_pass(m, mb, train, rng_stream);
    run_forward(&p);
    head_loss(&p, backward, grad_scale, host_loss, loss_sum, num_tokens);
    if (!backward) return;
    mc_tensor dyf = reduce_partial(&p, &m->dtmp);
    p.be->zero(p.be, m->dres.data, (size_t)(p.Nl * m->cfg.hidden_size) * mc_dtype_size(m->act_dtype));
    norm_bwd(&p, &m->dres, &dyf, &m->x_final, &m->meanf, &m->rstdf, m->lnf_w, m->lnf_b, NULL,
             fc2_bias_sum(&p, m->cfg.num_layers - 1));
    grads_ready(m, m->params[m->lnf_w].offset); /* final norm and (untied) output layer */
    for (int l = m->cfg.num_layers - 1; l >= 0; l--) {
        layer_bwd(&p, l);
        grads_ready(m, layer_lo(m, l));
    }
    if (m->host_hi > 0) mc_model_zero_hosted(m); /* the activations there are dead now */
    embedding_bwd(&p);
    m->grads_reset = false;
    m->grads_held = true;
    grads_ready(m, 0);
}

void mc_model_forward_backward(mc_model *m, const mc_microbatch *mb, bool backward, double grad_scale,
                               uint64_t rng_stream, bool train, double *loss_sum, double *num_tokens) {
    forward_backward(m, mb, backward, grad_scale, rng_stream, train, NULL, loss_sum, num_tokens);
}

void mc_model_train_microbatch(mc_model *m, const mc_microbatch *mb, double grad_scale, uint64_t rng_stream,
                               void *host_loss) {
    MC_ASSERT(host_loss, "mc_model_train_microbatch: no host buffer for the losses");
    forward_backward(m, mb, true, grad_scale, rng_stream, true, host_loss, NULL, NULL);
}

mc_dtype mc_model_loss_dtype(const mc_model *m) { return m->tok_loss.dtype; }

void mc_model_forward_only(mc_model *m, const mc_microbatch *mb) {
    pass_ctx p = make_pass(m, mb, false, 0);
    run_forward(&p);
}

size_t mc_kv_cache_bytes(const mc_model *m, int64_t cap, int64_t batch) {
    return (size_t)(m->cfg.num_layers * batch * cap * m->groups_local * 2 * m->cfg.kv_channels) *
           mc_dtype_size(m->act_dtype);
}

void mc_kv_cache_alloc(mc_model *m, mc_kv_cache *c, int64_t cap, int64_t batch) {
    const int64_t n = batch * cap * m->groups_local * 2 * m->cfg.kv_channels;
    c->n = m->cfg.num_layers;
    c->cap = cap;
    c->batch = batch;
    c->buf = m->be->alloc(m->be, mc_kv_cache_bytes(m, cap, batch));
    c->layers = mc_xcalloc((size_t)c->n, sizeof(mc_tensor));
    for (int l = 0; l < c->n; l++)
        c->layers[l] = mc_tensor_1d((char *)c->buf + (size_t)(l * n) * mc_dtype_size(m->act_dtype), m->act_dtype, n);
}

void mc_kv_cache_free(mc_model *m, mc_kv_cache *c) {
    if (c->buf) m->be->free(m->be, c->buf);
    free(c->layers);
    memset(c, 0, sizeof *c);
}

void mc_model_forward_cached(mc_model *m, const mc_microbatch *mb, mc_kv_cache *c, int64_t slot0) {
    MC_ASSERT(!m->sp, "generation with a key/value cache runs without sequence parallelism");
    MC_ASSERT(mb->seq >= 1 && mb->batch >= 1 && mb->seq * mb->batch <= m->max_tokens && slot0 >= 0 &&
                  slot0 + mb->batch <= c->batch,
              "cached forward: [%lld, %lld] new tokens in slots from %lld; %lld tokens a forward, %lld slots",
              (long long)mb->seq, (long long)mb->batch, (long long)slot0, (long long)m->max_tokens,
              (long long)c->batch);
    pass_ctx p = {.m = m, .be = m->be, .S = mb->seq, .B = mb->batch, .N = mb->seq * mb->batch, .train = false,
                  .acc = !m->grads_reset, .mb = mb, .cache = c, .slot0 = slot0};
    p.Nl = p.N;
    run_forward(&p);
}

mc_tensor mc_model_head_logits(mc_model *m, int64_t row0, int64_t n) {
    MC_ASSERT(n >= 1 && n <= m->head_chunk, "head logits of %lld rows, the buffer holds %lld", (long long)n,
              (long long)m->head_chunk);
    mc_tensor x = rows_at(&m->yf, row0, n), logits = rows_of(&m->logits, n), w = mc_model_param(m, m->out_w);
    mc_tensor none = mc_tensor_none();
    mc_op_linear_fwd(m->be, &logits, &x, &w, &none);
    return logits;
}

/* Element i of a host copy of activations of dtype dt, widened. */
static double host_value(const char *host, mc_dtype dt, int64_t i) {
    switch (dt) {
    case MC_F64: return ((const double *)host)[i];
    case MC_F32: return ((const float *)host)[i];
    case MC_BF16: return mc_bf16_to_f32(((const uint16_t *)host)[i]);
    default: return mc_f16_to_f32(((const uint16_t *)host)[i]); /* MC_F16 */
    }
}

void mc_model_logits(mc_model *m, const mc_microbatch *mb, float *out) {
    mc_backend *be = m->be;
    mc_model_forward_only(m, mb);
    int64_t N = mb->seq * mb->batch, V = m->vocab_local;
    mc_tensor w = mc_model_param(m, m->out_w), none = mc_tensor_none();
    size_t esz = mc_dtype_size(m->act_dtype);
    char *host = mc_xmalloc((size_t)(m->head_chunk * V) * esz);
    for (int64_t c0 = 0; c0 < N; c0 += m->head_chunk) {
        int64_t nc = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        mc_tensor x = rows_at(&m->yf, c0, nc), logits = rows_of(&m->logits, nc);
        mc_op_linear_fwd(be, &logits, &x, &w, &none);
        be->copy_d2h(be, host, logits.data, (size_t)(nc * V) * esz);
        for (int64_t i = 0; i < nc * V; i++) out[c0 * V + i] = (float)host_value(host, m->act_dtype, i);
    }
    free(host);
}
