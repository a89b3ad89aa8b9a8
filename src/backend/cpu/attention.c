/* attention.c: causal self-attention over a packed QKV activation, flash-style: scores are
 * computed per (query block of ATTN_BQ rows, key block of ATTN_BK keys) with a streaming
 * (online) softmax and never stored beyond one block; forward saves only lse, backward
 * recomputes the probabilities from it (FlashAttention-2: dS = P (dP - D), D_i = dO_i . O_i).
 *
 * Layouts (t = s * B + b, sequence first):
 *   qkv  [S, B, groups, heads/groups + 2, d]: a group's query heads, its key head, its value head
 *   out  [S, B, heads, d],  lse [B, heads, S],  seg_start [B, S] (optional, I32)
 * Query (i, b) of head h attends keys j in [seg_start[b, i], i] of kv group h / (heads/groups),
 * with scores softmax_scale q.k. With attention dropout p, the normalized probabilities are
 * kept iff mc_philox_uniform(seed, stream, ((b heads + h) S + i) S + j) >= p and scaled by
 * 1/(1-p); lse is that of the undropped softmax.
 *
 * Parallelism: forward over (b, group, query block), largest blocks first; backward over
 * (b, group), so each task owns the dK/dV of its group and the dQ of the group's query
 * heads: no atomics, and the result is independent of the thread count.
 *
 * The block products go through one register-blocked kernel (mm: 4 rows x 2 vectors of
 * accumulators, GCC vector extensions); this file lets the compiler contract a*b+c into FMA,
 * which the rest of the backend does not (AdamW matches torch's rounding op by op). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(REAL)
#pragma GCC optimize("fp-contract=fast")
#endif
#ifdef REAL

typedef REAL RNAME(vec) __attribute__((vector_size(32)));

static inline RNAME(vec) RNAME(vload)(const REAL *p) {
    RNAME(vec) v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void RNAME(vstore)(REAL *p, RNAME(vec) v) { memcpy(p, &v, sizeof v); }

/* dst[c ld + j] = src[j d + c] for j < n, c < d: the transpose of n packed rows, in tiles of
 * 16 rows so that the writes run along 16 contiguous elements. */
static void RNAME(transpose_rows)(REAL *restrict dst, int64_t ld, const REAL *restrict src, int64_t n, int d) {
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const int jn = (int)(n - j0 < 16 ? n - j0 : 16);
        for (int c = 0; c < d; c++)
            for (int jj = 0; jj < jn; jj++) dst[c * ld + j0 + jj] = src[(j0 + jj) * d + c];
    }
}

/* C[m, n] (=, or += when accumulate) sum_k A(m, k) B[k, n] for m < M, n < N, k < K, where
 * A(m, k) = A[m as + k ak] (so A may be read transposed), B[k, n] = B[k ldb + n] and C's
 * rows are ldc apart. */
