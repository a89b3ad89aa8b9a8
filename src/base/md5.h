/* md5.h: the MD5 digest Megatron names its dataset index caches by. */
#ifndef MC_BASE_MD5_H
#define MC_BASE_MD5_H

#include <stddef.h>

/* RFC 1321 digest of data as 32 lower-case hex digits (Python's hashlib.md5().hexdigest()). */
void mc_md5_hex(const void *data, size_t n, char out[33]);

#endif
