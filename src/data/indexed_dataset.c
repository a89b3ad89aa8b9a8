#include "data/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"

static const unsigned char k_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

size_t mc_idx_dtype_size(int code) {
    switch (code) {
    case MC_IDX_DTYPE_UINT8:
    case MC_IDX_DTYPE_INT8: return 1;
    case MC_IDX_DTYPE_INT16:
    case MC_IDX_DTYPE_UINT16: return 2;
    case MC_IDX_DTYPE_INT32:
    case MC_IDX_DTYPE_FLOAT32: return 4;
    case MC_IDX_DTYPE_INT64:
    case MC_IDX_DTYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *mc_idx_dtype_name(int code) {
    static const char *const names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
    return code >= 1 && code <= 8 ? names[code] : "?";
}

void mc_idx_dtype_range(int code, int64_t *lo, int64_t *hi) {
    switch (code) {
    case MC_IDX_DTYPE_UINT8: *lo = 0, *hi = UINT8_MAX; break;
    case MC_IDX_DTYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case MC_IDX_DTYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case MC_IDX_DTYPE_UINT16: *lo = 0, *hi = UINT16_MAX; break;
    case MC_IDX_DTYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
    }
}

int mc_idx_optimal_dtype(int64_t vocab_size) {
    return vocab_size < 65500 ? MC_IDX_DTYPE_UINT16 : MC_IDX_DTYPE_INT32;
}

char *mc_indexed_path(const char *prefix, const char *ext) {
    size_t n = strlen(prefix) + strlen(ext) + 1;
    char *p = mc_xmalloc(n);
    snprintf(p, n, "%s%s", prefix, ext);
    return p;
}

static uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ---- reader ----------------------------------------------------------------------------- */

/* Maps a whole file read-only; an empty file maps to NULL. */
static int map_file(const char *path, const unsigned char **map, size_t *size, mc_err *err) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mc_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mc_err_set(err, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return mc_err_set(err, "%s: cannot mmap %zu bytes: %s", path, *size, strerror(e));
        }
        *map = m;
    }
    close(fd);
    return MC_OK;
}

void mc_indexed_dataset_close(mc_indexed_dataset *ds) {
    if (!ds) return;
    if (ds->idx) munmap((void *)ds->idx, ds->idx_size);
    if (ds->bin) munmap((void *)ds->bin, ds->bin_size);
    free(ds->lengths);
    free(ds->prefix);
    free(ds);
}

int64_t mc_indexed_dataset_pointer(const mc_indexed_dataset *ds, int64_t i) {
    int64_t v;
    memcpy(&v, ds->idx + MC_IDX_HEADER_BYTES + 4 * ds->num_sequences + 8 * i, 8);
    return v;
}

int64_t mc_indexed_dataset_doc_index(const mc_indexed_dataset *ds, int64_t k) {
    int64_t v;
    memcpy(&v, ds->idx + MC_IDX_HEADER_BYTES + 12 * ds->num_sequences + 8 * k, 8);
    return v;
}

