#include "data/preprocess.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "base/pyjson.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"

enum {
    BATCH_MAX_LINES = 1024,
    BATCH_MAX_BYTES = 1 << 20,
    MAX_REPORTED_BAD_LINES = 10,
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *mc_preprocess_key_prefix(const char *output_prefix, const char *key) {
    mc_strbuf b = {0};
    mc_strbuf_printf(&b, "%s_%s_document", output_prefix, key);
    return b.s;
}

/* ---- batches ------------------------------------------------------------------------------ */

/* A run of consecutive input lines and, once a worker is done with it, their documents. */
typedef struct batch {
    int64_t seq;          /* position in the stream of batches */
    int64_t first_line;   /* line number (1-based) of line 0 */
    int nlines;
    char *text;           /* the lines, back to back */
    size_t text_len, text_cap;
    size_t line_off[BATCH_MAX_LINES], line_len[BATCH_MAX_LINES];
    int64_t file_pos;     /* input position after the batch (for the ETA) */
    bool done;

    /* Results: for line l and key k, document (l, k) is tokens [tok_end[i-1], tok_end[i])
     * split into sequences seq_lens [seq_end[i-1], seq_end[i]), i = l * nkeys + k. */
    mc_ids tokens;
    int32_t *seq_lens;
    int64_t nseq, seq_cap;
    int64_t *tok_end, *seq_end; /* (BATCH_MAX_LINES * nkeys,) */
    char *bad[BATCH_MAX_LINES];  /* malloc'd reason for a bad line, NULL if fine */
} batch;

typedef struct job job;

/* One pass over one JSONL file into one set of builders. */
struct job {
    const mc_preprocess_options *opt;
    const mc_tokenizer *tok;
    int nkeys;
    const char *const *keys;
    const char *input;          /* the file read */
    const char *what;           /* input name in messages */
    int64_t line_base, line_stride; /* global line = base + (l - 1) * stride */
    const char *output_prefix;
    int workers;
    int dtype;
    int32_t eod;
    FILE *log;
    bool progress;              /* prints progress lines */

    mc_jsonl_reader *reader;
    mc_indexed_builder *builders[MC_PREPROCESS_MAX_KEYS];

    pthread_mutex_t mu;
    pthread_cond_t free_cv, work_cv, done_cv;
    batch *pool;                /* (npool,) */
    int npool;
    batch **free_list;
    int nfree;
    batch **work;               /* FIFO of filled batches */
    int work_head, work_count;
    batch **done;               /* done[seq % npool] */
    bool reader_finished, stop;
    int64_t batches_read;
    bool failed;                /* a thread failed: err holds the first error */
    mc_err err;

    mc_preprocess_stats stats;
    double t0;
    int64_t next_log;
};

static void job_fail(job *j, const mc_err *e) {
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->failed = true;
        j->err = *e;
    }
    j->stop = true;
    pthread_cond_broadcast(&j->free_cv);
    pthread_cond_broadcast(&j->work_cv);
    pthread_cond_broadcast(&j->done_cv);
    pthread_mutex_unlock(&j->mu);
}

static void batch_text_put(batch *b, const char *s, size_t n) {
    if (b->text_len + n > b->text_cap) {
        size_t cap = b->text_cap ? b->text_cap : (1 << 16);
        while (cap < b->text_len + n) cap *= 2;
        b->text = mc_xrealloc(b->text, cap);
        b->text_cap = cap;
    }
    memcpy(b->text + b->text_len, s, n);
    b->text_len += n;
}

