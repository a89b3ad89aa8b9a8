#include "optim/optimizer.h"

#include <math.h>
#include <string.h>

#include "tensor/ops.h"

/* Appends the intersection of [a, a+n) with [lo, hi) as a segment; returns 1 if any. */
static int add_range(mc_adamw_segment *out, int64_t a, int64_t n, int64_t lo, int64_t hi, int64_t state_base) {
    int64_t s = a > lo ? a : lo, e = a + n < hi ? a + n : hi;
    if (e <= s) return 0;
    *out = (mc_adamw_segment){.offset = state_base + (s - lo), .count = e - s, .grad_offset = s};
    return 1;
}

int mc_optimizer_plan(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err) {
    memset(o, 0, sizeof *o);
    o->model = m;
    o->be = m->be;
    o->beta1 = cfg->optim.adam_beta1;
    o->beta2 = cfg->optim.adam_beta2;
    o->eps = cfg->optim.adam_eps;
    o->clip_grad = cfg->optim.clip_grad;
    o->sharded = cfg->parallel.use_distributed_optimizer;
    o->dp_size = m->comm->dp_cp.size;
    o->dp_rank = m->comm->dp_cp.rank;
    if (m->grad_dtype != MC_F32)
        return mc_err_set(err, "the optimizer needs F32 gradients (got %s)", mc_dtype_name(m->grad_dtype));
    int ds = o->sharded ? o->dp_size : 1, dr = o->sharded ? o->dp_rank : 0;

    /* Segments: every parameter intersected with this rank's shard of every bucket; the
     * state buffer holds the shards back to back. */
    int cap = m->nparams * 2 + m->nbuckets;
    o->segments = mc_xcalloc((size_t)cap, sizeof(mc_adamw_segment));
    o->no_wd = mc_xcalloc((size_t)cap, sizeof(bool));
    o->norm_segments = mc_xcalloc((size_t)cap, sizeof(mc_adamw_segment));
    o->state_norm_segments = mc_xcalloc((size_t)cap, sizeof(mc_adamw_segment));
    int64_t state_base = 0;
    for (int b = m->nbuckets - 1; b >= 0; b--) { /* forward (address) order */
        const mc_grad_bucket *bk = &m->buckets[b];
        int64_t chunk = (bk->hi - bk->lo) / ds;
        MC_ASSERT(chunk * ds == bk->hi - bk->lo, "bucket %d of %lld elements does not split into %d shards", b,
                  (long long)(bk->hi - bk->lo), ds);
        int64_t lo = bk->lo + dr * chunk, hi = lo + chunk;
        for (int i = bk->first_param; i <= bk->last_param; i++) {
            const mc_param *p = &m->params[i];
            MC_ASSERT(o->nsegments < cap && o->nnorm < cap);
            if (add_range(&o->segments[o->nsegments], p->offset, p->numel, lo, hi, state_base))
                o->no_wd[o->nsegments++] = p->no_weight_decay;
            int64_t counted = mc_model_unique_prefix(m, p);
            if (add_range(&o->state_norm_segments[o->nnorm], p->offset, counted, lo, hi, state_base)) {
                o->norm_segments[o->nnorm] = o->state_norm_segments[o->nnorm];
                o->norm_segments[o->nnorm].offset = o->norm_segments[o->nnorm].grad_offset;
                o->nnorm++;
            }
        }
        state_base += chunk;
    }
    o->state_numel = state_base;
    /* Plain with F32 parameters, the master is the model's own buffer; with BF16 ones it is
     * split unless the config says otherwise. */
    o->split_master = m->param_dtype == MC_BF16 && cfg->optim.store_param_remainders;
    o->owns_master = (o->sharded || m->param_dtype != MC_F32) && !o->split_master;
    MC_ASSERT(o->owns_master || o->split_master || o->state_numel == m->numel);
    return MC_OK;
}

size_t mc_optimizer_state_bytes(const mc_optimizer *o) {
    size_t per = 2 * sizeof(float) + (o->owns_master ? sizeof(float) : 0) + (o->split_master ? sizeof(uint16_t) : 0);
    return (size_t)o->state_numel * per;
}

