/* embedding.c: vocab-parallel embedding lookup (forward) and its gradient (backward).
 * This rank holds table rows for ids [vocab_start, vocab_start + rows); other ids read as
 * zeros forward and are skipped backward (Megatron's VocabParallelEmbedding masking). */
#ifdef REAL

/* y[t] (=, or += when accumulate) table[ids[t] - vocab_start], zeros for ids off this rank. */
static void RNAME(embedding_fwd)(REAL *restrict y, const int32_t *restrict ids, const REAL *restrict table,
                                 int64_t ntok, int64_t rows, int64_t h, int64_t vocab_start, bool accumulate) {
#pragma omp parallel for schedule(static) if (ntok * h > 32768)
    for (int64_t t = 0; t < ntok; t++) {
        int64_t r = (int64_t)ids[t] - vocab_start;
        REAL *yt = y + t * h;
        if (r >= 0 && r < rows) {
            const REAL *src = table + r * h;
            if (accumulate)
                for (int64_t c = 0; c < h; c++) yt[c] += src[c];
            else
                memcpy(yt, src, (size_t)h * sizeof(REAL));
        } else if (!accumulate) {
            memset(yt, 0, (size_t)h * sizeof(REAL));
        }
    }
}

/* dtable[ids[t] - vocab_start] += dy[t]. Column blocks in parallel, tokens in order inside a
 * block: every dtable element sees its additions in token order whatever the thread count. */
static void RNAME(embedding_bwd)(REAL *restrict dtable, const REAL *restrict dy, const int32_t *restrict ids,
                                 int64_t ntok, int64_t rows, int64_t h, int64_t vocab_start) {
    enum { BLOCK = 64 };
    int64_t nblocks = (h + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (ntok * h > 32768)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * BLOCK, nc = h - c0 < BLOCK ? h - c0 : BLOCK;
        for (int64_t t = 0; t < ntok; t++) {
            int64_t r = (int64_t)ids[t] - vocab_start;
            if (r < 0 || r >= rows) continue;
            REAL *dst = dtable + r * h + c0;
            const REAL *src = dy + t * h + c0;
            for (int64_t c = 0; c < nc; c++) dst[c] += src[c];
        }
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#define MC_CPU_TEMPLATE "backend/cpu/embedding.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_embedding_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                          int64_t vocab_start, bool accumulate) {
    (void)be;
    MC_CPU_DISPATCH(table->dtype, embedding_fwd, y->data, ids->data, table->data, mc_tensor_numel(ids),
                    mc_cpu_rows(table), mc_cpu_cols(table), vocab_start, accumulate);
}

void mc_cpu_embedding_bwd(mc_backend *be, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                          int64_t vocab_start) {
    (void)be;
    MC_CPU_DISPATCH(dtable->dtype, embedding_bwd, dtable->data, dy->data, ids->data, mc_tensor_numel(ids),
                    mc_cpu_rows(dtable), mc_cpu_cols(dtable), vocab_start);
}

#endif
