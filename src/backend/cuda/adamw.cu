/* adamw.cu: the AdamW step over all parameter segments in one launch, the split master's
 * join and split (backend.h's mc_master_hi), the sum of squares of a buffer and of many
 * ranges of one (grad-norm clipping), and the zero count.
 *
 * AdamW, per element, in the CPU backend's order (backend/cpu/adamw.c), every operation
 * rounded separately (__fmul_rn & co. keep nvcc from contracting into FMAs, so the result
 * is bitwise the CPU's):
 *   g = grad * grad_scale;  p = p * (1 - lr wd);  m = m + (1 - b1) (g - m)
 *   v = v b2 + (1 - b2) g g;  p = p + (-lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
 * with bc1, bc2 and the per-segment decay computed on the host in double, and grad_scale
 * either given or, with clipping on the device, derived by each thread from the reduced sum
 * of squares (mc_adamw_clip_scale: the same double operations as the host). A segment is
 * `count` elements at `offset` in param/exp_avg/exp_avg_sq and at `grad_offset` in grad
 * and param_copy (they differ when the optimizer state is this rank's shard). param_copy
 * (BF16, F16 or F32), when present, gets the new parameters. With param_lo (the SPLIT
 * kernel) the master is read from and written back to param_copy's BF16 high halves and
 * param_lo's low halves instead of param: the same arithmetic on the same F32 values.
 *
 * Multi-tensor launch: every segment is cut into chunks of ADAMW_CHUNK elements; the
 * segment table (offset, count, grad_offset, first chunk, decay) goes up once per call
 * through pinned staging; one block per chunk finds its segment by binary search in the
 * table (float4 accesses where the segment's offsets allow).
 *
 * Reductions are deterministic: a fixed grid (a function of the size and the device),
 * per-thread double accumulators over a fixed element assignment, block sums in a fixed
 * order into one double per block, and one block adding the partials in a fixed order. */
#include "backend/cuda/cuda_internal.h"

#include <math.h>
#include <string.h>

/* elements per chunk: AdamW runs one block per chunk; the sum of squares, a persistent grid
 * (one partial per block), takes bigger chunks */
enum { ADAMW_CHUNK = 4096, SUMSQ_CHUNK = 16384, ADAMW_THREADS = 256, RED_THREADS = 256 };

typedef struct seg_entry {
    int64_t offset, count, chunk_begin, grad_offset;
    float decay;
    int32_t pad;
} seg_entry;

typedef struct adamw_scalars {
    float grad_scale, one_minus_b1, b2, one_minus_b2, neg_step_size, bc2_sqrt, eps;
} adamw_scalars;

/* The segment holding chunk c: the last entry whose chunk_begin <= c (entries have
 * count > 0, so chunk_begin increases strictly). */
