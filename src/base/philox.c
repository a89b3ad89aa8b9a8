#include "base/philox.h"

#include <math.h>

double mc_philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t a = mc_philox_bits(seed, stream, 2 * index);
    uint32_t b = mc_philox_bits(seed, stream, 2 * index + 1);
    /* u1 in (0, 1] so log() is finite; u2 in [0, 1). */
    double u1 = ((double)a + 1.0) / 4294967296.0;
    double u2 = (double)b / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t mc_stream_of_name(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}
