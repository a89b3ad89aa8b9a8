/* xent.cu: vocab-parallel softmax cross-entropy: one pass for each row's max, sum of
 * exponentials and target logit (the max folded in on the fly: the sum is rescaled whenever
 * a larger value appears, so the logits are read once), a rescale of the sums to the
 * tensor-parallel group's max, then loss and gradient. logits [N, V_local] are F32, BF16 or
 * F16; rowmax, stats [2, N], loss and mask are F32. One block per row (V up to 128256 and
 * beyond), 16-byte loads when the row length and the pointer allow, F32 accumulation,
 * reductions in a fixed order. dlogits may alias logits (each element is read before the
 * same thread writes it).
 *
 * Without tensor parallelism (xent_fused) the two passes become one: the row is read from
 * HBM once into shared memory (split over a thread-block cluster when it is too long for
 * one block), and loss and dlogits come from there, half the bytes of the two passes. Rows
 * that start 16-byte aligned and hold whole groups of 8 stream through persistent clusters,
 * the copy engine moving them in and out (xent_stream_kernel); the others take one cluster
 * a row (xent_fused_kernel). */
#include <cooperative_groups.h>
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

namespace cg = cooperative_groups;

static int xent_threads(int64_t v) { return v >= 65536 ? 1024 : v >= 8192 ? 512 : 256; }

/* (m, s) <- the pair for the union of two sets of logits, each s relative to its own m.
 * Commutative in floating point, so both lanes of a butterfly get the same bits. */
__device__ __forceinline__ void xent_combine(float &m, float &s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    s = M == -INFINITY ? 0.0f : s * __expf(m - M) + s2 * __expf(m2 - M);
    m = M;
}

__device__ __forceinline__ void xent_warp_combine(float &m, float &s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        xent_combine(m, s, m2, s2);
    }
}

/* The block's pair: each warp's butterfly, its lane 0's pair into red_m/red_s (one entry a
 * warp, nwarps of them), a barrier, then warp 0's butterfly over those: afterwards every
 * lane of warp 0 holds the block's pair (the other warps keep their warp's). */
__device__ __forceinline__ void xent_block_combine(float &m, float &s, float *red_m, float *red_s, int nwarps) {
    xent_warp_combine(m, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? red_m[lane] : -INFINITY;
        s = lane < nwarps ? red_s[lane] : 0.0f;
        xent_warp_combine(m, s);
    }
}

template <typename T, bool VEC>
__global__ void xent_rowstats_kernel(float *rowmax, float *stats, const T *logits, const int32_t *targets, int64_t n,
                                     int64_t v, int64_t vocab_start) {
    __shared__ float red_m[32], red_s[32];
    const int64_t row = blockIdx.x;
    const T *lr = logits + row * v;
    const int64_t groups = (v + 7) / 8;
    float m = -INFINITY, s = 0.0f;
    /* XU groups a thread per round, loaded before any is used (several 16-byte loads in
     * flight per thread: one at a time left this kernel latency-bound at ~2 TB/s) */
    constexpr int XU = 4;
    for (int64_t g0 = threadIdx.x; g0 < groups; g0 += XU * (int64_t)blockDim.x) {
        float x[XU][8];
#pragma unroll
        for (int u = 0; u < XU; u++) {
            const int64_t g = g0 + u * (int64_t)blockDim.x;
            if (g < groups) {
                mc_load_group<T, VEC>(lr, g * 8, v, x[u]);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (!VEC && g * 8 + k >= v) x[u][k] = -INFINITY;
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) x[u][k] = -INFINITY;
            }
        }
        float gm = -INFINITY;
#pragma unroll
        for (int u = 0; u < XU; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) gm = fmaxf(gm, x[u][k]);
        if (gm > m) { /* a new maximum: the sum so far, relative to it (0 * exp(-inf) = 0 at first) */
            s *= __expf(m - gm);
            m = gm;
        }
        /* m is finite here (group g0 has a real logit), so exp(-inf - m) = 0 for the padding */
#pragma unroll
        for (int u = 0; u < XU; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) s += __expf(x[u][k] - m); /* ex2.approx: rel. error ~1e-7 near the max */
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    xent_block_combine(m, s, red_m, red_s, nwarps);
    if (warp == 0) {
        if (lane == 0) {
            const int64_t local = (int64_t)targets[row] - vocab_start;
            rowmax[row] = m;
            stats[row] = s;
            stats[n + row] = (local >= 0 && local < v) ? mc_ld(lr + local) : 0.0f;
        }
    }
}

__global__ void xent_rescale_kernel(float *stats, const float *local_max, const float *global_max, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        stats[i] *= __expf(local_max[i] - global_max[i]);
}

__device__ __forceinline__ float xent_loss_of(const float *rowmax, const float *stats, int64_t n, int64_t row) {
    return (float)(log((double)stats[row]) + (double)rowmax[row] - (double)stats[n + row]);
}

__global__ void xent_loss_kernel(float *loss, const float *rowmax, const float *stats, int64_t n) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < n; row += (int64_t)gridDim.x * blockDim.x)
        loss[row] = xent_loss_of(rowmax, stats, n, row);
}

