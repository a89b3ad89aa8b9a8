/* norm.cu: LayerNorm and RMSNorm over the last dim, forward and backward.
 *   layernorm: y = (x - mean) rstd w + b,  rstd = 1/sqrt(var + eps), biased variance
 *   rmsnorm:   y = x rstd w,               rstd = 1/sqrt(mean(x^2) + eps)
 * mean/rstd [N] are F32 whatever the activation dtype. Backward, with xhat = (x - mean) rstd
 * and g = dy w per row:
 *   layernorm: dx += rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm:   dx += rstd (g - xhat mean(g xhat))
 * and dw += sum_rows dy xhat, db += sum_rows dy into F32.
 *
 * Forward: one warp per row. Rows of at most 2048 in 16-byte groups (GPT-2's 768, Llama's
 * 2048): the row held in registers and the next row's loads issued before this row's warp
 * sums (norm_fwd_pipe_kernel); other rows: the row read three times (sum, centred sum of
 * squares, write; the re-reads hit L1/L2; norm_fwd_kernel). Either way the variance is
 * two-pass as on the CPU, with the same arithmetic, so the two kernels agree.
 * Backward, rows of at most 1024 in 16-byte groups: one warp per row, the row's x, dy and
 * dx in registers and the next row's loaded before this row's sums
 * (norm_bwd_warp_pipe_kernel; F32 rows of at most 512 only, see launch_bwd); rows of up to
 * 4096 in 16-byte groups: one thread per group, the block's rows streamed through registers
 * (norm_bwd_row_kernel). Other rows: a fixed grid
 * of blocks, each owning a fixed set of
 * rows (row = block, block + grid, ...); a block processes one row at a time with all its
 * threads (a block-wide sum of g and g xhat), and each thread owns fixed columns, so it
 * accumulates its columns' dw/db over the block's rows without any race (in shared memory
 * when 8 h bytes fit, else in the block's slice of the global partial buffer). A second
 * kernel adds the partial rows (of blocks or warps) in a fixed order (32 interleaved lanes,
 * then the lanes in order): deterministic, no atomics. dx may alias dy (each element is
 * read before the same thread writes it). The backward's second pass can also write the
 * forward's output y again (selective recomputation), through norm_out as the forward, so
 * bit for bit. */
#include "backend/cuda/cuda_internal.h"

enum { NORM_FWD_THREADS = 256, NORM_BWD_THREADS = 256, NORM_PIPE_THREADS = 128 };

/* One output element, (x - mean) rstd w (+ b): the forward and the backward's rewrite of y
 * share it, so both round alike. Every product and sum is rounded on its own (the _rn
 * intrinsics are never contracted into an FMA), because whether the compiler fuses
 * "* w + b" depends on the code around the call. */
__device__ __forceinline__ float norm_out(float v, float mean, float rstd, float w, bool has_b, float b) {
    const float o = __fmul_rn(__fmul_rn(__fsub_rn(v, mean), rstd), w);
    return has_b ? __fadd_rn(o, b) : o;
}

/* 8 elements of a row as loaded (16 bytes, 32 in F32), converted to F32 only where used, so
 * that a row's loads can be in flight while the previous row is reduced. */
template <typename T>
struct norm_raw8 { /* BF16, F16 */
    uint4 u;
    __device__ __forceinline__ void load(const T *p) { u = *reinterpret_cast<const uint4 *>(p); }
    __device__ __forceinline__ void get(float v[8]) const { mc_unpack8((const T *)nullptr, u, v); }
};
template <>
struct norm_raw8<float> {
    float4 a, b;
    __device__ __forceinline__ void load(const float *p) {
        a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    }
    __device__ __forceinline__ void get(float v[8]) const {
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
};

/* w or b (h elements, 16-byte aligned, h a multiple of 8) into shared memory as it is, 16
 * bytes a thread at a time: a warp reading its lanes' groups back then touches consecutive
 * 16-byte words, no bank conflicts (2-way in F32, whose group is 32 bytes). */
template <typename T>
__device__ __forceinline__ void norm_stage_param(T *dst, const T *src, int64_t h) {
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    for (int64_t i = threadIdx.x; i < h * (int64_t)sizeof(T) / 16; i += blockDim.x) d[i] = s[i];
}

/* ---- forward ---- */

template <typename T, bool VEC, bool LN>
__global__ void norm_fwd_kernel(T *y, float *mean_out, float *rstd_out, const T *x, const T *w, const T *b, int64_t n,
                                int64_t h, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t warps_total = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int64_t groups = (h + 7) / 8;
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < n; row += warps_total) {
        const T *xr = x + row * h;
        float mean = 0.0f;
        if (LN) {
            float s = 0.0f;
            for (int64_t g = lane; g < groups; g += 32) {
                float v[8];
                mc_load_group<T, VEC>(xr, g * 8, h, v);
#pragma unroll
                for (int k = 0; k < 8; k++) s += v[k];
            }
            s = mc_warp_sum(s);
            mean = (float)((double)s / (double)h);
        }
        float sq = 0.0f;
        for (int64_t g = lane; g < groups; g += 32) {
            float v[8];
            mc_load_group<T, VEC>(xr, g * 8, h, v);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float d = g * 8 + k < h ? v[k] - mean : 0.0f;
                sq += d * d;
            }
        }
        sq = mc_warp_sum(sq);
        const float rstd = (float)(1.0 / sqrt((double)sq / (double)h + (double)eps));
        T *yr = y + row * h;
        for (int64_t g = lane; g < groups; g += 32) {
            float v[8], wv[8], bv[8];
            mc_load_group<T, VEC>(xr, g * 8, h, v);
            mc_load_group<T, VEC>(w, g * 8, h, wv);
            if (LN && b) mc_load_group<T, VEC>(b, g * 8, h, bv);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = norm_out(v[k], mean, rstd, wv[k], LN && b, LN && b ? bv[k] : 0.0f);
            mc_store_group<T, VEC>(yr, g * 8, h, v);
        }
        if (lane == 0) {
            if (LN && mean_out) mean_out[row] = mean;
            if (rstd_out) rstd_out[row] = rstd;
        }
    }
}

