/* safetensors.c: the safetensors reader (validate, then map) and atomic writer. */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

/* ---- dtypes ------------------------------------------------------------- */

/* Every dtype of the format. `rank` is the official implementation's dtype order; its
 * writer lays out tensors by descending rank (largest alignment first), then by name. */
static const struct {
    const char *name;
    int bits;
    int rank;
    int mc; /* mc_dtype or -1 */
} k_st_dtypes[] = {
    {"BOOL", 8, 0, -1},          {"F4", 4, 1, -1},          {"F6_E2M3", 6, 2, -1},
    {"F6_E3M2", 6, 3, -1},       {"U8", 8, 4, MC_U8},       {"I8", 8, 5, -1},
    {"F8_E5M2", 8, 6, MC_FP8_E5M2}, {"F8_E4M3", 8, 7, MC_FP8_E4M3}, {"F8_E8M0", 8, 8, -1},
    {"I16", 16, 9, -1},          {"U16", 16, 10, MC_U16},   {"F16", 16, 11, MC_F16},
    {"BF16", 16, 12, MC_BF16},   {"I32", 32, 13, MC_I32},   {"U32", 32, 14, -1},
    {"F32", 32, 15, MC_F32},     {"C64", 64, 16, -1},       {"F64", 64, 17, MC_F64},
    {"I64", 64, 18, MC_I64},     {"U64", 64, 19, -1},
};
#define ST_NUM_DTYPES ((int)(sizeof k_st_dtypes / sizeof k_st_dtypes[0]))

static int st_dtype_index(const char *name) {
    for (int i = 0; i < ST_NUM_DTYPES; i++)
        if (strcmp(name, k_st_dtypes[i].name) == 0) return i;
    return -1;
}

static int st_dtype_index_of_mc(mc_dtype dt) {
    for (int i = 0; i < ST_NUM_DTYPES; i++)
        if (k_st_dtypes[i].mc == (int)dt) return i;
    return -1;
}

int mc_safetensors_dtype_bits(const char *dtype_name) {
    int i = st_dtype_index(dtype_name);
    return i < 0 ? 0 : k_st_dtypes[i].bits;
}

/* IEEE half -> float, exact (every half is a float). */
static float st_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        float f = (float)mant * 5.9604644775390625e-08f; /* mant * 2^-24: zero or subnormal */
        return sign ? -f : f;
    }
    if (exp == 31)
        bits = sign | 0x7f800000u | (mant << 13);
    else
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void st_format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* ---- reader ------------------------------------------------------------- */

struct mc_safetensors {
    char *path;
    void *map;       /* munmap'ed on close; NULL for memory images */
    size_t map_len;
    mc_st_tensor *tensors; /* sorted by name */
    int count;
    char **meta_keys, **meta_values;
    int meta_count;
};

typedef struct {
    uint64_t begin, end;
    int index;
} st_span;

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int st_tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const mc_st_tensor *)a)->name, ((const mc_st_tensor *)b)->name);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool st_json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

void mc_safetensors_close(mc_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->count; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->meta_count; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    if (st->map) munmap(st->map, st->map_len);
    free(st->path);
    free(st);
}

