/* comm_mpi.c: the host transport. MPI moves the bytes; reductions are summed here in a
 * fixed order (see comm.h: determinism).
 *
 * all_reduce of x[n] over S ranks, group rank r, c = n / S:
 *   1. alltoall: rank r receives chunk r (elements [r*c, (r+1)*c)) of every rank into a
 *      scratch [S][c], row j from group rank j;
 *   2. rows reduced in the order 0, 1, ..., S-1 into x[r*c .. (r+1)*c);
 *   3. allgather (in place) of the reduced chunks.
 *   The n - S*c leftover elements (fewer than S) are allgathered from every rank and
 *   reduced the same way on each. Traffic is 2 (S-1)/S n elements per rank, as a ring.
 * reduce_scatter is steps 1-2 (chunk r of the sum lands in out), all_gather is step 3.
 * Chunks larger than a 64 MiB scratch are done in slices: slice [s, s+len) of every chunk,
 * moved with a datatype of len elements and an extent of c elements (64-bit offsets, so
 * tensors beyond 2^31 elements work). */
#include "comm/comm_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MC_SCRATCH_BUDGET ((size_t)64 << 20)

/* ---- element-wise reductions of S rows, in row order ---- */

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_f16(float f) { /* round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0)); /* inf / nan */
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);                                        /* overflow */
    if (exp <= 0) {                                                                           /* subnormal or 0 */
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - exp;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into the exponent: correct */
    return (uint16_t)h;
}

#define REDUCE_ROWS(T, ADD)                                                                         \
    do {                                                                                            \
        T *restrict d = dst;                                                                        \
        const T *restrict r0 = rows;                                                                \
        for (int64_t i = 0; i < len; i++) d[i] = r0[i];                                             \
        for (int j = 1; j < nrows; j++) {                                                           \
            const T *restrict rj = (const T *)rows + (int64_t)j * len;                              \
            if (op == MC_REDUCE_SUM)                                                                \
                for (int64_t i = 0; i < len; i++) d[i] = ADD(d[i], rj[i]);                          \
            else if (op == MC_REDUCE_MAX)                                                           \
                for (int64_t i = 0; i < len; i++) d[i] = rj[i] > d[i] ? rj[i] : d[i];               \
            else                                                                                    \
                for (int64_t i = 0; i < len; i++) d[i] = rj[i] < d[i] ? rj[i] : d[i];               \
        }                                                                                           \
    } while (0)

#define PLAIN_ADD(a, b) ((a) + (b))
#define WRAP_ADD_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define WRAP_ADD_I64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* dst[i] = rows[0][i] op rows[1][i] op ... op rows[nrows-1][i], left to right. 16-bit
 * floats are accumulated in acc (F32, len entries) and rounded once. dst must not overlap
 * rows. */
static void reduce_rows(mc_dtype dt, mc_reduce_op op, void *dst, const void *rows, int nrows, int64_t len,
                        float *acc) {
    switch (dt) {
    case MC_F32: REDUCE_ROWS(float, PLAIN_ADD); break;
    case MC_F64: REDUCE_ROWS(double, PLAIN_ADD); break;
    case MC_I32: REDUCE_ROWS(int32_t, WRAP_ADD_I32); break;
    case MC_I64: REDUCE_ROWS(int64_t, WRAP_ADD_I64); break;
    case MC_BF16:
    case MC_F16: {
        bool bf = dt == MC_BF16;
        const uint16_t *r = rows;
        for (int64_t i = 0; i < len; i++) acc[i] = bf ? mc_bf16_to_f32(r[i]) : f16_to_f32(r[i]);
        for (int j = 1; j < nrows; j++) {
            const uint16_t *rj = r + (int64_t)j * len;
            for (int64_t i = 0; i < len; i++) {
                float v = bf ? mc_bf16_to_f32(rj[i]) : f16_to_f32(rj[i]);
                acc[i] = op == MC_REDUCE_SUM ? acc[i] + v : op == MC_REDUCE_MAX ? (v > acc[i] ? v : acc[i])
                                                                                : (v < acc[i] ? v : acc[i]);
            }
        }
        uint16_t *d = dst;
        for (int64_t i = 0; i < len; i++) d[i] = bf ? mc_f32_to_bf16(acc[i]) : f32_to_f16(acc[i]);
        break;
    }
    default: MC_ASSERT(0, "dtype %s cannot be reduced", mc_dtype_name(dt));
    }
}

