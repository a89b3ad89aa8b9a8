/* backend.c: what every backend shares outside its vtable: the arena allocator over a
 * backend, and the CUDA entry points of builds without CUDA. */
#include "tensor/backend.h"

#include "base/error.h"

static void *arena_alloc(void *be, size_t bytes) { return ((mc_backend *)be)->alloc(be, bytes); }
static void arena_free(void *be, void *p) { ((mc_backend *)be)->free(be, p); }

mc_arena_allocator mc_backend_arena_allocator(mc_backend *be) {
    return (mc_arena_allocator){.alloc = arena_alloc, .free = arena_free, .ctx = be};
}

#ifndef MC_HAVE_CUDA
/* Builds without CUDA: selecting the GPU is a user error with a clear reason. */
bool mc_backend_cuda_available(void) { return false; }

mc_backend *mc_backend_cuda_create(int device, mc_err *err) {
    (void)device;
    mc_err_set(err, "--device cuda: this build of megatron-c has no CUDA backend (built without nvcc)");
    return NULL;
}
#endif
