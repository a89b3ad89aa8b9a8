/* server.c: the routes, the generator's loop and the other ranks' loop (server.h). */
#include "serve/server.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/timer.h"
#include "serve/api.h"
#include "serve/http.h"
#include "serve/queue.h"
#include "serve/wire.h"

#define MC_SERVE_MAX_BODY ((size_t)8 << 20) /* 128 prompts of 64 KiB */
#define MC_SERVE_MAX_CONNECTIONS 128

struct mc_server {
    mc_generator *gen;
    const mc_tokenizer *tok;
    mc_group *world; /* NULL or size 1: one process */
    mc_server_options opt;
    mc_api_limits lim;
    mc_serve_queue *queue;
    mc_http_server *http; /* rank 0's */
    atomic_uint_fast64_t requests;
    uint64_t id_base;
};

static bool leads(const mc_server *s) { return !s->world || s->world->rank == 0; }
static bool alone(const mc_server *s) { return !s->world || s->world->size == 1; }

/* SplitMix64: distinct well-mixed seeds (and ids) from a counter */
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ---- a request, on an HTTP thread ------------------------------------------------------------ */

static void reply_error(mc_http_reply *reply, int status, const char *msg) {
    reply->status = status;
    reply->body = mc_api_error(msg);
}

static void handle(void *ctx, const char *method, const char *path, const char *body, size_t len,
                   mc_http_reply *reply) {
    mc_server *s = ctx;
    const double t0 = mc_time_now();
    mc_api_kind api;
    const char *allowed;
    if (!strcmp(path, "/api")) {
        api = MC_API_MEGATRON;
        allowed = "PUT";
    } else if (!strcmp(path, "/v1/completions")) {
        api = MC_API_COMPLETIONS;
        allowed = "POST";
    } else {
        char msg[160];
        snprintf(msg, sizeof msg, "no such path: %.64s (this server has PUT /api and POST /v1/completions)", path);
        return reply_error(reply, 404, msg);
    }
    if (strcmp(method, allowed)) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s takes %s, not %.16s", path, allowed, method);
        reply->allow = allowed;
        return reply_error(reply, 405, msg);
    }
    const uint64_t number = atomic_fetch_add(&s->requests, 1);
    mc_api_limits lim = s->lim;
    lim.seed = mix(s->opt.seed + number);
    mc_err err;
    mc_serve_request *r = mc_api_parse(api, body, len, s->tok, &lim, &err);
    if (!r) {
        fprintf(stderr, "megatron-c serve: %s %s 400: %s\n", method, path, err.msg);
        return reply_error(reply, 400, err.msg);
    }
    int refused = mc_serve_queue_submit_wait(s->queue, r);
    reply->status = refused ? refused : r->status;
    if (reply->status != 200) {
        reply->body = mc_api_error(r->error);
    } else {
        char id[40];
        snprintf(id, sizeof id, "cmpl-%016llx", (unsigned long long)mix(s->id_base + number));
        reply->body = mc_api_answer(r, s->tok, s->opt.model, id, (int64_t)time(NULL));
    }
    if (!r->no_log || reply->status != 200) {
        int64_t made = 0;
        for (int i = 0; i < r->n; i++) made += r->seqs[i].produced;
        fprintf(stderr, "megatron-c serve: %s %s %d: %d prompt(s), %lld new tokens, %.3f s%s%s\n", method, path,
                reply->status, r->n, (long long)made, mc_time_now() - t0, reply->status != 200 ? ": " : "",
                reply->status != 200 ? r->error : "");
    }
    mc_serve_request_free(r);
}

/* ---- the generator ---------------------------------------------------------------------------- */

/* What the token callback keeps: each sequence's tokens so far, for its stop rules. */
typedef struct watch {
    mc_serve_seq **seqs;
    int32_t **tokens;
    int *count;
    const mc_tokenizer *tok;
    int32_t eod;
} watch;

static bool on_token(void *ctx, int i, int32_t token) {
    watch *w = ctx;
    mc_serve_seq *s = w->seqs[i];
    if (s->params.stop_at_eod && token == w->eod) return false;
    const mc_serve_stops *st = s->stops;
    if (!st->on_eol && !st->on_double_eol && !st->nstrings) return true;
    if (w->count[i] < s->params.max_new_tokens) w->tokens[i][w->count[i]++] = token;
    size_t len, cut;
    char *text = mc_serve_continuation_text(w->tok, s->prompt.data, s->prompt.len, w->tokens[i], w->count[i], &len);
    const bool hit = mc_serve_stops_hit(st, text, len, &cut);
    free(text);
    s->stopped |= hit;
    return !hit;
}