static int validate_idx(mc_indexed_dataset *ds, const char *path, mc_err *err) {
    const unsigned char *m = ds->idx;
    size_t size = ds->idx_size;
    if (size < 9 || memcmp(m, k_magic, 9) != 0)
        return mc_err_set(err,
                          "%s: not a Megatron indexed dataset index (the file does not start with the magic "
                          "\"MMIDIDX\\0\\0\"%s)",
                          path, size < 9 ? "; it is shorter than the magic" : "");
    if (size < MC_IDX_HEADER_BYTES)
        return mc_err_set(err, "%s: truncated: %zu bytes, but the header alone is %d bytes", path, size,
                          MC_IDX_HEADER_BYTES);
    uint64_t version = load_u64(m + 9);
    if (version != 1)
        return mc_err_set(err, "%s: unsupported index version %llu (Megatron writes version 1)", path,
                          (unsigned long long)version);
    int code = m[17];
    if (mc_idx_dtype_size(code) == 0)
        return mc_err_set(err, "%s: unknown token dtype code %d (Megatron's codes are 1..8)", path, code);
    if (code == MC_IDX_DTYPE_FLOAT32 || code == MC_IDX_DTYPE_FLOAT64)
        return mc_err_set(err, "%s: token dtype %s: token ids must be integers", path, mc_idx_dtype_name(code));
    ds->dtype = code;
    ds->itemsize = mc_idx_dtype_size(code);
    uint64_t n = load_u64(m + 18), d = load_u64(m + 26);
    /* 34 + 12 N + 8 D must fit the file: bound N and D first so the sum cannot wrap. */
    uint64_t limit = (uint64_t)size;
    if (n > limit / 12 || d > limit / 8 || MC_IDX_HEADER_BYTES + 12 * n + 8 * d > limit)
        return mc_err_set(err,
                          "%s: truncated or corrupt: the header announces %llu sequences and %llu document indices "
                          "(%s bytes), but the file has %zu bytes",
                          path, (unsigned long long)n, (unsigned long long)d,
                          n > limit / 12 || d > limit / 8 ? "more" : "", size);
    uint64_t need = MC_IDX_HEADER_BYTES + 12 * n + 8 * d;
    if (size != need && size != need + n)
        return mc_err_set(err,
                          "%s: %zu bytes, but %llu sequences and %llu document indices take %llu (or %llu with "
                          "multimodal sequence modes): the file is corrupt or not an index",
                          path, size, (unsigned long long)n, (unsigned long long)d, (unsigned long long)need,
                          (unsigned long long)(need + n));
    if (d < 1) return mc_err_set(err, "%s: no document indices (there must be at least the leading 0)", path);
    ds->num_sequences = (int64_t)n;
    ds->num_doc_indices = (int64_t)d;
    ds->lengths = mc_xmalloc((n ? n : 1) * sizeof *ds->lengths);
    memcpy(ds->lengths, m + MC_IDX_HEADER_BYTES, n * 4);
    int64_t total = 0;
    for (int64_t i = 0; i < (int64_t)n; i++) {
        if (ds->lengths[i] < 0)
            return mc_err_set(err, "%s: sequence %lld has a negative length %d", path, (long long)i, ds->lengths[i]);
        total += ds->lengths[i];
    }
    ds->num_tokens = total;
    int64_t prev = 0;
    for (int64_t k = 0; k < (int64_t)d; k++) {
        int64_t v = mc_indexed_dataset_doc_index(ds, k);
        if (v < prev || v > (int64_t)n)
            return mc_err_set(err,
                              "%s: document index %lld is %lld (document indices must be non-decreasing sequence "
                              "numbers in [0, %llu])",
                              path, (long long)k, (long long)v, (unsigned long long)n);
        prev = v;
    }
    if (mc_indexed_dataset_doc_index(ds, (int64_t)d - 1) != (int64_t)n)
        return mc_err_set(err, "%s: the last document index is %lld, not the sequence count %llu", path,
                          (long long)mc_indexed_dataset_doc_index(ds, (int64_t)d - 1), (unsigned long long)n);
    return MC_OK;
}