void mc_optimizer_reset_master(mc_optimizer *o) {
    mc_model *m = o->model;
    mc_backend *be = o->be;
    if (o->split_master) { /* the BF16 parameters are the master's high halves already */
        be->zero(be, o->param_lo, (size_t)o->state_numel * sizeof(uint16_t));
        return;
    }
    if (!o->owns_master) return;
    /* The F32 master as the exact widening of the model's parameters (Megatron copies its
     * fp32 main params from the bf16 model params). */
    be->zero(be, o->master, (size_t)o->state_numel * sizeof(float));
    size_t esz = mc_dtype_size(m->param_dtype);
    for (int s = 0; s < o->nsegments; s++) {
        const mc_adamw_segment *sg = &o->segments[s];
        mc_tensor dst = mc_tensor_1d(o->master + sg->offset, MC_F32, sg->count);
        mc_tensor src = mc_tensor_1d((char *)m->param_buf + (size_t)sg->grad_offset * esz, m->param_dtype, sg->count);
        mc_op_convert(be, &dst, &src);
    }
}

void mc_optimizer_alloc(mc_optimizer *o) {
    mc_model *m = o->model;
    mc_backend *be = o->be;
    size_t bytes = (size_t)o->state_numel * sizeof(float);
    if (o->split_master) o->param_lo = be->alloc(be, (size_t)o->state_numel * sizeof(uint16_t));
    else if (o->owns_master) o->master = be->alloc(be, bytes);
    else o->master = m->param_buf;
    mc_optimizer_reset_master(o);
    o->sumsq_dev = be->alloc(be, 2 * sizeof(double));
    o->sumsq_host = be->host_alloc(be, sizeof(double));
    o->exp_avg = be->alloc(be, bytes);
    o->exp_avg_sq = be->alloc(be, bytes);
    be->zero(be, o->exp_avg, bytes);
    be->zero(be, o->exp_avg_sq, bytes);
}

int mc_optimizer_create(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err) {
    MC_TRY(mc_optimizer_plan(o, m, cfg, err));
    mc_optimizer_alloc(o);
    return MC_OK;
}

void mc_optimizer_free(mc_optimizer *o) {
    if (!o->be) return;
    if (o->owns_master) o->be->free(o->be, o->master);
    if (o->param_lo) o->be->free(o->be, o->param_lo);
    o->be->free(o->be, o->sumsq_dev);
    o->be->host_free(o->be, o->sumsq_host);
    o->be->free(o->be, o->exp_avg);
    o->be->free(o->be, o->exp_avg_sq);
    free(o->segments);
    free(o->no_wd);
    free(o->norm_segments);
    free(o->state_norm_segments);
    memset(o, 0, sizeof *o);
}

/* Sums this rank's counted ranges of buf (numel elements) into *out (backend memory) and
 * reduces them over the ranks that hold the other parts: data-parallel ranks (when
 * sharded) and model-parallel ranks. */
static void global_sumsq(mc_optimizer *o, double *out, float *buf, int64_t numel, const mc_adamw_segment *segs) {
    mc_tensor t = mc_tensor_1d(out, MC_F64, 1), b = mc_tensor_1d(buf, MC_F32, numel);
    mc_op_sumsq_segments(o->be, &t, &b, segs, o->nnorm);
    if (o->sharded) mc_comm_all_reduce(&o->model->comm->dp_cp, o->be, &t, MC_REDUCE_SUM);
    mc_comm_all_reduce(&o->model->comm->mp, o->be, &t, MC_REDUCE_SUM);
}

/* The split master's halves, as tensors over the model's BF16 parameters and param_lo. */
static void split_tensors(const mc_optimizer *o, mc_tensor *hi, mc_tensor *lo) {
    *hi = mc_tensor_1d(o->model->param_buf, MC_BF16, o->model->numel);
    *lo = mc_tensor_1d(o->param_lo, MC_U16, o->state_numel);
}

void mc_optimizer_master_join(mc_optimizer *o) {
    if (!o->split_master) return;
    mc_model *m = o->model;
    MC_ASSERT(!m->grads_held, "the F32 master cannot be joined into a gradient buffer that holds gradients");
    mc_tensor hi, lo, master = mc_tensor_1d(m->grad_buf, MC_F32, m->numel);
    split_tensors(o, &hi, &lo);
    mc_op_master_join(o->be, &master, &hi, &lo, o->segments, o->nsegments);
}

