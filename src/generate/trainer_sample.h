/* trainer_sample.h: the trainer's text sample (train's --sample-prompt, printed after
 * training): its model continues a prompt with generation's code (decode.h, sample.h). */
#ifndef MC_GENERATE_TRAINER_SAMPLE_H
#define MC_GENERATE_TRAINER_SAMPLE_H

#include <stdint.h>

#include "base/error.h"
#include "megatron.h"

/* The continuation of prompt (token ids) by n tokens into out: each token from a forward
 * over the window of the last seq_length tokens (any parallel layout, sequence parallelism
 * included), greedy or drawn as the config's --sample-temperature, --sample-top-k and
 * --sample-top-p say from Philox streams of --seed (a run repeats its sample; every rank
 * draws the same). Collective. */
int mc_gen_trainer_sample(mc_trainer *t, const int32_t *prompt, int prompt_len, int n, int32_t *out, mc_err *err);

#endif
