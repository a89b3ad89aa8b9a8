/* ckpt_util.h: what the checkpoint tests share: running `megatron-c train` (alone or under
 * mpirun) on a tiny model, reading back its metrics.jsonl, and comparing runs bit for bit.
 * Every value in metrics.jsonl is printed with 17 significant digits, so equal text is
 * equal bits. */
#ifndef MC_TESTS_CKPT_UTIL_H
#define MC_TESTS_CKPT_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "io/safetensors.h"

static char ck_bin[512], ck_tmp[256];

/* The tiny Llama (GQA, SwiGLU, RoPE, untied head) and the flags every run shares. The
 * padded vocabulary (256) is the same for TP 1..4, so every layout trains the same model. */
static const char *ck_llama =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
    "--ffn-hidden-size 96 --swiglu --normalization RMSNorm --position-embedding-type rope "
    "--untie-embeddings-and-output-weights --disable-bias-linear --seq-length 32 --max-position-embeddings 32 "
    "--micro-batch-size 2 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 "
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 256 --make-vocab-size-divisible-by 64 "
    "--log-interval 1 --eval-iters 0 --device cpu --peak-tflops 1";

/* Sets up the binary and a temporary directory; skips the test when either is missing. */
static inline void ck_init(const char *tag, bool need_mpi) {
    const char *build = getenv("MC_BUILD_DIR");
    snprintf(ck_bin, sizeof ck_bin, "%s/megatron-c", build ? build : "build");
    if (access(ck_bin, X_OK) != 0) check_skip("megatron-c not built (set MC_BUILD_DIR)");
    if (need_mpi && system("command -v mpirun > /dev/null 2>&1") != 0) check_skip("mpirun not installed");
    snprintf(ck_tmp, sizeof ck_tmp, "/tmp/mc_%s_XXXXXX", tag);
    if (!mkdtemp(ck_tmp)) check_skip("no temporary directory");
}

static inline void ck_cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck_tmp);
    if (check_failures_ == 0 && system(cmd) != 0) printf("note: could not remove %s\n", ck_tmp);
}

/* Runs `megatron-c train ARGS` on np ranks (1: without mpirun), output into LOG (under the
 * temporary directory); `env` is prefixed to the command (and passed on by mpirun with
 * -x for each NAME=... in it). Returns the exit code (-1 when it died of a signal). */
static inline int ck_train(int np, const char *env, const char *args, const char *log) {
    char cmd[16384], xs[512] = "";
    if (env && np > 1) { /* -x NAME for each NAME=value */
        const char *p = env;
        while (*p) {
            while (*p == ' ') p++;
            const char *eq = strchr(p, '=');
            if (!eq) break;
            snprintf(xs + strlen(xs), sizeof xs - strlen(xs), " -x %.*s", (int)(eq - p), p);
            p = strchr(eq, ' ');
            if (!p) break;
        }
    }
    if (np == 1)
        snprintf(cmd, sizeof cmd, "cd %s && %s OMP_NUM_THREADS=1 %s train %s > %s 2>&1", ck_tmp, env ? env : "", ck_bin,
                 args, log);
    else
        snprintf(cmd, sizeof cmd,
                 "cd %s && %s OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS%s "
                 "%s train %s > %s 2>&1",
                 ck_tmp, env ? env : "", np, xs, ck_bin, args, log);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* One metrics.jsonl line's numbers (NaN where absent). */
typedef struct ck_line {
    long iteration;
    char text[2048]; /* the training numbers of the line, for bitwise comparison */
    double loss, norm;
} ck_line;

typedef struct ck_metrics {
    ck_line *v;
    int n;
} ck_metrics;

/* The training lines of DIR/metrics.jsonl (validation lines are skipped). */
static inline ck_metrics ck_read_metrics(const char *dir) {
    ck_metrics m = {0};
    char path[600];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", ck_tmp, dir);
    FILE *f = fopen(path, "r");
    if (!f) return m;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        if (o && !cJSON_GetObjectItem(o, "split")) {
            m.v = realloc(m.v, sizeof *m.v * (size_t)(m.n + 1));
            ck_line *l = &m.v[m.n++];
            memset(l, 0, sizeof *l);
            l->iteration = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "iteration"));
            cJSON *loss = cJSON_GetObjectItem(o, "lm_loss"), *norm = cJSON_GetObjectItem(o, "grad_norm");
            l->loss = loss ? loss->valuedouble : NAN;
            l->norm = norm ? norm->valuedouble : NAN;
            /* every field that must not depend on a resume (times and throughput may) */
            const char *keys[] = {"iteration",  "consumed_samples",   "lm_loss",         "learning_rate",
                                  "grad_norm",  "loss_scale",         "skipped_iterations", "nan_iterations",
                                  "params_norm"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                cJSON *v = cJSON_GetObjectItem(o, keys[k]);
                if (!v) continue;
                char *s = cJSON_PrintUnformatted(v);
                snprintf(l->text + strlen(l->text), sizeof l->text - strlen(l->text), "%s=%s ", keys[k], s);
                free(s);
            }
        }
        cJSON_Delete(o);
    }
    fclose(f);
    return m;
}

/* The iteration lines of `b` equal those of `a` with the same iteration numbers, bit for
 * bit; b must hold iterations [from, to]. */
static inline void ck_check_same_lines(const char *what, const ck_metrics *a, const ck_metrics *b, long from, long to) {
    int compared = 0;
    for (long it = from; it <= to; it++) {
        const ck_line *x = NULL, *y = NULL;
        for (int i = 0; i < a->n; i++)
            if (a->v[i].iteration == it) x = &a->v[i];
        for (int i = 0; i < b->n; i++)
            if (b->v[i].iteration == it) y = &b->v[i];
        CHECK(x && y, "%s: iteration %ld is missing from a run", what, it);
        if (!x || !y) continue;
        CHECK(!strcmp(x->text, y->text), "%s: iteration %ld differs:\n    %s\n    %s", what, it, x->text, y->text);
        compared++;
    }
    CHECK(compared == to - from + 1, "%s: compared %d lines", what, compared);
}

/* Two safetensors files (--export-params) hold the same tensors, bit for bit. */
static inline void ck_check_same_params(const char *what, const char *a, const char *b) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s", ck_tmp, a);
    snprintf(pb, sizeof pb, "%s/%s", ck_tmp, b);
    mc_safetensors *x = NULL, *y = NULL;
    mc_err err;
    CHECK(mc_safetensors_open(pa, &x, &err) == MC_OK, "%s: %s", what, err.msg);
    CHECK(mc_safetensors_open(pb, &y, &err) == MC_OK, "%s: %s", what, err.msg);
    if (x && y) {
        CHECK(mc_safetensors_count(x) == mc_safetensors_count(y), "%s: tensor counts differ", what);
        for (int i = 0; i < mc_safetensors_count(x); i++) {
            const mc_st_tensor *t = mc_safetensors_at(x, i), *u = mc_safetensors_find(y, t->name);
            CHECK(u && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes), "%s: parameter %s differs",
                  what, t->name);
        }
    }
    if (x) mc_safetensors_close(x);
    if (y) mc_safetensors_close(y);
}

static inline void ck_free_metrics(ck_metrics *m) {
    free(m->v);
    m->v = NULL;
    m->n = 0;
}

/* The contents of a file under the temporary directory (NULL when absent). */
static inline char *ck_read(const char *rel) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", ck_tmp, rel);
    return check_read_file(path, NULL);
}

#endif
