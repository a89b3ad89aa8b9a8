#include "data/batch.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void mc_batch_init(mc_batch *b, int capacity, int seq) {
    MC_ASSERT(capacity > 0 && seq > 0, "batch of %d x %d", capacity, seq);
    memset(b, 0, sizeof *b);
    size_t n = (size_t)capacity * (size_t)seq;
    b->capacity = capacity;
    b->seq = seq;
    b->tokens = mc_xcalloc(n, sizeof *b->tokens);
    b->labels = mc_xcalloc(n, sizeof *b->labels);
    b->loss_mask = mc_xcalloc(n, sizeof *b->loss_mask);
    b->position_ids = mc_xcalloc(n, sizeof *b->position_ids);
    b->seg_start = mc_xcalloc(n, sizeof *b->seg_start);
    b->sample_ids = mc_xcalloc((size_t)capacity, sizeof *b->sample_ids);
    b->scratch = mc_xcalloc((size_t)seq + 1, sizeof *b->scratch);
}

void mc_batch_free(mc_batch *b) {
    free(b->tokens);
    free(b->labels);
    free(b->loss_mask);
    free(b->position_ids);
    free(b->seg_start);
    free(b->sample_ids);
    free(b->scratch);
    memset(b, 0, sizeof *b);
}

void mc_batch_set_row(mc_batch *b, int row, const int32_t *sample, const mc_batch_options *opt) {
    MC_ASSERT(row >= 0 && row < b->capacity);
    const int seq = b->seq;
    int32_t *tokens = b->tokens + (size_t)row * seq;
    int32_t *labels = b->labels + (size_t)row * seq;
    float *loss_mask = b->loss_mask + (size_t)row * seq;
    int32_t *pos = b->position_ids + (size_t)row * seq;
    int32_t *seg = b->seg_start + (size_t)row * seq;
    memcpy(tokens, sample, (size_t)seq * sizeof *tokens);
    memcpy(labels, sample + 1, (size_t)seq * sizeof *labels);
    /* doc_start: first position of the current document; it moves past each EOD. */
    int32_t doc_start = 0;
    for (int i = 0; i < seq; i++) {
        bool is_eod = tokens[i] == opt->eod;
        loss_mask[i] = opt->eod_mask_loss && is_eod ? 0.0f : 1.0f;
        pos[i] = opt->reset_position_ids ? i - doc_start : i;
        seg[i] = opt->reset_attention_mask ? doc_start : 0;
        if (is_eod) doc_start = i + 1;
    }
}
