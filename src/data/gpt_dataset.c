#include "data/gpt_dataset.h"

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/md5.h"
#include "data/index_cache.h"
#include "data/npy.h"
#include "data/numpy_rng.h"

/* add_extra_token_to_sequence: each sample reads one token more than seq_length so that
 * tokens and labels (shifted by one) both have seq_length entries. */
enum { EXTRA = 1 };

/* Megatron's _build_document_index for the not-separated case: the sequence ids
 * [begin, end) tiled `epochs` times, then one shuffle over the whole array. */
static void build_document_index_part(int32_t *out, int64_t begin, int64_t end, int64_t epochs, mc_mt19937 *rs) {
    int64_t n = end - begin, k = 0;
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t i = 0; i < n; i++) out[k++] = (int32_t)(begin + i);
    mc_mt19937_shuffle_i32(rs, out, k);
}

/* helpers.cpp build_sample_idx with drop_last_partial_sequence = true. */
static void build_sample_index(mc_gpt_dataset *ds) {
    const int32_t *lengths = ds->ll->lengths;
    const int32_t *doc_index = ds->document_index;
    int64_t *si = ds->sample_index;
    int64_t doc_pos = 0, doc_offset = 0;
    si[0] = 0;
    si[1] = 0;
    for (int64_t s = 1; s <= ds->len; s++) {
        int64_t remaining = ds->seq_length + EXTRA;
        while (remaining != 0) {
            int64_t doc_length = lengths[doc_index[doc_pos]] - doc_offset;
            remaining -= doc_length;
            if (remaining <= 0) {
                /* The sample ends inside this document; the next one starts on its
                 * last token (hence - EXTRA): the one-token overlap. */
                doc_offset += remaining + doc_length - EXTRA;
                remaining = 0;
            } else if (doc_pos == ds->document_index_len - 1) {
                /* Out of documents: only possible for the last sample. */
                MC_ASSERT(s == ds->len);
                doc_offset = lengths[doc_index[doc_pos]] - EXTRA;
                break;
            } else {
                doc_pos++;
                doc_offset = 0;
            }
        }
        si[2 * s] = doc_pos;
        si[2 * s + 1] = doc_offset;
    }
}

/* _build_shuffle_index: shuffle [0, first) then, if any, [first, total) separately. */
static void build_shuffle_index(int64_t *out, int64_t first, int64_t total, mc_mt19937 *rs) {
    for (int64_t i = 0; i < total; i++) out[i] = i;
    mc_mt19937_shuffle_i64(rs, out, first);
    if (first < total) mc_mt19937_shuffle_i64(rs, out + first, total - first);
}

int mc_gpt_dataset_plan(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                        int64_t num_samples, int seq_length, uint64_t seed, mc_err *err) {
    memset(ds, 0, sizeof *ds);
    if (seq_length < 1) return mc_err_set(err, "--seq-length: must be positive, got %d", seq_length);
    if (seed > 0xffffffffu)
        return mc_err_set(err, "--seed: numpy's RandomState takes a seed in [0, 2^32-1], got %llu",
                          (unsigned long long)seed);
    if (seq_begin < 0 || seq_end < seq_begin || seq_end > ll->num_sequences)
        return mc_err_set(err, "dataset split range [%lld, %lld) is outside the %lld sequences of the %s dataset",
                          (long long)seq_begin, (long long)seq_end, (long long)ll->num_sequences, ll->kind);
    ds->ll = ll;
    ds->seq_begin = seq_begin;
    ds->seq_end = seq_end;
    ds->seq_length = seq_length;
    ds->num_samples_requested = num_samples;
    ds->seed = (uint32_t)seed;

    int64_t tokens = 0;
    for (int64_t i = seq_begin; i < seq_end; i++) tokens += ll->lengths[i];
    ds->tokens_per_epoch = tokens;
    if (tokens <= EXTRA) {
        /* Megatron cannot build this (it loops or asserts); an empty split is len 0. */
        ds->num_epochs = 0;
        return MC_OK;
    }

    /* The fewest epochs e >= 1 with e * tokens >= num_samples * seq_length + EXTRA. */
    int64_t epochs = 1;
    if (num_samples > 0) {
        int64_t need = num_samples * (int64_t)seq_length + EXTRA;
        epochs = (need + tokens - 1) / tokens;
        if (epochs < 1) epochs = 1;
    }
    ds->num_epochs = epochs;

    int64_t per_epoch = (tokens - EXTRA) / seq_length;
    if (epochs > 1) {
        int64_t sans_final = ((epochs - 1) * tokens - EXTRA) / seq_length;
        int64_t from_final = num_samples - sans_final;
        MC_ASSERT(from_final >= 0 && from_final <= per_epoch + 1);
        /* Separate the final epoch if it falls below 80% of an epoch (Python's
         * int(0.80 * P) truncates the double product). */
        ds->separate_final_epoch = from_final < (int64_t)(0.80 * (double)per_epoch);
        ds->num_samples_sans_final_epoch = sans_final;
    }
    ds->document_index_len = epochs * (seq_end - seq_begin);
    ds->len = (epochs * tokens - EXTRA) / seq_length;
    return MC_OK;
}