template <typename T, bool VEC>
__global__ void xent_loss_grad_kernel(float *loss, T *dlogits, const T *logits, const float *rowmax,
                                      const float *stats, const int32_t *targets, const float *mask, int64_t n,
                                      int64_t v, int64_t vocab_start, float grad_scale) {
    const int64_t row = blockIdx.x;
    if (threadIdx.x == 0) loss[row] = xent_loss_of(rowmax, stats, n, row);
    const float m = rowmax[row], sum = stats[row];
    const float w = grad_scale * (mask ? mask[row] : 1.0f);
    const int64_t local = (int64_t)targets[row] - vocab_start;
    const T *lr = logits + row * v;
    T *dr = dlogits + row * v;
    const int64_t groups = (v + 7) / 8;
    if (w == 0.0f) {
        float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) mc_store_group<T, VEC>(dr, g * 8, v, z);
        return;
    }
    const float coef = w / sum;
#pragma unroll 2
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(lr, g * 8, v, x);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float d = __expf(x[k] - m) * coef;
            if (g * 8 + k == local) d -= w;
            x[k] = d;
        }
        mc_store_group<T, VEC>(dr, g * 8, v, x);
    }
}

/* ---- one pass without tensor parallelism (xent_fused): one cluster a row ----
 *
 * For the rows the streaming kernel below does not take: logits not 16-byte aligned or
 * V % 8 != 0 (the element path, VEC false); dlogits not 16-byte aligned (VEC false: this
 * kernel writes them, the streaming one the loss); and 16-byte rows that the streaming
 * kernel cannot launch (the 16-byte path, VEC true): not one of its clusters resident on
 * the device, or two stages of its slice too large where one slice of this kernel's fits
 * (which needs an opt-in shared-memory limit that is not a multiple of 64 bytes).
 * A cluster of C blocks (C = 1, 2 or 4; thread-block clusters are sm_90, which both of the
 * build's targets, sm_90a and compute_90, have) owns one row: block r holds the slice
 * [r S, r S + S) of it as raw elements in its dynamic shared memory, S a multiple of 8 so
 * that every slice starts on a 16-byte boundary when the rows do. Phases:
 *   1. the slice from HBM into shared memory by cp.async, 16 bytes a copy, all of a thread's
 *      copies in flight at once (no registers held, unlike loads);
 *   2. each thread's (max, sum of exp relative to it) over its groups of 8, from shared
 *      memory;
 *   3. the block's pair: warp butterflies, then warp 0 over the warps (xent_combine, the
 *      rowstats kernel's order);
 *   4. the row's pair: each block publishes its pair in its shared memory, and after a
 *      cluster barrier one thread of every block combines the C pairs through distributed
 *      shared memory in rank order 0..C-1, so every block gets the same bits;
 *   5. the loss, written by the block holding the target (rank 0 when it is off the row);
 *   6. dlogits from shared memory with 16-byte stores, each block its own slice, so dlogits
 *      may alias logits (the slice is in shared memory before any store).
 * No atomics: the result depends only on the row and the launch shape (from V, the dtype
 * and the device's shared memory), so two runs agree bit for bit. A block may not exit while
 * another block of its cluster can still read its pair: it arrives at a second cluster
 * barrier once its own remote reads are done and waits on it only at the very end, after
 * its stores, so that barrier costs no waiting in practice.
 *
 * The split (xent_fused_plan): the smallest C whose slice is at most 64 KiB, so that three
 * 512-thread blocks fit on a multiprocessor (228 KiB) and one block's load overlaps the
 * others' arithmetic and stores (GPT-2's 50304 BF16 logits: 2 x 49 KiB; Llama 3's 128256:
 * 4 x 63 KiB); rows longer than 4 x 64 KiB take 4 blocks with up to the opt-in limit each
 * (F32 rows up to ~232K logits); longer rows run the two-pass kernels above. The 64 KiB is
 * a choice from the occupancy arithmetic, not a timing. */
enum { XENT_FUSED_THREADS = 512, XENT_FUSED_MIN_BLOCKS = 3, XENT_FUSED_MAX_CLUSTER = 4 };
static const size_t XENT_FUSED_SLICE_TARGET = 64 << 10;
static const size_t XENT_FUSED_SMEM_RESERVE = 1024; /* the kernel's static shared arrays, with room */

