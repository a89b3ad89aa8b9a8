/* wgmma.h: Hopper warpgroup matrix-multiply-accumulate (wgmma, sm_90a) for our own kernels:
 * shared-memory matrix descriptors for 128-byte-swizzled BF16 tiles, the async fences, the
 * instruction wrappers of the shapes the attention kernels use, the swizzled tile load, and
 * the copy engine's bulk F32 add from shared to global memory.
 *
 * Tiles: [rows][64] BF16, one 128-byte row each, the 16-byte chunk c of row r stored at chunk
 * c ^ (r % 8) (the hardware's 128B swizzle: address bits 4-6 XOR bits 7-9), the tile starting
 * 1024-byte aligned. One such tile serves as either operand in either role:
 *   - K-major (the 64 columns are the reduction dim): 8-row groups 1024 bytes apart (SBO);
 *     the k-step of 16 columns starts 32 bytes further;
 *   - MN-major (the rows are the reduction dim, the 64 columns are M or N): consecutive k are
 *     consecutive rows, 8-row groups 1024 bytes apart (SBO); the k-step of 16 rows starts
 *     2048 bytes further; transpose flag 1.
 * Accumulators d[64 x N] F32, N/2 registers a thread: thread t of the warpgroup (warp w =
 * t / 32, lane l) holds d[4 j + 2 h + c] = element (16 w + l / 4 + 8 h, 8 j + 2 (l % 4) + c),
 * i.e. per warp the m16n8 accumulator layout of mma.sync, N/8 column tiles. A from
 * registers is the m16n8k16 A fragment per warp (rows 16 w ..), so an accumulator's
 * columns 16 k .. 16 k + 15 repack as the A operand of k-step k (wg_pack_a).
 *
 * Ordering rules (PTX): wg_arrive() before the first wgmma of a batch (orders the registers
 * written by ordinary code before the async reads), wg_commit() after, wg_wait<N>() before
 * the accumulators or the A registers are touched again; shared memory written by ordinary
 * stores or cp.async needs wg_fence_proxy() in the writing threads before the barrier that
 * precedes the wgmma reading it. wg_fence_acc keeps the compiler from moving accumulator
 * accesses across those points.
 *
 * Only the sm_90a pass has these instructions (WG_ENABLED); elsewhere (the compute_90 PTX
 * kept for other GPUs) the wrappers trap, and the host side launches these kernels only on
 * a compute capability 9.0 device. */
#ifndef MC_BACKEND_CUDA_WGMMA_H
#define MC_BACKEND_CUDA_WGMMA_H

#include <cuda_bf16.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ENABLED 1
#else
#define WG_ENABLED 0
#endif

__device__ __forceinline__ void wg_unsupported() { __trap(); }

/* Descriptor of a 128B-swizzled tile at p (1024-byte aligned, or a 32-byte k-step inside
 * one): start address, leading byte offset (the stride between 64-element atoms along MN
 * of an MN-major operand wider than 64; unused otherwise), stride byte offset (between
 * 8-row groups), swizzle mode 1 (128B) in bits 62-63. */
__device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo_bytes = 16, uint32_t sbo_bytes = 1024) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)((lbo_bytes >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo_bytes >> 4) & 0x3FFFu) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wg_arrive() {
#if WG_ENABLED
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if WG_ENABLED
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#if WG_ENABLED
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void wg_fence_proxy() {
#if WG_ENABLED
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
template <int R>
__device__ __forceinline__ void wg_fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* The same for packed A operands in registers (their writes stay before the wg_arrive). */
template <int R>
__device__ __forceinline__ void wg_fence_acc(uint32_t (&a)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+r"(a[i])::"memory");
}
/* Barrier over the 128 threads of warpgroup `wg` (named barrier 1 + wg; 0 is __syncthreads). */
__device__ __forceinline__ void wg_bar(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }

/* Two floats as bf16x2, lo in the low half. */
__device__ __forceinline__ uint32_t wg_pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}
/* Columns 16 k .. 16 k + 15 of an accumulator as the register A operand of k-step k. */
template <int R>
__device__ __forceinline__ void wg_pack_a(uint32_t (&a)[4], const float (&d)[R], int k) {
    a[0] = wg_pack(d[8 * k + 0], d[8 * k + 1]);
    a[1] = wg_pack(d[8 * k + 2], d[8 * k + 3]);
    a[2] = wg_pack(d[8 * k + 4], d[8 * k + 5]);
    a[3] = wg_pack(d[8 * k + 6], d[8 * k + 7]);
}

/* The first 1024-byte aligned address of dynamic shared memory (request 1023 bytes more).
 * Derived from the array itself, not through an integer cast, so the compiler keeps
 * shared-memory (LDS/STS) accesses instead of generic ones. */
__device__ __forceinline__ unsigned char *wg_smem_align1024(unsigned char *smem) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return smem + ((1024u - (a & 1023u)) & 1023u);
}
/* Bulk reduction (the copy engine, sm_90): global[dst .. dst + bytes) += shared[src ..) as
 * F32, asynchronous; 16-byte aligned, bytes a multiple of 16. Shared memory written by
 * ordinary stores needs wg_fence_proxy() and a barrier before. Groups: commit after
 * issuing; wg_bulk_wait_read<N> waits until at most N of this thread's groups may still
 * read their shared source; wg_bulk_wait<0> until everything has landed. */
