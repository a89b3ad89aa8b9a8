/* attention_kv.cu: causal attention of new tokens over a key/value cache, for generation
 * (backend.h's attention_kv_fwd; the CPU reference is backend/cpu/attention_kv.c).
 *
 * Two kernels: one stores the new tokens' key and value heads into the cache (one thread
 * per element); then one warp per (new token, sequence, query head) walks the cache
 * positions 0 .. p of its group, 32 at a time: each lane scores one key (a dot product
 * over head_dim in F32), the warp takes the block's maximum, rescales its running sum and
 * output (a streaming softmax) and adds the block's values, each lane owning head_dim/32
 * output dims. (Each lane reads the whole query per key: simple, not fast.) Written for decoding (a few new tokens over a long cache), where the work is
 * reading the cache once; a long prompt's prefill is better served by the flash kernels, and
 * the model runs its prompt through those. */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int KV_MAX_D = 256; /* head_dim <= 256: 8 output dims a lane */

template <typename T>
__global__ void kv_store_kernel(T *cache, const T *qkv, int64_t S, int64_t B, int groups, int hpg, int d, int64_t pos0) {
    const int64_t per_tok = (int64_t)groups * 2 * d, total = S * B * per_tok;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / per_tok, r = i % per_tok; /* token t = s B + b */
        const int g = (int)(r / (2 * d)), e = (int)(r % (2 * d));
        const T *src = qkv + t * (int64_t)groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + hpg) * d + e;
        cache[(pos0 * B + t) * per_tok + r] = *src; /* cache row (pos0 + s), sequence b: t's place */
    }
}

template <typename T>
__global__ void kv_attend_kernel(T *out, const T *cache, const T *qkv, int64_t S, int64_t B, int heads, int groups,
                                 int d, int64_t pos0, float scale) {
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (w >= S * B * heads) return;
    const int h = (int)(w % heads);
    const int64_t t = w / heads, s = t / B, b = t % B;
    const int hpg = heads / groups, g = h / hpg;
    const T *q = qkv + t * (int64_t)groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + h % hpg) * d;
    const int64_t crow = B * (int64_t)groups * 2 * d; /* one position */
    const T *kv = cache + (b * groups + g) * 2 * (int64_t)d;
    float acc[KV_MAX_D / 32];
    const int per = (d + 31) / 32;
    for (int k = 0; k < per; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t last = pos0 + s;
    for (int64_t j0 = 0; j0 <= last; j0 += 32) {
        /* lane i scores key j0 + i */
        const int64_t j = j0 + lane;
        float sc = -INFINITY;
        if (j <= last) {
            const T *k = kv + j * crow;
            float sum = 0.0f;
            for (int c = 0; c < d; c++) sum += mc_ld(q + c) * mc_ld(k + c);
            sc = sum * scale;
        }
        float bm = sc;
        for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
        const float mn = fmaxf(m, bm), corr = __expf(m - mn);
        const float p = j <= last ? __expf(sc - mn) : 0.0f;
        float ps = p;
        for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
        l = l * corr + ps;
        for (int k = 0; k < per; k++) acc[k] *= corr;
        const int64_t jn = last - j0 + 1 < 32 ? last - j0 + 1 : 32;
        for (int i = 0; i < (int)jn; i++) {
            const float pi = __shfl_sync(0xffffffffu, p, i);
            const T *v = kv + (j0 + i) * crow + d;
            for (int k = 0; k < per; k++) {
                const int c = lane + 32 * k;
                if (c < d) acc[k] += pi * mc_ld(v + c);
            }
        }
        m = mn;
    }
    T *o = out + (t * heads + h) * (int64_t)d;
    for (int k = 0; k < per; k++) {
        const int c = lane + 32 * k;
        if (c < d) mc_st(o + c, acc[k] / l);
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

void mc_cuda_attention_kv_fwd(mc_backend *be, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv, int64_t pos0,
                              const mc_attn_desc *d) {
    mc_cuda_state *st = mc_cuda_st(be);
    const int hpg = d->heads / d->groups;
    const int64_t nstore = d->seq * d->batch * d->groups * 2 * d->head_dim, warps = d->seq * d->batch * d->heads;
    const unsigned sgrid = (unsigned)((nstore + 255) / 256 < 65535 ? (nstore + 255) / 256 : 65535);
    const unsigned agrid = (unsigned)((warps + 3) / 4);
    MC_CUDA_DISPATCH_FLOAT(qkv->dtype, "attention_kv_fwd", T,
                           kv_store_kernel<T><<<sgrid, 256, 0, st->stream>>>((T *)cache->data, (const T *)qkv->data,
                                                                              d->seq, d->batch, d->groups, hpg,
                                                                              d->head_dim, pos0);
                           kv_attend_kernel<T><<<agrid, 128, 0, st->stream>>>(
                               (T *)out->data, (const T *)cache->data, (const T *)qkv->data, d->seq, d->batch,
                               d->heads, d->groups, d->head_dim, pos0, d->softmax_scale));
    MC_CUDA_LAUNCHED(st, "attention_kv_fwd");
}