#ifdef MC_HAVE_MPI

/* ---- helpers ---- */

/* Per-thread scratch (the calling thread and the async worker each have one). */
static _Thread_local char *t_scratch;
static _Thread_local size_t t_scratch_cap;

static void *scratch(size_t bytes) {
    if (bytes > t_scratch_cap) {
        free(t_scratch);
        t_scratch = malloc(bytes);
        if (!t_scratch) mc_comm_fatal("out of host memory for a %zu-byte communication buffer", bytes);
        t_scratch_cap = bytes;
    }
    return t_scratch;
}

static void scratch_release(void) {
    free(t_scratch);
    t_scratch = NULL;
    t_scratch_cap = 0;
}

static MPI_Datatype elem_type(mc_dtype dt) {
    switch (dt) {
    case MC_F32: return MPI_FLOAT;
    case MC_F64: return MPI_DOUBLE;
    case MC_I32: return MPI_INT32_T;
    case MC_I64: return MPI_INT64_T;
    default: break;
    }
    size_t es = mc_dtype_size(dt);
    return es == 2 ? MPI_UINT16_T : es == 4 ? MPI_UINT32_T : es == 8 ? MPI_UINT64_T : MPI_UINT8_T;
}

static void check(int rc, const char *op, const mc_group_impl *gi) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len] = 0;
    mc_comm_fatal("%s on group %s (size %d) failed: %s", op, gi->name, gi->size, msg);
}

/* `len` elements, repeated with a stride (extent) of `stride` elements: block j of a
 * collective starts at j*stride. Plain elements when len == stride. */
typedef struct {
    MPI_Datatype type;
    int count;
    bool owned;
} block_type;

static block_type block_make(MPI_Datatype elem, size_t esz, int64_t len, int64_t stride) {
    block_type b = {elem, (int)len, false};
    if (len == stride) return b;
    MPI_Datatype t;
    MPI_Type_contiguous((int)len, elem, &t);
    MPI_Type_create_resized(t, 0, (MPI_Aint)stride * (MPI_Aint)esz, &b.type);
    MPI_Type_free(&t);
    MPI_Type_commit(&b.type);
    b.count = 1;
    b.owned = true;
    return b;
}

static void block_free(block_type *b) {
    if (b->owned) MPI_Type_free(&b->type);
}

/* The scratch budget; MC_COMM_SCRATCH_BYTES overrides it (tests exercise the slicing). */
static size_t scratch_budget(void) {
    static size_t budget;
    if (!budget) {
        const char *e = getenv("MC_COMM_SCRATCH_BYTES");
        long long v = e ? atoll(e) : 0;
        budget = v > 0 ? (size_t)v : MC_SCRATCH_BUDGET;
    }
    return budget;
}

