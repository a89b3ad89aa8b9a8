/* test_cuda_wgmma.cu: the wgmma primitives of src/backend/cuda/wgmma.h, one 64 x 64 x K
 * product per case, against a double-precision CPU product of the same BF16 values. Each
 * case is one way the attention kernels use them:
 *   ss_kk_n64   S^T = K Q^T (backward): A and B K-major tiles loaded by wg_load_tile;
 *   ss_kk_n128  S = Q K^T (forward): the same with 128 key rows;
 *   rs_mn_n64   O += P V: A from registers (an accumulator repacked by wg_pack_a), B an
 *               MN-major tile (rows are the reduction dim);
 *   ss_mn_mn    dQ = dS K: A an MN-major tile written by ordinary stores (wg_sw_off,
 *               wg_fence_proxy), B MN-major;
 *   ss_mn_n32hi the same with N = 32: B's columns 32..63, i.e. a descriptor starting 64
 *               bytes into the swizzled rows (c = a^T b[:, 32:]).
 * A wrong descriptor, swizzle or fragment layout shows as a large error in one case.
 * Skips (77) without a compute capability 9.0 GPU. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/wgmma.h"
#include "check.h"

enum { MODE_SS_KK_N64, MODE_SS_KK_N128, MODE_RS_MN, MODE_SS_MN_MN, MODE_SS_MN_N32HI, NMODES };
static const char *mode_name[NMODES] = {"ss_kk_n64", "ss_kk_n128", "rs_mn_n64", "ss_mn_mn", "ss_mn_n32hi"};

/* a, b: row-major BF16 operands as the mode stores them (see run_case); c: [64][N] F32. */
__global__ void __launch_bounds__(128) wgmma_case_kernel(int mode, const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                                                         float *c) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *base = wg_smem_align1024(smem_raw);
    unsigned char *As = base, *Bs = base + 64 * 128;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int r0 = 16 * warp + lane / 4, c0 = 2 * (lane % 4);
    const int nrows_b = mode == MODE_SS_KK_N128 ? 128 : 64;
    if (mode == MODE_SS_MN_MN || mode == MODE_SS_MN_N32HI) { /* A by ordinary stores */
        for (int e = tid; e < 64 * 64; e += 128) {
            const int r = e / 64, col = e % 64;
            *(__nv_bfloat16 *)(As + wg_sw_off(r, col)) = a[e];
        }
    } else if (mode != MODE_RS_MN) {
        wg_load_tile<64, 128>(As, a, 0, 64, 0, 64, tid);
    }
    wg_load_tile<128, 128>(Bs, b, 0, 64, 0, nrows_b, tid);
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    wg_fence_proxy();
    __syncthreads();

    if (mode == MODE_SS_KK_N128) {
        float d[64];
        for (int i = 0; i < 64; i++) d[i] = 0.0f;
        wg_fence_acc(d);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n128<0, 0>(d, wg_desc(As + 32 * k), wg_desc(Bs + 32 * k), k > 0);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(d);
        for (int j = 0; j < 16; j++)
            for (int i = 0; i < 4; i++) c[(r0 + 8 * (i / 2)) * 128 + 8 * j + c0 + i % 2] = d[4 * j + i];
        return;
    }
    if (mode == MODE_SS_MN_N32HI) {
        float d[16];
        for (int i = 0; i < 16; i++) d[i] = 0.0f;
        wg_fence_acc(d);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n32<1, 1>(d, wg_desc(As + 2048 * k), wg_desc(Bs + 2048 * k + 64), k > 0);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(d);
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 4; i++) c[(r0 + 8 * (i / 2)) * 32 + 8 * j + c0 + i % 2] = d[4 * j + i];
        return;
    }
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.0f;
    wg_fence_acc(d);
    if (mode == MODE_RS_MN) {
        /* A = [64][64] given row-major; read this thread's accumulator-layout elements */
        float p[32];
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 4; i++) p[4 * j + i] = __bfloat162float(a[(r0 + 8 * (i / 2)) * 64 + 8 * j + c0 + i % 2]);
        uint32_t ar[4][4];
