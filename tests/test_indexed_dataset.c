/* test_indexed_dataset.c: the Megatron .bin/.idx reader and writer against
 * tools/reference/make_data_golden.py (a numpy restatement of IndexedDatasetBuilder and
 * add_index): byte-identical files, atomic replacement, and a clear error for every kind
 * of broken file. Also the pieces the index cache rests on: numpy.save's .npy bytes,
 * md5, and Python's float repr and json string escaping. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/md5.h"
#include "base/pyjson.h"
#include "check.h"
#include "data/indexed_dataset.h"
#include "data/lowlevel.h"
#include "data/npy.h"
#include "fixture_util.h"

#define FIX "tests/fixtures/data/"

static char *g_tmp;

static void tmp_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_tmp, name); }

/* ---- reading the fixtures ------------------------------------------------------------------ */

static void test_read_fixtures(void) {
    FILE *f = fopen(FIX "idx_datasets.txt", "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[256];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char name[64];
        int code;
        long long nseq, ndi, ntok;
        if (sscanf(line, "%63s %d %lld %lld %lld", name, &code, &nseq, &ndi, &ntok) != 5) continue;
        char prefix[256];
        snprintf(prefix, sizeof prefix, FIX "%s", name);
        mc_indexed_dataset *ds;
        mc_err err;
        CHECK(mc_indexed_dataset_open(&ds, prefix, &err) == MC_OK, "%s: %s", name, err.msg);
        if (!ds) continue;
        CHECK(ds->dtype == code && ds->num_sequences == nseq && ds->num_doc_indices == ndi && ds->num_tokens == ntok,
              "%s", name);
        /* Every sequence, read through the reader, equals the raw .bin at its pointer. */
        char bin[300];
        snprintf(bin, sizeof bin, "%s.bin", prefix);
        size_t nb;
        unsigned char *raw = fu_read(bin, &nb);
        int bad = 0;
        int32_t buf[512];
        for (int64_t i = 0; i < ds->num_sequences; i++) {
            int64_t p = mc_indexed_dataset_pointer(ds, i);
            int n = ds->lengths[i];
            if (n > 512) continue;
            mc_indexed_dataset_read(ds, i, 0, n, buf);
            for (int k = 0; k < n; k++) {
                int64_t v;
                if (ds->itemsize == 2) {
                    uint16_t u;
                    memcpy(&u, raw + p + 2 * k, 2);
                    v = u;
                } else {
                    int32_t s;
                    memcpy(&s, raw + p + 4 * k, 4);
                    v = s;
                }
                bad += buf[k] != v;
            }
            /* Partial reads (offset, count) agree with the full read. */
            if (n >= 3) {
                int32_t part[2];
                mc_indexed_dataset_read(ds, i, 1, 2, part);
                bad += part[0] != buf[1] || part[1] != buf[2];
            }
        }
        CHECK(bad == 0, "%s: %d token mismatches", name, bad);
        CHECK(mc_indexed_dataset_doc_index(ds, 0) == 0 && mc_indexed_dataset_doc_index(ds, ndi - 1) == nseq);
        free(raw);
        mc_indexed_dataset_close(ds);
        cases++;
    }
    fclose(f);
    CHECK(cases == 4);

    /* idx_c: an int32 dataset with ids above 65535 and a document of two sequences. */
    mc_lowlevel *ll;
    mc_err err;
    CHECK(mc_lowlevel_open_indexed(&ll, FIX "idx_c", &err) == MC_OK, "%s", err.msg);
    if (ll) {
        int32_t t[4];
        CHECK(ll->num_sequences == 4 && ll->lengths[0] == 3 && ll->lengths[1] == 2 && ll->lengths[2] == 4);
        mc_lowlevel_read(ll, 1, 0, 2, t);
        CHECK(t[0] == 70000 && t[1] == 5);
        mc_lowlevel_read(ll, 2, 1, 1, t);
        CHECK(t[0] == 99999);
        CHECK(mc_lowlevel_indexed(ll) != NULL && !strcmp(ll->kind, "indexed"));
        mc_lowlevel_close(ll);
    }
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Rebuilds the dataset at `src` document by document with the builder into `dst`. */
static int rebuild(const char *src, const char *dst, bool per_item, mc_err *err) {
    mc_indexed_dataset *ds;
    MC_TRY(mc_indexed_dataset_open(&ds, src, err));
    mc_indexed_builder *b;
    if (mc_indexed_builder_open(&b, dst, ds->dtype, err) != MC_OK) {
        mc_indexed_dataset_close(ds);
        return MC_ERR;
    }
    int32_t *tok = malloc((size_t)(ds->num_tokens + 1) * sizeof *tok);
    int rc = MC_OK;
    for (int64_t d = 0; d + 1 < ds->num_doc_indices && rc == MC_OK; d++) {
        int64_t s0 = mc_indexed_dataset_doc_index(ds, d), s1 = mc_indexed_dataset_doc_index(ds, d + 1);
        int64_t n = 0;
        int32_t lens[64];
        for (int64_t s = s0; s < s1; s++) {
            mc_indexed_dataset_read(ds, s, 0, ds->lengths[s], tok + n);
            if (per_item) rc = mc_indexed_builder_add_item(b, tok + n, ds->lengths[s], err);
            lens[s - s0] = ds->lengths[s];
            n += ds->lengths[s];
        }
        if (per_item)
            mc_indexed_builder_end_document(b);
        else if (rc == MC_OK)
            rc = mc_indexed_builder_add_document(b, tok, n, lens, s1 - s0, err);
    }
    free(tok);
    mc_indexed_dataset_close(ds);
    if (rc != MC_OK) {
        mc_indexed_builder_abort(b);
        return MC_ERR;
    }
    return mc_indexed_builder_finalize(b, err);
}

static bool same_dataset(const char *a, const char *b) {
    char x[512], y[512];
    snprintf(x, sizeof x, "%s.bin", a);
    snprintf(y, sizeof y, "%s.bin", b);
    bool same = fu_same_file(x, y);
    snprintf(x, sizeof x, "%s.idx", a);
    snprintf(y, sizeof y, "%s.idx", b);
    return same && fu_same_file(x, y);
}

static void test_builder_identical(void) {
    char out[512];
    mc_err err;
    tmp_path(out, sizeof out, "rebuilt_a");
    CHECK(rebuild(FIX "idx_a", out, false, &err) == MC_OK, "%s", err.msg);
    CHECK(same_dataset(out, FIX "idx_a"), "add_document rebuild of idx_a differs from numpy's");
    tmp_path(out, sizeof out, "rebuilt_c");
    CHECK(rebuild(FIX "idx_c", out, true, &err) == MC_OK, "%s", err.msg);
    CHECK(same_dataset(out, FIX "idx_c"), "add_item rebuild of idx_c differs");

    /* add_index: a then b equals the fixture merge. */
    tmp_path(out, sizeof out, "merged_ab");
    mc_indexed_builder *b;
    CHECK(mc_indexed_builder_open(&b, out, MC_IDX_DTYPE_UINT16, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_indexed_builder_add_index(b, FIX "idx_a", &err) == MC_OK, "%s", err.msg);
    CHECK(mc_indexed_builder_add_index(b, FIX "idx_b", &err) == MC_OK, "%s", err.msg);
    CHECK(mc_indexed_builder_num_sequences(b) == 86 && mc_indexed_builder_num_documents(b) == 90);
    /* A dataset of another dtype cannot join. */
    CHECK(mc_indexed_builder_add_index(b, FIX "idx_c", &err) == MC_ERR && strstr(err.msg, "int32"), "%s", err.msg);
    CHECK(mc_indexed_builder_finalize(b, &err) == MC_OK, "%s", err.msg);
    CHECK(same_dataset(out, FIX "idx_ab"), "add_index merge differs from numpy's");

    /* An empty dataset is valid: one document index (0), no sequence. */
    tmp_path(out, sizeof out, "empty");
    CHECK(mc_indexed_builder_open(&b, out, MC_IDX_DTYPE_UINT16, &err) == MC_OK);
    CHECK(mc_indexed_builder_finalize(b, &err) == MC_OK, "%s", err.msg);
    mc_indexed_dataset *ds;
    CHECK(mc_indexed_dataset_open(&ds, out, &err) == MC_OK, "%s", err.msg);
    if (ds) {
        CHECK(ds->num_sequences == 0 && ds->num_doc_indices == 1);
        mc_indexed_dataset_close(ds);
    }
}

static void test_builder_errors_and_atomicity(void) {
    char dir[512], out[600], bin[700], idx[700], names[2048];
    mc_err err;
    snprintf(dir, sizeof dir, "%s/atomic", g_tmp);
    mkdir(dir, 0755);
    snprintf(out, sizeof out, "%s/ds", dir);
    snprintf(bin, sizeof bin, "%s.bin", out);
    snprintf(idx, sizeof idx, "%s.idx", out);
    /* Existing files are replaced, as Megatron overwrites them. */
    fu_write_str(bin, "old bin");
    fu_write_str(idx, "old idx");
    mc_indexed_builder *b;
    int32_t toks[3] = {1, 2, 3}, lens[1] = {3};
    CHECK(mc_indexed_builder_open(&b, out, MC_IDX_DTYPE_UINT16, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_indexed_builder_add_document(b, toks, 3, lens, 1, &err) == MC_OK);
    /* Until finalize, the old files are untouched. */
    size_t n;
    unsigned char *old = fu_read(bin, &n);
    CHECK(old && n == 7 && !memcmp(old, "old bin", 7));
    free(old);
    CHECK(mc_indexed_builder_finalize(b, &err) == MC_OK, "%s", err.msg);
    mc_indexed_dataset *ds;
    CHECK(mc_indexed_dataset_open(&ds, out, &err) == MC_OK, "%s", err.msg);
    if (ds) mc_indexed_dataset_close(ds);
    CHECK(fu_list(dir, names, sizeof names) == 2, "only ds.bin and ds.idx remain: %s", names);

    /* A failure (a token the dtype cannot hold) leaves the previous files and no temporaries. */
    unsigned char *before_bin = fu_read(bin, &n);
    CHECK(mc_indexed_builder_open(&b, out, MC_IDX_DTYPE_UINT16, &err) == MC_OK);
    int32_t big[2] = {5, 70000}, blens[1] = {2};
    CHECK(mc_indexed_builder_add_document(b, big, 2, blens, 1, &err) == MC_ERR && strstr(err.msg, "70000") &&
              strstr(err.msg, "uint16"),
          "%s", err.msg);
    CHECK(mc_indexed_builder_add_document(b, toks, 3, blens, 1, &err) == MC_ERR && strstr(err.msg, "sum"), "%s",
          err.msg);
    mc_indexed_builder_abort(b);
    size_t n2;
    unsigned char *after_bin = fu_read(bin, &n2);
    CHECK(before_bin && after_bin && n == n2 && !memcmp(before_bin, after_bin, n), "the old .bin was changed");
    free(before_bin);
    free(after_bin);
    CHECK(fu_list(dir, names, sizeof names) == 2, "nothing left behind: %s", names);

    /* A directory that does not exist. */
    CHECK(mc_indexed_builder_open(&b, "/nonexistent-dir-mc/x", MC_IDX_DTYPE_UINT16, &err) == MC_ERR &&
              strstr(err.msg, "does not exist"),
          "%s", err.msg);
    CHECK(mc_indexed_builder_open(&b, out, MC_IDX_DTYPE_FLOAT32, &err) == MC_ERR, "float tokens");
}

/* ---- broken files ------------------------------------------------------------------------- */

/* Writes prefix.idx/.bin from the given bytes and expects open to fail with `needle`. */
static void expect_bad(const char *what, const unsigned char *idx, size_t nidx, const unsigned char *bin, size_t nbin,
                       const char *needle) {
    char prefix[512], p[600];
    snprintf(prefix, sizeof prefix, "%s/bad", g_tmp);
    snprintf(p, sizeof p, "%s.idx", prefix);
    if (idx)
        fu_write(p, idx, nidx);
    else
        unlink(p);
    snprintf(p, sizeof p, "%s.bin", prefix);
    if (bin)
        fu_write(p, bin, nbin);
    else
        unlink(p);
    mc_indexed_dataset *ds = (mc_indexed_dataset *)1;
    mc_err err = {{0}};
    int rc = mc_indexed_dataset_open(&ds, prefix, &err);
    CHECK(rc == MC_ERR && ds == NULL, "%s: opened a broken dataset", what);
    CHECK(strstr(err.msg, needle) != NULL, "%s: \"%s\" lacks \"%s\"", what, err.msg, needle);
    CHECK(!strchr(err.msg, '\n'), "%s: one line", what);
    if (ds && ds != (mc_indexed_dataset *)1) mc_indexed_dataset_close(ds);
}

static void test_bad_files(void) {
    size_t ni, nb, nci, ncb;
    unsigned char *idx = fu_read(FIX "idx_a.idx", &ni), *bin = fu_read(FIX "idx_a.bin", &nb);
    unsigned char *cidx = fu_read(FIX "idx_c.idx", &nci), *cbin = fu_read(FIX "idx_c.bin", &ncb);
    CHECK(idx && bin && cidx && cbin);
    if (!idx || !bin || !cidx || !cbin) return;
    unsigned char *m = malloc(ni + 64);

    expect_bad("empty idx", idx, 0, bin, nb, "magic");
    expect_bad("5-byte idx", idx, 5, bin, nb, "magic");
    expect_bad("header cut", idx, 20, bin, nb, "truncated");
    expect_bad("no arrays", idx, 34, bin, nb, "truncated");
    expect_bad("idx cut in the lengths", idx, 100, bin, nb, "truncated");
    expect_bad("idx one byte short", idx, ni - 1, bin, nb, "bytes");
    memcpy(m, idx, ni);
    memcpy(m + ni, "garbage!", 8);
    expect_bad("trailing garbage", m, ni + 8, bin, nb, "corrupt");
    expect_bad("bin cut", idx, ni, bin, nb - 2, "truncated");
    expect_bad("no bin", idx, ni, NULL, 0, ".bin: cannot open");
    expect_bad("nothing", NULL, 0, NULL, 0, "no dataset at this prefix");
    expect_bad("a .bin for an .idx", bin, nb, bin, nb, "magic");

    memcpy(m, idx, ni);
    m[0] = 'X';
    expect_bad("bad magic", m, ni, bin, nb, "magic");
    memcpy(m, idx, ni);
    m[9] = 2;
    expect_bad("version 2", m, ni, bin, nb, "version 2");
    memcpy(m, idx, ni);
    m[17] = 9;
    expect_bad("dtype code 9", m, ni, bin, nb, "dtype code 9");
    memcpy(m, idx, ni);
    m[17] = MC_IDX_DTYPE_FLOAT32;
    expect_bad("float tokens", m, ni, bin, nb, "float32");

    /* The .idx says uint16 but the .bin holds int32 tokens (idx_c with its dtype byte
     * flipped): the sizes disagree and the message says why. */
    memcpy(m, cidx, nci);
    m[17] = MC_IDX_DTYPE_UINT16;
    expect_bad("uint16 idx with an int32 bin", m, nci, cbin, ncb, "do not belong together");
    expect_bad("uint16 idx with an int32 bin (names int32)", m, nci, cbin, ncb, "int32");
    /* ...and the other way round. */
    memcpy(m, idx, ni);
    m[17] = MC_IDX_DTYPE_INT32;
    expect_bad("int32 idx with a uint16 bin", m, ni, bin, nb, "uint16");

    /* Header counts that do not fit the file. */
    memcpy(m, idx, ni);
    uint64_t huge = (uint64_t)1 << 62;
    memcpy(m + 18, &huge, 8);
    expect_bad("huge sequence count", m, ni, bin, nb, "truncated or corrupt");
    memcpy(m, idx, ni);
    memcpy(m + 26, &huge, 8);
    expect_bad("huge document count", m, ni, bin, nb, "truncated or corrupt");

    /* Array contents. */
    int64_t nseq;
    memcpy(&nseq, idx + 18, 8);
    memcpy(m, idx, ni);
    int32_t neg = -5;
    memcpy(m + 34, &neg, 4);
    expect_bad("negative length", m, ni, bin, nb, "negative length");
    memcpy(m, idx, ni);
    int64_t ptr = (int64_t)nb + 100;
    memcpy(m + 34 + 4 * nseq + 8 * 3, &ptr, 8);
    expect_bad("pointer past the .bin", m, ni, bin, nb, "outside");
    memcpy(m, idx, ni);
    ptr = 1;
    memcpy(m + 34 + 4 * nseq + 8 * 2, &ptr, 8);
    expect_bad("misaligned pointer", m, ni, bin, nb, "aligned");
    memcpy(m, idx, ni);
    int64_t last = nseq - 1;
    memcpy(m + ni - 8, &last, 8);
    expect_bad("last document index", m, ni, bin, nb, "last document index");
    memcpy(m, idx, ni);
    int64_t back = 0;
    memcpy(m + 34 + 12 * nseq + 8 * 5, &back, 8);
    expect_bad("decreasing document index", m, ni, bin, nb, "non-decreasing");

    free(m);
    free(idx);
    free(bin);
    free(cidx);
    free(cbin);
    char p[600];
    snprintf(p, sizeof p, "%s/bad.idx", g_tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/bad.bin", g_tmp);
    unlink(p);
}

/* The token-id range of a .bin: the dtype's, and the ids present, read whole or (past the
 * byte budget) in windows that include the first and the last token. */
static void test_token_range(void) {
    int64_t lo, hi;
    mc_idx_dtype_range(MC_IDX_DTYPE_UINT16, &lo, &hi);
    CHECK(lo == 0 && hi == 65535);
    mc_idx_dtype_range(MC_IDX_DTYPE_INT32, &lo, &hi);
    CHECK(lo == INT32_MIN && hi == INT32_MAX);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/range", g_tmp);
    int32_t tokens[1000];
    for (int i = 0; i < 1000; i++) tokens[i] = i % 50;
    tokens[0] = 700;
    tokens[999] = 900;
    mc_indexed_builder *b = NULL;
    mc_err err;
    CHECK(mc_indexed_builder_open(&b, prefix, MC_IDX_DTYPE_UINT16, &err) == MC_OK, "%s", err.msg);
    if (!b) return;
    CHECK(mc_indexed_builder_add_item(b, tokens, 1000, &err) == MC_OK, "%s", err.msg);
    mc_indexed_builder_end_document(b);
    CHECK(mc_indexed_builder_finalize(b, &err) == MC_OK, "%s", err.msg);
    mc_indexed_dataset *ds = NULL;
    CHECK(mc_indexed_dataset_open(&ds, prefix, &err) == MC_OK, "%s", err.msg);
    if (!ds) return;
    CHECK(mc_indexed_dataset_token_range(ds, 1 << 20, &lo, &hi) && lo == 0 && hi == 900, "%lld %lld", (long long)lo,
          (long long)hi);
    /* 64 windows of 2 tokens: not the whole file, but its ends */
    CHECK(!mc_indexed_dataset_token_range(ds, 64 * 2 * 2, &lo, &hi) && hi == 900, "%lld %lld", (long long)lo,
          (long long)hi);
    mc_indexed_dataset_close(ds);
}

/* ---- .npy, md5, JSON ------------------------------------------------------------------ */

static void test_npy_matches_numpy(void) {
    const char *dir = FIX "cache_single";
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".npy")) continue;
        char src[600], dst[600];
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", g_tmp, e->d_name);
        mc_npy a;
        mc_err err;
        CHECK(mc_npy_read(src, &a, &err) == MC_OK, "%s", err.msg);
        CHECK(mc_npy_write(dst, a.descr, a.ndim, a.shape, a.data, &err) == MC_OK, "%s", err.msg);
        CHECK(fu_same_file(src, dst), "%s: mc_npy_write differs from numpy.save", e->d_name);
        mc_npy_free(&a);
        unlink(dst);
        checked++;
    }
    closedir(d);
    CHECK(checked == 6, "%d .npy files", checked);
    /* A truncated .npy is an error, not a short array. */
    char p[600];
    snprintf(p, sizeof p, "%s/short.npy", g_tmp);
    int64_t shape[1] = {10};
    int32_t v[10] = {0};
    mc_err err;
    CHECK(mc_npy_write(p, "<i4", 1, shape, v, &err) == MC_OK);
    size_t n;
    unsigned char *raw = fu_read(p, &n);
    fu_write(p, raw, n - 4);
    free(raw);
    mc_npy a;
    CHECK(mc_npy_read(p, &a, &err) == MC_ERR && strstr(err.msg, "truncated"), "%s", err.msg);
    unlink(p);
}

/* Reads a .npy of 16 data bytes whose header says `shape` (a tuple's text) of int32. */
static int npy_with_shape(const char *shape, mc_npy *a, mc_err *err) {
    char header[128];
    int len = snprintf(header, sizeof header, "{'descr': '<i4', 'fortran_order': False, 'shape': %s, }", shape);
    while ((10 + len + 1) % 64) header[len++] = ' ';
    header[len++] = '\n';
    unsigned char file[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)len, 0};
    memcpy(file + 10, header, (size_t)len);
    char path[600];
    snprintf(path, sizeof path, "%s/bad.npy", g_tmp);
    fu_write(path, file, 10 + (size_t)len + 16);
    int rc = mc_npy_read(path, a, err);
    unlink(path);
    return rc;
}