/* Bytes in flight: how the pipelined kernels (this forward, norm_bwd_warp_pipe_kernel) are
 * sized (by reasoning: no other sizing was timed). An H200 streams ~4.3 TB/s
 * over 132 SMs, ~32 KB per us an SM, so at ~1 us of loaded DRAM latency each SM needs ~32
 * KB of loads on the way. A warp that issues row i + 1's loads before it waits for row i
 * has one to two rows in flight and finishes two rows per latency; the three-pass forward,
 * and a warp-per-row backward that loads dx only after the sums and re-reads x and dy,
 * have at most one row in flight and wait twice or more per row (on the H200 the pipelined
 * LayerNorm forward of [65536, 768] takes 59 us, the three-pass one 81; bench/RESULTS.md). The
 * registers (cuobjdump, sm_90a, bf16; allocated 8 a thread at a time) decide the warps
 * per SM:
 *   forward, GPT-2's LayerNorm, h 768 (GPL 3): 62 registers, 8 blocks of 4 warps, 32 warps
 *     x 1.5 KB a row = 48-96 KB;
 *   forward, Llama's RMSNorm, h 2048 (GPL 8): 93 registers, 5 blocks, 20 warps x 4 KB =
 *     80-160 KB;
 *   backward, GPT-2's 768 (GPL 3): 162 registers, 3 blocks, 12 warps x 4.6 KB (x, dy, dx)
 *     = 55-110 KB; the stores (dx, y) leave without a wait and hold nothing up.
 * So one row ahead is enough. Loading two rows ahead (or working on two rows a warp) would
 * cost the backward 36 more registers a lane, 12 warps an SM down to 8, for about the same
 * bytes, and is not done. Blocks of 4 warps, not 8: at 162 registers an SM holds 3 blocks
 * of 128 threads (12 warps) but only 1 of 256 (8). The grid is one wave of resident blocks
 * (the occupancy calculator's count): each warp streams many rows (the GPT-2 backward:
 * 65536 rows / (132 x 12) warps, ~41) and pays the pipeline's first, unhidden trip once,
 * where a grid of several waves (the three-pass forward's cap is 32 blocks an SM) would pay
 * it once a wave (and in the backward add dw/db partial rows). The shortest stream, Llama's
 * forward, is 8192 rows over 132 x 20 warps, ~3 a warp: the first trip is a third of each
 * warp's, but at the start every warp has two rows on the way, 160 KB an SM, so even that
 * start is bandwidth-bound. */

/* Forward for rows in whole 16-byte groups, at most 32 GPL of them: one warp per row over
 * rows warp, warp + warps, ... of a grid that is resident at once. Lane l holds groups l,
 * l + 32, ... of its row in registers as loaded (norm_raw8), and the next row's loads are
 * issued before this row's warp sums, so a warp has a row on its way from memory while it
 * reduces the one before: one trip to memory per row, overlapped, instead of norm_fwd_kernel's
 * three passes each behind a reduction. The statistics are norm_fwd_kernel's term for term
 * (each lane adds its groups in the same order, the same warp tree, the same double divide
 * and sqrt), so the two agree bit for bit; w and b sit in shared memory as loaded. */
template <typename T, bool LN, int GPL>
__global__ void __launch_bounds__(NORM_PIPE_THREADS)
    norm_fwd_pipe_kernel(T *y, float *mean_out, float *rstd_out, const T *x, const T *w, const T *b, int64_t n,
                         int64_t h, float eps) {
    extern __shared__ uint4 norm_fwd_params_s[]; /* w [h], then b [h] (LayerNorm with bias), of T */
    T *w_s = reinterpret_cast<T *>(norm_fwd_params_s), *b_s = w_s + h;
    norm_stage_param(w_s, w, h);
    if (LN && b) norm_stage_param(b_s, b, h);
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t groups = h / 8, nw = blockDim.x >> 5, warps = (int64_t)gridDim.x * nw;
    int64_t row = (int64_t)blockIdx.x * nw + (threadIdx.x >> 5);
    norm_raw8<T> cur[GPL] = {}; /* this row's groups lane + 32 k (those past the row stay zero, unused) */
    if (row < n)
#pragma unroll
        for (int k = 0; k < GPL; k++)
            if (lane + 32 * k < groups) cur[k].load(x + row * h + (lane + 32 * k) * 8);
    for (; row < n; row += warps) {
        const int64_t next = row + warps;
        norm_raw8<T> nxt[GPL] = {};
        if (next < n)
#pragma unroll
            for (int k = 0; k < GPL; k++)
                if (lane + 32 * k < groups) nxt[k].load(x + next * h + (lane + 32 * k) * 8);
        float mean = 0.0f;
        if (LN) {
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < GPL; k++) {
                if (lane + 32 * k >= groups) break;
                float v[8];
                cur[k].get(v);
#pragma unroll
                for (int j = 0; j < 8; j++) s += v[j];
            }
            s = mc_warp_sum(s);
            mean = (float)((double)s / (double)h);
        }
        float sq = 0.0f;
#pragma unroll
        for (int k = 0; k < GPL; k++) {
            if (lane + 32 * k >= groups) break;
            float v[8];
            cur[k].get(v);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float d = v[j] - mean;
                sq += d * d;
            }
        }
        sq = mc_warp_sum(sq);
        const float rstd = (float)(1.0 / sqrt((double)sq / (double)h + (double)eps));
