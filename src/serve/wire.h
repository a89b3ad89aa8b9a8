/* wire.h: a batch of sequences as one message, from the rank that serves HTTP to the other
 * ranks of a tensor-parallel job, which must run the generator on the same sequences
 * (generator.h) and so need each one's prompt, sampling settings and stop rules; the ranks
 * run the same binary, so the message is in the host's byte order. */
#ifndef MC_SERVE_WIRE_H
#define MC_SERVE_WIRE_H

#include <stddef.h>

#include "serve/request.h"

/* The sequences as bytes (malloc'd, *bytes long). */
void *mc_serve_wire_pack(mc_serve_seq *const *seqs, int n, size_t *bytes);

/* A packed batch read back: sequences without requests, each with its own stop rules and
 * output buffer. */
typedef struct mc_serve_batch {
    mc_serve_seq *seqs;
    mc_serve_stops *stops;
    int n;
} mc_serve_batch;

/* A message not written by mc_serve_wire_pack aborts (a bug, not input). */
void mc_serve_wire_unpack(const void *buf, size_t bytes, mc_serve_batch *out);
void mc_serve_batch_free(mc_serve_batch *b);

#endif