template <typename T, bool VEC, int C>
__global__ void __launch_bounds__(XENT_FUSED_THREADS, XENT_FUSED_MIN_BLOCKS)
    xent_fused_kernel(float *loss, T *dlogits, const T *logits, const int32_t *targets, const float *mask, int64_t v,
                      int slice, float grad_scale) {
    extern __shared__ __align__(16) unsigned char xent_smem[];
    __shared__ float red_m[32], red_s[32];
    __shared__ float part[2], row_pair[2]; /* this block's (max, sum); the row's */
    T *buf = reinterpret_cast<T *>(xent_smem);
    const int rank = C > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const int64_t row = blockIdx.x / C, lo = (int64_t)rank * slice;
    const int len = (int)max((int64_t)0, min((int64_t)slice, v - lo)); /* a multiple of 8 when VEC */
    const T *src = logits + row * v + lo;

    /* 1. the slice into shared memory */
    if (VEC) {
        const uint32_t dst0 = (uint32_t)__cvta_generic_to_shared(buf);
        const char *src_bytes = reinterpret_cast<const char *>(src);
        const int copies = len * (int)sizeof(T) / 16;
        for (int c = threadIdx.x; c < copies; c += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst0 + 16u * (uint32_t)c),
                         "l"(src_bytes + 16 * (int64_t)c)
                         : "memory");
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else { /* rows not 16-byte aligned: element loads, XU of them in flight per thread */
        constexpr int XU = 4;
        for (int j0 = threadIdx.x; j0 < len; j0 += XU * blockDim.x) {
            T x[XU];
#pragma unroll
            for (int u = 0; u < XU; u++)
                if (j0 + u * (int)blockDim.x < len) x[u] = src[j0 + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < XU; u++)
                if (j0 + u * (int)blockDim.x < len) buf[j0 + u * blockDim.x] = x[u];
        }
    }
    __syncthreads();

    /* 2. this thread's max, then its sum relative to that max (a thread without logits
     * keeps (-inf, 0), which xent_combine absorbs) */
    const int groups = (len + 7) / 8;
    float m = -INFINITY, s = 0.0f;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(buf, g * 8, len, x);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (VEC || g * 8 + k < len) m = fmaxf(m, x[k]);
    }
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        float x[8];
        mc_load_group<T, VEC>(buf, g * 8, len, x);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (VEC || g * 8 + k < len) s += __expf(x[k] - m);
    }

    /* 3. the block's pair */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    xent_block_combine(m, s, red_m, red_s, nwarps);
    if (warp == 0) {
        if (lane == 0) {
            part[0] = m, part[1] = s;
            if (C == 1) row_pair[0] = m, row_pair[1] = s;
        }
    }

    /* 4. the row's pair */
    if (C > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync(); /* every block's pair is published, and every block has started */
        if (threadIdx.x == 0) {
            float M = -INFINITY, S = 0.0f; /* (-inf, 0) combined with pair 0 is pair 0 exactly */
#pragma unroll
            for (int r = 0; r < C; r++) {
                const float *p = cluster.map_shared_rank(part, r);
                xent_combine(M, S, p[0], p[1]);
            }
            row_pair[0] = M, row_pair[1] = S;
        }
        __syncthreads();
        cluster.barrier_arrive(); /* this block's reads of the others' pairs are done */
    } else {
        __syncthreads();
    }
    const float M = row_pair[0], S = row_pair[1];

    /* 5. the loss, as xent_loss_of computes it */
    const int64_t tgt = targets[row], local = tgt - lo; /* the target's index in this slice */
    const bool on_row = tgt >= 0 && tgt < v;
    if (threadIdx.x == 0 && (on_row ? local >= 0 && local < len : rank == 0)) {
        const float tl = on_row ? mc_ld(buf + local) : 0.0f;
        loss[row] = (float)(log((double)S) + (double)M - (double)tl);
    }

    /* 6. dlogits, as xent_loss_grad_kernel computes them */
    if (dlogits) {
        T *dst = dlogits + row * v + lo;
        const float w = grad_scale * (mask ? mask[row] : 1.0f), coef = w / S;
        for (int g = threadIdx.x; g < groups; g += blockDim.x) {
            float x[8];
            if (w == 0.0f) {
#pragma unroll
                for (int k = 0; k < 8; k++) x[k] = 0.0f;
            } else {
                mc_load_group<T, VEC>(buf, g * 8, len, x);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float d = __expf(x[k] - M) * coef;
                    if (g * 8 + k == local) d -= w;
                    x[k] = d;
                }
            }
            mc_store_group<T, VEC>(dst, g * 8, len, x);
        }
    }
    if (C > 1) cg::this_cluster().barrier_wait(); /* no exit while another block may read `part` */
}

