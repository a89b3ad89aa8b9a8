/* ckpt_load.c: finding the newest valid checkpoint and loading it into any layout.
 *
 * Every rank reads metadata.json, computes the boxes of the global tensors its own shards
 * cover (ckpt_layout.c, under its own layout) and copies their intersections with the
 * stored pieces out of the mapped files, verifying each checksum block before it reads
 * from it. The destination is walked in windows of a page-locked staging buffer: the
 * window's copies run on OpenMP threads while the previous window travels to the device.
 * A damaged checkpoint (a checksum that fails on any rank) is skipped after all ranks
 * agree; the state is then re-initialized and the next older one tried. */
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "tensor/ops.h"

/* ---- finding checkpoints ---- */

int64_t *mc_ckpt_list_iterations(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int64_t *v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (strncmp(s, "iter_", 5) || strlen(s) < 12) continue;
        bool digits = true;
        for (const char *c = s + 5; *c; c++) digits = digits && *c >= '0' && *c <= '9';
        if (!digits) continue;
        if (*n == cap) v = mc_xrealloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
        v[(*n)++] = strtoll(s + 5, NULL, 10);
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* newest first */
        for (int j = i; j > 0 && v[j] > v[j - 1]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v;
}

int mc_ckpt_read_tracker(const char *dir, int64_t *iteration, mc_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MC_CKPT_TRACKER);
    if (access(path, F_OK) != 0) return 0;
    char *text;
    size_t n;
    if (mc_read_file(path, &text, &n, err) != MC_OK) return MC_ERR;
    char *s = text, *end;
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    if (!strncmp(s, "release", 7)) {
        free(text);
        return mc_err_set(err, "%s says 'release': that is a converted Megatron-LM checkpoint, which megatron-c does not "
                               "read (Megatron-C checkpoints are its own format)", path);
    }
    errno = 0;
    long long v = strtoll(s, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    bool ok = end != s && !*end && errno == 0 && v >= 0;
    free(text);
    if (!ok) return mc_err_set(err, "%s does not hold an iteration number", path);
    *iteration = v;
    return 1;
}

/* ---- mapped files and their checksums ---- */

enum { BLOCK_UNCHECKED = 0, BLOCK_OK, BLOCK_BAD };

typedef struct file_map {
    const unsigned char *base;
    size_t len;
    _Atomic unsigned char *blocks;
} file_map;

typedef struct loader {
    const mc_ckpt_state *st;
    mc_ckpt_meta meta;
    file_map *maps;
    pthread_mutex_t mu;
    atomic_int failed;
    mc_err err;
} loader;

static void loader_fail(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void loader_fail(loader *ld, const char *fmt, ...) {
    pthread_mutex_lock(&ld->mu);
    if (!atomic_load(&ld->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err.msg, sizeof ld->err.msg, fmt, ap);
        va_end(ap);
        atomic_store(&ld->failed, 1);
    }
    pthread_mutex_unlock(&ld->mu);
}

static int map_file(loader *ld, int f) {
    file_map *fm = &ld->maps[f];
    if (fm->base) return MC_OK;
    const mc_ckpt_file_meta *meta = &ld->meta.files[f];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ld->meta.dir, meta->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        loader_fail(ld, "%s: cannot open: %s", path, strerror(errno));
        return MC_ERR;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (int64_t)st.st_size != meta->bytes) {
        close(fd);
        loader_fail(ld, "%s has %lld bytes, its record says %lld (truncated)", path, (long long)st.st_size,
                    (long long)meta->bytes);
        return MC_ERR;
    }
    void *p = mmap(NULL, (size_t)meta->bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        loader_fail(ld, "%s: cannot map: %s", path, strerror(errno));
        return MC_ERR;
    }
    fm->base = p;
    fm->len = (size_t)meta->bytes;
    fm->blocks = mc_xcalloc((size_t)meta->nblocks, sizeof *fm->blocks);
    return MC_OK;
}

/* Verifies the checksum blocks covering bytes [lo, hi) of file f (each block once). */
static bool verify_range(loader *ld, int f, int64_t lo, int64_t hi) {
    const mc_ckpt_file_meta *meta = &ld->meta.files[f];
    file_map *fm = &ld->maps[f];
    for (int64_t k = lo / meta->block_bytes; k * meta->block_bytes < hi; k++) {
        unsigned char s = atomic_load(&fm->blocks[k]);
        if (s == BLOCK_UNCHECKED) {
            int64_t a = k * meta->block_bytes, b = a + meta->block_bytes < meta->bytes ? a + meta->block_bytes : meta->bytes;
            s = mc_crc32c(0, fm->base + a, (size_t)(b - a)) == meta->block_crc[k] ? BLOCK_OK : BLOCK_BAD;
            atomic_store(&fm->blocks[k], s);
        }
        if (s == BLOCK_BAD) {
            int64_t a = k * meta->block_bytes;
            loader_fail(ld, "%s/%s: checksum mismatch in bytes [%lld, %lld) (the file is damaged)", ld->meta.dir, meta->name,
                        (long long)a,
                        (long long)(a + meta->block_bytes < meta->bytes ? a + meta->block_bytes : meta->bytes));
            return false;
        }
    }
    return true;
}

static void loader_close(loader *ld) {
    if (ld->maps)
        for (int f = 0; f < ld->meta.nfiles; f++) {
            if (ld->maps[f].base) munmap((void *)ld->maps[f].base, ld->maps[f].len);
            free(ld->maps[f].blocks);
        }
    free(ld->maps);
    ld->maps = NULL;
    mc_ckpt_meta_free(&ld->meta);
    pthread_mutex_destroy(&ld->mu);
}

/* ---- copying boxes ---- */

/* Copy the intersection of destination box T (its first element at dst, row stride
 * T.cols) with stored piece P. */
typedef struct copy_task {
    mc_ckpt_box box;
    float *dst;
    const mc_ckpt_piece_meta *piece;
} copy_task;

typedef struct task_list {
    copy_task *v;
    int n, cap;
} task_list;

static void run_task(loader *ld, const copy_task *t) {
    const mc_ckpt_piece_meta *P = t->piece;
    const mc_ckpt_box *T = &t->box;
    int64_t r0 = T->row > P->row ? T->row : P->row, r1 = T->row + T->rows < P->row + P->rows ? T->row + T->rows : P->row + P->rows;
    int64_t c0 = T->col > P->col ? T->col : P->col, c1 = T->col + T->cols < P->col + P->cols ? T->col + T->cols : P->col + P->cols;
    if (r1 <= r0 || c1 <= c0) return;
    int64_t first = P->begin + ((r0 - P->row) * P->cols + (c0 - P->col)) * 4;
    int64_t last = P->begin + ((r1 - 1 - P->row) * P->cols + (c1 - P->col)) * 4;
    if (!verify_range(ld, P->file, first, last)) return;
    const unsigned char *base = ld->maps[P->file].base;
    if (c1 - c0 == P->cols && P->cols == T->cols) { /* whole rows on both sides: one run */
        memcpy(t->dst + (r0 - T->row) * T->cols, base + first, (size_t)((r1 - r0) * P->cols * 4));
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        memcpy(t->dst + (r - T->row) * T->cols + (c0 - T->col), base + P->begin + ((r - P->row) * P->cols + (c0 - P->col)) * 4,
               (size_t)((c1 - c0) * 4));
}

/* Tasks for the stored pieces of `tensor` that meet box b (destination dst). */
static void add_tasks(loader *ld, task_list *tl, const mc_ckpt_tensor_meta *tm, const mc_ckpt_box *b, float *dst) {
    for (int k = 0; k < tm->npieces; k++) {
        const mc_ckpt_piece_meta *P = &tm->pieces[k];
        if (P->row >= b->row + b->rows || b->row >= P->row + P->rows || P->col >= b->col + b->cols ||
            b->col >= P->col + P->cols)
            continue;
        if (map_file(ld, P->file) != MC_OK) return;
        if (tl->n == tl->cap) tl->v = mc_xrealloc(tl->v, sizeof *tl->v * (size_t)(tl->cap = tl->cap ? 2 * tl->cap : 256));
        tl->v[tl->n++] = (copy_task){.box = *b, .dst = dst, .piece = P};
    }
}

static void run_tasks(loader *ld, const task_list *tl) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < tl->n; i++)
        if (!atomic_load(&ld->failed)) run_task(ld, &tl->v[i]);
}

