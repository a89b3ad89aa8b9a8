/* attention_kv.cu: causal attention of new tokens over a key/value cache, for generation
 * (backend.h's attention_kv_fwd; the CPU reference is backend/cpu/attention_kv.c).
 *
 * Two kernels, split-KV ("flash-decoding"):
 * - store: the new tokens' key and value heads into the cache at each token's own position
 *   (one thread an element);
 * - partial: a block per (new token t, KV group g, up to KV_HEADS of g's query heads, split
 *   s): it reads the key/value rows of split s's chunk of t's positions 0 .. pos[t] once for
 *   all its query heads, with a streaming softmax in F32, and writes its unnormalized output
 *   sums, max and sum to the partial buffer (or, with one split, the normalized output);
 *   the split that finishes last (a counter per block row) merges the splits' partials with
 *   the log-sum-exp rescaling into the output, in the tensor's dtype: no combine launch, and
 *   no wait for one, in a decode step that is mostly launches.
 * A decode step has few (token, group) pairs, so they alone would leave most of the
 * multiprocessors idle: the host splits each pair's positions over enough blocks to fill the
 * machine (kv_splits). Positions are read on the device only, so that a decode step's launches
 * stay the same from step to step (capturable in a CUDA graph): the host sizes the number
 * of splits from the token count and the cache capacity, and each block cuts its token's
 * own length into that many chunks (whole iterations of keys); a block whose chunk starts
 * past the token's last position writes an empty partial. A prompt's prefill runs through
 * the same kernels (many tokens: one split; each new token over its own prefix:
 * simple, not fast). A position outside the cache is reported as rope's are
 * (cuda_internal.h) and attends to nothing. */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int KV_MAX_D = 256;       /* head_dim <= 256: 8 dims a lane, at most 32 lanes a key row */
constexpr int KV_WARPS = 4;         /* warps of a partial block */
constexpr int KV_HEADS = 4;         /* query heads of one group a partial block serves */
constexpr int KV_UNROLL = 2;        /* key rows a row group (L lanes) has in flight at once */
constexpr int KV_MIN_CHUNK = 32;    /* the fewest cache positions worth a split of their own */
constexpr int KV_FILL = 4;          /* partial blocks a multiprocessor, split launches (kv_splits) */
constexpr int KV_MAX_SPLITS = 1024; /* the merge's weights of KV_HEADS heads fit in s_acc (4096 floats) */

template <typename T>
__global__ void kv_store_kernel(T *cache, const T *qkv, const int32_t *pos, int64_t ntok, int64_t B, int64_t cap,
                                int groups, int hpg, int d, int *err) {
    const int64_t per_tok = (int64_t)groups * 2 * d, total = ntok * per_tok;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / per_tok, r = i % per_tok; /* token t = s B + b */
        const int64_t p = pos[t];
        if (p < 0 || p >= cap) {
            if (r == 0) mc_cuda_device_error(err, MC_CUDA_DEVERR_KV_POS, (int)t, (int)p, (int)cap);
            continue;
        }
        const int g = (int)(r / (2 * d)), e = (int)(r % (2 * d));
        const T *src = qkv + t * (int64_t)groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + hpg) * d + e;
        cache[((t % B) * cap + p) * per_tok + r] = *src;
    }
}

/* The partial kernel's operands. part_o [tokens, heads, splits, d] and part_ml [tokens,
 * heads, splits, 2] (max, sum) F32 in the backend's partial buffer, and a counter per
 * block row (kv_counters); unused with one split. */
template <typename T>
struct kv_args {
    T *out;
    float *part_o, *part_ml;
    unsigned *counters;
    const T *cache, *qkv;
    const int32_t *pos;
    int64_t B, cap;
    int heads, groups, d;
    float scale;
};

/* 8 elements of a key or value row as loaded, not yet widened: what a lane holds while the
 * next iteration's rows are in flight (4 registers in bf16 or f16, 8 in F32). */
template <typename T>
union kv_raw {
    uint4 u[sizeof(T) / 2];
    T e[8];
};

