/* hostdev.h: MC_HOSTDEV marks a small function that plain C and CUDA device code share
 * (one definition, so both compute it alike). */
#ifndef MC_BASE_HOSTDEV_H
#define MC_BASE_HOSTDEV_H

#ifdef __CUDACC__
#define MC_HOSTDEV __host__ __device__ __forceinline__
#else
#define MC_HOSTDEV static inline
#endif

#endif
