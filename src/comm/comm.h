/* comm.h: launch, process groups and collectives.
 *
 * Ranks are laid out as Megatron's RankGenerator with order tp-cp-ep-dp-pp, tp fastest:
 *   global_rank = tp + TP*(cp + CP*(dp + DP*pp))        (dense grid, ep = 1)
 * Model and optimizer code always call the collectives with the group they mean; on a
 * group of size 1 every call is a no-op (or a copy), which is the single-device path.
 *
 * Transports: host memory (the CPU backend, and the host-scalar calls) travels over MPI,
 * device memory (the CUDA backend) over NCCL on the backend's stream, or over MPI through
 * host memory (mc_comm_set_device_over_mpi). MPI also carries the
 * bootstrap: the world, the group communicators and each NCCL unique id.
 *
 * Launch (mc_comm_init_from_env) recognizes, in this order:
 *   mpirun (OMPI_COMM_WORLD_SIZE), srun (SLURM_PROCID + SLURM_STEP_NUM_TASKS), other PMI /
 *   PMIx launchers (PMI_SIZE, PMIX_RANK: MPICH's hydra, prterun), torchrun-style env (RANK,
 *   WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; see bootstrap.c), and none (world
 *   size 1, MPI is not initialized). Each rank uses the GPU of its local rank
 *   (mc_comm_pick_device). While MPI runs, the comm layer owns SIGTERM (see watchdog.c).
 *
 * Chunk layout of the collectives over a group of size S, group rank r (group ranks are
 * the order of mc_group.ranks; NCCL and MPI use the same order):
 *   all_gather:     out = [in of rank 0, in of rank 1, ..., in of rank S-1]
 *   reduce_scatter: rank r gets elements [r*n/S, (r+1)*n/S) of the sum of in[n] over the
 *                   group; n must be a multiple of S (equal chunks).
 * Collectives are blocking on the CPU backend and stream-ordered on the CUDA backend: they
 * run after the work already enqueued on the backend's stream, and the work enqueued after
 * them waits for them, like the backend's own ops (the host does not block).
 *
 * Determinism (CPU): a SUM over floats is computed on every rank as
 *   ((x_0 + x_1) + x_2) + ... + x_{S-1}        (x_r: group rank r's value, in group order)
 * by moving the data with MPI (alltoall, allgather) and summing locally in that fixed order
 * (BF16/F16 are summed in F32 and rounded once). Results are therefore bit-identical on
 * every rank, from run to run, between the blocking and async variants, and independent of
 * the MPI library's algorithm choice. On NCCL the order is NCCL's (deterministic for a
 * fixed topology and NCCL_ALGO/NCCL_PROTO, e.g. NCCL_ALGO=Ring as Megatron's tests set).
 *
 * Failures: a collective that does not complete within the timeout (--distributed-timeout-
 * minutes) prints, on every rank that is stuck,
 *   megatron-c: error: rank R: <op> on group <name> (size S) did not complete within N minutes
 * and ends the job (MPI_Abort, exit code 1). An MPI or NCCL error, and a rank ended by the
 * launcher because another rank died (SIGTERM), print one line naming the operation in
 * flight. Misuse (mismatched shapes, a size that does not split into equal chunks) aborts
 * with a message: it is a bug in the caller, not in the user's input. */
#ifndef MC_COMM_COMM_H
#define MC_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MC_REDUCE_SUM = 0, MC_REDUCE_MAX, MC_REDUCE_MIN } mc_reduce_op;

typedef enum {
    MC_LAUNCH_NONE = 0, /* one process, no launcher: world size 1 */
    MC_LAUNCH_MPIRUN,   /* Open MPI's mpirun / mpiexec */
    MC_LAUNCH_PMI,      /* a PMI/PMIx launcher (MPICH hydra, srun --mpi=pmix, prterun) */
    MC_LAUNCH_SLURM,    /* srun */
    MC_LAUNCH_TORCHRUN, /* RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, joined with MPI connect/accept */
} mc_launcher;

typedef struct mc_parallel_sizes {
    int tp, pp, cp, ep, dp; /* dp is derived: world / (tp*pp*cp) */
} mc_parallel_sizes;

typedef struct mc_group {
    const char *name; /* "tp", "dp", ... for error messages */
    int size, rank;   /* this process's rank within the group */
    int *ranks;       /* global ranks of the members, in group-rank order */
    void *impl;       /* transport state (MPI communicators, NCCL comm); NULL for size 1 or
                         a layout-only mc_comm */
} mc_group;

typedef struct mc_comm {
    int world_size, rank;
    int local_rank, local_size; /* on this host: the GPU this rank uses is local_rank */
    mc_launcher launcher;
    mc_parallel_sizes sizes;
    /* Coordinates of this rank on the dense grid. */
    int tp_rank, cp_rank, dp_rank, pp_rank;
    mc_group world, tp, cp, dp, pp, dp_cp, mp; /* mp = tp x pp (model parallel) */
    void *impl; /* non-NULL when the groups have a transport (mc_comm_init_from_env) */
    bool device_over_mpi; /* mc_comm_set_device_over_mpi */
} mc_comm;

