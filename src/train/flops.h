/* flops.h: Megatron's FLOPs count per iteration (training.py num_floating_point_operations,
 * HEAD: causal attention halved) and the CPU's measured matrix-multiply peak. */
#ifndef MC_TRAIN_FLOPS_H
#define MC_TRAIN_FLOPS_H

#include "megatron.h"
#include "tensor/backend.h"

/* Model FLOPs of one iteration of `batch` sequences (forward + backward, no recompute). */
double mc_flops_per_iteration(const mc_config *cfg, int padded_vocab, int64_t batch);

/* sgemm throughput of `be` in TFLOP/s: the best of ten 1024^3 products (~0.2 s on 2 cores). */
double mc_measure_gemm_tflops(mc_backend *be);

#endif