/* One generator call over the sequences (every rank alike). */
static int run_batch(mc_server *s, mc_serve_seq **seqs, int n, mc_err *err) {
    mc_gen_seq *g = mc_xcalloc((size_t)n, sizeof *g);
    watch w = {.seqs = seqs, .tokens = mc_xcalloc((size_t)n, sizeof(int32_t *)), .count = mc_xcalloc((size_t)n, sizeof(int)),
               .tok = s->tok, .eod = s->lim.eod};
    for (int i = 0; i < n; i++) {
        mc_serve_seq *q = seqs[i];
        q->produced = 0;
        q->stopped = false;
        g[i] = (mc_gen_seq){.prompt = q->prompt.data, .prompt_len = (int)q->prompt.len, .params = q->params, .out = q->out};
        w.tokens[i] = mc_xmalloc(sizeof(int32_t) * (size_t)q->params.max_new_tokens);
    }
    int rc = mc_generator_run(s->gen, g, n, on_token, &w, NULL, err);
    for (int i = 0; i < n; i++) {
        seqs[i]->produced = rc == MC_OK ? g[i].produced : 0;
        free(w.tokens[i]);
    }
    free(w.tokens);
    free(w.count);
    free(g);
    return rc;
}

/* Rank 0 to the others: {n, bytes} (n = 0: nothing, the heartbeat; n = -1: the end), then
 * the packed batch. */
static void send_batch(mc_server *s, mc_serve_seq **seqs, int n) {
    size_t bytes = 0;
    void *packed = n > 0 ? mc_serve_wire_pack(seqs, n, &bytes) : NULL;
    int64_t head[2] = {n, (int64_t)bytes};
    mc_comm_broadcast_host(s->world, head, sizeof head, 0);
    if (bytes) mc_comm_broadcast_host(s->world, packed, bytes, 0);
    free(packed);
}

static void follow(mc_server *s) {
    for (;;) {
        int64_t head[2];
        mc_comm_broadcast_host(s->world, head, sizeof head, 0);
        if (head[0] < 0) return;
        if (head[0] == 0) continue;
        void *packed = mc_xmalloc((size_t)head[1]);
        mc_comm_broadcast_host(s->world, packed, (size_t)head[1], 0);
        mc_serve_batch b;
        mc_serve_wire_unpack(packed, (size_t)head[1], &b);
        free(packed);
        mc_serve_seq **seqs = mc_xmalloc(sizeof *seqs * (size_t)b.n);
        for (int i = 0; i < b.n; i++) seqs[i] = &b.seqs[i];
        mc_err err; /* rank 0 reports the errors, which every rank meets alike */
        run_batch(s, seqs, b.n, &err);
        free(seqs);
        mc_serve_batch_free(&b);
    }
}

void mc_server_run(mc_server *s) {
    if (!leads(s)) return follow(s);
    const double beat = alone(s) ? -1.0 : mc_comm_timeout_seconds() / 4;
    mc_serve_seq **batch = mc_xmalloc(sizeof *batch * (size_t)s->opt.max_batch);
    for (;;) {
        const int n = mc_serve_queue_take(s->queue, batch, s->opt.max_batch, beat);
        if (!alone(s)) send_batch(s, batch, n);
        if (n < 0) break;
        if (n == 0) continue;
        mc_err err;
        const int rc = run_batch(s, batch, n, &err);
        if (rc != MC_OK) fprintf(stderr, "megatron-c serve: generation failed: %s\n", err.msg);
        mc_serve_queue_complete(s->queue, batch, n, rc == MC_OK ? 200 : 500, rc == MC_OK ? "" : err.msg);
    }
    free(batch);
}

/* ---- life --------------------------------------------------------------------------------------- */

mc_server *mc_server_create(mc_generator *g, const mc_tokenizer *tok, mc_group *world, const mc_server_options *o,
                            mc_err *err) {
    mc_server *s = mc_xcalloc(1, sizeof *s);
    s->gen = g;
    s->tok = tok;
    s->world = world;
    s->opt = *o;
    s->lim = (mc_api_limits){.max_positions = o->positions,
                             .vocab = mc_generator_config(g)->model.vocab_size,
                             .eod = mc_tokenizer_eod(tok)};
    s->id_base = mix((uint64_t)time(NULL));
    /* room for every connection's largest request */
    s->queue = mc_serve_queue_new(MC_SERVE_MAX_CONNECTIONS * 4 > o->max_batch ? MC_SERVE_MAX_CONNECTIONS * 4 : o->max_batch);
    int listening = 1;
    if (leads(s)) {
        s->http = mc_http_start(o->host, o->port, MC_SERVE_MAX_CONNECTIONS, MC_SERVE_MAX_BODY, handle, s, err);
        listening = s->http != NULL;
    }
    if (!alone(s)) mc_comm_broadcast_host(world, &listening, sizeof listening, 0);
    if (!listening) {
        if (!leads(s)) mc_err_set(err, "rank 0 could not start the HTTP server (its error says why)");
        mc_serve_queue_free(s->queue);
        free(s);
        return NULL;
    }
    if (leads(s)) {
        printf("megatron-c serve: listening on http://%s:%d (PUT /api, POST /v1/completions)\n", o->host,
               mc_http_port(s->http));
        fflush(stdout);
    }
    return s;
}

void mc_server_stop(mc_server *s) {
    if (s->http) mc_http_quiesce(s->http);
    mc_serve_queue_stop(s->queue);
}

void mc_server_free(mc_server *s) {
    if (!s) return;
    mc_http_stop(s->http);
    mc_serve_queue_free(s->queue);
    free(s);
}