template <typename T, bool VEC>
__device__ __forceinline__ void kv_fetch(kv_raw<T> &r, const T *p, int c0, int d) {
    if (VEC && c0 + 8 <= d) {
#pragma unroll
        for (int i = 0; i < (int)(sizeof(T) / 2); i++) r.u[i] = reinterpret_cast<const uint4 *>(p + c0)[i];
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) r.e[k] = c0 + k < d ? p[c0 + k] : T(0.0f);
    }
}

template <typename T>
__device__ __forceinline__ void kv_widen(const kv_raw<T> &r, float v[8]) {
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = mc_ld(&r.e[k]);
}

/* Block (blockIdx.x = (t groups + g) hchunks + hc, blockIdx.y = split s of gridDim.y):
 * token t, group g, its query heads hc KV_HEADS .. (nh of them). Its threads form row
 * groups of L lanes, each lane owning 8 dims (lane % L) * 8 .. + 7 of a key, value, query
 * and output row (16-byte loads with VEC: with L = 8, one warp instruction reads 4 whole
 * rows of 64 bf16); a row group scores KV_UNROLL keys at a time (dot products summed over
 * its L lanes) for each of the block's query heads, keeps a streaming softmax of them in
 * F32, and has the next KV_UNROLL keys' rows in flight meanwhile; the row groups' sums are
 * merged through shared memory at the end. With more than one split, the block writes its
 * partial and counts itself in; the split that comes last merges all of them into out
 * (flash-decoding's combine, without a kernel of its own). */
template <typename T, bool VEC, int L>
__global__ void __launch_bounds__(32 * KV_WARPS) kv_partial_kernel(const kv_args<T> a) {
    constexpr int NRG = KV_WARPS * 32 / L;  /* row groups of the block */
    constexpr int STEP = NRG * KV_UNROLL;   /* keys of one iteration of the block */
    __shared__ __align__(16) float s_acc[NRG][KV_HEADS][L * 8]; /* each row group's output sums */
    __shared__ float s_m[NRG][KV_HEADS], s_l[NRG][KV_HEADS];    /* ... its max and sum */
    __shared__ float s_f[NRG][KV_HEADS];                        /* e^(m_rg - M): its weight */
    __shared__ float s_L[KV_HEADS];                             /* the block's sum */
    __shared__ bool s_last;                                     /* this split came last */
    const int d = a.d, hpg = a.heads / a.groups, hchunks = (hpg + KV_HEADS - 1) / KV_HEADS;
    const int hc = (int)(blockIdx.x % hchunks), g = (int)(blockIdx.x / hchunks % a.groups);
    const int64_t t = blockIdx.x / hchunks / a.groups, b = t % a.B;
    const int h0 = hc * KV_HEADS, nh = hpg - h0 < KV_HEADS ? hpg - h0 : KV_HEADS; /* nh: same in the block */
    const int split = (int)blockIdx.y, splits = (int)gridDim.y;
    const int rg = (int)threadIdx.x / L, c0 = ((int)threadIdx.x % L) * 8;
    /* this block's chunk of the positions 0 .. len - 1: the length cut into `splits` pieces,
     * each rounded up to whole iterations (so the last splits may get nothing) */
    const int64_t last = a.pos[t], len = last >= 0 && last < a.cap ? last + 1 : 0; /* outside: nothing (reported) */
    const int64_t chunk = ((len + splits - 1) / splits + STEP - 1) / STEP * STEP;
    const int64_t start = split * chunk, stop = start + chunk < len ? start + chunk : len;
    const int64_t row = t * a.heads + (int64_t)g * hpg + h0; /* out/partial row of the block's first head */

    if (start < stop) {
        /* the block's queries (pre-scaled) and outputs, this lane's 8 dims of each */
        const T *qg = a.qkv + t * (int64_t)a.groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + h0) * d;
        float q[KV_HEADS][8], acc[KV_HEADS][8], m[KV_HEADS], l[KV_HEADS];
#pragma unroll
        for (int i = 0; i < KV_HEADS; i++) {
            if (i < nh) mc_load_group<T, VEC>(qg + (int64_t)i * d, c0, d, q[i]);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (i < nh) q[i][k] *= a.scale;
                else q[i][k] = 0.0f;
                acc[i][k] = 0.0f;
            }
            m[i] = -INFINITY, l[i] = 0.0f;
        }
        const int64_t crow = (int64_t)a.groups * 2 * d; /* one position of one sequence */
        const T *kv = a.cache + b * a.cap * crow + (int64_t)g * 2 * d; /* position j's key at kv + j crow, value + d */
        /* row group rg takes keys j0 + u NRG + rg; the loop's bounds are the block's, so every
         * lane of a warp takes part in its row groups' shuffles */
        kv_raw<T> kn[KV_UNROLL], vn[KV_UNROLL]; /* the next iteration's rows, in flight */
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++) {
            const int64_t j = start + u * NRG + rg;
            if (j < stop) kv_fetch<T, VEC>(kn[u], kv + j * crow, c0, d), kv_fetch<T, VEC>(vn[u], kv + j * crow + d, c0, d);
        }
        for (int64_t j0 = start; j0 < stop; j0 += STEP) {
            float kr[KV_UNROLL][8], vr[KV_UNROLL][8];
            bool ok[KV_UNROLL];
#pragma unroll
            for (int u = 0; u < KV_UNROLL; u++) {
                ok[u] = j0 + u * NRG + rg < stop;
                kv_widen(kn[u], kr[u]);
                kv_widen(vn[u], vr[u]);
                const int64_t j = j0 + STEP + u * NRG + rg;
                if (j < stop) kv_fetch<T, VEC>(kn[u], kv + j * crow, c0, d), kv_fetch<T, VEC>(vn[u], kv + j * crow + d, c0, d);
            }
#pragma unroll
            for (int i = 0; i < KV_HEADS; i++) {
                if (i >= nh) continue;
                float sc[KV_UNROLL], bm = -INFINITY;
#pragma unroll
                for (int u = 0; u < KV_UNROLL; u++) {
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < 8; k++) s += q[i][k] * kr[u][k];
#pragma unroll
                    for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o); /* within the row group */
                    sc[u] = ok[u] ? s : -INFINITY;
                    bm = fmaxf(bm, sc[u]);
                }
                const float mn = fmaxf(m[i], bm); /* -inf: no key of this row group yet (then p = 0) */
                const float corr = mn > -INFINITY ? __expf(m[i] - mn) : 1.0f;
                float p[KV_UNROLL], ps = 0.0f;