static void RNAME(mm)(REAL *restrict C, int64_t ldc, const REAL *restrict A, int64_t as, int64_t ak,
                      const REAL *restrict B, int64_t ldb, int M, int N, int K, bool accumulate) {
    typedef RNAME(vec) vec;
    enum { VL = (int)(sizeof(vec) / sizeof(REAL)), NR = 2 * VL };
    const int M4 = M / 4 * 4, NN = N / NR * NR;
    for (int m0 = 0; m0 < M4; m0 += 4) {
        const REAL *a = A + m0 * as;
        REAL *c = C + m0 * ldc;
        for (int n0 = 0; n0 < NN; n0 += NR) {
            vec c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
            if (accumulate) {
                c00 = RNAME(vload)(c + n0), c01 = RNAME(vload)(c + n0 + VL);
                c10 = RNAME(vload)(c + ldc + n0), c11 = RNAME(vload)(c + ldc + n0 + VL);
                c20 = RNAME(vload)(c + 2 * ldc + n0), c21 = RNAME(vload)(c + 2 * ldc + n0 + VL);
                c30 = RNAME(vload)(c + 3 * ldc + n0), c31 = RNAME(vload)(c + 3 * ldc + n0 + VL);
            }
            for (int k = 0; k < K; k++) {
                const REAL *b = B + k * ldb + n0;
                const vec b0 = RNAME(vload)(b), b1 = RNAME(vload)(b + VL);
                const REAL a0 = a[k * ak], a1 = a[as + k * ak], a2 = a[2 * as + k * ak], a3 = a[3 * as + k * ak];
                c00 += a0 * b0, c01 += a0 * b1;
                c10 += a1 * b0, c11 += a1 * b1;
                c20 += a2 * b0, c21 += a2 * b1;
                c30 += a3 * b0, c31 += a3 * b1;
            }
            RNAME(vstore)(c + n0, c00), RNAME(vstore)(c + n0 + VL, c01);
            RNAME(vstore)(c + ldc + n0, c10), RNAME(vstore)(c + ldc + n0 + VL, c11);
            RNAME(vstore)(c + 2 * ldc + n0, c20), RNAME(vstore)(c + 2 * ldc + n0 + VL, c21);
            RNAME(vstore)(c + 3 * ldc + n0, c30), RNAME(vstore)(c + 3 * ldc + n0 + VL, c31);
        }
    }
    /* the edges: columns [NN, N) of the blocked rows, then all columns of rows [M4, M) */
    for (int m = 0; m < M; m++) {
        const int n_lo = m < M4 ? NN : 0;
        if (n_lo == N) continue;
        REAL *c = C + m * ldc;
        if (!accumulate)
            for (int n = n_lo; n < N; n++) c[n] = 0;
        for (int k = 0; k < K; k++) {
            const REAL a = A[m * as + k * ak], *b = B + k * ldb;
            for (int n = n_lo; n < N; n++) c[n] += a * b[n];
        }
    }
}

/* kp = K, vp = V [S][d] and kt = K^T [d][S] of batch b, kv group g, packed: the rows of qkv
 * lie a multiple of 4 KiB apart in common shapes and would fight over the same cache sets. */
static void RNAME(attn_pack_kv)(const attn_geom *gm, REAL *restrict kp, REAL *restrict vp, REAL *restrict kt,
                                const REAL *restrict qkv, int64_t b, int g) {
    const int d = gm->d, hpg = gm->heads / gm->groups;
    const int64_t S = gm->seq, row_stride = gm->batch * gm->token_stride;
    const REAL *k0 = qkv + b * gm->token_stride + ((int64_t)g * (hpg + 2) + hpg) * d, *v0 = k0 + d;
    for (int64_t j = 0; j < S; j++) {
        memcpy(kp + j * d, k0 + j * row_stride, (size_t)d * sizeof(REAL));
        memcpy(vp + j * d, v0 + j * row_stride, (size_t)d * sizeof(REAL));
    }
    RNAME(transpose_rows)(kt, S, kp, S, d);
}

/* Forward for batch b, kv group g, query rows [i0, i1): all query heads of the group, with
 * the group's keys and values packed by attn_pack_kv (vp = V, kt = K^T). */