static int validate_bin(mc_indexed_dataset *ds, const char *idx_path, const char *bin_path, mc_err *err) {
    size_t want = (size_t)ds->num_tokens * ds->itemsize;
    if (ds->bin_size != want) {
        /* Name the likely cause: a .bin written with another token size. */
        const int others[] = {MC_IDX_DTYPE_UINT16, MC_IDX_DTYPE_INT32, MC_IDX_DTYPE_UINT8, MC_IDX_DTYPE_INT64};
        for (int i = 0; i < 4 && ds->num_tokens > 0; i++) {
            size_t s = mc_idx_dtype_size(others[i]);
            if (s != ds->itemsize && ds->bin_size == (size_t)ds->num_tokens * s)
                return mc_err_set(err,
                                  "%s has %zu bytes, but %s says its %lld tokens are %s (%zu bytes each, %zu bytes in "
                                  "all): the .bin holds %zu-byte tokens (%s?), so the .idx and .bin do not belong "
                                  "together",
                                  bin_path, ds->bin_size, idx_path, (long long)ds->num_tokens,
                                  mc_idx_dtype_name(ds->dtype), ds->itemsize, want, s, mc_idx_dtype_name(others[i]));
        }
        return mc_err_set(err, "%s has %zu bytes, but %s describes %lld tokens of %s = %zu bytes: %s", bin_path,
                          ds->bin_size, idx_path, (long long)ds->num_tokens, mc_idx_dtype_name(ds->dtype), want,
                          ds->bin_size < want ? "the .bin is truncated" : "the .idx and .bin do not belong together");
    }
    for (int64_t i = 0; i < ds->num_sequences; i++) {
        int64_t p = mc_indexed_dataset_pointer(ds, i);
        int64_t bytes = (int64_t)ds->lengths[i] * (int64_t)ds->itemsize;
        if (p < 0 || p % (int64_t)ds->itemsize != 0 || p > (int64_t)ds->bin_size ||
            bytes > (int64_t)ds->bin_size - p)
            return mc_err_set(err,
                              "%s: sequence %lld points at byte %lld with %d tokens, outside the %zu bytes of %s (or "
                              "not aligned to %zu-byte tokens)",
                              idx_path, (long long)i, (long long)p, ds->lengths[i], ds->bin_size, bin_path,
                              ds->itemsize);
    }
    return MC_OK;
}

int mc_indexed_dataset_open(mc_indexed_dataset **out, const char *prefix, mc_err *err) {
    *out = NULL;
    mc_indexed_dataset *ds = mc_xcalloc(1, sizeof *ds);
    ds->prefix = mc_xstrdup(prefix);
    char *idx_path = mc_indexed_path(prefix, ".idx"), *bin_path = mc_indexed_path(prefix, ".bin");
    struct stat st;
    int rc = MC_ERR;
    if (stat(idx_path, &st) != 0 && stat(bin_path, &st) != 0) {
        mc_err_set(err, "%s: no dataset at this prefix (%s and %s do not exist)", prefix, idx_path, bin_path);
        goto done;
    }
    if (map_file(idx_path, &ds->idx, &ds->idx_size, err) != MC_OK) goto done;
    if (validate_idx(ds, idx_path, err) != MC_OK) goto done;
    if (map_file(bin_path, &ds->bin, &ds->bin_size, err) != MC_OK) goto done;
    if (validate_bin(ds, idx_path, bin_path, err) != MC_OK) goto done;
    if (ds->bin) madvise((void *)ds->bin, ds->bin_size, MADV_RANDOM);
    rc = MC_OK;
done:
    free(idx_path);
    free(bin_path);
    if (rc != MC_OK) {
        mc_indexed_dataset_close(ds);
        return MC_ERR;
    }
    *out = ds;
    return MC_OK;
}

void mc_indexed_dataset_read(const mc_indexed_dataset *ds, int64_t i, int64_t offset, int64_t count, int32_t *out) {
    MC_ASSERT(i >= 0 && i < ds->num_sequences && offset >= 0 && count >= 0 && offset + count <= ds->lengths[i]);
    if (count == 0) return;
    const unsigned char *p = ds->bin + mc_indexed_dataset_pointer(ds, i) + (size_t)offset * ds->itemsize;
    switch (ds->dtype) {
    case MC_IDX_DTYPE_UINT16:
        for (int64_t k = 0; k < count; k++) {
            uint16_t v;
            memcpy(&v, p + 2 * k, 2);
            out[k] = v;
        }
        break;
    case MC_IDX_DTYPE_INT32: memcpy(out, p, (size_t)count * 4); break;
    case MC_IDX_DTYPE_UINT8:
        for (int64_t k = 0; k < count; k++) out[k] = p[k];
        break;
    case MC_IDX_DTYPE_INT8:
        for (int64_t k = 0; k < count; k++) out[k] = (int8_t)p[k];
        break;
    case MC_IDX_DTYPE_INT16:
        for (int64_t k = 0; k < count; k++) {
            int16_t v;
            memcpy(&v, p + 2 * k, 2);
            out[k] = v;
        }
        break;
    case MC_IDX_DTYPE_INT64:
        for (int64_t k = 0; k < count; k++) {
            int64_t v;
            memcpy(&v, p + 8 * k, 8);
            out[k] = (int32_t)v;
        }
        break;
    default: MC_ASSERT(0, "dtype %d", ds->dtype);
    }
}

