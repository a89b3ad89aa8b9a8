/* cuda_backend.cu: the CUDA backend's creation and teardown, its vtable and what it
 * supports, device memory with byte counters, the one compute stream, the scratch
 * workspace, the segment-table upload and the device-error word. The ops live in one file
 * per family (gemm.cu, norm.cu, attention_op.cu, ...).
 *
 * Streams: one non-blocking stream per backend; every op is asynchronous on it, in order.
 * copy_h2d returns once the host buffer may be reused (async copy + stream sync), copy_d2h
 * and sync block; copy_h2d_async/copy_d2h_async only queue (pinned host memory from
 * host_alloc). Workspaces grow on demand (a synchronize, then a larger cudaMalloc) and
 * never shrink, so the steady state allocates nothing. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/attention_cudnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MC_CUDA_LT_WORKSPACE = 64 << 20 }; /* cuBLASLt workspace, bytes */

/* ---- errors after launches and synchronizations ---- */

static void report_device_errors(mc_cuda_state *st, const char *op) {
    volatile int *e = st->err_host;
    if (!e || e[0] == MC_CUDA_DEVERR_NONE) return;
    int code = e[0], a = e[1], b = e[2], c = e[3];
    if (code == MC_CUDA_DEVERR_ROPE_POS)
        mc_assert_fail("position in table", __FILE__, __LINE__,
                       "cuda rope (seen at %s): position %d of token %d is outside the table [0, %d)", op, b, a, c);
    if (code == MC_CUDA_DEVERR_KV_POS)
        mc_assert_fail("position in cache", __FILE__, __LINE__,
                       "cuda attention_kv_fwd (seen at %s): position %d of token %d is outside the cache [0, %d)", op,
                       b, a, c);
    mc_assert_fail("device error", __FILE__, __LINE__, "cuda (seen at %s): device error code %d (%d, %d, %d)", op, code,
                   a, b, c);
}

void mc_cuda_sync_checked(mc_cuda_state *st, const char *op) {
    mc_cuda_capture_refuse(st, op, "waits for the stream");
    MC_CUDA_CHECK(cudaStreamSynchronize(st->stream), op);
    report_device_errors(st, op);
}

void mc_cuda_after_launch(mc_cuda_state *st, const char *op, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        mc_assert_fail("kernel launch", file, line, "cuda %s: kernel launch failed: %s (%s)", op, cudaGetErrorString(e),
                       cudaGetErrorName(e));
    if (st->debug_sync) {
        mc_cuda_capture_refuse(st, op, "waits for every launch (MC_CUDA_DEBUG_SYNC=1)");
        e = cudaStreamSynchronize(st->stream);
        if (e != cudaSuccess)
            mc_assert_fail("kernel execution", file, line, "cuda %s: kernel failed: %s (%s)", op, cudaGetErrorString(e),
                           cudaGetErrorName(e));
        report_device_errors(st, op);
    }
}

/* ---- workspace and segment tables ---- */

void *mc_cuda_workspace(mc_cuda_state *st, size_t bytes, const char *op) {
    mc_cuda_capture_refuse(st, op, "uses the scratch workspace, which moves when it grows");
    if (bytes <= st->workspace_bytes && st->workspace) return st->workspace;
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* whole MiB */
    if (want == 0) want = (size_t)1 << 20;
    /* ops in flight may still read the old buffer */
    MC_CUDA_CHECK(cudaStreamSynchronize(st->stream), op);
    if (st->workspace) MC_CUDA_CHECK(cudaFree(st->workspace), op);
    st->workspace = NULL;
    st->workspace_bytes = 0;
    cudaError_t e = cudaMalloc(&st->workspace, want);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        mc_assert_fail("cudaMalloc", __FILE__, __LINE__,
                       "cuda %s: out of device memory growing the workspace to %zu bytes (%s); free %zu of %zu bytes",
                       op, want, cudaGetErrorString(e), free_b, total_b);
    }
    st->workspace_bytes = want;
    return st->workspace;
}

