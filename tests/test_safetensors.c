/* test_safetensors.c: the safetensors reader and writer: round trips of every dtype, the
 * official byte layout, every validation failure, the atomic write under injected faults,
 * and the fixtures written by the Python safetensors library. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/safetensors.h"

static char g_dir[256];

/* A golden fixture: tests/fixtures/golden/NAME under the source root (ctest's working
 * directory), else beside this source file (when run from elsewhere). */
static const char *golden_path(const char *name) {
    static char buf[8][1024];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "tests/fixtures/golden/%s", name);
    if (access(buf[k], R_OK) == 0) return buf[k];
    const char *slash = strrchr(__FILE__, '/');
    int dir_len = slash ? (int)(slash - __FILE__) : 1;
    snprintf(buf[k], sizeof buf[k], "%.*s/fixtures/golden/%s", dir_len, slash ? __FILE__ : ".", name);
    return buf[k];
}

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static unsigned char *read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    fwrite(data, 1, len, f);
    fclose(f);
}

/* Number of entries in g_dir whose name contains ".tmp." */
static int count_tmp_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* ---- round trips ---------------------------------------------------------- */

static void test_roundtrip_all_dtypes(void) {
    mc_err err = {{0}};
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    /* One tensor per dtype, shapes from scalar to 5-D, bytes that differ everywhere. */
    static const int64_t shapes[MC_DTYPE_COUNT][6] = {
        /* ndim, dims... */
        {2, 3, 5}, {1, 7}, {3, 2, 3, 4}, {1, 9}, {2, 4, 4}, {0}, {5, 1, 2, 1, 3, 2}, {1, 11}, {2, 3, 3}, {1, 6},
    };
    unsigned char *bufs[MC_DTYPE_COUNT];
    char name[64];
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++) {
        int ndim = (int)shapes[dt][0];
        int64_t numel = 1;
        for (int i = 0; i < ndim; i++) numel *= shapes[dt][i + 1];
        size_t nbytes = (size_t)numel * mc_dtype_size(dt);
        bufs[dt] = malloc(nbytes);
        for (size_t i = 0; i < nbytes; i++) bufs[dt][i] = (unsigned char)(i * 31 + dt * 7 + 1);
        snprintf(name, sizeof name, "t.%s", mc_dtype_name(dt));
        CHECK(mc_safetensors_writer_add(w, name, dt, ndim, &shapes[dt][1], bufs[dt], &err) == MC_OK, "%s", err.msg);
    }
    int64_t zero_shape[2] = {0, 4};
    CHECK(mc_safetensors_writer_add(w, "empty", MC_F32, 2, zero_shape, NULL, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_safetensors_writer_set_metadata(w, "format", "pt", &err) == MC_OK);
    CHECK(mc_safetensors_writer_set_metadata(w, "note", "x", &err) == MC_OK);
    CHECK(mc_safetensors_writer_set_metadata(w, "note", "quote \" and\nnewline", &err) == MC_OK);
    /* Bad additions fail and change nothing. */
    CHECK(mc_safetensors_writer_add(w, "t.F32", MC_F32, 1, zero_shape + 1, bufs[0], &err) == MC_ERR);
    CHECK(strstr(err.msg, "t.F32") && strstr(err.msg, "twice"), "%s", err.msg);
    int64_t neg = -1;
    CHECK(mc_safetensors_writer_add(w, "neg", MC_F32, 1, &neg, bufs[0], &err) == MC_ERR);
    CHECK(mc_safetensors_writer_add(w, "__metadata__", MC_F32, 1, zero_shape + 1, bufs[0], &err) == MC_ERR);

    const char *path = tmp_path("all.safetensors");
    CHECK(mc_safetensors_writer_save(w, path, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_writer_free(w);
    CHECK(count_tmp_files() == 0);

    mc_safetensors *st = NULL;
    CHECK(mc_safetensors_open(path, &st, &err) == MC_OK, "%s", err.msg);
    if (!st) return;
    CHECK(mc_safetensors_count(st) == MC_DTYPE_COUNT + 1);
    for (int i = 1; i < mc_safetensors_count(st); i++)
        CHECK(strcmp(mc_safetensors_at(st, i - 1)->name, mc_safetensors_at(st, i)->name) < 0, "sorted by name");
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++) {
        snprintf(name, sizeof name, "t.%s", mc_dtype_name(dt));
        const mc_st_tensor *t = mc_safetensors_find(st, name);
        CHECK(t != NULL, "%s", name);
        if (!t) continue;
        CHECK(t->dtype == dt && strcmp(t->dtype_name, mc_dtype_name(dt)) == 0, "%s", name);
        CHECK(t->ndim == (int)shapes[dt][0], "%s", name);
        int64_t numel = 1;
        for (int i = 0; i < t->ndim; i++) {
            CHECK(t->shape[i] == shapes[dt][i + 1], "%s dim %d", name, i);
            numel *= shapes[dt][i + 1];
        }
        CHECK(t->numel == numel && t->nbytes == (size_t)numel * mc_dtype_size(dt), "%s", name);
        CHECK(memcmp(t->data, bufs[dt], t->nbytes) == 0, "%s bytes", name);
        CHECK((uintptr_t)t->data % mc_dtype_size(dt) == 0, "%s aligned", name);
        if (t->ndim <= MC_MAX_DIMS) {
            mc_tensor v;
            CHECK(mc_safetensors_tensor(st, name, &v, &err) == MC_OK, "%s", err.msg);
            CHECK(v.data == t->data && v.dtype == (mc_dtype)dt && v.ndim == t->ndim);
        } else {
            mc_tensor v;
            CHECK(mc_safetensors_tensor(st, name, &v, &err) == MC_ERR && strstr(err.msg, "dimensions"), "%s", err.msg);
        }
    }
    const mc_st_tensor *e = mc_safetensors_find(st, "empty");
    CHECK(e && e->numel == 0 && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 4);
    CHECK(mc_safetensors_find(st, "nope") == NULL);
    CHECK(mc_safetensors_metadata_count(st) == 2);
    CHECK(mc_safetensors_metadata(st, "format") && strcmp(mc_safetensors_metadata(st, "format"), "pt") == 0);
    CHECK(mc_safetensors_metadata(st, "note") &&
          strcmp(mc_safetensors_metadata(st, "note"), "quote \" and\nnewline") == 0);
    CHECK(mc_safetensors_metadata(st, "missing") == NULL);
    mc_safetensors_close(st);
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++) free(bufs[dt]);
}