/* ---- setup ---- */

/* Layout only, no transport: computes the world's layout from the requested sizes and
 * builds this rank's groups (for world size 1, tests and planning). A collective over a
 * group of size > 1 of such a comm aborts with a message. Fails with the divisibility
 * rule spelled out (e.g. world % (TP*PP*CP)). */
int mc_comm_init(mc_comm *c, int world_size, int rank, int local_rank, int tp, int pp, int cp, int ep, mc_err *err);

/* Detects the launcher (see the banner), initializes MPI when there is one (world size >
 * 1), builds the layout and one MPI communicator per group, sets the log rank and starts
 * the timeout watchdog. timeout_minutes <= 0 means Megatron's default, 10; the environment
 * variable MC_COMM_TIMEOUT_SECONDS overrides it (tests). A layout error (divisibility) is
 * reported identically on every rank (MPI stays up: end with mc_comm_exit_error, so that
 * every rank prints it). Several comms may be created (different layouts); MPI is
 * finalized when the last one is freed. */
int mc_comm_init_from_env(mc_comm *c, int tp, int pp, int cp, int ep, int timeout_minutes, mc_err *err);

/* Device memory's transport for this comm's groups: NCCL (the default), or with on MPI
 * through host memory (--distributed-backend mpi; comm_staged.c): each collective copies
 * its device operands to the host, which waits for the backend's stream, runs the host
 * path's MPI collective and copies the result back before it returns; the async variants
 * complete at once and return NULL. Several ranks may share one GPU then, no NCCL is
 * needed, and the sums are the host path's (the fixed order above). Call before
 * mc_comm_init_device (which then creates no NCCL communicator), the same on every rank. */
void mc_comm_set_device_over_mpi(mc_comm *c, bool on);

/* For the CUDA backend: creates the NCCL communicators of every group of size > 1 now (on
 * the backend's current device; the unique ids travel over MPI). Optional: without it
 * they are created on first use, which must then happen in the same order on every rank.
 * Fails clearly when this build has no NCCL or the local rank has no GPU. No-op for the
 * CPU backend or a world of size 1. */
int mc_comm_init_device(mc_comm *c, mc_backend *be, mc_err *err);

/* The CUDA device this rank should use: its local rank, or 0 when the launcher binds one
 * GPU to each process (one visible device). Fails clearly when the host has fewer GPUs
 * than ranks, or in a build without CUDA. */
int mc_comm_pick_device(const mc_comm *c, mc_err *err);

/* Frees the groups (wait every async handle first); the last comm from
 * mc_comm_init_from_env also finalizes MPI (every rank must call it; on an error that only
 * some ranks see, call mc_comm_abort instead). */
void mc_comm_free(mc_comm *c);

/* Changes the collective timeout of the watchdog (all comms of the process). */
void mc_comm_set_timeout_seconds(double seconds);
double mc_comm_timeout_seconds(void);

/* Ends the whole job from one rank (MPI_Abort when MPI runs, else exit): for an error only
 * this rank sees (print it first). */
MC_NORETURN void mc_comm_abort(int exit_code);
/* For an error every rank sees (a layout error from mc_comm_init_from_env, a config that
 * differs across ranks): prints "megatron-c: error: <msg>" on this rank, waits until every
 * rank of the world has printed (bounded by the timeout), finalizes MPI and exits with
 * exit_code (MC_EXIT_USAGE for the user's input). With world size 1: print and exit. */
