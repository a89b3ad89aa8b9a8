/* train_log.h: Megatron's iteration and validation lines, and the JSONL metrics file.
 *
 * The iteration line keeps Megatron's field order and formats (training.py training_log)
 * so existing log parsers work, and appends tokens/s/GPU and MFU at the end. */
#ifndef MC_TRAIN_TRAIN_LOG_H
#define MC_TRAIN_TRAIN_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

typedef struct mc_iter_log {
    int64_t iteration, train_iters, consumed_samples;
    double elapsed_ms;        /* per iteration, averaged over the interval */
    double tflops_per_gpu;
    double learning_rate;
    int global_batch_size;
    /* Averaged over the interval's iterations that were not skipped (fp16 overflow);
     * absent, as in Megatron, when every one was. */
    bool have_lm_loss;
    double lm_loss;
    double loss_scale;
    bool have_grad_norm;      /* false when the last iteration was skipped (no norm) */
    double grad_norm;
    bool have_num_zeros;
    int64_t num_zeros;
    bool have_params_norm;
    double params_norm;
    int64_t skipped_iters;    /* in the interval; fp16 overflows */
    int64_t nan_iters;        /* skipped iterations whose loss was inf or NaN */
    double tokens_per_sec_per_gpu;
    double mfu;               /* fraction of peak */
} mc_iter_log;

/* Formats the iteration line (no trailing newline) into buf. */
void mc_log_format_iteration(char *buf, size_t size, const mc_iter_log *l);
/* Prints the three validation lines (dashes, values, dashes) on the last rank:
 * " validation loss at {prefix} | lm loss value: X | lm loss PPL: Y | ". */
void mc_log_print_validation(const char *prefix, double loss);

/* metrics.jsonl in a directory (created if missing), opened for appending so an earlier
 * run's records are never lost. */
typedef struct mc_metrics_file {
    FILE *f;
} mc_metrics_file;

int mc_metrics_open(mc_metrics_file *m, const char *dir, mc_err *err);
void mc_metrics_write_iteration(mc_metrics_file *m, const mc_iter_log *l);
void mc_metrics_write_validation(mc_metrics_file *m, int64_t iteration, const char *split, double loss);
void mc_metrics_close(mc_metrics_file *m);

#endif
