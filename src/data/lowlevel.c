#include "data/lowlevel.h"

#include <stdlib.h>
#include <string.h>

#include "data/indexed_dataset.h"
#include "data/numpy_rng.h"

void mc_lowlevel_close(mc_lowlevel *ll) {
    if (ll) ll->destroy(ll);
}

/* ---- mock --------------------------------------------------------------------------- */

typedef struct {
    mc_lowlevel base;
    int32_t vocab_size, eod;
    int32_t lengths[MC_MOCK_NUM_SEQUENCES];
} mock_impl;

static void mock_read(const mc_lowlevel *ll, int64_t i, int64_t offset, int64_t count, int32_t *out) {
    const mock_impl *m = ll->impl;
    int64_t len = m->lengths[i];
    MC_ASSERT(offset >= 0 && count >= 0 && offset + count <= len);
    for (int64_t k = 0; k < count; k++) {
        int64_t p = offset + k;
        /* Token p of the sequence: p+1 for all but the last, which is the EOD. */
        out[k] = p == len - 1 ? m->eod : (int32_t)((p + 1) % m->vocab_size);
    }
}

static void mock_destroy(mc_lowlevel *ll) { free(ll->impl); }

int mc_lowlevel_open_mock(mc_lowlevel **out, int32_t vocab_size, int32_t eod, mc_err *err) {
    *out = NULL;
    if (vocab_size <= 0) return mc_err_set(err, "--vocab-size: must be positive with --mock-data, got %d", vocab_size);
    mock_impl *m = mc_xcalloc(1, sizeof *m);
    m->vocab_size = vocab_size;
    m->eod = eod;
    mc_pcg64 g;
    mc_pcg64_seed(&g, MC_MOCK_SEED);
    mc_pcg64_integers_i32(&g, 1, MC_MOCK_MAX_SEQUENCE_LENGTH, MC_MOCK_NUM_SEQUENCES, m->lengths);
    m->base = (mc_lowlevel){.kind = "mock",
                            .num_sequences = MC_MOCK_NUM_SEQUENCES,
                            .lengths = m->lengths,
                            .read = mock_read,
                            .destroy = mock_destroy,
                            .impl = m};
    *out = &m->base;
    return MC_OK;
}

/* ---- memory ------------------------------------------------------------------------- */

typedef struct {
    mc_lowlevel base;
    const int32_t *tokens;
    const int64_t *offsets; /* (num_docs + 1,) */
    int32_t *lengths;
    bool owned;
} memory_impl;

static void memory_read(const mc_lowlevel *ll, int64_t i, int64_t offset, int64_t count, int32_t *out) {
    const memory_impl *m = ll->impl;
    MC_ASSERT(offset >= 0 && count >= 0 && offset + count <= m->lengths[i]);
    memcpy(out, m->tokens + m->offsets[i] + offset, (size_t)count * sizeof *out);
}

static void memory_destroy(mc_lowlevel *ll) {
    memory_impl *m = ll->impl;
    if (m->owned) {
        free((void *)m->tokens);
        free((void *)m->offsets);
    }
    free(m->lengths);
    free(m);
}

int mc_lowlevel_open_memory(mc_lowlevel **out, const int32_t *tokens, const int64_t *doc_offsets,
                            int64_t num_docs, bool take_ownership, mc_err *err) {
    *out = NULL;
    if (num_docs <= 0 || !doc_offsets || !tokens)
        return mc_err_set(err, "in-memory corpus: no documents (corpus_num_docs = %lld)", (long long)num_docs);
    if (doc_offsets[0] < 0) return mc_err_set(err, "in-memory corpus: negative doc_offsets[0]");
    int32_t *lengths = mc_xmalloc((size_t)num_docs * sizeof *lengths);
    for (int64_t i = 0; i < num_docs; i++) {
        int64_t len = doc_offsets[i + 1] - doc_offsets[i];
        if (len < 0 || len > INT32_MAX) {
            free(lengths);
            return mc_err_set(err, "in-memory corpus: document %lld has length %lld (offsets must be non-decreasing and a document shorter than 2^31 tokens)",
                              (long long)i, (long long)len);
        }
        lengths[i] = (int32_t)len;
    }
    memory_impl *m = mc_xcalloc(1, sizeof *m);
    m->tokens = tokens;
    m->offsets = doc_offsets;
    m->lengths = lengths;
    m->owned = take_ownership;
    m->base = (mc_lowlevel){.kind = "memory",
                            .num_sequences = num_docs,
                            .lengths = lengths,
                            .read = memory_read,
                            .destroy = memory_destroy,
                            .impl = m};
    *out = &m->base;
    return MC_OK;
}

/* ---- indexed (.bin/.idx) ------------------------------------------------------------- */

static void indexed_read(const mc_lowlevel *ll, int64_t i, int64_t offset, int64_t count, int32_t *out) {
    mc_indexed_dataset_read(ll->impl, i, offset, count, out);
}

static void indexed_destroy(mc_lowlevel *ll) {
    mc_indexed_dataset_close(ll->impl);
    free(ll);
}

int mc_lowlevel_open_indexed(mc_lowlevel **out, const char *prefix, mc_err *err) {
    *out = NULL;
    mc_indexed_dataset *ds;
    MC_TRY(mc_indexed_dataset_open(&ds, prefix, err));
    mc_lowlevel *ll = mc_xcalloc(1, sizeof *ll);
    *ll = (mc_lowlevel){.kind = "indexed",
                        .num_sequences = ds->num_sequences,
                        .lengths = ds->lengths,
                        .read = indexed_read,
                        .destroy = indexed_destroy,
                        .impl = ds};
    *out = ll;
    return MC_OK;
}

const struct mc_indexed_dataset *mc_lowlevel_indexed(const mc_lowlevel *ll) {
    return ll && ll->read == indexed_read ? ll->impl : NULL;
}
