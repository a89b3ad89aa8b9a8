/* rope.c: rotary position embedding, in place on the q and k heads of a packed QKV
 * activation [S, B, groups, heads/groups + 2, d] (HF Llama's rotate-half layout). For pair
 * k < rot_dim/2 of a head, x1 = x[k], x2 = x[k + rot_dim/2] and (cos, sin) = table[pos][k]:
 *   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin.
 * The map is a rotation, so its transpose (inverse = true: sin -> -sin) is both its inverse
 * and its backward. Dims >= rot_dim and the value heads are untouched. */
#ifdef REAL

static void RNAME(rope)(REAL *qkv, const REAL *restrict cos_tab, const REAL *restrict sin_tab,
                        const int32_t *restrict pos, int64_t max_pos, int64_t seq, int64_t batch, int heads,
                        int groups, int d, int rot_dim, bool inverse) {
    int per_group = heads / groups + 2, half = rot_dim / 2;
    int64_t ntok = seq * batch, token_stride = (int64_t)groups * per_group * d;
    REAL sign = inverse ? -1 : 1;
#pragma omp parallel for schedule(static) if (ntok * token_stride > 16384)
    for (int64_t t = 0; t < ntok; t++) {
        int64_t p = pos ? pos[t] : t / batch;
        MC_ASSERT(p >= 0 && p < max_pos, "cpu rope: position %lld of token %lld is outside the table [0, %lld)",
                  (long long)p, (long long)t, (long long)max_pos);
        const REAL *c = cos_tab + p * half, *s = sin_tab + p * half;
        for (int g = 0; g < groups; g++) {
            for (int hh = 0; hh < per_group - 1; hh++) { /* the group's query heads, then its key head */
                REAL *x = qkv + t * token_stride + ((int64_t)g * per_group + hh) * d;
                REAL *restrict x1 = x, *restrict x2 = x + half;
                for (int k = 0; k < half; k++) {
                    REAL a = x1[k], b = x2[k], sk = sign * s[k];
                    x1[k] = a * c[k] - b * sk;
                    x2[k] = b * c[k] + a * sk;
                }
            }
        }
    }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#define MC_CPU_TEMPLATE "backend/cpu/rope.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_rope(mc_backend *be, mc_tensor *qkv, const mc_rope_desc *d, bool inverse) {
    (void)be;
    const int32_t *pos = mc_tensor_present(&d->pos) ? d->pos.data : NULL;
    MC_CPU_DISPATCH(qkv->dtype, rope, qkv->data, d->cos.data, d->sin.data, pos, mc_cpu_rows(&d->cos), d->seq, d->batch,
                    d->heads, d->groups, d->head_dim, d->rot_dim, inverse);
}

#endif