/* Slice length for chunks of c elements: S rows of it fit the scratch budget. */
static int64_t slice_len(int64_t c, int S, size_t esz) {
    int64_t l = (int64_t)(scratch_budget() / ((size_t)S * esz));
    if (l < 1) l = 1;
    if (l > INT_MAX / 2) l = INT_MAX / 2;
    return c < l ? c : l;
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

static MPI_Comm comm_of(const mc_group_impl *gi, bool async) { return async ? gi->ch->async_comm : gi->ch->comm; }

/* ---- channels ---- */

void mc_mpi_channel_create(mc_group_impl *gi, bool is_world) {
    mc_channel *ch = gi->ch;
    mc_watch_begin("create_communicator", gi->name, gi->size);
    int rc = is_world ? MPI_Comm_dup(mc_rt.world, &ch->comm)
                      : MPI_Comm_split(mc_rt.world, gi->ranks[0], gi->rank, &ch->comm);
    check(rc, "MPI_Comm_split", gi);
    check(MPI_Comm_dup(ch->comm, &ch->async_comm), "MPI_Comm_dup", gi);
    mc_watch_end();
    int size, rank;
    MPI_Comm_size(ch->comm, &size);
    MPI_Comm_rank(ch->comm, &rank);
    MC_ASSERT(size == gi->size && rank == gi->rank, "group %s: MPI made a communicator of size %d rank %d, expected %d/%d",
              gi->name, size, rank, gi->size, gi->rank);
    MPI_Comm_set_errhandler(ch->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ch->async_comm, MPI_ERRORS_RETURN);
}

void mc_mpi_channel_free(mc_channel *ch) {
    if (!mc_rt.mpi_active) return;
    if (ch->async_comm != MPI_COMM_NULL && ch->async_comm) MPI_Comm_free(&ch->async_comm);
    if (ch->comm != MPI_COMM_NULL && ch->comm) MPI_Comm_free(&ch->comm);
}

/* ---- collectives ---- */

/* Steps 1-2 on slices: out[s..] = row-ordered reduction of chunk `r` of every rank's `in`,
 * for chunks of c elements. */
static void reduce_scatter_chunks(const mc_group_impl *gi, MPI_Comm comm, const char *opname, void *out,
                                  const void *in, int64_t c, mc_dtype dt, mc_reduce_op op) {
    int S = gi->size;
    size_t esz = mc_dtype_size(dt);
    MPI_Datatype et = elem_type(dt);
    int64_t L = slice_len(c, S, esz);
    bool f16 = dt == MC_BF16 || dt == MC_F16;
    for (int64_t s = 0; s < c; s += L) {
        int64_t len = c - s < L ? c - s : L;
        size_t rows_bytes = align64((size_t)S * (size_t)len * esz);
        char *tmp = scratch(rows_bytes + (f16 ? (size_t)len * 4 : 0));
        block_type b = block_make(et, esz, len, c);
        check(MPI_Alltoall((const char *)in + (size_t)s * esz, b.count, b.type, tmp, (int)len, et, comm), opname, gi);
        block_free(&b);
        reduce_rows(dt, op, (char *)out + (size_t)s * esz, tmp, S, len, (float *)(tmp + rows_bytes));
    }
}

/* Step 3 on slices: out[j*c + s ..] = in of rank j; in may be out + r*c (in place). */
static void all_gather_chunks(const mc_group_impl *gi, MPI_Comm comm, const char *opname, void *out, const void *in,
                              int64_t c, mc_dtype dt) {
    size_t esz = mc_dtype_size(dt);
    MPI_Datatype et = elem_type(dt);
    bool in_place = (const char *)in == (char *)out + (size_t)gi->rank * (size_t)c * esz;
    int64_t L = c < INT_MAX / 2 ? c : INT_MAX / 2;
    for (int64_t s = 0; s < c; s += L) {
        int64_t len = c - s < L ? c - s : L;
        block_type b = block_make(et, esz, len, c);
        const void *send = in_place ? MPI_IN_PLACE : (const char *)in + (size_t)s * esz;
        check(MPI_Allgather(send, in_place ? 0 : (int)len, in_place ? MPI_DATATYPE_NULL : et,
                            (char *)out + (size_t)s * esz, b.count, b.type, comm),
              opname, gi);
        block_free(&b);
    }
}

void mc_mpi_all_reduce(mc_group_impl *gi, bool async, void *x, int64_t n, mc_dtype dt, mc_reduce_op op) {
    MPI_Comm comm = comm_of(gi, async);
    int S = gi->size, r = gi->rank;
    size_t esz = mc_dtype_size(dt);
    int64_t c = n / S, rem = n - c * S;
    mc_watch_begin("all_reduce", gi->name, S);
    if (c > 0) {
        /* Slice by slice: reduce-scatter of the slice into this rank's chunk, then the
         * in-place all-gather of the slice. */
        int64_t L = slice_len(c, S, esz);
        for (int64_t s = 0; s < c; s += L) {
            int64_t len = c - s < L ? c - s : L;
            /* A view with chunks of `c` whose slice [s, s+len) is moved. */
            size_t rows_bytes = align64((size_t)S * (size_t)len * esz);
            bool f16 = dt == MC_BF16 || dt == MC_F16;
            char *tmp = scratch(rows_bytes + (f16 ? (size_t)len * 4 : 0));
            MPI_Datatype et = elem_type(dt);
            block_type b = block_make(et, esz, len, c);
            char *base = (char *)x + (size_t)s * esz;
            check(MPI_Alltoall(base, b.count, b.type, tmp, (int)len, et, comm), "all_reduce", gi);
            reduce_rows(dt, op, base + (size_t)r * (size_t)c * esz, tmp, S, len, (float *)(tmp + rows_bytes));
            check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, b.count, b.type, comm), "all_reduce", gi);
            block_free(&b);
        }
    }
    if (rem > 0) {
        MPI_Datatype et = elem_type(dt);
        size_t rows_bytes = align64((size_t)S * (size_t)rem * esz);
        char *tmp = scratch(rows_bytes + (size_t)rem * 4);
        char *tail = (char *)x + (size_t)(c * S) * esz;
        check(MPI_Allgather(tail, (int)rem, et, tmp, (int)rem, et, comm), "all_reduce", gi);
        reduce_rows(dt, op, tail, tmp, S, rem, (float *)(tmp + rows_bytes));
    }
    mc_watch_end();
}

