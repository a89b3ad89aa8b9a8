/* test_ops_errors.c: the op layer's operand errors (tensor/ops.h). Every mc_op_* is called
 * once with an operand of a wrong shape and once with an operand of a wrong dtype, each in
 * a forked child that the abort ends; the child's stderr must be one line naming the op and
 * the operand ("mc_op_<op>: operand <name>: expected ..., got ..."). On the CPU backend
 * always, and with a GPU on the CUDA backend too, whose lines must be the CPU's word for
 * word; and each backend's own size limit (mc_backend.supports) refused in the same
 * format. Operands are host memory on both: a call that fails its checks never reaches the
 * backend. Some ops have more cases: adamw's split master (d.param_lo). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "check.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

/* ---- operands (allocated in the child, never freed: it ends in the abort) ---- */

static void *mem(int64_t elems) { return calloc((size_t)(elems > 0 ? elems : 1), 8); }
static mc_tensor t1(mc_dtype dt, int64_t n) { return mc_tensor_1d(mem(n), dt, n); }
static mc_tensor t2(mc_dtype dt, int64_t r, int64_t c) { return mc_tensor_2d(mem(r * c), dt, r, c); }
static mc_tensor t3(mc_dtype dt, int64_t a, int64_t b, int64_t c) { return mc_tensor_3d(mem(a * b * c), dt, a, b, c); }
static mc_tensor negative_dim(mc_dtype dt) {
    mc_tensor t = t2(dt, 4, 8);
    t.shape[1] = -1;
    return t;
}

#define F32 MC_F32
#define F16 MC_F16
#define I32 MC_I32
enum { N = 4, H = 8, OUT = 6 };

/* Attention and RoPE over S = 4, B = 1, 2 heads in 1 group, head_dim 4: qkv holds 64
 * elements, out 32, lse 8; the qkv width is 16. */
static mc_rope_desc rope_desc(void) {
    return (mc_rope_desc){.seq = 4, .batch = 1, .heads = 2, .groups = 1, .head_dim = 4, .rot_dim = 4,
                          .cos = t2(F32, 4, 2), .sin = t2(F32, 4, 2)};
}
static mc_attn_desc attn_desc(void) {
    return (mc_attn_desc){.seq = 4, .batch = 1, .heads = 2, .groups = 1, .head_dim = 4, .softmax_scale = 0.5f};
}

/* ---- the bad calls: <op>_shape and <op>_dtype ---- */

