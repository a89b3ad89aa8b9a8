/* comm_nccl.c: the device transport (NCCL on the CUDA backend's stream) and the CUDA
 * helpers of the comm layer. Plain C against the CUDA runtime and NCCL C APIs.
 *
 * Built for real with MC_HAVE_CUDA and MC_HAVE_NCCL; without them every entry reports a
 * clear error (they are only reached with a CUDA backend over more than one rank).
 *
 * Streams: each NCCL communicator has its own stream (high priority), and every call on
 * that communicator, blocking or async, runs there after an event recorded on the backend's
 * stream (backend.h: native_stream), so the calls of one communicator run in issue order on
 * every rank while those of different groups (a TP all-reduce and a DP reduce-scatter in
 * flight) may overlap. A blocking call then makes the backend's stream wait for it, so it
 * is ordered with the backend's ops like any other op; an async call records a completion
 * event instead, which mc_comm_wait makes the backend's stream wait for (the host does not
 * block).
 *
 * Timeouts: after each NCCL call an event is recorded on its stream and queued with the
 * operation's name and start time; the watchdog thread (watchdog.c) polls the queue with
 * cudaEventQuery and the communicators with ncclCommGetAsyncError, so a collective that
 * never completes on the GPU is reported even while the host waits in a stream sync. */
#include "comm/comm_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef MC_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#if defined(MC_HAVE_CUDA) && defined(MC_HAVE_NCCL)
#include <nccl.h>
#endif

#ifdef MC_HAVE_CUDA

#define CUDA_OK(call, what)                                                                                  \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) mc_comm_fatal("%s: CUDA error: %s (%s)", what, cudaGetErrorString(e_), #call); \
    } while (0)

void *mc_nccl_stream_of(mc_backend *be) {
    void *s = be && be->native_stream ? be->native_stream(be) : NULL;
    return s ? s : (void *)cudaStreamLegacy;
}

void mc_cuda_mark_record(mc_backend *be, mc_comm_mark *m) {
    if (!m->event) {
        cudaEvent_t ev;
        CUDA_OK(cudaEventCreate(&ev), "timing event");
        m->event = ev;
    }
    CUDA_OK(cudaEventRecord((cudaEvent_t)m->event, (cudaStream_t)mc_nccl_stream_of(be)), "timing event");
    m->host_s = mc_watch_now();
}

double mc_cuda_mark_elapsed(mc_comm_mark *start, mc_comm_mark *end) {
    float ms = 0;
    CUDA_OK(cudaEventSynchronize((cudaEvent_t)end->event), "timing event");
    CUDA_OK(cudaEventElapsedTime(&ms, (cudaEvent_t)start->event, (cudaEvent_t)end->event), "timing event");
    return ms * 1e-3;
}

void mc_cuda_mark_release(mc_comm_mark *m) {
    if (m->event) cudaEventDestroy((cudaEvent_t)m->event);
    m->event = NULL;
}

size_t mc_cuda_free_bytes(void) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
    return free_b;
}

int mc_nccl_pick_device(int local_rank, int local_size, mc_err *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return mc_err_set(err, "no CUDA device is visible to this rank (local rank %d): %s", local_rank,
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (n == 1) return 0; /* one GPU per process (the launcher bound it), or one rank per host */
    if (local_rank >= n) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return mc_err_set(err,
                          "local rank %d needs GPU %d but only %d GPUs are visible (CUDA_VISIBLE_DEVICES=%s): start "
                          "at most %d ranks per host (this host runs %d)",
                          local_rank, local_rank, n, vis ? vis : "<unset>", n, local_size);
    }
    return local_rank;
}

#else /* no CUDA */

void *mc_nccl_stream_of(mc_backend *be) {
    (void)be;
    return NULL;
}
void mc_cuda_mark_record(mc_backend *be, mc_comm_mark *m) {
    (void)be;
    m->event = NULL;
    m->host_s = mc_watch_now();
}
double mc_cuda_mark_elapsed(mc_comm_mark *start, mc_comm_mark *end) { return end->host_s - start->host_s; }
void mc_cuda_mark_release(mc_comm_mark *m) { m->event = NULL; }
size_t mc_cuda_free_bytes(void) { return 0; }
int mc_nccl_pick_device(int local_rank, int local_size, mc_err *err) {
    (void)local_rank;
    (void)local_size;
    return mc_err_set(err, "this build of megatron-c has no CUDA (built without nvcc)");
}

