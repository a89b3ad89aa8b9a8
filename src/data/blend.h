/* blend.h: Megatron's dataset blends (utils.py get_blend_from_list,
 * blended_megatron_dataset_builder.py, blended_dataset.py, helpers.cpp).
 *
 * A blend is a list of dataset prefixes, optionally weighted: `--data-path 0.3 a 0.7 b` or
 * `--data-path a b`. With weights, each prefix's GPT dataset is asked for
 * ceil(ceil(target * w_i) * (1 + 0.005)) samples (a 0.5% surplus), the blend has
 * sum_i ceil(target * w_i) samples, and sample s of the blend comes from the dataset whose
 * "error" w_i * max(s, 1) - taken_i is largest (ties to the lowest index); each dataset is
 * read in its own order 0, 1, 2, ... Without weights every prefix gives one epoch, the
 * weights are the epoch lengths, and the blend has min(target, their sum) samples (or,
 * without a target, exactly their sum: the exhaustive variant). No randomness is involved. */
#ifndef MC_DATA_BLEND_H
#define MC_DATA_BLEND_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define MC_BLEND_SURPLUS 0.005
#define MC_BLEND_MAX_DATASETS 32766 /* dataset_index is int16 (Megatron asserts < 32767) */

typedef struct mc_blend_spec {
    int n;
    char **prefixes; /* stripped of surrounding whitespace */
    double *weights; /* as given (not normalized); NULL: no weights */
} mc_blend_spec;

/* Parses a whitespace-separated "[w] prefix ..." list (an odd count, or any entry that is
 * not a number, means no weights). `flag` names the option in messages. Errors: empty
 * list, weights mixed with prefixes, a weight that is not a positive finite number, more
 * than MC_BLEND_MAX_DATASETS prefixes. */
int mc_blend_parse(const char *list, const char *flag, mc_blend_spec *out, mc_err *err);
void mc_blend_spec_free(mc_blend_spec *b);

/* numpy.sum of a float64 array (pairwise summation, bit-exact). */
double mc_numpy_sum(const double *x, int64_t n);
/* utils.normalize: w / numpy.sum(w). */
void mc_blend_normalize(const double *w, int n, double *out);
/* _get_size_per_split_per_dataset for one split: ceil(ceil(target * w_i) * (1 + surplus)). */
int64_t mc_blend_dataset_size(int64_t target, double normalized_weight, double surplus);

/* helpers.cpp build_blending_indices: `size` samples following normalized `weights`. */
void mc_blend_build_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                            int64_t *dataset_sample_index);
/* helpers.cpp build_exhaustive_blending_indices: exactly sizes[i] samples of dataset i
 * (sum of sizes in total). */
void mc_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index, int64_t *dataset_sample_index);

#endif
