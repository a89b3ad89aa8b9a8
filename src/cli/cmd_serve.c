/* cmd_serve.c: `megatron-c serve`: a trained model behind Megatron's text generation REST
 * API and OpenAI's completions (serve/server.h, serve/api.h).
 *
 *   megatron-c serve (--load DIR | --load-hf DIR) [--port 5000] [--host 127.0.0.1]
 *                    [--max-batch-size 32] [--max-positions N]
 *                    [the tokenizer's flags, --device, --bf16, --seed, --tensor-model-parallel-size ...]
 *
 * The model and tokenizer are generate's (cli_model.h). Under mpirun every rank runs this
 * command; rank 0 listens. It prints one line once it listens (the URL; --port 0 picks a
 * free port). SIGTERM or SIGINT stops it: no new connection, every queued request answered,
 * exit 0 (a signal while the model loads stops it once loaded). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "generate/generator.h"
#include "megatron.h"
#include "serve/http.h"
#include "serve/server.h"

typedef struct serve_flags {
    char *load_hf, *host;
    int port, max_batch;
    int64_t max_positions;
} serve_flags;

#define F(member) offsetof(serve_flags, member)
static const mc_arg_spec k_flags[] = {
    {"--load-hf", MC_ARG_STRING, F(load_hf), "a Hugging Face model directory (instead of --load)"},
    {"--port", MC_ARG_INT, F(port), "the port to listen on (default 5000, Megatron's; 0: a free one)", .min = 0, .max = 65535},
    {"--host", MC_ARG_STRING, F(host), "the IPv4 address to listen on (default 127.0.0.1; 0.0.0.0: every interface)"},
    {"--max-batch-size", MC_ARG_INT, F(max_batch), "the most sequences one generator call continues (default 32)",
     .min = 1, .max = 1 << 20},
    {"--max-positions", MC_ARG_INT64, F(max_positions),
     "the longest prompt + continuation a request may ask for, which sizes the key/value cache (default: the "
     "model's positions)", .min = 2, .max = 1ll << 40},
};
#undef F
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

/* SIGTERM and SIGINT, taken by a thread of their own (blocked everywhere else, the threads
 * of MPI, OpenMP and the HTTP server included, which inherit the mask): the first stops
 * the server, or, while the model loads, the server as soon as it exists. */
static struct {
    pthread_mutex_t mu;
    sigset_t set;
    mc_server *server;
    bool stop;
} g_signals = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *signal_thread(void *arg) {
    (void)arg;
    for (;;) {
        int sig;
        if (sigwait(&g_signals.set, &sig) != 0) return NULL;
        pthread_mutex_lock(&g_signals.mu);
        if (!g_signals.stop && mc_log_rank() == 0)
            fprintf(stderr, "megatron-c serve: %s: answering the queued requests, then stopping\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
        g_signals.stop = true;
        if (g_signals.server) mc_server_stop(g_signals.server);
        pthread_mutex_unlock(&g_signals.mu);
    }
}

static void take_signals(void) {
    sigemptyset(&g_signals.set);
    const int signals[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        /* a signal ignored by whoever started us (SIGINT of a background job) stays ignored */
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaddset(&g_signals.set, signals[i]);
    }
    MC_ASSERT(pthread_sigmask(SIG_BLOCK, &g_signals.set, NULL) == 0);
    signal(SIGPIPE, SIG_IGN); /* a client gone while its answer is written: an error, not the end */
    pthread_t t;
    MC_ASSERT(pthread_create(&t, NULL, signal_thread, NULL) == 0, "cannot start the signal thread");
    pthread_detach(t);
}

static void publish(mc_server *s) {
    pthread_mutex_lock(&g_signals.mu);
    g_signals.server = s;
    if (s && g_signals.stop) mc_server_stop(s);
    pthread_mutex_unlock(&g_signals.mu);
}

/* The answers' model name: the directory's last component. */
static char *model_name(const char *dir) {
    char *name = mc_xstrdup(dir);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = 0;
    const char *slash = strrchr(name, '/');
    char *base = mc_xstrdup(slash && slash[1] ? slash + 1 : name);
    free(name);
    return base;
}

int mc_cmd_serve(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c serve (--load DIR | --load-hf DIR) [flags]\n\n"
                   "Megatron's text generation API (PUT /api) and OpenAI's completions (POST /v1/completions)\n\n");
            mc_args_print_help(k_flags, NFLAGS);
            printf("\nand train's flags for the tokenizer, device, precision, --seed and parallelism (megatron-c train --help)\n");
            return 0;
        }
    if (!mc_http_available())
        mc_die_usage("serve: this build has no HTTP server: install libmicrohttpd (scripts/install-deps.sh: "
                     "libmicrohttpd-dev) and build again");
    mc_cli_argv_split args = mc_cli_split_flags(k_flags, NFLAGS, argc, argv);
    serve_flags f = {.port = 5000, .max_batch = 32};
    mc_err err;
    if (mc_args_parse(k_flags, NFLAGS, &f, args.nown, args.own, NULL, false, &err) != MC_OK)
        mc_die_usage("%s", err.msg);
    if (!f.host) f.host = mc_xstrdup("127.0.0.1");
    mc_config cfg;
    mc_config_init(&cfg);
    if (mc_config_parse_args(&cfg, args.nrest, args.rest, &err) != MC_OK) mc_die_usage("%s", err.msg);
    char *model = model_name(f.load_hf ? f.load_hf : cfg.ckpt.load ? cfg.ckpt.load : "model");
    take_signals(); /* before any thread starts */
    mc_cli_load_model(&cfg, f.load_hf, false, "serve");
    mc_tokenizer *tok = mc_cli_open_tokenizer(&cfg, "serve");
    const int64_t model_positions =
        cfg.model.max_position_embeddings > 0 ? cfg.model.max_position_embeddings : cfg.model.seq_length;
    if (f.max_positions > model_positions)
        mc_die_usage("serve: --max-positions %lld exceeds the model's %lld positions", (long long)f.max_positions,
                     (long long)model_positions);
    const int64_t positions = f.max_positions ? f.max_positions : model_positions;
    mc_generator *gen = mc_generator_create_batched(&cfg, positions, f.max_batch, &err);
    if (!gen) mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    mc_generator_set_eod(gen, mc_tokenizer_eod(tok));
    /* the world, for rank 0's batches (the generator keeps its own groups) */
    mc_comm comm;
    if (mc_comm_init_from_env(&comm, 1, 1, 1, 1, cfg.parallel.distributed_timeout_minutes, &err) != MC_OK)
        mc_comm_exit_error(MC_EXIT_USAGE, "%s", err.msg);
    const mc_server_options o = {.host = f.host,
                                 .port = f.port,
                                 .max_batch = f.max_batch,
                                 .model = model,
                                 .positions = positions,
                                 .seed = cfg.train.seed};
    mc_server *server = mc_server_create(gen, tok, &comm.world, &o, &err);
    if (!server) mc_comm_exit_error(MC_EXIT_USAGE, "serve: %s", err.msg);
    publish(server);
    mc_server_run(server);
    publish(NULL);
    mc_server_free(server);
    mc_generator_free(gen);
    const int rank = comm.rank;
    mc_comm_free(&comm);
    mc_tokenizer_free(tok);
    if (rank == 0) fprintf(stderr, "megatron-c serve: stopped\n");
    free(model);
    free(f.host);
    free(f.load_hf);
    mc_config_free(&cfg);
    mc_cli_argv_split_free(&args);
    return 0;
}
