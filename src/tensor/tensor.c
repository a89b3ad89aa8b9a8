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

uint16_t mc_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal half */
        if (ax < 0x33000000u) return sign;                    /* <= 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value * 2^24 = mant >> shift */
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu; /* rebias exponent 127 -> 15 */
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;   /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

float mc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal, exact */
        return sign ? -v : v;
    }
    if (e == 31) x = sign | 0x7f800000u | (m << 13);
    else x = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