/* ---- the streaming kernel: xent_fused's default for 16-byte rows ----
 *
 * The kernel above runs each block through load, wait, three passes, a cluster barrier and
 * the stores, once, so an SM's memory pipe idles whenever its blocks compute or wait at the
 * same time, which blocks started together a wave at a time tend to. On the H200 it takes 0.366
 * ms for GPT-2's [4096, 50304] BF16 head chunk: 824 MB at 2.25 TB/s, half of the 4.3 TB/s a
 * device copy reaches. This kernel keeps bytes in flight on every multiprocessor all the time
 * instead, by its structure:
 *   - persistent clusters: cluster i owns rows i, i + G, i + 2G, ... (G clusters, as many as
 *     are resident at once, trimmed so that all run the same number of rows), block r of a
 *     cluster the slice [r S, r S + S) of each, as above;
 *   - two stages of shared memory a block, each one slice: row k + 1 lands in one while row k
 *     is combined and differentiated in the other;
 *   - the slice cut into one contiguous chunk per warp; the warp's lane 0 moves the chunk
 *     with the copy engine (cp.async.bulk, one instruction for up to ~14 KB, completing on
 *     the warp's mbarrier for that stage) and the warp alone reads and writes it, so loads,
 *     statistics, dlogits and stores of a chunk need no block-wide barrier;
 *   - one pass over shared memory for the statistics (each lane's max and sum of exp
 *     relative to it, the sum rescaled when a group of 8 raises the max, as the rowstats
 *     kernel), one pass for dlogits written back in place, then the chunk goes out by a bulk
 *     store (cp.async.bulk.global.shared::cta) while the warp moves on;
 *   - per row, the block's pair (warp butterflies, warp 0 over the warps) and the row's pair
 *     (one cluster barrier; thread 0 combines the blocks' pairs through distributed shared
 *     memory in rank order) exactly as above, the only points where warps wait for others.
 * Per row and chunk, in each warp:
 *   1. wait for the chunk of row k (stage b = k % 2, mbarrier phase k / 2 % 2);
 *   2. statistics over it;
 *   3. lane 0 refills the other stage with row k + 1's chunk once the bulk store of row k - 1
 *      has read it (cp.async.bulk.wait_group.read; the store went out a statistics pass
 *      earlier);
 *   4. the block's and the row's pair (the row k + 1 load is in flight meanwhile), the loss;
 *   5. dlogits into the chunk, fence.proxy.async (ordinary stores before the copy engine reads
 *      them), __syncwarp, lane 0's bulk store.
 * Bytes in flight: at every point of a row a block has a chunk load or a chunk store
 * outstanding for each warp (the row k + 1 load from step 3 to step 1 of the next row, the
 * row k store from step 5 to step 3 of the next row), and where rows are split (C > 1)
 * three or four blocks share each multiprocessor, so the one window without either, a
 * warp's statistics after its store has drained, is covered by the other blocks (with C = 1
 * it stays open, and costs less than the cluster barrier a row it saves: see the split).
 *
 * The split (xent_stream_plan): C = 1, a whole row a block, when two stages of it fit the
 * opt-in shared memory (BF16 rows up to ~57K logits on the H200): no cluster barrier a row,
 * and a block a multiprocessor already keeps its loads and stores in flight (GPT-2's 50304
 * logits: a 1.7% faster training step than with C = 4; bench/RESULTS.md). Longer rows take the smallest C in 2, 4, 8 whose slice is at most 32
 * KiB, so that a block's two stages take at most 64 KiB and three or more blocks share a
 * multiprocessor (228 KiB), else 8 blocks with up to half the opt-in limit a stage (BF16 up
 * to ~460K logits); the rest run the kernel above. (A 64 KiB target, C = 4 for Llama 3's
 * rows, gained nothing measurable.) On the H200 (132
 * multiprocessors, ~1.98 GHz):
 *   GPT-2 [8192, 50304] BF16: C = 1, slices of 50304 (98.3 KiB, 8 chunks of 12.3 KiB), 197
 *     KiB a block, 1 block a multiprocessor, 132 resident, 131 launched, 63 rows each;
 *   Llama 3 [8192, 128256] BF16: C = 8, slices of 16032 (31.3 KiB, chunks of 3.9 KiB), 63
 *     KiB a block, 3 blocks a multiprocessor, ~49 clusters resident, 8192 / ceil(8192 / G)
 *     launched.
 * Budget a multiprocessor for one BF16 logit, at 4.3 TB/s / 132 = 32.6 GB/s each: 4 bytes of
 * HBM (read and written) = 0.123 ns; two ex2 on MUFU (16 a clock) = 0.063 ns; 12.5 issue
 * slots (the SASS: 57 per group of 8 in the statistics, 43 in dlogits; 128 a clock) = 0.049
 * ns. So the kernel stays memory-bound while the loads and stores overlap the arithmetic,
 * which the stages and the per-warp chunks give it: the floor of a [4096, 50304] chunk is
 * 0.19 ms (824 MB), of a [2048, 128256] one 0.245 ms (1.05 GB). (The kernel above reads shared memory three
 * times, pays __expf's extra five instructions twice a logit, and its blocks, started
 * together a wave at a time, most likely load, compute and store in step.) On the H200 this
 * kernel takes 282 us for [4096, 50304] BF16 in place, the kernel above 327 (bench/RESULTS.md).
 * e^(x - m) is ex2.approx.ftz(x log2e - m log2e): one FFMA and one MUFU (__expf adds five
 * instructions of subnormal handling per call here); results below 2^-126 flush to 0, far
 * below a sum's rounding or a gradient that matters.
 *
 * Results: each row's loss and dlogits depend only on the row and C (from V, the dtype and
 * the device's opt-in shared memory), not on the number of clusters, so two runs agree bit
 * for bit and the loss is the same with and without dlogits. Not the bits of the kernel
 * above (the sums run in another order; the tests compare each with the CPU). Shared
 * memory that others read: a block's pair of row k is kept in part[k % 2], read by the
 * other blocks between the cluster barriers of rows k and k + 1, and written again only
 * after the barrier of row k + 1; a final cluster barrier keeps every block resident until
 * the others' last reads, and each lane 0 waits for its bulk stores to complete before the
 * block ends. */
enum {
    XENT_STREAM_THREADS = 256,
    XENT_STREAM_WARPS = XENT_STREAM_THREADS / 32,
    XENT_STREAM_MIN_BLOCKS = 3,
    XENT_STREAM_MAX_CLUSTER = 8,
};
static const size_t XENT_STREAM_STAGE_TARGET = 32 << 10;
#define XENT_LOG2E 1.4426950408889634f

__device__ __forceinline__ float xent_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* mbarriers and bulk copies (sm_90, in both of the build's targets). */
__device__ __forceinline__ uint32_t xent_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void xent_mbar_init(uint64_t *bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(xent_smem_addr(bar)) : "memory");
}
/* the inits visible to the copy engine (the async proxy) before the barrier that follows */
__device__ __forceinline__ void xent_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* Blocks until the phase of parity `parity` of bar has completed. A chunk lands within
 * microseconds; a phase still open after ~4 s (a lost copy, a byte count that does not
 * match) traps, so that the launch fails instead of holding the device forever. */
__device__ __forceinline__ void xent_mbar_wait(uint64_t *bar, uint32_t parity) {
    uint64_t t0 = 0;
    for (;;) {
        uint32_t done;
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}\n"
                     : "=r"(done)
                     : "r"(xent_smem_addr(bar)), "r"(parity)
                     : "memory");
        if (done) return;
        uint64_t t;
        asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
        if (t0 == 0) t0 = t;
        else if (t - t0 > (1ull << 32)) __trap();
    }
}
/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src into this block's
 * shared dst by the copy engine; bar's current phase completes when they have landed (bar
 * counts one arrival, this one, plus the bytes). */
