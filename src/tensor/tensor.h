/* tensor.h: dtypes and tensor views. A tensor is a view (pointer, dtype, shape), never an
 * owner: memory comes from arenas planned up front (base/arena.h). Row-major, contiguous.
 * Activations are laid out [s, b, h] as in Megatron (sequence first), so that sequence-
 * parallel and context-parallel chunks are contiguous. */
#ifndef MC_TENSOR_TENSOR_H
#define MC_TENSOR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MC_F32 = 0,
    MC_BF16,
    MC_F16,
    MC_FP8_E4M3,
    MC_FP8_E5M2,
    MC_I32,
    MC_I64,
    MC_U16,
    MC_U8,
    MC_F64,
    MC_DTYPE_COUNT
} mc_dtype;

#define MC_MAX_DIMS 4

typedef struct mc_tensor {
    void *data;
    mc_dtype dtype;
    int ndim;
    int64_t shape[MC_MAX_DIMS];
} mc_tensor;

size_t mc_dtype_size(mc_dtype dt);
const char *mc_dtype_name(mc_dtype dt);
/* Parses "float32"/"F32"/"bf16"... (safetensors and CLI spellings); -1 when unknown. */
int mc_dtype_parse(const char *s);

int64_t mc_tensor_numel(const mc_tensor *t);
size_t mc_tensor_bytes(const mc_tensor *t);

/* Constructors for views. */
mc_tensor mc_tensor_1d(void *data, mc_dtype dt, int64_t d0);
mc_tensor mc_tensor_2d(void *data, mc_dtype dt, int64_t d0, int64_t d1);
mc_tensor mc_tensor_3d(void *data, mc_dtype dt, int64_t d0, int64_t d1, int64_t d2);
/* A view of rows [row0, row0+nrows) of a 2-D tensor. */
mc_tensor mc_tensor_rows(const mc_tensor *t, int64_t row0, int64_t nrows);
/* The null tensor: data == NULL means "absent" for optional operands (bias, mask...). */
static inline mc_tensor mc_tensor_none(void) {
    mc_tensor t = {0};
    return t;
}
static inline bool mc_tensor_present(const mc_tensor *t) { return t && t->data != NULL; }

/* bf16 <-> f32 on the host (round to nearest even), for tests and conversion. */
uint16_t mc_f32_to_bf16(float f);
float mc_bf16_to_f32(uint16_t b);
/* IEEE binary16 <-> f32 on the host: round to nearest even, overflow to inf, NaN stays NaN
 * (quiet). */
uint16_t mc_f32_to_f16(float f);
float mc_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif
