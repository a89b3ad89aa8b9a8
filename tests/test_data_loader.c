/* test_data_loader.c: the prefetching loader hands out exactly what mc_data_get_batch
 * returns, in the trainer's order (MegatronPretrainingSampler: consecutive micro-batches,
 * DP rank slices), for the training stream, an explicit request list and a callback; it
 * ends cleanly, reports bad requests, and can be freed mid-stream. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "data/loader.h"

static mc_data *open_mock(void) {
    mc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.seq_length = 16;
    cfg.model.vocab_size = 500;
    cfg.train.seed = 1234;
    cfg.data.mock_data = true;
    cfg.data.eod_mask_loss = true;
    cfg.data.reset_position_ids = true;
    mc_data *d;
    mc_err err;
    if (mc_data_open(&d, &cfg, 4000, 200, -1, &err) != MC_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return d;
}

static bool same_batch(const mc_batch *a, const mc_batch *b) {
    size_t n = (size_t)a->mbs * (size_t)a->seq;
    return a->mbs == b->mbs && a->seq == b->seq && !memcmp(a->tokens, b->tokens, n * 4) &&
           !memcmp(a->labels, b->labels, n * 4) && !memcmp(a->loss_mask, b->loss_mask, n * 4) &&
           !memcmp(a->position_ids, b->position_ids, n * 4) && !memcmp(a->seg_start, b->seg_start, n * 4) &&
           !memcmp(a->sample_ids, b->sample_ids, (size_t)a->mbs * 8);
}

static void nap(int us) {
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static void test_train_stream(void) {
    mc_data *d = open_mock();
    CHECK(d != NULL);
    if (!d) return;
    const int mbs = 3, dp = 2, rank = 1, M = 2;
    const int64_t gbs = mbs * dp * M, consumed0 = 24, iters = 7;
    mc_loader_train_stream s = {.consumed = consumed0, .mbs = mbs, .dp = dp, .dp_rank = rank,
                                .num_microbatches = M, .global_batch = gbs, .end = consumed0 + iters * gbs};
    mc_loader *l;
    mc_err err;
    CHECK(mc_loader_create_train(&l, d, &s, 3, &err) == MC_OK, "%s", err.msg);
    if (!l) return;
    mc_batch want;
    mc_batch_init(&want, mbs, 16);
    int bad = 0, n = 0;
    for (int64_t it = 0; it < iters; it++)
        for (int m = 0; m < M; m++) {
            mc_loader_request req;
            const mc_batch *b = mc_loader_next(l, &req);
            CHECK(b != NULL, "batch %d missing", n);
            if (!b) continue;
            int64_t first = mc_data_sample_index(consumed0 + it * gbs, m, mbs, dp, rank);
            CHECK(req.split == MC_SPLIT_TRAIN && req.first_index == first && req.mbs == mbs);
            mc_data_get_batch(d, MC_SPLIT_TRAIN, first, mbs, &want);
            bad += !same_batch(b, &want);
            if (n % 3 == 0) nap(200); /* a slow step now and then */
            n++;
        }
    CHECK(bad == 0, "%d batches differ from mc_data_get_batch", bad);
    CHECK(mc_loader_next(l, NULL) == NULL, "the stream ends at `end`");
    CHECK(mc_loader_next(l, NULL) == NULL);
    CHECK(mc_loader_delivered(l) == iters * M && mc_loader_error(l, &err) == MC_OK);
    mc_loader_free(l);

    /* end <= 0: until the split runs out; freeing mid-stream does not hang. */
    s.end = 0;
    s.consumed = 0;
    CHECK(mc_loader_create_train(&l, d, &s, 2, &err) == MC_OK);
    for (int i = 0; i < 5; i++) CHECK(mc_loader_next(l, NULL) != NULL);
    mc_loader_free(l);
    s.dp_rank = 2;
    CHECK(mc_loader_create_train(&l, d, &s, 2, &err) == MC_ERR && strstr(err.msg, "inconsistent"));
    mc_batch_free(&want);
    mc_data_close(d);
}

static bool countdown(void *ctx, int64_t k, mc_loader_request *req) {
    int *left = ctx;
    if (k >= *left) return false;
    *req = (mc_loader_request){.split = MC_SPLIT_VALID, .first_index = 2 * k, .mbs = 2};
    return true;
}

static void test_list_and_callback(void) {
    mc_data *d = open_mock();
    if (!d) return;
    mc_loader_request reqs[4] = {{MC_SPLIT_TRAIN, 0, 4}, {MC_SPLIT_VALID, 10, 1}, {MC_SPLIT_TEST, 5, 2},
                                 {MC_SPLIT_TRAIN, 100, 3}};
    mc_loader *l;
    mc_err err;
    CHECK(mc_loader_create_list(&l, d, 1, reqs, 4, &err) == MC_OK, "%s", err.msg);
    mc_batch want;
    mc_batch_init(&want, 4, 16);
    for (int i = 0; l && i < 4; i++) {
        const mc_batch *b = mc_loader_next(l, NULL);
        CHECK(b != NULL);
        if (!b) continue;
        mc_data_get_batch(d, reqs[i].split, reqs[i].first_index, reqs[i].mbs, &want);
        CHECK(same_batch(b, &want), "request %d", i);
    }
    CHECK(l && mc_loader_next(l, NULL) == NULL);
    mc_loader_free(l);

    int left = 6;
    CHECK(mc_loader_create(&l, d, 4, 2, countdown, &left, &err) == MC_OK);
    int got = 0;
    while (l && mc_loader_next(l, NULL)) got++;
    CHECK(got == 6);
    mc_loader_free(l);

    /* A request outside its split ends the stream with an error. */
    mc_loader_request bad[2] = {{MC_SPLIT_VALID, 0, 2}, {MC_SPLIT_VALID, 1000000000, 2}};
    CHECK(mc_loader_create_list(&l, d, 2, bad, 2, &err) == MC_OK);
    CHECK(mc_loader_next(l, NULL) != NULL);
    CHECK(mc_loader_next(l, NULL) == NULL);
    CHECK(mc_loader_error(l, &err) == MC_ERR && strstr(err.msg, "outside"), "%s", err.msg);
    mc_loader_free(l);
    mc_batch_free(&want);
    mc_data_close(d);
}

int main(void) {
    RUN(test_train_stream);
    RUN(test_list_and_callback);
    return check_summary();
}