__device__ __forceinline__ int find_segment(const seg_entry *segs, int nseg, int64_t c) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (segs[mid].chunk_begin <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* One element's update (every operation rounded separately, as on the CPU). */
__device__ __forceinline__ void adamw_elem(float &p, float &m, float &v, float grad, float decay,
                                           const adamw_scalars &s) {
    const float g = __fmul_rn(grad, s.grad_scale);
    const float pi = __fmul_rn(p, decay);
    const float mi = __fadd_rn(m, __fmul_rn(s.one_minus_b1, __fsub_rn(g, m)));
    const float vi = __fadd_rn(__fmul_rn(v, s.b2), __fmul_rn(__fmul_rn(s.one_minus_b2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    p = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m = mi;
    v = vi;
}

/* The split master's elements: F32 from its halves, and back. */
__device__ __forceinline__ float master_of(uint32_t hi, uint32_t lo) {
    return __uint_as_float(mc_master_join((uint16_t)hi, (uint16_t)lo));
}
__device__ __forceinline__ void split_master(float p, uint16_t &hi, uint16_t &lo) {
    const uint32_t bits = __float_as_uint(p);
    hi = mc_master_hi(bits);
    lo = (uint16_t)bits;
}
/* Four of them in uint2s (element k in bits 16 (k % 2) of word k / 2). */
__device__ __forceinline__ float4 master_of4(uint2 hi, uint2 lo) {
    return make_float4(master_of(hi.x & 0xffffu, lo.x & 0xffffu), master_of(hi.x >> 16, lo.x >> 16),
                       master_of(hi.y & 0xffffu, lo.y & 0xffffu), master_of(hi.y >> 16, lo.y >> 16));
}
__device__ __forceinline__ void split_master4(float4 p, uint2 &hi, uint2 &lo) {
    uint16_t h[4], l[4];
    split_master(p.x, h[0], l[0]), split_master(p.y, h[1], l[1]);
    split_master(p.z, h[2], l[2]), split_master(p.w, h[3], l[3]);
    hi = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
    lo = make_uint2(l[0] | (uint32_t)l[1] << 16, l[2] | (uint32_t)l[3] << 16);
}

__device__ __forceinline__ void store_copy(void *param_copy, int copy_dt, int64_t gi, float p) {
    if (copy_dt == MC_BF16) ((__nv_bfloat16 *)param_copy)[gi] = __float2bfloat16_rn(p);
    else if (copy_dt == MC_F16) ((__half *)param_copy)[gi] = __float2half_rn(p);
    else if (copy_dt == MC_F32) ((float *)param_copy)[gi] = p;
}

/* vec: every buffer is 16-byte aligned, so a segment whose offset and grad_offset are
 * multiples of 4 runs on float4 accesses (chunks start at multiples of ADAMW_CHUNK); the
 * split master's halves then go four at a time as uint2. */
template <bool SPLIT>
__global__ void adamw_kernel(float *__restrict__ param, uint16_t *__restrict__ param_lo, const float *__restrict__ grad,
                             float *__restrict__ exp_avg, float *__restrict__ exp_avg_sq, void *__restrict__ param_copy,
                             int copy_dt, const seg_entry *__restrict__ segs, int nseg, int64_t total_chunks,
                             adamw_scalars s, bool vec, const double *grad_sumsq, double loss_scale, double clip_grad) {
    uint16_t *const hi16 = (uint16_t *)param_copy; /* SPLIT: the master's high halves */
    const int64_t chunk = ADAMW_CHUNK;
    /* every thread derives the same factor from the same double (the host's formula) */
    if (grad_sumsq && !mc_adamw_clip_scale(*grad_sumsq, loss_scale, clip_grad, &s.grad_scale)) return;
    for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
        const seg_entry seg = segs[find_segment(segs, nseg, c)];
        const int64_t local = (c - seg.chunk_begin) * chunk;
        const int64_t i0 = seg.offset + local, g0 = seg.grad_offset + local;
        const int64_t len = seg.count - local < chunk ? seg.count - local : chunk;
        const float decay = seg.decay;
        int64_t done = 0;
        if (vec && ((seg.offset | seg.grad_offset) & 3) == 0) {
            const int64_t n4 = len >> 2;
#pragma unroll 4
            for (int64_t q = threadIdx.x; q < n4; q += blockDim.x) {
                const int64_t i = i0 + 4 * q, gi = g0 + 4 * q;
                float4 p = SPLIT ? master_of4(*reinterpret_cast<const uint2 *>(hi16 + gi),
                                              *reinterpret_cast<const uint2 *>(param_lo + i))
                                 : *reinterpret_cast<const float4 *>(param + i);
                float4 m = *reinterpret_cast<const float4 *>(exp_avg + i);
                float4 v = *reinterpret_cast<const float4 *>(exp_avg_sq + i);
                const float4 g = *reinterpret_cast<const float4 *>(grad + gi);
                adamw_elem(p.x, m.x, v.x, g.x, decay, s);
                adamw_elem(p.y, m.y, v.y, g.y, decay, s);
                adamw_elem(p.z, m.z, v.z, g.z, decay, s);
                adamw_elem(p.w, m.w, v.w, g.w, decay, s);
                *reinterpret_cast<float4 *>(exp_avg + i) = m;
                *reinterpret_cast<float4 *>(exp_avg_sq + i) = v;
                if (SPLIT) {
                    uint2 h, l;
                    split_master4(p, h, l);
                    *reinterpret_cast<uint2 *>(hi16 + gi) = h;
                    *reinterpret_cast<uint2 *>(param_lo + i) = l;
                    continue;
                }
                *reinterpret_cast<float4 *>(param + i) = p;
                if (copy_dt == MC_BF16) {
                    uint2 u;
                    u.x = mc_bf16pair(p.x, p.y), u.y = mc_bf16pair(p.z, p.w);
                    *reinterpret_cast<uint2 *>((__nv_bfloat16 *)param_copy + gi) = u;
                } else if (copy_dt == MC_F32) {
                    *reinterpret_cast<float4 *>((float *)param_copy + gi) = p;
                } else if (copy_dt == MC_F16) {
                    store_copy(param_copy, copy_dt, gi, p.x), store_copy(param_copy, copy_dt, gi + 1, p.y);
                    store_copy(param_copy, copy_dt, gi + 2, p.z), store_copy(param_copy, copy_dt, gi + 3, p.w);
                }
            }
            done = n4 * 4;
        }
        for (int64_t j = done + threadIdx.x; j < len; j += blockDim.x) {
            const int64_t i = i0 + j, gi = g0 + j;
            float p = SPLIT ? master_of(hi16[gi], param_lo[i]) : param[i], m = exp_avg[i], v = exp_avg_sq[i];
            adamw_elem(p, m, v, grad[gi], decay, s);
            exp_avg[i] = m;
            exp_avg_sq[i] = v;
            if (SPLIT) {
                split_master(p, hi16[gi], param_lo[i]);
            } else {
                param[i] = p;
                store_copy(param_copy, copy_dt, gi, p);
            }
        }
    }
}

/* Fills the staged table with the non-empty segments; returns their number and the total
 * chunk count. */
static int build_table(mc_cuda_state *st, const char *op, const mc_adamw_segment *segments, int nsegments, float lr,
                       bool with_decay, int64_t chunk, int64_t *total_chunks) {
    seg_entry *tab = (seg_entry *)mc_cuda_table_staging(st, (size_t)(nsegments > 0 ? nsegments : 1) * sizeof(seg_entry), op);
    int n = 0;
    int64_t chunks = 0;
    for (int i = 0; i < nsegments; i++) {
        const mc_adamw_segment *sg = &segments[i];
        if (sg->count == 0) continue;
        seg_entry e;
        memset(&e, 0, sizeof e);
        e.offset = sg->offset;
        e.count = sg->count;
        e.chunk_begin = chunks;
        e.grad_offset = sg->grad_offset;
        e.decay = with_decay ? (float)(1.0 - (double)lr * (double)sg->weight_decay) : 1.0f;
        tab[n++] = e;
        chunks += (sg->count + chunk - 1) / chunk;
    }
    *total_chunks = chunks;
    return n;
}

/* One block per chunk (the hardware overlaps the blocks' latencies); the kernels still
 * loop, should the count ever exceed the grid limit. */
static unsigned chunk_grid(int64_t total_chunks) {
    const int64_t cap = (int64_t)1 << 30;
    return (unsigned)(total_chunks < cap ? total_chunks : cap);
}

void mc_cuda_adamw(mc_backend *be, const mc_adamw_desc *d) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "adamw";
    bool copy = mc_tensor_present(&d->param_copy);
    int copy_dt = copy ? (int)d->param_copy.dtype : -1;
    if (d->nsegments == 0) return;
    double bc1 = 1.0 - pow((double)d->beta1, (double)d->step);
    double bc2 = 1.0 - pow((double)d->beta2, (double)d->step);
    adamw_scalars s;
    s.grad_scale = d->grad_scale;
    s.one_minus_b1 = (float)(1.0 - (double)d->beta1);
    s.b2 = d->beta2;
    s.one_minus_b2 = (float)(1.0 - (double)d->beta2);
    s.neg_step_size = (float)(-(double)d->lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    s.eps = d->eps;
    int64_t total_chunks = 0;
    int nseg = build_table(st, op, d->segments, d->nsegments, d->lr, true, ADAMW_CHUNK, &total_chunks);
    if (nseg == 0) return;
    const seg_entry *segs = (const seg_entry *)mc_cuda_table_commit(st, (size_t)nseg * sizeof(seg_entry), op);
    unsigned grid = chunk_grid(total_chunks);
    bool vec = mc_cuda_aligned16(d->param) && mc_cuda_aligned16(d->param_lo) && mc_cuda_aligned16(d->grad) &&
               mc_cuda_aligned16(d->exp_avg) && mc_cuda_aligned16(d->exp_avg_sq) &&
               (!copy || mc_cuda_aligned16(d->param_copy.data));
    void *pc = copy ? d->param_copy.data : NULL;
    if (d->param_lo)
        adamw_kernel<true><<<grid, ADAMW_THREADS, 0, st->stream>>>(NULL, d->param_lo, d->grad, d->exp_avg,
                                                                   d->exp_avg_sq, pc, copy_dt, segs, nseg,
                                                                   total_chunks, s, vec, d->grad_sumsq,
                                                                   d->loss_scale, d->clip_grad);
    else
        adamw_kernel<false><<<grid, ADAMW_THREADS, 0, st->stream>>>(d->param, NULL, d->grad, d->exp_avg,
                                                                    d->exp_avg_sq, pc, copy_dt, segs, nseg,
                                                                    total_chunks, s, vec, d->grad_sumsq,
                                                                    d->loss_scale, d->clip_grad);
    MC_CUDA_LAUNCHED(st, op);
}

/* ---- the split master ---- */

/* Chunk c of the segments: its first state index, first grad index and length. */
__device__ __forceinline__ int64_t chunk_at(const seg_entry *segs, int nseg, int64_t c, int64_t *i0, int64_t *g0) {
    const seg_entry seg = segs[find_segment(segs, nseg, c)];
    const int64_t local = (c - seg.chunk_begin) * ADAMW_CHUNK;
    *i0 = seg.offset + local;
    *g0 = seg.grad_offset + local;
    return seg.count - local < ADAMW_CHUNK ? seg.count - local : ADAMW_CHUNK;
}

__global__ void master_join_kernel(float *__restrict__ master, const uint16_t *__restrict__ copy,
                                   const uint16_t *__restrict__ lo, const seg_entry *__restrict__ segs, int nseg,
                                   int64_t total_chunks) {
    for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
        int64_t i0, g0;
        const int64_t len = chunk_at(segs, nseg, c, &i0, &g0);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) master[g0 + j] = master_of(copy[g0 + j], lo[i0 + j]);
    }
}

__global__ void master_split_kernel(uint16_t *__restrict__ copy, uint16_t *__restrict__ lo,
                                    const float *__restrict__ master, const seg_entry *__restrict__ segs, int nseg,
                                    int64_t total_chunks) {
    for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
        int64_t i0, g0;
        const int64_t len = chunk_at(segs, nseg, c, &i0, &g0);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) split_master(master[g0 + j], copy[g0 + j], lo[i0 + j]);
    }
}

