/* server.h: `megatron-c serve`: a generator behind HTTP.
 *
 * Rank 0 listens (http.h) and routes PUT /api and POST /v1/completions (api.h; any other
 * path is a 404, another method a 405); a handler thread reads and tokenizes the request,
 * queues its sequences (queue.h) and waits. The thread that calls mc_server_run owns the
 * generator: it takes what is queued, up to max_batch sequences of any requests, into one
 * mc_generator_run, and completes them (a generator error is a 500 for their requests, and
 * the server goes on). Under tensor parallelism every rank calls mc_server_run: rank 0 sends
 * each batch to the others (wire.h, over the world group's host broadcast), which run the
 * generator on the same sequences; while idle it sends an empty batch every quarter of the
 * collective timeout, so that the waiting ranks' watchdog does not end the job.
 *
 * mc_server_stop (any thread; a signal's) closes the listening socket and refuses what
 * comes after (503); mc_server_run then answers every queued request, tells the other
 * ranks, and returns. */
#ifndef MC_SERVE_SERVER_H
#define MC_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "comm/comm.h"
#include "generate/generator.h"
#include "tokenizer/tokenizer.h"

typedef struct mc_server_options {
    const char *host;    /* the IPv4 address to listen on */
    int port;            /* 0: a free one */
    int max_batch;       /* sequences in one generator call */
    const char *model;   /* the completions answer's "model" */
    int64_t positions;   /* prompt + continuation, at most the generator's */
    uint64_t seed;       /* the requests without a seed draw from seeds derived from it */
} mc_server_options;

typedef struct mc_server mc_server;

/* On every rank of world (NULL: one process). Rank 0 listens and prints one line on stdout,
 *   megatron-c serve: listening on http://HOST:PORT (PUT /api, POST /v1/completions)
 * If it cannot, every rank fails (rank 0 saying why). */
mc_server *mc_server_create(mc_generator *g, const mc_tokenizer *tok, mc_group *world, const mc_server_options *o,
                            mc_err *err);
/* Serves until mc_server_stop; the generator is used on this thread only. */
void mc_server_run(mc_server *s);
void mc_server_stop(mc_server *s);
/* After mc_server_run returned: closes the connections and frees the server. */
void mc_server_free(mc_server *s);

#endif