__device__ __forceinline__ void xent_bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(xent_smem_addr(bar)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     xent_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(xent_smem_addr(bar))
                 : "memory");
}
/* bytes from this block's shared src to global dst by the copy engine, as one bulk group of
 * the issuing thread. */
__device__ __forceinline__ void xent_bulk_store(void *dst, const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(xent_smem_addr(src)),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* until this thread's bulk stores have read their shared source / have completed */
__device__ __forceinline__ void xent_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void xent_bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* this thread's ordinary shared-memory accesses ordered with the copy engine's */
__device__ __forceinline__ void xent_fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* The cluster barrier, every warp of the cluster arriving once, converged, and then waiting.
 * `release` (the same in all lanes of a warp) orders the warp's earlier writes before the
 * reads of any thread past the wait; the warps that published nothing arrive without it,
 * sparing them a GPU-wide MEMBAR. */
__device__ __forceinline__ void xent_cluster_barrier(bool release) {
    __syncwarp();
    if (release) asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    else asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

template <typename T, int C>
__global__ void __launch_bounds__(XENT_STREAM_THREADS, XENT_STREAM_MIN_BLOCKS)
    xent_stream_kernel(float *loss, T *dlogits, const T *logits, const int32_t *targets, const float *mask, int64_t n,
                       int64_t v, int slice, float grad_scale) {
    extern __shared__ __align__(128) unsigned char xent_stream_smem[]; /* [2][slice] T: the stages */
    __shared__ uint64_t chunk_full[2][XENT_STREAM_WARPS];              /* [stage][warp] */
    __shared__ float red_m[XENT_STREAM_WARPS], red_s[XENT_STREAM_WARPS];
    __shared__ float part[2][2]; /* [row parity]: this block's (max, sum) */
    __shared__ float row_pair[2];
    __shared__ float target_logit; /* written by the lane whose chunk holds the target */
    T *const stages = reinterpret_cast<T *>(xent_stream_smem);
    const int rank = C > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const int64_t lo = (int64_t)rank * slice, row_step = gridDim.x / C;
    const int len = (int)max((int64_t)0, min((int64_t)slice, v - lo)); /* a multiple of 8 */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, groups = len / 8;
    /* this warp's chunk: groups [g_begin, g_end) of the slice (the warps' shares differ by at
     * most one group; a warp of a short slice may have none) */
    const int g_begin = warp * groups / XENT_STREAM_WARPS, g_end = (warp + 1) * groups / XENT_STREAM_WARPS;
    const bool has_chunk = g_end > g_begin;
    const uint32_t chunk_bytes = (uint32_t)(g_end - g_begin) * 8u * (uint32_t)sizeof(T);
    const int64_t chunk_col = lo + 8 * (int64_t)g_begin; /* its first column in a row */
    T *const chunk0 = stages + 8 * g_begin; /* in stage 0; stage 1's is slice elements on */

    int64_t row = blockIdx.x / C;
    if (lane == 0 && has_chunk) {
        xent_mbar_init(&chunk_full[0][warp]);
        xent_mbar_init(&chunk_full[1][warp]);
        xent_mbar_init_fence();
    }
    __syncthreads();
    if (lane == 0 && has_chunk && row < n)
        xent_bulk_load(chunk0, logits + row * v + chunk_col, chunk_bytes, &chunk_full[0][warp]);

    for (int k = 0; row < n; row += row_step, k++) {
        const int b = k & 1;
        T *const sb = stages + (size_t)b * slice; /* this row's stage */
        const int64_t tgt = targets[row];
        const float w = grad_scale * (mask ? mask[row] : 1.0f);
        const bool on_row = tgt >= 0 && tgt < v, in_slice = on_row && tgt >= lo && tgt < lo + len;
        const int local = in_slice ? (int)(tgt - lo) : -1, tgt_group = in_slice ? local >> 3 : -1;

        /* 1-2. this lane's (max, sum of exp relative to it) over its groups of the chunk */
        float m = -INFINITY, s = 0.0f;
        if (has_chunk) {
            xent_mbar_wait(&chunk_full[b][warp], (uint32_t)(k >> 1) & 1u);
            for (int g = g_begin + lane; g < g_end; g += 32) {
                float x[8];
                mc_load8(sb + 8 * g, x);
                float gm = x[0];
#pragma unroll
                for (int e = 1; e < 8; e++) gm = fmaxf(gm, x[e]);
                if (gm > m) { /* a new maximum: the sum so far relative to it (0 at the first group) */
                    s *= xent_ex2((m - gm) * XENT_LOG2E);
                    m = gm;
                }
                const float m_log2 = m * XENT_LOG2E;
#pragma unroll
                for (int e = 0; e < 8; e++) s += xent_ex2(fmaf(x[e], XENT_LOG2E, -m_log2));
                if (g == tgt_group) target_logit = mc_ld(sb + local);
            }
        }

        /* 3. the other stage: row k + 1's chunk, once row k - 1's store has read it */
        const int64_t next = row + row_step;
        if (lane == 0 && has_chunk && next < n) {
            if (dlogits) xent_bulk_wait_read();
            xent_fence_async(); /* the warp's reads of row k - 1 before the copy engine's writes */
            xent_bulk_load(chunk0 + (size_t)(b ^ 1) * slice, logits + next * v + chunk_col, chunk_bytes,
                           &chunk_full[b ^ 1][warp]);
        }

        /* 4. the block's pair, then the row's, in thread 0 */
        xent_block_combine(m, s, red_m, red_s, XENT_STREAM_WARPS);
        if (C > 1 && warp == 0 && lane == 0) part[b][0] = m, part[b][1] = s;
        float tl = 0.0f; /* the target's logit, in thread 0 of the block that holds it */
        if (C > 1) {
            cg::cluster_group cluster = cg::this_cluster();
            xent_cluster_barrier(warp == 0); /* every block's pair of this row is published */
            if (threadIdx.x == 0) {
                m = -INFINITY, s = 0.0f; /* (-inf, 0) combined with pair 0 is pair 0 exactly */
#pragma unroll
                for (int r = 0; r < C; r++) {
                    const float *p = cluster.map_shared_rank(&part[b][0], r);
                    xent_combine(m, s, p[0], p[1]);
                }
            }
        }
        if (threadIdx.x == 0) {
            row_pair[0] = m, row_pair[1] = s;
            if (in_slice) tl = target_logit; /* read before the barrier: the next row's lane may write it */
        }
        __syncthreads();
        const float M = row_pair[0], S = row_pair[1];
        if (threadIdx.x == 0 && (on_row ? in_slice : rank == 0)) /* as xent_loss_of */
            loss[row] = (float)(log((double)S) + (double)M - (double)tl);

        /* 5. dlogits in place, then the chunk out by the copy engine */
        if (dlogits && has_chunk) {
            const float coef = w / S, M_log2 = M * XENT_LOG2E;
            for (int g = g_begin + lane; g < g_end; g += 32) {
                float x[8];
                if (w == 0.0f) {
#pragma unroll
                    for (int e = 0; e < 8; e++) x[e] = 0.0f;
                } else {
                    mc_load8(sb + 8 * g, x);
#pragma unroll
                    for (int e = 0; e < 8; e++) x[e] = xent_ex2(fmaf(x[e], XENT_LOG2E, -M_log2)) * coef;
                }
                /* the target's element again on its own, from its logit read before the group is
                 * overwritten (selecting it in x[] would index the array at run time) */
                const float xt = g == tgt_group ? mc_ld(sb + local) : 0.0f;
                mc_store8(sb + 8 * g, x);
                if (g == tgt_group && w != 0.0f) mc_st(sb + local, xent_ex2(fmaf(xt, XENT_LOG2E, -M_log2)) * coef - w);
            }
            xent_fence_async();
            __syncwarp();
            if (lane == 0) xent_bulk_store(dlogits + row * v + chunk_col, chunk0 + (size_t)b * slice, chunk_bytes);
        }
    }
    if (lane == 0) xent_bulk_wait_done();
    if (C > 1) xent_cluster_barrier(warp == 0); /* no exit while another block may read `part` */
}

/* ---- entries ---- */

/* The limits of these kernels (the backend's supports()): a row a block (a cluster for the
 * fused op) on a grid's 2^31 - 1 blocks. */
bool mc_cuda_xent_supports(const mc_op_sizes *s, mc_op_refusal *why) {
    const int64_t max_rows = s->op == MC_OP_XENT_FUSED ? 0x7fffffff / XENT_FUSED_MAX_CLUSTER : 0x7fffffff;
    if (s->rows <= max_rows) return true;
    why->operand = "logits";
    snprintf(why->expected, sizeof why->expected, "at most %lld rows (a grid's blocks)", (long long)max_rows);
    snprintf(why->given, sizeof why->given, "%lld", (long long)s->rows);
    return false;
}

void mc_cuda_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                           const mc_tensor *targets, int64_t vocab_start) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rowstats";
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    if (n == 0) return;
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data);
    int threads = xent_threads(v);
    float *rm = (float *)rowmax->data, *s = (float *)stats->data;
    const int32_t *tg = (const int32_t *)targets->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, const T *l = (const T *)logits->data;
        if (vec) xent_rowstats_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(rm, s, l, tg, n, v, vocab_start);
        else xent_rowstats_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(rm, s, l, tg, n, v, vocab_start));
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_xent_rescale(mc_backend *be, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rescale";
    int64_t n = mc_tensor_numel(local_max);
    if (n == 0) return;
    xent_rescale_kernel<<<mc_cuda_grid(st, n, 256), 256, 0, st->stream>>>(
        (float *)stats->data, (const float *)local_max->data, (const float *)global_max->data, n);
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_xent_loss_grad(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                            const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                            const mc_tensor *mask, int64_t vocab_start, float grad_scale) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_loss_grad";
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    const float *mk = mc_tensor_present(mask) ? (const float *)mask->data : NULL;
    if (n == 0) return;
    float *lo = (float *)loss->data;
    const float *rm = (const float *)rowmax->data, *s = (const float *)stats->data;
    if (!mc_tensor_present(dlogits)) {
        xent_loss_kernel<<<mc_cuda_grid(st, n, 256), 256, 0, st->stream>>>(lo, rm, s, n);
        MC_CUDA_LAUNCHED(st, op);
        return;
    }
    bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data) && mc_cuda_aligned16(dlogits->data);
    int threads = xent_threads(v);
    const int32_t *tg = (const int32_t *)targets->data;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, T *dl = (T *)dlogits->data; const T *l = (const T *)logits->data;
        if (vec)
            xent_loss_grad_kernel<T, true><<<(unsigned)n, threads, 0, st->stream>>>(lo, dl, l, rm, s, tg, mk, n, v,
                                                                                   vocab_start, grad_scale);
        else
            xent_loss_grad_kernel<T, false><<<(unsigned)n, threads, 0, st->stream>>>(lo, dl, l, rm, s, tg, mk, n, v,
                                                                                    vocab_start, grad_scale));
    MC_CUDA_LAUNCHED(st, op);
}

