/* philox.h: Philox4x32-10, a counter-based RNG (Salmon et al., SC'11).
 *
 * A draw is a pure function of (key, counter), so the CPU and CUDA backends produce the
 * same stream for the same element, a dropout mask can be regenerated in backward
 * instead of stored, and recomputation replays exactly.
 *
 * Conventions used throughout Megatron-C:
 *   key     = the 64-bit seed (lo, hi words);
 *   counter = { element_index / 4 (lo, hi), stream (lo, hi) }, word element_index % 4;
 * where `stream` names the call site (parameter, dropout site + iteration + micro-batch).
 * This header is plain C and also compiles as CUDA device code. */
#ifndef MC_BASE_PHILOX_H
#define MC_BASE_PHILOX_H

#include <stdint.h>

#include "base/hostdev.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t v[4];
} mc_philox_out;

MC_HOSTDEV mc_philox_out mc_philox4x32_10(uint64_t key, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    mc_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* The 32 random bits for element `index` of stream `stream`. */
MC_HOSTDEV uint32_t mc_philox_bits(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t block = index >> 2;
    mc_philox_out o = mc_philox4x32_10(seed, (uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                                       (uint32_t)(stream >> 32));
    return o.v[index & 3];
}

/* Uniform in [0, 1) with 24 random bits: exactly representable in fp32 on every backend. */
MC_HOSTDEV float mc_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(mc_philox_bits(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

/* Standard normal for element `index` by Box-Muller in double over two 32-bit draws taken
 * from one Philox block (elements 2*index and 2*index+1 of the stream). Used for weight
 * init on the host; the cost does not matter there, bitwise reproducibility does. */
double mc_philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* A stable 64-bit stream id for a name (FNV-1a), e.g. a parameter's global name. */
uint64_t mc_stream_of_name(const char *name);

#ifdef __cplusplus
}
#endif

#endif
