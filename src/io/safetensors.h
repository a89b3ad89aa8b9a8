/* safetensors.h: reading and writing the safetensors format (Hugging Face's tensor files).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *     {"__metadata__": {"k": "v", ...},
 *      "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * (padded with spaces), then the data region; offsets are relative to the data region.
 *
 * The reader maps the file and validates everything before handing out a pointer: the
 * header length against the file size, the JSON, every dtype, shape * element size against
 * the data_offsets span, and that the tensors tile the data region exactly (in range, no
 * overlap, no gap, no unclaimed tail), as the official implementation demands. Every
 * failure is one line naming the file and, where there is one, the tensor.
 *
 * The writer lays tensors out as the official one does (by dtype alignment, largest first,
 * then by name; header padded with spaces to a multiple of 8 bytes, so every tensor starts
 * aligned to its element size) and replaces the target atomically with base/file.h's
 * mc_atomic_file: it writes `path.tmp.<pid>.<n>`, fsyncs, renames over `path`; on any
 * failure the temporary file is removed and an existing `path` is left untouched.
 *
 * Host byte order must be little-endian (x86-64, aarch64), as the format's. */
#ifndef MC_IO_SAFETENSORS_H
#define MC_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "tensor/tensor.h"

#define MC_ST_MAX_DIMS 8
/* The official reader's cap on the JSON header. */
#define MC_ST_MAX_HEADER_BYTES 100000000ull

/* One tensor of an open file. Pointers live until mc_safetensors_close. */
typedef struct mc_st_tensor {
    const char *name;
    const char *dtype_name;   /* the file's spelling: "F32", "BF16", "BOOL", "I8", "C64", "F4"... */
    int dtype;                /* the mc_dtype, or -1 for a dtype Megatron-C has no enum for */
    int ndim;                 /* 0 for a scalar */
    int64_t shape[MC_ST_MAX_DIMS];
    int64_t numel;
    const void *data;         /* inside the mapping; aligned to the element size when the
                                 writer followed the official layout (ours and Python's do) */
    size_t nbytes;
} mc_st_tensor;

typedef struct mc_safetensors mc_safetensors;

/* ---- reading ------------------------------------------------------------ */

/* Maps and validates `path`. On success *out owns the mapping. */
int mc_safetensors_open(const char *path, mc_safetensors **out, mc_err *err);
/* Validates a file image already in memory (not copied: `buf` must outlive the handle).
 * `label` names it in error messages. */
int mc_safetensors_open_memory(const void *buf, size_t len, const char *label, mc_safetensors **out,
                               mc_err *err);
void mc_safetensors_close(mc_safetensors *st);

const char *mc_safetensors_path(const mc_safetensors *st);
/* Tensors, sorted by name. */
int mc_safetensors_count(const mc_safetensors *st);
const mc_st_tensor *mc_safetensors_at(const mc_safetensors *st, int i);
/* NULL when absent. */
const mc_st_tensor *mc_safetensors_find(const mc_safetensors *st, const char *name);
/* A `__metadata__` value, or NULL. */
const char *mc_safetensors_metadata(const mc_safetensors *st, const char *key);
int mc_safetensors_metadata_count(const mc_safetensors *st);
/* The i-th metadata pair in file order. */
void mc_safetensors_metadata_at(const mc_safetensors *st, int i, const char **key, const char **value);

/* A view (dtype, shape, pointer into the mapping) of tensor `name`. Fails when the tensor is
 * absent, its dtype has no mc_dtype, or it has more than MC_MAX_DIMS dimensions. */
int mc_safetensors_tensor(const mc_safetensors *st, const char *name, mc_tensor *out, mc_err *err);

/* Copies tensor `name` of any float dtype (F32, F64, BF16, F16) into the caller's array,
 * converting. The tensor must have exactly `ndim` dimensions of sizes `shape` (ndim 0 is a
 * scalar; shape may then be NULL). */
int mc_safetensors_read_f32(const mc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                            float *out, mc_err *err);
int mc_safetensors_read_f64(const mc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                            double *out, mc_err *err);
/* The same without a shape check: only the element count must equal `numel`. */
int mc_safetensors_read_f32_n(const mc_safetensors *st, const char *name, int64_t numel, float *out,
                              mc_err *err);
int mc_safetensors_read_f64_n(const mc_safetensors *st, const char *name, int64_t numel, double *out,
                              mc_err *err);

/* Element size in bits of a safetensors dtype spelling ("F32" -> 32, "F4" -> 4); 0 when the
 * spelling is unknown. */
int mc_safetensors_dtype_bits(const char *dtype_name);

/* ---- writing ------------------------------------------------------------ */

typedef struct mc_safetensors_writer mc_safetensors_writer;

mc_safetensors_writer *mc_safetensors_writer_create(void);
void mc_safetensors_writer_free(mc_safetensors_writer *w);
/* Adds a tensor. `data` (mc_tensor_bytes of the shape) is referenced, not copied: it must
 * stay valid until mc_safetensors_writer_save. Fails on a duplicate or empty name, a
 * negative dimension, or ndim > MC_ST_MAX_DIMS. */
int mc_safetensors_writer_add(mc_safetensors_writer *w, const char *name, mc_dtype dtype, int ndim,
                              const int64_t *shape, const void *data, mc_err *err);
/* The same, but the writer keeps its own copy of the data. */
int mc_safetensors_writer_add_copy(mc_safetensors_writer *w, const char *name, mc_dtype dtype, int ndim,
                                   const int64_t *shape, const void *data, mc_err *err);
/* Sets (or replaces) a `__metadata__` string pair; kept in insertion order. */
int mc_safetensors_writer_set_metadata(mc_safetensors_writer *w, const char *key, const char *value,
                                       mc_err *err);
/* Writes all tensors to `path` atomically (see the banner). May be called more than once. */
int mc_safetensors_writer_save(mc_safetensors_writer *w, const char *path, mc_err *err);

#endif
