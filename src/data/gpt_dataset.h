/* gpt_dataset.h: Megatron's GPTDataset sample order (gpt_dataset.py + helpers.cpp).
 *
 * A split of a low-level dataset (sequences [seq_begin, seq_end)) becomes `len` samples
 * of seq_length+1 tokens each, in exactly Megatron's order for the same seed:
 *   1. num_epochs: the fewest epochs whose tokens cover num_samples*seq_length + 1;
 *   2. document index: the split's sequence ids tiled num_epochs times and shuffled by one
 *      RandomState(seed); when the last epoch contributes fewer than 80% of an epoch's
 *      samples it is shuffled separately (so it does not dilute the earlier epochs);
 *   3. sample index: (position in document index, token offset) of every sample start,
 *      consecutive samples overlapping by one token (add_extra_token_to_sequence=True);
 *   4. shuffle index: a permutation of the samples from the same RandomState (again in
 *      two parts when the final epoch is separate).
 * Everything is built at construction; `get` only copies tokens. With a cache directory
 * the indices are saved to / loaded from Megatron's cache files (index_cache.h). The
 * partial-validation-sequence option (drop_last=False) is not reproduced: every split
 * drops the last partial sample, which is Megatron's default. */
#ifndef MC_DATA_GPT_DATASET_H
#define MC_DATA_GPT_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "data/lowlevel.h"

typedef struct mc_gpt_dataset {
    const mc_lowlevel *ll; /* borrowed */
    int64_t seq_begin, seq_end;
    int seq_length;
    int64_t num_samples_requested; /* <= 0: one epoch (Megatron's None / 0) */
    uint32_t seed;

    int64_t tokens_per_epoch, num_epochs;
    bool separate_final_epoch;
    int64_t num_samples_sans_final_epoch; /* valid when separate_final_epoch */

    int32_t *document_index;  /* (document_index_len,) sequence ids */
    int64_t document_index_len;
    int64_t *sample_index;    /* (len + 1, 2): (document index position, token offset) */
    int64_t *shuffle_index;   /* (len,) */
    int64_t len;              /* number of samples */
} mc_gpt_dataset;

/* Builds the three indices. An empty range (or one without tokens) gives len 0 and
 * draws nothing. Errors: seq_length < 1, a seed outside numpy's [0, 2^32-1], a range
 * outside the low-level dataset. */
int mc_gpt_dataset_build(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                         int64_t num_samples, int seq_length, uint64_t seed, mc_err *err);
void mc_gpt_dataset_free(mc_gpt_dataset *ds);

/* Only the scalars of a build (tokens_per_epoch, num_epochs, separate_final_epoch,
 * document_index_len, len); the arrays stay NULL. Same errors as the build. */
int mc_gpt_dataset_plan(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                        int64_t num_samples, int seq_length, uint64_t seed, mc_err *err);

/* Megatron's index cache for one GPT dataset: rank 0 loads the files named by the md5 of
 * `description` from `dir` when all four exist, else builds and writes them; any other
 * rank only loads (call it after rank 0 has finished and the ranks met at a barrier). */
typedef struct mc_gpt_cache {
    const char *dir;         /* NULL: no cache, build in memory */
    const char *description; /* json.dumps of the dataset's unique identifiers */
    int index_split;         /* MC_SPLIT_*: the {split} part of the file names */
    int rank;
} mc_gpt_cache;

typedef enum { MC_GPT_CACHE_NONE = 0, MC_GPT_CACHE_LOADED, MC_GPT_CACHE_BUILT } mc_gpt_cache_result;

int mc_gpt_dataset_build_cached(mc_gpt_dataset *ds, const mc_lowlevel *ll, int64_t seq_begin, int64_t seq_end,
                                int64_t num_samples, int seq_length, uint64_t seed, const mc_gpt_cache *cache,
                                mc_gpt_cache_result *result, mc_err *err);

/* Sample idx (0 <= idx < len) as seq_length + 1 tokens into out. Does not allocate. */
void mc_gpt_dataset_get(const mc_gpt_dataset *ds, int64_t idx, int32_t *out);

#endif
