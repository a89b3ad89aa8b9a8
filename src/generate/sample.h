/* sample.h: the next token from a full row of logits, on the host: greedy, or drawn from
 * the tempered softmax cut to top-k and top-p. The one sampler of generation (generator.h)
 * and of the trainer's text sample (trainer_sample.h). */
#ifndef MC_GENERATE_SAMPLE_H
#define MC_GENERATE_SAMPLE_H

#include <stdint.h>

#include "generate/generator.h"

/* A logit with its id, for the sort of a draw. */
typedef struct mc_gen_scored {
    float logit;
    int32_t id;
} mc_gen_scored;

/* The token after logits[0 .. vocab) (ids < vocab; padding rows excluded by the caller):
 * at p->temperature 0 the largest logit, the lowest id among equals; else draw number
 * `index` of the seed's "sample" stream (mc_gen_uniform) from the softmax of logits /
 * temperature, cut to the top_k most likely (0: all), then to the most likely whose mass
 * reaches top_p of what is left (at least one). tmp: vocab entries of scratch. */
int32_t mc_gen_pick(const float *logits, int vocab, const mc_gen_params *p, uint64_t index, mc_gen_scored *tmp);

/* Draw number `index` of seed's "sample" stream, uniform in [0, 1): the same on every rank
 * and every run, so that a sequence's tokens depend on its seed alone. */
float mc_gen_uniform(uint64_t seed, uint64_t index);

#endif