/* Min and max of n tokens at p (any alignment: the .bin of an int32 dataset is aligned,
 * a window start need not be). */
#define TOKEN_RANGE(type)                                      \
    do {                                                       \
        for (size_t k = 0; k < n; k++) {                       \
            type v;                                            \
            memcpy(&v, p + k * sizeof v, sizeof v);            \
            if (v < *lo) *lo = v;                              \
            if (v > *hi) *hi = v;                              \
        }                                                      \
    } while (0)

static void token_range(int code, const unsigned char *p, size_t n, int64_t *lo, int64_t *hi) {
    switch (code) {
    case MC_IDX_DTYPE_UINT8: TOKEN_RANGE(uint8_t); break;
    case MC_IDX_DTYPE_INT8: TOKEN_RANGE(int8_t); break;
    case MC_IDX_DTYPE_INT16: TOKEN_RANGE(int16_t); break;
    case MC_IDX_DTYPE_UINT16: TOKEN_RANGE(uint16_t); break;
    case MC_IDX_DTYPE_INT32: TOKEN_RANGE(int32_t); break;
    default: TOKEN_RANGE(int64_t); break;
    }
}
#undef TOKEN_RANGE

bool mc_indexed_dataset_token_range(const mc_indexed_dataset *ds, size_t max_scan_bytes, int64_t *lo, int64_t *hi) {
    *lo = INT64_MAX;
    *hi = INT64_MIN;
    size_t tokens = ds->bin_size / ds->itemsize;
    bool whole = tokens * ds->itemsize <= max_scan_bytes;
    if (whole) {
        token_range(ds->dtype, ds->bin, tokens, lo, hi);
    } else {
        const size_t windows = 64, per_window = max_scan_bytes / windows / ds->itemsize;
        for (size_t w = 0; w < windows; w++) {
            /* window w starts at token w/(windows-1) of the way, so the first and last tokens are read */
            size_t start = (size_t)((double)(tokens - per_window) * (double)w / (double)(windows - 1));
            token_range(ds->dtype, ds->bin + start * ds->itemsize, per_window, lo, hi);
        }
    }
    if (tokens == 0) *lo = 0, *hi = -1;
    return whole;
}

/* ---- builder ---------------------------------------------------------------------------- */

/* An append-only array in an unlinked temporary file: constant memory however many
 * sequences a dataset has. */
typedef struct spill {
    FILE *f;
    int64_t count;
    size_t itemsize;
} spill;

static int spill_open(spill *s, const char *dir, size_t itemsize, mc_err *err) {
    memset(s, 0, sizeof *s);
    s->itemsize = itemsize;
    int fd = -1;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
    if (fd < 0) {
        size_t n = strlen(dir) + 32;
        char *tmpl = mc_xmalloc(n);
        snprintf(tmpl, n, "%s/.mc-spill-XXXXXX", dir);
        fd = mkstemp(tmpl);
        if (fd >= 0) unlink(tmpl);
        free(tmpl);
    }
    if (fd < 0) return mc_err_set(err, "cannot create a temporary file in %s: %s", dir, strerror(errno));
    s->f = fdopen(fd, "w+b");
    MC_ASSERT(s->f);
    setvbuf(s->f, NULL, _IOFBF, 1 << 18);
    return MC_OK;
}

static void spill_close(spill *s) {
    if (s->f) fclose(s->f);
    s->f = NULL;
}