int mc_gpt_dataset_build(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                         int64_t num_samples, int seq_length, uint64_t seed, mc_err *err) {
    MC_TRY(mc_gpt_dataset_plan(ds, ll, seq_begin, seq_end, num_samples, seq_length, seed, err));
    if (ds->num_epochs == 0) {
        ds->sample_index = mc_xcalloc(2, sizeof *ds->sample_index); /* row 0 = (0, 0) */
        return MC_OK;
    }
    int64_t epochs = ds->num_epochs;

    /* One RandomState, its draws consumed in Megatron's order: document index, then
     * shuffle index. */
    mc_mt19937 rs;
    mc_mt19937_seed(&rs, ds->seed);
    int64_t n = seq_end - seq_begin;
    ds->document_index = mc_xmalloc((size_t)ds->document_index_len * sizeof *ds->document_index);
    if (ds->separate_final_epoch) {
        build_document_index_part(ds->document_index, seq_begin, seq_end, epochs - 1, &rs);
        build_document_index_part(ds->document_index + (epochs - 1) * n, seq_begin, seq_end, 1, &rs);
    } else {
        build_document_index_part(ds->document_index, seq_begin, seq_end, epochs, &rs);
    }

    ds->sample_index = mc_xmalloc((size_t)(ds->len + 1) * 2 * sizeof *ds->sample_index);
    build_sample_index(ds);

    ds->shuffle_index = mc_xmalloc((size_t)(ds->len ? ds->len : 1) * sizeof *ds->shuffle_index);
    build_shuffle_index(ds->shuffle_index, ds->separate_final_epoch ? ds->num_samples_sans_final_epoch : ds->len,
                        ds->len, &rs);
    return MC_OK;
}

/* ---- the index cache ------------------------------------------------------------------- */

static const char *const k_gpt_affixes[3] = {"document_index.npy", "sample_index.npy", "shuffle_index.npy"};

