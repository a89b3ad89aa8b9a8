/* gemm_profile.cu: MC_GEMM_PROFILE=1 times every cuBLASLt call of the run between CUDA
 * events and, when the backend is freed, prints one line per distinct GEMM (shape,
 * transposes, dtypes, epilogue, beta and the algorithm that ran: tile, split-K, reduction
 * scheme, stages) with its calls, total and mean time and TFLOP/s, slowest total first.
 * It says which GEMMs keep a step from the floor (../shared/bench/floor.py times each
 * GEMM alone; bench/torch_gemms.py sets each line beside torch's matmul at its shape);
 * Nsight Systems would too, but cuBLASLt's kernel names carry no shapes.
 *
 * Recording an event pair around each call costs little, but the pairs are read back in
 * batches with a synchronize, which closes the step's open end (the update then no longer
 * overlaps the next step's host work): read step times of a profiled run with that in mind. */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PROF_PENDING = 256, PROF_LABELS = 512, PROF_LABEL_LEN = 200 };

typedef struct prof_label {
    char text[PROF_LABEL_LEN];
    double flops, total_ms, min_ms;
    long calls;
} prof_label;

struct mc_cuda_gemm_prof {
    cudaEvent_t ev[PROF_PENDING][2];
    int label_of[PROF_PENDING]; /* pending pair -> label */
    int npending;
    prof_label labels[PROF_LABELS];
    int nlabels;
    bool overflowed; /* more distinct GEMMs than PROF_LABELS: the rest go uncounted */
};

static bool profile_wanted(void) {
    const char *e = getenv("MC_GEMM_PROFILE");
    return e && strcmp(e, "0") != 0 && e[0] != '\0';
}

/* Reads back every pending pair into its label (one synchronize). */
static void prof_flush(mc_cuda_gemm_prof *p) {
    if (p->npending == 0) return;
    MC_CUDA_CHECK(cudaEventSynchronize(p->ev[p->npending - 1][1]), "gemm profile");
    for (int i = 0; i < p->npending; i++) {
        float ms = 0.0f;
        MC_CUDA_CHECK(cudaEventElapsedTime(&ms, p->ev[i][0], p->ev[i][1]), "gemm profile");
        prof_label *l = &p->labels[p->label_of[i]];
        l->total_ms += ms;
        if (l->calls == 0 || ms < l->min_ms) l->min_ms = ms;
        l->calls++;
    }
    p->npending = 0;
}

int mc_cuda_gemm_prof_start(mc_cuda_state *st) {
    if (!st->gprof) {
        if (st->gprof_off) return -1;
        if (!profile_wanted()) {
            st->gprof_off = true;
            return -1;
        }
        st->gprof = (mc_cuda_gemm_prof *)mc_xcalloc(1, sizeof(mc_cuda_gemm_prof));
        for (int i = 0; i < PROF_PENDING; i++)
            for (int j = 0; j < 2; j++) MC_CUDA_CHECK(cudaEventCreate(&st->gprof->ev[i][j]), "gemm profile");
    }
    mc_cuda_gemm_prof *p = st->gprof;
    if (p->npending == PROF_PENDING) prof_flush(p);
    MC_CUDA_CHECK(cudaEventRecord(p->ev[p->npending][0], st->stream), "gemm profile");
    return p->npending;
}

void mc_cuda_gemm_prof_stop(mc_cuda_state *st, int slot, const char *label, double flops) {
    if (slot < 0) return;
    mc_cuda_gemm_prof *p = st->gprof;
    MC_CUDA_CHECK(cudaEventRecord(p->ev[slot][1], st->stream), "gemm profile");
    int li = 0;
    while (li < p->nlabels && strcmp(p->labels[li].text, label) != 0) li++;
    if (li == PROF_LABELS) { /* unattributable: the slot is reused by the next call */
        p->overflowed = true;
        return;
    }
    if (li == p->nlabels) {
        snprintf(p->labels[li].text, PROF_LABEL_LEN, "%s", label);
        p->labels[li].flops = flops;
        p->nlabels++;
    }
    p->label_of[slot] = li;
    p->npending++;
}

static int by_total_desc(const void *a, const void *b) {
    double x = ((const prof_label *)a)->total_ms, y = ((const prof_label *)b)->total_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

void mc_cuda_gemm_prof_report_free(mc_cuda_state *st) {
    mc_cuda_gemm_prof *p = st->gprof;
    if (!p) return;
    prof_flush(p);
    qsort(p->labels, (size_t)p->nlabels, sizeof p->labels[0], by_total_desc);
    double total = 0.0;
    long calls = 0;
    for (int i = 0; i < p->nlabels; i++) total += p->labels[i].total_ms, calls += p->labels[i].calls;
    fprintf(stderr, "megatron-c: gemm profile: %ld cuBLASLt calls, %.3f ms in all, %d distinct%s\n", calls, total,
            p->nlabels, p->overflowed ? " (more were not counted: the label table is full)" : "");
    fprintf(stderr, "megatron-c: gemm profile: %8s %10s %9s %9s %8s  %s\n", "calls", "total ms", "mean us", "min us",
            "TFLOP/s", "gemm");
    for (int i = 0; i < p->nlabels; i++) {
        const prof_label *l = &p->labels[i];
        double mean_ms = l->total_ms / (double)l->calls;
        fprintf(stderr, "megatron-c: gemm profile: %8ld %10.3f %9.1f %9.1f %8.1f  %s\n", l->calls, l->total_ms,
                mean_ms * 1e3, l->min_ms * 1e3, l->flops / (mean_ms * 1e-3) / 1e12, l->text);
    }
    for (int i = 0; i < PROF_PENDING; i++)
        for (int j = 0; j < 2; j++) cudaEventDestroy(p->ev[i][j]);
    free(p);
    st->gprof = NULL;
}