static void zero_parallel(float *p, int64_t n) {
    const int64_t chunk = 1 << 20;
#pragma omp parallel for schedule(static)
    for (int64_t a = 0; a < n; a += chunk) memset(p + a, 0, (size_t)((n - a < chunk ? n - a : chunk) * 4));
}

/* The stored tensor for parameter p's kind, checked against p's global shape: equal, but
 * for the vocabulary rows, whose padding may differ between layouts. */
static const mc_ckpt_tensor_meta *stored_tensor(loader *ld, const mc_param *p, int kind) {
    const mc_model *m = ld->st->model;
    char name[192];
    snprintf(name, sizeof name, "%s%s", mc_ckpt_kind_prefix[kind], p->name);
    const mc_ckpt_tensor_meta *tm = mc_ckpt_meta_find(&ld->meta, name);
    if (!tm) {
        loader_fail(ld, "%s/%s has no tensor %s", ld->meta.dir, MC_CKPT_METADATA, name);
        return NULL;
    }
    bool vocab = p == &m->params[m->emb_w] || p == &m->params[m->out_w];
    int64_t rows = p->global_shape[0], cols = p->ndim == 2 ? p->global_shape[1] : 1;
    if (tm->ndim != p->ndim || tm->shape[1] != cols ||
        (vocab ? tm->shape[0] < m->cfg.vocab_size : tm->shape[0] != rows)) {
        loader_fail(ld, "tensor %s: the checkpoint's shape [%lld, %lld] does not fit this model's [%lld, %lld]", name,
                    (long long)tm->shape[0], (long long)tm->shape[1], (long long)rows, (long long)cols);
        return NULL;
    }
    return tm;
}