/* The split of a row of v elements of esz bytes over a cluster: the smallest power-of-two
 * cluster size up to max_c whose slice (a multiple of 8 elements) takes at most `target`
 * bytes, else max_c when its slice takes at most `cap`; 0 when not even that fits. The
 * slice, in elements, goes to *slice. */
static int xent_split(int64_t v, size_t esz, size_t target, size_t cap, int max_c, int64_t *slice) {
    if (target > cap) target = cap;
    for (int c = 1; c <= max_c; c *= 2) {
        const int64_t s = ((v + c - 1) / c + 7) / 8 * 8;
        const size_t bytes = (size_t)s * esz;
        if (bytes <= target || (c == max_c && bytes <= cap)) {
            *slice = s;
            return c;
        }
    }
    return 0;
}

/* The split for xent_fused_kernel (see its notes): one slice a block. */
static int xent_fused_plan(const mc_cuda_state *st, int64_t v, size_t esz, int64_t *slice) {
    const size_t cap = st->smem_optin > XENT_FUSED_SMEM_RESERVE ? st->smem_optin - XENT_FUSED_SMEM_RESERVE : 0;
    return xent_split(v, esz, XENT_FUSED_SLICE_TARGET, cap, XENT_FUSED_MAX_CLUSTER, slice);
}

