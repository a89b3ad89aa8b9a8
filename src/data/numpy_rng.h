/* numpy_rng.h: bit-exact re-implementations of the two numpy random streams that decide
 * Megatron's data order.
 *
 *  - MT19937 as seeded by the legacy `numpy.random.RandomState(seed)` (integer seed,
 *    Knuth's init_genrand), with `random_interval` and the legacy `RandomState.shuffle`
 *    of a 1-D array. GPTDataset builds its document and shuffle indices with it.
 *  - PCG64 (XSL-RR 128/64) seeded through `SeedSequence`, i.e. `numpy.random.default_rng`,
 *    with `Generator.integers(low, high, size, dtype=np.int32)`. MockGPTLowLevelDataset
 *    draws its sequence lengths with it.
 *
 * NEP 19 freezes the legacy stream; the Generator stream is stable in practice (numpy
 * documents it may change, it has not since 1.17). Both are verified bit-exactly against
 * numpy by tests/test_data_rng.c. */
#ifndef MC_DATA_NUMPY_RNG_H
#define MC_DATA_NUMPY_RNG_H

#include <stddef.h>
#include <stdint.h>

/* ---- MT19937 (legacy RandomState) ------------------------------------------------- */

#define MC_MT19937_N 624

typedef struct mc_mt19937 {
    uint32_t key[MC_MT19937_N];
    int pos;
} mc_mt19937;

/* RandomState(seed) for an integer seed; numpy accepts 0 <= seed <= 2^32-1 only. */
void mc_mt19937_seed(mc_mt19937 *mt, uint32_t seed);
uint32_t mc_mt19937_next32(mc_mt19937 *mt);
/* numpy's next_uint64 for MT19937: the first draw is the high word. */
uint64_t mc_mt19937_next64(mc_mt19937 *mt);
/* A uniform integer in [0, max] by masked rejection (numpy `random_interval`): 32-bit
 * draws while max <= 2^32-1, 64-bit draws above. */
uint64_t mc_mt19937_random_interval(mc_mt19937 *mt, uint64_t max);

/* The legacy `RandomState.shuffle(x)` of a 1-D array of n elements: for i = n-1 .. 1,
 * swap x[i] with x[random_interval(i)]. The permutation does not depend on the element
 * type, so one routine serves int32, uint32 and int64 arrays. */
void mc_mt19937_shuffle(mc_mt19937 *mt, void *data, int64_t n, size_t itemsize);
static inline void mc_mt19937_shuffle_i32(mc_mt19937 *mt, int32_t *x, int64_t n) {
    mc_mt19937_shuffle(mt, x, n, sizeof *x);
}
static inline void mc_mt19937_shuffle_u32(mc_mt19937 *mt, uint32_t *x, int64_t n) {
    mc_mt19937_shuffle(mt, x, n, sizeof *x);
}
static inline void mc_mt19937_shuffle_i64(mc_mt19937 *mt, int64_t *x, int64_t n) {
    mc_mt19937_shuffle(mt, x, n, sizeof *x);
}

/* ---- PCG64 (Generator / default_rng) ---------------------------------------------- */

typedef struct mc_pcg64 {
    uint64_t state_hi, state_lo; /* 128-bit LCG state */
    uint64_t inc_hi, inc_lo;     /* 128-bit odd increment */
    int has_uint32;              /* numpy hands out 64-bit draws as two 32-bit halves */
    uint32_t uinteger;           /* the buffered high half */
} mc_pcg64;

/* PCG64(SeedSequence(entropy)) where the entropy is given as little-endian 32-bit words
 * (numpy's conversion of a Python int; the int 0 is the single word {0}). */
void mc_pcg64_seed_words(mc_pcg64 *g, const uint32_t *entropy, int n_words);
/* numpy.random.default_rng(seed) for a non-negative integer seed. */
void mc_pcg64_seed(mc_pcg64 *g, uint64_t seed);
uint64_t mc_pcg64_next64(mc_pcg64 *g);
/* numpy's next_uint32: the low half of a fresh 64-bit draw, then its high half. */
uint32_t mc_pcg64_next32(mc_pcg64 *g);
/* Generator.integers(low, high, size=n, dtype=np.int32) (endpoint=False): n draws in
 * [low, high) by Lemire's bounded method on 32-bit draws. Requires low < high. */
void mc_pcg64_integers_i32(mc_pcg64 *g, int32_t low, int64_t high, int64_t n, int32_t *out);

#endif