/* ---- loading the tensors ---- */

typedef struct window_io {
    mc_backend *be;
    int64_t elems;     /* per window */
    float *staging[2]; /* host (page-locked) */
    float *temp[2];    /* device F32, for weights that need a conversion or a second copy */
    uint16_t *lo_temp; /* device, a window's low halves when the master is split */
} window_io;

/* Weights: into the model's parameters (converted to their dtype) and, where the optimizer
 * keeps its own fp32 master, into that; a split master's halves into the BF16 parameters
 * (every element, so that all data-parallel replicas round alike) and the optimizer's low
 * halves (its own segments). */
static void load_weights(loader *ld, window_io *io, mc_ckpt_boxes *boxes, task_list *tl) {
    const mc_model *m = ld->st->model;
    const mc_optimizer *o = ld->st->opt;
    mc_backend *be = io->be;
    const bool master = o && o->owns_master;                  /* the optimizer keeps its own fp32 copy */
    const bool direct = m->param_dtype == MC_F32 && !master; /* the parameters are the master */
    int next_param = 0;
    for (int64_t lo = 0, w = 0; lo < m->numel && !atomic_load(&ld->failed); lo += io->elems, w++) {
        int64_t hi = lo + io->elems < m->numel ? lo + io->elems : m->numel;
        float *buf = io->staging[w & 1];
        zero_parallel(buf, hi - lo);
        tl->n = 0;
        while (next_param < m->nparams && m->params[next_param].offset + m->params[next_param].numel <= lo) next_param++;
        for (int i = next_param; i < m->nparams && m->params[i].offset < hi; i++) {
            const mc_param *p = &m->params[i];
            const mc_ckpt_tensor_meta *tm = stored_tensor(ld, p, CKPT_WEIGHTS);
            if (!tm) return;
            int64_t a = lo > p->offset ? lo - p->offset : 0, b = hi - p->offset < p->numel ? hi - p->offset : p->numel;
            if (tm->shape[0] < p->global_shape[0]) { /* padding rows the checkpoint lacks keep their init */
                const char *at = (const char *)m->param_buf + (size_t)(p->offset + a) * mc_dtype_size(m->param_dtype);
                be->sync(be); /* the windows before are done with the temporaries */
                if (m->param_dtype != MC_F32) {
                    mc_tensor src = mc_tensor_1d((void *)at, m->param_dtype, b - a);
                    mc_tensor tmp = mc_tensor_1d(io->temp[0], MC_F32, b - a);
                    mc_op_convert(be, &tmp, &src);
                    at = (const char *)io->temp[0];
                }
                be->copy_d2h(be, buf + (p->offset + a - lo), at, (size_t)(b - a) * 4);
            }
            boxes->n = 0;
            mc_ckpt_boxes_of(m, p, m->tp_rank, a, b, boxes);
            for (int k = 0; k < boxes->n; k++)
                add_tasks(ld, tl, tm, &boxes->v[k], buf + (p->offset + boxes->v[k].local - lo));
        }
        run_tasks(ld, tl);
        if (atomic_load(&ld->failed)) return;
        be->wait_copies(be); /* the window before has left its staging buffer */
        size_t bytes = (size_t)(hi - lo) * 4;
        if (direct) {
            be->copy_h2d_async(be, (float *)m->param_buf + lo, buf, bytes);
            continue;
        }
        float *tmp = io->temp[w & 1];
        be->copy_h2d_async(be, tmp, buf, bytes);
        mc_tensor src = mc_tensor_1d(tmp, MC_F32, hi - lo);
        mc_tensor dst = mc_tensor_1d((char *)m->param_buf + (size_t)lo * mc_dtype_size(m->param_dtype), m->param_dtype, hi - lo);
        const bool split = o && o->split_master;
        if (split) {
            mc_tensor lo_half = mc_tensor_1d(io->lo_temp, MC_U16, hi - lo);
            mc_adamw_segment whole = {.offset = 0, .count = hi - lo, .grad_offset = 0};
            mc_op_master_split(be, &dst, &lo_half, &src, &whole, 1);
        } else if (m->param_dtype == MC_F32) {
            be->copy_d2d(be, dst.data, tmp, bytes);
        } else {
            mc_op_convert(be, &dst, &src);
        }
        for (int s = 0; (master || split) && s < o->nsegments; s++) { /* the master's part of this window */
            const mc_adamw_segment *sg = &o->segments[s];
            int64_t a = sg->grad_offset > lo ? sg->grad_offset : lo;
            int64_t b = sg->grad_offset + sg->count < hi ? sg->grad_offset + sg->count : hi;
            if (b <= a) continue;
            if (o->split_master)
                be->copy_d2d(be, o->param_lo + sg->offset + (a - sg->grad_offset), io->lo_temp + (a - lo), (size_t)(b - a) * 2);
            else
                be->copy_d2d(be, o->master + sg->offset + (a - sg->grad_offset), tmp + (a - lo), (size_t)(b - a) * 4);
        }
    }
    be->sync(be);
}

