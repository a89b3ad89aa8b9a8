#include "optim/ddp.h"

#include <string.h>

static mc_tensor bucket_view(const mc_model *m, void *buf, mc_dtype dt, int64_t lo, int64_t n) {
    return mc_tensor_1d((char *)buf + (size_t)lo * mc_dtype_size(dt), dt, n);
}

static void reduce_bucket(mc_ddp *d, int b) {
    mc_model *m = d->model;
    const mc_grad_bucket *bk = &m->buckets[b];
    int64_t n = bk->hi - bk->lo;
    mc_tensor in = bucket_view(m, m->grad_buf, m->grad_dtype, bk->lo, n);
    if (!d->sharded) {
        mc_comm_all_reduce(d->group, m->be, &in, MC_REDUCE_SUM);
        return;
    }
    /* In place: rank r's reduced shard lands at its own position in the bucket. */
    int64_t chunk = n / d->group->size;
    mc_tensor out = bucket_view(m, m->grad_buf, m->grad_dtype, bk->lo + d->group->rank * chunk, chunk);
    mc_comm_reduce_scatter(d->group, m->be, &out, &in);
}

static void gather_bucket(mc_ddp *d, int b) {
    mc_model *m = d->model;
    const mc_grad_bucket *bk = &m->buckets[b];
    int64_t n = bk->hi - bk->lo, chunk = n / d->group->size;
    mc_tensor out = bucket_view(m, m->param_buf, m->param_dtype, bk->lo, n);
    mc_tensor in = bucket_view(m, m->param_buf, m->param_dtype, bk->lo + d->group->rank * chunk, chunk);
    mc_comm_all_gather(d->group, m->be, &out, &in);
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
        if (d->gather_pending[b] && m->buckets[b].lo < hi && m->buckets[b].hi > lo) d->gather_pending[b] = false;
}

void mc_ddp_init(mc_ddp *d, mc_model *m, bool sharded, bool overlap_grad, bool overlap_param) {
    memset(d, 0, sizeof *d);
    d->model = m;
    d->group = &m->comm->dp_cp;
    d->sharded = sharded;
    d->overlap_grad = overlap_grad;
    d->overlap_param = overlap_param && sharded;
    d->gather_pending = mc_xcalloc((size_t)m->nbuckets, sizeof(bool));
    m->hooks = (mc_model_hooks){.ctx = d, .grads_ready = on_grads_ready, .params_needed = on_params_needed};
}

void mc_ddp_free(mc_ddp *d) {
    if (d->model) d->model->hooks = (mc_model_hooks){0};
    free(d->gather_pending);
    memset(d, 0, sizeof *d);
}

void mc_ddp_begin_microbatch(mc_ddp *d, bool last) {
    d->reducing = last;
    d->next_bucket = 0;
}

void mc_ddp_finish_grads(mc_ddp *d) {
    mc_model *m = d->model;
    while (d->next_bucket < m->nbuckets) reduce_bucket(d, d->next_bucket++);
    d->reducing = false;
}

void mc_ddp_gather_params(mc_ddp *d) {
    if (!d->sharded) return;
    mc_model *m = d->model;
    for (int b = m->nbuckets - 1; b >= 0; b--) { /* forward order: the first layers first */
        gather_bucket(d, b);
        d->gather_pending[b] = d->overlap_param;
    }
}

void mc_ddp_wait_params(mc_ddp *d) {
    for (int b = 0; b < d->model->nbuckets; b++) d->gather_pending[b] = false;
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
    /* Megatron buckets only with --overlap-grad-reduce: max(4e7, 1e6 x DP) elements. */
    if (p->overlap_grad_reduce) {
        int64_t dflt = 1000000LL * dp_cp_size;
        l.bucket_elems = p->ddp_bucket_size ? p->ddp_bucket_size : (dflt > 40000000LL ? dflt : 40000000LL);
    }
    /* Equal shards per bucket, NCCL-friendly sizes: lcm(DP, 128) (param_layout.py). */
    l.pad_multiple = p->use_distributed_optimizer ? (int64_t)dp_cp_size * 128 / gcd64(dp_cp_size, 128) : 1;
    return l;
}
