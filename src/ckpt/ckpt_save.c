/* ckpt_save.c: writing a checkpoint.
 *
 * Each rank plans its file (the pieces it owns, a safetensors header naming them, their
 * bytes back to back in kind order: weights, then exp_avg, then exp_avg_sq, each in the
 * optimizer state's order, so that the file's data is a few long runs of the state
 * buffers), writes it with a few threads, one block (MC_CKPT_BLOCK_BYTES) at a time:
 * copy the block's bytes out of device memory into a page-locked buffer (or point at host
 * memory), checksum them, pwrite, and start the kernel's writeback at once so that the
 * disk works while the next blocks are copied. Then fsync, and a description of the file
 * (pieces, size, checksums) beside it. World rank 0 merges the descriptions into
 * metadata.json and publishes the directory (ckpt.h says in which order).
 *
 * Async: the plan's runs are first copied into a snapshot (spare device memory when it
 * fits, else host memory) and the file is written from it by a background thread while
 * training goes on; mc_ckpt_saver_poll publishes it once every rank's thread is done. */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/crc32c.h"
#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"

/* ---- the plan ---- */

typedef struct ckpt_piece {
    int kind, param;
    mc_ckpt_box box;
    const float *src;  /* the box's first element in this rank's memory (state, or the joined master) */
    int64_t file_off;  /* absolute byte offset in the file */
} ckpt_piece;

/* file bytes [file_off, file_off + bytes) come from src (device memory when the job says so) */
typedef struct ckpt_extent {
    int64_t file_off, bytes;
    const char *src;
} ckpt_extent;

typedef struct ckpt_plan {
    ckpt_piece *pieces;
    int npieces, cap;
    char *header; /* the file's first data_start bytes: length, JSON, space padding */
    int64_t data_start, file_bytes;
    ckpt_extent *extents;
    int nextents;
} ckpt_plan;

static void plan_free(ckpt_plan *p) {
    free(p->pieces);
    free(p->header);
    free(p->extents);
    memset(p, 0, sizeof *p);
}

static void add_piece(ckpt_plan *p, int kind, int param, const mc_ckpt_box *b, const float *src) {
    if (p->npieces == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->pieces = mc_xrealloc(p->pieces, sizeof *p->pieces * (size_t)p->cap);
    }
    p->pieces[p->npieces++] = (ckpt_piece){.kind = kind, .param = param, .box = *b, .src = src};
}

static void piece_key(const mc_model *m, const ckpt_piece *pc, char *out, size_t cap) {
    const mc_param *p = &m->params[pc->param];
    if (p->ndim == 2)
        snprintf(out, cap, "%s%s/%lld_%lld", mc_ckpt_kind_prefix[pc->kind], p->name, (long long)pc->box.row,
                 (long long)pc->box.col);
    else
        snprintf(out, cap, "%s%s/%lld", mc_ckpt_kind_prefix[pc->kind], p->name, (long long)pc->box.row);
}

static cJSON *dims(const mc_param *p, int64_t a, int64_t b) {
    cJSON *d = cJSON_CreateArray();
    cJSON_AddItemToArray(d, mc_json_number((double)a));
    if (p->ndim == 2) cJSON_AddItemToArray(d, mc_json_number((double)b));
    return d;
}

/* Where segment s's elements of a kind start: the F32 master (mc_optimizer_master_of, joined
 * by the caller) or a moment. */
static const float *segment_src(const mc_optimizer *o, int kind, int s) {
    if (kind == CKPT_WEIGHTS) return mc_optimizer_master_of(o, s);
    return (kind == CKPT_EXP_AVG ? o->exp_avg : o->exp_avg_sq) + o->segments[s].offset;
}

/* The pieces this rank writes: of each optimizer segment (a parameter's part of this rank's
 * state), the part this rank owns among its data-parallel replicas (its distributed-
 * optimizer shard, or its equal share of the bucket) and tensor-parallel replicas. */