static void convert_shape(mc_backend *be) {
    mc_tensor src = t1(F32, 8), dst = t1(MC_BF16, 7);
    mc_op_convert(be, &dst, &src);
}
static void convert_dtype(mc_backend *be) {
    mc_tensor src = t1(I32, 8), dst = t1(F32, 8);
    mc_op_convert(be, &dst, &src);
}
static void fill_shape(mc_backend *be) {
    mc_tensor x = negative_dim(F32);
    mc_op_fill(be, &x, 1.0);
}
static void fill_dtype(mc_backend *be) {
    mc_tensor x = t1(I32, 8);
    mc_op_fill(be, &x, 1.0);
}
static void init_normal_shape(mc_backend *be) {
    mc_tensor p = t3(F32, 2, 2, 2);
    int64_t rows[2] = {0, 1};
    mc_op_init_normal(be, &p, 1, 2, 0.02, rows, 4, 0);
}
static void init_normal_dtype(mc_backend *be) {
    mc_tensor p = t2(I32, 2, 4);
    int64_t rows[2] = {0, 1};
    mc_op_init_normal(be, &p, 1, 2, 0.02, rows, 4, 0);
}
static void gemm_shape(mc_backend *be) {
    mc_tensor a = t2(F32, N, H), b = t2(F32, H, OUT), c = t2(F32, N, OUT + 1);
    mc_op_gemm(be, &c, &a, false, &b, false, 1.0f, 0.0f);
}
static void gemm_dtype(mc_backend *be) {
    mc_tensor a = t2(F32, N, H), b = t2(F16, H, OUT), c = t2(F32, N, OUT);
    mc_op_gemm(be, &c, &a, false, &b, false, 1.0f, 0.0f);
}
static void linear_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, OUT), x = t2(F32, N, H), w = t2(F32, OUT, H - 1), b = mc_tensor_none();
    mc_op_linear_fwd(be, &y, &x, &w, &b);
}
static void linear_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(MC_BF16, N, OUT), x = t2(F32, N, H), w = t2(F32, OUT, H), b = t1(F32, OUT);
    mc_op_linear_fwd(be, &y, &x, &w, &b);
}
static void linear_bwd_shape(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dw = t2(F32, OUT, H + 1), db = t1(F32, OUT), dy = t2(F32, N, OUT);
    mc_tensor x = t2(F32, N, H), w = t2(F32, OUT, H);
    mc_op_linear_bwd(be, &dx, &dw, &db, &dy, &x, &w, true);
}
static void linear_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dw = t2(F16, OUT, H), db = t1(F32, OUT), dy = t2(F32, N, OUT);
    mc_tensor x = t2(F32, N, H), w = t2(F32, OUT, H);
    mc_op_linear_bwd(be, &dx, &dw, &db, &dy, &x, &w, true);
}
static void linear_residual_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, OUT), res = t2(F32, N, OUT - 1), x = t2(F32, N, H), w = t2(F32, OUT, H), b = t1(F32, OUT);
    mc_op_linear_residual_fwd(be, &y, &res, &x, &w, &b);
}
static void linear_residual_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F32, N, OUT), res = t2(F16, N, OUT), x = t2(F32, N, H), w = t2(F32, OUT, H), b = t1(F32, OUT);
    mc_op_linear_residual_fwd(be, &y, &res, &x, &w, &b);
}
static void linear_gelu_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, OUT), pre = t2(F32, N + 1, OUT), x = t2(F32, N, H), w = t2(F32, OUT, H);
    mc_tensor b = mc_tensor_none();
    mc_op_linear_gelu_fwd(be, &y, &pre, &x, &w, &b);
}
static void linear_gelu_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F32, N, OUT), pre = t2(F16, N, OUT), x = t2(F32, N, H), w = t2(F32, OUT, H);
    mc_tensor b = mc_tensor_none();
    mc_op_linear_gelu_fwd(be, &y, &pre, &x, &w, &b);
}
static void linear_dgelu_bwd_shape(mc_backend *be) {
    mc_tensor dpre = t2(F32, N, H + 2), db = t1(F32, H), dy = t2(F32, N, OUT), w = t2(F32, OUT, H), pre = t2(F32, N, H);
    mc_op_linear_dgelu_bwd(be, &dpre, &db, &dy, &w, &pre);
}
static void linear_dgelu_bwd_dtype(mc_backend *be) {
    mc_tensor dpre = t2(F32, N, H), db = t1(F16, H), dy = t2(F32, N, OUT), w = t2(F32, OUT, H), pre = t2(F32, N, H);
    mc_op_linear_dgelu_bwd(be, &dpre, &db, &dy, &w, &pre);
}
static void embedding_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, H - 1), ids = t1(I32, N), table = t2(F32, 16, H);
    mc_op_embedding_fwd(be, &y, &ids, &table, 0, false);
}
static void embedding_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F32, N, H), ids = t1(F32, N), table = t2(F32, 16, H);
    mc_op_embedding_fwd(be, &y, &ids, &table, 0, false);
}
static void embedding_bwd_shape(mc_backend *be) {
    mc_tensor dtable = t2(F32, 16, H), dy = t2(F32, N + 1, H), ids = t1(I32, N);
    mc_op_embedding_bwd(be, &dtable, &dy, &ids, 0);
}
static void embedding_bwd_dtype(mc_backend *be) {
    mc_tensor dtable = t2(F16, 16, H), dy = t2(F32, N, H), ids = t1(I32, N);
    mc_op_embedding_bwd(be, &dtable, &dy, &ids, 0);
}
static void layernorm_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, H), mean = t1(F32, N + 1), rstd = t1(F32, N), x = t2(F32, N, H), w = t1(F32, H),
              b = t1(F32, H);
    mc_op_layernorm_fwd(be, &y, &mean, &rstd, &x, &w, &b, 1e-5f);
}
static void layernorm_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F32, N, H), mean = t1(F32, N), rstd = t1(F16, N), x = t2(F32, N, H), w = t1(F32, H),
              b = t1(F32, H);
    mc_op_layernorm_fwd(be, &y, &mean, &rstd, &x, &w, &b, 1e-5f);
}
static void layernorm_bwd_shape(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dw = t1(F32, H + 1), db = t1(F32, H), none = mc_tensor_none(), dy = t2(F32, N, H);
    mc_tensor x = t2(F32, N, H), w = t1(F32, H), b = t1(F32, H), mean = t1(F32, N), rstd = t1(F32, N);
    mc_op_layernorm_bwd(be, &dx, &dw, &db, &none, &none, &dy, &x, &w, &b, &mean, &rstd);
}
static void layernorm_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dw = t1(F32, H), db = t1(F32, H), none = mc_tensor_none(), dy = t2(F32, N, H);
    mc_tensor x = t2(F32, N, H), w = t1(F32, H), b = t1(F32, H), mean = t1(F16, N), rstd = t1(F32, N);
    mc_op_layernorm_bwd(be, &dx, &dw, &db, &none, &none, &dy, &x, &w, &b, &mean, &rstd);
}
static void rmsnorm_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, H), rstd = t1(F32, N), x = t2(F32, N, H), w = t1(F32, H - 1);
    mc_op_rmsnorm_fwd(be, &y, &rstd, &x, &w, 1e-5f);
}
static void rmsnorm_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F32, N, H), rstd = t1(F32, N), x = t2(F32, N, H), w = t1(F16, H);
    mc_op_rmsnorm_fwd(be, &y, &rstd, &x, &w, 1e-5f);
}
static void rmsnorm_bwd_shape(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H + 1), dw = t1(F32, H), none = mc_tensor_none(), dy = t2(F32, N, H);
    mc_tensor x = t2(F32, N, H), w = t1(F32, H), rstd = t1(F32, N);
    mc_op_rmsnorm_bwd(be, &dx, &dw, &none, &none, &dy, &x, &w, &rstd);
}
static void rmsnorm_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dw = t1(F32, H), none = mc_tensor_none(), dy = t2(F32, N, H);
    mc_tensor x = t2(F32, N, H), w = t1(F32, H), rstd = t1(I32, N);
    mc_op_rmsnorm_bwd(be, &dx, &dw, &none, &none, &dy, &x, &w, &rstd);
}
static void rope_shape(mc_backend *be) {
    mc_rope_desc d = rope_desc();
    mc_tensor qkv = t1(F32, 60);
    mc_op_rope(be, &qkv, &d, false);
}
static void rope_dtype(mc_backend *be) {
    mc_rope_desc d = rope_desc();
    d.cos = t2(F16, 4, 2);
    mc_tensor qkv = t1(F32, 64);
    mc_op_rope(be, &qkv, &d, false);
}
static void gelu_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, H - 1), x = t2(F32, N, H);
    mc_op_gelu_fwd(be, &y, &x, true);
}
static void gelu_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F16, N, H), x = t2(F32, N, H);
    mc_op_gelu_fwd(be, &y, &x, false);
}
static void gelu_bwd_shape(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H + 1), dy = t2(F32, N, H), x = t2(F32, N, H);
    mc_op_gelu_bwd(be, &dx, &dy, &x, true);
}
static void gelu_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), dy = t2(F16, N, H), x = t2(F32, N, H);
    mc_op_gelu_bwd(be, &dx, &dy, &x, true);
}
static void swiglu_fwd_shape(mc_backend *be) {
    mc_tensor y = t2(F32, N, H / 2), x = t2(F32, N, H - 1);
    mc_op_swiglu_fwd(be, &y, &x);
}
static void swiglu_fwd_dtype(mc_backend *be) {
    mc_tensor y = t2(F16, N, H / 2), x = t2(F32, N, H);
    mc_op_swiglu_fwd(be, &y, &x);
}
static void swiglu_bwd_shape(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H / 2), none = mc_tensor_none(), dy = t2(F32, N, H / 2), x = t2(F32, N, H);
    mc_op_swiglu_bwd(be, &dx, &none, &dy, &x);
}
static void swiglu_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t2(F32, N, H), y = t2(F16, N, H / 2), dy = t2(F32, N, H / 2), x = t2(F32, N, H);
    mc_op_swiglu_bwd(be, &dx, &y, &dy, &x);
}
static void attention_fwd_shape(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor out = t1(F32, 30), lse = t1(F32, 8), qkv = t1(F32, 64);
    mc_op_attention_fwd(be, &out, &lse, &qkv, &d);
}
static void attention_fwd_dtype(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor out = t1(F32, 32), lse = t1(F16, 8), qkv = t1(F32, 64);
    mc_op_attention_fwd(be, &out, &lse, &qkv, &d);
}
static void attention_kv_fwd_shape(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor out = t1(F32, 30), cache = t1(F32, 64), qkv = t1(F32, 64), pos = t1(I32, 4);
    mc_op_attention_kv_fwd(be, &out, &cache, &qkv, &pos, &d);
}
static void attention_kv_fwd_dtype(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor out = t1(F32, 32), cache = t1(F16, 64), qkv = t1(F32, 64), pos = t1(I32, 4);
    mc_op_attention_kv_fwd(be, &out, &cache, &qkv, &pos, &d);
}
static void argmax_rows_shape(mc_backend *be) {
    mc_tensor ids = t1(I32, 2), x = t2(F32, 3, 8);
    mc_op_argmax_rows(be, &ids, &x, 8);
}
static void argmax_rows_dtype(mc_backend *be) {
    mc_tensor ids = t1(F32, 2), x = t2(F32, 4, 8);
    mc_op_argmax_rows(be, &ids, &x, 8);
}
static void attention_bwd_shape(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor dqkv = t1(F32, 64), dbias = t1(F32, 15), dout = t1(F32, 32), qkv = t1(F32, 64), out = t1(F32, 32);
    mc_tensor lse = t1(F32, 8);
    mc_op_attention_bwd(be, &dqkv, &dbias, &dout, &qkv, &out, &lse, &d);
}
static void attention_bwd_dtype(mc_backend *be) {
    mc_attn_desc d = attn_desc();
    mc_tensor dqkv = t1(F32, 64), dbias = t1(F32, 16), dout = t1(F16, 32), qkv = t1(F32, 64), out = t1(F32, 32);
    mc_tensor lse = t1(F32, 8);
    mc_op_attention_bwd(be, &dqkv, &dbias, &dout, &qkv, &out, &lse, &d);
}
static void dropout_fwd_shape(mc_backend *be) {
    mc_tensor y = t1(F32, 31), x = t1(F32, 32);
    mc_op_dropout_fwd(be, &y, &x, 0.1f, 1, 2);
}
static void dropout_fwd_dtype(mc_backend *be) {
    mc_tensor y = t1(F16, 32), x = t1(F32, 32);
    mc_op_dropout_fwd(be, &y, &x, 0.1f, 1, 2);
}
static void dropout_bwd_shape(mc_backend *be) {
    mc_tensor dx = t1(F32, 33), dy = t1(F32, 32);
    mc_op_dropout_bwd(be, &dx, &dy, 0.1f, 1, 2);
}
static void dropout_bwd_dtype(mc_backend *be) {
    mc_tensor dx = t1(F16, 32), dy = t1(F32, 32);
    mc_op_dropout_bwd(be, &dx, &dy, 0.1f, 1, 2);
}
static void dropout_add_fwd_shape(mc_backend *be) {
    mc_tensor y = t1(F32, 32), res = t1(F32, 16), x = t1(F32, 32);
    mc_op_dropout_add_fwd(be, &y, &res, &x, 0.1f, 1, 2);
}
static void dropout_add_fwd_dtype(mc_backend *be) {
    mc_tensor y = t1(F32, 32), res = t1(F16, 32), x = t1(F32, 32);
    mc_op_dropout_add_fwd(be, &y, &res, &x, 0.1f, 1, 2);
}
static void add_inplace_shape(mc_backend *be) {
    mc_tensor y = t1(F32, 32), x = t1(F32, 8);
    mc_op_add_inplace(be, &y, &x);
}
static void add_inplace_dtype(mc_backend *be) {
    mc_tensor y = t1(F32, 32), x = t1(F16, 32);
    mc_op_add_inplace(be, &y, &x);
}
static void scale_inplace_shape(mc_backend *be) {
    mc_tensor x = negative_dim(F32);
    mc_op_scale_inplace(be, &x, 2.0f);
}
static void scale_inplace_dtype(mc_backend *be) {
    mc_tensor x = t1(I32, 32);
    mc_op_scale_inplace(be, &x, 2.0f);
}
static void xent_rowstats_shape(mc_backend *be) {
    mc_tensor rowmax = t1(F32, N), stats = t2(F32, 2, N - 1), logits = t2(F32, N, 16), targets = t1(I32, N);
    mc_op_xent_rowstats(be, &rowmax, &stats, &logits, &targets, 0);
}
static void xent_rowstats_dtype(mc_backend *be) {
    mc_tensor rowmax = t1(F32, N), stats = t2(F32, 2, N), logits = t2(F32, N, 16), targets = t1(F32, N);
    mc_op_xent_rowstats(be, &rowmax, &stats, &logits, &targets, 0);
}
static void xent_rescale_shape(mc_backend *be) {
    mc_tensor stats = t2(F32, 2, N), local = t1(F32, N), global = t1(F32, N + 1);
    mc_op_xent_rescale(be, &stats, &local, &global);
}
static void xent_rescale_dtype(mc_backend *be) {
    mc_tensor stats = t2(F32, 2, N), local = t1(F16, N), global = t1(F32, N);
    mc_op_xent_rescale(be, &stats, &local, &global);
}
static void xent_loss_grad_shape(mc_backend *be) {
    mc_tensor loss = t1(F32, N), dlogits = t2(F32, N, 15), logits = t2(F32, N, 16), rowmax = t1(F32, N);
    mc_tensor stats = t2(F32, 2, N), targets = t1(I32, N), mask = t1(F32, N);
    mc_op_xent_loss_grad(be, &loss, &dlogits, &logits, &rowmax, &stats, &targets, &mask, 0, 1.0f);
}
static void xent_loss_grad_dtype(mc_backend *be) {
    mc_tensor loss = t1(F32, N), dlogits = t2(F32, N, 16), logits = t2(F32, N, 16), rowmax = t1(F32, N);
    mc_tensor stats = t2(F32, 2, N), targets = t1(I32, N), mask = t1(F16, N);
    mc_op_xent_loss_grad(be, &loss, &dlogits, &logits, &rowmax, &stats, &targets, &mask, 0, 1.0f);
}
static void xent_fused_shape(mc_backend *be) {
    mc_tensor loss = t1(F32, N + 1), dlogits = t2(F32, N, 16), logits = t2(F32, N, 16), targets = t1(I32, N);
    mc_tensor mask = mc_tensor_none();
    mc_op_xent_fused(be, &loss, &dlogits, &logits, &targets, &mask, 1.0f);
}
static void xent_fused_dtype(mc_backend *be) {
    mc_tensor loss = t1(F32, N), dlogits = t2(F16, N, 16), logits = t2(F32, N, 16), targets = t1(I32, N);
    mc_tensor mask = t1(F32, N);
    mc_op_xent_fused(be, &loss, &dlogits, &logits, &targets, &mask, 1.0f);
}
/* AdamW over state buffers of 100 elements and a gradient of 120. */
static mc_adamw_desc adamw_desc(const mc_adamw_segment *segs, int nseg) {
    return (mc_adamw_desc){.param = mem(100), .grad = mem(120), .exp_avg = mem(100), .exp_avg_sq = mem(100),
                           .param_copy = t1(MC_BF16, 120), .segments = segs, .nsegments = nseg, .lr = 1e-3f,
                           .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 1,
                           .state_numel = 100, .grad_numel = 120};
}
static void adamw_shape(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 60, .count = 50, .grad_offset = 0}};
    mc_adamw_desc d = adamw_desc(segs, 1);
    mc_op_adamw(be, &d);
}
static void adamw_dtype(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 50, .grad_offset = 10}};
    mc_adamw_desc d = adamw_desc(segs, 1);
    d.param_copy = t1(I32, 120);
    mc_op_adamw(be, &d);
}
/* The split master (d.param_lo) takes no d.param, and a BF16 d.param_copy. */
static void adamw_split_param(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 50, .grad_offset = 10}};
    mc_adamw_desc d = adamw_desc(segs, 1);
    d.param_lo = mem(100);
    mc_op_adamw(be, &d);
}
static void adamw_split_copy(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 50, .grad_offset = 10}};
    mc_adamw_desc d = adamw_desc(segs, 1);
    d.param = NULL, d.param_lo = mem(100), d.param_copy = t1(F16, 120);
    mc_op_adamw(be, &d);
}
/* The split master's join and split over lo of 100 elements, master and copy of 120. */
static void master_join_shape(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 90, .count = 20, .grad_offset = 0}};
    mc_tensor master = t1(F32, 120), copy = t1(MC_BF16, 120), lo = t1(MC_U16, 100);
    mc_op_master_join(be, &master, &copy, &lo, segs, 1);
}
static void master_join_dtype(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 20, .grad_offset = 0}};
    mc_tensor master = t1(F32, 120), copy = t1(F16, 120), lo = t1(MC_U16, 100);
    mc_op_master_join(be, &master, &copy, &lo, segs, 1);
}
static void master_split_shape(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 50, .grad_offset = 100}};
    mc_tensor master = t1(F32, 120), copy = t1(MC_BF16, 120), lo = t1(MC_U16, 100);
    mc_op_master_split(be, &copy, &lo, &master, segs, 1);
}
static void master_split_dtype(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 20, .grad_offset = 0}};
    mc_tensor master = t1(F32, 120), copy = t1(MC_BF16, 120), lo = t1(I32, 100);
    mc_op_master_split(be, &copy, &lo, &master, segs, 1);
}
static void sumsq_shape(mc_backend *be) {
    mc_tensor x = negative_dim(F32);
    (void)mc_op_sumsq(be, &x);
}
static void sumsq_dtype(mc_backend *be) {
    mc_tensor x = t1(I32, 32);
    (void)mc_op_sumsq(be, &x);
}
static void sumsq_segments_shape(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 10}, {.offset = 90, .count = 20}};
    mc_tensor out = t1(MC_F64, 1), buf = t1(F32, 100);
    mc_op_sumsq_segments(be, &out, &buf, segs, 2);
}
static void sumsq_segments_dtype(mc_backend *be) {
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 10}};
    mc_tensor out = t1(MC_F64, 1), buf = t1(MC_F64, 100);
    mc_op_sumsq_segments(be, &out, &buf, segs, 1);
}
static void count_zeros_shape(mc_backend *be) {
    mc_tensor x = negative_dim(F32);
    (void)mc_op_count_zeros(be, &x);
}
static void count_zeros_dtype(mc_backend *be) {
    mc_tensor x = t1(I32, 32);
    (void)mc_op_count_zeros(be, &x);
}