/* The segment table on the device for a kernel of a block per chunk; NULL: no element. */
static const seg_entry *chunk_table(mc_cuda_state *st, const char *op, const mc_adamw_segment *segments, int nsegments,
                                    int *nseg, int64_t *total_chunks) {
    *nseg = build_table(st, op, segments, nsegments, 0.0f, false, ADAMW_CHUNK, total_chunks);
    return *nseg ? (const seg_entry *)mc_cuda_table_commit(st, (size_t)*nseg * sizeof(seg_entry), op) : NULL;
}

void mc_cuda_master_join(mc_backend *be, float *master, const uint16_t *copy, const uint16_t *lo,
                         const mc_adamw_segment *segments, int nsegments) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "master_join";
    int nseg;
    int64_t total_chunks;
    const seg_entry *segs = chunk_table(st, op, segments, nsegments, &nseg, &total_chunks);
    if (!segs) return;
    master_join_kernel<<<chunk_grid(total_chunks), ADAMW_THREADS, 0, st->stream>>>(master, copy, lo, segs, nseg,
                                                                                   total_chunks);
    MC_CUDA_LAUNCHED(st, op);
}

void mc_cuda_master_split(mc_backend *be, uint16_t *copy, uint16_t *lo, const float *master,
                          const mc_adamw_segment *segments, int nsegments) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "master_split";
    int nseg;
    int64_t total_chunks;
    const seg_entry *segs = chunk_table(st, op, segments, nsegments, &nseg, &total_chunks);
    if (!segs) return;
    master_split_kernel<<<chunk_grid(total_chunks), ADAMW_THREADS, 0, st->stream>>>(copy, lo, master, segs, nseg,
                                                                                    total_chunks);
    MC_CUDA_LAUNCHED(st, op);
}