#pragma unroll
        for (int k = 0; k < GPL; k++) {
            const int64_t g = lane + 32 * k;
            if (g >= groups) break;
            float v[8], wv[8], bv[8] = {};
            norm_raw8<T> pw, pb;
            cur[k].get(v);
            pw.load(w_s + g * 8);
            pw.get(wv);
            if (LN && b) pb.load(b_s + g * 8), pb.get(bv);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = norm_out(v[j], mean, rstd, wv[j], LN && b, bv[j]);
            mc_store8(y + row * h + g * 8, v);
        }
        if (lane == 0) {
            if (LN && mean_out) mean_out[row] = mean;
            if (rstd_out) rstd_out[row] = rstd;
        }
#pragma unroll
        for (int k = 0; k < GPL; k++) cur[k] = nxt[k];
    }
}

/* The pipelined forward with GPL groups per lane: blocks of NORM_PIPE_THREADS, as many as
 * are resident at once (the occupancy calculator's count, once per instantiation and
 * device), so every warp streams many rows and pays the pipeline's first trip once. */
/* The grid of a pipelined kernel: as many blocks of NORM_PIPE_THREADS as are resident at
 * once with `smem` bytes each (the occupancy calculator's count, kept in cache[device],
 * one cache per kernel instantiation), at most one warp a row of the n. */
template <typename K>
static int64_t norm_pipe_grid(mc_cuda_state *st, const char *op, K kernel, int cache[64], size_t smem, int64_t n) {
    int *bps = st->device >= 0 && st->device < 64 ? &cache[st->device] : NULL, per_sm = bps ? *bps : 0;
    if (per_sm == 0) {
        MC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, NORM_PIPE_THREADS, smem), op);
        if (per_sm < 1) per_sm = 1;
        if (bps) *bps = per_sm;
    }
    const int64_t nw = NORM_PIPE_THREADS / 32;
    int64_t grid = (int64_t)st->sm_count * per_sm;
    return grid < (n + nw - 1) / nw ? grid : (n + nw - 1) / nw;
}

template <typename T, bool LN, int GPL>
static void launch_fwd_pipe(mc_cuda_state *st, const char *op, T *y, float *mean, float *rstd, const T *x,
                            const T *w, const T *b, int64_t n, int64_t h, float eps) {
    static int blocks_per_sm[64]; /* per device */
    const size_t smem = 2 * (size_t)h * sizeof(T);
    const int64_t grid = norm_pipe_grid(st, op, norm_fwd_pipe_kernel<T, LN, GPL>, blocks_per_sm, smem, n);
    norm_fwd_pipe_kernel<T, LN, GPL>
        <<<(unsigned)grid, NORM_PIPE_THREADS, smem, st->stream>>>(y, mean, rstd, x, w, b, n, h, eps);
    MC_CUDA_LAUNCHED(st, op);
}

/* Rows in whole 16-byte groups of at most 2048 elements (256 groups, 8 a lane; Llama's 2048
 * and GPT-2's 768 among them): the pipelined kernel; other rows: the three-pass one. */
template <typename T, bool LN>
static void launch_fwd(mc_cuda_state *st, const char *op, T *y, float *mean, float *rstd, const T *x, const T *w,
                       const T *b, int64_t n, int64_t h, float eps) {
    if (n == 0 || h == 0) return;
    bool vec = h % 8 == 0 && mc_cuda_aligned16(y) && mc_cuda_aligned16(x) && mc_cuda_aligned16(w) &&
               (!b || mc_cuda_aligned16(b));
    if (vec && h / 8 <= 32 * 8) {
        const int64_t groups = h / 8;
        if (groups <= 32) launch_fwd_pipe<T, LN, 1>(st, op, y, mean, rstd, x, w, b, n, h, eps);
        else if (groups <= 64) launch_fwd_pipe<T, LN, 2>(st, op, y, mean, rstd, x, w, b, n, h, eps);
        else if (groups <= 96) launch_fwd_pipe<T, LN, 3>(st, op, y, mean, rstd, x, w, b, n, h, eps);
        else if (groups <= 128) launch_fwd_pipe<T, LN, 4>(st, op, y, mean, rstd, x, w, b, n, h, eps);
        else launch_fwd_pipe<T, LN, 8>(st, op, y, mean, rstd, x, w, b, n, h, eps);
        return;
    }
    const int rows_per_block = NORM_FWD_THREADS / 32;
    int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
    int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / NORM_FWD_THREADS) * 4;
    unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
    if (vec) norm_fwd_kernel<T, true, LN><<<grid, NORM_FWD_THREADS, 0, st->stream>>>(y, mean, rstd, x, w, b, n, h, eps);
    else norm_fwd_kernel<T, false, LN><<<grid, NORM_FWD_THREADS, 0, st->stream>>>(y, mean, rstd, x, w, b, n, h, eps);
    MC_CUDA_LAUNCHED(st, op);
}

/* ---- backward ---- */

/* part_w/part_b: [gridDim.x, h] F32 partial sums (written whole by each block). In shared
 * memory the accumulators are k-major (index k * groups + g for column 8 g + k), so the
 * threads of a warp (consecutive g) touch consecutive words: no bank conflicts. */