/* The header is the official writer's, byte for byte (checked against Python's output). */
static void test_official_layout(void) {
    mc_err err = {{0}};
    float b[2] = {0};
    double a[1] = {0};
    uint8_t c[3] = {0};
    int32_t s = 0;
    int64_t sb = 2, sa = 1, sc = 3, sq = 0;
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    CHECK(mc_safetensors_writer_add(w, "b", MC_F32, 1, &sb, b, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "a", MC_F64, 1, &sa, a, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "c", MC_U8, 1, &sc, c, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "s", MC_I32, 0, NULL, &s, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "q\"\\\n", MC_U16, 1, &sq, NULL, &err) == MC_OK);
    CHECK(mc_safetensors_writer_set_metadata(w, "format", "pt", &err) == MC_OK);
    const char *path = tmp_path("layout.safetensors");
    CHECK(mc_safetensors_writer_save(w, path, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_writer_free(w);
    /* safetensors.numpy.save({...same...}, metadata={"format": "pt"}) */
    const char *expect =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},\"s\":{\"dtype\":\"I32\",\"shape\":[],"
        "\"data_offsets\":[16,20]},\"q\\\"\\\\\\n\":{\"dtype\":\"U16\",\"shape\":[0],\"data_offsets\":[20,20]},"
        "\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[20,23]}}    ";
    size_t len = 0;
    unsigned char *img = read_file(path, &len);
    CHECK(img && len == 343, "file is %zu bytes, Python's 343", len);
    if (img && len >= 8 + strlen(expect)) {
        uint64_t hlen;
        memcpy(&hlen, img, 8);
        CHECK(hlen == 312 && hlen == strlen(expect), "header %llu", (unsigned long long)hlen);
        CHECK(memcmp(img + 8, expect, strlen(expect)) == 0, "header differs: %.*s", (int)hlen, (const char *)img + 8);
    }
    free(img);

    mc_safetensors *st;
    CHECK(mc_safetensors_open(path, &st, &err) == MC_OK, "%s", err.msg);
    const mc_st_tensor *q = mc_safetensors_find(st, "q\"\\\n");
    CHECK(q && q->ndim == 1 && q->numel == 0);
    const mc_st_tensor *sc_t = mc_safetensors_find(st, "s");
    CHECK(sc_t && sc_t->ndim == 0 && sc_t->numel == 1 && sc_t->nbytes == 4);
    mc_safetensors_close(st);
}

static uint16_t f32_to_f16_bits(float f) { /* exact for the test values */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, mant = u & 0x7fffff;
    if (exp == 0) return (uint16_t)sign;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    int e = (int)exp - 127 + 15;
    if (e <= 0) return (uint16_t)(sign | ((mant | 0x800000) >> (14 - e)));
    return (uint16_t)(sign | (e << 10) | (mant >> 13));
}

static void test_float_conversion(void) {
    mc_err err = {{0}};
    const float vals[6] = {1.5f, -2.25f, 0.0f, 65504.0f, 5.9604644775390625e-08f /* smallest f16 subnormal */,
                           -3.0517578125e-05f /* f16 subnormal */};
    float f32[6];
    double f64[6];
    uint16_t bf16[6], f16[6];
    int32_t i32[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 6; i++) {
        f32[i] = vals[i];
        f64[i] = vals[i];
        bf16[i] = mc_f32_to_bf16(vals[i]);
        f16[i] = f32_to_f16_bits(vals[i]);
    }
    f64[0] = 1.0 + 1e-12; /* survives read_f64, rounds in read_f32 */
    int64_t shape[2] = {2, 3};
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    CHECK(mc_safetensors_writer_add(w, "f32", MC_F32, 2, shape, f32, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "f64", MC_F64, 2, shape, f64, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add_copy(w, "bf16", MC_BF16, 2, shape, bf16, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add_copy(w, "f16", MC_F16, 2, shape, f16, &err) == MC_OK);
    CHECK(mc_safetensors_writer_add(w, "i32", MC_I32, 2, shape, i32, &err) == MC_OK);
    memset(bf16, 0, sizeof bf16); /* the writer kept copies */
    memset(f16, 0, sizeof f16);
    const char *path = tmp_path("floats.safetensors");
    CHECK(mc_safetensors_writer_save(w, path, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_writer_free(w);

    mc_safetensors *st;
    CHECK(mc_safetensors_open(path, &st, &err) == MC_OK, "%s", err.msg);
    float of[6];
    double od[6];
    const char *names[4] = {"f32", "f64", "bf16", "f16"};
    for (int k = 0; k < 4; k++) {
        CHECK(mc_safetensors_read_f32(st, names[k], 2, shape, of, &err) == MC_OK, "%s", err.msg);
        CHECK(mc_safetensors_read_f64_n(st, names[k], 6, od, &err) == MC_OK, "%s", err.msg);
        for (int i = 0; i < 6; i++) {
            double want = vals[i];
            if (k == 2) want = mc_bf16_to_f32(mc_f32_to_bf16(vals[i]));
            if (k == 1 && i == 0) {
                CHECK(od[0] == 1.0 + 1e-12 && of[0] == 1.0f, "%s[0]", names[k]);
                continue;
            }
            CHECK(of[i] == (float)want && od[i] == want, "%s[%d]: %g %g want %g", names[k], i, of[i], od[i], want);
        }
    }
    CHECK(mc_safetensors_read_f32(st, "i32", 2, shape, of, &err) == MC_ERR);
    CHECK(strstr(err.msg, "'i32'") && strstr(err.msg, "float dtype") && strstr(err.msg, path), "%s", err.msg);
    int64_t wrong[2] = {3, 2};
    CHECK(mc_safetensors_read_f32(st, "f32", 2, wrong, of, &err) == MC_ERR);
    CHECK(strstr(err.msg, "[2, 3]") && strstr(err.msg, "[3, 2]"), "%s", err.msg);
    CHECK(mc_safetensors_read_f64_n(st, "f32", 5, od, &err) == MC_ERR && strstr(err.msg, "6 elements"), "%s", err.msg);
    CHECK(mc_safetensors_read_f32(st, "absent", 2, shape, of, &err) == MC_ERR && strstr(err.msg, "'absent'"), "%s",
          err.msg);
    mc_safetensors_close(st);
}

/* ---- validation ------------------------------------------------------------- */

/* A file image: 8-byte length, the JSON (as given), data_len bytes of data. */
static unsigned char *image(const char *json, size_t data_len, size_t *len) {
    size_t h = strlen(json);
    *len = 8 + h + data_len;
    unsigned char *buf = calloc(1, *len + 1);
    uint64_t hl = h;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, json, h);
    return buf;
}

/* Opening the image fails with a message holding every needle. */
static void expect_invalid(const char *json, size_t data_len, const char *needle1, const char *needle2) {
    size_t len;
    unsigned char *buf = image(json, data_len, &len);
    mc_err err = {{0}};
    mc_safetensors *st = (mc_safetensors *)1;
    int rc = mc_safetensors_open_memory(buf, len, "bad.safetensors", &st, &err);
    CHECK(rc == MC_ERR && st == NULL, "accepted: %s", json);
    CHECK(strstr(err.msg, "bad.safetensors") != NULL, "no file name in: %s", err.msg);
    if (needle1) CHECK(strstr(err.msg, needle1) != NULL, "'%s' not in: %s", needle1, err.msg);
    if (needle2) CHECK(strstr(err.msg, needle2) != NULL, "'%s' not in: %s", needle2, err.msg);
    CHECK(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    free(buf);
}

static void test_validation_errors(void) {
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    size_t len;
    mc_err err = {{0}};
    mc_safetensors *st = NULL;
    unsigned char *buf = image(ok, 16, &len);
    CHECK(mc_safetensors_open_memory(buf, len, "good", &st, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_close(st);

    /* Too short for the length; length beyond the file; every truncation of a good image. */
    CHECK(mc_safetensors_open_memory(buf, 5, "bad.safetensors", &st, &err) == MC_ERR && strstr(err.msg, "too short"),
          "%s", err.msg);
    for (size_t cut = 0; cut < len; cut++) {
        CHECK(mc_safetensors_open_memory(buf, cut, "bad.safetensors", &st, &err) == MC_ERR, "truncated to %zu", cut);
        CHECK(strstr(err.msg, "bad.safetensors"), "%s", err.msg);
        if (cut >= 8 && cut < 8 + strlen(ok)) CHECK(strstr(err.msg, "runs past the end"), "%s", err.msg);
        if (cut >= 8 + strlen(ok)) CHECK(strstr(err.msg, "'w'") && strstr(err.msg, "past the data region"), "%s", err.msg);
    }
    /* Extra data after the last tensor. */
    free(buf);
    expect_invalid(ok, 20, "4 bytes after the last tensor", NULL);

    uint64_t huge = 1ull << 40;
    unsigned char hdr[16] = {0};
    memcpy(hdr, &huge, 8);
    CHECK(mc_safetensors_open_memory(hdr, 16, "bad.safetensors", &st, &err) == MC_ERR && strstr(err.msg, "limit"), "%s",
          err.msg);
    uint64_t ten = 10;
    memcpy(hdr, &ten, 8);
    memcpy(hdr + 8, "{}", 2);
    CHECK(mc_safetensors_open_memory(hdr, 16, "bad.safetensors", &st, &err) == MC_ERR &&
              strstr(err.msg, "header length 10 runs past the end"),
          "%s", err.msg);

    expect_invalid("[1,2]", 0, "start with '{'", NULL);
    expect_invalid("{\"w\":{\"dtype\":\"F32\",", 0, "not valid JSON", NULL);
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} xx", 8, "trailing", NULL);
    expect_invalid("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'", "unknown dtype \"F33\"");
    expect_invalid("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'", "dtype");
    expect_invalid("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'", "dtype");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "'w'", "shape");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8, "'w'", "shape[1]");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "'w'", "shape[0]");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "'w'",
                   "dimensions");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "'w'",
                   "too large");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'w'", "data_offsets");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "'w'", "data_offsets");
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "'w'", "end before");
    expect_invalid("{\"w\":[1]}", 0, "'w'", "not a JSON object");
    /* shape * dtype size vs the offsets' span */
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "'w'", "needs 12 bytes");
    expect_invalid("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, "'w'", "needs 8 bytes");
    expect_invalid("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "'w'", "whole bytes");
    /* offsets outside the data region */
    expect_invalid("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, "'w'", "past the data region");
    /* overlap, gap, duplicates */
    expect_invalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12, "'a' and 'b' overlap", NULL);
    expect_invalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                   8, "overlap", NULL);
    expect_invalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                   12, "'b'", "gap of 4");
    expect_invalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, "'a'", "twice");
    /* metadata */
    expect_invalid("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__", "not a string");
    expect_invalid("{\"__metadata__\":[\"k\"]}", 0, "__metadata__", "not a JSON object");

    /* Accepted: only metadata, an empty file body, zero-size tensors, padding spaces. */
    buf = image("{\"__metadata__\":{\"a\":\"b\"}}      ", 0, &len);
    CHECK(mc_safetensors_open_memory(buf, len, "meta", &st, &err) == MC_OK, "%s", err.msg);
    CHECK(st && mc_safetensors_count(st) == 0 && strcmp(mc_safetensors_metadata(st, "a"), "b") == 0);
    mc_safetensors_close(st);
    free(buf);
    buf = image("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                "\"w\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                2, &len);
    CHECK(mc_safetensors_open_memory(buf, len, "zero", &st, &err) == MC_OK, "%s", err.msg);
    if (st) {
        const mc_st_tensor *b = mc_safetensors_find(st, "w");
        CHECK(b && b->dtype == -1 && strcmp(b->dtype_name, "BOOL") == 0);
        mc_tensor v;
        CHECK(mc_safetensors_tensor(st, "w", &v, &err) == MC_ERR && strstr(err.msg, "BOOL"), "%s", err.msg);
    }
    mc_safetensors_close(st);
    free(buf);
}

