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
 * one block), and loss and dlogits come from there, half the bytes of the two passes. */
#include <cooperative_groups.h>

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
    xent_warp_combine(m, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? red_m[lane] : -INFINITY;
        s = lane < nwarps ? red_s[lane] : 0.0f;
        xent_warp_combine(m, s);
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

/* ---- one pass without tensor parallelism (xent_fused) ----
 *
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
 * a choice from the occupancy arithmetic, not a timing; MC_TEST_BENCH times the shapes. */
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
    xent_warp_combine(m, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? red_m[lane] : -INFINITY;
        s = lane < nwarps ? red_s[lane] : 0.0f;
        xent_warp_combine(m, s);
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

/* ---- entries ---- */

void mc_cuda_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                           const mc_tensor *targets, int64_t vocab_start) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_rowstats";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    if (n == 0) return;
    MC_ASSERT(v > 0, "cuda xent_rowstats: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_rowstats: %lld rows", (long long)n);
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
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_f32_numel(op, "local_max", local_max, n);
    mc_cuda_check_f32_numel(op, "global_max", global_max, n);
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
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "loss", loss, n);
    mc_cuda_check_f32_numel(op, "rowmax", rowmax, n);
    mc_cuda_check_f32_numel(op, "stats", stats, 2 * n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    const float *mk = NULL;
    if (mc_tensor_present(mask)) {
        mc_cuda_check_f32_numel(op, "mask", mask, n);
        mk = (const float *)mask->data;
    }
    if (n == 0) return;
    float *lo = (float *)loss->data;
    const float *rm = (const float *)rowmax->data, *s = (const float *)stats->data;
    if (!mc_tensor_present(dlogits)) {
        xent_loss_kernel<<<mc_cuda_grid(st, n, 256), 256, 0, st->stream>>>(lo, rm, s, n);
        MC_CUDA_LAUNCHED(st, op);
        return;
    }
    mc_cuda_check_dtype(op, "dlogits", dlogits, logits->dtype);
    mc_cuda_check_2d(op, "dlogits", dlogits, n, v);
    MC_ASSERT(v > 0, "cuda xent_loss_grad: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff, "cuda xent_loss_grad: %lld rows", (long long)n);
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

/* The split of a row of v elements of esz bytes for xent_fused: the cluster size (see the
 * kernel's notes) and the slice in elements, or 0 when the row is too long for it. */
static int xent_fused_plan(const mc_cuda_state *st, int64_t v, size_t esz, int64_t *slice) {
    const size_t cap = st->smem_optin > XENT_FUSED_SMEM_RESERVE ? st->smem_optin - XENT_FUSED_SMEM_RESERVE : 0;
    const size_t target = XENT_FUSED_SLICE_TARGET < cap ? XENT_FUSED_SLICE_TARGET : cap;
    for (int c = 1; c <= XENT_FUSED_MAX_CLUSTER; c *= 2) {
        const int64_t s = ((v + c - 1) / c + 7) / 8 * 8;
        const size_t bytes = (size_t)s * esz;
        if (bytes <= target || (c == XENT_FUSED_MAX_CLUSTER && bytes <= cap)) {
            *slice = s;
            return c;
        }
    }
    return 0;
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
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = C;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(n * C)); /* cluster i = blocks [C i, C i + C) = row i */
    cfg.blockDim = dim3(slice >= 8192 ? XENT_FUSED_THREADS : 256);
    cfg.dynamicSmemBytes = (size_t)slice * sizeof(T);
    cfg.stream = st->stream;
    cfg.attrs = attr;
    cfg.numAttrs = C > 1 ? 1 : 0; /* one block per row: a plain launch */
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

void mc_cuda_xent_fused(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                        const mc_tensor *targets, const mc_tensor *mask, float grad_scale) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "xent_fused";
    mc_cuda_check_float(op, "logits", logits);
    int64_t n = mc_cuda_rows(logits), v = mc_cuda_cols(logits);
    mc_cuda_check_f32_numel(op, "loss", loss, n);
    mc_cuda_check_dtype(op, "targets", targets, MC_I32);
    mc_cuda_check_numel(op, "targets", targets, n);
    const float *mk = NULL;
    if (mc_tensor_present(mask)) {
        mc_cuda_check_f32_numel(op, "mask", mask, n);
        mk = (const float *)mask->data;
    }
    const bool grad = mc_tensor_present(dlogits);
    if (grad) {
        mc_cuda_check_dtype(op, "dlogits", dlogits, logits->dtype);
        mc_cuda_check_2d(op, "dlogits", dlogits, n, v);
    }
    if (n == 0) return;
    MC_ASSERT(v > 0, "cuda xent_fused: logits have no columns");
    MC_ASSERT(n <= 0x7fffffff / XENT_FUSED_MAX_CLUSTER, "cuda xent_fused: %lld rows", (long long)n);
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
    MC_CUDA_DISPATCH_FLOAT(logits->dtype, op, T, T *dl = grad ? (T *)dlogits->data : NULL;
        const T *l = (const T *)logits->data;
        if (vec) xent_fused_run<T, true>(st, op, c, n, v, slice, lo, dl, l, tg, mk, grad_scale);
        else xent_fused_run<T, false>(st, op, c, n, v, slice, lo, dl, l, tg, mk, grad_scale));
}