template <typename T, bool VEC, bool LN>
__global__ void norm_bwd_kernel(T *dx, T *y, float *part_w, float *part_b, const T *dy, const T *x, const T *w,
                                const T *b, const float *mean, const float *rstd, int64_t n, int64_t h, bool use_smem,
                                bool want_w, bool want_b) {
    extern __shared__ float smem[]; /* [2, 8, groups] when use_smem */
    __shared__ float red_a[32], red_b[32];
    const int64_t groups = (h + 7) / 8;
    float *acc_w = use_smem ? smem : part_w + (int64_t)blockIdx.x * h;
    float *acc_b = use_smem ? smem + 8 * groups : part_b + (int64_t)blockIdx.x * h;
    const int64_t sg = use_smem ? 1 : 8, sk = use_smem ? groups : 1; /* column 8 g + k at g sg + k sk */
    /* each thread owns groups tid, tid + T, ...: zero its accumulators */
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x)
        for (int k = 0; k < 8; k++)
            if (g * 8 + k < h) acc_w[g * sg + k * sk] = 0.0f, acc_b[g * sg + k * sk] = 0.0f;
    for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
        const T *xr = x + row * h, *dyr = dy + row * h;
        const float m = LN ? mean[row] : 0.0f, r = rstd[row];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
            float xv[8], dv[8], wv[8];
            mc_load_group<T, VEC>(xr, g * 8, h, xv);
            mc_load_group<T, VEC>(dyr, g * 8, h, dv);
            mc_load_group<T, VEC>(w, g * 8, h, wv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (g * 8 + k < h) {
                    float xhat = (xv[k] - m) * r, gg = dv[k] * wv[k];
                    sum_g += gg;
                    sum_gx += gg * xhat;
                    if (want_w) acc_w[g * sg + k * sk] += dv[k] * xhat;
                    if (want_b) acc_b[g * sg + k * sk] += dv[k];
                }
            }
        }
        mc_block_sum2(sum_g, sum_gx, red_a, red_b);
        if (!dx && !y) continue;
        const float mean_g = LN ? (float)((double)sum_g / (double)h) : 0.0f;
        const float mean_gx = (float)((double)sum_gx / (double)h);
        for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
            float xv[8], dv[8], wv[8], o[8];
            mc_load_group<T, VEC>(xr, g * 8, h, xv);
            mc_load_group<T, VEC>(w, g * 8, h, wv);
            if (dx) {
                mc_load_group<T, VEC>(dyr, g * 8, h, dv);
                mc_load_group<T, VEC>(dx + row * h, g * 8, h, o);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float xhat = (xv[k] - m) * r;
                    o[k] += r * (dv[k] * wv[k] - mean_g - xhat * mean_gx);
                }
                mc_store_group<T, VEC>(dx + row * h, g * 8, h, o);
            }
            if (y) {
                if (LN && b) mc_load_group<T, VEC>(b, g * 8, h, dv);
#pragma unroll
                for (int k = 0; k < 8; k++) o[k] = norm_out(xv[k], m, r, wv[k], LN && b, LN && b ? dv[k] : 0.0f);
                mc_store_group<T, VEC>(y + row * h, g * 8, h, o);
            }
        }
    }
    if (use_smem) { /* to the block's partial rows, column-major as the reduction reads them */
        for (int64_t g = threadIdx.x; g < groups; g += blockDim.x)
            for (int k = 0; k < 8; k++) {
                int64_t c = g * 8 + k;
                if (c < h) {
                    if (want_w) part_w[(int64_t)blockIdx.x * h + c] = acc_w[k * groups + g];
                    if (want_b) part_b[(int64_t)blockIdx.x * h + c] = acc_b[k * groups + g];
                }
            }
    }
}

/* Backward for rows of at most 32 GPL 16-byte groups (GPL <= 4; see launch_bwd for F32):
 * one warp per row (rows part, part + parts, ... of warp `part`), so a row's two sums are
 * warp shuffles instead of block barriers and no thread idles when h is small (GPT-2's
 * 768). The loads are pipelined, as norm_bwd_row_kernel does for a block: lane l holds
 * groups l, l + 32, ... of its row's x, dy and dx in registers as loaded (dx loaded with x
 * and dy, not after the sums), and the next row's x, dy, dx, mean and rstd are loaded
 * before this row's warp sums, so each row is one trip to memory that overlaps the
 * previous row's arithmetic. Lane l keeps its groups' dw/db sums over the warp's rows in
 * registers and writes them once, as the warp's partial row (part_w[part, h]); w (and b)
 * sit in shared memory as loaded. Each element's arithmetic is the block kernel's, term
 * for term. dx may alias dy: a lane loads both of a row's groups before it writes that dx.
 * With DXSUM, lane l also sums the dx values it stores (rounded as stored) into a third
 * partial row, part_s: dx's column sums (backend.h's dxsum, a bias gradient). That costs
 * 32 registers (190 against 158 for GPT-2's rows in BF16), so it is its own instance; its
 * grid, sized by its occupancy, may differ, and so may the order of the dw/db sums. */
