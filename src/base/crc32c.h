/* crc32c.h: CRC-32C (Castagnoli), the checksum of checkpoint files (and of TensorBoard's
 * record framing).
 *
 * The standard parameters: reflected polynomial 0x82F63B78, initial value and final xor
 * 0xFFFFFFFF, so crc32c("123456789") == 0xE3069283. On x86-64 with SSE4.2 the crc32
 * instruction computes it, 8 bytes an instruction (several GB/s a core); elsewhere a
 * table does, with the same results. */
#ifndef MC_BASE_CRC32C_H
#define MC_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of data[0, n) continuing from `crc` (0 to start: crc32c(0, "", 0) == 0), so that
 * crc32c(crc32c(0, a, na), b, nb) is the CRC of a followed by b. */
uint32_t mc_crc32c(uint32_t crc, const void *data, size_t n);

/* The same by table alone, whatever the processor (tests compare the two). */
uint32_t mc_crc32c_portable(uint32_t crc, const void *data, size_t n);

/* The CRC of A followed by B from crc_a = CRC(A), crc_b = CRC(B) and B's length, without
 * the data: lets threads checksum the blocks of one file and join the results. */
uint32_t mc_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
