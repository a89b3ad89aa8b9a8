#include "data/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct mc_loader {
    mc_data *data;
    int depth, max_mbs;
    mc_batch *ring;            /* (depth,) */
    mc_loader_request *ring_req;
    mc_loader_request_fn fn;
    void *ctx;

    pthread_mutex_t mu;
    pthread_cond_t can_fill;   /* a slot was released, or stop */
    pthread_cond_t can_take;   /* a slot was filled, or the stream ended */
    pthread_t thread;
    int64_t produced;          /* slots filled so far (stream position of the producer) */
    int64_t taken;             /* slots handed out */
    bool holding;              /* the consumer still uses slot (taken - 1) % depth */
    bool ended, stop, failed;
    mc_err error;
    int64_t waits;

    /* Owned request sources. */
    mc_loader_request *list;
    int64_t list_n;
    mc_loader_train_stream train;
};

static void *loader_main(void *arg) {
    mc_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        /* The ring is full while every slot is filled or still held by the consumer. */
        while (!l->stop && l->produced - (l->taken - (l->holding ? 1 : 0)) >= l->depth)
            pthread_cond_wait(&l->can_fill, &l->mu);
        if (l->stop) break;
        int64_t k = l->produced;
        pthread_mutex_unlock(&l->mu);

        mc_loader_request req;
        bool more = l->fn(l->ctx, k, &req);
        mc_err err;
        bool bad = false;
        if (more) {
            if (req.split < 0 || req.split >= MC_NUM_SPLITS) {
                bad = true;
                mc_err_set(&err, "loader request %lld: split %d is not train/valid/test", (long long)k, req.split);
            } else if (req.mbs < 1 || req.mbs > l->max_mbs) {
                bad = true;
                mc_err_set(&err, "loader request %lld: %d samples, the buffers hold %d", (long long)k, req.mbs,
                           l->max_mbs);
            } else if (req.first_index < 0 || req.first_index + req.mbs > mc_data_split_len(l->data, req.split)) {
                bad = true;
                mc_err_set(&err, "loader request %lld: samples [%lld, %lld) are outside the %lld samples of split %d",
                           (long long)k, (long long)req.first_index, (long long)(req.first_index + req.mbs),
                           (long long)mc_data_split_len(l->data, req.split), req.split);
            } else {
                int slot = (int)(k % l->depth);
                mc_data_get_batch(l->data, req.split, req.first_index, req.mbs, &l->ring[slot]);
                l->ring_req[slot] = req;
            }
        }

        pthread_mutex_lock(&l->mu);
        if (!more || bad) {
            l->ended = true;
            if (bad) {
                l->failed = true;
                l->error = err;
            }
            pthread_cond_broadcast(&l->can_take);
            break;
        }
        l->produced++;
        pthread_cond_broadcast(&l->can_take);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Allocates the ring for a loader whose request source is set, and starts its thread. */
static int loader_start(mc_loader *l, mc_loader **out, mc_err *err) {
    l->ring = mc_xcalloc((size_t)l->depth, sizeof *l->ring);
    l->ring_req = mc_xcalloc((size_t)l->depth, sizeof *l->ring_req);
    for (int i = 0; i < l->depth; i++) mc_batch_init(&l->ring[i], l->max_mbs, mc_data_seq_length(l->data));
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->can_fill, NULL);
    pthread_cond_init(&l->can_take, NULL);
    if (pthread_create(&l->thread, NULL, loader_main, l) != 0) {
        for (int i = 0; i < l->depth; i++) mc_batch_free(&l->ring[i]);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->can_fill);
        pthread_cond_destroy(&l->can_take);
        free(l->ring);
        free(l->ring_req);
        free(l->list);
        free(l);
        return mc_err_set(err, "loader: cannot start the loader thread");
    }
    *out = l;
    return MC_OK;
}

int mc_loader_create(mc_loader **out, mc_data *data, int depth, int max_mbs, mc_loader_request_fn fn, void *ctx,
                     mc_err *err) {
    *out = NULL;
    if (depth < 1) return mc_err_set(err, "loader: depth must be at least 1, got %d", depth);
    if (max_mbs < 1) return mc_err_set(err, "loader: micro-batch capacity must be at least 1, got %d", max_mbs);
    mc_loader *l = mc_xcalloc(1, sizeof *l);
    l->data = data;
    l->depth = depth;
    l->max_mbs = max_mbs;
    l->fn = fn;
    l->ctx = ctx;
    return loader_start(l, out, err);
}

