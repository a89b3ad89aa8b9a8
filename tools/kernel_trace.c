/* kernel_trace.c: a CUPTI activity tracer loaded into any CUDA program through
 * CUDA_INJECTION64_PATH, for where a training step's GPU time goes when nothing but the
 * program runs (ncu replays each kernel alone, at the clocks of an idle GPU; Nsight Systems
 * does not run on the GPU machine). It records every kernel, memset and memcpy with its
 * start and end on the GPU's clock and writes them, at exit, to the CSV file named by
 * MC_TRACE_OUT (default kernel_trace.csv):
 *   kind,start_ns,end_ns,stream,name
 * tools/trace_summary.py turns that into per-iteration busy time, gaps and kernel sums.
 *   CUDA_INJECTION64_PATH=$PWD/libmc_kernel_trace.so MC_TRACE_OUT=t.csv megatron-c train ...
 */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES (8u << 20)

static FILE *g_out;

static void check(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return;
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

/* Kernel names go out quoted: C++ names hold commas. */
static void write_row(const char *kind, uint64_t start, uint64_t end, uint32_t stream, const char *name) {
    fprintf(g_out, "%s,%llu,%llu,%u,\"", kind, (unsigned long long)start, (unsigned long long)end, stream);
    for (const char *c = name; *c; c++) fputc(*c == '"' ? '\'' : *c, g_out);
    fputs("\"\n", g_out);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream_id, (void)size;
    CUpti_Activity *rec = NULL;
    while (g_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            write_row("kernel", k->start, k->end, k->streamId, k->name ? k->name : "?");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            char nm[64];
            snprintf(nm, sizeof nm, "memset %llu bytes", (unsigned long long)m->bytes);
            write_row("memset", m->start, m->end, m->streamId, nm);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            char nm[64];
            snprintf(nm, sizeof nm, "memcpy kind %u %llu bytes", (unsigned)m->copyKind, (unsigned long long)m->bytes);
            write_row("memcpy", m->start, m->end, m->streamId, nm);
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
    free(buffer);
}

static void flush_at_exit(void) {
    check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    if (g_out) fclose(g_out);
    g_out = NULL;
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void) {
    const char *path = getenv("MC_TRACE_OUT");
    if (!path || !*path) path = "kernel_trace.csv";
    g_out = fopen(path, "w");
    if (!g_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        return 0;
    }
    fputs("kind,start_ns,end_ns,stream,name\n", g_out);
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memsets");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpys");
    atexit(flush_at_exit);
    return 1;
}
