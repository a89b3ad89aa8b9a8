#include "data/numpy_rng.h"

#include <string.h>

#include "base/error.h"

/* ---- MT19937 ------------------------------------------------------------------------ */

void mc_mt19937_seed(mc_mt19937 *mt, uint32_t seed) {
    /* Knuth's init_genrand, as numpy's mt19937_seed. */
    for (int i = 0; i < MC_MT19937_N; i++) {
        mt->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)(i + 1);
    }
    mt->pos = MC_MT19937_N; /* the first draw regenerates the whole block */
}

static void mt19937_generate(mc_mt19937 *mt) {
    enum { N = MC_MT19937_N, M = 397 };
    const uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix_a = 0x9908b0dfu;
    uint32_t *k = mt->key;
    int i;
    for (i = 0; i < N - M; i++) {
        uint32_t y = (k[i] & upper) | (k[i + 1] & lower);
        k[i] = k[i + M] ^ (y >> 1) ^ (-(y & 1u) & matrix_a);
    }
    for (; i < N - 1; i++) {
        uint32_t y = (k[i] & upper) | (k[i + 1] & lower);
        k[i] = k[i + (M - N)] ^ (y >> 1) ^ (-(y & 1u) & matrix_a);
    }
    uint32_t y = (k[N - 1] & upper) | (k[0] & lower);
    k[N - 1] = k[M - 1] ^ (y >> 1) ^ (-(y & 1u) & matrix_a);
    mt->pos = 0;
}

uint32_t mc_mt19937_next32(mc_mt19937 *mt) {
    if (mt->pos == MC_MT19937_N) mt19937_generate(mt);
    uint32_t y = mt->key[mt->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t mc_mt19937_next64(mc_mt19937 *mt) {
    /* numpy writes `next << 32 | next`; the high word is drawn first (checked against
     * numpy's legacy randint, which uses the same 64-bit draw). */
    uint64_t hi = mc_mt19937_next32(mt);
    uint64_t lo = mc_mt19937_next32(mt);
    return hi << 32 | lo;
}

uint64_t mc_mt19937_random_interval(mc_mt19937 *mt, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        while ((value = (mc_mt19937_next32(mt) & mask)) > max) {
        }
    } else {
        while ((value = (mc_mt19937_next64(mt) & mask)) > max) {
        }
    }
    return value;
}

void mc_mt19937_shuffle(mc_mt19937 *mt, void *data, int64_t n, size_t itemsize) {
    char *x = data;
    char tmp[16];
    MC_ASSERT(itemsize <= sizeof tmp);
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)mc_mt19937_random_interval(mt, (uint64_t)i);
        memcpy(tmp, x + j * itemsize, itemsize);
        memcpy(x + j * itemsize, x + i * itemsize, itemsize);
        memcpy(x + i * itemsize, tmp, itemsize);
    }
}

/* ---- SeedSequence ------------------------------------------------------------------- */

/* numpy/random/bit_generator.pyx constants (pool of 4 uint32 words). */
enum { SS_POOL = 4 };
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> SS_XSHIFT;
    return r;
}

/* SeedSequence(entropy).pool: no spawn key, default pool size. */
static void ss_pool(const uint32_t *entropy, int n, uint32_t pool[SS_POOL]) {
    uint32_t hash_const = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = ss_hashmix(i < n ? entropy[i] : 0u, &hash_const);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hash_const));
    for (int src = SS_POOL; src < n; src++)
        for (int dst = 0; dst < SS_POOL; dst++) pool[dst] = ss_mix(pool[dst], ss_hashmix(entropy[src], &hash_const));
}

/* SeedSequence.generate_state(n_words64, np.uint64): 2*n 32-bit words, paired little-end. */
static void ss_generate_u64(const uint32_t pool[SS_POOL], int n64, uint64_t *out) {
    uint32_t hash_const = SS_INIT_B;
    for (int i = 0; i < 2 * n64; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hash_const;
        hash_const *= SS_MULT_B;
        v *= hash_const;
        v ^= v >> SS_XSHIFT;
        if (i % 2 == 0)
            out[i / 2] = v;
        else
            out[i / 2] |= (uint64_t)v << 32;
    }
}