template <typename T, bool LN, int GPL, bool DXSUM>
__global__ void __launch_bounds__(NORM_PIPE_THREADS)
    norm_bwd_warp_pipe_kernel(T *dx, T *y, float *part_w, float *part_b, float *part_s, const T *dy, const T *x,
                              const T *w, const T *b, const float *mean, const float *rstd, int64_t n, int64_t h,
                              bool want_w, bool want_b) {
    extern __shared__ uint4 norm_bwd_params_s[]; /* w [h], then b [h] (rewriting a LayerNorm's y with bias), of T */
    T *w_s = reinterpret_cast<T *>(norm_bwd_params_s), *b_s = w_s + h;
    norm_stage_param(w_s, w, h);
    if (LN && b && y) norm_stage_param(b_s, b, h);
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t groups = h / 8, nw = blockDim.x >> 5;
    const int64_t part = (int64_t)blockIdx.x * nw + (threadIdx.x >> 5), parts = (int64_t)gridDim.x * nw;
    float aw[GPL][8], ab[GPL][8], as[DXSUM ? GPL : 1][8];
#pragma unroll
    for (int k = 0; k < GPL; k++)
#pragma unroll
        for (int j = 0; j < 8; j++) aw[k][j] = ab[k][j] = as[DXSUM ? k : 0][j] = 0.0f;
    /* row rw's groups lane + 32 k of x, dy (and dx) as loaded, its mean and rstd; nothing for
     * a row at or past n (the groups past the row, and dx without dx, stay as they are) */
    auto load_row = [&](int64_t rw, norm_raw8<T>(&lx)[GPL], norm_raw8<T>(&ldy)[GPL], norm_raw8<T>(&ldx)[GPL],
                        float &lm, float &lr) {
        if (rw >= n) return;
        lm = LN ? mean[rw] : 0.0f, lr = rstd[rw];
#pragma unroll
        for (int k = 0; k < GPL; k++) {
            if (lane + 32 * k >= groups) break;
            const int64_t off = rw * h + (lane + 32 * k) * 8;
            lx[k].load(x + off), ldy[k].load(dy + off);
            if (dx) ldx[k].load(dx + off);
        }
    };
    /* this row's groups (those past the row, and dx without dx, stay zero, unused) */
    norm_raw8<T> rx[GPL] = {}, rdy[GPL] = {}, rdx[GPL] = {};
    int64_t row = part;
    float m = 0.0f, r = 0.0f;
    load_row(row, rx, rdy, rdx, m, r);
    for (; row < n; row += parts) {
        const int64_t next = row + parts;
        norm_raw8<T> nx[GPL] = {}, ndy[GPL] = {}, ndx[GPL] = {};
        float nm = 0.0f, nr = 0.0f;
        load_row(next, nx, ndy, ndx, nm, nr);
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int k = 0; k < GPL; k++) {
            const int64_t g = lane + 32 * k;
            if (g >= groups) break;
            float xv[8], dv[8], wv[8];
            norm_raw8<T> pw;
            rx[k].get(xv);
            rdy[k].get(dv);
            pw.load(w_s + g * 8);
            pw.get(wv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float xhat = (xv[j] - m) * r, gg = dv[j] * wv[j];
                sum_g += gg;
                sum_gx += gg * xhat;
                aw[k][j] += dv[j] * xhat;
                ab[k][j] += dv[j];
            }
        }
        sum_g = mc_warp_sum(sum_g);
        sum_gx = mc_warp_sum(sum_gx);
        if (dx || y) {
            const float mean_g = LN ? (float)((double)sum_g / (double)h) : 0.0f;
            const float mean_gx = (float)((double)sum_gx / (double)h);
#pragma unroll
            for (int k = 0; k < GPL; k++) {
                const int64_t g = lane + 32 * k;
                if (g >= groups) break;
                float xv[8], wv[8], o[8];
                norm_raw8<T> pw;
                rx[k].get(xv);
                pw.load(w_s + g * 8);
                pw.get(wv);
                if (dx) {
                    float dv[8];
                    rdy[k].get(dv);
                    rdx[k].get(o);
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        const float xhat = (xv[j] - m) * r;
                        o[j] += r * (dv[j] * wv[j] - mean_g - xhat * mean_gx);
                    }
                    mc_store8(dx + row * h + g * 8, o);
                    if (DXSUM) { /* the stored values' sums: o rounded to T as mc_store8 did */
#pragma unroll
                        for (int j = 0; j < 8; j++) {
                            T t;
                            mc_st(&t, o[j]);
                            as[DXSUM ? k : 0][j] += mc_ld(&t);
                        }
                    }
                }
                if (y) {
                    float bv[8] = {};
                    if (LN && b) {
                        norm_raw8<T> pb;
                        pb.load(b_s + g * 8);
                        pb.get(bv);
                    }
#pragma unroll
                    for (int j = 0; j < 8; j++) o[j] = norm_out(xv[j], m, r, wv[j], LN && b, bv[j]);
                    mc_store8(y + row * h + g * 8, o);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < GPL; k++) rx[k] = nx[k], rdy[k] = ndy[k], rdx[k] = ndx[k];
        m = nm, r = nr;
    }
#pragma unroll
    for (int k = 0; k < GPL; k++) {
        const int64_t g = lane + 32 * k;
        if (g >= groups) break;
        if (want_w) mc_store8(part_w + part * h + g * 8, aw[k]);
        if (want_b) mc_store8(part_b + part * h + g * 8, ab[k]);
        if (DXSUM) mc_store8(part_s + part * h + g * 8, as[DXSUM ? k : 0]);
    }
}

/* Backward for rows of up to 512 16-byte groups (Llama's 2048 in bf16: 256 threads): one
 * thread per group, a block per row at a time over rows block, block + grid, ... The block
 * kernel above reloads a row after its block-wide sums and reads dx only then, two trips
 * to memory per row behind a barrier; here the row's x, dy and dx stay in registers, and
 * the next row's are loaded before this row's sums, so the loads overlap the barrier. w
 * (and b) are loaded once; each thread keeps its columns' dw/db sums in registers and
 * writes them once as the block's partial row. The arithmetic is the block kernel's, term
 * for term. */