/* Adam's moments: into the optimizer's state, in its own (shard) order. */
static void load_moments(loader *ld, window_io *io, int kind, float *dst_buf, mc_ckpt_boxes *boxes, task_list *tl) {
    const mc_model *m = ld->st->model;
    const mc_optimizer *o = ld->st->opt;
    mc_backend *be = io->be;
    int next_seg = 0;
    for (int64_t lo = 0, w = 0; lo < o->state_numel && !atomic_load(&ld->failed); lo += io->elems, w++) {
        int64_t hi = lo + io->elems < o->state_numel ? lo + io->elems : o->state_numel;
        float *buf = io->staging[w & 1];
        zero_parallel(buf, hi - lo);
        tl->n = 0;
        while (next_seg < o->nsegments && o->segments[next_seg].offset + o->segments[next_seg].count <= lo) next_seg++;
        for (int s = next_seg; s < o->nsegments && o->segments[s].offset < hi; s++) {
            const mc_adamw_segment *sg = &o->segments[s];
            const mc_param *p = &m->params[mc_ckpt_param_at(m, sg->grad_offset)];
            const mc_ckpt_tensor_meta *tm = stored_tensor(ld, p, kind);
            if (!tm) return;
            /* the segment's state elements inside the window, as local elements of p */
            int64_t a = sg->offset > lo ? sg->offset : lo;
            int64_t b = sg->offset + sg->count < hi ? sg->offset + sg->count : hi;
            int64_t local0 = sg->grad_offset - p->offset - sg->offset; /* local = state + local0 */
            boxes->n = 0;
            mc_ckpt_boxes_of(m, p, m->tp_rank, a + local0, b + local0, boxes);
            for (int k = 0; k < boxes->n; k++)
                add_tasks(ld, tl, tm, &boxes->v[k], buf + (boxes->v[k].local - local0 - lo));
        }
        run_tasks(ld, tl);
        if (atomic_load(&ld->failed)) return;
        be->wait_copies(be);
        be->copy_h2d_async(be, dst_buf + lo, buf, (size_t)(hi - lo) * 4);
    }
    be->sync(be);
}

