/* decode.h: the forwards and token choices of generation over a model the caller owns (the
 * generator's inference model, or the trainer's for its text sample).
 *
 * A decoder has `slots` sequences at most, each with a slot of `cap` positions in a
 * key/value cache (cap 0: no cache, the window recompute only), and buffers allocated once:
 * the tokens and positions of a forward (device, uploaded from page-locked host copies)
 * and, for the choice, the rows' logits gathered over tensor parallelism and their greedy
 * ids (device), so that a decode step launches the same work on the same buffers every
 * time and waits for the device once, to read back the chosen ids. Only rows drawn by
 * sampling bring their logits to the host, where sample.h draws. Every call is collective
 * over the model's tensor-parallel group and gives every rank the same tokens.
 *
 * On a backend with graphs (backend.h; CUDA) and without tensor parallelism (whose
 * all-reduces stay NCCL calls of their own), a decode step's forward over n slots is
 * recorded as a graph by the second step over n slots and replayed by every later one:
 * one launch instead of ~10 a layer, which bound a small batch's step on the host. The
 * first step over n runs op by op, so that one-time work (cuBLASLt's descriptors and
 * algorithm timing) happens outside the capture. A capture that fails says why on stderr
 * once, and the decoder's steps run op by op from then on; so do they all with
 * MC_DECODE_GRAPHS=0 in the environment (timing, bisection).
 *
 * Greedy steps can also run pipelined (mc_decoder_greedy_launch/_wait): a step's graph then
 * also holds the LM head, the argmax and decode_advance, which writes the chosen ids and
 * the next positions into the next step's inputs on the device, so the host queues step
 * k + 1 before it reads step k's ids and the device never waits for the host between
 * steps (the host's turn between two steps, long beside a small model's step, is hidden). */
#ifndef MC_GENERATE_DECODE_H
#define MC_GENERATE_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "generate/sample.h"
#include "model/model.h"

typedef struct mc_decoder {
    mc_model *m;
    mc_backend *be;
    int slots;
    mc_kv_cache cache;    /* slots x cap positions; absent (cap 0) for the window recompute only */
    mc_microbatch mb;     /* tokens, pos: [max tokens a forward] I32, device */
    int32_t *host_tokens, *host_pos; /* page-locked mirrors */
    mc_tensor gathered;   /* [tp x slots, vocab_local] logits of the rows chosen from (tp > 1) */
    mc_tensor ids;        /* [slots] I32, the rows' greedy ids */
    int32_t *host_ids;    /* page-locked [slots] */
    char *host_logits;    /* page-locked [slots x padded vocab] in the activation dtype: drawn rows */
    float *row;           /* [padded vocab]: one drawn row, widened */
    mc_gen_scored *tmp;   /* [padded vocab]: the sort of a draw */
    bool graphs;          /* steps replay graphs (the banner) */
    void **graph;         /* [slots]: graph[n - 1], the step's forward over n slots, or NULL */
    bool *stepped;        /* [slots]: stepped[n - 1], a step over n slots has run */
    void **greedy_graph;  /* [slots]: the pipelined greedy step over n slots, or NULL */
    bool *greedy_stepped; /* [slots]: such a step over n slots has run */
    int32_t *host_ring;   /* page-locked [MC_DECODE_DEPTH x slots]: the ids of the steps in flight */
    int64_t launched, waited; /* pipelined greedy steps queued, and read back */
    int greedy_n;         /* the slots of the last pipelined step */
} mc_decoder;

/* Pipelined greedy steps in flight at most (each has a ring row and a backend mark). */
#define MC_DECODE_DEPTH 2

/* Backend and host bytes mc_decoder_init allocates for a decoder over m (cache included). */
void mc_decoder_bytes(const mc_model *m, int slots, int64_t cap, size_t *device, size_t *host);
/* slots <= the model's max_batch (its logits rows); cap: positions a slot holds (0: no
 * cache). */
void mc_decoder_init(mc_decoder *d, mc_model *m, int slots, int64_t cap);
void mc_decoder_free(mc_decoder *d);

/* A prompt into slot `slot` at positions 0 .. n - 1, in one forward (n at most the model's
 * seq_length and the cache's positions); its last row is row n - 1. */
void mc_decoder_prefill(mc_decoder *d, int slot, const int32_t *tokens, int n);
/* One decode step over slots 0 .. n - 1: token tokens[b] at position pos[b] of slot b, one
 * forward; row b is slot b's. A slot no sequence holds is given any token at position 0
 * (its own cache, written and never read). */
void mc_decoder_step(mc_decoder *d, int n, const int32_t *tokens, const int32_t *pos);
/* A greedy decode step over slots 0 .. n - 1, queued without waiting for the device: the
 * forward, the choice (mc_decoder_choose's greedy one) and the copy of its ids to the host.
 * tokens, pos: each slot's token and position as mc_decoder_step takes them; NULL for both:
 * each slot's id chosen by the last launched step, at the next position (held at the
 * cache's last), and then n must be that step's. Given tokens, no step may be in flight
 * (nor for prefill, step, window and choose); at most MC_DECODE_DEPTH steps launched and
 * not waited for. */
void mc_decoder_greedy_launch(mc_decoder *d, int n, const int32_t *tokens, const int32_t *pos);
/* Waits for the oldest launched greedy step not yet waited for; its n ids, valid until
 * MC_DECODE_DEPTH more launches. */
const int32_t *mc_decoder_greedy_wait(mc_decoder *d);

/* The forward over the window of the model's seq_length positions holding ctx[0 .. len)
 * (zeros after it; causal, so they change nothing before), without the cache: the
 * recompute that checks the cache, and the trainer's sample; the next token's row is
 * len - 1. */
void mc_decoder_window(mc_decoder *d, const int32_t *ctx, int len);

/* The continuation of prompt by up to n tokens, each from a forward over the window of the
 * last seq_length tokens (mc_decoder_window; once full, the window slides by one), chosen
 * as p says (draw k for token k) into out; keep (optional) sees each token as it comes and
 * returns false to end there. Returns the tokens written. */
int mc_decoder_continue_window(mc_decoder *d, const int32_t *prompt, int prompt_len, int n, const mc_gen_params *p,
                               int32_t *out, bool (*keep)(void *ctx, int32_t token), void *ctx);

/* The next tokens of rows row0 .. row0 + n - 1 of the last forward (n <= slots): out[i] as
 * params[i] and draw index[i] say (sample.h's mc_gen_pick; greedy ones from the device's
 * argmax_rows, which chooses alike); a NULL params[i]: row i is not wanted, out[i] is left. */
void mc_decoder_choose(mc_decoder *d, int64_t row0, int n, const mc_gen_params *const *params, const uint64_t *index,
                       int32_t *out);

#endif