#endif

#if defined(MC_HAVE_CUDA) && defined(MC_HAVE_NCCL)

#define MC_NCCL_RING 1024
#define MC_NCCL_MAX_COMMS 64

static struct {
    pthread_mutex_t mu;
    bool ready;
    int device;
    /* Queue of NCCL work not yet known complete, oldest at (head - count). */
    cudaEvent_t ev[MC_NCCL_RING];
    const char *op[MC_NCCL_RING], *group[MC_NCCL_RING];
    int gsize[MC_NCCL_RING];
    double t0[MC_NCCL_RING];
    int head, count;
    ncclComm_t comms[MC_NCCL_MAX_COMMS];
    const char *comm_names[MC_NCCL_MAX_COMMS];
    int ncomms;
} g_nccl = {.mu = PTHREAD_MUTEX_INITIALIZER};

bool mc_nccl_available(void) { return true; }

#define NCCL_OK(call, opname, gi)                                                                           \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess)                                                                              \
            mc_comm_fatal("NCCL %s on group %s (size %d) failed: %s (%s)", opname, (gi)->name, (gi)->size,  \
                          ncclGetErrorString(r_), ncclGetLastError((ncclComm_t)(gi)->ch->nccl));            \
    } while (0)

/* The watchdog's view of the GPU work (runs on the watchdog thread). */
static void nccl_poll(double now) {
    static _Thread_local bool device_set;
    if (!device_set) {
        cudaSetDevice(g_nccl.device);
        device_set = true;
    }
    pthread_mutex_lock(&g_nccl.mu);
    while (g_nccl.count > 0) {
        int tail = (g_nccl.head - g_nccl.count + MC_NCCL_RING) % MC_NCCL_RING;
        cudaError_t e = cudaEventQuery(g_nccl.ev[tail]);
        if (e == cudaSuccess) {
            g_nccl.count--;
            continue;
        }
        const char *op = g_nccl.op[tail], *group = g_nccl.group[tail];
        int gsize = g_nccl.gsize[tail];
        double t0 = g_nccl.t0[tail];
        if (e != cudaErrorNotReady) {
            pthread_mutex_unlock(&g_nccl.mu);
            mc_comm_fatal("%s on group %s (size %d) failed on the GPU: %s", op, group, gsize, cudaGetErrorString(e));
        }
        if (now - t0 > mc_rt.timeout_s) {
            pthread_mutex_unlock(&g_nccl.mu);
            mc_watch_expired(op, group, gsize);
        }
        break;
    }
    int n = g_nccl.ncomms;
    ncclComm_t comms[MC_NCCL_MAX_COMMS];
    const char *names[MC_NCCL_MAX_COMMS];
    memcpy(comms, g_nccl.comms, sizeof(ncclComm_t) * (size_t)n);
    memcpy(names, g_nccl.comm_names, sizeof(char *) * (size_t)n);
    pthread_mutex_unlock(&g_nccl.mu);
    for (int i = 0; i < n; i++) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comms[i], &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
            mc_comm_fatal("NCCL reported an asynchronous error on group %s: %s (%s)", names[i],
                          ncclGetErrorString(async), ncclGetLastError(comms[i]));
    }
}

static void nccl_setup(void) {
    if (g_nccl.ready) return;
    CUDA_OK(cudaGetDevice(&g_nccl.device), "NCCL setup");
    for (int i = 0; i < MC_NCCL_RING; i++)
        CUDA_OK(cudaEventCreateWithFlags(&g_nccl.ev[i], cudaEventDisableTiming), "NCCL setup");
    g_nccl.ready = true;
    mc_watch_set_poll_hook(nccl_poll);
}

