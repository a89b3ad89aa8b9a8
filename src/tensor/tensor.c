#include "tensor/tensor.h"

#include <string.h>
#include <strings.h>

#include "base/error.h"

static const struct {
    const char *name;
    size_t size;
} k_dtypes[MC_DTYPE_COUNT] = {
    [MC_F32] = {"F32", 4},     [MC_BF16] = {"BF16", 2}, [MC_F16] = {"F16", 2},
    [MC_FP8_E4M3] = {"F8_E4M3", 1}, [MC_FP8_E5M2] = {"F8_E5M2", 1}, [MC_I32] = {"I32", 4},
    [MC_I64] = {"I64", 8},     [MC_U16] = {"U16", 2},   [MC_U8] = {"U8", 1},
    [MC_F64] = {"F64", 8},
};

size_t mc_dtype_size(mc_dtype dt) {
    MC_ASSERT(dt >= 0 && dt < MC_DTYPE_COUNT, "bad dtype %d", (int)dt);
    return k_dtypes[dt].size;
}

const char *mc_dtype_name(mc_dtype dt) {
    MC_ASSERT(dt >= 0 && dt < MC_DTYPE_COUNT, "bad dtype %d", (int)dt);
    return k_dtypes[dt].name;
}

int mc_dtype_parse(const char *s) {
    static const struct {
        const char *alias;
        mc_dtype dt;
    } aliases[] = {{"float32", MC_F32}, {"fp32", MC_F32},   {"bfloat16", MC_BF16}, {"bf16", MC_BF16},
                   {"float16", MC_F16}, {"fp16", MC_F16},   {"int32", MC_I32},     {"int64", MC_I64},
                   {"uint16", MC_U16},  {"uint8", MC_U8},   {"float64", MC_F64}};
    for (int i = 0; i < MC_DTYPE_COUNT; i++)
        if (strcasecmp(s, k_dtypes[i].name) == 0) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(s, aliases[i].alias) == 0) return aliases[i].dt;
    return -1;
}

int64_t mc_tensor_numel(const mc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t mc_tensor_bytes(const mc_tensor *t) { return (size_t)mc_tensor_numel(t) * mc_dtype_size(t->dtype); }

mc_tensor mc_tensor_1d(void *data, mc_dtype dt, int64_t d0) {
    mc_tensor t = {.data = data, .dtype = dt, .ndim = 1, .shape = {d0}};
    return t;
}

mc_tensor mc_tensor_2d(void *data, mc_dtype dt, int64_t d0, int64_t d1) {
    mc_tensor t = {.data = data, .dtype = dt, .ndim = 2, .shape = {d0, d1}};
    return t;
}

mc_tensor mc_tensor_3d(void *data, mc_dtype dt, int64_t d0, int64_t d1, int64_t d2) {
    mc_tensor t = {.data = data, .dtype = dt, .ndim = 3, .shape = {d0, d1, d2}};
    return t;
}

mc_tensor mc_tensor_rows(const mc_tensor *t, int64_t row0, int64_t nrows) {
    MC_ASSERT(t->ndim == 2 && row0 >= 0 && row0 + nrows <= t->shape[0]);
    mc_tensor r = *t;
    r.data = (char *)t->data + (size_t)row0 * (size_t)t->shape[1] * mc_dtype_size(t->dtype);
    r.shape[0] = nrows;
    return r;
}

uint16_t mc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mc_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