static void RNAME(attn_fwd_block)(const attn_geom *gm, REAL *restrict out, REAL *restrict lse,
                                  const REAL *restrict qkv, const REAL *restrict vp, const REAL *restrict kt,
                                  const int32_t *restrict seg, int64_t b, int g, int64_t i0, int64_t i1, char *ws) {
    const int d = gm->d, hpg = gm->heads / gm->groups, mq = (int)(i1 - i0);
    const int64_t S = gm->seq, B = gm->batch, ts = gm->token_stride, row_stride = B * ts;
    const REAL scale = (REAL)gm->scale, keep_scale = (REAL)1 / ((REAL)1 - (REAL)gm->dropout);
    int64_t lo[ATTN_BQ], klo = i0;
    for (int r = 0; r < mq; r++) {
        lo[r] = seg ? seg[b * S + i0 + r] : 0;
        klo = lo[r] < klo ? lo[r] : klo;
    }
    REAL *qs = (REAL *)ws, *o = qs + ATTN_BQ * d, *s = o + ATTN_BQ * d;
    REAL *m = s + ATTN_BQ * ATTN_BK, *l = m + ATTN_BQ;
    float *u = (float *)(l + ATTN_BQ);
    for (int hh = 0; hh < hpg; hh++) {
        const int64_t h = (int64_t)g * hpg + hh;
        for (int r = 0; r < mq; r++) {
            const REAL *q = qkv + (i0 + r) * row_stride + b * ts + ((int64_t)g * (hpg + 2) + hh) * d;
            for (int c = 0; c < d; c++) qs[r * d + c] = q[c] * scale, o[r * d + c] = 0;
            m[r] = -INFINITY, l[r] = 0;
        }
        for (int64_t j0 = klo; j0 < i1; j0 += ATTN_BK) {
            const int jn = (int)(i1 - j0 < ATTN_BK ? i1 - j0 : ATTN_BK);
            RNAME(mm)(s, ATTN_BK, qs, d, 1, kt + j0, S, mq, jn, d, false);
            for (int r = 0; r < mq; r++) { /* online softmax over this row's keys of the block */
                const int64_t i = i0 + r;
                const int jl = (int)(lo[r] > j0 ? lo[r] - j0 : 0), jh = (int)(i + 1 < j0 + jn ? i + 1 - j0 : jn);
                REAL *sr = s + r * ATTN_BK;
                if (jl >= jh) { /* no key of this block is visible to row i */
                    memset(sr, 0, (size_t)jn * sizeof(REAL));
                    continue;
                }
                REAL bm = m[r];
#pragma omp simd reduction(max : bm)
                for (int jj = jl; jj < jh; jj++) bm = sr[jj] > bm ? sr[jj] : bm;
                const REAL corr = R_EXP(m[r] - bm); /* 0 for the first visible block (m = -inf) */
                REAL sum = 0;
#pragma omp simd reduction(+ : sum)
                for (int jj = jl; jj < jh; jj++) {
                    sr[jj] = R_EXP(sr[jj] - bm);
                    sum += sr[jj];
                }
                for (int jj = 0; jj < jl; jj++) sr[jj] = 0;
                for (int jj = jh; jj < jn; jj++) sr[jj] = 0;
                l[r] = l[r] * corr + sum, m[r] = bm;
                if (gm->dropout > 0) {
                    mc_cpu_philox_uniforms(gm->seed, gm->stream, (uint64_t)(((b * gm->heads + h) * S + i) * S + j0 + jl),
                                           jh - jl, u);
                    for (int jj = jl; jj < jh; jj++) sr[jj] = u[jj - jl] >= gm->dropout ? sr[jj] * keep_scale : 0;
                }
                if (corr != 1)
                    for (int c = 0; c < d; c++) o[r * d + c] *= corr;
            }
            RNAME(mm)(o, d, s, ATTN_BK, 1, vp + j0 * d, d, mq, d, jn, true); /* o += P V */
        }
        for (int r = 0; r < mq; r++) {
            const int64_t t = (i0 + r) * B + b;
            REAL *dst = out + (t * gm->heads + h) * d, inv_l = 1 / l[r];
            for (int c = 0; c < d; c++) dst[c] = o[r * d + c] * inv_l;
            lse[(b * gm->heads + h) * S + i0 + r] = m[r] + R_LOG(l[r]);
        }
    }
}

/* Backward for batch b and kv group g: dq of the group's query heads, dk and dv of the group,
 * all written into dqkv. Per (query block, key block): S = Qs K^T, dPd = dO V^T, then per
 * element P = exp(S - lse), Pd = P z, dS = P (dPd z - D) scale (z: the dropout factor), and
 * dV += Pd^T dO, dK += dS^T Q, dQ += dS K. ws: K^T, V^T [d][S], K, V, dK, dV [S][d], block buffers. */
