#include "optim/optimizer.h"

#include <math.h>
#include <string.h>

int mc_optimizer_create(mc_optimizer *o, mc_model *m, const mc_config *cfg, mc_err *err) {
    memset(o, 0, sizeof *o);
    o->model = m;
    o->be = m->be;
    o->beta1 = cfg->optim.adam_beta1;
    o->beta2 = cfg->optim.adam_beta2;
    o->eps = cfg->optim.adam_eps;
    o->clip_grad = cfg->optim.clip_grad;
    if (m->grad_dtype != MC_F32)
        return mc_err_set(err, "the optimizer needs F32 gradients (got %s)", mc_dtype_name(m->grad_dtype));
    size_t bytes = (size_t)m->numel * sizeof(float);
    mc_backend *be = o->be;
    if (m->param_dtype == MC_F32) {
        o->master = m->param_buf;
    } else {
        /* Low-precision model weights: the F32 master starts as their exact widening. */
        o->master = be->alloc(be, bytes);
        o->owns_master = true;
        mc_tensor dst = mc_tensor_1d(o->master, MC_F32, m->numel);
        mc_tensor src = mc_tensor_1d(m->param_buf, m->param_dtype, m->numel);
        be->convert(be, &dst, &src);
    }
    o->exp_avg = be->alloc(be, bytes);
    o->exp_avg_sq = be->alloc(be, bytes);
    be->zero(be, o->exp_avg, bytes);
    be->zero(be, o->exp_avg_sq, bytes);
    o->segments = mc_xcalloc((size_t)m->nparams, sizeof(mc_adamw_segment));
    o->norm_segments = mc_xcalloc((size_t)m->nparams, sizeof(mc_adamw_segment));
    return MC_OK;
}

void mc_optimizer_free(mc_optimizer *o) {
    if (!o->be) return;
    if (o->owns_master) o->be->free(o->be, o->master);
    o->be->free(o->be, o->exp_avg);
    o->be->free(o->be, o->exp_avg_sq);
    free(o->segments);
    free(o->norm_segments);
    memset(o, 0, sizeof *o);
}

/* Sum of squares over this rank's parameters of an F32 buffer in the model's layout,
 * skipping tensor-parallel duplicates on ranks other than TP rank 0, then summed over the
 * model-parallel group. */
static double global_sumsq(mc_optimizer *o, const float *buf) {
    mc_model *m = o->model;
    int n = 0;
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        if (p->split == MC_TP_REPLICATED && m->tp_rank != 0) continue;
        o->norm_segments[n++] = (mc_adamw_segment){.offset = p->offset, .count = p->numel};
    }
    double local = o->be->sumsq_segments(o->be, buf, o->norm_segments, n);
    mc_comm_all_reduce_host_f64(&m->comm->mp, &local, 1, MC_REDUCE_SUM);
    return local;
}

double mc_optimizer_grad_norm(mc_optimizer *o) { return sqrt(global_sumsq(o, o->model->grad_buf)); }

double mc_optimizer_params_norm(mc_optimizer *o) { return sqrt(global_sumsq(o, o->master)); }

int64_t mc_optimizer_count_zeros(mc_optimizer *o) {
    mc_model *m = o->model;
    double zeros = 0;
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        if (p->split == MC_TP_REPLICATED && m->tp_rank != 0) continue;
        mc_tensor v = mc_tensor_1d((float *)m->grad_buf + p->offset, MC_F32, p->numel);
        zeros += (double)o->be->count_zeros(o->be, &v);
    }
    mc_comm_all_reduce_host_f64(&m->comm->mp, &zeros, 1, MC_REDUCE_SUM);
    return (int64_t)zeros;
}

void mc_optimizer_step(mc_optimizer *o, double lr, double wd, double grad_norm) {
    mc_model *m = o->model;
    double scale = 1.0;
    if (o->clip_grad > 0) {
        double coeff = o->clip_grad / (grad_norm + 1.0e-6); /* Megatron's clip_grad_by_total_norm_fp32 */
        if (coeff < 1.0) scale = coeff;
    }
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        o->segments[i] = (mc_adamw_segment){.offset = p->offset, .count = p->numel,
                                            .weight_decay = p->no_weight_decay ? 0.0f : (float)wd};
    }
    o->step++;
    mc_adamw_desc d = {
        .param = o->master,
        .grad = m->grad_buf,
        .exp_avg = o->exp_avg,
        .exp_avg_sq = o->exp_avg_sq,
        .param_copy = o->owns_master ? mc_tensor_1d(m->param_buf, m->param_dtype, m->numel) : mc_tensor_none(),
        .segments = o->segments,
        .nsegments = m->nparams,
        .lr = (float)lr,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .grad_scale = (float)scale,
        .step = o->step,
    };
    o->be->adamw(o->be, &d);
    o->be->zero(o->be, m->grad_buf, (size_t)m->numel * mc_dtype_size(m->grad_dtype));
}