/* The launch of a cluster kernel on the backend's stream: grid blocks of `threads`, smem
 * bytes of dynamic shared memory, clusters of C along x (*attr holds that attribute; C = 1:
 * none, a plain launch). */
static cudaLaunchConfig_t xent_cluster_config(const mc_cuda_state *st, int C, unsigned grid, unsigned threads,
                                              size_t smem, cudaLaunchAttribute *attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)C;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st->stream;
    cfg.attrs = attr;
    cfg.numAttrs = C > 1 ? 1 : 0;
    return cfg;
}

template <typename T, bool VEC, int C>
static void xent_fused_launch(mc_cuda_state *st, const char *op, int64_t n, int64_t v, int64_t slice, float *loss,
                              T *dl, const T *l, const int32_t *tg, const float *mk, float grad_scale) {
    void (*kernel)(float *, T *, const T *, const int32_t *, const float *, int64_t, int, float) =
        xent_fused_kernel<T, VEC, C>;
    /* the dynamic shared-memory limit, raised once per instantiation and device */
    static bool attr_set[64];
    bool *done = st->device >= 0 && st->device < 64 ? &attr_set[st->device] : NULL;
    if (!done || !*done) {
        MC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)(st->smem_optin - XENT_FUSED_SMEM_RESERVE)),
                      op);
        if (done) *done = true;
    }
    cudaLaunchAttribute attr;
    /* cluster i = blocks [C i, C i + C) = row i */
    cudaLaunchConfig_t cfg = xent_cluster_config(st, C, (unsigned)(n * C), slice >= 8192 ? XENT_FUSED_THREADS : 256,
                                                 (size_t)slice * sizeof(T), &attr);
    MC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, loss, dl, l, tg, mk, v, (int)slice, grad_scale), op);
    MC_CUDA_LAUNCHED(st, op);
}

template <typename T, bool VEC>
static void xent_fused_run(mc_cuda_state *st, const char *op, int c, int64_t n, int64_t v, int64_t slice, float *loss,
                           T *dl, const T *l, const int32_t *tg, const float *mk, float grad_scale) {
    switch (c) {
    case 1: xent_fused_launch<T, VEC, 1>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale); break;
    case 2: xent_fused_launch<T, VEC, 2>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale); break;
    default: xent_fused_launch<T, VEC, 4>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale); break;
    }
}

/* The split for the streaming kernel (see its notes): two stages of the slice a block. */
static int xent_stream_plan(const mc_cuda_state *st, int64_t v, size_t esz, int64_t *slice) {
    const size_t cap = st->smem_optin > XENT_FUSED_SMEM_RESERVE ? (st->smem_optin - XENT_FUSED_SMEM_RESERVE) / 2 : 0;
    if (xent_split(v, esz, cap, cap, 1, slice) == 1) return 1; /* a whole row a block */
    return xent_split(v, esz, XENT_STREAM_STAGE_TARGET, cap, XENT_STREAM_MAX_CLUSTER, slice);
}

/* Launches the streaming kernel over n rows, or returns false (nothing queued) when not one
 * of its clusters fits the device. The grid: as many clusters as are resident at once, less
 * where that still gives every cluster the same number of rows. */
