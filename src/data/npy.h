/* npy.h: numpy's .npy arrays (numpy.save / numpy.load), the 1-D and 2-D little-endian
 * integer arrays of Megatron's dataset index caches. The reader validates the header and
 * the data size before it trusts them. */
#ifndef MC_DATA_NPY_H
#define MC_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct mc_npy {
    char descr[8];    /* "<i2", "<i4", "<u4", "<i8" */
    int ndim;         /* 1 or 2 */
    int64_t shape[2];
    size_t itemsize;
    void *data;       /* malloc'd, shape product * itemsize bytes */
} mc_npy;

/* numpy.save of a C-contiguous little-endian array, atomically. */
int mc_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                 mc_err *err);
/* numpy.load of a 1-D or 2-D little-endian integer array (format 1.0/2.0/3.0, C order). */
int mc_npy_read(const char *path, mc_npy *out, mc_err *err);
/* The same from the n bytes of a file already in memory; errors name `path`. */
int mc_npy_parse(const void *data, size_t n, const char *path, mc_npy *out, mc_err *err);
void mc_npy_free(mc_npy *a);
/* Element i (flat) of an integer array as int64. */
int64_t mc_npy_get(const mc_npy *a, int64_t i);

#endif
