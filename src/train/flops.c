#include "train/flops.h"

#include <stdlib.h>

#include "base/philox.h"
#include "base/timer.h"
#include "tensor/ops.h"

double mc_flops_per_iteration(const mc_config *cfg, int padded_vocab, int64_t batch) {
    const mc_model_config *m = &cfg->model;
    double B = (double)batch, s = m->seq_length, h = m->hidden_size, L = m->num_layers;
    double d = m->kv_channels, q = m->num_attention_heads * d, k = m->num_query_groups * d;
    double f = m->ffn_hidden_size, V = padded_vocab, c = m->swiglu ? 3.0 : 2.0;
    double mlp = B * s * 6.0 * h * c * f * L;
    double proj = B * s * 6.0 * (h * (q + 2.0 * k) + q * h) * L;
    double core = B * s * s * 6.0 * q * L; /* QK^T and PV, halved by the causal mask */
    double logits = B * s * 6.0 * h * V;
    return mlp + proj + core + logits;
}

double mc_measure_gemm_tflops(mc_backend *be) {
    const int64_t n = 1024;
    size_t bytes = (size_t)(n * n) * sizeof(float);
    float *ha = malloc(bytes), *hb = malloc(bytes);
    for (int64_t i = 0; i < n * n; i++) {
        ha[i] = mc_philox_uniform(1, 1, (uint64_t)i) - 0.5f;
        hb[i] = mc_philox_uniform(1, 2, (uint64_t)i) - 0.5f;
    }
    void *a = be->alloc(be, bytes), *b = be->alloc(be, bytes), *c = be->alloc(be, bytes);
    be->copy_h2d(be, a, ha, bytes);
    be->copy_h2d(be, b, hb, bytes);
    mc_tensor ta = mc_tensor_2d(a, MC_F32, n, n), tb = mc_tensor_2d(b, MC_F32, n, n), tc = mc_tensor_2d(c, MC_F32, n, n);
    double best = 1e30;
    /* Best of several: the first runs warm up the threads and caches, and a shared VM's
     * noise only ever makes a run slower. */
    for (int rep = 0; rep < 10; rep++) {
        be->sync(be);
        double t0 = mc_time_now();
        mc_op_gemm(be, &tc, &ta, false, &tb, false, 1.0f, 0.0f);
        be->sync(be);
        double dt = mc_time_now() - t0;
        if (rep > 0 && dt < best) best = dt; /* the first run warms up threads and caches */
    }
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    free(ha);
    free(hb);
    return 2.0 * (double)n * n * n / best / 1e12;
}