#pragma unroll
                for (int u = 0; u < KV_UNROLL; u++) ps += p[u] = ok[u] ? __expf(sc[u] - mn) : 0.0f;
                l[i] = l[i] * corr + ps;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float v = acc[i][k] * corr;
#pragma unroll
                    for (int u = 0; u < KV_UNROLL; u++) v += ok[u] ? p[u] * vr[u][k] : 0.0f;
                    acc[i][k] = v;
                }
                m[i] = mn;
            }
        }

        /* the row groups merged: O = sum_rg acc_rg e^(m_rg - M), L = sum_rg l_rg e^(m_rg - M) */
#pragma unroll
        for (int i = 0; i < KV_HEADS; i++) {
            float4 *dst = reinterpret_cast<float4 *>(&s_acc[rg][i][c0]);
            dst[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            dst[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
            if (c0 == 0) s_m[rg][i] = m[i], s_l[rg][i] = l[i];
        }
        __syncthreads();
        if ((int)threadIdx.x < nh) {
            const int i = (int)threadIdx.x;
            float M = -INFINITY, sum = 0.0f;
            for (int r = 0; r < NRG; r++) M = fmaxf(M, s_m[r][i]);
            for (int r = 0; r < NRG; r++) {
                const float f = s_m[r][i] > -INFINITY ? __expf(s_m[r][i] - M) : 0.0f;
                s_f[r][i] = f;
                sum += s_l[r][i] * f;
            }
            s_L[i] = sum;
            if (splits > 1) {
                a.part_ml[((row + i) * splits + split) * 2] = M;
                a.part_ml[((row + i) * splits + split) * 2 + 1] = sum;
            }
        }
        __syncthreads();
        for (int e = (int)threadIdx.x; e < nh * d; e += (int)blockDim.x) {
            const int i = e / d, c = e % d;
            float o = 0.0f;
#pragma unroll 4
            for (int r = 0; r < NRG; r++) o += s_acc[r][i][c] * s_f[r][i];
            if (splits > 1) a.part_o[((row + i) * splits + split) * d + c] = o;
            else mc_st(a.out + (row + i) * d + c, s_L[i] > 0.0f ? o / s_L[i] : 0.0f);
        }
    } else if (splits > 1) { /* an empty partial: weight 0 in the merge */
        if ((int)threadIdx.x < nh) {
            a.part_ml[((row + threadIdx.x) * splits + split) * 2] = -INFINITY;
            a.part_ml[((row + threadIdx.x) * splits + split) * 2 + 1] = 0.0f;
        }
    } else { /* no keys at all (a position outside the cache, reported): 0 */
        for (int e = (int)threadIdx.x; e < nh * d; e += (int)blockDim.x) mc_st(a.out + (row + e / d) * d + e % d, 0.0f);
    }
    if (splits == 1) return;

    /* count this split in; the last merges: O = sum_s O_s e^(m_s - M) / sum_s l_s e^(m_s - M)
     * over the splits with keys (m_s > -inf), 0 where none has any (a position outside the
     * cache). The partials of other blocks are read past the L1 cache (__ldcg). */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned before = atomicAdd(&a.counters[blockIdx.x], 1u);
        s_last = before == (unsigned)splits - 1;
        if (s_last) a.counters[blockIdx.x] = 0; /* for the next launch: every split has counted */
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    /* each split's weight e^(m_s - M) (0 for an empty one, whose sums were never written)
     * into shared memory, so that the output elements' loads below do not wait on each other */
    static_assert(NRG * KV_HEADS * L * 8 >= KV_HEADS * KV_MAX_SPLITS, "the merge's weights fit in s_acc");
    float *s_w = &s_acc[0][0][0]; /* [nh][splits] (the row groups' sums are spent) */
    for (int e = (int)threadIdx.x; e < nh * splits; e += (int)blockDim.x) {
        const int i = e / splits, sp = e % splits;
        s_w[e] = __ldcg(a.part_ml + ((row + i) * splits + sp) * 2);
    }
    __syncthreads();
    if ((int)threadIdx.x < nh) {
        const int i = (int)threadIdx.x;
        const float *ml = a.part_ml + (row + i) * splits * 2;
        float M = -INFINITY, sum = 0.0f;
        for (int sp = 0; sp < splits; sp++) M = fmaxf(M, s_w[i * splits + sp]);
        for (int sp = 0; sp < splits; sp++) {
            const float ms = s_w[i * splits + sp], f = ms > -INFINITY ? __expf(ms - M) : 0.0f;
            sum += f > 0.0f ? __ldcg(ml + 2 * sp + 1) * f : 0.0f;
            s_w[i * splits + sp] = f;
        }
        s_L[i] = sum;
    }
    __syncthreads();
    for (int e = (int)threadIdx.x; e < nh * d; e += (int)blockDim.x) {
        const int i = e / d, c = e % d;
        const float *po = a.part_o + (row + i) * splits * d + c;
        float o = 0.0f;
#pragma unroll 8
        for (int sp = 0; sp < splits; sp++) {
            const float f = s_w[i * splits + sp];
            if (f > 0.0f) o += __ldcg(po + (int64_t)sp * d) * f;
        }
        mc_st(a.out + (row + i) * d + c, s_L[i] > 0.0f ? o / s_L[i] : 0.0f);
    }
}