/* ---- reductions ---- */

template <typename T, bool VEC>
__global__ void sumsq_kernel(double *partials, const T *x, int64_t n) {
    __shared__ double red[32];
    double s = 0.0;
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mc_load_group<T, VEC>(x, g * 8, n, v); /* zeros past n */
#pragma unroll
        for (int k = 0; k < 8; k++) s += (double)v[k] * (double)v[k];
    }
    s = mc_block_sum_d(s, red);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sumsq_segments_kernel(double *partials, const float *__restrict__ buf, const seg_entry *segs, int nseg,
                                      int64_t total_chunks, bool vec) {
    __shared__ double red[32];
    const int64_t chunk = SUMSQ_CHUNK;
    double s = 0.0;
    for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
        const seg_entry seg = segs[find_segment(segs, nseg, c)];
        const int64_t local = (c - seg.chunk_begin) * chunk;
        const int64_t i0 = seg.offset + local;
        const int64_t len = seg.count - local < chunk ? seg.count - local : chunk;
        int64_t done = 0;
        if (vec && (seg.offset & 3) == 0) {
            const int64_t n4 = len >> 2;
#pragma unroll 4
            for (int64_t q = threadIdx.x; q < n4; q += blockDim.x) {
                const float4 v = *reinterpret_cast<const float4 *>(buf + i0 + 4 * q);
                s += (double)v.x * (double)v.x + (double)v.y * (double)v.y + (double)v.z * (double)v.z +
                     (double)v.w * (double)v.w;
            }
            done = n4 * 4;
        }
        for (int64_t j = done + threadIdx.x; j < len; j += blockDim.x) {
            const double v = (double)buf[i0 + j];
            s += v * v;
        }
    }
    s = mc_block_sum_d(s, red);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/* result[0] = sum of partials[0 .. nparts) in a fixed order */