/* Parses one tensor entry of the header into t (name already set). */
static int st_parse_entry(const char *label, const cJSON *entry, mc_st_tensor *t, uint64_t *begin,
                          uint64_t *end, mc_err *err) {
    const char *name = t->name;
    if (!cJSON_IsObject(entry))
        return mc_err_set(err, "%s: tensor '%s': header entry is not a JSON object", label, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype))
        return mc_err_set(err, "%s: tensor '%s': missing or non-string \"dtype\"", label, name);
    int di = st_dtype_index(dtype->valuestring);
    if (di < 0) return mc_err_set(err, "%s: tensor '%s': unknown dtype \"%s\"", label, name, dtype->valuestring);
    t->dtype_name = k_st_dtypes[di].name;
    t->dtype = k_st_dtypes[di].mc;
    if (!cJSON_IsArray(shape))
        return mc_err_set(err, "%s: tensor '%s': missing or non-array \"shape\"", label, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > MC_ST_MAX_DIMS)
        return mc_err_set(err, "%s: tensor '%s': %d dimensions, at most %d supported", label, name, ndim,
                          MC_ST_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        uint64_t dim;
        if (!st_json_uint(cJSON_GetArrayItem(shape, i), &dim))
            return mc_err_set(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", label, name, i);
        t->shape[i] = (int64_t)dim;
        overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t bits;
    if (overflow || numel > (1ull << 53) || __builtin_mul_overflow(numel, (uint64_t)k_st_dtypes[di].bits, &bits))
        return mc_err_set(err, "%s: tensor '%s': shape is too large", label, name);
    if (bits % 8 != 0)
        return mc_err_set(err, "%s: tensor '%s': %llu elements of %s do not fill whole bytes", label, name,
                          (unsigned long long)numel, t->dtype_name);
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)(bits / 8);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !st_json_uint(cJSON_GetArrayItem(offsets, 0), begin) || !st_json_uint(cJSON_GetArrayItem(offsets, 1), end))
        return mc_err_set(err, "%s: tensor '%s': \"data_offsets\" must be two non-negative integers", label, name);
    if (*end < *begin)
        return mc_err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", label, name,
                          (unsigned long long)*begin, (unsigned long long)*end);
    if (*end - *begin != bits / 8) {
        char sh[160];
        st_format_shape(sh, sizeof sh, ndim, t->shape);
        return mc_err_set(err, "%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] span %llu",
                          label, name, sh, t->dtype_name, (unsigned long long)(bits / 8), (unsigned long long)*begin,
                          (unsigned long long)*end, (unsigned long long)(*end - *begin));
    }
    return MC_OK;
}

static int st_parse_metadata(mc_safetensors *st, const char *label, const cJSON *meta, mc_err *err) {
    if (!cJSON_IsObject(meta)) return mc_err_set(err, "%s: \"__metadata__\" is not a JSON object", label);
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = mc_xcalloc((size_t)n + 1, sizeof(char *));
    st->meta_values = mc_xcalloc((size_t)n + 1, sizeof(char *));
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return mc_err_set(err, "%s: \"__metadata__\" value of \"%s\" is not a string", label, kv->string);
        st->meta_keys[st->meta_count] = mc_xstrdup(kv->string);
        st->meta_values[st->meta_count] = mc_xstrdup(kv->valuestring);
        st->meta_count++;
    }
    return MC_OK;
}

