/* linear_gelu.cu: a linear layer and the tanh GELU after it (the MLP's fc1 with
 * --openai-gelu) as one cuBLASLt GEMM each way:
 *   forward:  pre = x w^T + b and y = gelu(pre) from GELU_AUX_BIAS (GELU_AUX without a
 *             bias): the epilogue writes the pre-activation as its aux output and y as D;
 *   backward: dpre = gelu'(pre) * (dy w) and db += sum_rows dpre from the input-gradient
 *             GEMM of the layer after, with DGELU_BGRAD (pre the aux input).
 * cuBLASLt's GELU is this same tanh approximation (sqrt(2/pi), 0.044715).
 *
 * Fallbacks, each the unfused ops' math, so the ops never fail:
 * - F32 always runs unfused: cuBLASLt's GELU evaluates tanh approximately (relative errors
 *   near 1e-4 have been seen in F32), and this backend's F32 matches the CPU to 1e-5;
 * - the aux matrix needs a row length (cuBLASLt's leading dimension) that is a multiple of
 *   8 elements, and we ask 16-byte aligned aux and bias pointers (as linear_fwd does for
 *   the BIAS epilogue); otherwise, and wherever cuBLASLt has no algorithm for the shape,
 *   dtype or alignments, the plain GEMM and the GELU kernels run;
 * - the bias gradient is asked for in F32 (the model's main_grad dtype: a sum over all
 *   tokens rounded to 16 bits would lose digits, and in F16 could overflow); where
 *   DGELU_BGRAD has no F32 bias gradient, DGELU runs and the column-sum kernel sums dpre.
 *   (That is the case on the H200 with CUDA 13.0's cuBLASLt, measured; it offers BF16
 *   sums, but that GEMM took 1671 us against DGELU's 575 on GPT-2's fc2 backward, so the
 *   model asks for fc1's bias gradient from fc1's weight-gradient GEMM instead, where
 *   BGRADB has it.) */
#include "backend/cuda/cuda_internal.h"

static bool gelu_epilogue_fits(mc_dtype dt, int64_t cols, const void *aux) {
    return dt != MC_F32 && cols % 8 == 0 && mc_cuda_aligned16(aux);
}

void mc_cuda_linear_gelu_fwd(mc_backend *be, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                             const mc_tensor *b) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "linear_gelu_fwd";
    int64_t n = mc_cuda_rows(x), in = mc_cuda_cols(x), out = mc_cuda_rows(w);
    bool bias = mc_tensor_present(b);
    if (n == 0 || out == 0) return;
    if (in > 0 && gelu_epilogue_fits(x->dtype, out, pre->data) && (!bias || mc_cuda_aligned16(b->data))) {
        mc_cuda_epilogue epi = {bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                                bias ? b->data : NULL, x->dtype, pre->data, out};
        if (mc_cuda_matmul_epilogue(st, op, n, out, in, x->data, false, w->data, true, x->dtype, y->data, y->dtype,
                                    1.0f, 0.0f, &epi))
            return;
    }
    mc_cuda_linear_fwd(be, pre, x, w, b);
    mc_cuda_gelu_fwd(be, y, pre, true);
}

void mc_cuda_linear_dgelu_bwd(mc_backend *be, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                              const mc_tensor *pre) {
    mc_cuda_state *st = mc_cuda_st(be);
    const char *op = "linear_dgelu_bwd";
    mc_dtype dt = dy->dtype;
    int64_t n = mc_cuda_rows(dy), out = mc_cuda_cols(dy), f = mc_cuda_cols(w);
    bool has_db = mc_tensor_present(db);
    if (n == 0 || f == 0) return;
    if (out > 0 && gelu_epilogue_fits(dt, f, pre->data)) {
        /* dpre[n, f] = (dy[n, out] w[out, f]) * gelu'(pre) */
        if (has_db) {
            float *sums = (float *)mc_cuda_workspace(st, (size_t)f * sizeof(float), op);
            mc_cuda_epilogue epi = {CUBLASLT_EPILOGUE_DGELU_BGRAD, sums, MC_F32, pre->data, f};
            if (mc_cuda_matmul_epilogue(st, op, n, f, out, dy->data, false, w->data, false, dt, dpre->data, dt, 1.0f,
                                        0.0f, &epi)) {
                mc_tensor s = mc_tensor_1d(sums, MC_F32, f);
                mc_cuda_add_inplace(be, db, &s); /* the epilogue writes; db accumulates */
                return;
            }
        }
        mc_cuda_epilogue epi = {CUBLASLT_EPILOGUE_DGELU, NULL, dt, pre->data, f};
        if (mc_cuda_matmul_epilogue(st, op, n, f, out, dy->data, false, w->data, false, dt, dpre->data, dt, 1.0f, 0.0f,
                                    &epi)) {
            if (has_db) mc_cuda_colsum_add(st, op, (float *)db->data, dpre->data, dt, n, f);
            return;
        }
    }
    /* unfused: linear_bwd's input gradient (pre stands in for its x, which only dw reads),
     * the GELU backward in place, the column sums */
    mc_tensor none = mc_tensor_none();
    mc_cuda_linear_bwd(be, dpre, &none, &none, dy, pre, w, true);
    mc_cuda_gelu_bwd(be, dpre, dpre, pre, true);
    if (has_db) mc_cuda_colsum_add(st, op, (float *)db->data, dpre->data, dt, n, f);
}
