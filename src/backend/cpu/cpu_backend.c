/* cpu_backend.c: the CPU reference backend's vtable, what it supports, its memory entries,
 * dtype conversion and scratch workspace. */
#include "backend/cpu/cpu_internal.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MC_CPU_ALIGN 64

/* ---- memory ---- */

void *mc_cpu_aligned_alloc(size_t bytes) {
    size_t rounded = (bytes + MC_CPU_ALIGN - 1) / MC_CPU_ALIGN * MC_CPU_ALIGN;
    void *p = aligned_alloc(MC_CPU_ALIGN, rounded ? rounded : MC_CPU_ALIGN);
    if (!p) mc_assert_fail("aligned_alloc", __FILE__, __LINE__, "cpu backend: out of host memory allocating %zu bytes", bytes);
    return p;
}

/* be->alloc keeps the size in a 64-byte header in front of the block, so free can count. */
static void *cpu_alloc(mc_backend *be, size_t bytes) {
    mc_cpu_state *st = be->impl;
    char *p = mc_cpu_aligned_alloc(bytes + MC_CPU_ALIGN);
    memcpy(p, &bytes, sizeof bytes);
    st->allocated += bytes;
    if (st->allocated > st->max_allocated) st->max_allocated = st->allocated;
    return p + MC_CPU_ALIGN;
}

static void cpu_free(mc_backend *be, void *ptr) {
    if (!ptr) return;
    mc_cpu_state *st = be->impl;
    char *p = (char *)ptr - MC_CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    st->allocated -= bytes;
    free(p);
}

static void cpu_memory_stats(mc_backend *be, size_t *allocated, size_t *max_allocated, size_t *reserved) {
    mc_cpu_state *st = be->impl;
    *allocated = st->allocated;
    *max_allocated = st->max_allocated;
    *reserved = st->allocated + st->workspace_bytes;
}

static void cpu_copy(mc_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_zero(mc_backend *be, void *dst, size_t bytes) {
    (void)be;
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_sync(mc_backend *be) { (void)be; }
static void cpu_mark(mc_backend *be, int i) {
    (void)be;
    MC_ASSERT(i >= 0 && i < MC_BACKEND_MARKS, "mark %d of %d", i, MC_BACKEND_MARKS);
}

void *mc_cpu_workspace(mc_backend *be, size_t bytes) {
    mc_cpu_state *st = be->impl;
    if (bytes > st->workspace_bytes) {
        free(st->workspace);
        st->workspace = mc_cpu_aligned_alloc(bytes);
        st->workspace_bytes = bytes;
    }
    return st->workspace;
}

int mc_cpu_threads(void) { return omp_get_max_threads(); }

/* MemAvailable of /proc/meminfo: what the kernel estimates can be allocated without
 * swapping. SIZE_MAX (no limit known) where it cannot be read. */
static size_t cpu_memory_available(mc_backend *be) {
    (void)be;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    if (!found) return SIZE_MAX;
    return kib > SIZE_MAX / 1024 ? SIZE_MAX : (size_t)kib * 1024;
}

/* ---- what it supports ---- */

/* Sizes: only the BLAS calls' 32-bit dimensions limit this backend. */
static bool cpu_supports(mc_backend *be, const mc_op_sizes *s, mc_op_refusal *why) {
    (void)be;
    switch (s->op) {
    case MC_OP_GEMM:
    case MC_OP_LINEAR_FWD:
    case MC_OP_LINEAR_BWD:
    case MC_OP_LINEAR_RESIDUAL_FWD:
    case MC_OP_LINEAR_GELU_FWD:
    case MC_OP_LINEAR_DGELU_BWD: return mc_cpu_gemm_supports(s, why);
    case MC_OP_ATTENTION_KV_FWD:
        if (s->attn->head_dim <= 512) return true;
        *why = (mc_op_refusal){.operand = "d.head_dim"};
        snprintf(why->expected, sizeof why->expected, "at most 512 on the CPU");
        snprintf(why->given, sizeof why->given, "%d", s->attn->head_dim);
        return false;
    default: return true;
    }
}

/* ---- conversion ---- */

static void load_f32(float *dst, const void *src, mc_dtype dt, int64_t i0, int64_t n) {
    switch (dt) {
    case MC_F32: memcpy(dst, (const float *)src + i0, (size_t)n * sizeof(float)); break;
    case MC_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = mc_bf16_to_f32(((const uint16_t *)src)[i0 + i]);
        break;
    case MC_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = mc_f16_to_f32(((const uint16_t *)src)[i0 + i]);
        break;
    default: /* MC_F64 */
        for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)src)[i0 + i];
        break;
    }
}

void mc_cpu_store_f32(void *dst, mc_dtype dt, int64_t i0, const float *src, int64_t n) {
    switch (dt) {
    case MC_F32: memcpy((float *)dst + i0, src, (size_t)n * sizeof(float)); break;
    case MC_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i0 + i] = mc_f32_to_bf16(src[i]);
        break;
    case MC_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i0 + i] = mc_f32_to_f16(src[i]);
        break;
    default: /* MC_F64 */
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i0 + i] = src[i];
        break;
    }
}

/* dst = src elementwise; F64 -> F64 is a copy, everything else goes through float (an
 * F64 -> BF16/F16 conversion rounds twice, which no caller depends on). */