void mc_mpi_reduce_scatter(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_out, mc_dtype dt,
                           mc_reduce_op op) {
    mc_watch_begin("reduce_scatter", gi->name, gi->size);
    reduce_scatter_chunks(gi, comm_of(gi, async), "reduce_scatter", out, in, n_out, dt, op);
    mc_watch_end();
}

void mc_mpi_all_gather(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_in, mc_dtype dt) {
    mc_watch_begin("all_gather", gi->name, gi->size);
    all_gather_chunks(gi, comm_of(gi, async), "all_gather", out, in, n_in, dt);
    mc_watch_end();
}

#define MC_MSG_SLICE ((size_t)1 << 30)

void mc_mpi_broadcast(mc_group_impl *gi, void *x, size_t bytes, int root) {
    mc_watch_begin("broadcast", gi->name, gi->size);
    for (size_t off = 0; off < bytes; off += MC_MSG_SLICE) {
        size_t len = bytes - off < MC_MSG_SLICE ? bytes - off : MC_MSG_SLICE;
        check(MPI_Bcast((char *)x + off, (int)len, MPI_BYTE, root, gi->ch->comm), "broadcast", gi);
    }
    mc_watch_end();
}

void mc_mpi_broadcast_idle(mc_group_impl *gi, void *x, size_t bytes, int root) {
    mc_watch_begin("broadcast", gi->name, gi->size);
    for (size_t off = 0; off < bytes; off += MC_MSG_SLICE) {
        size_t len = bytes - off < MC_MSG_SLICE ? bytes - off : MC_MSG_SLICE;
        MPI_Request req;
        check(MPI_Ibcast((char *)x + off, (int)len, MPI_BYTE, root, gi->ch->comm, &req), "broadcast", gi);
        for (int done = 0;;) {
            check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast", gi);
            if (done) break;
            nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
        }
    }
    mc_watch_end();
}

