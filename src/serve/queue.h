/* queue.h: the requests waiting for the generator, as sequences, in arrival order.
 *
 * HTTP handler threads submit a request and wait; one worker thread, which owns the
 * generator, takes up to a batch of sequences at a time (of several requests, a request's
 * sequences possibly over several batches) and completes them; a request is answered when
 * its last sequence is. Stopping refuses new requests; what was queued is still taken, so
 * every submitted request is completed. */
#ifndef MC_SERVE_QUEUE_H
#define MC_SERVE_QUEUE_H

#include "serve/request.h"

typedef struct mc_serve_queue mc_serve_queue;

/* capacity: the most sequences queued at once (a request that would exceed it is refused). */
mc_serve_queue *mc_serve_queue_new(int capacity);
void mc_serve_queue_free(mc_serve_queue *q);

/* Queues r's sequences and waits until the worker completed them all (r->status then set).
 * Returns 0, or the HTTP status of a refusal (503: stopping, or too many sequences queued)
 * with r->error set and nothing queued. */
int mc_serve_queue_submit_wait(mc_serve_queue *q, mc_serve_request *r);

/* The worker: up to max sequences into out, in arrival order, waiting for at least one at
 * most timeout_s seconds (< 0: without a limit). Returns how many (0: the time ran out), or
 * -1 when the queue is stopping and empty. */
int mc_serve_queue_take(mc_serve_queue *q, mc_serve_seq **out, int max, double timeout_s);
/* The worker: the taken sequences done, with status 200, or an error status and message
 * for their requests; wakes the requests whose last sequence this was. */
void mc_serve_queue_complete(mc_serve_queue *q, mc_serve_seq **seqs, int n, int status, const char *error);

/* From any thread: no request is queued from now on; take returns -1 once the queue is empty. */
void mc_serve_queue_stop(mc_serve_queue *q);

#endif
