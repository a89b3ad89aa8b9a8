/* ckpt_layout.c: the slicing rule. A rank's shard of a parameter is a set of global rows
 * (mc_model_local_to_global_on: contiguous blocks for row splits, a query group's heads and
 * its key and value heads for QKV, gate and up halves for SwiGLU) times a column range
 * (column splits); its local elements are row-major. Any range of them is a few boxes of
 * the global tensor, each contiguous in local memory. */
#include "ckpt/ckpt_internal.h"

#include <stdlib.h>

const char *const mc_ckpt_kind_prefix[CKPT_NKINDS] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};

static void push(mc_ckpt_boxes *b, int64_t row, int64_t col, int64_t rows, int64_t cols, int64_t local) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->v = mc_xrealloc(b->v, sizeof(mc_ckpt_box) * (size_t)b->cap);
    }
    b->v[b->n++] = (mc_ckpt_box){.row = row, .col = col, .rows = rows, .cols = cols, .local = local};
}

void mc_ckpt_boxes_of(const mc_model *m, const mc_param *p, int tp_rank, int64_t lo, int64_t hi, mc_ckpt_boxes *out) {
    const int64_t C = p->shape[1];
    if (hi > p->numel) hi = p->numel;
    if (lo < 0) lo = 0;
    if (hi <= lo) return;
    int64_t col0, grow;
    mc_model_local_to_global_on(m, p, tp_rank, 0, 0, &grow, &col0); /* every row starts at col0 */
    int64_t r = lo / C, c = lo % C;
    const int64_t r_end = hi / C, c_end = hi % C; /* the last row holds [0, c_end) when c_end > 0 */
    if (c > 0) { /* a partial first row */
        int64_t stop = r == r_end ? c_end : C;
        mc_model_local_to_global_on(m, p, tp_rank, r, 0, &grow, &col0);
        push(out, grow, col0 + c, 1, stop - c, r * C + c);
        r++;
    }
    /* whole rows [r, r_end), grouped into runs of consecutive global rows */
    while (r < r_end) {
        int64_t g0, unused;
        mc_model_local_to_global_on(m, p, tp_rank, r, 0, &g0, &unused);
        int64_t n = 1;
        while (r + n < r_end) {
            int64_t g;
            mc_model_local_to_global_on(m, p, tp_rank, r + n, 0, &g, &unused);
            if (g != g0 + n) break;
            n++;
        }
        push(out, g0, col0, n, C, r * C);
        r += n;
    }
    if (c_end > 0 && r == r_end) { /* a partial last row (one that began mid-row is done) */
        mc_model_local_to_global_on(m, p, tp_rank, r_end, 0, &grow, &col0);
        push(out, grow, col0, 1, c_end, r_end * C);
    }
}

void mc_ckpt_boxes_free(mc_ckpt_boxes *b) {
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

int mc_ckpt_param_at(const mc_model *m, int64_t offset) {
    int lo = 0, hi = m->nparams - 1;
    while (lo < hi) { /* the last parameter whose offset <= offset */
        int mid = (lo + hi + 1) / 2;
        if (m->params[mid].offset <= offset) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
