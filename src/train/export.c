/* export.c: the model's parameters as one safetensors file of full (unsharded) F32
 * tensors with Megatron's names: tensor-parallel shards are gathered over the TP group
 * and put back at their global rows and columns. World rank 0 writes (atomically); the
 * other ranks take part in the gathers. */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "tensor/ops.h"
#include "train/trainer_internal.h"

int mc_trainer_export_params(mc_trainer *t, const char *path, mc_err *err) {
    mc_model *m = &t->model;
    mc_backend *be = t->be;
    mc_trainer_finish(t);
    mc_ddp_wait_params(&t->ddp);
    /* This rank's parameters on the host in F32. */
    float *local = mc_xmalloc(sizeof(float) * (size_t)m->numel);
    float *dev_f32 = be->alloc(be, sizeof(float) * (size_t)m->numel);
    mc_tensor src = mc_tensor_1d(m->param_buf, m->param_dtype, m->numel), dst = mc_tensor_1d(dev_f32, MC_F32, m->numel);
    mc_op_convert(be, &dst, &src);
    be->copy_d2h(be, local, dev_f32, sizeof(float) * (size_t)m->numel);
    be->free(be, dev_f32);

    /* Host buffers travel through a CPU backend's collectives. */
    mc_backend *host = mc_backend_cpu_create();
    int tp = m->tp;
    bool writer = t->comm.rank == 0;
    mc_safetensors_writer *w = writer ? mc_safetensors_writer_create() : NULL;
    int rc = MC_OK;
    for (int i = 0; i < m->nparams && rc == MC_OK; i++) {
        const mc_param *p = &m->params[i];
        float *shards = mc_xmalloc(sizeof(float) * (size_t)(p->numel * tp));
        mc_tensor in = mc_tensor_1d(local + p->offset, MC_F32, p->numel), out = mc_tensor_1d(shards, MC_F32, p->numel * tp);
        mc_comm_all_gather(&t->comm.tp, host, &out, &in);
        if (writer) {
            int64_t gr = p->global_shape[0], gc = p->global_shape[1];
            float *full = mc_xcalloc((size_t)(gr * gc), sizeof(float));
            for (int r = 0; r < tp; r++)
                for (int64_t row = 0; row < p->shape[0]; row++)
                    for (int64_t col = 0; col < p->shape[1]; col++) {
                        int64_t R, C;
                        mc_model_local_to_global_on(m, p, r, row, col, &R, &C);
                        full[R * gc + C] = shards[(int64_t)r * p->numel + row * p->shape[1] + col];
                    }
            int64_t shape[2] = {gr, gc};
            rc = mc_safetensors_writer_add_copy(w, p->name, MC_F32, p->ndim, shape, full, err);
            free(full);
        }
        free(shards);
    }
    if (writer && rc == MC_OK) rc = mc_safetensors_writer_save(w, path, err);
    if (w) mc_safetensors_writer_free(w);
    host->destroy(host);
    free(local);
    /* Every rank learns whether the file was written. */
    double ok = rc == MC_OK ? 1.0 : 0.0;
    mc_comm_all_reduce_host_f64(&t->comm.world, &ok, 1, MC_REDUCE_MIN);
    if (rc != MC_OK) return mc_err_prefix(err, "--export-params %s: ", path);
    if (ok < 1.0) return mc_err_set(err, "--export-params %s: rank 0 could not write the file", path);
    return MC_OK;
}