/* The same failures through real files. */
static void test_validation_files(void) {
    mc_err err = {{0}};
    mc_safetensors *st = NULL;
    CHECK(mc_safetensors_open(tmp_path("does-not-exist"), &st, &err) == MC_ERR && strstr(err.msg, "does-not-exist"),
          "%s", err.msg);
    CHECK(mc_safetensors_open(g_dir, &st, &err) == MC_ERR && strstr(err.msg, "regular file"), "%s", err.msg);
    write_file(tmp_path("empty.safetensors"), "", 0);
    CHECK(mc_safetensors_open(tmp_path("empty.safetensors"), &st, &err) == MC_ERR && strstr(err.msg, "too short"), "%s",
          err.msg);

    float data[4] = {1, 2, 3, 4};
    int64_t shape = 4;
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    CHECK(mc_safetensors_writer_add(w, "w", MC_F32, 1, &shape, data, &err) == MC_OK);
    const char *path = tmp_path("trunc.safetensors");
    CHECK(mc_safetensors_writer_save(w, path, &err) == MC_OK, "%s", err.msg);
    mc_safetensors_writer_free(w);
    size_t len;
    unsigned char *img = read_file(path, &len);
    CHECK(truncate(path, (off_t)len - 3) == 0);
    CHECK(mc_safetensors_open(path, &st, &err) == MC_ERR, "truncated file accepted");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "'w'") && strstr(err.msg, "past the data region"), "%s", err.msg);
    CHECK(truncate(path, 20) == 0);
    CHECK(mc_safetensors_open(path, &st, &err) == MC_ERR && strstr(err.msg, "runs past the end"), "%s", err.msg);
    /* Corrupt the dtype in place. */
    char *at = memmem(img, len, "\"F32\"", 5);
    CHECK(at != NULL);
    if (at) memcpy(at, "\"Q32\"", 5);
    write_file(path, img, len);
    CHECK(mc_safetensors_open(path, &st, &err) == MC_ERR && strstr(err.msg, "unknown dtype \"Q32\""), "%s", err.msg);
    free(img);
}

