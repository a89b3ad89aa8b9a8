/* comm.h: process groups and collectives.
 *
 * Ranks are laid out as Megatron's RankGenerator with order tp-cp-ep-dp-pp, tp fastest:
 *   global_rank = tp + TP*(cp + CP*(dp + DP*pp))        (dense grid, ep = 1)
 * Model and optimizer code always call the collectives with the group they mean; on a
 * group of size 1 every call is a no-op (or a copy), which is the single-device path.
 * Host memory travels over MPI, device memory over NCCL (Distributed training I). */
#ifndef MC_COMM_COMM_H
#define MC_COMM_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

typedef enum { MC_REDUCE_SUM = 0, MC_REDUCE_MAX, MC_REDUCE_MIN } mc_reduce_op;

typedef struct mc_parallel_sizes {
    int tp, pp, cp, ep, dp; /* dp is derived: world / (tp*pp*cp) */
} mc_parallel_sizes;

typedef struct mc_group {
    const char *name; /* "tp", "dp", ... for error messages */
    int size, rank;   /* this process's rank within the group */
    int *ranks;       /* global ranks of the members, in group-rank order */
    void *impl;       /* transport handle (MPI_Comm, ncclComm_t), NULL for size 1 */
} mc_group;

typedef struct mc_comm {
    int world_size, rank, local_rank;
    mc_parallel_sizes sizes;
    /* Coordinates of this rank on the dense grid. */
    int tp_rank, cp_rank, dp_rank, pp_rank;
    mc_group world, tp, cp, dp, pp, dp_cp, mp; /* mp = tp x pp (model parallel) */
} mc_comm;

/* Computes the world's layout from the requested sizes and builds this rank's groups.
 * Fails with the divisibility rule spelled out (e.g. world % (TP*PP*CP)). */
int mc_comm_init(mc_comm *c, int world_size, int rank, int local_rank, int tp, int pp, int cp, int ep, mc_err *err);
void mc_comm_free(mc_comm *c);

/* The global ranks that form the group of kind `which` ("tp", "cp", "dp", "pp", "dp_cp")
 * containing global rank `rank` of a layout; pure arithmetic, for tests and planning.
 * Writes up to `cap` ranks into out and returns the group size. */
int mc_layout_group_ranks(int world_size, const mc_parallel_sizes *s, const char *which, int rank, int *out, int cap);

/* ---- collectives on backend memory ---- */
void mc_comm_all_reduce(mc_group *g, mc_backend *be, mc_tensor *x, mc_reduce_op op);
/* out = concat over ranks of in (along the first dim); numel(out) = size * numel(in). */
void mc_comm_all_gather(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
/* out = this rank's 1/size chunk of the sum of in over ranks. */
void mc_comm_reduce_scatter(mc_group *g, mc_backend *be, mc_tensor *out, const mc_tensor *in);
void mc_comm_broadcast(mc_group *g, mc_backend *be, mc_tensor *x, int root);

/* ---- collectives on host scalars (losses, norms, counters) ---- */
void mc_comm_all_reduce_host_f64(mc_group *g, double *vals, int n, mc_reduce_op op);
void mc_comm_barrier(mc_group *g);

#endif