static int spill_push(spill *s, const void *v, int64_t n, mc_err *err) {
    if (n > 0 && fwrite(v, s->itemsize, (size_t)n, s->f) != (size_t)n)
        return mc_err_set(err, "writing a temporary index file: %s", strerror(errno));
    s->count += n;
    return MC_OK;
}

/* Streams the spilled items in chunks to fn. */
static int spill_each(spill *s, int (*fn)(void *ctx, const void *items, int64_t n, mc_err *err), void *ctx,
                      mc_err *err) {
    if (fflush(s->f) != 0 || fseek(s->f, 0, SEEK_SET) != 0)
        return mc_err_set(err, "reading back a temporary index file: %s", strerror(errno));
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = mc_xmalloc(CHUNK * s->itemsize);
    int64_t left = s->count;
    int rc = MC_OK;
    while (left > 0 && rc == MC_OK) {
        size_t want = left < CHUNK ? (size_t)left : CHUNK;
        if (fread(buf, s->itemsize, want, s->f) != want) {
            rc = mc_err_set(err, "reading back a temporary index file: short read");
            break;
        }
        rc = fn(ctx, buf, (int64_t)want, err);
        left -= (int64_t)want;
    }
    free(buf);
    if (fseek(s->f, 0, SEEK_END) != 0 && rc == MC_OK) rc = mc_err_set(err, "temporary index file: seek failed");
    return rc;
}

struct mc_indexed_builder {
    char *prefix, *idx_path;
    int dtype;
    size_t itemsize;
    mc_atomic_file bin;
    spill lengths;     /* int32 */
    spill doc_indices; /* int64, starts with 0 */
    int64_t bin_bytes;
    unsigned char *conv; /* token conversion buffer */
    size_t conv_cap;
};

int mc_indexed_builder_open(mc_indexed_builder **out, const char *prefix, int dtype, mc_err *err) {
    *out = NULL;
    size_t itemsize = mc_idx_dtype_size(dtype);
    if (itemsize == 0 || dtype == MC_IDX_DTYPE_FLOAT32 || dtype == MC_IDX_DTYPE_FLOAT64)
        return mc_err_set(err, "indexed dataset builder: token dtype code %d is not an integer type", dtype);
    mc_indexed_builder *b = mc_xcalloc(1, sizeof *b);
    b->prefix = mc_xstrdup(prefix);
    b->idx_path = mc_indexed_path(prefix, ".idx");
    b->dtype = dtype;
    b->itemsize = itemsize;
    char *bin_path = mc_indexed_path(prefix, ".bin");
    int rc = mc_atomic_file_open(&b->bin, bin_path, err);
    free(bin_path);
    if (rc != MC_OK) {
        free(b->prefix);
        free(b->idx_path);
        free(b);
        return MC_ERR;
    }
    char *dir = mc_path_dirname(prefix);
    int64_t zero = 0;
    if (spill_open(&b->lengths, dir, 4, err) != MC_OK || spill_open(&b->doc_indices, dir, 8, err) != MC_OK ||
        spill_push(&b->doc_indices, &zero, 1, err) != MC_OK) {
        free(dir);
        mc_indexed_builder_abort(b);
        return MC_ERR;
    }
    free(dir);
    *out = b;
    return MC_OK;
}

void mc_indexed_builder_abort(mc_indexed_builder *b) {
    if (!b) return;
    mc_atomic_file_abort(&b->bin);
    spill_close(&b->lengths);
    spill_close(&b->doc_indices);
    free(b->conv);
    free(b->prefix);
    free(b->idx_path);
    free(b);
}

int64_t mc_indexed_builder_num_sequences(const mc_indexed_builder *b) { return b->lengths.count; }
int64_t mc_indexed_builder_num_documents(const mc_indexed_builder *b) { return b->doc_indices.count - 1; }

