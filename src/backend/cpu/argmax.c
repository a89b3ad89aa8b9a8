/* argmax.c: the greedy choice of generation (backend.h's argmax_rows): the id of each
 * row's largest logit over the vocabulary shards, the lowest among equals; and the next
 * decode step's inputs from it (decode_advance). */
#ifdef REAL

static void RNAME(argmax_rows)(int32_t *ids, const REAL *x, int64_t n, int64_t shards, int64_t cols, int64_t vocab) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; b++) {
        int64_t best = 0;
        REAL bv = -INFINITY;
        for (int64_t r = 0; r < shards; r++) {
            const REAL *row = x + (r * n + b) * cols;
            for (int64_t j = 0; j < cols && r * cols + j < vocab; j++)
                if (row[j] > bv) { /* strictly: the lowest id among equals */
                    bv = row[j];
                    best = r * cols + j;
                }
        }
        ids[b] = (int32_t)best;
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#include <math.h>

#define MC_CPU_TEMPLATE "backend/cpu/argmax.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_argmax_rows(mc_backend *be, mc_tensor *ids, const mc_tensor *x, int64_t vocab) {
    (void)be;
    const int64_t n = mc_tensor_numel(ids), cols = mc_cpu_cols(x);
    MC_CPU_DISPATCH(x->dtype, argmax_rows, ids->data, x->data, n, mc_cpu_rows(x) / n, cols, vocab);
}

void mc_cpu_decode_advance(mc_backend *be, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap) {
    (void)be;
    int32_t *t = tokens->data, *p = pos->data;
    const int32_t *id = ids->data;
    for (int64_t b = 0; b < mc_tensor_numel(ids); b++) {
        t[b] = id[b];
        p[b] = p[b] + 1 < cap ? p[b] + 1 : (int32_t)(cap - 1);
    }
}

#endif