void *mc_cuda_table_staging(mc_cuda_state *st, size_t bytes, const char *op) {
    mc_cuda_capture_refuse(st, op, "stages a segment table through host memory");
    /* the previous upload from the pinned staging buffer must have completed */
    if (st->seg_event_recorded) MC_CUDA_CHECK(cudaEventSynchronize(st->seg_event), op);
    if (bytes > st->seg_host_bytes) {
        size_t want = bytes * 2 > 4096 ? bytes * 2 : 4096;
        if (st->seg_host) MC_CUDA_CHECK(cudaFreeHost(st->seg_host), op);
        st->seg_host = NULL;
        st->seg_host_bytes = 0;
        MC_CUDA_CHECK(cudaMallocHost(&st->seg_host, want), op);
        st->seg_host_bytes = want;
    }
    return st->seg_host;
}

void *mc_cuda_table_commit(mc_cuda_state *st, size_t bytes, const char *op) {
    MC_ASSERT(bytes <= st->seg_host_bytes, "cuda %s: table of %zu bytes was not staged", op, bytes);
    if (bytes > st->seg_dev_bytes) {
        size_t want = bytes * 2 > 4096 ? bytes * 2 : 4096;
        MC_CUDA_CHECK(cudaStreamSynchronize(st->stream), op); /* kernels may still read the old table */
        if (st->seg_dev) MC_CUDA_CHECK(cudaFree(st->seg_dev), op);
        st->seg_dev = NULL;
        st->seg_dev_bytes = 0;
        MC_CUDA_CHECK(cudaMalloc(&st->seg_dev, want), op);
        st->seg_dev_bytes = want;
    }
    if (bytes) MC_CUDA_CHECK(cudaMemcpyAsync(st->seg_dev, st->seg_host, bytes, cudaMemcpyHostToDevice, st->stream), op);
    MC_CUDA_CHECK(cudaEventRecord(st->seg_event, st->stream), op);
    st->seg_event_recorded = true;
    return st->seg_dev;
}

/* ---- memory ---- */

static void record_alloc(mc_cuda_state *st, void *p, size_t bytes) {
    if (st->nallocs == st->cap_allocs) {
        size_t cap = st->cap_allocs ? 2 * st->cap_allocs : 64;
        st->allocs = (mc_cuda_alloc_rec *)mc_xrealloc(st->allocs, cap * sizeof(mc_cuda_alloc_rec));
        st->cap_allocs = cap;
    }
    st->allocs[st->nallocs].ptr = p;
    st->allocs[st->nallocs].bytes = bytes;
    st->nallocs++;
    st->allocated += bytes;
    if (st->allocated > st->max_allocated) st->max_allocated = st->allocated;
}

static void *cuda_alloc(mc_backend *be, size_t bytes) {
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_capture_refuse(st, "alloc", "allocates device memory");
    size_t real = bytes ? bytes : 1; /* a present tensor needs a non-NULL pointer even when empty */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, real);
    if (e != cudaSuccess || !p) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError(); /* clear the (non-sticky) allocation error */
        cudaMemGetInfo(&free_b, &total_b);
        mc_assert_fail("cudaMalloc", __FILE__, __LINE__,
                       "cuda alloc: out of device memory allocating %zu bytes (%s); device %d has %zu of %zu bytes free; "
                       "this backend holds %zu bytes allocated (peak %zu) + %zu bytes of workspaces",
                       bytes, cudaGetErrorString(e), st->device, free_b, total_b, st->allocated, st->max_allocated,
                       st->workspace_bytes + st->lt_workspace_bytes);
    }
    record_alloc(st, p, bytes);
    return p;
}

static void cuda_free(mc_backend *be, void *ptr) {
    if (!ptr) return;
    mc_cuda_state *st = mc_cuda_st(be);
    size_t i = st->nallocs;
    while (i > 0 && st->allocs[i - 1].ptr != ptr) i--; /* newest first: arenas free in reverse */
    MC_ASSERT(i > 0, "cuda free: %p was not allocated by this backend", ptr);
    i--;
    /* kernels in flight may still use the memory; cudaFree does not wait for our stream */
    mc_cuda_capture_refuse(st, "free", "frees device memory");
    MC_CUDA_CHECK(cudaStreamSynchronize(st->stream), "free");
    MC_CUDA_CHECK(cudaFree(ptr), "free");
    st->allocated -= st->allocs[i].bytes;
    st->allocs[i] = st->allocs[st->nallocs - 1];
    st->nallocs--;
}