static void plan_pieces(const mc_ckpt_state *st, bool optim, ckpt_plan *plan) {
    const mc_model *m = st->model;
    const mc_optimizer *o = st->opt;
    int D = o->dp_size, d = o->dp_rank;
    mc_ckpt_boxes boxes = {0};
    for (int kind = 0; kind < (optim ? CKPT_NKINDS : 1); kind++) {
        for (int s = 0; s < o->nsegments; s++) {
            const mc_adamw_segment *sg = &o->segments[s];
            int pi = mc_ckpt_param_at(m, sg->grad_offset);
            const mc_param *p = &m->params[pi];
            int64_t lo = sg->grad_offset, hi = sg->grad_offset + sg->count;
            if (!o->sharded) { /* every DP rank holds it all: DP rank d writes its share of the bucket */
                for (int b = 0; b < m->nbuckets; b++) {
                    const mc_grad_bucket *bk = &m->buckets[b];
                    if (lo < bk->lo || lo >= bk->hi) continue;
                    int64_t n = bk->hi - bk->lo, a = bk->lo + n * d / D, e = bk->lo + n * (d + 1) / D;
                    lo = lo > a ? lo : a;
                    hi = hi < e ? hi : e;
                }
            }
            int64_t unique = mc_model_unique_prefix(m, p);
            int64_t llo = lo - p->offset, lhi = hi - p->offset;
            if (lhi > unique) lhi = unique;
            if (lhi <= llo) continue;
            boxes.n = 0;
            mc_ckpt_boxes_of(m, p, m->tp_rank, llo, lhi, &boxes);
            for (int k = 0; k < boxes.n; k++)
                add_piece(plan, kind, pi, &boxes.v[k], segment_src(o, kind, s) + (p->offset + boxes.v[k].local - sg->grad_offset));
        }
    }
    mc_ckpt_boxes_free(&boxes);
}

/* The header (aligned so that the data starts on a 4 KiB boundary), every piece's place in
 * the file, and the runs of the state buffers that fill it. */
static void plan_layout(const mc_ckpt_state *st, int64_t iteration, ckpt_plan *plan) {
    const mc_model *m = st->model;
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", MC_CKPT_FORMAT);
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)iteration);
    cJSON_AddStringToObject(meta, "iteration", num);
    snprintf(num, sizeof num, "%d", st->comm->rank);
    cJSON_AddStringToObject(meta, "rank", num);
    int64_t at = 0;
    for (int i = 0; i < plan->npieces; i++) {
        ckpt_piece *pc = &plan->pieces[i];
        const mc_param *p = &m->params[pc->param];
        char key[192];
        piece_key(m, pc, key, sizeof key);
        int64_t bytes = pc->box.rows * pc->box.cols * 4;
        cJSON *t = cJSON_AddObjectToObject(h, key);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON_AddItemToObject(t, "shape", p->ndim == 2 ? dims(p, pc->box.rows, pc->box.cols) : dims(p, pc->box.rows, 0));
        cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(off, mc_json_number((double)at));
        cJSON_AddItemToArray(off, mc_json_number((double)(at + bytes)));
        pc->file_off = at; /* relative for now */
        at += bytes;
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    int64_t n = (int64_t)strlen(json);
    int64_t padded = (8 + n + 4095) / 4096 * 4096 - 8;
    plan->data_start = 8 + padded;
    plan->file_bytes = plan->data_start + at;
    plan->header = mc_xmalloc((size_t)plan->data_start);
    uint64_t len = (uint64_t)padded; /* little-endian u64, as the format says */
    for (int b = 0; b < 8; b++) plan->header[b] = (char)(len >> (8 * b));
    memcpy(plan->header + 8, json, (size_t)n);
    memset(plan->header + 8 + n, ' ', (size_t)(padded - n));
    cJSON_free(json);
    plan->extents = mc_xmalloc(sizeof *plan->extents * (size_t)(plan->npieces ? plan->npieces : 1));
    plan->nextents = 0;
    for (int i = 0; i < plan->npieces; i++) {
        ckpt_piece *pc = &plan->pieces[i];
        pc->file_off += plan->data_start;
        const char *src = (const char *)pc->src;
        int64_t bytes = pc->box.rows * pc->box.cols * 4;
        ckpt_extent *last = plan->nextents ? &plan->extents[plan->nextents - 1] : NULL;
        if (last && last->src + last->bytes == src && last->file_off + last->bytes == pc->file_off)
            last->bytes += bytes;
        else
            plan->extents[plan->nextents++] = (ckpt_extent){.file_off = pc->file_off, .bytes = bytes, .src = src};
    }
}

/* ---- writing one file ---- */