/* Converts tokens to the dataset dtype (numpy.array(tokens, dtype)) and appends them. */
static int write_tokens(mc_indexed_builder *b, const int32_t *tokens, int64_t n, mc_err *err) {
    if (n == 0) return MC_OK;
    size_t bytes = (size_t)n * b->itemsize;
    if (b->dtype == MC_IDX_DTYPE_INT32) {
        MC_TRY(mc_atomic_file_write(&b->bin, tokens, bytes, err));
        b->bin_bytes += (int64_t)bytes;
        return MC_OK;
    }
    if (bytes > b->conv_cap) {
        b->conv_cap = bytes * 2;
        b->conv = mc_xrealloc(b->conv, b->conv_cap);
    }
    int64_t lo, hi;
    switch (b->dtype) {
    case MC_IDX_DTYPE_UINT16: lo = 0, hi = 65535; break;
    case MC_IDX_DTYPE_UINT8: lo = 0, hi = 255; break;
    case MC_IDX_DTYPE_INT8: lo = -128, hi = 127; break;
    case MC_IDX_DTYPE_INT16: lo = -32768, hi = 32767; break;
    default: lo = INT32_MIN, hi = INT32_MAX; break;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v = tokens[i];
        if (v < lo || v > hi)
            return mc_err_set(err, "token id %lld does not fit the dataset's token dtype %s", (long long)v,
                              mc_idx_dtype_name(b->dtype));
        unsigned char *p = b->conv + (size_t)i * b->itemsize;
        switch (b->itemsize) {
        case 1: *p = (unsigned char)v; break;
        case 2: {
            uint16_t u = (uint16_t)v;
            memcpy(p, &u, 2);
            break;
        }
        default: memcpy(p, &v, 8); break; /* int64 on little-endian */
        }
    }
    MC_TRY(mc_atomic_file_write(&b->bin, b->conv, bytes, err));
    b->bin_bytes += (int64_t)bytes;
    return MC_OK;
}

int mc_indexed_builder_add_item(mc_indexed_builder *b, const int32_t *tokens, int64_t n, mc_err *err) {
    if (n > INT32_MAX) return mc_err_set(err, "a sequence of %lld tokens does not fit the int32 length", (long long)n);
    MC_TRY(write_tokens(b, tokens, n, err));
    int32_t len = (int32_t)n;
    return spill_push(&b->lengths, &len, 1, err);
}

void mc_indexed_builder_end_document(mc_indexed_builder *b) {
    int64_t v = b->lengths.count;
    mc_err err;
    if (spill_push(&b->doc_indices, &v, 1, &err) != MC_OK) MC_ASSERT(0, "%s", err.msg);
}

int mc_indexed_builder_add_document(mc_indexed_builder *b, const int32_t *tokens, int64_t ntokens,
                                    const int32_t *lengths, int64_t nlengths, mc_err *err) {
    int64_t sum = 0;
    for (int64_t i = 0; i < nlengths; i++) {
        if (lengths[i] < 0) return mc_err_set(err, "add_document: negative sequence length %d", lengths[i]);
        sum += lengths[i];
    }
    if (sum != ntokens)
        return mc_err_set(err, "add_document: the sequence lengths sum to %lld, the document has %lld tokens",
                          (long long)sum, (long long)ntokens);
    MC_TRY(write_tokens(b, tokens, ntokens, err));
    MC_TRY(spill_push(&b->lengths, lengths, nlengths, err));
    int64_t v = b->lengths.count;
    return spill_push(&b->doc_indices, &v, 1, err);
}