#pragma unroll
        for (int k = 0; k < 4; k++) wg_pack_a(ar[k], p, k);
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_rs_n64<1>(d, ar[k], wg_desc(Bs + 2048 * k), k > 0);
    } else if (mode == MODE_SS_MN_MN) {
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<1, 1>(d, wg_desc(As + 2048 * k), wg_desc(Bs + 2048 * k), k > 0);
    } else {
        wg_arrive();
#pragma unroll
        for (int k = 0; k < 4; k++) wg_mma_ss_n64<0, 0>(d, wg_desc(As + 32 * k), wg_desc(Bs + 32 * k), k > 0);
    }
    wg_commit();
    wg_wait<0>();
    wg_fence_acc(d);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 4; i++) c[(r0 + 8 * (i / 2)) * 64 + 8 * j + c0 + i % 2] = d[4 * j + i];
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* One case: returns the relative Frobenius error against the CPU product. Storage:
 *   ss_kk:  a [64 m][64 k], b [N n][64 k]       c = a b^T
 *   rs_mn:  a [64 m][64 k], b [64 k][64 n]      c = a b
 *   ss_mn:  a [64 k][64 m], b [64 k][64 n]      c = a^T b (n32hi: c = a^T b[:, 32:]) */
static double run_case(int mode, unsigned seed) {
    const int N = mode == MODE_SS_KK_N128 ? 128 : mode == MODE_SS_MN_N32HI ? 32 : 64;
    const int nb = mode == MODE_SS_KK_N128 ? 128 * 64 : 64 * 64;
    float *ha = (float *)malloc(64 * 64 * sizeof(float)), *hb = (float *)malloc(nb * sizeof(float));
    __nv_bfloat16 *ha16 = (__nv_bfloat16 *)malloc(64 * 64 * 2), *hb16 = (__nv_bfloat16 *)malloc(nb * 2);
    srand(seed);
    for (int i = 0; i < 64 * 64; i++) {
        ha[i] = bf16_round((float)rand() / RAND_MAX * 2.0f - 1.0f);
        ha16[i] = __float2bfloat16(ha[i]);
    }
    for (int i = 0; i < nb; i++) {
        hb[i] = bf16_round((float)rand() / RAND_MAX * 2.0f - 1.0f);
        hb16[i] = __float2bfloat16(hb[i]);
    }
    __nv_bfloat16 *da, *db;
    float *dc;
    CU(cudaMalloc(&da, 64 * 64 * 2));
    CU(cudaMalloc(&db, 128 * 64 * 2));
    CU(cudaMalloc(&dc, 64 * 128 * sizeof(float)));
    CU(cudaMemset(db, 0, 128 * 64 * 2));
    CU(cudaMemcpy(da, ha16, 64 * 64 * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(db, hb16, nb * 2, cudaMemcpyHostToDevice));
    const int smem = 1024 + 64 * 128 + 128 * 128;
    CU(cudaFuncSetAttribute(wgmma_case_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    wgmma_case_kernel<<<1, 128, smem>>>(mode, da, db, dc);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    float *hc = (float *)malloc(64 * N * sizeof(float));
    CU(cudaMemcpy(hc, dc, 64 * N * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            double ref = 0;
            for (int k = 0; k < 64; k++) {
                const bool at = mode == MODE_SS_MN_MN || mode == MODE_SS_MN_N32HI;
                double x = at ? ha[k * 64 + m] : ha[m * 64 + k];
                double y = (mode == MODE_SS_KK_N64 || mode == MODE_SS_KK_N128) ? hb[n * 64 + k]
                           : mode == MODE_SS_MN_N32HI                        ? hb[k * 64 + 32 + n]
                                                                             : hb[k * 64 + n];
                ref += x * y;
            }
            num += (hc[m * N + n] - ref) * (hc[m * N + n] - ref);
            den += ref * ref;
        }
    cudaFree(da), cudaFree(db), cudaFree(dc);
    free(ha), free(hb), free(ha16), free(hb16), free(hc);
    return sqrt(num / den);
}

/* One test per case, so the summary names the layout that broke. */
static void check_case(int mode) {
    const double err = run_case(mode, 1234u + mode);
    printf("  %-12s rel err %.3e\n", mode_name[mode], err);
    CHECK(err < 1e-4, "%s: relative error %.3e against the CPU product", mode_name[mode], err);
}
static void test_ss_kk_n64(void) { check_case(MODE_SS_KK_N64); }
static void test_ss_kk_n128(void) { check_case(MODE_SS_KK_N128); }
static void test_rs_mn_n64(void) { check_case(MODE_RS_MN); }
static void test_ss_mn_mn(void) { check_case(MODE_SS_MN_MN); }
static void test_ss_mn_n32hi(void) { check_case(MODE_SS_MN_N32HI); }

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) check_skip("no GPU");
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) check_skip("wgmma needs a compute capability 9.0 GPU");
    RUN(test_ss_kk_n64);
    RUN(test_ss_kk_n128);
    RUN(test_rs_mn_n64);
    RUN(test_ss_mn_mn);
    RUN(test_ss_mn_n32hi);
    return check_summary();
}