/* ---- sizes past a backend's limits (never touched: the calls abort first) ---- */

static float g_untouched[4];
static mc_tensor untouched2(mc_dtype dt, int64_t r, int64_t c) { return mc_tensor_2d(g_untouched, dt, r, c); }

/* k = 2^31: past OpenBLAS's int dimensions */
static void gemm_past_blas(mc_backend *be) {
    mc_tensor a = untouched2(F32, 1, (int64_t)1 << 31), b = untouched2(F32, (int64_t)1 << 31, 1), c = untouched2(F32, 1, 1);
    mc_op_gemm(be, &c, &a, false, &b, false, 1.0f, 0.0f);
}
/* head_dim 512: past the CUDA attention kernels' 256 */
static void attention_past_head_dim(mc_backend *be) {
    mc_attn_desc d = {.seq = 1, .batch = 1, .heads = 1, .groups = 1, .head_dim = 512, .softmax_scale = 1.0f};
    mc_tensor out = mc_tensor_1d(g_untouched, F32, 512), lse = mc_tensor_1d(g_untouched, F32, 1);
    mc_tensor qkv = mc_tensor_1d(g_untouched, F32, 3 * 512);
    mc_op_attention_fwd(be, &out, &lse, &qkv, &d);
}

typedef struct bad_call {
    const char *op, *operand; /* what the line must name */
    void (*call)(mc_backend *);
} bad_call;