/* Validates the image buf[0, len) and fills st (whose path is the label). */
static int st_parse(mc_safetensors *st, const unsigned char *buf, size_t len, mc_err *err) {
    const char *label = st->path;
    if (len < 8)
        return mc_err_set(err, "%s: file is %zu bytes, too short for the 8-byte header length", label, len);
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    if (hlen > MC_ST_MAX_HEADER_BYTES)
        return mc_err_set(err, "%s: header length %llu exceeds the %llu-byte limit (not a safetensors file?)", label,
                          (unsigned long long)hlen, MC_ST_MAX_HEADER_BYTES);
    if (hlen > len - 8)
        return mc_err_set(err, "%s: header length %llu runs past the end of the file (%zu bytes; truncated?)", label,
                          (unsigned long long)hlen, len);
    const char *json = (const char *)buf + 8;
    if (hlen < 2 || json[0] != '{')
        return mc_err_set(err, "%s: header does not start with '{' (not a safetensors file?)", label);
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &parse_end, 0);
    if (!root) {
        long at = parse_end ? (long)(parse_end - json) : -1;
        return mc_err_set(err, "%s: header is not valid JSON (error near byte %ld of %llu)", label, at,
                          (unsigned long long)hlen);
    }
    for (const char *p = parse_end; p && p < json + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return mc_err_set(err, "%s: header has trailing bytes after the JSON object (at byte %ld)", label,
                              (long)(p - json));
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mc_err_set(err, "%s: header is not a JSON object", label);
    }
    const unsigned char *data = buf + 8 + hlen;
    uint64_t data_len = (uint64_t)len - 8 - hlen;

    int n_entries = cJSON_GetArraySize(root);
    st->tensors = mc_xcalloc((size_t)n_entries + 1, sizeof(mc_st_tensor));
    st_span *spans = mc_xcalloc((size_t)n_entries + 1, sizeof(st_span));
    int rc = MC_OK;
    bool seen_meta = false;
    for (const cJSON *e = root->child; e && rc == MC_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta) {
                rc = mc_err_set(err, "%s: \"__metadata__\" appears twice", label);
                break;
            }
            seen_meta = true;
            rc = st_parse_metadata(st, label, e, err);
            continue;
        }
        mc_st_tensor *t = &st->tensors[st->count];
        t->name = mc_xstrdup(e->string);
        st->count++;
        uint64_t begin = 0, end = 0;
        rc = st_parse_entry(label, e, t, &begin, &end, err);
        if (rc != MC_OK) break;
        if (end > data_len) {
            rc = mc_err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] reach past the data region (%llu bytes)",
                            label, t->name, (unsigned long long)begin, (unsigned long long)end,
                            (unsigned long long)data_len);
            break;
        }
        t->data = data + begin;
        spans[st->count - 1] = (st_span){begin, end, st->count - 1};
    }
    cJSON_Delete(root);

    /* The tensors must tile the data region: sorted by offset, each one starts where the
     * previous ended, and the last one ends at the end of the file. */
    if (rc == MC_OK) {
        qsort(spans, (size_t)st->count, sizeof(st_span), st_span_cmp);
        uint64_t at = 0;
        const st_span *prev = NULL;
        for (int i = 0; i < st->count && rc == MC_OK; i++) {
            const st_span *s = &spans[i];
            if (s->begin < at)
                rc = mc_err_set(err, "%s: tensors '%s' and '%s' overlap (bytes [%llu, %llu) and [%llu, %llu))", label,
                                st->tensors[prev->index].name, st->tensors[s->index].name,
                                (unsigned long long)prev->begin, (unsigned long long)prev->end,
                                (unsigned long long)s->begin, (unsigned long long)s->end);
            else if (s->begin > at)
                rc = mc_err_set(err, "%s: tensor '%s': gap of %llu unclaimed bytes before data_offsets [%llu, %llu)",
                                label, st->tensors[s->index].name, (unsigned long long)(s->begin - at),
                                (unsigned long long)s->begin, (unsigned long long)s->end);
            at = s->end;
            prev = s;
        }
        if (rc == MC_OK && at != data_len)
            rc = mc_err_set(err, "%s: %llu bytes after the last tensor are not claimed by any tensor", label,
                            (unsigned long long)(data_len - at));
    }
    free(spans);
    if (rc != MC_OK) return rc;

    qsort(st->tensors, (size_t)st->count, sizeof(mc_st_tensor), st_tensor_name_cmp);
    for (int i = 1; i < st->count; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return mc_err_set(err, "%s: tensor '%s' appears twice in the header", label, st->tensors[i].name);
    return MC_OK;
}

int mc_safetensors_open_memory(const void *buf, size_t len, const char *label, mc_safetensors **out,
                               mc_err *err) {
    *out = NULL;
    mc_safetensors *st = mc_xcalloc(1, sizeof *st);
    st->path = mc_xstrdup(label ? label : "<memory>");
    if (st_parse(st, buf, len, err) != MC_OK) {
        mc_safetensors_close(st);
        return MC_ERR;
    }
    *out = st;
    return MC_OK;
}