static void *reader_main(void *arg) {
    job *j = arg;
    int64_t seq = 0;
    const char *line = NULL;
    size_t len = 0;
    int64_t lineno = 0;
    int more = 1;
    mc_err e;
    while (more > 0) {
        pthread_mutex_lock(&j->mu);
        while (!j->stop && j->nfree == 0) pthread_cond_wait(&j->free_cv, &j->mu);
        if (j->stop) {
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
        batch *b = j->free_list[--j->nfree];
        pthread_mutex_unlock(&j->mu);

        b->seq = seq++;
        b->nlines = 0;
        b->text_len = 0;
        b->done = false;
        while (b->nlines < BATCH_MAX_LINES && b->text_len < BATCH_MAX_BYTES) {
            more = mc_jsonl_next(j->reader, &line, &len, &lineno, &e);
            if (more < 0) {
                job_fail(j, &e);
                return NULL;
            }
            if (more == 0) break;
            if (b->nlines == 0) b->first_line = lineno;
            b->line_off[b->nlines] = b->text_len;
            b->line_len[b->nlines] = len;
            batch_text_put(b, line, len);
            b->nlines++;
        }
        b->file_pos = mc_jsonl_position(j->reader);
        pthread_mutex_lock(&j->mu);
        if (b->nlines > 0) {
            j->work[(j->work_head + j->work_count) % j->npool] = b;
            j->work_count++;
            j->batches_read++;
            pthread_cond_signal(&j->work_cv);
        } else {
            j->free_list[j->nfree++] = b;
            seq--;
        }
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_lock(&j->mu);
    j->reader_finished = true;
    pthread_cond_broadcast(&j->work_cv);
    pthread_cond_broadcast(&j->done_cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void push_seq_len(batch *b, int32_t n) {
    if (b->nseq == b->seq_cap) {
        b->seq_cap = b->seq_cap ? 2 * b->seq_cap : 4096;
        b->seq_lens = mc_xrealloc(b->seq_lens, (size_t)b->seq_cap * sizeof *b->seq_lens);
    }
    b->seq_lens[b->nseq++] = n;
}

static char *line_error(const job *j, const char *fmt, const char *a, const char *b) {
    mc_strbuf s = {0};
    mc_strbuf_printf(&s, fmt, a, b);
    (void)j;
    return s.s;
}

/* Encoder.encode for every line of the batch. */
static void process_batch(job *j, batch *b, mc_tokenizer_scratch *ts, mc_jsonl_scratch *js) {
    const int nk = j->nkeys;
    mc_jv vals[MC_PREPROCESS_MAX_KEYS];
    b->tokens.len = 0;
    b->nseq = 0;
    mc_err e;
    for (int l = 0; l < b->nlines; l++) {
        b->bad[l] = NULL;
        int64_t tok0 = b->tokens.len, seq0 = b->nseq;
        const char *line = b->text + b->line_off[l];
        if (mc_jsonl_parse(line, b->line_len[l], nk, j->keys, js, vals, &e) != MC_OK) {
            b->bad[l] = mc_xstrdup(e.msg);
        } else {
            for (int k = 0; k < nk && !b->bad[l]; k++) {
                const mc_jv *v = &vals[k];
                if (v->kind == MC_JV_MISSING) {
                    b->bad[l] = line_error(j, "missing key '%s'%s", j->keys[k], "");
                    break;
                }
                if (v->kind == MC_JV_OTHER) {
                    b->bad[l] = line_error(j, "the value of '%s' is a %s, not a string or a list of strings",
                                           j->keys[k], v->other_type);
                    break;
                }
                int64_t doc_start = b->tokens.len;
                for (int64_t p = 0; p < v->nparts; p++) {
                    size_t n;
                    const char *text = mc_jv_part(js, v, p, &n);
                    int64_t before = b->tokens.len;
                    if (mc_tokenizer_encode(j->tok, ts, text, n, &b->tokens, &e) != MC_OK) {
                        mc_strbuf s = {0};
                        mc_strbuf_printf(&s, "key '%s': %s", j->keys[k], e.msg);
                        b->bad[l] = s.s;
                        break;
                    }
                    int64_t got = b->tokens.len - before;
                    if (got > INT32_MAX) {
                        b->bad[l] = line_error(j, "key '%s': a text of more than 2^31 tokens%s", j->keys[k], "");
                        break;
                    }
                    if (got > 0) push_seq_len(b, (int32_t)got); /* empty sentences are dropped */
                }
                if (b->bad[l]) break;
                if (j->opt->append_eod && b->tokens.len > doc_start) {
                    mc_ids_push(&b->tokens, j->eod);
                    b->seq_lens[b->nseq - 1]++;
                }
                b->tok_end[l * nk + k] = b->tokens.len;
                b->seq_end[l * nk + k] = b->nseq;
            }
        }
        if (b->bad[l]) {
            /* A bad line contributes nothing to any key. */
            b->tokens.len = tok0;
            b->nseq = seq0;
            for (int k = 0; k < nk; k++) {
                b->tok_end[l * nk + k] = tok0;
                b->seq_end[l * nk + k] = seq0;
            }
        }
    }
}

static void *worker_main(void *arg) {
    job *j = arg;
    mc_tokenizer_scratch *ts = mc_tokenizer_scratch_new(j->tok);
    mc_jsonl_scratch js = {0};
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stop && j->work_count == 0 && !j->reader_finished) pthread_cond_wait(&j->work_cv, &j->mu);
        if (j->stop || (j->work_count == 0 && j->reader_finished)) break;
        batch *b = j->work[j->work_head];
        j->work_head = (j->work_head + 1) % j->npool;
        j->work_count--;
        pthread_mutex_unlock(&j->mu);
        process_batch(j, b, ts, &js);
        pthread_mutex_lock(&j->mu);
        b->done = true;
        j->done[b->seq % j->npool] = b;
        pthread_cond_broadcast(&j->done_cv);
    }
    pthread_mutex_unlock(&j->mu);
    mc_jsonl_scratch_free(&js);
    mc_tokenizer_scratch_free(ts);
    return NULL;
}

static void format_eta(double s, char *out, size_t n) {
    if (s < 0 || s > 1e8) {
        snprintf(out, n, "?");
        return;
    }
    long t = (long)(s + 0.5) % 100000000L;
    snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

static void progress_line(job *j, int64_t file_pos) {
    double el = now_seconds() - j->t0;
    if (el <= 0) el = 1e-9;
    const mc_preprocess_stats *s = &j->stats;
    char eta[64] = "";
    int64_t size = mc_jsonl_size(j->reader);
    if (size > 0 && file_pos > 0) {
        char t[48];
        format_eta(el * (double)(size - file_pos) / (double)file_pos, t, sizeof t);
        snprintf(eta, sizeof eta, ", ETA %s", t);
    }
    fprintf(j->log, "Processed %lld documents (%.1f docs/s, %.2f MB/s, %.0f tokens/s%s).\n", (long long)s->documents,
            (double)s->documents / el, (double)s->input_bytes / el / 1024 / 1024, (double)s->tokens / el, eta);
    fflush(j->log);
}

/* Appends a finished batch to the builders, in order. */
static int write_batch(job *j, batch *b, mc_err *err) {
    const int nk = j->nkeys;
    for (int l = 0; l < b->nlines; l++) {
        j->stats.input_bytes += (int64_t)b->line_len[l] + 1;
        if (b->bad[l]) {
            int64_t line = j->line_base + (b->first_line + l - 1) * j->line_stride;
            if (!j->opt->skip_bad_lines) {
                mc_err_set(err, "%s:%lld: %s (pass --skip-bad-lines to skip such lines)", j->what, (long long)line,
                           b->bad[l]);
                return MC_ERR;
            }
            if (j->stats.bad_lines < MAX_REPORTED_BAD_LINES)
                fprintf(j->log, "skipping %s:%lld: %s\n", j->what, (long long)line, b->bad[l]);
            else if (j->stats.bad_lines == MAX_REPORTED_BAD_LINES)
                fprintf(j->log, "skipping more bad lines (counted, not shown)\n");
            j->stats.bad_lines++;
            continue;
        }
        for (int k = 0; k < nk; k++) {
            int i = l * nk + k;
            int64_t t0 = i == 0 ? 0 : b->tok_end[i - 1], t1 = b->tok_end[i];
            int64_t s0 = i == 0 ? 0 : b->seq_end[i - 1], s1 = b->seq_end[i];
            MC_TRY(mc_indexed_builder_add_document(j->builders[k], b->tokens.data + t0, t1 - t0, b->seq_lens + s0,
                                                   s1 - s0, err));
            j->stats.tokens += t1 - t0;
        }
        j->stats.documents++;
        if (j->progress && j->opt->log_interval > 0 && j->stats.documents >= j->next_log) {
            progress_line(j, b->file_pos);
            j->next_log += j->opt->log_interval;
        }
    }
    return MC_OK;
}

/* Runs one job to the end; the builders are finalized (published) only on success. */
static int job_run(job *j, mc_err *err) {
    int rc = MC_ERR;
    pthread_t reader, *workers = mc_xcalloc((size_t)j->workers, sizeof *workers);
    int nworkers = 0;
    bool reader_started = false;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->free_cv, NULL);
    pthread_cond_init(&j->work_cv, NULL);
    pthread_cond_init(&j->done_cv, NULL);
    j->npool = 2 * j->workers + 2;
    j->pool = mc_xcalloc((size_t)j->npool, sizeof *j->pool);
    j->free_list = mc_xcalloc((size_t)j->npool, sizeof *j->free_list);
    j->work = mc_xcalloc((size_t)j->npool, sizeof *j->work);
    j->done = mc_xcalloc((size_t)j->npool, sizeof *j->done);
    for (int i = 0; i < j->npool; i++) {
        j->pool[i].tok_end = mc_xmalloc((size_t)BATCH_MAX_LINES * (size_t)j->nkeys * sizeof(int64_t));
        j->pool[i].seq_end = mc_xmalloc((size_t)BATCH_MAX_LINES * (size_t)j->nkeys * sizeof(int64_t));
        j->free_list[j->nfree++] = &j->pool[i];
    }
    if (mc_jsonl_open(&j->reader, j->input, err) != MC_OK) goto done;
    for (int k = 0; k < j->nkeys; k++) {
        char *prefix = mc_preprocess_key_prefix(j->output_prefix, j->keys[k]);
        int r = mc_indexed_builder_open(&j->builders[k], prefix, j->dtype, err);
        free(prefix);
        if (r != MC_OK) goto done;
    }
    j->t0 = now_seconds();
    j->next_log = j->opt->log_interval > 0 ? j->opt->log_interval : INT64_MAX;
    if (pthread_create(&reader, NULL, reader_main, j) != 0) {
        mc_err_set(err, "cannot start the reader thread");
        goto done;
    }
    reader_started = true;
    for (; nworkers < j->workers; nworkers++)
        if (pthread_create(&workers[nworkers], NULL, worker_main, j) != 0) {
            mc_err e;
            mc_err_set(&e, "cannot start worker thread %d", nworkers);
            job_fail(j, &e);
            break;
        }

    /* The writer: batches in input order. */
    for (int64_t next = 0;; next++) {
        pthread_mutex_lock(&j->mu);
        batch *b;
        while (!j->stop && !((b = j->done[next % j->npool]) && b->done && b->seq == next) &&
               !(j->reader_finished && next >= j->batches_read))
            pthread_cond_wait(&j->done_cv, &j->mu);
        bool finished = j->stop || (j->reader_finished && next >= j->batches_read);
        pthread_mutex_unlock(&j->mu);
        if (finished) break;
        mc_err e;
        int w = write_batch(j, b, &e);
        for (int l = 0; l < b->nlines; l++) {
            free(b->bad[l]);
            b->bad[l] = NULL;
        }
        if (w != MC_OK) {
            job_fail(j, &e);
            break;
        }
        pthread_mutex_lock(&j->mu);
        j->done[next % j->npool] = NULL;
        b->done = false;
        j->free_list[j->nfree++] = b;
        pthread_cond_signal(&j->free_cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_lock(&j->mu);
    j->stop = true; /* releases anything still waiting */
    pthread_cond_broadcast(&j->free_cv);
    pthread_cond_broadcast(&j->work_cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(reader, NULL);
    reader_started = false;
    for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
    nworkers = 0;
    if (j->failed) {
        *err = j->err;
        goto done;
    }
    j->stats.seconds = now_seconds() - j->t0;
    rc = MC_OK;
done:
    if (reader_started) {
        job_fail(j, &(mc_err){"stopped"});
        pthread_join(reader, NULL);
    }
    for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
    for (int k = 0; k < j->nkeys; k++) {
        if (!j->builders[k]) continue;
        if (rc == MC_OK) {
            if (mc_indexed_builder_finalize(j->builders[k], err) != MC_OK) rc = MC_ERR;
        } else {
            mc_indexed_builder_abort(j->builders[k]);
        }
        j->builders[k] = NULL;
    }
    mc_jsonl_close(j->reader);
    j->reader = NULL;
    for (int i = 0; i < j->npool; i++) {
        free(j->pool[i].text);
        free(j->pool[i].seq_lens);
        free(j->pool[i].tok_end);
        free(j->pool[i].seq_end);
        mc_ids_free(&j->pool[i].tokens);
        for (int l = 0; l < BATCH_MAX_LINES; l++) free(j->pool[i].bad[l]);
    }
    free(j->pool);
    free(j->free_list);
    free(j->work);
    free(j->done);
    free(workers);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->free_cv);
    pthread_cond_destroy(&j->work_cv);
    pthread_cond_destroy(&j->done_cv);
    return rc;
}

static void *job_thread(void *arg) {
    job *j = arg;
    mc_err e;
    if (job_run(j, &e) != MC_OK) {
        j->failed = true;
        j->err = e;
    }
    return NULL;
}

/* ---- partitions --------------------------------------------------------------------- */

static void remove_dataset(const char *prefix) {
    char *p = mc_indexed_path(prefix, ".bin");
    unlink(p);
    free(p);
    p = mc_indexed_path(prefix, ".idx");
    unlink(p);
    free(p);
}

/* Lists the .bin and .idx of a partition dataset for removal on SIGTERM/SIGINT. */
static void register_dataset(const char *prefix, int handles[2]) {
    for (int e = 0; e < 2; e++) {
        char *p = mc_indexed_path(prefix, e ? ".idx" : ".bin");
        handles[e] = mc_cleanup_register(p);
        free(p);
    }
}

/* Splits the input files into P partition files as preprocess_data.py does. */
static int write_partitions(const mc_preprocess_options *opt, char **files, size_t nfiles, char **part_paths, int P,
                            int64_t *part_lines, mc_err *err) {
    int64_t total = 0, partition_size = 0;
    const char *line;
    size_t len;
    int64_t lineno;
    if (opt->keep_sequential_samples) {
        for (size_t f = 0; f < nfiles; f++) {
            mc_jsonl_reader *r;
            MC_TRY(mc_jsonl_open(&r, files[f], err));
            int more;
            while ((more = mc_jsonl_next(r, &line, &len, &lineno, err)) > 0) total++;
            mc_jsonl_close(r);
            if (more < 0) return MC_ERR;
        }
        partition_size = (total + P - 1) / P; /* math.ceil(total / partitions) */
    }
    mc_atomic_file *out = mc_xcalloc((size_t)P, sizeof *out);
    int rc = MC_ERR;
    int opened = 0;
    for (; opened < P; opened++)
        if (mc_atomic_file_open(&out[opened], part_paths[opened], err) != MC_OK) goto done;
    int index = 0;
    int64_t count = 0;
    for (size_t f = 0; f < nfiles; f++) {
        mc_jsonl_reader *r;
        if (mc_jsonl_open(&r, files[f], err) != MC_OK) goto done;
        int more;
        while ((more = mc_jsonl_next(r, &line, &len, &lineno, err)) > 0) {
            int target = index < P ? index : P - 1;
            if (mc_atomic_file_write(&out[target], line, len, err) != MC_OK ||
                mc_atomic_file_write(&out[target], "\n", 1, err) != MC_OK) {
                mc_jsonl_close(r);
                goto done;
            }
            part_lines[target]++;
            if (opt->keep_sequential_samples) {
                if (++count % partition_size == 0) index++;
            } else {
                index = (index + 1) % P;
            }
        }
        mc_jsonl_close(r);
        if (more < 0) goto done;
    }
    for (int i = 0; i < P; i++)
        if (mc_atomic_file_commit(&out[i], err) != MC_OK) goto done;
    rc = MC_OK;
done:
    for (int i = 0; i < opened; i++) mc_atomic_file_abort(&out[i]);
    free(out);
    return rc;
}

/* ---- entry point ------------------------------------------------------------------------ */

int mc_preprocess_run(const mc_preprocess_options *opt, mc_preprocess_stats *stats, mc_err *err) {
    if (stats) memset(stats, 0, sizeof *stats);
    FILE *log = opt->log ? opt->log : stderr;
    static const char *const default_keys[1] = {"text"};
    const char *const *keys = opt->njson_keys > 0 ? opt->json_keys : default_keys;
    int nkeys = opt->njson_keys > 0 ? opt->njson_keys : 1;
    if (!opt->input || !*opt->input) return mc_err_set(err, "--input is required");
    if (!opt->output_prefix || !*opt->output_prefix) return mc_err_set(err, "--output-prefix is required");
    if (opt->workers < 1) return mc_err_set(err, "--workers must be at least 1, got %d", opt->workers);
    if (opt->partitions < 1) return mc_err_set(err, "--partitions must be at least 1, got %d", opt->partitions);
    if (opt->workers % opt->partitions != 0)
        return mc_err_set(err, "--workers %d must be divisible by --partitions %d (each partition gets workers / "
                               "partitions threads)",
                          opt->workers, opt->partitions);
    if (nkeys > MC_PREPROCESS_MAX_KEYS) return mc_err_set(err, "--json-keys: at most %d keys", MC_PREPROCESS_MAX_KEYS);
    for (int k = 0; k < nkeys; k++) {
        if (!*keys[k]) return mc_err_set(err, "--json-keys: empty key");
        for (int k2 = 0; k2 < k; k2++)
            if (!strcmp(keys[k], keys[k2])) return mc_err_set(err, "--json-keys: '%s' is given twice", keys[k]);
    }
    /* The output directory must exist (Megatron fails on it with a Python traceback). */
    char *outdir = mc_path_dirname(opt->output_prefix);
    struct stat st;
    if (stat(outdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        mc_err_set(err, "--output-prefix %s: the directory %s does not exist", opt->output_prefix, outdir);
        free(outdir);
        return MC_ERR;
    }
    if (access(outdir, W_OK) != 0) {
        mc_err_set(err, "--output-prefix %s: the directory %s is not writable", opt->output_prefix, outdir);
        free(outdir);
        return MC_ERR;
    }
    free(outdir);

    /* Inputs: a file, or with partitions a glob pattern (sorted, unlike Python's glob). */
    char **files = NULL;
    size_t nfiles = 0;
    glob_t g = {0};
    bool globbed = false;
    if (opt->partitions > 1) {
        int gr = glob(opt->input, 0, NULL, &g);
        globbed = true;
        if (gr != 0 || g.gl_pathc == 0) {
            globfree(&g);
            return mc_err_set(err, "--input %s: no file matches", opt->input);
        }
        files = g.gl_pathv;
        nfiles = g.gl_pathc;
    } else {
        if (stat(opt->input, &st) != 0) return mc_err_set(err, "--input %s: %s", opt->input, strerror(errno));
        if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
            return mc_err_set(err, "--input %s: not a file", opt->input);
        files = (char **)&opt->input;
        nfiles = 1;
    }

    mc_tokenizer *tok;
    if (mc_tokenizer_open(&tok, &opt->tokenizer, err) != MC_OK) {
        if (globbed) globfree(&g);
        return MC_ERR;
    }
    int32_t eod = mc_tokenizer_eod(tok);
    int rc = MC_ERR;
    int P = opt->partitions;
    job *jobs = mc_xcalloc((size_t)P, sizeof *jobs);
    char **part_inputs = NULL, **part_outputs = NULL;
    int64_t *part_lines = NULL;
    int *part_cleanup = NULL; /* per partition: its input, then .bin and .idx of each key */
    bool partitions_written = false;
    if (opt->append_eod && eod < 0) {
        mc_err_set(err, "--append-eod: the %s has no end-of-document token", mc_tokenizer_name(tok));
        goto done;
    }
    int dtype = mc_idx_optimal_dtype(mc_tokenizer_vocab_size(tok));
    double t0 = now_seconds();
    fprintf(log, "Opening %s (%s, vocabulary %d: %s tokens, %d worker%s%s)\n", opt->input, mc_tokenizer_name(tok),
            mc_tokenizer_vocab_size(tok), mc_idx_dtype_name(dtype), opt->workers, opt->workers == 1 ? "" : "s",
            P > 1 ? ", partitioned" : "");

    for (int i = 0; i < P; i++) {
        job *j = &jobs[i];
        j->opt = opt;
        j->tok = tok;
        j->nkeys = nkeys;
        j->keys = keys;
        j->workers = opt->workers / P;
        j->dtype = dtype;
        j->eod = eod;
        j->log = log;
        j->line_base = 1;
        j->line_stride = 1;
    }
    if (P == 1) {
        jobs[0].input = opt->input;
        jobs[0].what = opt->input;
        jobs[0].output_prefix = opt->output_prefix;
        jobs[0].progress = true;
        if (job_run(&jobs[0], err) != MC_OK) goto done;
    } else {
        part_inputs = mc_xcalloc((size_t)P, sizeof *part_inputs);
        part_outputs = mc_xcalloc((size_t)P, sizeof *part_outputs);
        part_lines = mc_xcalloc((size_t)P, sizeof *part_lines);
        part_cleanup = mc_xmalloc((size_t)P * (size_t)(1 + 2 * nkeys) * sizeof *part_cleanup);
        for (int i = 0; i < P; i++) {
            mc_strbuf b = {0};
            mc_strbuf_printf(&b, "%s.partition-%d.jsonl.tmp%ld", opt->output_prefix, i, (long)getpid());
            part_inputs[i] = b.s;
            mc_strbuf o = {0};
            mc_strbuf_printf(&o, "%s_%d", opt->output_prefix, i);
            part_outputs[i] = o.s;
            int *handles = part_cleanup + (size_t)i * (size_t)(1 + 2 * nkeys);
            handles[0] = mc_cleanup_register(part_inputs[i]);
            for (int k = 0; k < nkeys; k++) {
                char *part = mc_preprocess_key_prefix(part_outputs[i], keys[k]);
                register_dataset(part, handles + 1 + 2 * k);
                free(part);
            }
        }
        partitions_written = true;
        if (write_partitions(opt, files, nfiles, part_inputs, P, part_lines, err) != MC_OK) goto done;
        int64_t start = 0;
        for (int i = 0; i < P; i++) {
            job *j = &jobs[i];
            j->input = part_inputs[i];
            j->what = nfiles == 1 ? files[0] : "(the concatenated inputs)";
            j->output_prefix = part_outputs[i];
            j->progress = i == 0;
            if (opt->keep_sequential_samples) {
                j->line_base = start + 1;
                j->line_stride = 1;
            } else {
                j->line_base = i + 1;
                j->line_stride = P;
            }
            start += part_lines[i];
        }
        pthread_t *threads = mc_xcalloc((size_t)P, sizeof *threads);
        int started = 0;
        for (; started < P; started++)
            if (pthread_create(&threads[started], NULL, job_thread, &jobs[started]) != 0) break;
        for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
        free(threads);
        if (started < P) {
            mc_err_set(err, "cannot start the partition threads");
            goto done;
        }
        for (int i = 0; i < P; i++)
            if (jobs[i].failed) {
                *err = jobs[i].err;
                goto done;
            }
        /* Merge partition i of every key, in order, with add_index. */
        for (int k = 0; k < nkeys; k++) {
            char *final = mc_preprocess_key_prefix(opt->output_prefix, keys[k]);
            mc_indexed_builder *b;
            int r = mc_indexed_builder_open(&b, final, dtype, err);
            free(final);
            if (r != MC_OK) goto done;
            for (int i = 0; i < P && r == MC_OK; i++) {
                char *part = mc_preprocess_key_prefix(part_outputs[i], keys[k]);
                r = mc_indexed_builder_add_index(b, part, err);
                free(part);
            }
            if (r != MC_OK) {
                mc_indexed_builder_abort(b);
                goto done;
            }
            if (mc_indexed_builder_finalize(b, err) != MC_OK) goto done;
        }
    }
    mc_preprocess_stats total = {0};
    for (int i = 0; i < P; i++) {
        total.documents += jobs[i].stats.documents;
        total.bad_lines += jobs[i].stats.bad_lines;
        total.tokens += jobs[i].stats.tokens;
        total.input_bytes += jobs[i].stats.input_bytes;
    }
    total.seconds = now_seconds() - t0;
    double el = total.seconds > 0 ? total.seconds : 1e-9;
    fprintf(log, "Done: %lld documents%s, %lld tokens, %.2f MB in %.2f s (%.2f MB/s, %.0f tokens/s)", (long long)total.documents,
            "", (long long)total.tokens, (double)total.input_bytes / 1024 / 1024, total.seconds,
            (double)total.input_bytes / el / 1024 / 1024, (double)total.tokens / el);
    if (total.bad_lines) fprintf(log, "; %lld bad lines skipped", (long long)total.bad_lines);
    fprintf(log, "\n");
    for (int k = 0; k < nkeys; k++) {
        char *p = mc_preprocess_key_prefix(opt->output_prefix, keys[k]);
        fprintf(log, "Wrote %s.bin and %s.idx\n", p, p);
        free(p);
    }
    fflush(log);
    if (stats) *stats = total;
    rc = MC_OK;
done:
    if (partitions_written) {
        for (int i = 0; i < P; i++) {
            unlink(part_inputs[i]);
            for (int k = 0; k < nkeys; k++) {
                char *part = mc_preprocess_key_prefix(part_outputs[i], keys[k]);
                remove_dataset(part);
                free(part);
            }
            for (int h = 0; h < 1 + 2 * nkeys; h++)
                mc_cleanup_unregister(part_cleanup[(size_t)i * (size_t)(1 + 2 * nkeys) + h]);
        }
    }
    free(part_cleanup);
    for (int i = 0; part_inputs && i < P; i++) {
        free(part_inputs[i]);
        free(part_outputs[i]);
    }
    free(part_inputs);
    free(part_outputs);
    free(part_lines);
    free(jobs);
    mc_tokenizer_free(tok);
    if (globbed) globfree(&g);
    return rc;
}

/* ---- merge ---------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every PREFIX of a PREFIX.bin/.idx pair in dir, sorted (merge_datasets.py). */
static int list_dir_prefixes(const char *dir, char ***out, int *n, mc_err *err) {
    DIR *d = opendir(dir);
    if (!d) return mc_err_set(err, "--input %s: cannot list the directory: %s", dir, strerror(errno));
    char **names = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || (strcmp(e->d_name + len - 4, ".bin") && strcmp(e->d_name + len - 4, ".idx"))) continue;
        char *stem = mc_xmalloc(len - 3);
        memcpy(stem, e->d_name, len - 4);
        stem[len - 4] = 0;
        bool seen = false;
        for (int i = 0; i < count && !seen; i++) seen = !strcmp(names[i], stem);
        if (seen) {
            free(stem);
            continue;
        }
        if (count == cap) names = mc_xrealloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
        names[count++] = stem;
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, cmp_str);
    for (int i = 0; i < count; i++) {
        mc_strbuf b = {0};
        mc_strbuf_printf(&b, "%s/%s", dir, names[i]);
        free(names[i]);
        names[i] = b.s;
        struct stat st;
        char *bin = mc_indexed_path(names[i], ".bin"), *idx = mc_indexed_path(names[i], ".idx");
        bool ok = stat(bin, &st) == 0 && stat(idx, &st) == 0;
        if (!ok) mc_err_set(err, "--input %s: %s has no %s", dir, names[i], stat(bin, &st) == 0 ? ".idx" : ".bin");
        free(bin);
        free(idx);
        if (!ok) {
            for (int k = 0; k < count; k++) free(names[k]);
            free(names);
            return MC_ERR;
        }
    }
    *out = names;
    *n = count;
    return MC_OK;
}

int mc_merge_datasets(const char *const *inputs, int n, const char *output_prefix, FILE *log, mc_err *err) {
    if (!log) log = stderr;
    char **prefixes = NULL;
    int count = 0;
    int rc = MC_ERR;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(inputs[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            char **found = NULL;
            int nf = 0;
            if (list_dir_prefixes(inputs[i], &found, &nf, err) != MC_OK) goto done;
            prefixes = mc_xrealloc(prefixes, (size_t)(count + nf + 1) * sizeof *prefixes);
            for (int k = 0; k < nf; k++) prefixes[count++] = found[k];
            free(found);
        } else {
            prefixes = mc_xrealloc(prefixes, (size_t)(count + 1) * sizeof *prefixes);
            prefixes[count++] = mc_xstrdup(inputs[i]);
        }
    }
    if (count == 0) {
        mc_err_set(err, "merge-datasets: no input dataset");
        goto done;
    }
    mc_indexed_dataset *first;
    if (mc_indexed_dataset_open(&first, prefixes[0], err) != MC_OK) goto done;
    int dtype = first->dtype;
    mc_indexed_dataset_close(first);
    mc_indexed_builder *b;
    if (mc_indexed_builder_open(&b, output_prefix, dtype, err) != MC_OK) goto done;
    for (int i = 0; i < count; i++) {
        if (mc_indexed_builder_add_index(b, prefixes[i], err) != MC_OK) {
            mc_indexed_builder_abort(b);
            goto done;
        }
        fprintf(log, "added %s\n", prefixes[i]);
    }
    int64_t nseq = mc_indexed_builder_num_sequences(b), ndoc = mc_indexed_builder_num_documents(b);
    if (mc_indexed_builder_finalize(b, err) != MC_OK) goto done;
    fprintf(log, "Wrote %s.bin and %s.idx: %d datasets, %lld sequences, %lld documents, %s tokens\n", output_prefix,
            output_prefix, count, (long long)nseq, (long long)ndoc, mc_idx_dtype_name(dtype));
    rc = MC_OK;
done:
    for (int i = 0; i < count; i++) free(prefixes[i]);
    free(prefixes);
    return rc;
}
