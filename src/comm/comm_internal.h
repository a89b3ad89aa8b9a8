/* comm_internal.h: the private state shared by the comm files.
 *
 *   comm.c       layout, groups, dispatch to a transport, checks, the work-handle pool
 *   bootstrap.c  launch detection, MPI initialization, the torchrun-style rendezvous
 *   comm_mpi.c   host transport (MPI) and the async worker thread
 *   comm_nccl.c  device transport (NCCL), compiled for real with MC_HAVE_NCCL
 *   watchdog.c   the timeout watchdog, fatal errors, the SIGTERM note
 *
 * The one process-wide runtime context is mc_rt (MPI is process-wide too). */
#ifndef MC_COMM_COMM_INTERNAL_H
#define MC_COMM_COMM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/comm.h"

#ifdef MC_HAVE_MPI
#include <mpi.h>
#endif

/* The communicators of one set of ranks. Groups of a comm with the same members in the
 * same order (dp and dp_cp when CP = 1, tp and mp when PP = 1, ...) share one channel, so
 * that no NCCL communicator is created twice. */
typedef struct mc_channel {
    int refs;
#ifdef MC_HAVE_MPI
    MPI_Comm comm;       /* blocking collectives (the calling thread) */
    MPI_Comm async_comm; /* the async worker's duplicate */
#endif
    void *nccl;          /* ncclComm_t, created on first device use or by mc_comm_init_device */
    void *nccl_stream;   /* cudaStream_t: every NCCL call of this channel, in issue order */
    void *nccl_ready;    /* cudaEvent_t: the backend stream's point the channel stream waits for */
    void *nccl_done;     /* cudaEvent_t: the end of a blocking call, waited by the backend stream */
} mc_channel;

/* Per-group transport state (mc_group.impl). */
typedef struct mc_group_impl {
    const char *name;  /* for messages: the group as the caller named it */
    int size, rank;    /* group size and this rank's group rank */
    const int *ranks;  /* global ranks in group order (owned by the mc_group) */
    mc_channel *ch;
    bool staged;       /* device memory over MPI through host memory (comm_staged.c), not NCCL */
} mc_group_impl;

/* Process-wide runtime. */
typedef struct mc_comm_runtime {
    bool mpi_active;       /* MPI initialized by us and not finalized */
    bool mpi_finalized;
    int thread_level;      /* MPI_THREAD_* provided */
    int refs;              /* live comms from mc_comm_init_from_env */
    int world_rank, world_size, local_rank, local_size;
    mc_launcher launcher;
#ifdef MC_HAVE_MPI
    MPI_Comm world;        /* MPI_COMM_WORLD, or the merged communicator (torchrun env) */
#endif
    pid_t ompi_server_pid; /* torchrun env on rank 0: the ompi-server we started */
    double timeout_s;
} mc_comm_runtime;

extern mc_comm_runtime mc_rt;

/* ---- bootstrap.c ---- */
/* Detects the launcher and initializes MPI when world size > 1; fills mc_rt. Idempotent. */
int mc_bootstrap(mc_err *err);
void mc_bootstrap_finalize(void);

/* ---- watchdog.c ---- */
void mc_watch_start(void);
void mc_watch_stop(void);
/* Marks the calling thread as inside `op` on group `g` (name, size) until mc_watch_end. */
void mc_watch_begin(const char *op, const char *group, int group_size);
void mc_watch_end(void);
/* Called by the watchdog thread at every poll (NCCL event queue); may call mc_watch_expired. */
void mc_watch_set_poll_hook(void (*hook)(double now));
/* Reports that `op` on `group` exceeded the timeout on this rank, then ends the job. */
MC_NORETURN void mc_watch_expired(const char *op, const char *group, int group_size);
/* Prints "megatron-c: error: rank R: <msg>" and ends the job with exit code 1. */
MC_NORETURN void mc_comm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double mc_watch_now(void);

/* ---- comm_mpi.c (host transport) ---- */
/* Collective over the world: every rank calls it for the same groups in the same order. */
void mc_mpi_channel_create(mc_group_impl *gi, bool is_world);
void mc_mpi_channel_free(mc_channel *ch);
/* async = false: the main thread's communicator; true: the worker's. n counts elements. */
void mc_mpi_all_reduce(mc_group_impl *gi, bool async, void *x, int64_t n, mc_dtype dt, mc_reduce_op op);
void mc_mpi_reduce_scatter(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_out, mc_dtype dt,
                           mc_reduce_op op);