static void cpu_convert(mc_backend *be, mc_tensor *dst, const mc_tensor *src) {
    (void)be;
    int64_t n = mc_tensor_numel(src);
    if (dst->dtype == src->dtype) {
        cpu_copy(be, dst->data, src->data, mc_tensor_bytes(src));
        return;
    }
    enum { CHUNK = 2048 };
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t ch = 0; ch < nchunks; ch++) {
        float tmp[CHUNK];
        int64_t i0 = ch * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        load_f32(tmp, src->data, src->dtype, i0, len);
        mc_cpu_store_f32(dst->data, dst->dtype, i0, tmp, len);
    }
}

/* ---- the backend ---- */

static void cpu_destroy(mc_backend *be) {
    if (!be) return;
    mc_cpu_state *st = be->impl;
    if (st) free(st->workspace);
    free(st);
    free(be);
}

/* Host memory is all the CPU backend has: the "pinned" allocations are plain ones. */
static void *cpu_host_alloc(mc_backend *be, size_t bytes) {
    (void)be;
    return mc_cpu_aligned_alloc(bytes);
}

static void cpu_host_free(mc_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

mc_backend *mc_backend_cpu_create(void) {
    mc_backend *be = mc_xcalloc(1, sizeof *be);
    be->name = "cpu";
    be->device = MC_DEVICE_CPU;
    be->impl = mc_xcalloc(1, sizeof(mc_cpu_state));
    be->compute_dtypes = MC_DTYPE_BIT(MC_F32) | MC_DTYPE_BIT(MC_F64);
    be->storage_dtypes = MC_DTYPE_BIT(MC_F32) | MC_DTYPE_BIT(MC_BF16) | MC_DTYPE_BIT(MC_F16) | MC_DTYPE_BIT(MC_F64);
    be->supports = cpu_supports;

    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->copy_h2d = cpu_copy;
    be->copy_d2h = cpu_copy;
    be->copy_d2d = cpu_copy;
    be->host_alloc = cpu_host_alloc;
    be->host_free = cpu_host_free;
    be->copy_h2d_async = cpu_copy;
    be->copy_d2h_async = cpu_copy;
    be->copy_d2h_side = cpu_copy;
    be->zero = cpu_zero;
    be->sync = cpu_sync;
    be->wait_copies = cpu_sync; /* the copies are done on return */
    be->mark = cpu_mark;
    be->wait_mark = cpu_mark; /* the work is done when queued */
    be->convert = cpu_convert;
    be->fill = mc_cpu_fill;
    be->init_normal = mc_cpu_init_normal;
    be->memory_stats = cpu_memory_stats;
    be->memory_available = cpu_memory_available;

    be->gemm = mc_cpu_gemm;
    be->linear_fwd = mc_cpu_linear_fwd;
    be->linear_bwd = mc_cpu_linear_bwd;
    be->linear_residual_fwd = mc_cpu_linear_residual_fwd;
    be->linear_gelu_fwd = mc_cpu_linear_gelu_fwd;
    be->linear_dgelu_bwd = mc_cpu_linear_dgelu_bwd;
    be->embedding_fwd = mc_cpu_embedding_fwd;
    be->embedding_bwd = mc_cpu_embedding_bwd;
    be->layernorm_fwd = mc_cpu_layernorm_fwd;
    be->layernorm_bwd = mc_cpu_layernorm_bwd;
    be->rmsnorm_fwd = mc_cpu_rmsnorm_fwd;
    be->rmsnorm_bwd = mc_cpu_rmsnorm_bwd;
    be->rope = mc_cpu_rope;
    be->gelu_fwd = mc_cpu_gelu_fwd;
    be->gelu_bwd = mc_cpu_gelu_bwd;
    be->swiglu_fwd = mc_cpu_swiglu_fwd;
    be->swiglu_bwd = mc_cpu_swiglu_bwd;
    be->attention_fwd = mc_cpu_attention_fwd;
    be->attention_bwd = mc_cpu_attention_bwd;
    be->attention_kv_fwd = mc_cpu_attention_kv_fwd;
    be->argmax_rows = mc_cpu_argmax_rows;
    be->decode_advance = mc_cpu_decode_advance;
    be->dropout_fwd = mc_cpu_dropout_fwd;
    be->dropout_bwd = mc_cpu_dropout_bwd;
    be->dropout_add_fwd = mc_cpu_dropout_add_fwd;
    be->add_inplace = mc_cpu_add_inplace;
    be->scale_inplace = mc_cpu_scale_inplace;
    be->xent_rowstats = mc_cpu_xent_rowstats;
    be->xent_rescale = mc_cpu_xent_rescale;
    be->xent_loss_grad = mc_cpu_xent_loss_grad;
    be->xent_fused = mc_cpu_xent_fused;
    be->adamw = mc_cpu_adamw;
    be->master_join = mc_cpu_master_join;
    be->master_split = mc_cpu_master_split;
    be->sumsq = mc_cpu_sumsq;
    be->sumsq_segments = mc_cpu_sumsq_segments;
    be->count_zeros = mc_cpu_count_zeros;

    be->destroy = cpu_destroy;
    return be;
}