void mc_mpi_sendrecv(mc_group_impl *gi, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                     int src) {
    const char *op = send ? (recv ? "sendrecv" : "send") : "recv";
    MPI_Comm comm = gi->ch->comm;
    const int tag = 71;
    mc_watch_begin(op, gi->name, gi->size);
    /* Both sides cut a message into the same 1 GiB slices, so slice k matches slice k. */
    size_t ns = send ? (send_bytes + MC_MSG_SLICE - 1) / MC_MSG_SLICE : 0;
    size_t nr = recv ? (recv_bytes + MC_MSG_SLICE - 1) / MC_MSG_SLICE : 0;
    if (send && ns == 0) ns = 1; /* an empty message is still a message */
    if (recv && nr == 0) nr = 1;
    for (size_t k = 0; k < ns || k < nr; k++) {
        size_t so = k * MC_MSG_SLICE, ro = k * MC_MSG_SLICE;
        int sl = k < ns ? (int)(send_bytes - so < MC_MSG_SLICE ? send_bytes - so : MC_MSG_SLICE) : 0;
        int rl = k < nr ? (int)(recv_bytes - ro < MC_MSG_SLICE ? recv_bytes - ro : MC_MSG_SLICE) : 0;
        if (k < ns && k < nr)
            check(MPI_Sendrecv((const char *)send + so, sl, MPI_BYTE, dst, tag, (char *)recv + ro, rl, MPI_BYTE, src,
                               tag, comm, MPI_STATUS_IGNORE),
                  op, gi);
        else if (k < ns)
            check(MPI_Send((const char *)send + so, sl, MPI_BYTE, dst, tag, comm), op, gi);
        else
            check(MPI_Recv((char *)recv + ro, rl, MPI_BYTE, src, tag, comm, MPI_STATUS_IGNORE), op, gi);
    }
    mc_watch_end();
}

void mc_mpi_barrier(mc_group_impl *gi) {
    mc_watch_begin("barrier", gi->name, gi->size);
    check(MPI_Barrier(gi->ch->comm), "barrier", gi);
    mc_watch_end();
}

void mc_mpi_all_gather_u64(mc_group_impl *gi, uint64_t v, uint64_t *out) {
    mc_watch_begin("check_same", gi->name, gi->size);
    check(MPI_Allgather(&v, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, gi->ch->comm), "check_same", gi);
    mc_watch_end();
}

/* ---- the async worker ----
 * One thread per process runs the queued collectives in issue order, on the groups'
 * duplicated communicators, so they never interleave with the calling thread's collectives
 * on the same communicator. Needs MPI_THREAD_MULTIPLE; without it an async call runs at
 * once on the calling thread (still correct, no overlap). */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t thread;
    bool started, stop;
    mc_comm_work *head, *tail;
} g_worker = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void run_work(mc_comm_work *w, bool async) {
    switch (w->op) {
    case MC_WORK_ALL_REDUCE: mc_mpi_all_reduce(w->gi, async, w->out, w->n, w->dt, w->rop); break;
    case MC_WORK_REDUCE_SCATTER: mc_mpi_reduce_scatter(w->gi, async, w->out, w->in, w->n, w->dt, w->rop); break;
    case MC_WORK_ALL_GATHER: mc_mpi_all_gather(w->gi, async, w->out, w->in, w->n, w->dt); break;
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_worker.mu);
    for (;;) {
        while (!g_worker.head && !g_worker.stop) pthread_cond_wait(&g_worker.work_cv, &g_worker.mu);
        if (!g_worker.head) break;
        mc_comm_work *w = g_worker.head;
        g_worker.head = w->next;
        if (!g_worker.head) g_worker.tail = NULL;
        pthread_mutex_unlock(&g_worker.mu);
        run_work(w, true);
        pthread_mutex_lock(&g_worker.mu);
        atomic_store(&w->done, 1);
        pthread_cond_broadcast(&g_worker.done_cv);
    }
    pthread_mutex_unlock(&g_worker.mu);
    scratch_release();
    return NULL;
}

