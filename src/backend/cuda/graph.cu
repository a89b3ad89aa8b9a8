/* graph.cu: the CUDA backend's graphs (backend.h's graph entries): the ops issued between
 * capture_begin and capture_end recorded from the backend's stream (thread-local capture
 * mode: only this thread's calls are checked against the capture, so another thread's
 * allocation or copy breaks nothing), instantiated once, and replayed by one
 * cudaGraphLaunch on the same stream, which orders them after the work queued before.
 *
 * A call that cannot be recorded refuses the capture (mc_cuda_capture_refuse; see
 * cuda_internal.h), which ends it there and runs that call and the rest eagerly: one
 * failed graph, with its reason, instead of an abort in the call's checked CUDA API. */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>

/* Ends the capture on st's stream, returning what it recorded (NULL when it was
 * invalidated, with the error in *e), and checks that the stream records no more. */
static cudaGraph_t capture_stop(mc_cuda_state *st, cudaError_t *e) {
    cudaGraph_t g = NULL;
    *e = cudaStreamEndCapture(st->stream, &g);
    if (*e != cudaSuccess && g) {
        cudaGraphDestroy(g);
        g = NULL;
    }
    cudaGetLastError(); /* a refused capture's error is ours to report, not the next launch's */
    st->capturing = false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    MC_CUDA_CHECK(cudaStreamIsCapturing(st->stream, &status), "graph capture");
    MC_ASSERT(status == cudaStreamCaptureStatusNone, "cuda graph capture: the stream is still capturing after its end");
    return g;
}

void mc_cuda_capture_refuse(mc_cuda_state *st, const char *op, const char *what) {
    if (!st->capturing) return;
    cudaError_t e;
    cudaGraph_t g = capture_stop(st, &e);
    if (g) cudaGraphDestroy(g);
    snprintf(st->capture_refusal, sizeof st->capture_refusal, "cuda %s %s", op, what);
}

bool mc_cuda_graph_capture_begin(mc_backend *be, mc_err *why) {
    mc_cuda_state *st = mc_cuda_st(be);
    MC_ASSERT(!st->capturing, "cuda graph_capture_begin: a capture is already under way");
    cudaError_t e = cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        mc_err_set(why, "cuda graph_capture_begin: cudaStreamBeginCapture failed: %s", cudaGetErrorString(e));
        return false;
    }
    st->capturing = true;
    st->capture_refusal[0] = '\0';
    return true;
}

void *mc_cuda_graph_capture_end(mc_backend *be, mc_err *why) {
    mc_cuda_state *st = mc_cuda_st(be);
    if (!st->capturing) { /* refused on the way */
        MC_ASSERT(st->capture_refusal[0], "cuda graph_capture_end: no capture began");
        mc_err_set(why, "%s", st->capture_refusal);
        return NULL;
    }
    cudaError_t e;
    cudaGraph_t g = capture_stop(st, &e);
    if (!g) {
        mc_err_set(why, "cuda graph_capture_end: cudaStreamEndCapture failed: %s",
                   e != cudaSuccess ? cudaGetErrorString(e) : "no graph recorded");
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g); /* the executable graph holds what it needs */
    if (e != cudaSuccess) {
        cudaGetLastError();
        mc_err_set(why, "cuda graph_capture_end: cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    return (void *)exec;
}

void mc_cuda_graph_launch(mc_backend *be, void *graph) {
    mc_cuda_state *st = mc_cuda_st(be);
    MC_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, st->stream), "graph_launch");
}

void mc_cuda_graph_free(mc_backend *be, void *graph) {
    if (!graph) return;
    mc_cuda_state *st = mc_cuda_st(be);
    mc_cuda_sync_checked(st, "graph_free"); /* a launch of it may still be running */
    MC_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph), "graph_free");
}
