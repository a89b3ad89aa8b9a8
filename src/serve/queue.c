/* queue.c: the sequences between the HTTP threads and the generator's thread (queue.h).
 * A ring of sequence pointers under one mutex; the worker waits on `ready`, the handlers
 * on `done` (one condition for all of them: a handful of threads, woken once a batch). */
#include "serve/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/error.h"

struct mc_serve_queue {
    pthread_mutex_t mu;
    pthread_cond_t ready, done;
    mc_serve_seq **ring;
    int cap, head, count;
    bool stopping;
};

mc_serve_queue *mc_serve_queue_new(int capacity) {
    mc_serve_queue *q = mc_xcalloc(1, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* take's timeout must not jump with the wall clock */
    pthread_cond_init(&q->ready, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&q->done, NULL);
    q->cap = capacity;
    q->ring = mc_xcalloc((size_t)capacity, sizeof *q->ring);
    return q;
}

void mc_serve_queue_free(mc_serve_queue *q) {
    if (!q) return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->ready);
    pthread_cond_destroy(&q->done);
    free(q->ring);
    free(q);
}

int mc_serve_queue_submit_wait(mc_serve_queue *q, mc_serve_request *r) {
    pthread_mutex_lock(&q->mu);
    int refused = 0;
    if (q->stopping) {
        refused = 503;
        snprintf(r->error, sizeof r->error, "the server is shutting down");
    } else if (r->n > q->cap - q->count) {
        refused = 503;
        snprintf(r->error, sizeof r->error, "the server is busy (%d sequences queued, room for %d): try again later",
                 q->count, q->cap);
    }
    if (refused) {
        pthread_mutex_unlock(&q->mu);
        return refused;
    }
    r->pending = r->n;
    r->status = 0;
    for (int i = 0; i < r->n; i++) q->ring[(q->head + q->count++) % q->cap] = &r->seqs[i];
    pthread_cond_signal(&q->ready);
    while (r->pending > 0) pthread_cond_wait(&q->done, &q->mu);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int mc_serve_queue_take(mc_serve_queue *q, mc_serve_seq **out, int max, double timeout_s) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_s >= 0) {
        double s = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + timeout_s;
        until.tv_sec = (time_t)s;
        until.tv_nsec = (long)((s - (double)until.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&q->mu);
    int rc = 0;
    while (q->count == 0 && !q->stopping && rc != ETIMEDOUT)
        rc = timeout_s < 0 ? pthread_cond_wait(&q->ready, &q->mu) : pthread_cond_timedwait(&q->ready, &q->mu, &until);
    int n = 0;
    while (n < max && q->count > 0) {
        out[n++] = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    if (n == 0 && q->stopping) n = -1;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void mc_serve_queue_complete(mc_serve_queue *q, mc_serve_seq **seqs, int n, int status, const char *error) {
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < n; i++) {
        mc_serve_request *r = seqs[i]->req;
        if (status != 200 && r->status < 400) { /* the first error of a request is its answer */
            r->status = status;
            snprintf(r->error, sizeof r->error, "%s", error);
        }
        if (--r->pending == 0 && r->status == 0) r->status = 200;
    }
    pthread_cond_broadcast(&q->done);
    pthread_mutex_unlock(&q->mu);
}

void mc_serve_queue_stop(mc_serve_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    pthread_cond_broadcast(&q->ready);
    pthread_mutex_unlock(&q->mu);
}
