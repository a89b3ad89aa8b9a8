/* arena.h: bump allocators over one allocation (a backend's, through an allocator
 * callback), sized up front.
 *
 * Memory is planned: code that needs buffers first runs its allocation sequence against a
 * measuring arena (which only counts), then creates a real arena of exactly that size and
 * runs the same sequence again. Nothing is allocated in the step loop. */
#ifndef MC_BASE_ARENA_H
#define MC_BASE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_ARENA_ALIGN 256 /* bytes: enough for 16-byte vector loads and TMA descriptors */

/* Where a real arena's memory comes from (a backend's alloc and free, say), ctx passed
 * through. alloc aborts with a message when out of memory. */
typedef struct mc_arena_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *ctx;
} mc_arena_allocator;

typedef struct mc_arena {
    const char *name;
    mc_arena_allocator allocator; /* alloc NULL: host memory from posix_memalign */
    char *base;
    size_t capacity, used, peak;
    bool measuring; /* only counts; returned pointers must not be dereferenced */
} mc_arena;

/* A counting arena (no memory). */
void mc_arena_init_measure(mc_arena *a, const char *name);
/* A real arena of `bytes` from `allocator` (host memory when NULL). */
void mc_arena_init(mc_arena *a, const char *name, const mc_arena_allocator *allocator, size_t bytes);
void mc_arena_free(mc_arena *a);

/* `bytes` rounded up to MC_ARENA_ALIGN; aborts with the arena's name when it overflows
 * (a planning bug, not a user error). */
void *mc_arena_alloc(mc_arena *a, size_t bytes);

/* Buffers whose lifetimes never overlap can share bytes: after mc_arena_rewind(a, mark)
 * (mark: an earlier a->used) allocations reuse the bytes from mark on, and
 * mc_arena_skip_to_peak(a) moves past everything allocated so far again. */
void mc_arena_rewind(mc_arena *a, size_t mark);
void mc_arena_skip_to_peak(mc_arena *a);

#ifdef __cplusplus
}
#endif

#endif