/* Shapes whose byte count overflows, or whose numbers are outside int64, are refused (the
 * first once wrapped to 4 elements, which the 16 data bytes matched). */
static void test_npy_bad_shapes(void) {
    mc_npy a;
    mc_err err;
    CHECK(npy_with_shape("(4, 1)", &a, &err) == MC_OK && a.shape[0] == 4, "%s", err.msg);
    mc_npy_free(&a);
    CHECK(npy_with_shape("(4611686018427387905, 4)", &a, &err) == MC_ERR && strstr(err.msg, "bad.npy") &&
              strstr(err.msg, "overflows"),
          "%s", err.msg);
    CHECK(npy_with_shape("(4, 4611686018427387905)", &a, &err) == MC_ERR && strstr(err.msg, "overflows"), "%s",
          err.msg);
    CHECK(npy_with_shape("(99999999999999999999,)", &a, &err) == MC_ERR && strstr(err.msg, "unsupported .npy header"),
          "%s", err.msg);
    CHECK(npy_with_shape("(-4,)", &a, &err) == MC_ERR, "%s", err.msg);
    CHECK(npy_with_shape("(0, 9223372036854775807)", &a, &err) == MC_ERR && strstr(err.msg, "16 data bytes"), "%s",
          err.msg);
}

static void test_md5_json_float(void) {
    char out[33];
    mc_md5_hex("", 0, out);
    CHECK(!strcmp(out, "d41d8cd98f00b204e9800998ecf8427e"));
    mc_md5_hex("The quick brown fox jumps over the lazy dog", 43, out);
    CHECK(!strcmp(out, "9e107d9d372bb6826bd81d3542a419d6"));
    char big[200];
    memset(big, 'a', sizeof big);
    mc_md5_hex(big, 119, out); /* crosses the one-block padding boundary */
    CHECK(!strcmp(out, "8a7bd0732ed6a28ce75f6dabc90e1613"), "%s", out);

    FILE *f = fopen(FIX "float_repr.txt", "r");
    CHECK(f != NULL);
    char line[256];
    int nf = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char hex[64], want[64], got[32];
        if (sscanf(line, "%63s %63s", hex, want) != 2) continue;
        double x = strtod(hex, NULL);
        mc_py_float_repr(x, got);
        CHECK(!strcmp(got, want), "repr(%s): %s, Python %s", hex, got, want);
        nf++;
    }
    if (f) fclose(f);
    CHECK(nf == 20);

    static const char *const strings[] = {"plain",      "tab\tnew\nline", "quote\" back\\", "caf\xc3\xa9",
                                          "\xe4\xb8\xad\xe6\x96\x87", "emoji \xf0\x9f\x98\x80", "ctl \x01\x7f", ""};
    f = fopen(FIX "json_strings.txt", "r");
    CHECK(f != NULL);
    int ns = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (!tab || ns >= 8) continue;
        *tab = 0;
        char *md = tab + 1;
        md[strcspn(md, "\n")] = 0;
        mc_strbuf b = {0};
        mc_json_string(&b, strings[ns]);
        CHECK(!strcmp(b.s, line), "json.dumps #%d: %s, Python %s", ns, b.s, line);
        mc_md5_hex(b.s, b.len, out);
        CHECK(!strcmp(out, md), "md5 #%d", ns);
        mc_strbuf_free(&b);
        ns++;
    }
    if (f) fclose(f);
    CHECK(ns == 8);
}

int main(void) {
    g_tmp = fu_tmpdir("idx");
    RUN(test_read_fixtures);
    RUN(test_builder_identical);
    RUN(test_builder_errors_and_atomicity);
    RUN(test_bad_files);
    RUN(test_token_range);
    RUN(test_npy_matches_numpy);
    RUN(test_npy_bad_shapes);
    RUN(test_md5_json_float);
    fu_rmtree(g_tmp);
    free(g_tmp);
    return check_summary();
}
