/* attention_kv.cu: causal attention of new tokens over a key/value cache, for generation
 * (backend.h's attention_kv_fwd; the CPU reference is backend/cpu/attention_kv.c).
 *
 * Two kernels: one stores the new tokens' key and value heads into the cache at each
 * token's own position (one thread per element); then one block of KV_WARPS warps per (new
 * token, query head) walks its sequence's cache positions 0 .. p: each warp takes
 * KV_UNROLL keys at a time (lanes own the dims lane + 32 k, so a key's row is read
 * coalesced and its score is a warp sum), keeps a streaming softmax of its keys, and the
 * warps' partial sums are merged at the end. A decode step has few (token, head) pairs, so
 * a pair's keys are spread over many warps, and several keys are in flight in each, or
 * the step would wait on the latency of one key's loads after another. A prompt's prefill
 * runs through it too (each new token over its own prefix: simple, not fast). Positions are read on
 * the device, so that a decode step's launches stay the same from step to step (capturable
 * in a CUDA graph); one outside the cache is reported as rope's are (cuda_internal.h). */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int KV_MAX_D = 256; /* head_dim <= 256: 8 output dims a lane */
constexpr int KV_WARPS = 8;   /* warps a block of the attend kernel: one block a (token, query head) */
constexpr int KV_UNROLL = 4;  /* keys a warp scores at once (their loads and reductions overlap) */

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

template <typename T>
__global__ void __launch_bounds__(32 * KV_WARPS) kv_attend_kernel(T *out, const T *cache, const T *qkv,
                                                                    const int32_t *pos, int64_t B, int64_t cap,
                                                                    int heads, int groups, int d, float scale) {
    __shared__ float part[KV_WARPS][KV_MAX_D + 2]; /* each warp's output sums, then its max and sum */
    const int lane = threadIdx.x & 31, wid = threadIdx.x / 32;
    const int h = (int)(blockIdx.x % heads);
    const int64_t t = blockIdx.x / heads, b = t % B, last = pos[t];
    const int hpg = heads / groups, g = h / hpg, per = (d + 31) / 32;
    const T *q = qkv + t * (int64_t)groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + h % hpg) * d;
    const int64_t crow = (int64_t)groups * 2 * d; /* one position of one sequence */
    const T *kv = cache + b * cap * crow + (int64_t)g * 2 * d;
    /* lane owns dims lane + 32 k: the query's (pre-scaled) and the output's */
    float qr[KV_MAX_D / 32], acc[KV_MAX_D / 32];
#pragma unroll
    for (int k = 0; k < KV_MAX_D / 32; k++) {
        const int c = lane + 32 * k;
        qr[k] = k < per && c < d ? mc_ld(q + c) * scale : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t end = last < cap ? last : -1; /* a position outside the cache attends to nothing (reported) */
    /* warp wid takes keys wid*KV_UNROLL + KV_WARPS*KV_UNROLL*i .. (+KV_UNROLL - 1) */
    for (int64_t j0 = (int64_t)wid * KV_UNROLL; j0 <= end; j0 += (int64_t)KV_WARPS * KV_UNROLL) {
        float sc[KV_UNROLL];
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++) {
            const T *k = kv + (j0 + u) * crow;
            float sum = 0.0f;
            if (j0 + u <= end) {
#pragma unroll
                for (int kk = 0; kk < KV_MAX_D / 32; kk++) {
                    const int c = lane + 32 * kk;
                    if (kk < per && c < d) sum += qr[kk] * mc_ld(k + c);
                }
            }
            sc[u] = sum;
        }
        float bm = -INFINITY;
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++) {
            sc[u] = j0 + u <= end ? mc_warp_sum(sc[u]) : -INFINITY;
            bm = fmaxf(bm, sc[u]);
        }
        const float mn = fmaxf(m, bm), corr = __expf(m - mn);
        float pu[KV_UNROLL], ps = 0.0f;
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++) ps += pu[u] = j0 + u <= end ? __expf(sc[u] - mn) : 0.0f;
        l = l * corr + ps;
#pragma unroll
        for (int kk = 0; kk < KV_MAX_D / 32; kk++) {
            const int c = lane + 32 * kk;
            if (kk >= per || c >= d) continue;
            float a = acc[kk] * corr;
#pragma unroll
            for (int u = 0; u < KV_UNROLL; u++)
                if (j0 + u <= end) a += pu[u] * mc_ld(kv + (j0 + u) * crow + d + c);
            acc[kk] = a;
        }
        m = mn;
    }
    /* the warps' streaming sums merged: O = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M) */
#pragma unroll
    for (int kk = 0; kk < KV_MAX_D / 32; kk++) {
        const int c = lane + 32 * kk;
        if (kk < per && c < d) part[wid][c] = acc[kk];
    }
    if (lane == 0) part[wid][KV_MAX_D] = m, part[wid][KV_MAX_D + 1] = l;
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < KV_WARPS; w++) M = fmaxf(M, part[w][KV_MAX_D]);
    float L = 0.0f;
    for (int w = 0; w < KV_WARPS; w++)
        if (part[w][KV_MAX_D] > -INFINITY) L += part[w][KV_MAX_D + 1] * __expf(part[w][KV_MAX_D] - M);
    T *o = out + (t * heads + h) * (int64_t)d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < KV_WARPS; w++)
            if (part[w][KV_MAX_D] > -INFINITY) sum += part[w][c] * __expf(part[w][KV_MAX_D] - M);
        mc_st(o + c, L > 0.0f ? sum / L : 0.0f);
    }
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
    const int hpg = d->heads / d->groups;
    const int64_t ntok = d->seq * d->batch, per_pos = (int64_t)d->groups * 2 * d->head_dim;
    const int64_t cap = mc_tensor_numel(cache) / (d->batch * per_pos);
    const int64_t nstore = ntok * per_pos;
    const unsigned sgrid = mc_cuda_grid(st, nstore, 256);
    const unsigned agrid = (unsigned)(ntok * d->heads);
    MC_CUDA_DISPATCH_FLOAT(qkv->dtype, "attention_kv_fwd", T,
                           kv_store_kernel<T><<<sgrid, 256, 0, st->stream>>>(
                               (T *)cache->data, (const T *)qkv->data, (const int32_t *)pos->data, ntok, d->batch, cap,
                               d->groups, hpg, d->head_dim, st->err_dev);
                           kv_attend_kernel<T><<<agrid, 32 * KV_WARPS, 0, st->stream>>>(
                               (T *)out->data, (const T *)cache->data, (const T *)qkv->data,
                               (const int32_t *)pos->data, d->batch, cap, d->heads, d->groups, d->head_dim,
                               d->softmax_scale));
    MC_CUDA_LAUNCHED(st, "attention_kv_fwd");
}
