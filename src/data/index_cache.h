/* index_cache.h: Megatron's dataset index cache: the files' names and descriptions.
 *
 * GPTDataset and BlendedDataset save their indices so that the next run (and the other
 * ranks) load them instead of rebuilding. Megatron names the files after the md5 of a JSON
 * description of the dataset:
 *
 *     {md5}-GPTDataset-{train|valid|test}-description.txt
 *     {md5}-GPTDataset-{split}-document_index.npy   int32   (E*n,)
 *     {md5}-GPTDataset-{split}-sample_index.npy     int32   (len+1, 2), int64 when a position
 *                                                            or a length exceeds INT32_MAX
 *     {md5}-GPTDataset-{split}-shuffle_index.npy    uint32  (len,), int64 from 2^32-1 samples
 *     {md5}-BlendedDataset-{split}-description.txt
 *     {md5}-BlendedDataset-{split}-dataset_index.npy        int16 (size,)
 *     {md5}-BlendedDataset-{split}-dataset_sample_index.npy int64 (size,)
 *
 * The description is Python's json.dumps(..., indent=4) of the dataset's identifiers
 * (mc_gpt_description below renders exactly that text with base/pyjson.h, ensure_ascii
 * and float repr included), and the .npy files are what numpy.save writes (data/npy.h:
 * format 1.0, same header padding), so a cache written by Megatron is loaded here and the
 * other way round whenever the descriptions agree. Unlike Megatron, every file is written atomically (temporary name, fsync, rename)
 * and the description is written last, so a crash never leaves a cache that looks
 * complete; a cache whose description text differs from ours, or whose arrays are not the
 * shape and range the dataset needs, is reported as an error (delete it to rebuild). */
#ifndef MC_DATA_INDEX_CACHE_H
#define MC_DATA_INDEX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "base/pyjson.h"
#include "data/split.h"

/* ---- dataset descriptions --------------------------------------------------------- */

/* A tokenizer's unique_identifiers as Megatron's legacy tokenizer classes record them
 * (megatron/training/tokenizer/tokenizer.py): {"class", "tokenizer_path": [...], options
 * as strings}. */
typedef struct mc_tokenizer_identity {
    const char *cls;               /* "_GPT2BPETokenizer", ... */
    int npaths;
    const char *paths[2];          /* NULL entries are JSON null */
    int noptions;
    const char *option_keys[2], *option_values[2];
} mc_tokenizer_identity;

/* MegatronDataset.unique_identifiers of a GPTDataset. */
typedef struct mc_gpt_identity {
    const char *dataset_path;      /* the prefix as given */
    int64_t num_samples;           /* < 0: None */
    int index_split;               /* MC_SPLIT_* */
    uint64_t random_seed;
    int sequence_length;
    const char *split;             /* config.split; NULL: None (per-split blends) */
    const mc_split *split_matrix;  /* NULL: None */
    const mc_tokenizer_identity *tokenizer; /* NULL: null */
} mc_gpt_identity;

extern const char *const mc_split_names[3]; /* "train", "valid", "test" */

/* Writes the identity object at the writer's position. */
void mc_gpt_identity_write(mc_json_writer *w, const mc_gpt_identity *id);
/* json.dumps(unique_identifiers, indent=4) of a GPTDataset (malloc'd). */
char *mc_gpt_description(const mc_gpt_identity *id);
/* The BlendedDataset description: {"class": "BlendedDataset", "datasets": [...], "split",
 * "weights", "size"}; weights are floats (normalized) when size >= 0, else the integer
 * dataset lengths (exhaustive blend, size None). */
char *mc_blended_description(const mc_gpt_identity *datasets, int n, int split, const double *weights,
                             const int64_t *int_weights, int64_t size);

/* ---- cache files --------------------------------------------------------------------- */

/* "{dir}/{md5}-{class}-{split}-{affix}" into a malloc'd string. */
char *mc_cache_path(const char *dir, const char *md5, const char *cls, const char *split, const char *affix);

/* Cache state of one dataset: all files present (hit), none or some (miss). A present
 * description whose text differs from `description` is an error. */
int mc_cache_probe(const char *dir, const char *md5, const char *cls, const char *split, const char *description,
                   const char *const *affixes, int naffixes, bool *hit, mc_err *err);

#endif
