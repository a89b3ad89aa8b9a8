/* attention_kv.cu: causal attention of new tokens over a key/value cache, for generation
 * (backend.h's attention_kv_fwd; the CPU reference is backend/cpu/attention_kv.c).
 *
 * Two kernels: one stores the new tokens' key and value heads into the cache at each
 * token's own position (one thread per element); then one warp per (new token, query head)
 * walks its sequence's cache positions 0 .. p, 32 at a time: each lane scores one key (a
 * dot product over head_dim in F32 with the query, staged once in shared memory), the warp
 * takes the block's maximum, rescales its running sum and output (a streaming softmax) and
 * adds the block's values, each lane owning head_dim/32 output dims. Written for decoding
 * (a few new tokens a sequence over a long cache), where the work is reading the cache
 * once; a prompt's prefill runs through it too (simple, not fast). Positions are read on
 * the device, so that a decode step's launches stay the same from step to step (capturable
 * in a CUDA graph); one outside the cache is reported as rope's are (cuda_internal.h). */
#include "backend/cuda/cuda_internal.h"

namespace {

constexpr int KV_MAX_D = 256; /* head_dim <= 256: 8 output dims a lane */
constexpr int KV_WARPS = 4;   /* warps a block of the attend kernel */

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
__global__ void kv_attend_kernel(T *out, const T *cache, const T *qkv, const int32_t *pos, int64_t ntok, int64_t B,
                                 int64_t cap, int heads, int groups, int d, float scale) {
    __shared__ float q_s[KV_WARPS][KV_MAX_D];
    const int lane = threadIdx.x & 31, wid = threadIdx.x / 32;
    const int64_t w = (int64_t)blockIdx.x * KV_WARPS + wid;
    if (w >= ntok * heads) return;
    const int h = (int)(w % heads);
    const int64_t t = w / heads, b = t % B, last = pos[t];
    const int hpg = heads / groups, g = h / hpg;
    const T *q = qkv + t * (int64_t)groups * (hpg + 2) * d + ((int64_t)g * (hpg + 2) + h % hpg) * d;
    for (int c = lane; c < d; c += 32) q_s[wid][c] = mc_ld(q + c);
    __syncwarp();
    const int64_t crow = (int64_t)groups * 2 * d; /* one position of one sequence */
    const T *kv = cache + b * cap * crow + (int64_t)g * 2 * d;
    float acc[KV_MAX_D / 32];
    const int per = (d + 31) / 32;
    for (int k = 0; k < per; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t end = last < cap ? last : -1; /* a position outside the cache attends to nothing (reported) */
    for (int64_t j0 = 0; j0 <= end; j0 += 32) {
        /* lane i scores key j0 + i */
        const int64_t j = j0 + lane;
        float sc = -INFINITY;
        if (j <= end) {
            const T *k = kv + j * crow;
            float sum = 0.0f;
            for (int c = 0; c < d; c++) sum += q_s[wid][c] * mc_ld(k + c);
            sc = sum * scale;
        }
        const float bm = mc_warp_max(sc);
        const float mn = fmaxf(m, bm), corr = __expf(m - mn);
        const float p = j <= end ? __expf(sc - mn) : 0.0f;
        l = l * corr + mc_warp_sum(p);
        for (int k = 0; k < per; k++) acc[k] *= corr;
        const int64_t jn = end - j0 + 1 < 32 ? end - j0 + 1 : 32;
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
        if (c < d) mc_st(o + c, l > 0.0f ? acc[k] / l : 0.0f);
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
    const int64_t nstore = ntok * per_pos, warps = ntok * d->heads;
    const unsigned sgrid = mc_cuda_grid(st, nstore, 256);
    const unsigned agrid = (unsigned)((warps + KV_WARPS - 1) / KV_WARPS);
    MC_CUDA_DISPATCH_FLOAT(qkv->dtype, "attention_kv_fwd", T,
                           kv_store_kernel<T><<<sgrid, 256, 0, st->stream>>>(
                               (T *)cache->data, (const T *)qkv->data, (const int32_t *)pos->data, ntok, d->batch, cap,
                               d->groups, hpg, d->head_dim, st->err_dev);
                           kv_attend_kernel<T><<<agrid, 32 * KV_WARPS, 0, st->stream>>>(
                               (T *)out->data, (const T *)cache->data, (const T *)qkv->data,
                               (const int32_t *)pos->data, ntok, d->batch, cap, d->heads, d->groups, d->head_dim,
                               d->softmax_scale));
    MC_CUDA_LAUNCHED(st, "attention_kv_fwd");
}