static int load_tensors(loader *ld, bool optim, mc_err *err) {
    mc_backend *be = ld->st->model->be;
    window_io io = {.be = be, .elems = 32ll << 20};
    const char *env = getenv("MC_TEST_CKPT_WINDOW_ELEMS"); /* tests: many small windows */
    if (env && atoll(env) > 0) io.elems = atoll(env);
    for (int i = 0; i < 2; i++) {
        io.staging[i] = be->host_alloc(be, (size_t)io.elems * 4);
        io.temp[i] = be->alloc(be, (size_t)io.elems * 4);
    }
    if (ld->st->opt && ld->st->opt->split_master) io.lo_temp = be->alloc(be, (size_t)io.elems * 2);
    mc_ckpt_boxes boxes = {0};
    task_list tl = {0};
    load_weights(ld, &io, &boxes, &tl);
    if (optim && !atomic_load(&ld->failed)) {
        load_moments(ld, &io, CKPT_EXP_AVG, ld->st->opt->exp_avg, &boxes, &tl);
        if (!atomic_load(&ld->failed)) load_moments(ld, &io, CKPT_EXP_AVG_SQ, ld->st->opt->exp_avg_sq, &boxes, &tl);
    }
    be->sync(be);
    for (int i = 0; i < 2; i++) {
        be->host_free(be, io.staging[i]);
        be->free(be, io.temp[i]);
    }
    if (io.lo_temp) be->free(be, io.lo_temp);
    mc_ckpt_boxes_free(&boxes);
    free(tl.v);
    if (atomic_load(&ld->failed)) {
        *err = ld->err;
        return MC_ERR;
    }
    return MC_OK;
}

/* A fresh start for the next candidate after a damaged one: the parameters' initial values
 * (the rows a checkpoint lacks keep them), the master copied from them, zero moments. */
static void reset_state(const mc_ckpt_state *st) {
    mc_model *m = st->model;
    mc_optimizer *o = st->opt;
    mc_backend *be = m->be;
    mc_model_init_params(m, st->cfg->train.seed);
    if (!o) {
        be->sync(be);
        return;
    }
    mc_optimizer_reset_master(o);
    be->zero(be, o->exp_avg, (size_t)o->state_numel * 4);
    be->zero(be, o->exp_avg_sq, (size_t)o->state_numel * 4);
    be->sync(be);
}

/* ---- progress ---- */

static double num(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static void read_progress(const mc_ckpt_meta *meta, const mc_ckpt_load_opts *opts, bool optim, bool rng,
                          mc_ckpt_progress *pr) {
    const cJSON *r = meta->root;
    if (!opts->finetune) {
        pr->iteration = meta->iteration;
        pr->consumed_train_samples = (int64_t)num(r, "progress", "consumed_train_samples");
        pr->consumed_valid_samples = (int64_t)num(r, "progress", "consumed_valid_samples");
        pr->floating_point_operations_so_far = num(r, "progress", "num_floating_point_operations_so_far");
    }
    if (optim) {
        pr->sched_samples = (int64_t)num(r, "opt_param_scheduler", "num_steps");
        pr->optimizer_step = (int64_t)num(r, "optimizer", "step");
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(r, "grad_scaler");
        if (pr->scaler.dynamic && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gs, "dynamic"))) {
            pr->scaler.scale = num(r, "grad_scaler", "scale");
            pr->scaler.growth_tracker = (int64_t)num(r, "grad_scaler", "growth_tracker");
            pr->scaler.hysteresis_tracker = (int)num(r, "grad_scaler", "hysteresis_tracker");
        }
    }
    if (rng) pr->rng_seed = (uint64_t)num(r, "rng", "seed");
}

/* ---- the whole load ---- */

/* The iterations to try, newest first: --ckpt-step's alone, or the tracker's and every older
 * iter_N directory (a tracker naming one that is missing is an error: someone removed it),
 * or, without a tracker, every iter_N directory. */