/* ---- the atomic write -------------------------------------------------------- */

static int save_one(const char *path, float value, int64_t n, mc_err *err) {
    float *data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) data[i] = value;
    mc_safetensors_writer *w = mc_safetensors_writer_create();
    int rc = mc_safetensors_writer_add(w, "x", MC_F32, 1, &n, data, err);
    if (rc == MC_OK) rc = mc_safetensors_writer_save(w, path, err);
    mc_safetensors_writer_free(w);
    free(data);
    return rc;
}

static float first_value(const char *path) {
    mc_err err;
    mc_safetensors *st;
    float v = -1;
    if (mc_safetensors_open(path, &st, &err) != MC_OK) return -999;
    const mc_st_tensor *t = mc_safetensors_find(st, "x");
    if (t) memcpy(&v, t->data, 4);
    mc_safetensors_close(st);
    return v;
}

static void test_atomic_write(void) {
    mc_err err = {{0}};
    const char *path = tmp_path("atomic.safetensors");
    CHECK(save_one(path, 1.0f, 16, &err) == MC_OK, "%s", err.msg);
    CHECK(first_value(path) == 1.0f);
    CHECK(save_one(path, 2.0f, 16, &err) == MC_OK, "%s", err.msg); /* replaces */
    CHECK(first_value(path) == 2.0f);
    CHECK(count_tmp_files() == 0);

    /* A writer killed by the file-size limit mid-write (EFBIG): error, old file intact. */
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 4096;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    int rc = save_one(path, 3.0f, 1 << 16, &err);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, old_handler);
    CHECK(rc == MC_ERR, "write past RLIMIT_FSIZE succeeded");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "write failed"), "%s", err.msg);
    CHECK(first_value(path) == 2.0f, "old file clobbered");
    CHECK(count_tmp_files() == 0, "temporary file left behind");

    /* rename onto a directory fails: the directory stays, no temporary file remains. */
    const char *dir = tmp_path("a-directory");
    CHECK(mkdir(dir, 0755) == 0);
    CHECK(save_one(dir, 4.0f, 4, &err) == MC_ERR && strstr(err.msg, "cannot rename"), "%s", err.msg);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(count_tmp_files() == 0, "temporary file left behind");
    rmdir(dir);

    /* No such directory. */
    CHECK(save_one(tmp_path("no/such/dir/x.safetensors"), 1.0f, 4, &err) == MC_ERR &&
              strstr(err.msg, "does not exist"),
          "%s", err.msg);
}