static void RNAME(attn_bwd_group)(const attn_geom *gm, REAL *restrict dqkv, const REAL *restrict dout,
                                  const REAL *restrict qkv, const REAL *restrict out, const REAL *restrict lse,
                                  const int32_t *restrict seg, int64_t b, int g, char *ws) {
    const int d = gm->d, hpg = gm->heads / gm->groups;
    const int64_t S = gm->seq, B = gm->batch, ts = gm->token_stride, row_stride = B * ts, sd = S * d;
    const REAL scale = (REAL)gm->scale, keep_scale = (REAL)1 / ((REAL)1 - (REAL)gm->dropout);
    REAL *kt = (REAL *)ws, *vt = kt + sd, *kp = vt + sd, *vp = kp + sd, *dk = vp + sd, *dv = dk + sd;
    REAL *qs = dv + sd, *qr = qs + ATTN_BQ * d, *dob = qr + ATTN_BQ * d, *dq = dob + ATTN_BQ * d;
    REAL *s = dq + ATTN_BQ * d, *dp = s + ATTN_BQ * ATTN_BK, *dd = dp + ATTN_BQ * ATTN_BK, *ll = dd + ATTN_BQ;
    float *u = (float *)(ll + ATTN_BQ);
    const int64_t koff = b * ts + ((int64_t)g * (hpg + 2) + hpg) * d, voff = koff + d;
    RNAME(attn_pack_kv)(gm, kp, vp, kt, qkv, b, g);
    RNAME(transpose_rows)(vt, S, vp, S, d);
    memset(dk, 0, (size_t)(2 * sd) * sizeof(REAL)); /* dk and dv */
    for (int hh = 0; hh < hpg; hh++) {
        const int64_t h = (int64_t)g * hpg + hh, qoff = b * ts + ((int64_t)g * (hpg + 2) + hh) * d;
        for (int64_t i0 = 0; i0 < S; i0 += ATTN_BQ) {
            const int mq = (int)(S - i0 < ATTN_BQ ? S - i0 : ATTN_BQ);
            const int64_t i1 = i0 + mq;
            int64_t lo[ATTN_BQ], klo = i0;
            for (int r = 0; r < mq; r++) {
                const int64_t t = (i0 + r) * B + b;
                const REAL *q = qkv + (i0 + r) * row_stride + qoff, *o = out + (t * gm->heads + h) * d,
                           *dO = dout + (t * gm->heads + h) * d;
                REAL D = 0;
                for (int c = 0; c < d; c++) {
                    qr[r * d + c] = q[c], qs[r * d + c] = q[c] * scale, dob[r * d + c] = dO[c], dq[r * d + c] = 0;
                    D += dO[c] * o[c];
                }
                dd[r] = D, ll[r] = lse[(b * gm->heads + h) * S + i0 + r];
                lo[r] = seg ? seg[b * S + i0 + r] : 0;
                klo = lo[r] < klo ? lo[r] : klo;
            }
            for (int64_t j0 = klo; j0 < i1; j0 += ATTN_BK) {
                const int jn = (int)(i1 - j0 < ATTN_BK ? i1 - j0 : ATTN_BK);
                RNAME(mm)(s, ATTN_BK, qs, d, 1, kt + j0, S, mq, jn, d, false);   /* scaled scores */
                RNAME(mm)(dp, ATTN_BK, dob, d, 1, vt + j0, S, mq, jn, d, false); /* dO V^T */
                for (int r = 0; r < mq; r++) {
                    const int64_t i = i0 + r;
                    const int jl = (int)(lo[r] > j0 ? lo[r] - j0 : 0), jh = (int)(i + 1 < j0 + jn ? i + 1 - j0 : jn);
                    REAL *sr = s + r * ATTN_BK, *dpr = dp + r * ATTN_BK;
                    for (int jj = 0; jj < jn; jj++)
                        if (jj < jl || jj >= jh) sr[jj] = 0, dpr[jj] = 0;
                    if (jl >= jh) continue;
                    const REAL L = ll[r], D = dd[r];
                    if (gm->dropout > 0) {
                        mc_cpu_philox_uniforms(gm->seed, gm->stream,
                                               (uint64_t)(((b * gm->heads + h) * S + i) * S + j0 + jl), jh - jl, u);
                        for (int jj = jl; jj < jh; jj++) {
                            const REAL p = R_EXP(sr[jj] - L), z = u[jj - jl] >= gm->dropout ? keep_scale : 0;
                            sr[jj] = p * z, dpr[jj] = p * (dpr[jj] * z - D) * scale;
                        }
                    } else {
                        for (int jj = jl; jj < jh; jj++) {
                            const REAL p = R_EXP(sr[jj] - L);
                            sr[jj] = p, dpr[jj] = p * (dpr[jj] - D) * scale;
                        }
                    }
                }
                /* sr now holds Pd, dpr holds dS */
                RNAME(mm)(dv + j0 * d, d, s, 1, ATTN_BK, dob, d, jn, d, mq, true);        /* dV += Pd^T dO */
                RNAME(mm)(dk + j0 * d, d, dp, 1, ATTN_BK, qr, d, jn, d, mq, true);        /* dK += dS^T Q */
                RNAME(mm)(dq, d, dp, ATTN_BK, 1, kp + j0 * d, d, mq, d, jn, true);        /* dQ += dS K */
            }
            for (int r = 0; r < mq; r++)
                memcpy(dqkv + (i0 + r) * row_stride + qoff, dq + r * d, (size_t)d * sizeof(REAL));
        }
    }
    for (int64_t j = 0; j < S; j++) {
        memcpy(dqkv + j * row_stride + koff, dk + j * d, (size_t)d * sizeof(REAL));
        memcpy(dqkv + j * row_stride + voff, dv + j * d, (size_t)d * sizeof(REAL));
    }
}

