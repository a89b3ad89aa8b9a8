#include "optim/ddp.h"

#include <string.h>

static mc_tensor flat_view(void *buf, mc_dtype dt, int64_t lo, int64_t n) {
    return mc_tensor_1d((char *)buf + (size_t)lo * mc_dtype_size(dt), dt, n);
}

/* Key/value rows of QKV that several TP ranks hold for the same query group: each rank's
 * query heads contributed part of their gradient. They are summed over TP through a
 * [groups, 2d, cols] scratch where each rank fills its group's slot (others stay zero),
 * so one all-reduce over the TP group serves every group at once. */
static void sync_kv_rows(mc_ddp *d, const mc_param *p) {
    mc_model *m = d->model;
    mc_backend *be = m->be;
    int64_t dh = m->cfg.kv_channels, cols = p->shape[1], hpg = m->cfg.num_attention_heads / m->cfg.num_query_groups;
    int64_t kv = 2 * dh * cols, q = (int64_t)m->heads_local * dh * cols;
    int64_t group = (int64_t)m->tp_rank * m->heads_local / hpg;
    int64_t n = (int64_t)m->cfg.num_query_groups * kv;
    MC_ASSERT(n <= d->kv_scratch_numel);
    float *slot = d->kv_scratch + group * kv, *mine = (float *)m->grad_buf + p->offset + q;
    be->zero(be, d->kv_scratch, (size_t)n * sizeof(float));
    be->copy_d2d(be, slot, mine, (size_t)kv * sizeof(float));
    mc_tensor all = mc_tensor_1d(d->kv_scratch, MC_F32, n);
    mc_comm_all_reduce(&m->comm->tp, be, &all, MC_REDUCE_SUM);
    be->copy_d2d(be, mine, slot, (size_t)kv * sizeof(float));
}

/* Gradients that are partial over TP ranks (model.h: mc_grad_sync), summed once per step
 * before the data-parallel reduction of their bucket. */
static void sync_tp_partials(mc_ddp *d, const mc_grad_bucket *bk) {
    mc_model *m = d->model;
    for (int i = bk->first_param; i <= bk->last_param; i++) {
        const mc_param *p = &m->params[i];
        if (p->sync == MC_SYNC_TP) {
            mc_tensor g = flat_view(m->grad_buf, m->grad_dtype, p->offset, p->numel);
            mc_comm_all_reduce(&m->comm->tp, m->be, &g, MC_REDUCE_SUM);
        } else if (p->sync == MC_SYNC_TP_KV_ROWS) {
            sync_kv_rows(d, p);
        }
    }
}

static void reduce_bucket(mc_ddp *d, int b) {
    mc_model *m = d->model;
    const mc_grad_bucket *bk = &m->buckets[b];
    sync_tp_partials(d, bk);
    int64_t n = bk->hi - bk->lo;
    mc_tensor in = flat_view(m->grad_buf, m->grad_dtype, bk->lo, n);
    if (!d->sharded) {
        d->grad_work[b] = mc_comm_all_reduce_async(d->group, m->be, &in, MC_REDUCE_SUM);
        return;
    }
    /* In place: rank r's reduced shard lands at its own position in the bucket. */
    int64_t chunk = n / d->group->size;
    mc_tensor out = flat_view(m->grad_buf, m->grad_dtype, bk->lo + d->group->rank * chunk, chunk);
    d->grad_work[b] = mc_comm_reduce_scatter_async(d->group, m->be, &out, &in);
}

static void gather_bucket(mc_ddp *d, int b) {
    mc_model *m = d->model;
    const mc_grad_bucket *bk = &m->buckets[b];
    int64_t n = bk->hi - bk->lo, chunk = n / d->group->size;
    mc_tensor out = flat_view(m->param_buf, m->param_dtype, bk->lo, n);
    mc_tensor in = flat_view(m->param_buf, m->param_dtype, bk->lo + d->group->rank * chunk, chunk);
    d->param_work[b] = mc_comm_all_gather_async(d->group, m->be, &out, &in);
}

static void wait_gather(mc_ddp *d, int b) {
    if (d->param_work[b]) mc_comm_wait(d->param_work[b]);
    d->param_work[b] = NULL;
}