int mc_indexed_builder_add_index(mc_indexed_builder *b, const char *prefix, mc_err *err) {
    mc_indexed_dataset *ds;
    MC_TRY(mc_indexed_dataset_open(&ds, prefix, err));
    int rc = MC_OK;
    if (ds->dtype != b->dtype) {
        rc = mc_err_set(err, "%s: token dtype %s, but the dataset being built is %s (merge datasets of one tokenizer)",
                        prefix, mc_idx_dtype_name(ds->dtype), mc_idx_dtype_name(b->dtype));
        goto done;
    }
    int64_t offset = b->lengths.count;
    if ((rc = spill_push(&b->lengths, ds->lengths, ds->num_sequences, err)) != MC_OK) goto done;
    for (int64_t k = 1; k < ds->num_doc_indices; k++) {
        int64_t v = offset + mc_indexed_dataset_doc_index(ds, k);
        if ((rc = spill_push(&b->doc_indices, &v, 1, err)) != MC_OK) goto done;
    }
    if (ds->bin_size) {
        rc = mc_atomic_file_write(&b->bin, ds->bin, ds->bin_size, err);
        b->bin_bytes += (int64_t)ds->bin_size;
    }
done:
    mc_indexed_dataset_close(ds);
    return rc;
}

typedef struct {
    mc_atomic_file *af;
    int64_t ptr, itemsize;
    int64_t *scratch;
} idx_writer;

static int copy_lengths(void *ctx, const void *items, int64_t n, mc_err *err) {
    idx_writer *w = ctx;
    return mc_atomic_file_write(w->af, items, (size_t)n * 4, err);
}

static int copy_doc_indices(void *ctx, const void *items, int64_t n, mc_err *err) {
    idx_writer *w = ctx;
    return mc_atomic_file_write(w->af, items, (size_t)n * 8, err);
}

/* _IndexWriter._sequence_pointers: a running int64 byte offset, starting at 0. */
static int write_pointers(void *ctx, const void *items, int64_t n, mc_err *err) {
    idx_writer *w = ctx;
    const int32_t *len = items;
    for (int64_t i = 0; i < n; i++) {
        w->scratch[i] = w->ptr;
        w->ptr += (int64_t)len[i] * w->itemsize;
    }
    return mc_atomic_file_write(w->af, w->scratch, (size_t)n * 8, err);
}

int mc_indexed_builder_finalize(mc_indexed_builder *b, mc_err *err) {
    mc_atomic_file idx = {0};
    unsigned char header[MC_IDX_HEADER_BYTES];
    memcpy(header, k_magic, 9);
    uint64_t version = 1, n = (uint64_t)b->lengths.count, d = (uint64_t)b->doc_indices.count;
    memcpy(header + 9, &version, 8);
    header[17] = (unsigned char)b->dtype;
    memcpy(header + 18, &n, 8);
    memcpy(header + 26, &d, 8);
    idx_writer w = {.af = &idx, .ptr = 0, .itemsize = (int64_t)b->itemsize};
    w.scratch = mc_xmalloc((1 << 16) * sizeof *w.scratch);
    int rc = MC_ERR;
    if (mc_atomic_file_finish(&b->bin, err) != MC_OK) goto fail;
    if (mc_atomic_file_open(&idx, b->idx_path, err) != MC_OK) goto fail;
    if (mc_atomic_file_write(&idx, header, sizeof header, err) != MC_OK) goto fail;
    if (spill_each(&b->lengths, copy_lengths, &w, err) != MC_OK) goto fail;
    if (spill_each(&b->lengths, write_pointers, &w, err) != MC_OK) goto fail;
    if (spill_each(&b->doc_indices, copy_doc_indices, &w, err) != MC_OK) goto fail;
    MC_ASSERT(w.ptr == b->bin_bytes, "pointers end at %lld, .bin has %lld bytes", (long long)w.ptr,
              (long long)b->bin_bytes);
    if (mc_atomic_file_finish(&idx, err) != MC_OK) goto fail;
    /* Both files are complete on disk; publish the .bin first so that a reader never sees
     * a new .idx next to an old .bin (the size check would catch it anyway). */
    if (mc_atomic_file_rename(&b->bin, err) != MC_OK) goto fail;
    if (mc_atomic_file_rename(&idx, err) != MC_OK) goto fail;
    rc = MC_OK;
fail:
    free(w.scratch);
    mc_atomic_file_abort(&idx);
    mc_indexed_builder_abort(b);
    return rc;
}