/* Queues the completion of the work just enqueued on `s` for the watchdog. */
static void track(cudaStream_t s, const char *op, const mc_group_impl *gi, double t0) {
    pthread_mutex_lock(&g_nccl.mu);
    while (g_nccl.count == MC_NCCL_RING) { /* full: wait for the oldest (itself watched) */
        int tail = (g_nccl.head - g_nccl.count + MC_NCCL_RING) % MC_NCCL_RING;
        cudaEvent_t oldest = g_nccl.ev[tail];
        pthread_mutex_unlock(&g_nccl.mu);
        cudaEventSynchronize(oldest);
        pthread_mutex_lock(&g_nccl.mu);
        while (g_nccl.count > 0 &&
               cudaEventQuery(g_nccl.ev[(g_nccl.head - g_nccl.count + MC_NCCL_RING) % MC_NCCL_RING]) == cudaSuccess)
            g_nccl.count--;
    }
    int h = g_nccl.head;
    CUDA_OK(cudaEventRecord(g_nccl.ev[h], s), "NCCL progress event");
    g_nccl.op[h] = op;
    g_nccl.group[h] = gi->name;
    g_nccl.gsize[h] = gi->size;
    g_nccl.t0[h] = t0;
    g_nccl.head = (h + 1) % MC_NCCL_RING;
    g_nccl.count++;
    pthread_mutex_unlock(&g_nccl.mu);
}

int mc_nccl_group_init(mc_group_impl *gi, mc_err *err) {
    mc_channel *ch = gi->ch;
    if (ch->nccl) return MC_OK;
    nccl_setup();
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (gi->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return mc_err_set(err, "rank %d: ncclGetUniqueId for group %s failed: %s", mc_rt.world_rank, gi->name,
                              ncclGetErrorString(r));
    }
    mc_mpi_broadcast(gi, &id, sizeof id, 0); /* the unique id travels over MPI */
    ncclComm_t comm;
    mc_watch_begin("nccl_init", gi->name, gi->size);
    ncclResult_t r = ncclCommInitRank(&comm, gi->size, id, gi->rank);
    mc_watch_end();
    if (r != ncclSuccess)
        return mc_err_set(err, "rank %d: creating the NCCL communicator of group %s (size %d) on GPU %d failed: %s (%s)",
                          mc_rt.world_rank, gi->name, gi->size, g_nccl.device, ncclGetErrorString(r),
                          ncclGetLastError(NULL));
    ch->nccl = comm;
    int lo, hi;
    cudaStream_t stream;
    cudaEvent_t ready, done;
    CUDA_OK(cudaDeviceGetStreamPriorityRange(&lo, &hi), "NCCL stream");
    CUDA_OK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, hi), "NCCL stream");
    CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "NCCL stream");
    CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "NCCL stream");
    ch->nccl_stream = stream;
    ch->nccl_ready = ready;
    ch->nccl_done = done;
    pthread_mutex_lock(&g_nccl.mu);
    MC_ASSERT(g_nccl.ncomms < MC_NCCL_MAX_COMMS, "too many NCCL communicators");
    g_nccl.comms[g_nccl.ncomms] = comm;
    g_nccl.comm_names[g_nccl.ncomms] = gi->name;
    g_nccl.ncomms++;
    pthread_mutex_unlock(&g_nccl.mu);
    return MC_OK;
}

void mc_nccl_channel_free(mc_channel *ch) {
    if (!ch->nccl) return;
    ncclComm_t comm = ch->nccl;
    pthread_mutex_lock(&g_nccl.mu);
    for (int i = 0; i < g_nccl.ncomms; i++)
        if (g_nccl.comms[i] == comm) {
            g_nccl.comms[i] = g_nccl.comms[g_nccl.ncomms - 1];
            g_nccl.comm_names[i] = g_nccl.comm_names[g_nccl.ncomms - 1];
            g_nccl.ncomms--;
            break;
        }
    pthread_mutex_unlock(&g_nccl.mu);
    cudaStreamSynchronize((cudaStream_t)ch->nccl_stream);
    ncclCommDestroy(comm);
    cudaEventDestroy((cudaEvent_t)ch->nccl_ready);
    cudaEventDestroy((cudaEvent_t)ch->nccl_done);
    cudaStreamDestroy((cudaStream_t)ch->nccl_stream);
    ch->nccl = ch->nccl_stream = ch->nccl_ready = ch->nccl_done = NULL;
}