typedef struct write_job {
    const char *path;
    const char *header;
    int64_t data_start, file_bytes, block_bytes;
    const ckpt_extent *extents;
    int nextents;
    bool device; /* the extents' sources are device memory */
    mc_backend *be;
    int nthreads;
    void **staging; /* per thread, block_bytes each */
    int delay_ms;   /* tests: a pause after each block, so that a kill lands mid-save */
    int fd;
    atomic_llong next_block;
    uint32_t *block_crc;
    pthread_mutex_t mu;
    atomic_int rc; /* the first failure wins (err); workers stop at it */
    mc_err err;
} write_job;

static void job_fail(write_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void job_fail(write_job *j, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (atomic_load(&j->rc) == MC_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->err.msg, sizeof j->err.msg, fmt, ap);
        va_end(ap);
        atomic_store(&j->rc, MC_ERR);
    }
    pthread_mutex_unlock(&j->mu);
}

/* The first extent that ends after file offset `at`. */
static int first_extent(const write_job *j, int64_t at) {
    int lo = 0, hi = j->nextents;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (j->extents[mid].file_off + j->extents[mid].bytes <= at) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void write_block(write_job *j, int64_t k, char *staging) {
    int64_t lo = k * j->block_bytes, hi = lo + j->block_bytes < j->file_bytes ? lo + j->block_bytes : j->file_bytes;
    const char *bytes = NULL;
    int e = first_extent(j, lo);
    if (lo >= j->data_start && !j->device && e < j->nextents && j->extents[e].file_off <= lo &&
        j->extents[e].file_off + j->extents[e].bytes >= hi) {
        bytes = j->extents[e].src + (lo - j->extents[e].file_off); /* host memory, one run: no copy */
    } else {
        if (lo < j->data_start) {
            int64_t n = (hi < j->data_start ? hi : j->data_start) - lo;
            memcpy(staging, j->header + lo, (size_t)n);
        }
        for (; e < j->nextents && j->extents[e].file_off < hi; e++) {
            const ckpt_extent *x = &j->extents[e];
            int64_t a = x->file_off > lo ? x->file_off : lo, b = x->file_off + x->bytes < hi ? x->file_off + x->bytes : hi;
            if (j->device) j->be->copy_d2h_side(j->be, staging + (a - lo), x->src + (a - x->file_off), (size_t)(b - a));
            else memcpy(staging + (a - lo), x->src + (a - x->file_off), (size_t)(b - a));
        }
        bytes = staging;
    }
    j->block_crc[k] = mc_crc32c(0, bytes, (size_t)(hi - lo));
    for (int64_t done = 0; done < hi - lo;) {
        ssize_t w = pwrite(j->fd, bytes + done, (size_t)(hi - lo - done), lo + done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            job_fail(j, "%s: write failed at byte %lld: %s", j->path, (long long)(lo + done),
                     w < 0 ? strerror(errno) : "no progress");
            return;
        }
        done += w;
    }
    /* start writing these pages back now rather than at fsync (best effort) */
    (void)sync_file_range(j->fd, lo, hi - lo, SYNC_FILE_RANGE_WRITE);
    if (j->delay_ms > 0) usleep((useconds_t)j->delay_ms * 1000);
}

typedef struct worker_arg {
    write_job *job;
    int index;
} worker_arg;

static void *write_worker(void *arg) {
    worker_arg *w = arg;
    write_job *j = w->job;
    int64_t nblocks = (j->file_bytes + j->block_bytes - 1) / j->block_bytes;
    for (;;) {
        int64_t k = atomic_fetch_add(&j->next_block, 1);
        if (k >= nblocks || atomic_load(&j->rc) != MC_OK) break;
        write_block(j, k, j->staging[w->index]);
    }
    return NULL;
}

/* Writes and fsyncs the file; fills block_crc (caller-allocated) and *crc. */
static int write_file(write_job *j, uint32_t *crc, mc_err *err) {
    atomic_store(&j->rc, MC_OK);
    pthread_mutex_init(&j->mu, NULL);
    atomic_store(&j->next_block, 0);
    j->fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (j->fd < 0) {
        pthread_mutex_destroy(&j->mu);
        return mc_err_set(err, "%s: cannot create: %s", j->path, strerror(errno));
    }
    pthread_t th[64];
    worker_arg args[64];
    int n = j->nthreads < 64 ? j->nthreads : 64, started = 0;
    for (int i = 1; i < n; i++) {
        args[i] = (worker_arg){.job = j, .index = i};
        if (pthread_create(&th[i], NULL, write_worker, &args[i]) != 0) break;
        started = i;
    }
    args[0] = (worker_arg){.job = j, .index = 0};
    write_worker(&args[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    if (atomic_load(&j->rc) == MC_OK && fsync(j->fd) != 0) job_fail(j, "%s: fsync failed: %s", j->path, strerror(errno));
    if (close(j->fd) != 0) job_fail(j, "%s: close failed: %s", j->path, strerror(errno));
    pthread_mutex_destroy(&j->mu);
    if (atomic_load(&j->rc) != MC_OK) {
        *err = j->err;
        return MC_ERR;
    }
    int64_t nblocks = (j->file_bytes + j->block_bytes - 1) / j->block_bytes;
    uint32_t c = 0;
    for (int64_t k = 0; k < nblocks; k++) {
        int64_t len = k + 1 < nblocks ? j->block_bytes : j->file_bytes - k * j->block_bytes;
        c = mc_crc32c_combine(c, j->block_crc[k], (uint64_t)len);
    }
    *crc = c;
    return MC_OK;
}

/* ---- the saver ---- */

struct mc_ckpt_saver {
    mc_ckpt_state st;
    char *dir;
    bool save_optim, save_rng, async;
    int nthreads, delay_ms;
    int64_t block_bytes;
    void **staging;
    /* the async snapshot, kept for the next save */
    void *snap;
    size_t snap_bytes;
    bool snap_device;
    /* the save in flight (async) or being written (blocking) */
    bool pending;
    int64_t iteration;
    uint64_t rng_seed;
    cJSON *common;
    ckpt_plan plan;
    ckpt_extent snap_extent;
    write_job job;
    uint32_t file_crc;
    pthread_t thread;
    atomic_int thread_done;
    int thread_rc;
    mc_err thread_err;
    double t_start, bytes_rank;
    mc_ckpt_save_stats stats;
};

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void tmp_dir_of(const mc_ckpt_saver *s, int64_t iteration, char *out, size_t cap) {
    char it[32];
    mc_ckpt_iter_name(iteration, it);
    snprintf(out, cap, "%s/%s.tmp", s->dir, it);
}

mc_ckpt_saver *mc_ckpt_saver_create(const mc_ckpt_state *st, const mc_ckpt_save_opts *opts, mc_err *err) {
    int rc = MC_OK;
    if (st->comm->rank == 0) rc = mc_mkdirs(opts->dir, err);
    if (mc_ckpt_agree(st->comm, rc, err) != MC_OK) return NULL;
    rc = mc_dir_writable(opts->dir, err) ? MC_OK : MC_ERR;
    if (mc_ckpt_agree(st->comm, rc, err) != MC_OK) return NULL;
    mc_ckpt_saver *s = mc_xcalloc(1, sizeof *s);
    s->st = *st;
    s->dir = mc_xstrdup(opts->dir);
    s->save_optim = opts->save_optim;
    s->save_rng = opts->save_rng;
    s->async = opts->async;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per_rank = (int)(cores / (st->comm->local_size > 0 ? st->comm->local_size : 1));
    s->nthreads = env_int("MC_CKPT_WRITE_THREADS", per_rank < 1 ? 1 : per_rank > 8 ? 8 : per_rank);
    if (s->nthreads < 1) s->nthreads = 1;
    s->block_bytes = env_int("MC_TEST_CKPT_BLOCK_BYTES", 0) >= 64 ? env_int("MC_TEST_CKPT_BLOCK_BYTES", 0)
                                                                 : MC_CKPT_BLOCK_BYTES;
    s->delay_ms = env_int("MC_TEST_CKPT_WRITE_DELAY_MS", 0);
    mc_backend *be = st->model->be;
    s->staging = mc_xcalloc((size_t)s->nthreads, sizeof(void *));
    for (int i = 0; i < s->nthreads; i++) s->staging[i] = be->host_alloc(be, (size_t)s->block_bytes);
    return s;
}

/* The part of metadata.json every rank knows: all but the files and pieces. */
static cJSON *common_json(const mc_ckpt_saver *s, const mc_ckpt_progress *pr) {
    const mc_ckpt_state *st = &s->st;
    const mc_comm *c = st->comm;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", MC_CKPT_FORMAT);
    cJSON_AddItemToObject(o, "version", mc_json_number(MC_CKPT_VERSION));
    cJSON_AddItemToObject(o, "iteration", mc_json_number((double)pr->iteration));
    cJSON_AddItemToObject(o, "model", mc_ckpt_config_json(st->cfg));
    cJSON *lay = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddItemToObject(lay, "world_size", mc_json_number(c->world_size));
    cJSON_AddItemToObject(lay, "tensor_model_parallel_size", mc_json_number(c->sizes.tp));
    cJSON_AddItemToObject(lay, "pipeline_model_parallel_size", mc_json_number(c->sizes.pp));
    cJSON_AddItemToObject(lay, "context_parallel_size", mc_json_number(c->sizes.cp));
    cJSON_AddItemToObject(lay, "expert_model_parallel_size", mc_json_number(c->sizes.ep));
    cJSON_AddItemToObject(lay, "data_parallel_size", mc_json_number(c->sizes.dp));
    cJSON_AddBoolToObject(lay, "sequence_parallel", st->cfg->parallel.sequence_parallel);
    cJSON_AddBoolToObject(lay, "use_distributed_optimizer", st->opt->sharded);
    cJSON_AddItemToObject(lay, "padded_vocab_size", mc_json_number(st->model->padded_vocab));
    cJSON *pg = cJSON_AddObjectToObject(o, "progress");
    cJSON_AddItemToObject(pg, "consumed_train_samples", mc_json_number((double)pr->consumed_train_samples));
    cJSON_AddItemToObject(pg, "consumed_valid_samples", mc_json_number((double)pr->consumed_valid_samples));
    cJSON_AddItemToObject(pg, "num_floating_point_operations_so_far", mc_json_number(pr->floating_point_operations_so_far));
    cJSON_AddItemToObject(pg, "global_batch_size", mc_json_number(st->cfg->train.global_batch_size));
    cJSON_AddItemToObject(pg, "seq_length", mc_json_number(st->cfg->model.seq_length));
    cJSON_AddItemToObject(o, "opt_param_scheduler", mc_ckpt_sched_json(st->sched, pr->sched_samples));
    cJSON *opt = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddBoolToObject(opt, "saved", s->save_optim);
    cJSON_AddStringToObject(opt, "type", "adam");
    cJSON_AddItemToObject(opt, "step", mc_json_number((double)pr->optimizer_step));
    cJSON_AddItemToObject(opt, "adam_beta1", mc_json_number(st->opt->beta1));
    cJSON_AddItemToObject(opt, "adam_beta2", mc_json_number(st->opt->beta2));
    cJSON_AddItemToObject(opt, "adam_eps", mc_json_number(st->opt->eps));
    cJSON *ls = cJSON_AddObjectToObject(o, "grad_scaler");
    cJSON_AddBoolToObject(ls, "dynamic", pr->scaler.dynamic);
    cJSON_AddItemToObject(ls, "scale", mc_json_number(pr->scaler.scale));
    cJSON_AddItemToObject(ls, "growth_tracker", mc_json_number((double)pr->scaler.growth_tracker));
    cJSON_AddItemToObject(ls, "hysteresis_tracker", mc_json_number(pr->scaler.hysteresis_tracker));
    cJSON *rng = cJSON_AddObjectToObject(o, "rng");
    cJSON_AddBoolToObject(rng, "saved", s->save_rng);
    cJSON_AddStringToObject(rng, "generator", "philox4x32-10 streams named by (seed, iteration, micro-batch, rank, site)");
    cJSON_AddItemToObject(rng, "seed", mc_json_number((double)pr->rng_seed));
    return o;
}

/* This rank's description of its file, written beside it for rank 0. */
static int write_rank_desc(mc_ckpt_saver *s, const char *tmp_dir, mc_err *err) {
    const mc_model *m = s->st.model;
    const mc_comm *c = s->st.comm;
    const ckpt_plan *plan = &s->plan;
    cJSON *d = cJSON_CreateObject();
    char name[96], hex[9];
    mc_ckpt_file_name(c->rank, c->world_size, name, sizeof name);
    cJSON_AddStringToObject(d, "name", name);
    cJSON_AddItemToObject(d, "bytes", mc_json_number((double)plan->file_bytes));
    mc_ckpt_crc_hex(s->file_crc, hex);
    cJSON_AddStringToObject(d, "crc32c", hex);
    cJSON_AddItemToObject(d, "block_bytes", mc_json_number((double)s->block_bytes));
    cJSON *blocks = cJSON_AddArrayToObject(d, "block_crc32c");
    int64_t nblocks = (plan->file_bytes + s->block_bytes - 1) / s->block_bytes;
    for (int64_t k = 0; k < nblocks; k++) {
        mc_ckpt_crc_hex(s->job.block_crc[k], hex);
        cJSON_AddItemToArray(blocks, cJSON_CreateString(hex));
    }
    cJSON *rng = cJSON_AddObjectToObject(d, "rng");
    cJSON_AddItemToObject(rng, "rank", mc_json_number(c->rank));
    cJSON_AddItemToObject(rng, "tp_rank", mc_json_number(c->tp_rank));
    cJSON_AddItemToObject(rng, "dp_rank", mc_json_number(c->dp_rank));
    cJSON_AddItemToObject(rng, "seed", mc_json_number((double)s->rng_seed));
    cJSON *tensors = cJSON_AddObjectToObject(d, "tensors");
    cJSON *pieces = cJSON_AddArrayToObject(d, "pieces");
    for (int i = 0; i < plan->npieces; i++) {
        const ckpt_piece *pc = &plan->pieces[i];
        const mc_param *p = &m->params[pc->param];
        char tname[160], key[192];
        snprintf(tname, sizeof tname, "%s%s", mc_ckpt_kind_prefix[pc->kind], p->name);
        piece_key(m, pc, key, sizeof key);
        if (!cJSON_GetObjectItemCaseSensitive(tensors, tname)) {
            cJSON *t = cJSON_AddObjectToObject(tensors, tname);
            cJSON_AddItemToObject(t, "shape", dims(p, p->global_shape[0], p->global_shape[1]));
        }
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateString(tname));
        cJSON_AddItemToArray(e, cJSON_CreateString(key));
        cJSON_AddItemToArray(e, dims(p, pc->box.row, pc->box.col));
        cJSON_AddItemToArray(e, dims(p, pc->box.rows, pc->box.cols));
        cJSON *span = cJSON_CreateArray();
        cJSON_AddItemToArray(span, mc_json_number((double)pc->file_off));
        cJSON_AddItemToArray(span, mc_json_number((double)(pc->file_off + pc->box.rows * pc->box.cols * 4)));
        cJSON_AddItemToArray(e, span);
        cJSON_AddItemToArray(pieces, e);
    }
    char *text = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%05d.json", tmp_dir, c->rank);
    int rc = mc_write_file_atomic(path, text, strlen(text), err);
    cJSON_free(text);
    return rc;
}

/* Writes this rank's file and description (on the training thread, or the async one). */
static int write_rank(mc_ckpt_saver *s, mc_err *err) {
    char tmp[4096], path[4200], name[96];
    tmp_dir_of(s, s->iteration, tmp, sizeof tmp);
    mc_ckpt_file_name(s->st.comm->rank, s->st.comm->world_size, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    s->job.path = path;
    MC_TRY(write_file(&s->job, &s->file_crc, err));
    return write_rank_desc(s, tmp, err);
}

/* World rank 0: metadata.json from the descriptions, then the directory and the tracker. */
static int publish(mc_ckpt_saver *s, mc_err *err) {
    const mc_comm *c = s->st.comm;
    char tmp[4096], final[4096], it[32], path[4200];
    tmp_dir_of(s, s->iteration, tmp, sizeof tmp);
    mc_ckpt_iter_name(s->iteration, it);
    snprintf(final, sizeof final, "%s/%s", s->dir, it);
    cJSON **ranks = mc_xcalloc((size_t)c->world_size, sizeof(cJSON *));
    int rc = MC_OK;
    for (int r = 0; r < c->world_size && rc == MC_OK; r++) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, r);
        char *text;
        size_t n;
        rc = mc_read_file(path, &text, &n, err);
        if (rc != MC_OK) break;
        ranks[r] = cJSON_ParseWithLength(text, n);
        free(text);
        if (!ranks[r]) rc = mc_err_set(err, "%s: not valid JSON", path);
    }
    cJSON *meta = NULL;
    if (rc == MC_OK) {
        meta = mc_ckpt_meta_merge(s->common, ranks, c->world_size, err);
        s->common = NULL; /* merged into meta */
        if (!meta) rc = MC_ERR;
    }
    for (int r = 0; r < c->world_size; r++) cJSON_Delete(ranks[r]);
    free(ranks);
    if (rc == MC_OK) {
        char *text = cJSON_Print(meta);
        snprintf(path, sizeof path, "%s/%s", tmp, MC_CKPT_METADATA);
        rc = mc_write_file_atomic(path, text, strlen(text), err);
        cJSON_free(text);
    }
    cJSON_Delete(meta);
    for (int r = 0; r < c->world_size && rc == MC_OK; r++) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, r);
        unlink(path);
    }
    if (rc == MC_OK) {
        mc_fsync_dir(tmp);
        rc = mc_publish_dir(tmp, final, err);
    }
    if (rc == MC_OK) {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)s->iteration);
        snprintf(path, sizeof path, "%s/%s", s->dir, MC_CKPT_TRACKER);
        rc = mc_write_file_atomic(path, text, strlen(text), err);
    }
    return rc;
}