int mc_safetensors_open(const char *path, mc_safetensors **out, mc_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mc_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mc_err_set(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mc_err_set(err, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return mc_err_set(err, "%s: file is %zu bytes, too short for the 8-byte header length", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return mc_err_set(err, "%s: cannot mmap %zu bytes: %s", path, len, strerror(map_errno));
    mc_safetensors *st = mc_xcalloc(1, sizeof *st);
    st->path = mc_xstrdup(path);
    st->map = map;
    st->map_len = len;
    if (st_parse(st, map, len, err) != MC_OK) {
        mc_safetensors_close(st);
        return MC_ERR;
    }
    *out = st;
    return MC_OK;
}

const char *mc_safetensors_path(const mc_safetensors *st) { return st->path; }
int mc_safetensors_count(const mc_safetensors *st) { return st->count; }

const mc_st_tensor *mc_safetensors_at(const mc_safetensors *st, int i) {
    MC_ASSERT(i >= 0 && i < st->count, "tensor index %d of %d", i, st->count);
    return &st->tensors[i];
}

const mc_st_tensor *mc_safetensors_find(const mc_safetensors *st, const char *name) {
    mc_st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, (size_t)st->count, sizeof(mc_st_tensor), st_tensor_name_cmp);
}

const char *mc_safetensors_metadata(const mc_safetensors *st, const char *key) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

int mc_safetensors_metadata_count(const mc_safetensors *st) { return st->meta_count; }

void mc_safetensors_metadata_at(const mc_safetensors *st, int i, const char **key, const char **value) {
    MC_ASSERT(i >= 0 && i < st->meta_count, "metadata index %d of %d", i, st->meta_count);
    *key = st->meta_keys[i];
    *value = st->meta_values[i];
}

static const mc_st_tensor *st_need(const mc_safetensors *st, const char *name, mc_err *err) {
    const mc_st_tensor *t = mc_safetensors_find(st, name);
    if (!t) mc_err_set(err, "%s: no tensor named '%s'", st->path, name);
    return t;
}

int mc_safetensors_tensor(const mc_safetensors *st, const char *name, mc_tensor *out, mc_err *err) {
    const mc_st_tensor *t = st_need(st, name, err);
    if (!t) return MC_ERR;
    if (t->dtype < 0)
        return mc_err_set(err, "%s: tensor '%s' has dtype %s, which Megatron-C does not support", st->path, name,
                          t->dtype_name);
    if (t->ndim > MC_MAX_DIMS)
        return mc_err_set(err, "%s: tensor '%s' has %d dimensions, at most %d supported", st->path, name, t->ndim,
                          MC_MAX_DIMS);
    memset(out, 0, sizeof *out);
    out->data = (void *)t->data;
    out->dtype = (mc_dtype)t->dtype;
    out->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) out->shape[i] = t->shape[i];
    return MC_OK;
}

/* Converts a float tensor into out (float or double). Unaligned-safe. */
static int st_convert(const mc_safetensors *st, const mc_st_tensor *t, void *out, bool to_double, mc_err *err) {
    const unsigned char *src = t->data;
    float *of = out;
    double *od = out;
    int64_t n = t->numel;
    switch (t->dtype) {
    case MC_F32:
        if (!to_double) {
            memcpy(out, src, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++) {
                float v;
                memcpy(&v, src + 4 * i, 4);
                od[i] = v;
            }
        }
        break;
    case MC_F64:
        if (to_double) {
            memcpy(out, src, (size_t)n * 8);
        } else {
            for (int64_t i = 0; i < n; i++) {
                double v;
                memcpy(&v, src + 8 * i, 8);
                of[i] = (float)v;
            }
        }
        break;
    case MC_BF16:
    case MC_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            float v = t->dtype == MC_BF16 ? mc_bf16_to_f32(h) : st_half_to_float(h);
            if (to_double)
                od[i] = v;
            else
                of[i] = v;
        }
        break;
    default:
        return mc_err_set(err, "%s: tensor '%s' has dtype %s, expected a float dtype (F32, F64, BF16, F16)", st->path,
                          t->name, t->dtype_name);
    }
    return MC_OK;
}

static int st_read_shaped(const mc_safetensors *st, const char *name, int ndim, const int64_t *shape, void *out,
                          bool to_double, mc_err *err) {
    const mc_st_tensor *t = st_need(st, name, err);
    if (!t) return MC_ERR;
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char have[160], want[160];
        st_format_shape(have, sizeof have, t->ndim, t->shape);
        st_format_shape(want, sizeof want, ndim, shape);
        return mc_err_set(err, "%s: tensor '%s' has shape %s, expected %s", st->path, name, have, want);
    }
    return st_convert(st, t, out, to_double, err);
}

static int st_read_numel(const mc_safetensors *st, const char *name, int64_t numel, void *out, bool to_double,
                         mc_err *err) {
    const mc_st_tensor *t = st_need(st, name, err);
    if (!t) return MC_ERR;
    if (t->numel != numel)
        return mc_err_set(err, "%s: tensor '%s' has %lld elements, expected %lld", st->path, name, (long long)t->numel,
                          (long long)numel);
    return st_convert(st, t, out, to_double, err);
}