/* ---- fixtures written by the Python safetensors library ------------------------ */

static void test_python_fixture(void) {
    mc_err err = {{0}};
    mc_safetensors *st = NULL;
    const char *path = golden_path("gpt2_weights.safetensors");
    if (mc_safetensors_open(path, &st, &err) != MC_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    CHECK(mc_safetensors_count(st) == 28, "%d tensors", mc_safetensors_count(st));
    CHECK(mc_safetensors_metadata(st, "format") && strcmp(mc_safetensors_metadata(st, "format"), "pt") == 0);
    const mc_st_tensor *wte = mc_safetensors_find(st, "transformer.wte.weight");
    CHECK(wte && wte->dtype == MC_F32 && wte->ndim == 2 && wte->shape[0] == 256 && wte->shape[1] == 64);
    float *buf = malloc(256 * 64 * sizeof(float));
    int64_t shape[2] = {256, 64};
    CHECK(mc_safetensors_read_f32(st, "transformer.wte.weight", 2, shape, buf, &err) == MC_OK, "%s", err.msg);
    /* Values printed by numpy from the same file. */
    CHECK(buf[0] == 0.014348284341394901f, "%.9g", buf[0]);
    CHECK(buf[255 * 64 + 63] == -0.1474299132823944f, "%.9g", buf[255 * 64 + 63]);
    float lnf[64];
    CHECK(mc_safetensors_read_f32_n(st, "transformer.ln_f.bias", 64, lnf, &err) == MC_OK, "%s", err.msg);
    CHECK(lnf[5] == 0.0642399862408638f, "%.9g", lnf[5]);
    int64_t ashape[2] = {64, 192};
    float *attn = malloc(64 * 192 * sizeof(float));
    CHECK(mc_safetensors_read_f32(st, "transformer.h.1.attn.c_attn.weight", 2, ashape, attn, &err) == MC_OK);
    CHECK(attn[3 * 192 + 100] == -0.17584720253944397f, "%.9g", attn[3 * 192 + 100]);
    free(attn);
    free(buf);
    mc_safetensors_close(st);

    /* The reference file: I32 tokens, F32 logits, F64 scalars, against the JSON summary. */
    CHECK(mc_safetensors_open(golden_path("gpt2_reference.safetensors"), &st, &err) == MC_OK, "%s", err.msg);
    if (!st) return;
    mc_tensor tok;
    CHECK(mc_safetensors_tensor(st, "tokens", &tok, &err) == MC_OK, "%s", err.msg);
    CHECK(tok.dtype == MC_I32 && tok.ndim == 2 && tok.shape[0] == 2 && tok.shape[1] == 16);
    mc_tensor lab;
    CHECK(mc_safetensors_tensor(st, "labels", &lab, &err) == MC_OK, "%s", err.msg);
    const int32_t *t = tok.data, *l = lab.data;
    CHECK(t[0] == 75 && t[1] == 175 && l[0] == 175 && l[3] == 139);
    for (int i = 0; i < 15; i++) CHECK(l[i] == t[i + 1], "labels are the next tokens");
    float logit;
    const mc_st_tensor *lg = mc_safetensors_find(st, "logits");
    CHECK(lg && lg->ndim == 3 && lg->shape[2] == 256 && lg->dtype == MC_F32);
    if (lg) {
        memcpy(&logit, (const char *)lg->data + ((size_t)(1 * 16 + 15) * 256 + 255) * 4, 4);
        CHECK(logit == 1.2802221775054932f, "%.9g", logit);
    }
    double loss, losses[5];
    CHECK(mc_safetensors_read_f64(st, "loss", 0, NULL, &loss, &err) == MC_OK, "%s", err.msg);
    int64_t five = 5;
    CHECK(mc_safetensors_read_f64(st, "train.losses", 1, &five, losses, &err) == MC_OK, "%s", err.msg);
    size_t jlen;
    char *json = (char *)read_file(golden_path("gpt2_config.json"), &jlen);
    cJSON *root = json ? cJSON_ParseWithLength(json, jlen) : NULL;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(root, "reference");
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(ref, "losses");
    CHECK(cJSON_GetArraySize(jl) == 5);
    CHECK(loss == cJSON_GetObjectItemCaseSensitive(ref, "loss")->valuedouble, "%.17g", loss);
    for (int i = 0; i < 5 && i < cJSON_GetArraySize(jl); i++)
        CHECK(losses[i] == cJSON_GetArrayItem(jl, i)->valuedouble, "loss %d: %.17g", i, losses[i]);
    cJSON_Delete(root);
    free(json);
    mc_safetensors_close(st);
}

/* Our writer reproduces Python's files byte for byte (same tensors, same metadata). */
static void test_rewrite_identical(void) {
    const char *files[] = {"gpt2_weights", "gpt2_reference", "llama_weights", "llama_reference"};
    for (int f = 0; f < 4; f++) {
        char src[1024], file[64];
        snprintf(file, sizeof file, "%s.safetensors", files[f]);
        snprintf(src, sizeof src, "%s", golden_path(file));
        mc_err err = {{0}};
        mc_safetensors *st;
        if (mc_safetensors_open(src, &st, &err) != MC_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        mc_safetensors_writer *w = mc_safetensors_writer_create();
        for (int i = 0; i < mc_safetensors_metadata_count(st); i++) {
            const char *k, *v;
            mc_safetensors_metadata_at(st, i, &k, &v);
            mc_safetensors_writer_set_metadata(w, k, v, &err);
        }
        for (int i = 0; i < mc_safetensors_count(st); i++) {
            const mc_st_tensor *t = mc_safetensors_at(st, i);
            CHECK(mc_safetensors_writer_add(w, t->name, (mc_dtype)t->dtype, t->ndim, t->shape, t->data, &err) == MC_OK,
                  "%s", err.msg);
        }
        const char *dst = tmp_path("rewrite.safetensors");
        CHECK(mc_safetensors_writer_save(w, dst, &err) == MC_OK, "%s", err.msg);
        mc_safetensors_writer_free(w);
        mc_safetensors_close(st);
        size_t la = 0, lb = 0;
        unsigned char *a = read_file(src, &la), *b = read_file(dst, &lb);
        CHECK(a && b && la == lb && memcmp(a, b, la) == 0, "%s: rewritten file differs (%zu vs %zu bytes)", files[f],
              la, lb);
        free(a);
        free(b);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mc_test_safetensors_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_roundtrip_all_dtypes);
    RUN(test_official_layout);
    RUN(test_float_conversion);
    RUN(test_validation_errors);
    RUN(test_validation_files);
    RUN(test_atomic_write);
    RUN(test_python_fixture);
    RUN(test_rewrite_identical);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_summary();
}