/* After every rank's file is written: agree, publish on rank 0, agree. */
static int finish_save(mc_ckpt_saver *s, int rc, mc_err *err) {
    mc_comm *c = s->st.comm;
    rc = mc_ckpt_agree(c, rc, err);
    if (rc == MC_OK && c->rank == 0) rc = publish(s, err);
    rc = mc_ckpt_agree(c, rc, err);
    cJSON_Delete(s->common);
    s->common = NULL;
    free(s->job.block_crc);
    s->job.block_crc = NULL;
    plan_free(&s->plan);
    s->pending = false;
    double total = s->bytes_rank;
    mc_comm_all_reduce_host_f64(&c->world, &total, 1, MC_REDUCE_SUM);
    s->stats.bytes = total;
    s->stats.total_s = mc_time_now() - s->t_start;
    if (rc != MC_OK) return mc_err_prefix(err, "saving the checkpoint of iteration %lld: ", (long long)s->iteration);
    return MC_OK;
}

static void *async_main(void *arg) {
    mc_ckpt_saver *s = arg;
    s->thread_rc = write_rank(s, &s->thread_err);
    atomic_store(&s->thread_done, 1);
    return NULL;
}

/* Copies the plan's runs into the snapshot, which then is the file's data region. */
static void take_snapshot(mc_ckpt_saver *s) {
    mc_backend *be = s->st.model->be;
    ckpt_plan *plan = &s->plan;
    size_t need = (size_t)(plan->file_bytes - plan->data_start);
    bool gpu = be->device != MC_DEVICE_CPU;
    if (s->snap && s->snap_bytes < need) {
        if (s->snap_device) be->free(be, s->snap);
        else be->host_free(be, s->snap);
        s->snap = NULL;
    }
    if (!s->snap) {
        /* spare device memory (a device-speed copy) when it fits with room to spare */
        size_t free_b = gpu ? mc_comm_device_free_bytes(be) : 0;
        s->snap_device = gpu && free_b > need + need / 8 + (2ull << 30);
        s->snap = s->snap_device ? be->alloc(be, need) : be->host_alloc(be, need);
        s->snap_bytes = need;
    }
    char *base = s->snap;
    for (int i = 0; i < plan->nextents; i++) {
        const ckpt_extent *x = &plan->extents[i];
        char *dst = base + (x->file_off - plan->data_start);
        if (s->snap_device) be->copy_d2d(be, dst, x->src, (size_t)x->bytes);
        else be->copy_d2h_async(be, dst, x->src, (size_t)x->bytes);
    }
    if (s->snap_device) be->sync(be);
    else be->wait_copies(be);
    s->snap_extent = (ckpt_extent){.file_off = plan->data_start, .bytes = (int64_t)need, .src = base};
}