static int find_candidates(const mc_ckpt_load_opts *opts, const char *flag, int64_t **out, int *n_out, mc_err *err) {
    int64_t tracked = -1;
    int rc = mc_ckpt_read_tracker(opts->dir, &tracked, err);
    if (rc == MC_ERR) return mc_err_prefix(err, "%s: ", flag);
    bool have_tracker = rc == 1;
    int n = 0;
    int64_t *cand = mc_ckpt_list_iterations(opts->dir, &n);
    char it[32];
    *out = cand;
    *n_out = n;
    if (opts->step >= 0) {
        bool found = false;
        for (int i = 0; i < n; i++) found = found || cand[i] == opts->step;
        if (!found) {
            char list[512] = "";
            for (int i = 0; i < n && strlen(list) < 400; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? ", " : "", (long long)cand[i]);
            mc_ckpt_iter_name(opts->step, it);
            return mc_err_set(err, "--ckpt-step %lld: %s has no %s (%s%s)", (long long)opts->step, opts->dir, it,
                              n ? "its checkpoints: " : "it holds no checkpoints", list);
        }
        cand[0] = opts->step;
        *n_out = 1;
    } else if (have_tracker) {
        bool found = false;
        for (int i = 0; i < n; i++) found = found || cand[i] == tracked;
        if (!found) {
            mc_ckpt_iter_name(tracked, it);
            return mc_err_set(err, "%s %s: %s names iteration %lld, but %s/%s does not exist (pass --ckpt-step to load "
                                   "another one)",
                              flag, opts->dir, MC_CKPT_TRACKER, (long long)tracked, opts->dir, it);
        }
        /* The tracker's and older ones: a newer directory is a save the tracker never
         * pointed to (killed before the tracker's update), or the abandoned future of a
         * run that was sent back with --ckpt-step. */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (cand[i] <= tracked) cand[k++] = cand[i];
        *n_out = k;
    }
    return MC_OK;
}

/* Checks that do not depend on the data: a failure is the user's (flags that do not fit
 * the checkpoint), not damage, so there is no falling back to an older one. */
static int check_fit(const mc_ckpt_state *st, const mc_ckpt_meta *meta, const mc_ckpt_load_opts *opts, bool optim,
                     mc_lr_schedule *sched, const char *what, mc_err *err) {
    MC_TRY(mc_ckpt_config_check(cJSON_GetObjectItemCaseSensitive(meta->root, "model"), st->cfg, what, err));
    if (opts->finetune) return MC_OK;
    if (opts->load_optim && !meta->has_optim)
        return mc_err_set(err, "%s was saved without optimizer state (--no-save-optim); pass --no-load-optim or "
                               "--finetune to load its weights only", what);
    if (opts->load_rng && !meta->has_rng)
        return mc_err_set(err, "%s was saved without RNG state (--no-save-rng); pass --no-load-rng or --finetune", what);
    if (optim)
        MC_TRY(mc_ckpt_sched_restore(cJSON_GetObjectItemCaseSensitive(meta->root, "opt_param_scheduler"), sched,
                                     opts->sched_policy, what, err));
    return MC_OK;
}

/* The damaged checkpoints skipped so far: named on stderr, one line each, once a valid one
 * is found (when none is, the error lists them instead). */
typedef struct damaged_list {
    char text[4][1100];
    int n, more;
} damaged_list;

static void note_damaged(damaged_list *d, const char *what, const mc_err *err) {
    if (d->n < 4) snprintf(d->text[d->n++], sizeof d->text[0], "%.300s is damaged (%.700s); skipping it", what, err->msg);
    else d->more++;
}

static void print_damaged(const mc_comm *c, const damaged_list *d) {
    if (c->rank != 0) return;
    for (int i = 0; i < d->n; i++) fprintf(stderr, "megatron-c: warning: %s\n", d->text[i]);
    if (d->more) fprintf(stderr, "megatron-c: warning: %d more damaged checkpoints skipped\n", d->more);
    fflush(stderr);
}

