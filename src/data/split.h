/* split.h: train/valid/test splits of one dataset, and how many samples each must hold.
 *
 * `--split "969,30,1"` as Megatron reads it (blended_megatron_dataset_config.py): every
 * run of [.0-9] characters is a number, missing numbers are 0, the three are normalized
 * to sum to 1 and turned into bookends [(0, a), (a, a+b), (a+b, a+b+c)]; a split of zero
 * width is absent. Split k of N sequences is [int(round(lo*N)), int(round(hi*N))) with
 * Python's round-half-to-even. Mock data always uses "1,1,1". */
#ifndef MC_DATA_SPLIT_H
#define MC_DATA_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

struct mc_config;

enum { MC_SPLIT_TRAIN = 0, MC_SPLIT_VALID = 1, MC_SPLIT_TEST = 2, MC_NUM_SPLITS = 3 };

#define MC_SPLIT_DEFAULT "969,30,1"
#define MC_SPLIT_MOCK "1,1,1"

typedef struct mc_split {
    double lo[MC_NUM_SPLITS], hi[MC_NUM_SPLITS]; /* bookends */
    bool present[MC_NUM_SPLITS];                 /* false: zero width (Megatron's None) */
} mc_split;

/* Parses the split string. Errors (naming --split): no number, a malformed number such
 * as "1.2.3", more than three numbers, a negative number (Megatron's regex would silently
 * drop the minus sign), weights summing to 0. */
int mc_split_parse(const char *text, mc_split *out, mc_err *err);

/* The sequence range [begin, end) of split k over n sequences; an absent split is [0, 0). */
void mc_split_range(const mc_split *s, int k, int64_t n, int64_t *begin, int64_t *end);

/* The samples the trainer asks of each split (training.py get_train_valid_test_num_samples):
 *   train = train_samples, or train_iters * gbs;
 *   valid = (train_iters // eval_interval + 1) * eval_iters * gbs, with train_iters =
 *           train_samples // gbs when training is sample-based (update_train_iters);
 *   test  = eval_iters * gbs.
 * eval_interval 0 (Megatron-C's "no periodic evaluation") counts only the evaluation at
 * the end of training: valid = eval_iters * gbs. gbs = global_batch_size, or
 * micro_batch_size when the config has not been validated yet (global 0). */
void mc_split_requested_samples(const struct mc_config *cfg, int64_t out[MC_NUM_SPLITS]);

#endif