template <typename T, bool LN>
__global__ void __launch_bounds__(512)
    norm_bwd_row_kernel(T *dx, T *y, float *part_w, float *part_b, const T *dy, const T *x, const T *w, const T *b,
                        const float *mean, const float *rstd, int64_t n, int64_t h, bool want_w, bool want_b) {
    __shared__ float red_a[32], red_b[32];
    const int64_t groups = h / 8, g = threadIdx.x, off = g * 8;
    const bool on = g < groups;
    float wv[8], bv[8], aw[8], ab[8];
#pragma unroll
    for (int j = 0; j < 8; j++) wv[j] = bv[j] = aw[j] = ab[j] = 0.0f;
    if (on) {
        mc_load8(w + off, wv);
        if (LN && b && y) mc_load8(b + off, bv);
    }
    norm_raw8<T> rx{}, rdy{}, rdx{};
    int64_t row = blockIdx.x;
    float m = 0.0f, r = 0.0f;
    if (row < n) {
        m = LN ? mean[row] : 0.0f, r = rstd[row];
        if (on) {
            rx.load(x + row * h + off), rdy.load(dy + row * h + off);
            if (dx) rdx.load(dx + row * h + off);
        }
    }
    for (; row < n; row += gridDim.x) {
        const int64_t next = row + gridDim.x;
        norm_raw8<T> nx = rx, ndy = rdy, ndx = rdx;
        float nm = 0.0f, nr = 0.0f;
        if (next < n) {
            nm = LN ? mean[next] : 0.0f, nr = rstd[next];
            if (on) {
                nx.load(x + next * h + off), ndy.load(dy + next * h + off);
                if (dx) ndx.load(dx + next * h + off);
            }
        }
        float xv[8], dv[8], sum_g = 0.0f, sum_gx = 0.0f;
        rx.get(xv);
        rdy.get(dv);
        if (on) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float xhat = (xv[j] - m) * r, gg = dv[j] * wv[j];
                sum_g += gg;
                sum_gx += gg * xhat;
                aw[j] += dv[j] * xhat;
                ab[j] += dv[j];
            }
        }
        mc_block_sum2(sum_g, sum_gx, red_a, red_b);
        if (on && dx) {
            const float mean_g = LN ? (float)((double)sum_g / (double)h) : 0.0f;
            const float mean_gx = (float)((double)sum_gx / (double)h);
            float o[8];
            rdx.get(o);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float xhat = (xv[j] - m) * r;
                o[j] += r * (dv[j] * wv[j] - mean_g - xhat * mean_gx);
            }
            mc_store8(dx + row * h + off, o);
        }
        if (on && y) {
            float o[8];
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = norm_out(xv[j], m, r, wv[j], LN && b, bv[j]);
            mc_store8(y + row * h + off, o);
        }
        rx = nx, rdy = ndy, rdx = ndx, m = nm, r = nr;
    }
    if (on) {
        if (want_w) mc_store8(part_w + (int64_t)blockIdx.x * h + off, aw);
        if (want_b) mc_store8(part_b + (int64_t)blockIdx.x * h + off, ab);
    }
}

/* out[c] += sum over p of part[p, c], for dw, db and the dx column sums ds (each
 * optional): block (32 columns x 32 lanes); lane ty sums parts ty, ty + 32, ... in double,
 * then the 32 lane sums are added in lane order. Fixed order: deterministic. Many blocks,
 * so the partial rows stream at full bandwidth. */
__global__ void norm_param_reduce_kernel(float *dw, float *db, float *ds, const float *part_w, const float *part_b,
                                         const float *part_s, int64_t nparts, int64_t h) {
    __shared__ double sh[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * 32 + tx;
    for (int which = 0; which < 3; which++) {
        float *out = which == 0 ? dw : which == 1 ? db : ds;
        const float *part = which == 0 ? part_w : which == 1 ? part_b : part_s;
        if (!out) continue; /* uniform over the block */
        double s = 0.0;
        if (c < h)
            for (int64_t p = ty; p < nparts; p += 32) s += (double)part[p * h + c];
        sh[ty][tx] = s;
        __syncthreads();
        if (ty == 0 && c < h) {
            double t = 0.0;
            for (int j = 0; j < 32; j++) t += sh[j][tx];
            out[c] += (float)t;
        }
        __syncthreads();
    }
}

template <typename T, bool VEC, bool LN>
static void launch_bwd_kernel(mc_cuda_state *st, const char *op, unsigned grid, size_t smem, T *dx, T *y, float *pw,
                              float *pb, const T *dy, const T *x, const T *w, const T *b, const float *mean,
                              const float *rstd, int64_t n, int64_t h, bool use_smem, bool want_w, bool want_b) {
    /* the dynamic shared-memory limit, raised once per instantiation and device */
    static bool attr_set[64];
    bool *done = st->device >= 0 && st->device < 64 ? &attr_set[st->device] : NULL;
    if (!done || !*done) {
        MC_CUDA_CHECK(cudaFuncSetAttribute(norm_bwd_kernel<T, VEC, LN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)st->smem_optin - 2 * 32 * (int)sizeof(float)),
                      op);
        if (done) *done = true;
    }
    norm_bwd_kernel<T, VEC, LN><<<grid, NORM_BWD_THREADS, smem, st->stream>>>(dx, y, pw, pb, dy, x, w, b, mean, rstd,
                                                                              n, h, use_smem, want_w, want_b);
    MC_CUDA_LAUNCHED(st, op);
}