int mc_ckpt_save(mc_ckpt_saver *s, const mc_ckpt_progress *pr, mc_err *err) {
    MC_TRY(mc_ckpt_saver_wait(s, NULL, err));
    const mc_ckpt_state *st = &s->st;
    mc_backend *be = st->model->be;
    s->t_start = mc_time_now();
    s->iteration = pr->iteration;
    s->rng_seed = pr->rng_seed;

    /* a fresh iter_N.tmp (a killed save may have left one) */
    char tmp[4096];
    tmp_dir_of(s, pr->iteration, tmp, sizeof tmp);
    int rc = MC_OK;
    if (st->comm->rank == 0) {
        rc = mc_remove_tree(tmp, err);
        if (rc == MC_OK && mkdir(tmp, 0755) != 0) rc = mc_err_set(err, "cannot create %s: %s", tmp, strerror(errno));
    }
    if (mc_ckpt_agree(st->comm, rc, err) != MC_OK)
        return mc_err_prefix(err, "saving the checkpoint of iteration %lld: ", (long long)pr->iteration);

    /* A split master is joined into the gradient buffer, free between steps, and given
     * back once the writer has read it (the file written, or the snapshot taken). */
    mc_optimizer_master_join(st->opt);
    be->sync(be); /* the last update and the join have landed */
    plan_pieces(st, s->save_optim, &s->plan);
    plan_layout(st, pr->iteration, &s->plan);
    s->common = common_json(s, pr);
    s->bytes_rank = (double)s->plan.file_bytes;
    write_job *j = &s->job;
    *j = (write_job){
        .header = s->plan.header,
        .data_start = s->plan.data_start,
        .file_bytes = s->plan.file_bytes,
        .block_bytes = s->block_bytes,
        .extents = s->plan.extents,
        .nextents = s->plan.nextents,
        .device = be->device != MC_DEVICE_CPU,
        .be = be,
        .nthreads = s->nthreads,
        .staging = s->staging,
        .delay_ms = s->delay_ms,
    };
    j->block_crc = mc_xcalloc((size_t)((j->file_bytes + j->block_bytes - 1) / j->block_bytes), sizeof(uint32_t));
    s->pending = true;
    if (!s->async) {
        rc = write_rank(s, err);
        mc_optimizer_master_release(st->opt);
        rc = finish_save(s, rc, err);
        s->stats.held_s = mc_time_now() - s->t_start;
        return rc;
    }
    take_snapshot(s);
    mc_optimizer_master_release(st->opt);
    j->extents = &s->snap_extent;
    j->nextents = 1;
    j->device = s->snap_device;
    atomic_store(&s->thread_done, 0);
    MC_ASSERT(pthread_create(&s->thread, NULL, async_main, s) == 0, "cannot start the checkpoint writer thread");
    s->stats.held_s = mc_time_now() - s->t_start;
    return MC_OK;
}