static bool list_request(void *ctx, int64_t k, mc_loader_request *req) {
    mc_loader *l = ctx;
    if (k >= l->list_n) return false;
    *req = l->list[k];
    return true;
}

int mc_loader_create_list(mc_loader **out, mc_data *data, int depth, const mc_loader_request *reqs, int64_t n,
                          mc_err *err) {
    *out = NULL;
    if (depth < 1) return mc_err_set(err, "loader: depth must be at least 1, got %d", depth);
    int max_mbs = 1;
    for (int64_t i = 0; i < n; i++)
        if (reqs[i].mbs > max_mbs) max_mbs = reqs[i].mbs;
    mc_loader *l = mc_xcalloc(1, sizeof *l);
    l->list = mc_xmalloc((size_t)(n ? n : 1) * sizeof *l->list);
    memcpy(l->list, reqs, (size_t)n * sizeof *l->list);
    l->list_n = n;
    l->data = data;
    l->depth = depth;
    l->max_mbs = max_mbs;
    l->fn = list_request;
    l->ctx = l;
    return loader_start(l, out, err);
}

static bool train_request(void *ctx, int64_t k, mc_loader_request *req) {
    mc_loader *l = ctx;
    const mc_loader_train_stream *s = &l->train;
    int64_t it = k / s->num_microbatches;
    int micro = (int)(k % s->num_microbatches);
    int64_t consumed = s->consumed + it * s->global_batch;
    int64_t end = s->end > 0 ? s->end : mc_data_split_len(l->data, MC_SPLIT_TRAIN);
    if (consumed + s->global_batch > end) return false;
    *req = (mc_loader_request){.split = MC_SPLIT_TRAIN,
                               .first_index = mc_data_sample_index(consumed, micro, s->mbs, s->dp, s->dp_rank),
                               .mbs = s->mbs};
    return true;
}

int mc_loader_create_train(mc_loader **out, mc_data *data, const mc_loader_train_stream *s, int depth,
                           mc_err *err) {
    *out = NULL;
    if (s->mbs < 1 || s->dp < 1 || s->num_microbatches < 1 || s->dp_rank < 0 || s->dp_rank >= s->dp ||
        s->global_batch != (int64_t)s->mbs * s->dp * s->num_microbatches || s->consumed < 0)
        return mc_err_set(err,
                          "loader: inconsistent training stream (mbs %d, dp %d, rank %d, %d micro-batches, global "
                          "batch %lld, consumed %lld)",
                          s->mbs, s->dp, s->dp_rank, s->num_microbatches, (long long)s->global_batch,
                          (long long)s->consumed);
    if (depth < 1) return mc_err_set(err, "loader: depth must be at least 1, got %d", depth);
    mc_loader *l = mc_xcalloc(1, sizeof *l);
    l->train = *s;
    l->data = data;
    l->depth = depth;
    l->max_mbs = s->mbs;
    l->fn = train_request;
    l->ctx = l;
    return loader_start(l, out, err);
}

const mc_batch *mc_loader_next(mc_loader *l, mc_loader_request *req) {
    pthread_mutex_lock(&l->mu);
    if (l->holding) {
        l->holding = false;
        pthread_cond_signal(&l->can_fill);
    }
    if (l->produced == l->taken && !l->ended) {
        l->waits++;
        while (l->produced == l->taken && !l->ended) pthread_cond_wait(&l->can_take, &l->mu);
    }
    const mc_batch *b = NULL;
    if (l->produced > l->taken) {
        int slot = (int)(l->taken % l->depth);
        b = &l->ring[slot];
        if (req) *req = l->ring_req[slot];
        l->taken++;
        l->holding = true;
    }
    pthread_mutex_unlock(&l->mu);
    return b;
}

int64_t mc_loader_delivered(const mc_loader *l) { return l->taken; }
int64_t mc_loader_waits(const mc_loader *l) { return l->waits; }

int mc_loader_error(const mc_loader *l, mc_err *err) {
    if (!l->failed) return MC_OK;
    if (err) *err = l->error;
    return MC_ERR;
}

void mc_loader_free(mc_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->can_fill);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->can_fill);
    pthread_cond_destroy(&l->can_take);
    for (int i = 0; i < l->depth; i++) mc_batch_free(&l->ring[i]);
    free(l->ring);
    free(l->ring_req);
    free(l->list);
    free(l);
}