static ncclDataType_t nccl_type(mc_dtype dt) {
    switch (dt) {
    case MC_F32: return ncclFloat32;
    case MC_F64: return ncclFloat64;
    case MC_BF16: return ncclBfloat16;
    case MC_F16: return ncclFloat16;
    case MC_I32: return ncclInt32;
    case MC_I64: return ncclInt64;
    default: return ncclUint8;
    }
}

static ncclRedOp_t nccl_op(mc_reduce_op op) {
    return op == MC_REDUCE_MAX ? ncclMax : op == MC_REDUCE_MIN ? ncclMin : ncclSum;
}

/* Every call of a channel runs on the channel's stream, after the work already enqueued on
 * the backend's stream. */
static cudaStream_t begin_op(const mc_group_impl *gi, mc_backend *be) {
    mc_channel *ch = gi->ch;
    CUDA_OK(cudaEventRecord((cudaEvent_t)ch->nccl_ready, (cudaStream_t)mc_nccl_stream_of(be)), "NCCL stream");
    CUDA_OK(cudaStreamWaitEvent((cudaStream_t)ch->nccl_stream, (cudaEvent_t)ch->nccl_ready, 0), "NCCL stream");
    return (cudaStream_t)ch->nccl_stream;
}

/* A blocking call: the backend's stream continues after it. Async work: its completion
 * event, for mc_comm_wait. Either way the watchdog tracks it. */
static void end_op(const mc_group_impl *gi, mc_backend *be, mc_comm_work *w, const char *op, double t0) {
    mc_channel *ch = gi->ch;
    cudaStream_t s = (cudaStream_t)ch->nccl_stream;
    if (w) {
        if (!w->event) {
            cudaEvent_t ev;
            CUDA_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "async collective");
            w->event = ev;
        }
        CUDA_OK(cudaEventRecord((cudaEvent_t)w->event, s), "async collective");
    } else {
        CUDA_OK(cudaEventRecord((cudaEvent_t)ch->nccl_done, s), "NCCL stream");
        CUDA_OK(cudaStreamWaitEvent((cudaStream_t)mc_nccl_stream_of(be), (cudaEvent_t)ch->nccl_done, 0), "NCCL stream");
    }
    track(s, op, gi, t0);
}

void mc_nccl_all_reduce(mc_group_impl *gi, mc_backend *be, void *x, int64_t n, mc_dtype dt, mc_reduce_op op,
                        mc_comm_work *work) {
    double t0 = mc_watch_now();
    cudaStream_t s = begin_op(gi, be);
    mc_watch_begin("all_reduce", gi->name, gi->size);
    NCCL_OK(ncclAllReduce(x, x, (size_t)n, nccl_type(dt), nccl_op(op), (ncclComm_t)gi->ch->nccl, s), "all_reduce", gi);
    mc_watch_end();
    end_op(gi, be, work, "all_reduce", t0);
}

void mc_nccl_reduce_scatter(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_out, mc_dtype dt,
                            mc_comm_work *work) {
    double t0 = mc_watch_now();
    cudaStream_t s = begin_op(gi, be);
    mc_watch_begin("reduce_scatter", gi->name, gi->size);
    NCCL_OK(ncclReduceScatter(in, out, (size_t)n_out, nccl_type(dt), ncclSum, (ncclComm_t)gi->ch->nccl, s),
            "reduce_scatter", gi);
    mc_watch_end();
    end_op(gi, be, work, "reduce_scatter", t0);
}

void mc_nccl_all_gather(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_in, mc_dtype dt,
                        mc_comm_work *work) {
    double t0 = mc_watch_now();
    cudaStream_t s = begin_op(gi, be);
    size_t bytes = (size_t)n_in * mc_dtype_size(dt); /* pure data movement: bytes */
    mc_watch_begin("all_gather", gi->name, gi->size);
    NCCL_OK(ncclAllGather(in, out, bytes, ncclUint8, (ncclComm_t)gi->ch->nccl, s), "all_gather", gi);
    mc_watch_end();
    end_op(gi, be, work, "all_gather", t0);
}

