/* loader.h: a background thread that prepares the next micro-batches while the step runs.
 *
 * The trainer asks for micro-batches in a fixed order that is known in advance: in the
 * iteration that starts at `consumed` samples, micro-batch m of data-parallel rank r is
 * the samples first + [0, mbs) with first = mc_data_sample_index(consumed, m, mbs, dp, r)
 * (Megatron's MegatronPretrainingSampler), and the next iteration starts at consumed + gbs.
 * A loader is such a stream: one thread fills a ring of `depth` mc_batch buffers in stream
 * order (pthread mutex + two condition variables), and mc_loader_next hands them out in the
 * same order, blocking only when the thread has fallen behind. With depth >= 2 the next
 * micro-batch is normally ready when the step asks for it.
 *
 *     mc_loader *l;
 *     mc_loader_train_stream s = {.consumed = t->consumed_train_samples, .mbs = mbs, .dp = dp,
 *                                 .dp_rank = r, .num_microbatches = M, .global_batch = gbs,
 *                                 .end = train_iters * gbs};
 *     mc_loader_create_train(&l, data, &s, 4, &err);
 *     for each iteration, for each micro-batch m:
 *         const mc_batch *b = mc_loader_next(l);     // rows = samples first..first+mbs-1
 *         ... forward/backward on b ...              // b stays valid until the next call
 *     mc_loader_free(l);
 *
 * Other orders (evaluation, tests, a resumed run) use an explicit list of requests, or a
 * callback that produces the k-th request. The stream ends when the list (or callback)
 * ends; mc_loader_next then returns NULL. mc_data is read-only after mc_data_open, so the
 * trainer may keep calling mc_data_get_batch from its own thread (e.g. for evaluation)
 * while a loader runs, and several loaders may share one mc_data.
 *
 * Wiring it into the trainer: create the training loader after mc_data_open with
 * consumed = the samples already consumed (0, or the resumed count) and end =
 * train_iters * global_batch_size; in mc_trainer_step replace the direct
 * mc_data_get_batch(MC_SPLIT_TRAIN, first, mbs) by mc_loader_next (the k-th batch is
 * iteration k / M, micro-batch k % M); recreate it if the schedule changes (resume,
 * batch-size ramp). Depth 2-4 is enough: a batch costs a few memcpy per sample. */
#ifndef MC_DATA_LOADER_H
#define MC_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "data/batch.h"
#include "data/data.h"

typedef struct mc_loader mc_loader;

/* One micro-batch: samples first_index .. first_index+mbs-1 of `split`. */
typedef struct mc_loader_request {
    int split;
    int64_t first_index;
    int mbs;
} mc_loader_request;

/* Produces request k (k = 0, 1, 2, ...) of the stream; returns false when it has ended.
 * Called on the loader thread, in increasing k. */
typedef bool (*mc_loader_request_fn)(void *ctx, int64_t k, mc_loader_request *req);

/* The training stream: micro-batches of consecutive iterations from `consumed` samples
 * until `end` samples (exclusive; <= 0: until the train split runs out). */
typedef struct mc_loader_train_stream {
    int64_t consumed;
    int mbs, dp, dp_rank, num_microbatches;
    int64_t global_batch; /* mbs * dp * num_microbatches */
    int64_t end;
} mc_loader_train_stream;

/* depth: ring size (>= 1); max_mbs: capacity of each buffer. Requests outside their split
 * end the stream with an error that mc_loader_error reports. */
int mc_loader_create(mc_loader **out, mc_data *data, int depth, int max_mbs, mc_loader_request_fn fn, void *ctx,
                     mc_err *err);
int mc_loader_create_list(mc_loader **out, mc_data *data, int depth, const mc_loader_request *reqs, int64_t n,
                          mc_err *err);
int mc_loader_create_train(mc_loader **out, mc_data *data, const mc_loader_train_stream *s, int depth,
                           mc_err *err);

/* The next micro-batch of the stream (its rows and sample_ids filled as
 * mc_data_get_batch fills them), or NULL at the end of the stream or after an error. The
 * previous batch returned is released by this call: use each batch before asking for the
 * next. `req` (optional) receives the request the batch answers. */
const mc_batch *mc_loader_next(mc_loader *l, mc_loader_request *req);
/* Batches handed out so far, and how many times mc_loader_next had to wait. */
int64_t mc_loader_delivered(const mc_loader *l);
int64_t mc_loader_waits(const mc_loader *l);
/* Non-zero if the stream ended on a bad request (message in err). */
int mc_loader_error(const mc_loader *l, mc_err *err);
/* Stops the thread (a pending fill finishes first) and frees everything. */
void mc_loader_free(mc_loader *l);

#endif