static void RNAME(attention_fwd)(mc_backend *be, const attn_geom *gm, REAL *out, REAL *lse, const REAL *qkv,
                                 const int32_t *seg) {
    const int64_t nqb = (gm->seq + ATTN_BQ - 1) / ATTN_BQ, nbg = gm->batch * gm->groups, ntasks = nbg * nqb;
    const size_t sd = (size_t)gm->seq * (size_t)gm->d;
    const size_t packed = attn_align(3 * sd * sizeof(REAL)) * (size_t)nbg; /* kp, vp, kt per (b, g) */
    const size_t per_thread = attn_align((2 * (size_t)ATTN_BQ * gm->d + ATTN_BQ * ATTN_BK + 2 * ATTN_BQ) * sizeof(REAL)) +
                              attn_align(ATTN_BK * sizeof(float));
    char *ws = mc_cpu_workspace(be, packed + per_thread * (size_t)mc_cpu_threads());
#define PACKED(bg) ((REAL *)(ws + attn_align(3 * sd * sizeof(REAL)) * (size_t)(bg)))
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t bg = 0; bg < nbg; bg++)
            RNAME(attn_pack_kv)(gm, PACKED(bg), PACKED(bg) + sd, PACKED(bg) + 2 * sd, qkv, bg / gm->groups,
                                (int)(bg % gm->groups));
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntasks; task++) {
            /* the query blocks with the most keys first, for load balance */
            const int64_t qb = nqb - 1 - task / nbg, bg = task % nbg;
            const int64_t i0 = qb * ATTN_BQ, i1 = i0 + ATTN_BQ < gm->seq ? i0 + ATTN_BQ : gm->seq;
            RNAME(attn_fwd_block)(gm, out, lse, qkv, PACKED(bg) + sd, PACKED(bg) + 2 * sd, seg, bg / gm->groups,
                                  (int)(bg % gm->groups), i0, i1, ws + packed + per_thread * (size_t)omp_get_thread_num());
        }
    }