static void cuda_memory_stats(mc_backend *be, size_t *allocated, size_t *max_allocated, size_t *reserved) {
    mc_cuda_state *st = mc_cuda_st(be);
    *allocated = st->allocated;
    *max_allocated = st->max_allocated;
    *reserved = st->allocated + st->workspace_bytes + st->lt_workspace_bytes + st->seg_dev_bytes +
                sizeof(double) * MC_CUDA_RED_MAX_BLOCKS + sizeof(float) * MC_CUDA_KV_PARTIAL_FLOATS + sizeof(unsigned) * MC_CUDA_KV_COUNTERS + 64;
}

static void cuda_copy_h2d(mc_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_capture_refuse(st, "copy_h2d", "copies to or from host memory");
    MC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream), "copy_h2d");
    mc_cuda_sync_checked(st, "copy_h2d"); /* the caller may reuse src on return */
}

static void cuda_copy_d2h(mc_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_capture_refuse(st, "copy_d2h", "copies to or from host memory");
    MC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream), "copy_d2h");
    mc_cuda_sync_checked(st, "copy_d2h");
}

/* Page-locked, so that cudaMemcpyAsync from or to it is asynchronous for the host. */
static void *cuda_host_alloc(mc_backend *be, size_t bytes) {
    mc_cuda_capture_refuse(mc_cuda_st(be), "host_alloc", "allocates host memory");
    void *p = NULL;
    MC_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), "host_alloc");
    return p;
}

static void cuda_host_free(mc_backend *be, void *ptr) {
    if (!ptr) return;
    /* a queued copy may still read or write it */
    mc_cuda_capture_refuse(mc_cuda_st(be), "host_free", "frees host memory");
    MC_CUDA_CHECK(cudaStreamSynchronize(mc_cuda_st(be)->stream), "host_free");
    MC_CUDA_CHECK(cudaFreeHost(ptr), "host_free");
}

static void copy_async(mc_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *op) {
    if (!bytes) return;
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_capture_refuse(st, op, "copies to or from host memory");
    MC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st->stream), op);
    MC_CUDA_CHECK(cudaEventRecord(st->copy_event, st->stream), op);
    st->copy_event_recorded = true;
}

static void cuda_copy_h2d_async(mc_backend *be, void *dst, const void *src, size_t bytes) {
    copy_async(be, dst, src, bytes, cudaMemcpyHostToDevice, "copy_h2d_async");
}

static void cuda_copy_d2h_async(mc_backend *be, void *dst, const void *src, size_t bytes) {
    copy_async(be, dst, src, bytes, cudaMemcpyDeviceToHost, "copy_d2h_async");
}

static void cuda_wait_copies(mc_backend *be) {
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_capture_refuse(st, "wait_copies", "waits for the copies");
    if (st->copy_event_recorded) MC_CUDA_CHECK(cudaEventSynchronize(st->copy_event), "wait_copies");
    report_device_errors(st, "wait_copies");
}

static void cuda_mark(mc_backend *be, int i) {
    mc_cuda_state *st = mc_cuda_st(be);
    MC_ASSERT(i >= 0 && i < MC_BACKEND_MARKS, "mark %d of %d", i, MC_BACKEND_MARKS);
    mc_cuda_capture_refuse(st, "mark", "records an event for the host");
    MC_CUDA_CHECK(cudaEventRecord(st->marks[i], st->stream), "mark");
    st->mark_recorded[i] = true;
}

static void cuda_wait_mark(mc_backend *be, int i) {
    mc_cuda_state *st = mc_cuda_st(be);
    MC_ASSERT(i >= 0 && i < MC_BACKEND_MARKS, "mark %d of %d", i, MC_BACKEND_MARKS);
    mc_cuda_capture_refuse(st, "wait_mark", "waits for the stream");
    if (st->mark_recorded[i]) MC_CUDA_CHECK(cudaEventSynchronize(st->marks[i]), "wait_mark");
    report_device_errors(st, "wait_mark");
}

