/* dropout.c: dropout (forward, backward, fused with the residual add), add and scale in
 * place, and the vectorized Philox draws that dropout and attention dropout share.
 * Element i is kept iff mc_philox_uniform(seed, stream, i) >= p and then scaled by
 * 1/(1-p); the mask is regenerated in backward, never stored. p == 0 is exact. */
#ifdef REAL

/* y[i] = residual[i] (if any) + keep(i) x[i] / (1 - p); y may alias x or residual. */
static void RNAME(dropout_apply)(REAL *y, const REAL *residual, const REAL *x, int64_t n, float p, uint64_t seed,
                                 uint64_t stream) {
    REAL scale = (REAL)1 / ((REAL)1 - (REAL)p);
    int64_t nchunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t ch = 0; ch < nchunks; ch++) {
        float u[DROPOUT_CHUNK];
        int64_t i0 = ch * DROPOUT_CHUNK, len = n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK;
        mc_cpu_philox_uniforms(seed, stream, (uint64_t)i0, len, u);
        REAL *yc = y + i0;
        const REAL *xc = x + i0;
        if (residual) {
            const REAL *rc = residual + i0;
            for (int64_t i = 0; i < len; i++) yc[i] = rc[i] + (u[i] >= p ? xc[i] * scale : 0);
        } else {
            for (int64_t i = 0; i < len; i++) yc[i] = u[i] >= p ? xc[i] * scale : 0;
        }
    }
}

/* y (=, or residual +) x, the p == 0 path. y may alias x or residual. */
static void RNAME(copy_or_add)(REAL *y, const REAL *residual, const REAL *x, int64_t n) {
    if (!residual) {
        if (y != x) memmove(y, x, (size_t)n * sizeof(REAL));
        return;
    }
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) y[i] = residual[i] + x[i];
}

static void RNAME(scale_inplace)(REAL *x, int64_t n, REAL s) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

enum { DROPOUT_CHUNK = 4096 }; /* elements per task: the draws for a chunk live on the stack */

#define MC_CPU_TEMPLATE "backend/cpu/dropout.c"
#include "backend/cpu/cpu_instantiate.h"

/* ---- Philox draws ---- */

#if defined(__AVX2__)
/* The 16 uniforms of Philox blocks blk0 .. blk0+3 (elements 4*blk0 .. 4*blk0+15), four
 * blocks per vector in 64-bit lanes: _mm256_mul_epu32 gives the 32x32->64 products the
 * round needs. Bit-identical to mc_philox4x32_10 (tests/test_cpu_ops.c checks it). The high
 * halves of the lanes carry garbage between rounds; only the low halves are read. */
static void philox_uniforms16(float *u, uint64_t seed, uint64_t stream, uint64_t blk0) {
    __m256i blk = _mm256_add_epi64(_mm256_set1_epi64x((long long)blk0), _mm256_set_epi64x(3, 2, 1, 0));
    __m256i c0 = blk, c1 = _mm256_srli_epi64(blk, 32);
    __m256i c2 = _mm256_set1_epi64x((long long)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi64x((long long)(uint32_t)(stream >> 32));
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i p0 = _mm256_mul_epu32(c0, m0), p1 = _mm256_mul_epu32(c2, m1);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1), _mm256_set1_epi64x(k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3), _mm256_set1_epi64x(k1));
        c1 = p1, c3 = p0, c0 = n0, c2 = n2;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffffLL);
    /* per 64-bit lane (one block): w01 = [w0 w1], w23 = [w2 w3] */
    __m256i w01 = _mm256_or_si256(_mm256_and_si256(c0, lo32), _mm256_slli_epi64(c1, 32));
    __m256i w23 = _mm256_or_si256(_mm256_and_si256(c2, lo32), _mm256_slli_epi64(c3, 32));
    __m256i b02 = _mm256_unpacklo_epi64(w01, w23); /* block 0 | block 2 */
    __m256i b13 = _mm256_unpackhi_epi64(w01, w23); /* block 1 | block 3 */
    __m256i b01 = _mm256_permute2x128_si256(b02, b13, 0x20), b23 = _mm256_permute2x128_si256(b02, b13, 0x31);
    const __m256 two_m24 = _mm256_set1_ps(1.0f / 16777216.0f);
    _mm256_storeu_ps(u, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b01, 8)), two_m24));
    _mm256_storeu_ps(u + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b23, 8)), two_m24));
}
#endif

void mc_cpu_philox_uniforms(uint64_t seed, uint64_t stream, uint64_t index0, int64_t n, float *u) {
    if (n <= 0) return;
    uint64_t end = index0 + (uint64_t)n;
#if defined(__AVX2__)
    /* groups of 16 elements aligned to 16 (4 Philox blocks); the partial groups at the ends
     * are drawn whole into a buffer and the needed part copied */
    for (uint64_t g = index0 & ~(uint64_t)15; g < end; g += 16) {
        if (g >= index0 && g + 16 <= end) {
            philox_uniforms16(u + (g - index0), seed, stream, g >> 2);
        } else {
            float tmp[16];
            philox_uniforms16(tmp, seed, stream, g >> 2);
            uint64_t lo = g > index0 ? g : index0, hi = g + 16 < end ? g + 16 : end;
            memcpy(u + (lo - index0), tmp + (lo - g), (size_t)(hi - lo) * sizeof(float));
        }
    }
#else
    for (uint64_t blk = index0 >> 2; blk <= (end - 1) >> 2; blk++) {
        mc_philox_out o = mc_philox4x32_10(seed, (uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)stream,
                                           (uint32_t)(stream >> 32));
        for (uint64_t w = 0; w < 4; w++) {
            uint64_t i = blk * 4 + w;
            if (i >= index0 && i < end) u[i - index0] = (float)(o.v[w] >> 8) * (1.0f / 16777216.0f);
        }
    }
#endif
}

/* ---- ops ---- */

void mc_cpu_dropout_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream) {
    (void)be;
    int64_t n = mc_tensor_numel(x);
    if (p == 0.0f) MC_CPU_DISPATCH(x->dtype, copy_or_add, y->data, NULL, x->data, n);
    else MC_CPU_DISPATCH(x->dtype, dropout_apply, y->data, NULL, x->data, n, p, seed, stream);
}

void mc_cpu_dropout_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed,
                        uint64_t stream) {
    (void)be;
    int64_t n = mc_tensor_numel(dy);
    if (p == 0.0f) MC_CPU_DISPATCH(dy->dtype, copy_or_add, dx->data, NULL, dy->data, n);
    else MC_CPU_DISPATCH(dy->dtype, dropout_apply, dx->data, NULL, dy->data, n, p, seed, stream);
}

void mc_cpu_dropout_add_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                            uint64_t seed, uint64_t stream) {
    (void)be;
    int64_t n = mc_tensor_numel(x);
    if (p == 0.0f) MC_CPU_DISPATCH(x->dtype, copy_or_add, y->data, residual->data, x->data, n);
    else MC_CPU_DISPATCH(x->dtype, dropout_apply, y->data, residual->data, x->data, n, p, seed, stream);
}

void mc_cpu_add_inplace(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    (void)be;
    MC_CPU_DISPATCH(y->dtype, copy_or_add, y->data, y->data, x->data, mc_tensor_numel(y));
}

void mc_cpu_scale_inplace(mc_backend *be, mc_tensor *x, float s) {
    (void)be;
    MC_CPU_DISPATCH(x->dtype, scale_inplace, x->data, mc_tensor_numel(x), s);
}

#endif
