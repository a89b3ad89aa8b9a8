#include "base/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define POLY 0x82F63B78u /* x^32 + x^28 + ... reflected: bit 31 is x^0 */

static uint32_t g_table[256];
static bool g_hw;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_once(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        g_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    g_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* The raw (unconditioned) register update, by table. */
static uint32_t update_table(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = g_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t update_hw(uint32_t c, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t mc_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, init_once);
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (g_hw) return ~update_hw(c, data, n);
#endif
    return ~update_table(c, data, n);
}

uint32_t mc_crc32c_portable(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, init_once);
    return ~update_table(~crc, data, n);
}

/* ---- combine ----
 * A CRC is the message's polynomial times x^32 mod P (plus the conditioning, which cancels
 * in the xor below). Appending len_b bytes multiplies A's part by x^(8 len_b), so
 *   CRC(A B) = CRC(A) * x^(8 len_b) mod P  xor  CRC(B).
 * In the reflected representation bit 31 holds x^0; x^(8 len_b) comes from the powers
 * x^(2^k) mod P by square-and-multiply over the bits of 8 len_b. */

/* a * b mod P, both reflected. */
static uint32_t mul_mod_p(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int bit = 31; bit >= 0; bit--) { /* bit 31 of a is the coefficient of x^0 */
        if (a & (1u << bit)) product ^= b;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1; /* b *= x */
    }
    return product;
}

uint32_t mc_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    /* x^(2^k) mod P for k = 0..63, built by squaring from x^1 (bit 30). */
    uint32_t power = 1u << 30, shift = 1u << 31; /* shift accumulates x^(8 len_b); starts at 1 */
    unsigned __int128 e = (unsigned __int128)len_b * 8;
    while (e) {
        if (e & 1) shift = mul_mod_p(shift, power);
        power = mul_mod_p(power, power);
        e >>= 1;
    }
    return mul_mod_p(crc_a, shift) ^ crc_b;
}
