/* comm_staged.c: device memory over MPI (--distributed-backend mpi, comm.h's
 * mc_comm_set_device_over_mpi): each collective copies its device operands to host memory
 * (which waits for the backend's stream, so the work queued before it is done), runs the
 * host path's MPI collective on them, and copies the result back before it returns. Slower
 * than NCCL, but it needs no GPU of one's own per rank (several ranks share one GPU, which
 * NCCL refuses) and no NCCL at all, and its sums are the CPU path's, in the fixed order
 * comm.h states: every layout's GPU code can be checked on a machine with one GPU. */
#include <stdlib.h>

#include "base/error.h"
#include "comm/comm_internal.h"

/* One host staging buffer for the process, grown as needed: the blocking collectives run
 * on the calling thread, one at a time (plain memory: it outlives any one backend). */
static char *g_stage;
static size_t g_stage_bytes;

static char *stage(size_t bytes) {
    if (bytes > g_stage_bytes) {
        free(g_stage);
        g_stage_bytes = bytes + bytes / 4;
        g_stage = mc_xmalloc(g_stage_bytes);
    }
    return g_stage;
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

void mc_staged_all_reduce(mc_group_impl *gi, mc_backend *be, void *x, int64_t n, mc_dtype dt, mc_reduce_op op) {
    const size_t bytes = (size_t)n * mc_dtype_size(dt);
    char *h = stage(bytes);
    be->copy_d2h(be, h, x, bytes);
    mc_mpi_all_reduce(gi, false, h, n, dt, op);
    be->copy_h2d(be, x, h, bytes);
}

void mc_staged_all_gather(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_in, mc_dtype dt) {
    const size_t in_bytes = (size_t)n_in * mc_dtype_size(dt), out_bytes = in_bytes * (size_t)gi->size;
    char *h = stage(align64(in_bytes) + out_bytes), *hout = h + align64(in_bytes);
    be->copy_d2h(be, h, in, in_bytes); /* (in may be out's chunk: read before out is written) */
    mc_mpi_all_gather(gi, false, hout, h, n_in, dt);
    be->copy_h2d(be, out, hout, out_bytes);
}

void mc_staged_reduce_scatter(mc_group_impl *gi, mc_backend *be, void *out, const void *in, int64_t n_out,
                              mc_dtype dt, mc_reduce_op op) {
    const size_t out_bytes = (size_t)n_out * mc_dtype_size(dt), in_bytes = out_bytes * (size_t)gi->size;
    char *h = stage(align64(in_bytes) + out_bytes), *hout = h + align64(in_bytes);
    be->copy_d2h(be, h, in, in_bytes);
    mc_mpi_reduce_scatter(gi, false, hout, h, n_out, dt, op);
    be->copy_h2d(be, out, hout, out_bytes);
}

void mc_staged_broadcast(mc_group_impl *gi, mc_backend *be, void *x, size_t bytes, int root) {
    char *h = stage(bytes);
    if (gi->rank == root) be->copy_d2h(be, h, x, bytes);
    mc_mpi_broadcast(gi, h, bytes, root);
    if (gi->rank != root) be->copy_h2d(be, x, h, bytes);
}

void mc_staged_sendrecv(mc_group_impl *gi, mc_backend *be, const void *send, size_t send_bytes, int dst, void *recv,
                        size_t recv_bytes, int src) {
    char *h = stage(align64(send_bytes) + recv_bytes), *hrecv = h + align64(send_bytes);
    if (send) be->copy_d2h(be, h, send, send_bytes);
    mc_mpi_sendrecv(gi, send ? h : NULL, send_bytes, dst, recv ? hrecv : NULL, recv_bytes, src);
    if (recv) be->copy_h2d(be, recv, hrecv, recv_bytes);
}
