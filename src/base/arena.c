#include "base/arena.h"

#include <stdint.h>

#include "base/error.h"

static size_t round_up(size_t n) { return (n + MC_ARENA_ALIGN - 1) / MC_ARENA_ALIGN * MC_ARENA_ALIGN; }

void mc_arena_init_measure(mc_arena *a, const char *name) {
    *a = (mc_arena){.name = name, .measuring = true, .capacity = SIZE_MAX};
}

void mc_arena_init(mc_arena *a, const char *name, const mc_arena_allocator *allocator, size_t bytes) {
    *a = (mc_arena){.name = name, .capacity = round_up(bytes)};
    if (allocator) a->allocator = *allocator;
    if (a->capacity == 0) return;
    if (a->allocator.alloc) {
        a->base = a->allocator.alloc(a->allocator.ctx, a->capacity);
    } else {
        void *p = NULL;
        if (posix_memalign(&p, MC_ARENA_ALIGN, a->capacity) != 0)
            mc_assert_fail("posix_memalign", __FILE__, __LINE__, "out of host memory: arena '%s' of %zu bytes",
                           name, a->capacity);
        a->base = p;
    }
}

void mc_arena_free(mc_arena *a) {
    if (a->base) {
        if (a->allocator.free)
            a->allocator.free(a->allocator.ctx, a->base);
        else
            free(a->base);
    }
    a->base = NULL;
    a->capacity = a->used = 0;
}

void *mc_arena_alloc(mc_arena *a, size_t bytes) {
    size_t n = round_up(bytes);
    if (!a->measuring && a->used + n > a->capacity)
        mc_assert_fail("arena capacity", __FILE__, __LINE__, "arena '%s' overflow: %zu + %zu > %zu bytes", a->name,
                       a->used, n, a->capacity);
    /* A measuring arena hands out distinct fake addresses so views stay "present". */
    void *p = a->measuring ? (void *)(uintptr_t)(MC_ARENA_ALIGN + a->used) : a->base + a->used;
    a->used += n;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

void mc_arena_rewind(mc_arena *a, size_t mark) {
    MC_ASSERT(mark <= a->used, "arena '%s': rewind to %zu past its use %zu", a->name, mark, a->used);
    a->used = mark;
}

void mc_arena_skip_to_peak(mc_arena *a) { a->used = a->peak; }