/* How many splits a (token, group, head chunk) gets: KV_FILL blocks a multiprocessor (about
 * one wave of 3 resident blocks, ~160 registers a thread, and a short tail: more, shorter
 * chains of dependent loads), at most one a KV_MIN_CHUNK of the cache's capacity (the
 * tokens' lengths are on the device; cap bounds them), and no more than the partial buffer
 * holds (MC_CUDA_KV_PARTIAL_FLOATS, cuda_internal.h: sized so that this bound does not bite
 * on an H200 at head_dim <= 128). One split: no partials;
 * also for more block rows than there are counters (they fill the machine anyway). */
int kv_splits(const mc_cuda_state *st, int64_t ntok, int heads, int groups, int d, int64_t cap) {
    const int hpg = heads / groups;
    const int64_t blocks = ntok * groups * ((hpg + KV_HEADS - 1) / KV_HEADS); /* a split's blocks */
    if (blocks > MC_CUDA_KV_COUNTERS) return 1;
    int64_t s = (KV_FILL * (int64_t)st->sm_count + blocks - 1) / blocks;
    const int64_t by_len = (cap + KV_MIN_CHUNK - 1) / KV_MIN_CHUNK;
    const int64_t by_buffer = (int64_t)MC_CUDA_KV_PARTIAL_FLOATS / (ntok * heads * (int64_t)(d + 2));
    if (s > by_len) s = by_len;
    if (s > by_buffer) s = by_buffer;
    if (s > KV_MAX_SPLITS) s = KV_MAX_SPLITS;
    return s > 1 ? (int)s : 1;
}