template <typename T, int C>
static bool xent_stream_launch(mc_cuda_state *st, const char *op, int64_t n, int64_t v, int64_t slice, float *loss,
                               T *dl, const T *l, const int32_t *tg, const float *mk, float grad_scale) {
    void (*kernel)(float *, T *, const T *, const int32_t *, const float *, int64_t, int64_t, int, float) =
        xent_stream_kernel<T, C>;
    const size_t smem = 2 * (size_t)slice * sizeof(T);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = xent_cluster_config(st, C, C, XENT_STREAM_THREADS, smem, &attr); /* grid set below */
    /* per device: the attributes, set once, and the resident clusters for the last stage size */
    static struct {
        bool attrs_set;
        size_t smem;
        int clusters;
    } cache[64];
    const bool cached = st->device >= 0 && st->device < 64;
    int clusters = cached && cache[st->device].smem == smem ? cache[st->device].clusters : -1;
    if (clusters < 0) {
        if (!cached || !cache[st->device].attrs_set) {
            MC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)(st->smem_optin - XENT_FUSED_SMEM_RESERVE)),
                          op);
            /* all of the unified L1 as shared memory: the stages are what limits the blocks a
             * multiprocessor holds, and the copy engine's traffic does not go through L1 */
            MC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                               (int)cudaSharedmemCarveoutMaxShared),
                          op);
        }
        if (C == 1) {
            int per_sm = 0;
            MC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, XENT_STREAM_THREADS, smem), op);
            clusters = per_sm * st->sm_count;
        } else {
            MC_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg), op);
        }
        if (cached) cache[st->device].attrs_set = true, cache[st->device].smem = smem, cache[st->device].clusters = clusters;
    }
    if (clusters < 1) return false;
    const int64_t rounds = (n + clusters - 1) / clusters, launched = (n + rounds - 1) / rounds;
    cfg.gridDim = dim3((unsigned)(launched * C));
    MC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, loss, dl, l, tg, mk, n, v, (int)slice, grad_scale), op);
    MC_CUDA_LAUNCHED(st, op);
    return true;
}

/* The streaming kernel for 16-byte rows (v % 8 == 0, logits and dlogits 16-byte aligned), or
 * false (nothing queued) when it does not take them. */
template <typename T>
static bool xent_stream_run(mc_cuda_state *st, const char *op, int64_t n, int64_t v, float *loss, T *dl, const T *l,
                            const int32_t *tg, const float *mk, float grad_scale) {
    int64_t slice = 0;
    switch (xent_stream_plan(st, v, sizeof(T), &slice)) {
    case 1: return xent_stream_launch<T, 1>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale);
    case 2: return xent_stream_launch<T, 2>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale);
    case 4: return xent_stream_launch<T, 4>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale);
    case 8: return xent_stream_launch<T, 8>(st, op, n, v, slice, loss, dl, l, tg, mk, grad_scale);
    default: return false;
    }
}

/* xent_fused by the block-per-slice kernel, or by the two passes when its slices do not fit. */
static void xent_fused_blocks(mc_backend *be, mc_cuda_state *st, const char *op, mc_tensor *loss, mc_tensor *dlogits,
                              const mc_tensor *logits, const mc_tensor *targets, const mc_tensor *mask,
                              float grad_scale) {
    const int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    const bool grad = mc_tensor_present(dlogits);
    int64_t slice = 0;
    const int c = xent_fused_plan(st, v, mc_dtype_size(logits->dtype), &slice);
    if (c == 0) { /* rows longer than four blocks' shared memory: the two passes, stats in scratch */
        float *ws = (float *)mc_cuda_workspace(st, (size_t)(3 * n) * sizeof(float), op);
        mc_tensor rowmax = mc_tensor_1d(ws, MC_F32, n), stats = mc_tensor_2d(ws + n, MC_F32, 2, n);
        mc_cuda_xent_rowstats(be, &rowmax, &stats, logits, targets, 0);
        mc_cuda_xent_loss_grad(be, loss, dlogits, logits, &rowmax, &stats, targets, mask, 0, grad_scale);
        return;
    }
    const bool vec = v % 8 == 0 && mc_cuda_aligned16(logits->data) && (!grad || mc_cuda_aligned16(dlogits->data));
    float *lo = (float *)loss->data;
    const int32_t *tg = (const int32_t *)targets->data;
    const float *mk = mc_tensor_present(mask) ? (const float *)mask->data : NULL;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, T *dl = grad ? (T *)dlogits->data : NULL;
        const T *l = (const T *)logits->data;
        if (vec) xent_fused_run<T, true>(st, op, c, n, v, slice, lo, dl, l, tg, mk, grad_scale);
        else xent_fused_run<T, false>(st, op, c, n, v, slice, lo, dl, l, tg, mk, grad_scale));
}

void mc_cuda_xent_fused(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                        const mc_tensor *targets, const mc_tensor *mask, float grad_scale) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_fused";
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    const bool grad = mc_tensor_present(dlogits);
    if (n == 0) return;
    if (v % 8 != 0 || !mc_cuda_aligned16(logits->data)) {
        xent_fused_blocks(be, st, op, loss, dlogits, logits, targets, mask, grad_scale);
        return;
    }
    /* The streaming kernel stores dlogits 16 bytes at a time. When they are not aligned so, the
     * block kernel writes them, and the loss is then computed again by the streaming kernel,
     * so that it keeps the bits of a call without dlogits. */
    const bool dl16 = !grad || mc_cuda_aligned16(dlogits->data);
    if (!dl16) xent_fused_blocks(be, st, op, loss, dlogits, logits, targets, mask, grad_scale);
    float *lo = (float *)loss->data;
    const int32_t *tg = (const int32_t *)targets->data;
    const float *mk = mc_tensor_present(mask) ? (const float *)mask->data : NULL;
    bool streamed = false;
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, T *dl = dl16 && grad ? (T *)dlogits->data : NULL;
        streamed = xent_stream_run<T>(st, op, n, v, lo, dl, (const T *)logits->data, tg, mk, grad_scale));
    if (!streamed && dl16) xent_fused_blocks(be, st, op, loss, dlogits, logits, targets, mask, grad_scale);
}