static int finish_async(mc_ckpt_saver *s, int64_t *published, mc_err *err) {
    pthread_join(s->thread, NULL);
    int rc = s->thread_rc;
    if (rc != MC_OK) *err = s->thread_err;
    if (published) *published = s->iteration;
    return finish_save(s, rc, err);
}

int mc_ckpt_saver_poll(mc_ckpt_saver *s, int64_t *published, mc_err *err) {
    *published = -1;
    if (!s->pending) return MC_OK;
    double done = atomic_load(&s->thread_done);
    mc_comm_all_reduce_host_f64(&s->st.comm->world, &done, 1, MC_REDUCE_MIN);
    if (done < 1) return MC_OK;
    return finish_async(s, published, err);
}

int mc_ckpt_saver_wait(mc_ckpt_saver *s, int64_t *published, mc_err *err) {
    if (published) *published = -1;
    if (!s->pending) return MC_OK;
    return finish_async(s, published, err);
}

mc_ckpt_save_stats mc_ckpt_saver_stats(const mc_ckpt_saver *s) { return s->stats; }

void mc_ckpt_saver_free(mc_ckpt_saver *s) {
    if (!s) return;
    if (s->pending) { /* the caller should have waited; do not leave a thread writing */
        pthread_join(s->thread, NULL);
        cJSON_Delete(s->common);
        free(s->job.block_crc);
        plan_free(&s->plan);
    }
    mc_backend *be = s->st.model->be;
    for (int i = 0; i < s->nthreads; i++) be->host_free(be, s->staging[i]);
    free(s->staging);
    if (s->snap) {
        if (s->snap_device) be->free(be, s->snap);
        else be->host_free(be, s->snap);
    }
    free(s->dir);
    free(s);
}
