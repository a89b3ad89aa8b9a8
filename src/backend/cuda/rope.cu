/* rope.cu: rotary position embedding, in place on the q and k heads of a packed QKV
 * activation [S, B, groups, heads/groups + 2, d] (HF Llama's rotate-half layout). For pair
 * k < rot_dim/2 of a head, x1 = x[k], x2 = x[k + rot_dim/2] and (cos, sin) = table[pos][k]:
 *   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin;
 * inverse = true applies the transpose (sin -> -sin), which is the backward. Value heads
 * and dims >= rot_dim are untouched. Tables are F32 [max_pos, rot_dim/2].
 *
 * One thread per 8 pairs of one (token, q-or-k head): each element is read and written by
 * exactly one thread, so in place is race-free. A position outside the table is recorded
 * in the device-error word (reported at the next synchronizing call) and the head left
 * untouched. The attention backward may rotate the query heads' gradient itself as it
 * stores it, leaving the key heads to this kernel (keys_only). */
#include "backend/cuda/cuda_internal.h"

/* I indexes the pair groups: uint32_t when the grid-stride loop fits in 32 bits
 * (mc_cuda_loop_fits_u32), int64_t otherwise. */
template <typename T, bool VEC, typename I>
__global__ void rope_kernel(T *qkv, const float *cos_tab, const float *sin_tab, const int32_t *pos, int64_t max_pos,
                            I ntok, int64_t batch, int groups, int per_group, int d, int half, float sign, int *err,
                            int slot0) {
    /* the head slots rotated in each group: from slot0 to the key head (per_group - 2); 0:
     * the group's query heads, then its key head */
    const int rot_heads = per_group - 1 - slot0;
    const I pair_groups = (I)((half + 7) / 8);
    const I per_tok = (I)groups * (I)rot_heads * pair_groups;
    const I total = ntok * per_tok;
    const int64_t tok_stride = (int64_t)groups * per_group * d;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        const I t = i / per_tok;
        const I rem = i % per_tok;
        const int head_slot = (int)(rem / pair_groups), pg = (int)(rem % pair_groups);
        const int g = head_slot / rot_heads, hh = slot0 + head_slot % rot_heads;
        const int64_t p = pos ? (int64_t)pos[t] : (int64_t)(t / (I)batch);
        if (p < 0 || p >= max_pos) {
            mc_cuda_device_error(err, MC_CUDA_DEVERR_ROPE_POS, (int)t, (int)p, (int)max_pos);
            continue;
        }
        T *x = qkv + (int64_t)t * tok_stride + ((int64_t)g * per_group + hh) * d;
        const float *c = cos_tab + p * half, *s = sin_tab + p * half;
        const int k0 = pg * 8;
        float x1[8], x2[8], cv[8], sv[8];
        mc_load_group<T, VEC>(x, k0, half, x1);
        mc_load_group<T, VEC>(x + half, k0, half, x2);
        mc_load_group<float, VEC>(c, k0, half, cv);
        mc_load_group<float, VEC>(s, k0, half, sv);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float a = x1[k], b = x2[k], sk = sign * sv[k];
            x1[k] = a * cv[k] - b * sk;
            x2[k] = b * cv[k] + a * sk;
        }
        mc_store_group<T, VEC>(x, k0, half, x1);
        mc_store_group<T, VEC>(x + half, k0, half, x2);
    }
}

template <typename T, typename I>
static void rope_launch(mc_cuda_state *st, bool vec, unsigned grid, T *qkv, const float *c, const float *s,
                        const int32_t *pos, int64_t max_pos, I ntok, const mc_rope_desc *d, int per_group, int half,
                        float sign, int slot0) {
    auto kernel = vec ? rope_kernel<T, true, I> : rope_kernel<T, false, I>;
    kernel<<<grid, 256, 0, st->stream>>>(qkv, c, s, pos, max_pos, ntok, d->batch, d->groups, per_group, d->head_dim,
                                         half, sign, st->err_dev, slot0);
}

template <typename T>
static void launch(mc_cuda_state *st, T *qkv, const mc_rope_desc *d, const int32_t *pos, int64_t max_pos, bool inverse,
                   bool keys_only) {
    const int per_group = d->heads / d->groups + 2, half = d->rot_dim / 2, slot0 = keys_only ? per_group - 2 : 0;
    const int64_t ntok = d->seq * d->batch;
    const int64_t total = ntok * d->groups * (per_group - 1 - slot0) * ((half + 7) / 8);
    if (total == 0) return;
    /* vector path: every head start, x2 and table row 16-byte aligned */
    bool vec = half % 8 == 0 && d->head_dim % 8 == 0 && mc_cuda_aligned16(qkv) && mc_cuda_aligned16(d->cos.data) &&
               mc_cuda_aligned16(d->sin.data);
    unsigned grid = mc_cuda_grid(st, total, 256);
    float sign = inverse ? -1.0f : 1.0f;
    const float *c = (const float *)d->cos.data, *s = (const float *)d->sin.data;
    if (mc_cuda_loop_fits_u32(total, grid, 256))
        rope_launch<T, uint32_t>(st, vec, grid, qkv, c, s, pos, max_pos, (uint32_t)ntok, d, per_group, half, sign,
                                 slot0);
    else
        rope_launch<T, int64_t>(st, vec, grid, qkv, c, s, pos, max_pos, ntok, d, per_group, half, sign, slot0);
    MC_CUDA_LAUNCHED(st, "rope");
}

void mc_cuda_rope(mc_backend *be, mc_tensor *qkv, const mc_rope_desc *d, bool inverse) {
    mc_cuda_rope_heads(mc_cuda_st(be), qkv, d, inverse, false);
}

void mc_cuda_rope_heads(mc_cuda_state *st, mc_tensor *qkv, const mc_rope_desc *d, bool inverse, bool keys_only) {
    const char *op = "rope";
    int64_t max_pos = mc_cuda_rows(&d->cos);
    const int32_t *pos = mc_tensor_present(&d->pos) ? (const int32_t *)d->pos.data : NULL;
    MC_CUDA_DISPATCH_FLOAT(qkv->dtype, op, T, launch<T>(st, (T *)qkv->data, d, pos, max_pos, inverse, keys_only));
}
