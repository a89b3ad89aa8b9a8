#include "data/gpt_dataset.h"

#include <stdlib.h>
#include <string.h>

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

int mc_gpt_dataset_build(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
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
    ds->sample_index = mc_xcalloc(2, sizeof *ds->sample_index); /* row 0 = (0, 0) */
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

    /* One RandomState, its draws consumed in Megatron's order: document index, then
     * shuffle index. */
    mc_mt19937 rs;
    mc_mt19937_seed(&rs, ds->seed);
    int64_t n = seq_end - seq_begin;
    ds->document_index_len = epochs * n;
    ds->document_index = mc_xmalloc((size_t)ds->document_index_len * sizeof *ds->document_index);
    if (ds->separate_final_epoch) {
        build_document_index_part(ds->document_index, seq_begin, seq_end, epochs - 1, &rs);
        build_document_index_part(ds->document_index + (epochs - 1) * n, seq_begin, seq_end, 1, &rs);
    } else {
        build_document_index_part(ds->document_index, seq_begin, seq_end, epochs, &rs);
    }

    ds->len = (epochs * tokens - EXTRA) / seq_length;
    free(ds->sample_index);
    ds->sample_index = mc_xmalloc((size_t)(ds->len + 1) * 2 * sizeof *ds->sample_index);
    build_sample_index(ds);

    ds->shuffle_index = mc_xmalloc((size_t)(ds->len ? ds->len : 1) * sizeof *ds->shuffle_index);
    build_shuffle_index(ds->shuffle_index, ds->separate_final_epoch ? ds->num_samples_sans_final_epoch : ds->len,
                        ds->len, &rs);
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