int mc_ckpt_load(const mc_ckpt_state *st, const mc_ckpt_load_opts *opts, mc_ckpt_progress *pr, bool *loaded,
                 mc_err *err) {
    mc_comm *c = st->comm;
    const char *flag = opts->flag ? opts->flag : "--load";
    *loaded = false;
    double t0 = mc_time_now();

    /* candidates, newest first; every rank reads the same directory */
    int n = 0;
    int64_t *cand = NULL;
    char it[32], what[4200];
    int rc = find_candidates(opts, flag, &cand, &n, err);
    double agree[2] = {n, n ? (double)cand[0] : -1};
    double seen[2] = {agree[0], agree[1]};
    mc_comm_all_reduce_host_f64(&c->world, seen, 2, MC_REDUCE_MAX);
    if (rc == MC_OK && (seen[0] != agree[0] || seen[1] != agree[1]))
        rc = mc_err_set(err, "%s %s: the ranks see different checkpoints there (is it on a shared filesystem?)", flag,
                        opts->dir);
    if (mc_ckpt_agree(c, rc, err) != MC_OK) {
        free(cand);
        return MC_ERR;
    }
    if (n == 0) {
        free(cand);
        if (c->rank == 0)
            mc_log_info("note: %s %s holds no checkpoint (no %s, no iter_* directory): starting from scratch", flag,
                        opts->dir, MC_CKPT_TRACKER);
        return MC_OK;
    }

    char tried[1024] = "";
    damaged_list damaged = {0};
    for (int i = 0; i < n; i++) {
        mc_ckpt_iter_name(cand[i], it);
        snprintf(what, sizeof what, "%s/%s", opts->dir, it);
        loader ld = {.st = st};
        pthread_mutex_init(&ld.mu, NULL);
        rc = mc_ckpt_meta_read(what, &ld.meta, err);
        if (rc == MC_OK && ld.meta.iteration != cand[i])
            rc = mc_err_set(err, "its metadata.json says iteration %lld", (long long)ld.meta.iteration);
        rc = mc_ckpt_agree(c, rc, err);
        if (rc != MC_OK) {
            if (opts->step >= 0) {
                loader_close(&ld);
                free(cand);
                return MC_ERR;
            }
            note_damaged(&damaged, what, err);
            snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s (%.300s)", tried[0] ? "; " : "", it, err->msg);
            loader_close(&ld);
            continue;
        }
        bool optim = opts->load_optim && !opts->finetune && ld.meta.has_optim && st->opt;
        bool rng = opts->load_rng && !opts->finetune && ld.meta.has_rng;
        mc_lr_schedule sched = st->sched ? *st->sched : (mc_lr_schedule){0};
        rc = check_fit(st, &ld.meta, opts, optim, &sched, what, err);
        if (mc_ckpt_agree(c, rc, err) != MC_OK) {
            loader_close(&ld);
            free(cand);
            return MC_ERR;
        }
        print_damaged(c, &damaged);
        damaged.n = damaged.more = 0;
        if (c->rank == 0) mc_log_info(" loading checkpoint from %s at iteration %lld", opts->dir, (long long)cand[i]);
        ld.maps = mc_xcalloc((size_t)ld.meta.nfiles, sizeof *ld.maps);
        rc = load_tensors(&ld, optim, err);
        rc = mc_ckpt_agree(c, rc, err);
        if (rc != MC_OK) {
            loader_close(&ld);
            reset_state(st);
            if (opts->step >= 0) {
                free(cand);
                return mc_err_prefix(err, "%s: ", what);
            }
            note_damaged(&damaged, what, err);
            snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s (%.300s)", tried[0] ? "; " : "", it, err->msg);
            continue;
        }
        double bytes = 0;
        for (int f = 0; f < ld.meta.nfiles; f++) bytes += (double)ld.meta.files[f].bytes;
        read_progress(&ld.meta, opts, optim, rng, pr);
        if (optim) *st->sched = sched;
        loader_close(&ld);
        free(cand);
        *loaded = true;
        double dt = mc_time_now() - t0;
        if (c->rank == 0) {
            mc_log_info("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld%s", opts->dir,
                        c->tp_rank + 1, c->sizes.tp, c->pp_rank + 1, c->sizes.pp, (long long)pr->iteration,
                        opts->finetune ? " (--finetune: weights only, from iteration 0)" : "");
            if (bytes >= 1e9)
                mc_log_info("  loaded %.2f GB in %.2f s (%.2f GB/s)", bytes / 1e9, dt, bytes / 1e9 / dt);
        }
        return MC_OK;
    }
    free(cand);
    return mc_err_set(err, "%s %s: no valid checkpoint: %s", flag, opts->dir, tried);
}