/* Loads the three arrays into a planned dataset, checking them against the plan. */
static int load_cached(mc_gpt_dataset *ds, const char *dir, const char *md5, const char *split, mc_err *err) {
    mc_npy a[3] = {0};
    char *path[3];
    int rc = MC_ERR;
    for (int i = 0; i < 3; i++) path[i] = mc_cache_path(dir, md5, "GPTDataset", split, k_gpt_affixes[i]);
    for (int i = 0; i < 3; i++)
        if (mc_npy_read(path[i], &a[i], err) != MC_OK) goto done;
    int64_t n = ds->len;
    if (strcmp(a[0].descr, "<i4") || a[0].ndim != 1 || a[0].shape[0] != ds->document_index_len) {
        mc_err_set(err, "%s: expected int32 (%lld,), found %s of %lld elements", path[0],
                   (long long)ds->document_index_len, a[0].descr, (long long)a[0].shape[0]);
        goto done;
    }
    if ((strcmp(a[1].descr, "<i4") && strcmp(a[1].descr, "<i8")) || a[1].ndim != 2 || a[1].shape[0] != n + 1 ||
        a[1].shape[1] != 2) {
        mc_err_set(err, "%s: expected int32/int64 (%lld, 2), found %s (%lld, %lld)", path[1], (long long)(n + 1),
                   a[1].descr, (long long)a[1].shape[0], a[1].ndim == 2 ? (long long)a[1].shape[1] : -1LL);
        goto done;
    }
    if ((strcmp(a[2].descr, "<u4") && strcmp(a[2].descr, "<i8")) || a[2].ndim != 1 || a[2].shape[0] != n) {
        mc_err_set(err, "%s: expected uint32/int64 (%lld,), found %s of %lld elements", path[2], (long long)n,
                   a[2].descr, (long long)a[2].shape[0]);
        goto done;
    }
    ds->document_index = mc_xmalloc((size_t)(ds->document_index_len ? ds->document_index_len : 1) * 4);
    memcpy(ds->document_index, a[0].data, (size_t)ds->document_index_len * 4);
    ds->sample_index = mc_xmalloc((size_t)(n + 1) * 2 * sizeof *ds->sample_index);
    ds->shuffle_index = mc_xmalloc((size_t)(n ? n : 1) * sizeof *ds->shuffle_index);
    for (int64_t i = 0; i < ds->document_index_len; i++)
        if (ds->document_index[i] < ds->seq_begin || ds->document_index[i] >= ds->seq_end) {
            mc_err_set(err, "%s: entry %lld is sequence %d, outside this split's [%lld, %lld)", path[0], (long long)i,
                       ds->document_index[i], (long long)ds->seq_begin, (long long)ds->seq_end);
            goto done;
        }
    for (int64_t i = 0; i < 2 * (n + 1); i++) {
        int64_t v = mc_npy_get(&a[1], i);
        ds->sample_index[i] = v;
        bool ok = i % 2 == 0 ? v >= 0 && v < ds->document_index_len
                             : v == 0 || (v > 0 && v < ds->ll->lengths[ds->document_index[ds->sample_index[i - 1]]]);
        if (!ok) {
            mc_err_set(err, "%s: row %lld is out of range", path[1], (long long)(i / 2));
            goto done;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v = mc_npy_get(&a[2], i);
        if (v < 0 || v >= n) {
            mc_err_set(err, "%s: entry %lld is %lld, outside [0, %lld)", path[2], (long long)i, (long long)v,
                       (long long)n);
            goto done;
        }
        ds->shuffle_index[i] = v;
    }
    /* Every sample must still be seq_length + 1 tokens (a cache of another dataset whose
     * description happened to match would fail here, not in the middle of training). */
    for (int64_t j = 0; j < n; j++) {
        int64_t beg = ds->sample_index[2 * j], beg_off = ds->sample_index[2 * j + 1];
        int64_t end = ds->sample_index[2 * j + 2], end_off = ds->sample_index[2 * j + 3];
        int64_t tokens = -beg_off + end_off + EXTRA;
        if (end < beg)
            tokens = -1;
        else
            for (int64_t p = beg; p < end; p++) tokens += ds->ll->lengths[ds->document_index[p]];
        if (tokens != ds->seq_length + EXTRA) {
            mc_err_set(err, "%s: sample %lld spans %lld tokens, not --seq-length + 1 = %d (a cache of another dataset?)",
                       path[1], (long long)j, (long long)tokens, ds->seq_length + EXTRA);
            goto done;
        }
    }
    rc = MC_OK;
done:
    for (int i = 0; i < 3; i++) {
        mc_npy_free(&a[i]);
        free(path[i]);
    }
    return rc;
}

static int save_cached(const mc_gpt_dataset *ds, const char *dir, const char *md5, const char *split,
                       const char *description, mc_err *err) {
    MC_TRY(mc_mkdirs(dir, err));
    int64_t n = ds->len;
    int rc = MC_ERR;
    char *path[3];
    for (int i = 0; i < 3; i++) path[i] = mc_cache_path(dir, md5, "GPTDataset", split, k_gpt_affixes[i]);
    char *desc_path = mc_cache_path(dir, md5, "GPTDataset", split, "description.txt");
    /* Megatron's dtypes: helpers.py builds the sample index in int32 unless a position or
     * a sequence length needs more; the shuffle index is uint32 below 2^32 - 1 samples. */
    bool sample_i32 = ds->document_index_len <= INT32_MAX;
    bool shuffle_u32 = n < (int64_t)UINT32_MAX - 1;
    void *si = ds->sample_index, *sh = ds->shuffle_index;
    int32_t *si32 = NULL;
    uint32_t *sh32 = NULL;
    if (sample_i32) {
        si32 = mc_xmalloc((size_t)(n + 1) * 2 * sizeof *si32);
        for (int64_t i = 0; i < 2 * (n + 1); i++) si32[i] = (int32_t)ds->sample_index[i];
        si = si32;
    }
    if (shuffle_u32) {
        sh32 = mc_xmalloc((size_t)(n ? n : 1) * sizeof *sh32);
        for (int64_t i = 0; i < n; i++) sh32[i] = (uint32_t)ds->shuffle_index[i];
        sh = sh32;
    }
    int64_t shape_doc[1] = {ds->document_index_len}, shape_si[2] = {n + 1, 2}, shape_sh[1] = {n};
    if (mc_npy_write(path[0], "<i4", 1, shape_doc, ds->document_index, err) != MC_OK) goto done;
    if (mc_npy_write(path[1], sample_i32 ? "<i4" : "<i8", 2, shape_si, si, err) != MC_OK) goto done;
    if (mc_npy_write(path[2], shuffle_u32 ? "<u4" : "<i8", 1, shape_sh, sh, err) != MC_OK) goto done;
    /* The description last: until it exists the cache is a miss. */
    if (mc_write_file_atomic(desc_path, description, strlen(description), err) != MC_OK) goto done;
    rc = MC_OK;
done:
    free(si32);
    free(sh32);
    for (int i = 0; i < 3; i++) free(path[i]);
    free(desc_path);
    return rc;
}

int mc_gpt_dataset_build_cached(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                                int64_t num_samples, int seq_length, uint64_t seed, const mc_gpt_cache *cache,
                                mc_gpt_cache_result *result, mc_err *err) {
    if (result) *result = MC_GPT_CACHE_NONE;
    if (!cache || !cache->dir) return mc_gpt_dataset_build(ds, ll, seq_begin, seq_end, num_samples, seq_length, seed, err);
    MC_TRY(mc_gpt_dataset_plan(ds, ll, seq_begin, seq_end, num_samples, seq_length, seed, err));
    if (ds->num_epochs == 0) {
        /* Nothing to cache (Megatron cannot build an empty split at all). */
        ds->sample_index = mc_xcalloc(2, sizeof *ds->sample_index);
        return MC_OK;
    }
    char md5[33];
    mc_md5_hex(cache->description, strlen(cache->description), md5);
    const char *split = mc_split_names[cache->index_split];
    bool hit;
    if (mc_cache_probe(cache->dir, md5, "GPTDataset", split, cache->description, k_gpt_affixes, 3, &hit, err) !=
        MC_OK) {
        mc_gpt_dataset_free(ds);
        return MC_ERR;
    }
    if (hit) {
        if (load_cached(ds, cache->dir, md5, split, err) != MC_OK) {
            mc_gpt_dataset_free(ds);
            return mc_err_prefix(err, "dataset index cache: ");
        }
        if (result) *result = MC_GPT_CACHE_LOADED;
        return MC_OK;
    }
    if (cache->rank != 0) {
        mc_gpt_dataset_free(ds);
        return mc_err_set(err, "dataset index cache %s/%s-GPTDataset-%s-*: missing after rank 0 built it (is %s a "
                               "directory all ranks share?)",
                          cache->dir, md5, split, cache->dir);
    }
    MC_TRY(mc_gpt_dataset_build(ds, ll, seq_begin, seq_end, num_samples, seq_length, seed, err));
    if (save_cached(ds, cache->dir, md5, split, cache->description, err) != MC_OK) {
        mc_gpt_dataset_free(ds);
        return mc_err_prefix(err, "writing the dataset index cache (pass --data-cache-path DIR to put it elsewhere): ");
    }
    if (result) *result = MC_GPT_CACHE_BUILT;
    return MC_OK;
}

void mc_gpt_dataset_free(mc_gpt_dataset *ds) {
    free(ds->document_index);
    free(ds->sample_index);
    free(ds->shuffle_index);
    memset(ds, 0, sizeof *ds);
}

void mc_gpt_dataset_get(const mc_gpt_dataset *ds, int64_t idx, int32_t *out) {
    MC_ASSERT(idx >= 0 && idx < ds->len, "sample %lld of a dataset of %lld", (long long)idx, (long long)ds->len);
    const int32_t *lengths = ds->ll->lengths;
    int64_t j = ds->shuffle_index[idx];
    int64_t beg = ds->sample_index[2 * j], beg_off = ds->sample_index[2 * j + 1];
    int64_t end = ds->sample_index[2 * j + 2], end_off = ds->sample_index[2 * j + 3];
    int64_t n = 0;
    for (int64_t p = beg; p <= end; p++) {
        int32_t seq = ds->document_index[p];
        int64_t off = p == beg ? beg_off : 0;
        /* Whole documents in between; the last one up to and including end_off. */
        int64_t count = p == end ? end_off + EXTRA - off : lengths[seq] - off;
        MC_ASSERT(n + count <= ds->seq_length + EXTRA);
        mc_lowlevel_read(ds->ll, seq, off, count, out + n);
        n += count;
    }
    MC_ASSERT(n == ds->seq_length + EXTRA, "sample %lld has %lld tokens", (long long)idx, (long long)n);
}