#undef PACKED
}

static void RNAME(attention_bwd)(mc_backend *be, const attn_geom *gm, REAL *dqkv, const REAL *dout, const REAL *qkv,
                                 const REAL *out, const REAL *lse, const int32_t *seg) {
    const int64_t ntasks = gm->batch * gm->groups;
    const size_t per_thread = attn_align(6 * (size_t)gm->d * (size_t)gm->seq * sizeof(REAL)) +
                              attn_align((4 * (size_t)ATTN_BQ * gm->d + 2 * ATTN_BQ * ATTN_BK + 2 * ATTN_BQ) * sizeof(REAL)) +
                              attn_align(ATTN_BK * sizeof(float));
    char *ws = mc_cpu_workspace(be, per_thread * (size_t)mc_cpu_threads());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; task++)
        RNAME(attn_bwd_group)(gm, dqkv, dout, qkv, out, lse, seg, task / gm->groups, (int)(task % gm->groups),
                              ws + per_thread * (size_t)omp_get_thread_num());
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#include <omp.h>

enum {
    ATTN_BQ = 64, /* query rows per block */
    ATTN_BK = 64, /* keys per block (one online-softmax step) */
};

typedef struct attn_geom {
    int64_t seq, batch, token_stride; /* token_stride = (heads + 2 groups) d */
    int heads, groups, d;
    double scale;
    float dropout;
    uint64_t seed, stream;
} attn_geom;

static size_t attn_align(size_t bytes) { return (bytes + 63) / 64 * 64; }

#define MC_CPU_TEMPLATE "backend/cpu/attention.c"
#include "backend/cpu/cpu_instantiate.h"

/* The geometry of d, and its seg_start (NULL when absent) after checking its values, which
 * the kernels index by (the op layer checked its shape and dtype). */
static const int32_t *attn_geometry(const char *op, const mc_attn_desc *d, attn_geom *gm) {
    *gm = (attn_geom){.seq = d->seq,
                      .batch = d->batch,
                      .token_stride = (int64_t)(d->heads + 2 * d->groups) * d->head_dim,
                      .heads = d->heads,
                      .groups = d->groups,
                      .d = d->head_dim,
                      .scale = d->softmax_scale,
                      .dropout = d->dropout,
                      .seed = d->seed,
                      .stream = d->stream};
    if (!mc_tensor_present(&d->seg_start)) return NULL;
    const int32_t *seg = d->seg_start.data;
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t i = 0; i < d->seq; i++)
            MC_ASSERT(seg[b * d->seq + i] >= 0 && seg[b * d->seq + i] <= i,
                      "cpu %s: seg_start[%lld, %lld] = %d is outside [0, %lld]", op, (long long)b, (long long)i,
                      seg[b * d->seq + i], (long long)i);
    return seg;
}

void mc_cpu_attention_fwd(mc_backend *be, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                          const mc_attn_desc *d) {
    attn_geom gm;
    const int32_t *seg = attn_geometry("attention_fwd", d, &gm);
    MC_CPU_DISPATCH(qkv->dtype, attention_fwd, be, &gm, out->data, lse->data, qkv->data, seg);
}

void mc_cpu_attention_bwd(mc_backend *be, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                          const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d) {
    attn_geom gm;
    const int32_t *seg = attn_geometry("attention_bwd", d, &gm);
    mc_dtype dt = qkv->dtype;
    MC_CPU_DISPATCH(dt, attention_bwd, be, &gm, dqkv->data, dout->data, qkv->data, out->data, lse->data, seg);
    if (d->rope) mc_cpu_rope(be, dqkv, d->rope, true);
    if (mc_tensor_present(dbias)) {
        mc_tensor rows = mc_tensor_2d(dqkv->data, dt, d->seq * d->batch, gm.token_stride);
        mc_cpu_colsum_add(dbias, &rows);
    }
}

#endif