/* On the calling thread's default stream (per-thread default streams do not synchronize
 * with the backend's non-blocking stream), on the backend's device. */
static void cuda_copy_d2h_side(mc_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    mc_cuda_state *st = mc_cuda_st(be);
    MC_CUDA_CHECK(cudaSetDevice(st->device), "copy_d2h_side");
    MC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread), "copy_d2h_side");
    MC_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread), "copy_d2h_side");
}

static void cuda_copy_d2d(mc_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    mc_cuda_state *st = mc_cuda_st(be);
    MC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream), "copy_d2d");
}

static void cuda_zero(mc_backend *be, void *dst, size_t bytes) {
    if (!bytes) return;
    mc_cuda_state *st = mc_cuda_st(be);
    MC_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, st->stream), "zero");
}

static void cuda_sync(mc_backend *be) { mc_cuda_sync_checked(mc_cuda_st(be), "sync"); }

/* What cudaMalloc can still get on this device. */
static size_t cuda_memory_available(mc_backend *be) {
    mc_cuda_state *st = mc_cuda_st(be);
    size_t free_b = 0, total_b = 0;
    MC_CUDA_CHECK(cudaSetDevice(st->device), "memory_available");
    MC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "memory_available");
    return free_b;
}

/* The sizes the kernels take, by op family. */
static bool cuda_supports(mc_backend *be, const mc_op_sizes *s, mc_op_refusal *why) {
    (void)be;
    switch (s->op) {
    case MC_OP_ATTENTION_FWD:
    case MC_OP_ATTENTION_BWD: return mc_cuda_attention_supports(s, why);
    case MC_OP_ATTENTION_KV_FWD: return mc_cuda_attention_kv_supports(s, why);
    case MC_OP_EMBEDDING_BWD: return mc_cuda_embedding_bwd_supports(s, why);
    case MC_OP_XENT_ROWSTATS:
    case MC_OP_XENT_LOSS_GRAD:
    case MC_OP_XENT_FUSED: return mc_cuda_xent_supports(s, why);
    default: return true;
    }
}

/* The compute stream, for the comm layer's NCCL calls (ordered with our ops). */
static void *cuda_native_stream(mc_backend *be) { return (void *)mc_cuda_st(be)->stream; }

/* ---- the backend ---- */

static void state_release(mc_cuda_state *st) {
    if (!st) return;
    if (st->stream) cudaStreamSynchronize(st->stream);
    mc_cuda_gemm_prof_report_free(st);
    mc_cuda_gemm_cache_destroy(st);
#ifdef MC_HAVE_CUDNN_ATTENTION
    mc_cudnn_attention_release(st);
#endif
    for (size_t i = 0; i < st->nallocs; i++) cudaFree(st->allocs[i].ptr); /* what the caller did not free */
    free(st->allocs);
    if (st->lt) cublasLtDestroy(st->lt);
    if (st->lt_workspace) cudaFree(st->lt_workspace);
    if (st->workspace) cudaFree(st->workspace);
    if (st->red_partials) cudaFree(st->red_partials);
    if (st->kv_partials) cudaFree(st->kv_partials);
    if (st->red_result) cudaFree(st->red_result);
    if (st->host_result) cudaFreeHost(st->host_result);
    if (st->seg_host) cudaFreeHost(st->seg_host);
    if (st->seg_dev) cudaFree(st->seg_dev);
    if (st->seg_event) cudaEventDestroy(st->seg_event);
    if (st->copy_event) cudaEventDestroy(st->copy_event);
    for (int i = 0; i < MC_BACKEND_MARKS; i++)
        if (st->marks[i]) cudaEventDestroy(st->marks[i]);
    if (st->err_host) cudaFreeHost(st->err_host);
    if (st->stream) cudaStreamDestroy(st->stream);
    free(st);
}

