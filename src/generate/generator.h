/* generator.h: a trained model's continuations of prompts, for `megatron-c generate` and
 * `megatron-c serve`.
 *
 * A generator holds one model loaded from a checkpoint (cfg->ckpt.load), built for
 * inference only (no gradients, optimizer state or data), and continues batches of prompts
 * through a key/value cache: each prompt in one forward (prefill), then one token a forward
 * for all the sequences under way together (decode), up to max_batch of them at once (the
 * others wait for a slot, which each takes as one ends). Every sequence of a batch has its
 * own prompt length, token budget, sampling settings and seed, and gets the tokens it would
 * get alone (up to the rounding of a batched matrix product). Under tensor parallelism
 * (mpirun) every rank calls mc_generator_run with the same sequences and gets the same
 * tokens. Creation prints one line on stderr (rank 0): the memory of the weights, the cache,
 * the activations and the buffers. */
#ifndef MC_GENERATE_GENERATOR_H
#define MC_GENERATE_GENERATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "megatron.h"

typedef struct mc_generator mc_generator;

/* How one sequence's tokens are drawn. */
typedef struct mc_gen_params {
    int max_new_tokens; /* >= 1 */
    double temperature; /* 0: greedy (the most likely token, the lowest id among equals) */
    int top_k;          /* 0: the whole vocabulary */
    double top_p;       /* in (0, 1]; 1: no nucleus cut */
    uint64_t seed;      /* the Philox key of the draws: the same seed, the same tokens */
    bool stop_at_eod;   /* end the sequence at the tokenizer's end of document (not returned) */
} mc_gen_params;

/* One sequence of a batch: the caller's prompt and output buffer; produced is set. */
typedef struct mc_gen_seq {
    const int32_t *prompt; /* ids < the model's vocabulary size */
    int prompt_len;        /* >= 1 */
    mc_gen_params params;
    int32_t *out; /* params.max_new_tokens entries */
    int produced; /* tokens written to out (an end of document is not among them) */
} mc_gen_seq;

/* Called with each new token of sequence i as it is chosen (every rank alike, in sequence
 * order within a decode step); false ends that sequence there. */
typedef bool (*mc_gen_on_token)(void *ctx, int i, int32_t token);

typedef struct mc_gen_stats {
    double prefill_s, decode_s;             /* wall time of each phase */
    int64_t prefill_tokens, decode_tokens;  /* prompt tokens; tokens made by decode steps */
} mc_gen_stats;

/* cfg: train's flags (device, precision, tensor parallelism, tokenizer) with cfg->ckpt.load
 * naming the checkpoint; the model's shape is read from it. max_positions: the longest
 * prompt + continuation this generator will be asked for (at most the model's positions;
 * 0: the model's positions). Errors say which flag or file is wrong. */
mc_generator *mc_generator_create(const mc_config *cfg, int64_t max_positions, mc_err *err);
/* The model's config as loaded (vocabulary size, positions, tokenizer flags). */
const mc_config *mc_generator_config(const mc_generator *g);
/* The end-of-document id that stop_at_eod stops at (-1: none), set by the caller from its
 * tokenizer. */
void mc_generator_set_eod(mc_generator *g, int32_t eod);
/* on: no key/value cache: every token recomputes the forward over the window of the last
 * positions (the cache's check; a prompt and continuation may then exceed the positions,
 * the window slides), one sequence after another. */
void mc_generator_set_recompute(mc_generator *g, bool on);
/* Continues the n sequences; stats optional. An error (a prompt too long, an id outside
 * the vocabulary, bad params) names the sequence and changes nothing. */
int mc_generator_run(mc_generator *g, mc_gen_seq *seqs, int n, mc_gen_on_token on_token, void *ctx,
                     mc_gen_stats *stats, mc_err *err);
void mc_generator_free(mc_generator *g);

/* mc_generator_create for up to max_batch sequences decoded together (mc_generator_create:
 * 1, one after another); its key/value cache holds max_batch x max_positions positions. */
mc_generator *mc_generator_create_batched(const mc_config *cfg, int64_t max_positions, int max_batch, mc_err *err);

#endif