void mc_nccl_broadcast(mc_group_impl *gi, mc_backend *be, void *x, size_t bytes, int root) {
    double t0 = mc_watch_now();
    cudaStream_t s = begin_op(gi, be);
    mc_watch_begin("broadcast", gi->name, gi->size);
    NCCL_OK(ncclBroadcast(x, x, bytes, ncclUint8, root, (ncclComm_t)gi->ch->nccl, s), "broadcast", gi);
    mc_watch_end();
    end_op(gi, be, NULL, "broadcast", t0);
}

void mc_nccl_sendrecv(mc_group_impl *gi, mc_backend *be, const void *send, size_t send_bytes, int dst, void *recv,
                      size_t recv_bytes, int src) {
    const char *op = send ? (recv ? "sendrecv" : "send") : "recv";
    double t0 = mc_watch_now();
    cudaStream_t s = begin_op(gi, be);
    ncclComm_t comm = gi->ch->nccl;
    mc_watch_begin(op, gi->name, gi->size);
    NCCL_OK(ncclGroupStart(), op, gi);
    if (send) NCCL_OK(ncclSend(send, send_bytes, ncclUint8, dst, comm, s), op, gi);
    if (recv) NCCL_OK(ncclRecv(recv, recv_bytes, ncclUint8, src, comm, s), op, gi);
    NCCL_OK(ncclGroupEnd(), op, gi);
    mc_watch_end();
    end_op(gi, be, NULL, op, t0);
}

void mc_nccl_work_wait(mc_comm_work *w) {
    CUDA_OK(cudaStreamWaitEvent((cudaStream_t)mc_nccl_stream_of(w->be), (cudaEvent_t)w->event, 0), "mc_comm_wait");
}

bool mc_nccl_work_test(mc_comm_work *w) { return cudaEventQuery((cudaEvent_t)w->event) == cudaSuccess; }

#else /* no NCCL in this build */

bool mc_nccl_available(void) { return false; }

static MC_NORETURN void no_nccl(const mc_group_impl *gi) {
    mc_comm_fatal("device collectives on group %s (size %d) need NCCL, and this build of megatron-c has none (CMake "
                  "did not find libnccl with CUDA)",
                  gi->name, gi->size);
}

int mc_nccl_group_init(mc_group_impl *gi, mc_err *err) {
    return mc_err_set(err, "rank %d: device collectives on group %s (size %d) need NCCL, and this build of "
                           "megatron-c has none",
                      mc_rt.world_rank, gi->name, gi->size);
}
void mc_nccl_channel_free(mc_channel *ch) { (void)ch; }
void mc_nccl_all_reduce(mc_group_impl *gi, mc_backend *be, void *x, int64_t n, mc_dtype dt, mc_reduce_op op,
                        mc_comm_work *work) {
    (void)be; (void)x; (void)n; (void)dt; (void)op; (void)work;
    no_nccl(gi);
}
void mc_nccl_reduce_scatter(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_out, mc_dtype dt,
                            mc_comm_work *work) {
    (void)be; (void)out; (void)in; (void)n_out; (void)dt; (void)work;
    no_nccl(gi);
}
void mc_nccl_all_gather(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_in, mc_dtype dt,
                        mc_comm_work *work) {
    (void)be; (void)out; (void)in; (void)n_in; (void)dt; (void)work;
    no_nccl(gi);
}
void mc_nccl_broadcast(mc_group_impl *gi, mc_backend *be, void *x, size_t bytes, int root) {
    (void)be; (void)x; (void)bytes; (void)root;
    no_nccl(gi);
}
void mc_nccl_sendrecv(mc_group_impl *gi, mc_backend *be, const void *send, size_t send_bytes, int dst, void *recv,
                      size_t recv_bytes, int src) {
    (void)be; (void)send; (void)send_bytes; (void)dst; (void)recv; (void)recv_bytes; (void)src;
    no_nccl(gi);
}
void mc_nccl_work_wait(mc_comm_work *w) { (void)w; }
bool mc_nccl_work_test(mc_comm_work *w) {
    (void)w;
    return true;
}

#endif
