/* data.h: the data pipeline as the trainer sees it.
 *
 * mc_data_open builds, once, everything Megatron builds before training: the low-level
 * datasets (mock data, an in-memory corpus, a byte-tokenized text file, or Megatron
 * .bin/.idx files), the train/valid/test split, one GPTDataset per split and dataset
 * with Megatron's sample order for --seed, and the blends over them. mc_data_get_batch then only copies tokens and derives the masks: it does not
 * allocate, and one mc_data may serve several threads reading different batches.
 *
 * The sampler is Megatron's MegatronPretrainingSampler (--dataloader-type single): in an
 * iteration that starts at `consumed` samples, micro-batch m of data-parallel rank r holds
 * the dataset indices first + [0, mbs) with first = mc_data_sample_index(...). Validation
 * continues from the validation samples consumed so far; test starts at 0.
 *
 *     int64_t want[3];
 *     mc_split_requested_samples(cfg, want);
 *     mc_data *d;
 *     if (mc_data_open(&d, cfg, want[0], want[1], want[2], &err)) die(err.msg);
 *     mc_batch b;
 *     mc_batch_init(&b, mbs, cfg->model.seq_length);
 *     mc_data_get_batch(d, MC_SPLIT_TRAIN, mc_data_sample_index(consumed, m, mbs, dp, r), mbs, &b);
 */
#ifndef MC_DATA_DATA_H
#define MC_DATA_DATA_H

#include <stdint.h>

#include "base/error.h"
#include "data/batch.h"
#include "data/gpt_dataset.h"
#include "data/split.h"
#include "megatron.h"
#include "tokenizer/tokenizer.h"

typedef struct mc_data mc_data;

/* The tokenizer the config's flags name (--tokenizer-type and its files, the model's
 * --vocab-size for the Null tokenizer): the one place they become tokenizer options. */
mc_tokenizer_options mc_data_tokenizer_options(const mc_config *cfg);

/* Sources, one of (more than one set is an error):
 *   cfg->data.mock_data          Megatron's mock data; NullTokenizer with --vocab-size V:
 *                                vocab V, eod V-1; split forced to "1,1,1";
 *   cfg->data.corpus_*           in-memory documents (borrowed: they must outlive the
 *                                mc_data); vocab --vocab-size, eod V-1 (NullTokenizer),
 *                                or 257/256 with tokenizer_type MC_TOKENIZER_BYTE;
 *   cfg->data.text_data_path     a text file, documents at blank lines, byte tokenizer
 *                                (vocab 257, eod 256);
 *   cfg->data.data_path          Megatron .bin/.idx datasets, "[w1] prefix1 [w2] prefix2 ...",
 *                                split by --split (Megatron's legacy default "969, 30, 1");
 *                                several prefixes (or a weight) make a blend (blend.h);
 *   cfg->data.{train,valid,test}_data_path
 *                                one blend per split, each used whole (no --split).
 * The .bin/.idx sources need --tokenizer-type for the vocabulary and the EOD id
 * (NullTokenizer: --vocab-size V, eod V-1; ByteLevelTokenizer: 257/256; the others are
 * opened from their files). Every .bin's token ids must lie inside that vocabulary (data
 * made by another tokenizer is an error naming the flag, the file and the id; unlike
 * Megatron, which reads such ids as zero embeddings or fails on the device): settled by the
 * .idx dtype where its range fits, else by a scan of the .bin, bounded to 1 GiB of it.
 * A num_samples < 0 builds one epoch (Megatron's None), 0 too
 * (Megatron's 0 gives one epoch as well, but the cache descriptions differ).
 *
 * Index cache: GPT datasets over .bin/.idx save and reuse Megatron's cache files
 * (index_cache.h) under --data-cache-path, by default under "<prefix>/cache/GPTDataset_indices"
 * as Megatron does; blends are cached only with --data-cache-path (as in Megatron). */
int mc_data_open(mc_data **out, const mc_config *cfg, int64_t train_samples, int64_t valid_samples,
                 int64_t test_samples, mc_err *err);

/* The same for one rank of several: rank 0 builds (or loads) every index cache, then all
 * ranks meet in dist->barrier, then the other ranks load the caches rank 0 wrote. With
 * dist == NULL this is mc_data_open (one rank). */
typedef struct mc_data_dist {
    int rank;
    void (*barrier)(void *ctx);
    void *ctx;
} mc_data_dist;
int mc_data_open_dist(mc_data **out, const mc_config *cfg, int64_t train_samples, int64_t valid_samples,
                      int64_t test_samples, const mc_data_dist *dist, mc_err *err);
void mc_data_close(mc_data *d);

/* Fills out with samples first_index .. first_index+mbs-1 of `split` (MC_SPLIT_TRAIN,
 * _VALID, _TEST). out must come from mc_batch_init with capacity >= mbs and this
 * dataset's seq length. Indices beyond the split are a caller bug (abort). */
void mc_data_get_batch(mc_data *d, int split, int64_t first_index, int mbs, mc_batch *out);

int64_t mc_data_split_len(const mc_data *d, int split);
int32_t mc_data_eod(const mc_data *d);
int mc_data_vocab_size(const mc_data *d);
int mc_data_seq_length(const mc_data *d);
/* The GPT dataset behind a split (its three indices), for tests and diagnostics; for a
 * blended split, its first component. An absent split is an empty dataset (len 0). */
const mc_gpt_dataset *mc_data_split(const mc_data *d, int split);
/* Blends: the number of component datasets of a split (0 for a split that is not a
 * blend), component i, and the blend's dataset_index / dataset_sample_index arrays
 * (length mc_data_split_len). */
int mc_data_split_blend(const mc_data *d, int split, const int16_t **dataset_index,
                        const int64_t **dataset_sample_index);
const mc_gpt_dataset *mc_data_split_component(const mc_data *d, int split, int i);
/* Sample idx of a split as seq_length + 1 raw tokens (what get_batch turns into a row). */
void mc_data_get_sample(const mc_data *d, int split, int64_t idx, int32_t *out);
/* Where the data comes from, for messages ("--mock-data", "--data-path PREFIX", ...). */
const char *mc_data_source(const mc_data *d);
/* How many GPT index caches were loaded and built by the last open (0/0 without caches). */
void mc_data_cache_stats(const mc_data *d, int *loaded, int *built);
/* The sequence range of the low-level dataset that a split uses. */
void mc_data_split_range(const mc_data *d, int split, int64_t *begin, int64_t *end);

/* MegatronPretrainingSampler: the first dataset index of micro-batch `micro` of DP rank
 * `dp_rank` in the iteration that starts at `consumed` samples. */
static inline int64_t mc_data_sample_index(int64_t consumed, int micro, int mbs, int dp, int dp_rank) {
    return consumed + (int64_t)micro * mbs * dp + (int64_t)dp_rank * mbs;
}

#endif