static void cuda_destroy(mc_backend *be) {
    if (!be) return;
    mc_cuda_state *st = mc_cuda_st(be);
    if (st) {
        cudaError_t e = cudaSetDevice(st->device);
        if (e != cudaSuccess)
            fprintf(stderr, "megatron-c: warning: cuda destroy: cudaSetDevice(%d): %s\n", st->device, cudaGetErrorString(e));
        state_release(st);
    }
    free(be);
}

extern "C" bool mc_backend_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

/* Sets *err and returns NULL after releasing what was built, on a failing runtime call. */
#define CREATE_TRY(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            mc_err_set(err, "--device cuda: %s failed on device %d: %s", #call, device, cudaGetErrorString(e_)); \
            state_release(st);                                                                            \
            return NULL;                                                                                  \
        }                                                                                                 \
    } while (0)

extern "C" mc_backend *mc_backend_cuda_create(int device, mc_err *err) {
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        mc_err_set(err, "--device cuda: no CUDA device is visible (%s)",
                   ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount returned 0");
        cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= count) {
        mc_err_set(err, "--device cuda: device %d does not exist (%d visible)", device, count);
        return NULL;
    }
    mc_cuda_state *st = (mc_cuda_state *)mc_xcalloc(1, sizeof *st);
    st->device = device;
    CREATE_TRY(cudaSetDevice(device));
    cudaDeviceProp prop;
    CREATE_TRY(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 9) {
        mc_err_set(err,
                   "--device cuda: device %d (%s) has compute capability %d.%d; this build targets Hopper (sm_90) "
                   "and newer",
                   device, prop.name, prop.major, prop.minor);
        state_release(st);
        return NULL;
    }
    st->sm_count = prop.multiProcessorCount;
    st->max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    st->smem_optin = prop.sharedMemPerBlockOptin;
    st->smem_per_sm = prop.sharedMemPerMultiprocessor;
    const char *dbg = getenv("MC_CUDA_DEBUG_SYNC");
    st->debug_sync = dbg && dbg[0] && strcmp(dbg, "0") != 0;

    CREATE_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    CREATE_TRY(cudaEventCreateWithFlags(&st->seg_event, cudaEventDisableTiming));
    CREATE_TRY(cudaEventCreateWithFlags(&st->copy_event, cudaEventDisableTiming));
    for (int i = 0; i < MC_BACKEND_MARKS; i++) CREATE_TRY(cudaEventCreateWithFlags(&st->marks[i], cudaEventDisableTiming));
    cublasStatus_t bs = cublasLtCreate(&st->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        mc_err_set(err, "--device cuda: cublasLtCreate failed on device %d: %s", device, cublasLtGetStatusString(bs));
        st->lt = NULL;
        state_release(st);
        return NULL;
    }
    CREATE_TRY(cudaMalloc(&st->lt_workspace, MC_CUDA_LT_WORKSPACE));
    st->lt_workspace_bytes = MC_CUDA_LT_WORKSPACE;
    CREATE_TRY(cudaMalloc((void **)&st->red_partials, sizeof(double) * MC_CUDA_RED_MAX_BLOCKS));
    CREATE_TRY(cudaMalloc((void **)&st->kv_partials,
                          sizeof(float) * MC_CUDA_KV_PARTIAL_FLOATS + sizeof(unsigned) * MC_CUDA_KV_COUNTERS));
    st->kv_counters = reinterpret_cast<unsigned *>(st->kv_partials + MC_CUDA_KV_PARTIAL_FLOATS);
    CREATE_TRY(cudaMemset(st->kv_counters, 0, sizeof(unsigned) * MC_CUDA_KV_COUNTERS));
    CREATE_TRY(cudaDeviceSynchronize()); /* the memset's stream does not order the backend's */
    CREATE_TRY(cudaMalloc(&st->red_result, 64));
    CREATE_TRY(cudaMallocHost(&st->host_result, 64));
    CREATE_TRY(cudaHostAlloc((void **)&st->err_host, 4 * sizeof(int), cudaHostAllocMapped));
    memset(st->err_host, 0, 4 * sizeof(int));
    CREATE_TRY(cudaHostGetDevicePointer((void **)&st->err_dev, st->err_host, 0));

    mc_backend *be = (mc_backend *)mc_xcalloc(1, sizeof *be);
    be->name = "cuda";
    be->device = MC_DEVICE_CUDA;
    be->impl = st;
    st->be = be;
    be->compute_dtypes = MC_DTYPE_BIT(MC_F32) | MC_DTYPE_BIT(MC_BF16) | MC_DTYPE_BIT(MC_F16);
    be->storage_dtypes = be->compute_dtypes;
    be->supports = cuda_supports;

    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->copy_h2d = cuda_copy_h2d;
    be->copy_d2h = cuda_copy_d2h;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->copy_h2d_async = cuda_copy_h2d_async;
    be->copy_d2h_async = cuda_copy_d2h_async;
    be->copy_d2d = cuda_copy_d2d;
    be->copy_d2h_side = cuda_copy_d2h_side;
    be->zero = cuda_zero;
    be->sync = cuda_sync;
    be->wait_copies = cuda_wait_copies;
    be->mark = cuda_mark;
    be->wait_mark = cuda_wait_mark;
    be->convert = mc_cuda_convert;
    be->fill = mc_cuda_fill;
    be->init_normal = mc_cuda_init_normal;
    be->memory_stats = cuda_memory_stats;
    be->memory_available = cuda_memory_available;

    be->gemm = mc_cuda_gemm;
    be->linear_fwd = mc_cuda_linear_fwd;
    be->linear_bwd = mc_cuda_linear_bwd;
    be->linear_residual_fwd = mc_cuda_linear_residual_fwd;
    be->linear_gelu_fwd = mc_cuda_linear_gelu_fwd;
    be->linear_dgelu_bwd = mc_cuda_linear_dgelu_bwd;
    be->embedding_fwd = mc_cuda_embedding_fwd;
    be->embedding_bwd = mc_cuda_embedding_bwd;
    be->layernorm_fwd = mc_cuda_layernorm_fwd;
    be->layernorm_bwd = mc_cuda_layernorm_bwd;
    be->rmsnorm_fwd = mc_cuda_rmsnorm_fwd;
    be->rmsnorm_bwd = mc_cuda_rmsnorm_bwd;
    be->rope = mc_cuda_rope;
    be->gelu_fwd = mc_cuda_gelu_fwd;
    be->gelu_bwd = mc_cuda_gelu_bwd;
    be->swiglu_fwd = mc_cuda_swiglu_fwd;
    be->swiglu_bwd = mc_cuda_swiglu_bwd;
    be->attention_fwd = mc_cuda_attention_fwd;
    be->attention_bwd = mc_cuda_attention_bwd;
    be->attention_kv_fwd = mc_cuda_attention_kv_fwd;
    be->argmax_rows = mc_cuda_argmax_rows;
    be->decode_advance = mc_cuda_decode_advance;
    be->dropout_fwd = mc_cuda_dropout_fwd;
    be->dropout_bwd = mc_cuda_dropout_bwd;
    be->dropout_add_fwd = mc_cuda_dropout_add_fwd;
    be->add_inplace = mc_cuda_add_inplace;
    be->scale_inplace = mc_cuda_scale_inplace;
    be->xent_rowstats = mc_cuda_xent_rowstats;
    be->xent_rescale = mc_cuda_xent_rescale;
    be->xent_loss_grad = mc_cuda_xent_loss_grad;
    be->xent_fused = mc_cuda_xent_fused;
    be->adamw = mc_cuda_adamw;
    be->master_join = mc_cuda_master_join;
    be->master_split = mc_cuda_master_split;
    be->sumsq = mc_cuda_sumsq;
    be->sumsq_segments = mc_cuda_sumsq_segments;
    be->count_zeros = mc_cuda_count_zeros;
    be->native_stream = cuda_native_stream;
    be->graph_capture_begin = mc_cuda_graph_capture_begin;
    be->graph_capture_end = mc_cuda_graph_capture_end;
    be->graph_launch = mc_cuda_graph_launch;
    be->graph_free = mc_cuda_graph_free;

    be->destroy = cuda_destroy;
    return be;
}
