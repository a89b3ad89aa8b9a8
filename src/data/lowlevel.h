/* lowlevel.h: Megatron's "low-level dataset", a numbered set of token sequences.
 *
 * GPTDataset only needs three things from its source: how many sequences there are, the
 * length of each (int32, as Megatron asserts), and "tokens [offset, offset+count) of
 * sequence i". Every source implements exactly that:
 *   - mock:   Megatron's MockGPTLowLevelDataset (--mock-data);
 *   - memory: an in-memory corpus (int32 tokens + int64 document offsets), also used for
 *             the byte-tokenized text file;
 *   - indexed: a Megatron .bin/.idx dataset through mmap (indexed_dataset.h); its
 *             sequence_lengths are copied into an aligned array at open, as Megatron
 *             copies them for build_sample_idx, and `read` widens uint16/int32 tokens.
 * Note that GPT treats every *sequence* as a document; .idx document boundaries are
 * ignored (section 1.3 of MEGATRON-REFERENCE.md). */
#ifndef MC_DATA_LOWLEVEL_H
#define MC_DATA_LOWLEVEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef struct mc_lowlevel mc_lowlevel;

struct mc_lowlevel {
    const char *kind;        /* "mock", "memory", ... (for messages) */
    int64_t num_sequences;
    const int32_t *lengths;  /* (num_sequences,) tokens per sequence, host memory */
    /* Copies tokens [offset, offset + count) of sequence i into out (int32). The caller
     * guarantees offset + count <= lengths[i]. Must not allocate. */
    void (*read)(const mc_lowlevel *ll, int64_t i, int64_t offset, int64_t count, int32_t *out);
    void (*destroy)(mc_lowlevel *ll); /* frees impl and the struct itself */
    void *impl;
};

static inline void mc_lowlevel_read(const mc_lowlevel *ll, int64_t i, int64_t offset, int64_t count,
                                    int32_t *out) {
    ll->read(ll, i, offset, count, out);
}

void mc_lowlevel_close(mc_lowlevel *ll);

/* Megatron's MockGPTLowLevelDataset: 100,000 sequences whose lengths are
 * default_rng(seed=0).integers(1, 4096, 100000, dtype=int32); sequence i holds
 * (1, 2, ..., len-1) % vocab_size followed by eod. */
#define MC_MOCK_NUM_SEQUENCES 100000
#define MC_MOCK_MAX_SEQUENCE_LENGTH 4096
#define MC_MOCK_SEED 0
int mc_lowlevel_open_mock(mc_lowlevel **out, int32_t vocab_size, int32_t eod, mc_err *err);

/* An in-memory corpus: sequence i is tokens[doc_offsets[i] .. doc_offsets[i+1]) for
 * i < num_docs. With take_ownership the arrays are free()d on close; otherwise they are
 * borrowed and must outlive the dataset. Offsets must be non-negative and non-decreasing
 * (doc_offsets[0] need not be 0); each length must fit int32. On failure the arrays stay
 * the caller's. */
int mc_lowlevel_open_memory(mc_lowlevel **out, const int32_t *tokens, const int64_t *doc_offsets,
                            int64_t num_docs, bool take_ownership, mc_err *err);

/* The Megatron indexed dataset PREFIX.bin/.idx (validated at open; errors name the file).
 * Token ids are not range-checked here; mc_data_open checks them against the tokenizer's
 * vocabulary (data.h). */
struct mc_indexed_dataset;
int mc_lowlevel_open_indexed(mc_lowlevel **out, const char *prefix, mc_err *err);
/* The indexed dataset behind an "indexed" source, NULL for other kinds. */
const struct mc_indexed_dataset *mc_lowlevel_indexed(const mc_lowlevel *ll);

#endif