static void on_grads_ready(void *ctx, int64_t frontier) {
    mc_ddp *d = ctx;
    if (!d->reducing || !d->overlap_grad) return;
    mc_model *m = d->model;
    while (d->next_bucket < m->nbuckets && m->buckets[d->next_bucket].lo >= frontier) reduce_bucket(d, d->next_bucket++);
}

static void on_params_needed(void *ctx, int64_t lo, int64_t hi) {
    mc_ddp *d = ctx;
    mc_model *m = d->model;
    for (int b = 0; b < m->nbuckets; b++)
        if (d->param_work[b] && m->buckets[b].lo < hi && m->buckets[b].hi > lo) wait_gather(d, b);
}

void mc_ddp_init(mc_ddp *d, mc_model *m, bool sharded, bool overlap_grad, bool overlap_param) {
    memset(d, 0, sizeof *d);
    d->model = m;
    d->group = &m->comm->dp_cp;
    d->sharded = sharded;
    d->overlap_grad = overlap_grad;
    d->overlap_param = overlap_param && sharded;
    d->grad_work = mc_xcalloc((size_t)m->nbuckets, sizeof(mc_comm_work *));
    d->param_work = mc_xcalloc((size_t)m->nbuckets, sizeof(mc_comm_work *));
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].sync == MC_SYNC_TP_KV_ROWS) {
            d->kv_scratch_numel = (int64_t)m->cfg.num_query_groups * 2 * m->cfg.kv_channels * m->params[i].shape[1];
            break;
        }
    if (d->kv_scratch_numel) d->kv_scratch = m->be->alloc(m->be, (size_t)d->kv_scratch_numel * sizeof(float));
    m->hooks = (mc_model_hooks){.ctx = d, .grads_ready = on_grads_ready, .params_needed = on_params_needed};
}

void mc_ddp_free(mc_ddp *d) {
    if (!d->model) return;
    mc_ddp_wait_params(d);
    d->model->hooks = (mc_model_hooks){0};
    if (d->kv_scratch) d->model->be->free(d->model->be, d->kv_scratch);
    free(d->grad_work);
    free(d->param_work);
    memset(d, 0, sizeof *d);
}

void mc_ddp_begin_microbatch(mc_ddp *d, bool last) {
    d->reducing = last;
    d->next_bucket = 0;
}

void mc_ddp_finish_grads(mc_ddp *d) {
    mc_model *m = d->model;
    while (d->next_bucket < m->nbuckets) reduce_bucket(d, d->next_bucket++);
    for (int b = 0; b < m->nbuckets; b++) {
        if (d->grad_work[b]) mc_comm_wait(d->grad_work[b]);
        d->grad_work[b] = NULL;
    }
    d->reducing = false;
}

void mc_ddp_gather_params(mc_ddp *d) {
    if (!d->sharded) return;
    mc_model *m = d->model;
    for (int b = m->nbuckets - 1; b >= 0; b--) gather_bucket(d, b); /* forward order: the first layers first */
    if (!d->overlap_param) mc_ddp_wait_params(d);
}

void mc_ddp_wait_params(mc_ddp *d) {
    for (int b = 0; b < d->model->nbuckets; b++) wait_gather(d, b);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

mc_model_layout mc_ddp_layout(const mc_config *cfg, int dp_cp_size) {
    const mc_parallel_config *p = &cfg->parallel;
    mc_model_layout l = {0};
    /* Megatron buckets only with --overlap-grad-reduce, by default max(4e7, 1e6 x DP)
     * elements. An explicit --ddp-bucket-size is honoured with or without overlap, so the
     * two runs share one layout and compute bitwise-identical sums. */
    if (p->ddp_bucket_size) {
        l.bucket_elems = p->ddp_bucket_size;
    } else if (p->overlap_grad_reduce) {
        int64_t dflt = 1000000LL * dp_cp_size;
        l.bucket_elems = dflt > 40000000LL ? dflt : 40000000LL;
    }
    /* Equal shards per bucket, NCCL-friendly sizes: lcm(DP, 128) (param_layout.py). */
    l.pad_multiple = p->use_distributed_optimizer ? (int64_t)dp_cp_size * 128 / gcd64(dp_cp_size, 128) : 1;
    return l;
}