/* ---- PCG64 -------------------------------------------------------------------------- */

#define PCG_MULT_HI 2549297995355413924ull
#define PCG_MULT_LO 4865540595714422341ull

__extension__ typedef unsigned __int128 pcg_u128;

/* state = state * MULT + inc (mod 2^128) */
static void pcg_step(mc_pcg64 *g) {
    pcg_u128 s = ((pcg_u128)g->state_hi << 64) | g->state_lo;
    pcg_u128 m = ((pcg_u128)PCG_MULT_HI << 64) | PCG_MULT_LO;
    pcg_u128 c = ((pcg_u128)g->inc_hi << 64) | g->inc_lo;
    s = s * m + c;
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
}

void mc_pcg64_seed_words(mc_pcg64 *g, const uint32_t *entropy, int n_words) {
    uint32_t pool[SS_POOL];
    uint64_t v[4];
    ss_pool(entropy, n_words, pool);
    ss_generate_u64(pool, 4, v);
    /* pcg64_set_seed: initstate = (v[0] high, v[1] low), initseq = (v[2], v[3]);
     * pcg_setseq_128_srandom_r: inc = initseq << 1 | 1; step; state += initstate; step. */
    g->inc_hi = (v[2] << 1) | (v[3] >> 63);
    g->inc_lo = (v[3] << 1) | 1u;
    g->state_hi = g->state_lo = 0;
    pcg_step(g);
    pcg_u128 s = ((pcg_u128)g->state_hi << 64) | g->state_lo;
    s += ((pcg_u128)v[0] << 64) | v[1];
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
    pcg_step(g);
    g->has_uint32 = 0;
    g->uinteger = 0;
}

void mc_pcg64_seed(mc_pcg64 *g, uint64_t seed) {
    uint32_t words[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mc_pcg64_seed_words(g, words, seed >> 32 ? 2 : 1); /* the int 0 is one word {0} */
}

uint64_t mc_pcg64_next64(mc_pcg64 *g) {
    /* XSL-RR output of the stepped state. */
    pcg_step(g);
    uint64_t x = g->state_hi ^ g->state_lo;
    unsigned rot = (unsigned)(g->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t mc_pcg64_next32(mc_pcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    uint64_t next = mc_pcg64_next64(g);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(next >> 32);
    return (uint32_t)next;
}

/* numpy's buffered_bounded_lemire_uint32: a value in [0, rng]; rng < 2^32 - 1. */
static uint32_t pcg_bounded_lemire32(mc_pcg64 *g, uint32_t rng) {
    const uint32_t rng_excl = rng + 1;
    uint64_t m = (uint64_t)mc_pcg64_next32(g) * rng_excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < rng_excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % rng_excl; /* 2^32 mod rng_excl */
        while (leftover < threshold) {
            m = (uint64_t)mc_pcg64_next32(g) * rng_excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void mc_pcg64_integers_i32(mc_pcg64 *g, int32_t low, int64_t high, int64_t n, int32_t *out) {
    MC_ASSERT(high > low && high - 1 <= INT32_MAX, "integers(%d, %lld)", low, (long long)high);
    /* numpy turns [low, high) into the closed [low, high-1]: rng = high-1-low. */
    uint32_t rng = (uint32_t)(high - 1 - low), off = (uint32_t)low;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        if (rng == 0)
            v = 0; /* no draw */
        else if (rng == 0xffffffffu)
            v = mc_pcg64_next32(g); /* Lemire's method cannot take rng_excl = 2^32 */
        else
            v = pcg_bounded_lemire32(g, rng);
        out[i] = (int32_t)(off + v);
    }
}