__global__ void finish_sum_kernel(double *result, const double *partials, int nparts) {
    __shared__ double red[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partials[i];
    s = mc_block_sum_d(s, red);
    if (threadIdx.x == 0) result[0] = s;
}

template <typename T, bool VEC>
__global__ void count_zeros_kernel(unsigned long long *result, const T *x, int64_t n) {
    unsigned long long z = 0;
    const int64_t groups = (n + 7) / 8;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mc_load_group<T, VEC>(x, g * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) z += (g * 8 + k < n && v[k] == 0.0f) ? 1ull : 0ull;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if ((threadIdx.x & 31) == 0 && z) atomicAdd(result, z); /* integer: order-independent */
}

/* The reduction result: device -> pinned host, synchronously. */
static void fetch_result(mc_cuda_state *st, const char *op, size_t bytes) {
    MC_CUDA_CHECK(cudaMemcpyAsync(st->host_result, st->red_result, bytes, cudaMemcpyDeviceToHost, st->stream), op);
    mc_cuda_sync_checked(st, op);
}

static unsigned red_grid(const mc_cuda_state *st, int64_t work_items) {
    int64_t g = (work_items + RED_THREADS - 1) / RED_THREADS;
    int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / RED_THREADS);
    if (cap > MC_CUDA_RED_MAX_BLOCKS) cap = MC_CUDA_RED_MAX_BLOCKS;
    if (g > cap) g = cap;
    if (g < 1) g = 1;
    return (unsigned)g;
}

