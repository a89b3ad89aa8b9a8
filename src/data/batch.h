/* batch.h: a micro-batch in host memory, built from samples of seq+1 tokens as
 * GPTDataset.__getitem__ and _get_ltor_masks_and_position_ids build it.
 *
 * For a sample t[0..seq]:
 *   tokens[i]       = t[i], labels[i] = t[i+1]                       (i < seq)
 *   loss_mask[i]    = 0 where tokens[i] == eod and eod_mask_loss, else 1 (the mask is on
 *                     the *input* token: the prediction made from an EOD is not trained)
 *   position_ids[i] = i, or with reset_position_ids the distance to the start of the
 *                     document holding i; an EOD belongs to the document it ends, so the
 *                     position after an EOD is 0
 *   seg_start[i]    = with reset_attention_mask, the first position of i's document within
 *                     the sample (query i attends to keys [seg_start[i], i]); 0 otherwise,
 *                     which is the plain causal mask.
 * Megatron materializes the [seq, seq] boolean mask; seg_start is the same information in
 * O(seq). All arrays are (mbs, seq) row-major. */
#ifndef MC_DATA_BATCH_H
#define MC_DATA_BATCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct mc_batch {
    int capacity;           /* samples the arrays can hold */
    int mbs;                /* samples filled by the last get_batch */
    int seq;
    int32_t *tokens;        /* (capacity, seq) */
    int32_t *labels;        /* (capacity, seq) */
    float *loss_mask;       /* (capacity, seq) */
    int32_t *position_ids;  /* (capacity, seq) */
    int32_t *seg_start;     /* (capacity, seq) */
    int64_t *sample_ids;    /* (capacity,) dataset index of each row, for logging/tests */
    int32_t *scratch;       /* (seq + 1,) one raw sample */
} mc_batch;

typedef struct mc_batch_options {
    int32_t eod;
    bool eod_mask_loss, reset_position_ids, reset_attention_mask;
} mc_batch_options;

/* Allocates the arrays for up to `capacity` samples of `seq` tokens (zero-filled). */
void mc_batch_init(mc_batch *b, int capacity, int seq);
void mc_batch_free(mc_batch *b);

/* Fills row `row` from one raw sample of seq+1 tokens. Does not allocate. */
void mc_batch_set_row(mc_batch *b, int row, const int32_t *sample, const mc_batch_options *opt);

#endif