#define CASES(op, shape_operand, dtype_operand) {#op, shape_operand, op##_shape}, {#op, dtype_operand, op##_dtype}
static const bad_call k_calls[] = {
    CASES(convert, "dst", "src"),
    CASES(fill, "x", "x"),
    CASES(init_normal, "p", "p"),
    CASES(gemm, "c", "b"),
    CASES(linear_fwd, "w", "y"),
    CASES(linear_bwd, "dw", "dw"),
    CASES(linear_residual_fwd, "residual", "residual"),
    CASES(linear_gelu_fwd, "pre", "pre"),
    CASES(linear_dgelu_bwd, "dpre", "db"),
    CASES(embedding_fwd, "y", "ids"),
    CASES(embedding_bwd, "dy", "dtable"),
    CASES(layernorm_fwd, "mean", "rstd"),
    CASES(layernorm_bwd, "dw", "mean"),
    CASES(rmsnorm_fwd, "w", "w"),
    CASES(rmsnorm_bwd, "dx", "rstd"),
    CASES(rope, "qkv", "d.cos"),
    CASES(gelu_fwd, "y", "y"),
    CASES(gelu_bwd, "dx", "dy"),
    CASES(swiglu_fwd, "x", "y"),
    CASES(swiglu_bwd, "dx", "y"),
    CASES(attention_fwd, "out", "lse"),
    CASES(attention_bwd, "dbias", "dout"),
    CASES(attention_kv_fwd, "out", "cache"),
    CASES(argmax_rows, "x", "ids"),
    CASES(dropout_fwd, "y", "y"),
    CASES(dropout_bwd, "dx", "dx"),
    CASES(dropout_add_fwd, "residual", "residual"),
    CASES(add_inplace, "x", "x"),
    CASES(scale_inplace, "x", "x"),
    CASES(xent_rowstats, "stats", "targets"),
    CASES(xent_rescale, "global_max", "local_max"),
    CASES(xent_loss_grad, "dlogits", "mask"),
    CASES(xent_fused, "loss", "dlogits"),
    CASES(adamw, "segments[0]", "d.param_copy"),
    {"adamw", "d.param", adamw_split_param},
    {"adamw", "d.param_copy", adamw_split_copy},
    CASES(master_join, "segments[0]", "copy"),
    CASES(master_split, "segments[0]", "lo"),
    CASES(sumsq, "x", "x"),
    CASES(sumsq_segments, "segments[1]", "buf"),
    CASES(count_zeros, "x", "x"),
};
enum { NCALLS = (int)(sizeof k_calls / sizeof k_calls[0]) };

