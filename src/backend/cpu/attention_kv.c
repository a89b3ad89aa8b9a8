/* attention_kv.c: causal attention of new tokens over a key/value cache, for generation
 * (backend.h's attention_kv_fwd). The keys and values of the new tokens are stored into
 * the cache first; then each new query (s, b, head h) at its position p reads cache
 * positions 0 .. p of its sequence and group with a streaming softmax in REAL (float for
 * F32, double for F64), as attention.c's forward, so that a prompt run through the cache in
 * one piece gives what the full-sequence forward gives. Parallel over (s, b, group). */
#ifdef REAL

static void RNAME(attention_kv_fwd)(REAL *out, REAL *cache, const REAL *qkv, const int32_t *pos, int64_t S, int64_t B,
                                    int64_t cap, int heads, int groups, int d, float scale) {
    const int hpg = heads / groups;
    const int64_t qrow = (int64_t)(heads + 2 * groups) * d; /* one token's packed qkv */
    const int64_t crow = (int64_t)groups * 2 * d;           /* one position of one sequence */
    for (int64_t t = 0; t < S * B; t++) { /* store the new keys and values */
        const int64_t b = t % B, p = pos[t];
        MC_ASSERT(p >= 0 && p < cap, "cpu attention_kv_fwd: position %lld of token %lld is outside the cache [0, %lld)",
                  (long long)p, (long long)t, (long long)cap);
        for (int g = 0; g < groups; g++)
            memcpy(cache + (b * cap + p) * crow + (int64_t)g * 2 * d, qkv + t * qrow + (int64_t)g * (hpg + 2) * d + (int64_t)hpg * d,
                   sizeof(REAL) * 2 * (size_t)d);
    }
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int64_t t = 0; t < S * B; t++)
        for (int g = 0; g < groups; g++) {
            REAL acc[512], p_row[256];
            const int64_t b = t % B, last = pos[t];
            const REAL *kv = cache + b * cap * crow + (int64_t)g * 2 * d; /* position j at kv + j crow */
            for (int hh = 0; hh < hpg; hh++) {
                const int h = g * hpg + hh;
                const REAL *q = qkv + t * qrow + (int64_t)g * (hpg + 2) * d + (int64_t)hh * d;
                REAL m = -INFINITY, l = 0;
                for (int c = 0; c < d; c++) acc[c] = 0;
                for (int64_t j0 = 0; j0 <= last; j0 += 256) { /* keys in blocks of 256 */
                    const int64_t jn = last - j0 + 1 < 256 ? last - j0 + 1 : 256;
                    REAL bm = -INFINITY;
                    for (int64_t j = 0; j < jn; j++) {
                        const REAL *k = kv + (j0 + j) * crow;
                        REAL dot = 0;
                        for (int c = 0; c < d; c++) dot += q[c] * k[c];
                        p_row[j] = dot * (REAL)scale;
                        bm = p_row[j] > bm ? p_row[j] : bm;
                    }
                    const REAL mn = bm > m ? bm : m, corr = R_EXP(m - mn);
                    l *= corr;
                    for (int c = 0; c < d; c++) acc[c] *= corr;
                    for (int64_t j = 0; j < jn; j++) {
                        const REAL pj = R_EXP(p_row[j] - mn);
                        const REAL *v = kv + (j0 + j) * crow + d;
                        l += pj;
                        for (int c = 0; c < d; c++) acc[c] += pj * v[c];
                    }
                    m = mn;
                }
                REAL *o = out + t * (int64_t)heads * d + (int64_t)h * d;
                for (int c = 0; c < d; c++) o[c] = acc[c] / l;
            }
        }
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

#define MC_CPU_TEMPLATE "backend/cpu/attention_kv.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_attention_kv_fwd(mc_backend *be, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                             const mc_tensor *pos, const mc_attn_desc *d) {
    (void)be;
    const int64_t cap = mc_tensor_numel(cache) / (d->batch * d->groups * 2 * d->head_dim);
    MC_CPU_DISPATCH(qkv->dtype, attention_kv_fwd, out->data, cache->data, qkv->data, pos->data, d->seq, d->batch, cap,
                    d->heads, d->groups, d->head_dim, d->softmax_scale);
}

#endif