__device__ __forceinline__ void wg_bulk_add_f32(float *dst, const void *src, uint32_t bytes) {
#if WG_ENABLED
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"((uint32_t)__cvta_generic_to_shared(src)), "r"(bytes)
                 : "memory");
#else
    wg_unsupported();
#endif
}
__device__ __forceinline__ void wg_bulk_commit() {
#if WG_ENABLED
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_bulk_wait_read() {
#if WG_ENABLED
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_bulk_wait() {
#if WG_ENABLED
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* Byte offset of element (r, c) in a swizzled [rows][64] BF16 tile. */
__device__ __forceinline__ uint32_t wg_sw_off(int r, int c) {
    return (uint32_t)(r * 128 + ((((c >> 3) ^ (r & 7)) << 4) | ((c & 7) << 1)));
}
/* Byte offset of 16-byte chunk ch of row r in a swizzled tile (128-byte rows, the chunks'
 * order XORed by r % 8: wg_sw_off's layout). */
__device__ __forceinline__ int wg_sw_chunk(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

/* f(r, ch) for each of this thread's 16-byte chunks of a swizzled [ROWS][64] BF16 tile, NT
 * threads: chunk ch of row r, at byte wg_sw_chunk(r, ch) of the tile. */
template <int ROWS, int NT, typename F>
__device__ __forceinline__ void wg_tile_chunks(int tid, F &&f) {
    constexpr int TOTAL = ROWS * 8;
#pragma unroll
    for (int e0 = 0; e0 < TOTAL; e0 += NT) {
        const int e = e0 + tid;
        if (TOTAL % NT == 0 || e < TOTAL) {
            const int r = e >> 3, ch = e & 7;
            f(r, ch);
        }
    }
}

/* Rows [row0, row0 + ROWS) of a [S, *] BF16 operand (row r at src + base + r stride, 64
 * elements) into a swizzled tile by cp.async, 16 bytes each, NT threads; rows at or past
 * S are zero-filled (nothing read). */
template <int ROWS, int NT>
__device__ __forceinline__ void wg_load_tile(unsigned char *dst, const __nv_bfloat16 *src, int64_t base,
                                             int64_t stride, int row0, int S, int tid) {
    wg_tile_chunks<ROWS, NT>(tid, [&](int r, int ch) {
        const bool ok = row0 + r < S;
        const __nv_bfloat16 *p = ok ? src + base + (int64_t)(row0 + r) * stride + ch * 8 : src;
        const unsigned s = (unsigned)__cvta_generic_to_shared(dst + wg_sw_chunk(r, ch));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(p), "r"(ok ? 16 : 0) : "memory");
    });
}

/* The inverse of wg_load_tile: a swizzled tile's rows [row0, row0 + ROWS) out to dst +
 * base + r stride, 16 bytes a thread at a time (a warp writes four whole 128-byte rows),
 * rows at or past S skipped. */
template <int ROWS, int NT>
__device__ __forceinline__ void wg_store_tile(__nv_bfloat16 *dst, int64_t base, int64_t stride, int row0, int S,
                                              const unsigned char *src, int tid) {
    wg_tile_chunks<ROWS, NT>(tid, [&](int r, int ch) {
        if (row0 + r < S)
            *reinterpret_cast<uint4 *>(dst + base + (int64_t)(row0 + r) * stride + ch * 8) =
                *reinterpret_cast<const uint4 *>(src + wg_sw_chunk(r, ch));
    });
}

/* d[64 x 32] (+)= A[64 x 16] B[16 x 32], A and B from shared memory (descriptors). */
template <int TA, int TB>
__device__ __forceinline__ void wg_mma_ss_n32(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
#if WG_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB)
        : "memory");
#else
    wg_unsupported();
#endif
}

/* d[64 x 64] (+)= A[64 x 16] B[16 x 64], A and B from shared memory (descriptors). */
template <int TA, int TB>
__device__ __forceinline__ void wg_mma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
#if WG_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB)
        : "memory");
#else
    wg_unsupported();
#endif
}

/* d[64 x 128] (+)= A[64 x 16] B[16 x 128], A and B from shared memory (descriptors). */
template <int TA, int TB>
__device__ __forceinline__ void wg_mma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
#if WG_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB)
        : "memory");
#else
    wg_unsupported();
#endif
}

/* d[64 x 64] (+)= A[64 x 16] B[16 x 64], A from registers (the m16n8k16 A fragment per
 * warp), B from shared memory. */
template <int TB>
__device__ __forceinline__ void wg_mma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
#if WG_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB)
        : "memory");
#else
    wg_unsupported();
#endif
}

#endif