const float *mc_optimizer_master_of(const mc_optimizer *o, int segment) {
    const mc_adamw_segment *sg = &o->segments[segment];
    return o->split_master ? (const float *)o->model->grad_buf + sg->grad_offset : o->master + sg->offset;
}

void mc_optimizer_master_release(mc_optimizer *o) {
    if (!o->split_master) return;
    mc_model *m = o->model;
    for (int s = 0; s < o->nsegments; s++)
        o->be->zero(o->be, (float *)m->grad_buf + o->segments[s].grad_offset, (size_t)o->segments[s].count * sizeof(float));
}

double mc_optimizer_params_norm(mc_optimizer *o) {
    double s = 0;
    if (o->split_master) { /* the joined master lies at grad offsets, as the norm segments do */
        mc_optimizer_master_join(o);
        global_sumsq(o, o->sumsq_dev + 1, o->model->grad_buf, o->model->numel, o->norm_segments);
        mc_optimizer_master_release(o);
    } else {
        global_sumsq(o, o->sumsq_dev + 1, o->master, o->state_numel, o->state_norm_segments);
    }
    o->be->copy_d2h(o->be, &s, o->sumsq_dev + 1, sizeof s);
    return sqrt(s);
}

int64_t mc_optimizer_count_zeros(mc_optimizer *o) {
    double zeros = 0;
    for (int i = 0; i < o->nnorm; i++) {
        mc_tensor v = mc_tensor_1d((float *)o->model->grad_buf + o->norm_segments[i].offset, MC_F32,
                                   o->norm_segments[i].count);
        zeros += (double)mc_op_count_zeros(o->be, &v);
    }
    if (o->sharded) mc_comm_all_reduce_host_f64(&o->model->comm->dp_cp, &zeros, 1, MC_REDUCE_SUM);
    mc_comm_all_reduce_host_f64(&o->model->comm->mp, &zeros, 1, MC_REDUCE_SUM);
    return (int64_t)zeros;
}

void mc_optimizer_step(mc_optimizer *o, double lr, double wd, double loss_scale) {
    mc_model *m = o->model;
    MC_ASSERT(o->pending_loss_scale == 0, "mc_optimizer_step: the previous step was not finished");
    MC_ASSERT(loss_scale > 0, "mc_optimizer_step: loss scale %g", loss_scale);
    global_sumsq(o, o->sumsq_dev, m->grad_buf, m->numel, o->norm_segments);
    o->be->copy_d2h_async(o->be, o->sumsq_host, o->sumsq_dev, sizeof(double));
    for (int i = 0; i < o->nsegments; i++) o->segments[i].weight_decay = o->no_wd[i] ? 0.0f : (float)wd;
    o->step++; /* taken back by mc_optimizer_finish_step if the update skips */
    mc_adamw_desc d = {
        .param = o->master,
        .grad = m->grad_buf,
        .exp_avg = o->exp_avg,
        .exp_avg_sq = o->exp_avg_sq,
        .param_copy = o->master == m->param_buf ? mc_tensor_none() : mc_tensor_1d(m->param_buf, m->param_dtype, m->numel),
        .param_lo = o->param_lo,
        .segments = o->segments,
        .nsegments = o->nsegments,
        .lr = (float)lr,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .step = o->step,
        .grad_sumsq = o->sumsq_dev,
        .loss_scale = loss_scale,
        .clip_grad = o->clip_grad,
        .state_numel = o->state_numel,
        .grad_numel = m->numel,
    };
    mc_op_adamw(o->be, &d);
    mc_model_zero_grads(m);
    o->pending_loss_scale = loss_scale;
}

bool mc_optimizer_finish_step(mc_optimizer *o, double *grad_norm) {
    MC_ASSERT(o->pending_loss_scale > 0, "mc_optimizer_finish_step: no step in flight");
    o->be->wait_copies(o->be);
    double s = *o->sumsq_host, loss_scale = o->pending_loss_scale;
    o->pending_loss_scale = 0;
    *grad_norm = sqrt(s) / loss_scale; /* the update skipped exactly when this is not finite */
    bool taken = isfinite(*grad_norm);
    if (!taken) o->step--;
    return taken;
}