/* The pipelined warp-per-row kernel: blocks of NORM_PIPE_THREADS, as many as are resident
 * at once (the registers decide), then the partial rows added as below. */
template <typename T, bool LN, int GPL, bool DXSUM>
static void launch_bwd_warp_pipe(mc_cuda_state *st, const char *op, T *dx, T *y, float *dw, float *db, float *ds,
                                 const T *dy, const T *x, const T *w, const T *b, const float *mean, const float *rstd,
                                 int64_t n, int64_t h) {
    static int blocks_per_sm[64]; /* per device */
    const size_t smem = 2 * (size_t)h * sizeof(T);
    const int64_t grid = norm_pipe_grid(st, op, norm_bwd_warp_pipe_kernel<T, LN, GPL, DXSUM>, blocks_per_sm, smem, n);
    const int64_t parts = grid * (NORM_PIPE_THREADS / 32);
    float *part = (float *)mc_cuda_workspace(st, 3 * (size_t)parts * (size_t)h * sizeof(float), op);
    float *pw = part, *pb = part + parts * h, *ps = part + 2 * parts * h;
    norm_bwd_warp_pipe_kernel<T, LN, GPL, DXSUM><<<(unsigned)grid, NORM_PIPE_THREADS, smem, st->stream>>>(
        dx, y, pw, pb, ps, dy, x, w, b, mean, rstd, n, h, dw != NULL, db != NULL);
    MC_CUDA_LAUNCHED(st, op);
    if (dw || db || ds) {
        norm_param_reduce_kernel<<<(unsigned)((h + 31) / 32), dim3(32, 32), 0, st->stream>>>(dw, db, ds, pw, pb, ps,
                                                                                              parts, h);
        MC_CUDA_LAUNCHED(st, op);
    }
}

template <typename T, bool LN, int GPL>
static void launch_bwd_warp_pipe(mc_cuda_state *st, const char *op, T *dx, T *y, float *dw, float *db, float *ds,
                                 const T *dy, const T *x, const T *w, const T *b, const float *mean, const float *rstd,
                                 int64_t n, int64_t h) {
    if (ds) launch_bwd_warp_pipe<T, LN, GPL, true>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
    else launch_bwd_warp_pipe<T, LN, GPL, false>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
}

/* The register-row kernel: blocks of the row's groups (rounded up to whole warps), a fixed
 * grid (the occupancy the registers allow), then the partial rows added as below. */
template <typename T, bool LN>
static void launch_bwd_row(mc_cuda_state *st, const char *op, T *dx, T *y, float *dw, float *db, const T *dy,
                           const T *x, const T *w, const T *b, const float *mean, const float *rstd, int64_t n,
                           int64_t h) {
    const int threads = (int)((h / 8 + 31) / 32 * 32);
    static int cached_threads[64], cached_per_sm[64]; /* per device: the occupancy for the last block size */
    const bool cache = st->device >= 0 && st->device < 64;
    int per_sm = cache && cached_threads[st->device] == threads ? cached_per_sm[st->device] : 0;
    if (per_sm == 0) {
        MC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_bwd_row_kernel<T, LN>, threads, 0),
                      op);
        if (per_sm < 1) per_sm = 1;
        if (cache) cached_threads[st->device] = threads, cached_per_sm[st->device] = per_sm;
    }
    int64_t grid = (int64_t)st->sm_count * per_sm;
    if (grid > n) grid = n;
    float *part = (float *)mc_cuda_workspace(st, 2 * (size_t)grid * (size_t)h * sizeof(float), op);
    float *pw = part, *pb = part + grid * h;
    norm_bwd_row_kernel<T, LN><<<(unsigned)grid, threads, 0, st->stream>>>(dx, y, pw, pb, dy, x, w, b, mean, rstd, n, h,
                                                                          dw != NULL, db != NULL);
    MC_CUDA_LAUNCHED(st, op);
    if (dw || db) {
        norm_param_reduce_kernel<<<(unsigned)((h + 31) / 32), dim3(32, 32), 0, st->stream>>>(dw, db, NULL, pw, pb,
                                                                                              NULL, grid, h);
        MC_CUDA_LAUNCHED(st, op);
    }
}

/* ds (optional): += the column sums of dx as stored, summed by the warp-per-row kernel as
 * it writes dx, or by a pass of the column-sum kernel after the other kernels. */