void mc_mpi_all_gather(mc_group_impl *gi, bool async, void *out, const void *in, int64_t n_in, mc_dtype dt);
void mc_mpi_broadcast(mc_group_impl *gi, void *x, size_t bytes, int root);
/* The same, waiting without spinning (MPI_Test every 0.2 ms, asleep between). */
void mc_mpi_broadcast_idle(mc_group_impl *gi, void *x, size_t bytes, int root);
void mc_mpi_sendrecv(mc_group_impl *gi, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                     int src);
void mc_mpi_barrier(mc_group_impl *gi);

/* comm_staged.c: the blocking collectives on device memory through host staging and MPI. */
void mc_staged_all_reduce(mc_group_impl *gi, mc_backend *be, void *x, int64_t n, mc_dtype dt, mc_reduce_op op);
void mc_staged_all_gather(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_in, mc_dtype dt);
void mc_staged_reduce_scatter(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_out,
                              mc_dtype dt, mc_reduce_op op);
void mc_staged_broadcast(mc_group_impl *gi, mc_backend *be, void *x, size_t bytes, int root);
void mc_staged_sendrecv(mc_group_impl *gi, mc_backend *be, const void *send, size_t send_bytes, int dst, void *recv,
                        size_t recv_bytes, int src);
void mc_mpi_all_gather_u64(mc_group_impl *gi, uint64_t v, uint64_t *out);
/* Queues work on the async worker thread (started on first use). */
void mc_mpi_async_submit(mc_comm_work *w);
void mc_mpi_async_wait(mc_comm_work *w);
bool mc_mpi_async_test(mc_comm_work *w);
void mc_mpi_async_shutdown(void);

/* ---- comm_nccl.c (device transport) ---- */
bool mc_nccl_available(void);
int mc_nccl_group_init(mc_group_impl *gi, mc_err *err);
void mc_nccl_channel_free(mc_channel *ch);
void *mc_nccl_stream_of(mc_backend *be); /* the backend's cudaStream_t */
/* work == NULL: on the backend's stream; else on the comm stream, completion in work. */
void mc_nccl_all_reduce(mc_group_impl *gi, mc_backend *be, void *x, int64_t n, mc_dtype dt, mc_reduce_op op,
                        mc_comm_work *work);
void mc_nccl_reduce_scatter(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_out, mc_dtype dt,
                            mc_comm_work *work);
void mc_nccl_all_gather(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_in, mc_dtype dt,
                        mc_comm_work *work);
void mc_nccl_broadcast(mc_group_impl *gi, mc_backend *be, void *x, size_t bytes, int root);
void mc_nccl_sendrecv(mc_group_impl *gi, mc_backend *be, const void *send, size_t send_bytes, int dst, void *recv,
                      size_t recv_bytes, int src);
void mc_nccl_work_wait(mc_comm_work *w);
bool mc_nccl_work_test(mc_comm_work *w);
int mc_nccl_pick_device(int local_rank, int local_size, mc_err *err);
void mc_cuda_mark_record(mc_backend *be, mc_comm_mark *m);
double mc_cuda_mark_elapsed(mc_comm_mark *start, mc_comm_mark *end);
void mc_cuda_mark_release(mc_comm_mark *m);
size_t mc_cuda_free_bytes(void);

/* ---- async work handles (pool in comm.c) ---- */
typedef enum { MC_WORK_ALL_REDUCE, MC_WORK_REDUCE_SCATTER, MC_WORK_ALL_GATHER } mc_work_op;
struct mc_comm_work {
    mc_work_op op;
    bool device;           /* NCCL (true) or the MPI worker (false) */
    mc_group_impl *gi;
    mc_backend *be;
    void *out;             /* all_reduce: the buffer */
    const void *in;
    int64_t n;             /* all_reduce: numel; reduce_scatter: numel(out); all_gather: numel(in) */
    mc_dtype dt;
    mc_reduce_op rop;
    atomic_int done;       /* MPI worker: set when complete */
    void *event;           /* NCCL: completion event on the channel's stream */
    mc_comm_work *next;    /* worker queue / free list */
    bool in_use;
};
mc_comm_work *mc_work_get(void);
void mc_work_put(mc_comm_work *w);

/* Little helpers shared by the transports. */
const char *mc_reduce_op_name(mc_reduce_op op);

#endif