MC_NORETURN void mc_comm_exit_error(int exit_code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *mc_comm_launcher_name(mc_launcher l);

/* The global ranks that form the group of kind `which` ("world", "tp", "cp", "dp", "pp",
 * "dp_cp", "mp") containing global rank `rank` of a layout; pure arithmetic, for tests and
 * planning. Writes up to `cap` ranks into out and returns the group size. */
int mc_layout_group_ranks(int world_size, const mc_parallel_sizes *s, const char *which, int rank, int *out, int cap);

/* The divisibility rules of the process grid (Megatron's arguments.py / parallel_state.py):
 * sizes >= 1, world % (TP*PP*CP) == 0, world % (TP*EP*PP) == 0 (expert grid, ETP = TP). */
int mc_layout_check(int world_size, int tp, int pp, int cp, int ep, mc_err *err);

/* ---- collectives on backend memory (CPU: MPI on host buffers; CUDA: NCCL on the
 * backend's stream). Dtypes: F32, F64, BF16, F16, I32, I64 for reductions; any dtype for
 * all_gather, broadcast, send and recv. ---- */
void mc_comm_all_reduce(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op);
/* out = concat over ranks of in (along the first dim); numel(out) = size * numel(in). In
 * place when in is this rank's chunk of out (in.data = out.data + rank * bytes(in)). */
void mc_comm_all_gather(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
/* out = this rank's 1/size chunk of the sum of in over ranks (chunk layout in the banner);
 * numel(in) = size * numel(out). In place when out is this rank's chunk of in. */
void mc_comm_reduce_scatter(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
/* root is a group rank. */
void mc_comm_broadcast(mc_group *g, mc_backend *be, mc_tensor *x, int root);

/* Point-to-point within a group (peer = group rank), for pipeline parallelism. Messages
 * between two ranks arrive in the order they were sent; send and recv sizes must match.
 * mc_comm_sendrecv posts both at once (no deadlock when neighbours exchange); send or
 * recv may be NULL. */
void mc_comm_send(mc_group *g, mc_backend *be, const mc_tensor *x, int peer);
void mc_comm_recv(mc_group *g, mc_backend *be, mc_tensor *x, int peer);
void mc_comm_sendrecv(mc_group *g, mc_backend *be, const mc_tensor *send, int dst, mc_tensor *recv, int src);

/* ---- non-blocking variants, for overlapping gradient reduction with backward and the
 * parameter all-gather with forward. Each returns a handle (NULL for a group of size 1, for
 * which the work is done at once); mc_comm_wait(h) completes it and releases the handle.
 * The buffers must stay untouched until then.
 *   CPU: the collective runs on the comm's worker thread (on its own duplicated MPI
 *        communicators), in issue order, with the same code and bit-identical results
 *        as the blocking call; mc_comm_wait blocks the host until it is done.
 *   CUDA: the collective runs on its communicator's stream after the work already
 *        enqueued on the backend's stream; mc_comm_wait makes the backend's stream wait
 *        for it (the host does not block).
 * Handles may be waited in any order, but every one must be waited (at most 1024 in
 * flight). Every rank must issue the same async calls in the same order. ---- */
typedef struct mc_comm_work mc_comm_work;
mc_comm_work *mc_comm_all_reduce_async(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op);
mc_comm_work *mc_comm_reduce_scatter_async(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
mc_comm_work *mc_comm_all_gather_async(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
void mc_comm_wait(mc_comm_work *w);
/* Whether the work has completed (never blocks; the handle stays valid until waited). */
bool mc_comm_test(mc_comm_work *w);

/* ---- collectives on host memory (losses, norms, counters), always over MPI ---- */
void mc_comm_all_reduce_host_f64(mc_group *g, double *vals, int n, mc_reduce_op op);
void mc_comm_barrier(mc_group *g);
/* root's bytes (root a group rank) copied to every rank of the group: requests and other
 * host-side messages, whatever the backend (the CUDA backend's mc_comm_broadcast is NCCL's,
 * on device memory). A rank waits for them asleep, polling every 0.2 ms, not spinning as
 * MPI's blocking calls do: for ranks that may wait long (a server's, between requests). */
void mc_comm_broadcast_host(mc_group *g, void *buf, size_t bytes, int root);

/* ---- consistency checks ---- */
/* Checks that `value` (e.g. a hash of the validated config) is the same on every rank of
 * the group. On a mismatch every rank returns MC_ERR with the same message, naming the
 * first rank whose value differs from group rank 0's:
 *   "<what> differs across ranks: rank 0 has 0x..., rank 3 has 0x..." */
int mc_comm_check_same_u64(mc_group *g, uint64_t value, const char *what, mc_err *err);
/* After each rank's setup (rc, its own result): every rank learns whether all succeeded (a
 * failed rank keeps its message, the others name the first rank that failed), so that all
 * return an error together instead of waiting in a collective for a rank that has gone;
 * then that all run the same configuration (config_hash; `what` names it). */
int mc_comm_agree_on_setup(mc_comm *c, int rc, uint64_t config_hash, const char *what, mc_err *err);
/* FNV-1a 64-bit hash of bytes, continuing from `seed` (0 to start). */
uint64_t mc_comm_hash64(const void *data, size_t bytes, uint64_t seed);

/* ---- benchmark helpers ---- */
/* Seconds on a monotonic clock (MPI_Wtime when MPI runs). */
double mc_comm_wtime(void);
/* Marks on the backend's stream: CUDA events on the CUDA backend, the host clock on the
 * CPU. mc_comm_mark_elapsed waits for `end` and returns the seconds between the marks;
 * mc_comm_mark_release frees a mark's event. */
typedef struct mc_comm_mark {
    void *event;
    double host_s;
} mc_comm_mark;
void mc_comm_mark_record(mc_backend *be, mc_comm_mark *m);
double mc_comm_mark_elapsed(mc_backend *be, mc_comm_mark *start, mc_comm_mark *end);
void mc_comm_mark_release(mc_comm_mark *m);
/* Free device memory in bytes on the CUDA backend's device (0 for the CPU backend). */
size_t mc_comm_device_free_bytes(mc_backend *be);

#ifdef __cplusplus
}
#endif

#endif
