/* init.c: fill and the Philox normal weight init. */
#include "backend/cpu/cpu_internal.h"
#include "base/philox.h"

void mc_cpu_fill(mc_backend *be, mc_tensor *x, double value) {
    (void)be;
    int64_t n = mc_tensor_numel(x);
    if (x->dtype == MC_F64) {
        double *d = x->data;
        for (int64_t i = 0; i < n; i++) d[i] = value;
        return;
    }
    float v = (float)value;
    for (int64_t i = 0; i < n; i++) mc_cpu_store_f32(x->data, x->dtype, i, &v, 1);
}

void mc_cpu_init_normal(mc_backend *be, mc_tensor *p, uint64_t seed, uint64_t stream, double std, const int64_t *row_index,
                        int64_t row_stride, int64_t col_offset) {
    (void)be;
    int64_t rows = p->ndim == 2 ? p->shape[0] : 1, cols = p->ndim == 2 ? p->shape[1] : mc_tensor_numel(p);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double v = std * mc_philox_normal(seed, stream, (uint64_t)(row_index[r] * row_stride + col_offset + c));
            if (p->dtype == MC_F64) {
                ((double *)p->data)[r * cols + c] = v;
            } else {
                float f = (float)v;
                mc_cpu_store_f32(p->data, p->dtype, r * cols + c, &f, 1);
            }
        }
    }
}