int mc_safetensors_read_f32(const mc_safetensors *st, const char *name, int ndim, const int64_t *shape, float *out,
                            mc_err *err) {
    return st_read_shaped(st, name, ndim, shape, out, false, err);
}

int mc_safetensors_read_f64(const mc_safetensors *st, const char *name, int ndim, const int64_t *shape, double *out,
                            mc_err *err) {
    return st_read_shaped(st, name, ndim, shape, out, true, err);
}

int mc_safetensors_read_f32_n(const mc_safetensors *st, const char *name, int64_t numel, float *out, mc_err *err) {
    return st_read_numel(st, name, numel, out, false, err);
}

int mc_safetensors_read_f64_n(const mc_safetensors *st, const char *name, int64_t numel, double *out, mc_err *err) {
    return st_read_numel(st, name, numel, out, true, err);
}

/* ---- writer ------------------------------------------------------------- */

typedef struct {
    char *name;
    mc_dtype dtype;
    int ndim;
    int64_t shape[MC_ST_MAX_DIMS];
    const void *data;
    void *owned;
    size_t nbytes;
} st_entry;

struct mc_safetensors_writer {
    st_entry *entries;
    int count, cap;
    char **meta_keys, **meta_values;
    int meta_count, meta_cap;
};

mc_safetensors_writer *mc_safetensors_writer_create(void) { return mc_xcalloc(1, sizeof(mc_safetensors_writer)); }

void mc_safetensors_writer_free(mc_safetensors_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) {
        free(w->entries[i].name);
        free(w->entries[i].owned);
    }
    free(w->entries);
    for (int i = 0; i < w->meta_count; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->meta_keys);
    free(w->meta_values);
    free(w);
}