template <typename T, bool LN>
static void launch_bwd(mc_cuda_state *st, const char *op, T *dx, T *y, float *dw, float *db, float *ds, const T *dy,
                       const T *x, const T *w, const T *b, const float *mean, const float *rstd, int64_t n, int64_t h) {
    if (n == 0 || h == 0) return;
    if (!dx && !y && !dw && !db) return;
    const bool vec16 = h % 8 == 0 && mc_cuda_aligned16(dy) && mc_cuda_aligned16(x) && mc_cuda_aligned16(w) &&
                       (!dx || mc_cuda_aligned16(dx)) && (!y || mc_cuda_aligned16(y)) && (!b || mc_cuda_aligned16(b));
    /* rows of at most 1024: one warp per row (GPT-2's 768: 2.2x faster than a block per
     * row on an H200; at 2048 the block kernel was faster, 65 vs 83 us per 8192 rows). In
     * the pipelined kernel a lane holds two rows of x, dy and dx and its dw/db sums: F32
     * groups, twice the registers, spill past 2 a lane (GPL 4: 255 registers and a stack),
     * so F32 rows of 513 to 1024 take the register-row kernel below (F32 on a GPU is the
     * exact mode, not the one tuned here); gpl3's clamp keeps F32 instances of GPL 3 and 4
     * from being compiled (their branches are never taken). */
    constexpr int max_gpl = sizeof(T) == 2 ? 4 : 2, gpl3 = max_gpl < 3 ? max_gpl : 3;
    if (vec16 && h / 8 <= 32 * max_gpl) {
        const int64_t groups = h / 8;
        if (groups <= 32) launch_bwd_warp_pipe<T, LN, 1>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
        else if (groups <= 64) launch_bwd_warp_pipe<T, LN, 2>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
        else if (groups <= 96)
            launch_bwd_warp_pipe<T, LN, gpl3>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
        else launch_bwd_warp_pipe<T, LN, max_gpl>(st, op, dx, y, dw, db, ds, dy, x, w, b, mean, rstd, n, h);
        return;
    }
    if (vec16 && h <= 8 * 512) {
        launch_bwd_row<T, LN>(st, op, dx, y, dw, db, dy, x, w, b, mean, rstd, n, h);
        if (ds) mc_cuda_colsum_add(st, op, ds, dx, mc_dtype_of<T>(), n, h); /* after its reduction (workspace) */
        return;
    }
    size_t smem_need = 2 * 8 * (size_t)((h + 7) / 8) * sizeof(float);
    bool use_smem = smem_need + 2 * 32 * sizeof(float) <= st->smem_optin;
    size_t smem = use_smem ? smem_need : 0;
    /* blocks per SM by shared memory (and at most 2048 threads per SM) */
    int per_sm = st->max_threads_per_sm / NORM_BWD_THREADS;
    if (use_smem) {
        int by_smem = (int)(st->smem_per_sm / (smem + 1024 + 2 * 32 * sizeof(float)));
        if (by_smem < per_sm) per_sm = by_smem;
    }
    if (per_sm < 1) per_sm = 1;
    int64_t grid = (int64_t)st->sm_count * per_sm;
    if (grid > n) grid = n;
    float *part = (float *)mc_cuda_workspace(st, 2 * (size_t)grid * (size_t)h * sizeof(float), op);
    float *pw = part, *pb = part + grid * h;
    if (vec16)
        launch_bwd_kernel<T, true, LN>(st, op, (unsigned)grid, smem, dx, y, pw, pb, dy, x, w, b, mean, rstd, n, h,
                                       use_smem, dw != NULL, db != NULL);
    else
        launch_bwd_kernel<T, false, LN>(st, op, (unsigned)grid, smem, dx, y, pw, pb, dy, x, w, b, mean, rstd, n, h,
                                        use_smem, dw != NULL, db != NULL);
    if (dw || db) {
        norm_param_reduce_kernel<<<(unsigned)((h + 31) / 32), dim3(32, 32), 0, st->stream>>>(dw, db, NULL, pw, pb,
                                                                                              NULL, grid, h);
        MC_CUDA_LAUNCHED(st, op);
    }
    /* after the reduction: the column sums' partials take the same workspace */
    if (ds) mc_cuda_colsum_add(st, op, ds, dx, mc_dtype_of<T>(), n, h);
}

/* ---- dispatch ---- */

/* An optional operand's data, or NULL. */
static void *data_or_null(const mc_tensor *t) { return mc_tensor_present(t) ? t->data : NULL; }

void mc_cuda_layernorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                           const mc_tensor *w, const mc_tensor *b, float eps) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "layernorm_fwd";
    int64_t n = mc_cuda_rows(x), h = mc_cuda_cols(x);
    float *md = (float *)data_or_null(mean), *rd = (float *)data_or_null(rstd);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_fwd<T, true>(st, op, (T *)y->data, md, rd, (const T *)x->data, (const T *)w->data,
                                               (const T *)data_or_null(b), n, h, eps));
}

void mc_cuda_layernorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum, mc_tensor *y,
                           const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b,
                           const mc_tensor *mean, const mc_tensor *rstd) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "layernorm_bwd";
    int64_t n = mc_cuda_rows(x), h = mc_cuda_cols(x);
    float *dwd = (float *)data_or_null(dw), *dbd = (float *)data_or_null(db), *dsd = (float *)data_or_null(dxsum);
    void *dxd = data_or_null(dx), *yd = data_or_null(y);
    void *bd = yd ? data_or_null(b) : NULL;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_bwd<T, true>(st, op, (T *)dxd, (T *)yd, dwd, dbd, dsd, (const T *)dy->data,
                                               (const T *)x->data, (const T *)w->data, (const T *)bd,
                                               (const float *)mean->data, (const float *)rstd->data, n, h));
}

void mc_cuda_rmsnorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                         float eps) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "rmsnorm_fwd";
    int64_t n = mc_cuda_rows(x), h = mc_cuda_cols(x);
    float *rd = (float *)data_or_null(rstd);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_fwd<T, false>(st, op, (T *)y->data, NULL, rd, (const T *)x->data, (const T *)w->data,
                                                NULL, n, h, eps));
}

void mc_cuda_rmsnorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                         const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "rmsnorm_bwd";
    int64_t n = mc_cuda_rows(x), h = mc_cuda_cols(x);
    float *dwd = (float *)data_or_null(dw), *dsd = (float *)data_or_null(dxsum);
    void *dxd = data_or_null(dx), *yd = data_or_null(y);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T,
                           launch_bwd<T, false>(st, op, (T *)dxd, (T *)yd, dwd, NULL, dsd, (const T *)dy->data,
                                                (const T *)x->data, (const T *)w->data, NULL, NULL,
                                                (const float *)rstd->data, n, h));
}