template <typename T, bool VEC, int L>
void kv_partial_launch(mc_cuda_state *st, dim3 grid, const kv_args<T> &a) {
    kv_partial_kernel<T, VEC, L><<<grid, 32 * KV_WARPS, 0, st->stream>>>(a);
}

template <typename T>
void kv_attention(mc_cuda_state *st, T *out, T *cache, const T *qkv, const int32_t *pos, const mc_attn_desc *d,
                  int64_t cap) {
    const int hd = d->head_dim, hpg = d->heads / d->groups;
    const int64_t ntok = d->seq * d->batch, rows = ntok * d->heads;
    const unsigned sgrid = mc_cuda_grid(st, ntok * d->groups * 2 * hd, 256);
    kv_store_kernel<T><<<sgrid, 256, 0, st->stream>>>(cache, qkv, pos, ntok, d->batch, cap, d->groups, hpg, hd,
                                                      st->err_dev);
    const int splits = kv_splits(st, ntok, d->heads, d->groups, hd, cap);
    const kv_args<T> a = {out,   st->kv_partials, st->kv_partials + rows * splits * hd, st->kv_counters,
                          cache, qkv,             pos, d->batch, cap, d->heads, d->groups, hd, d->softmax_scale};
    const dim3 grid((unsigned)(ntok * d->groups * ((hpg + KV_HEADS - 1) / KV_HEADS)), (unsigned)splits);
    /* 16-byte loads when every row starts 16-byte aligned: 8 lanes a row up to head_dim 64,
     * 16 up to 128, 32 above; element loads (32 lanes, 8 elements each) otherwise */
    const bool vec = hd % 8 == 0 && mc_cuda_aligned16(cache) && mc_cuda_aligned16(qkv);
    if (!vec) kv_partial_launch<T, false, 32>(st, grid, a);
    else if (hd <= 64) kv_partial_launch<T, true, 8>(st, grid, a);
    else if (hd <= 128) kv_partial_launch<T, true, 16>(st, grid, a);
    else kv_partial_launch<T, true, 32>(st, grid, a);
}

}  // namespace

bool mc_cuda_attention_kv_supports(const mc_op_sizes *s, mc_op_refusal *why) {
    if (s->attn->head_dim <= KV_MAX_D) return true;
    *why = (mc_op_refusal){.operand = "d.head_dim"};
    snprintf(why->expected, sizeof why->expected, "at most %d (attention_kv_fwd)", KV_MAX_D);
    snprintf(why->given, sizeof why->given, "%d", s->attn->head_dim);
    return false;
}

void mc_cuda_attention_kv_fwd(mc_backend *be, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                              const mc_tensor *pos, const mc_attn_desc *d) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int64_t cap = mc_tensor_numel(cache) / (d->batch * (int64_t)d->groups * 2 * d->head_dim);
    MC_CUDA_DISPATCH_FLOAT(qkv->dtype, "attention_kv_fwd", T,
                           kv_attention<T>(st, (T *)out->data, (T *)cache->data, (const T *)qkv->data,
                                           (const int32_t *)pos->data, d, cap));
    MC_CUDA_LAUNCHED(st, "attention_kv_fwd");
}
