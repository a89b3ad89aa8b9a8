#include "base/error.h"
#include "tensor/backend.h"

#ifndef MC_HAVE_CUDA
/* Builds without CUDA: selecting the GPU is a user error with a clear reason. */
bool mc_backend_cuda_available(void) { return false; }

mc_backend *mc_backend_cuda_create(int device, mc_err *err) {
    (void)device;
    mc_err_set(err, "--device cuda: this build of megatron-c has no CUDA backend (built without nvcc)");
    return NULL;
}
#endif