void mc_mpi_async_submit(mc_comm_work *w) {
    if (mc_rt.thread_level < MPI_THREAD_MULTIPLE) {
        run_work(w, false);
        atomic_store(&w->done, 1);
        return;
    }
    pthread_mutex_lock(&g_worker.mu);
    if (!g_worker.started) {
        g_worker.stop = false;
        MC_ASSERT(pthread_create(&g_worker.thread, NULL, worker_main, NULL) == 0, "cannot start the comm thread");
        g_worker.started = true;
    }
    w->next = NULL;
    if (g_worker.tail)
        g_worker.tail->next = w;
    else
        g_worker.head = w;
    g_worker.tail = w;
    pthread_cond_signal(&g_worker.work_cv);
    pthread_mutex_unlock(&g_worker.mu);
}

void mc_mpi_async_wait(mc_comm_work *w) {
    if (atomic_load(&w->done)) return;
    pthread_mutex_lock(&g_worker.mu);
    while (!atomic_load(&w->done)) pthread_cond_wait(&g_worker.done_cv, &g_worker.mu);
    pthread_mutex_unlock(&g_worker.mu);
}

bool mc_mpi_async_test(mc_comm_work *w) { return atomic_load(&w->done) != 0; }

void mc_mpi_async_shutdown(void) {
    pthread_mutex_lock(&g_worker.mu);
    bool started = g_worker.started;
    g_worker.stop = true;
    pthread_cond_broadcast(&g_worker.work_cv);
    pthread_mutex_unlock(&g_worker.mu);
    if (started) pthread_join(g_worker.thread, NULL);
    g_worker.started = false;
    scratch_release();
}

#else /* no MPI in this build: only world size 1 exists, whose groups never reach here */

static void no_mpi(const mc_group_impl *gi) {
    MC_ASSERT(0, "group %s (size %d) needs MPI, and this build has none", gi->name, gi->size);
}
void mc_mpi_channel_create(mc_group_impl *gi, bool is_world) { (void)is_world; no_mpi(gi); }
void mc_mpi_channel_free(mc_channel *ch) { (void)ch; }
void mc_mpi_all_reduce(mc_group_impl *gi, bool async, void *x, int64_t n, mc_dtype dt, mc_reduce_op op) {
    (void)async; (void)x; (void)n; (void)dt; (void)op; (void)reduce_rows; (void)f32_to_f16; no_mpi(gi);
}
void mc_mpi_reduce_scatter(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_out, mc_dtype dt,
                           mc_reduce_op op) {
    (void)async; (void)out; (void)in; (void)n_out; (void)dt; (void)op; no_mpi(gi);
}
void mc_mpi_all_gather(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_in, mc_dtype dt) {
    (void)async; (void)out; (void)in; (void)n_in; (void)dt; no_mpi(gi);
}
void mc_mpi_broadcast(mc_group_impl *gi, void *x, size_t bytes, int root) { (void)x; (void)bytes; (void)root; no_mpi(gi); }
void mc_mpi_broadcast_idle(mc_group_impl *gi, void *x, size_t bytes, int root) {
    (void)x; (void)bytes; (void)root; no_mpi(gi);
}
void mc_mpi_sendrecv(mc_group_impl *gi, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                     int src) {
    (void)send; (void)send_bytes; (void)dst; (void)recv; (void)recv_bytes; (void)src; no_mpi(gi);
}
void mc_mpi_barrier(mc_group_impl *gi) { no_mpi(gi); }
void mc_mpi_all_gather_u64(mc_group_impl *gi, uint64_t v, uint64_t *out) { (void)v; (void)out; no_mpi(gi); }
void mc_mpi_async_submit(mc_comm_work *w) { no_mpi(w->gi); }
void mc_mpi_async_wait(mc_comm_work *w) { (void)w; }
bool mc_mpi_async_test(mc_comm_work *w) { (void)w; return true; }
void mc_mpi_async_shutdown(void) {}

#endif