double mc_cuda_sumsq(mc_backend *be, const mc_tensor *x) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "sumsq";
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return 0.0;
    unsigned grid = red_grid(st, (n + 7) / 8);
    bool vec = mc_cuda_aligned16(x->data);
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T, const T *p = (const T *)x->data;
        if (vec) sumsq_kernel<T, true><<<grid, RED_THREADS, 0, st->stream>>>(st->red_partials, p, n);
        else sumsq_kernel<T, false><<<grid, RED_THREADS, 0, st->stream>>>(st->red_partials, p, n));
    MC_CUDA_LAUNCHED(st, op);
    finish_sum_kernel<<<1, RED_THREADS, 0, st->stream>>>((double *)st->red_result, st->red_partials, (int)grid);
    MC_CUDA_LAUNCHED(st, op);
    fetch_result(st, op, sizeof(double));
    return *(const double *)st->host_result;
}

void mc_cuda_sumsq_segments(mc_backend *be, double *out, const float *buf, const mc_adamw_segment *segments,
                            int nsegments) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "sumsq_segments";
    int64_t total_chunks = 0;
    int nseg = nsegments > 0 ? build_table(st, op, segments, nsegments, 0.0f, false, SUMSQ_CHUNK, &total_chunks) : 0;
    if (nseg == 0) {
        MC_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), st->stream), op);
        return;
    }
    const seg_entry *segs = (const seg_entry *)mc_cuda_table_commit(st, (size_t)nseg * sizeof(seg_entry), op);
    int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / RED_THREADS);
    if (cap > MC_CUDA_RED_MAX_BLOCKS) cap = MC_CUDA_RED_MAX_BLOCKS;
    unsigned grid = (unsigned)(total_chunks < cap ? total_chunks : cap);
    sumsq_segments_kernel<<<grid, RED_THREADS, 0, st->stream>>>(st->red_partials, buf, segs, nseg, total_chunks,
                                                                mc_cuda_aligned16(buf));
    MC_CUDA_LAUNCHED(st, op);
    finish_sum_kernel<<<1, RED_THREADS, 0, st->stream>>>(out, st->red_partials, (int)grid);
    MC_CUDA_LAUNCHED(st, op);
}

int64_t mc_cuda_count_zeros(mc_backend *be, const mc_tensor *x) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "count_zeros";
    int64_t n = mc_tensor_numel(x);
    if (n == 0) return 0;
    MC_CUDA_CHECK(cudaMemsetAsync(st->red_result, 0, sizeof(unsigned long long), st->stream), op);
    unsigned grid = red_grid(st, (n + 7) / 8);
    bool vec = mc_cuda_aligned16(x->data);
    unsigned long long *res = (unsigned long long *)st->red_result;
    MC_CUDA_DISPATCH_FLOAT(x->dtype, op, T, const T *p = (const T *)x->data;
        if (vec) count_zeros_kernel<T, true><<<grid, RED_THREADS, 0, st->stream>>>(res, p, n);
        else count_zeros_kernel<T, false><<<grid, RED_THREADS, 0, st->stream>>>(res, p, n));
    MC_CUDA_LAUNCHED(st, op);
    fetch_result(st, op, sizeof(unsigned long long));
    return (int64_t)*(const unsigned long long *)st->host_result;
}