static int st_writer_add(mc_safetensors_writer *w, const char *name, mc_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, bool copy, mc_err *err) {
    if (!name || !name[0]) return mc_err_set(err, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return mc_err_set(err, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    if ((int)dtype < 0 || dtype >= MC_DTYPE_COUNT || st_dtype_index_of_mc(dtype) < 0)
        return mc_err_set(err, "safetensors writer: tensor '%s': bad dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > MC_ST_MAX_DIMS)
        return mc_err_set(err, "safetensors writer: tensor '%s': %d dimensions (0..%d allowed)", name, ndim,
                          MC_ST_MAX_DIMS);
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return mc_err_set(err, "safetensors writer: tensor '%s' added twice", name);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return mc_err_set(err, "safetensors writer: tensor '%s': negative dimension %lld", name,
                              (long long)shape[i]);
        if (__builtin_mul_overflow(numel, (uint64_t)shape[i], &numel) || numel > (1ull << 53))
            return mc_err_set(err, "safetensors writer: tensor '%s': shape too large", name);
    }
    size_t nbytes = (size_t)numel * mc_dtype_size(dtype);
    if (nbytes && !data) return mc_err_set(err, "safetensors writer: tensor '%s': NULL data", name);
    if (w->count == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->entries = mc_xrealloc(w->entries, (size_t)w->cap * sizeof(st_entry));
    }
    st_entry *e = &w->entries[w->count++];
    memset(e, 0, sizeof *e);
    e->name = mc_xstrdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = nbytes;
    if (copy && nbytes) {
        e->owned = mc_xmalloc(nbytes);
        memcpy(e->owned, data, nbytes);
        e->data = e->owned;
    } else {
        e->data = data;
    }
    return MC_OK;
}

int mc_safetensors_writer_add(mc_safetensors_writer *w, const char *name, mc_dtype dtype, int ndim,
                              const int64_t *shape, const void *data, mc_err *err) {
    return st_writer_add(w, name, dtype, ndim, shape, data, false, err);
}

int mc_safetensors_writer_add_copy(mc_safetensors_writer *w, const char *name, mc_dtype dtype, int ndim,
                                   const int64_t *shape, const void *data, mc_err *err) {
    return st_writer_add(w, name, dtype, ndim, shape, data, true, err);
}

int mc_safetensors_writer_set_metadata(mc_safetensors_writer *w, const char *key, const char *value, mc_err *err) {
    if (!key || !value) return mc_err_set(err, "safetensors writer: NULL metadata key or value");
    for (int i = 0; i < w->meta_count; i++)
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = mc_xstrdup(value);
            return MC_OK;
        }
    if (w->meta_count == w->meta_cap) {
        w->meta_cap = w->meta_cap ? 2 * w->meta_cap : 8;
        w->meta_keys = mc_xrealloc(w->meta_keys, (size_t)w->meta_cap * sizeof(char *));
        w->meta_values = mc_xrealloc(w->meta_values, (size_t)w->meta_cap * sizeof(char *));
    }
    w->meta_keys[w->meta_count] = mc_xstrdup(key);
    w->meta_values[w->meta_count] = mc_xstrdup(value);
    w->meta_count++;
    return MC_OK;
}

/* A growable string. */
typedef struct {
    char *s;
    size_t len, cap;
} st_buf;

static void sb_put(st_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->s = mc_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_puts(st_buf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(st_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    MC_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal, escaped as serde_json does (UTF-8 passes through). */
static void sb_json_string(st_buf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        default:
            if (*p < 0x20)
                sb_printf(b, "\\u%04x", *p);
            else
                sb_put(b, (const char *)p, 1);
        }
    }
    sb_puts(b, "\"");
}

/* Data order of the official writer: descending dtype rank, then name (bytewise). */
typedef struct {
    int rank;
    const char *name;
    int index;
} st_order_key;

static int st_order_cmp(const void *a, const void *b) {
    const st_order_key *x = a, *y = b;
    if (x->rank != y->rank) return y->rank - x->rank;
    return strcmp(x->name, y->name);
}

int mc_safetensors_writer_save(mc_safetensors_writer *w, const char *path, mc_err *err) {
    st_order_key *keys = mc_xmalloc(((size_t)w->count + 1) * sizeof(st_order_key));
    for (int i = 0; i < w->count; i++)
        keys[i] = (st_order_key){k_st_dtypes[st_dtype_index_of_mc(w->entries[i].dtype)].rank, w->entries[i].name, i};
    qsort(keys, (size_t)w->count, sizeof(st_order_key), st_order_cmp);
    int *order = mc_xmalloc(((size_t)w->count + 1) * sizeof(int));
    for (int i = 0; i < w->count; i++) order[i] = keys[i].index;
    free(keys);

    /* The header: __metadata__ first, then the tensors in data order (serde_json's compact
     * form), padded with spaces to a multiple of 8. */
    st_buf h = {0};
    sb_puts(&h, "{");
    if (w->meta_count) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < w->meta_count; i++) {
            if (i) sb_puts(&h, ",");
            sb_json_string(&h, w->meta_keys[i]);
            sb_puts(&h, ":");
            sb_json_string(&h, w->meta_values[i]);
        }
        sb_puts(&h, "}");
    }
    uint64_t offset = 0;
    for (int k = 0; k < w->count; k++) {
        const st_entry *e = &w->entries[order[k]];
        if (k || w->meta_count) sb_puts(&h, ",");
        sb_json_string(&h, e->name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", mc_dtype_name(e->dtype));
        for (int i = 0; i < e->ndim; i++) sb_printf(&h, "%s%lld", i ? "," : "", (long long)e->shape[i]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)(offset + e->nbytes));
        offset += e->nbytes;
    }
    sb_puts(&h, "}");
    while (h.len % 8) sb_puts(&h, " ");
    uint64_t hlen = h.len;

    mc_atomic_file af;
    int rc = mc_atomic_file_open(&af, path, err);
    if (rc == MC_OK) rc = mc_atomic_file_write(&af, &hlen, 8, err);
    if (rc == MC_OK) rc = mc_atomic_file_write(&af, h.s, h.len, err);
    for (int k = 0; rc == MC_OK && k < w->count; k++) {
        const st_entry *e = &w->entries[order[k]];
        rc = mc_atomic_file_write(&af, e->data, e->nbytes, err);
    }
    if (rc == MC_OK) rc = mc_atomic_file_commit(&af, err);
    else mc_atomic_file_abort(&af); /* removes the temporary file; a no-op when open failed */
    free(h.s);
    free(order);
    return rc;
}