static const bad_call k_cpu_limit = {"gemm", "dimensions", gemm_past_blas};
static const bad_call k_cuda_limit = {"attention_fwd", "d.head_dim", attention_past_head_dim};

/* Runs call(be) in a child with its stderr captured into out (NUL-terminated); returns
 * whether the child ended in SIGABRT. */
static bool aborts(const bad_call *c, mc_backend *be, char *out, size_t cap) {
    int p[2];
    if (pipe(p) != 0) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        c->call(be);
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(p[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* The bad call c on be: one line naming the op and the operand (into line). */
static void check_call(const bad_call *c, mc_backend *be, char line[1024]) {
    bool aborted = aborts(c, be, line, 1024);
    char want[128];
    snprintf(want, sizeof want, "mc_op_%s: operand %s: expected ", c->op, c->operand);
    const char *nl = strchr(line, '\n');
    bool one_line = nl && nl[1] == 0;
    CHECK(aborted, "%s backend, %s (%s): the call did not abort", be->name, c->op, c->operand);
    CHECK(one_line, "%s backend, %s (%s): stderr is not one line: %s", be->name, c->op, c->operand, line);
    CHECK(strstr(line, want) && strstr(line, ", got "), "%s backend, %s: wanted '%s...', got: %s", be->name, c->op,
          want, line);
    const char *msg = strstr(line, "mc_op_");
    printf("     %-5s %s", be->name, msg ? msg : line);
    if (!nl) putchar('\n');
}

static void run_all(mc_backend *be, char lines[][1024]) {
    for (int i = 0; i < NCALLS; i++) check_call(&k_calls[i], be, lines[i]);
}

static char cpu_lines[NCALLS][1024], gpu_lines[NCALLS][1024];

static void test_cpu(void) {
    mc_backend *cpu = mc_backend_cpu_create();
    run_all(cpu, cpu_lines);
    cpu->destroy(cpu);
}

/* A backend's own limit (its supports()) words its refusal the same way, naming the backend. */
static void test_cpu_limit(void) {
    mc_backend *cpu = mc_backend_cpu_create();
    char line[1024];
    check_call(&k_cpu_limit, cpu, line);
    CHECK(strstr(line, "(a limit of the cpu backend), got 1 x 1 x 2147483648"), "%s", line);
    cpu->destroy(cpu);
}

/* The same calls on CUDA give the same lines, word for word. */
static void test_cuda_same_lines(void) {
    mc_err err;
    mc_backend *gpu = mc_backend_cuda_create(0, &err);
    CHECK(gpu != NULL, "%s", err.msg);
    if (!gpu) return;
    run_all(gpu, gpu_lines);
    for (int i = 0; i < NCALLS; i++)
        CHECK(strcmp(cpu_lines[i], gpu_lines[i]) == 0, "%s: cpu and cuda lines differ:\n  %s  %s", k_calls[i].op,
              cpu_lines[i], gpu_lines[i]);
    char line[1024];
    check_call(&k_cuda_limit, gpu, line);
    CHECK(strstr(line, "expected head_dim <= 256 (a limit of the cuda backend), got 512"), "%s", line);
    gpu->destroy(gpu);
}

int main(void) {
    RUN(test_cpu);
    RUN(test_cpu_limit);
    if (mc_backend_cuda_available()) RUN(test_cuda_same_lines);
    else printf("skip test_cuda_same_lines: no GPU\n");
    return check_summary();
}
