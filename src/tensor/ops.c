/* ops.c: the op layer (ops.h). Every mc_op_<name> checks its operands against backend.h's
 * rules, in a fixed order, and then calls the backend's entry; all checks fail through
 * op_fail, so an operand error reads the same for every op and every backend.
 *
 * Words used below: A is an op's activation dtype (set by its first floating operand and
 * one the backend computes on), S = mc_stat_dtype(A) the dtype of its statistics and
 * weight gradients. A 2-D view of a tensor is [rows, last dim]. */
#include "tensor/ops.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* ---- the one message ---- */

typedef struct {
    char s[192];
} text;

static text textf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static text textf(const char *fmt, ...) {
    text t;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t.s, sizeof t.s, fmt, ap);
    va_end(ap);
    return t;
}

/* Operand errors are the caller's bugs: abort (error.h's policy) with one line naming the
 * op, the operand, what was expected and what was given. */
MC_NORETURN static void op_fail(const char *op, const char *operand, const char *expected, const char *given) {
    mc_assert_fail("valid operands", __FILE__, __LINE__, "mc_op_%s: operand %s: expected %s, got %s", op, operand,
                   expected, given);
}

static text shape_text(const mc_tensor *t) {
    text r = {"["};
    for (int i = 0; i < t->ndim; i++) {
        size_t used = strlen(r.s);
        snprintf(r.s + used, sizeof r.s - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    }
    size_t used = strlen(r.s);
    snprintf(r.s + used, sizeof r.s - used, "]");
    return r;
}

/* "F32, BF16 or F16" */
static text dtype_list(uint32_t dtypes) {
    text r = {""};
    int count = 0, total = 0;
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++) total += (dtypes & MC_DTYPE_BIT(dt)) != 0;
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++) {
        if (!(dtypes & MC_DTYPE_BIT(dt))) continue;
        size_t used = strlen(r.s);
        const char *sep = count == 0 ? "" : count + 1 == total ? " or " : ", ";
        snprintf(r.s + used, sizeof r.s - used, "%s%s", sep, mc_dtype_name((mc_dtype)dt));
        count++;
    }
    return r;
}

/* ---- operand checks ---- */

static int64_t cols_of(const mc_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }
static int64_t rows_of(const mc_tensor *t) {
    int64_t c = cols_of(t);
    return c ? mc_tensor_numel(t) / c : 0;
}

static bool is_float(mc_dtype dt) { return dt == MC_F32 || dt == MC_BF16 || dt == MC_F16 || dt == MC_F64; }

/* Present and well formed: data, a known dtype, 0 to MC_MAX_DIMS dimensions, none
 * negative, an element count that fits in 64 bits. */
static void need_tensor(const char *op, const char *name, const mc_tensor *t) {
    if (!mc_tensor_present(t)) op_fail(op, name, "a tensor", "none");
    if ((int)t->dtype < 0 || t->dtype >= MC_DTYPE_COUNT) op_fail(op, name, "a known dtype", textf("dtype %d", (int)t->dtype).s);
    if (t->ndim < 0 || t->ndim > MC_MAX_DIMS)
        op_fail(op, name, textf("0 to %d dimensions", MC_MAX_DIMS).s, textf("%d dimensions", t->ndim).s);
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) op_fail(op, name, "no negative dimension", shape_text(t).s);
        if (t->shape[i] > 0 && numel > INT64_MAX / t->shape[i])
            op_fail(op, name, "at most 2^63 - 1 elements", shape_text(t).s);
        numel *= t->shape[i];
    }
}

/* The operand that sets A: floating point, and a dtype the backend computes on. */
static mc_dtype need_compute(mc_backend *be, const char *op, const char *name, const mc_tensor *t) {
    need_tensor(op, name, t);
    if (!is_float(t->dtype)) op_fail(op, name, "a floating-point dtype", mc_dtype_name(t->dtype));
    if (!(be->compute_dtypes & MC_DTYPE_BIT(t->dtype)))
        op_fail(op, name, textf("%s (what the %s backend computes on)", dtype_list(be->compute_dtypes).s, be->name).s,
                mc_dtype_name(t->dtype));
    return t->dtype;
}

/* Conversion, fill, init and adamw's param_copy: floating point, a dtype the backend stores. */
static void need_storage(mc_backend *be, const char *op, const char *name, const mc_tensor *t) {
    need_tensor(op, name, t);
    if (!is_float(t->dtype)) op_fail(op, name, "a floating-point dtype", mc_dtype_name(t->dtype));
    if (!(be->storage_dtypes & MC_DTYPE_BIT(t->dtype)))
        op_fail(op, name, textf("%s (what the %s backend stores)", dtype_list(be->storage_dtypes).s, be->name).s,
                mc_dtype_name(t->dtype));
}

/* Present, of dtype dt (`why`: whose dtype that is). Checks run on every op call, so the
 * texts of a message are formatted only once it fails. */
static void need_dtype(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, const char *why) {
    need_tensor(op, name, t);
    if (t->dtype != dt) op_fail(op, name, textf("%s (%s)", mc_dtype_name(dt), why).s, mc_dtype_name(t->dtype));
}

/* Of A, like the operand `whose` ("x's"). */
static void need_act(const char *op, const char *name, const mc_tensor *t, mc_dtype act, const char *whose) {
    need_tensor(op, name, t);
    if (t->dtype != act)
        op_fail(op, name, textf("%s (%s dtype)", mc_dtype_name(act), whose).s, mc_dtype_name(t->dtype));
}

/* Of S for activations of dtype act. */
static void need_stat(const char *op, const char *name, const mc_tensor *t, mc_dtype act) {
    need_tensor(op, name, t);
    if (t->dtype != mc_stat_dtype(act))
        op_fail(op, name,
                textf("%s (statistics and gradients of %s activations)", mc_dtype_name(mc_stat_dtype(act)),
                      mc_dtype_name(act)).s,
                mc_dtype_name(t->dtype));
}

static void need_ids(const char *op, const char *name, const mc_tensor *t) {
    need_dtype(op, name, t, MC_I32, "token ids and positions");
}

/* Seen as [rows, last dim]: exactly [rows, cols] (`what` says where those come from). */
static void need_2d(const char *op, const char *name, const mc_tensor *t, int64_t rows, int64_t cols, const char *what) {
    if (rows_of(t) != rows || cols_of(t) != cols)
        op_fail(op, name, textf("[%lld, %lld] (%s; rows x last dim)", (long long)rows, (long long)cols, what).s,
                shape_text(t).s);
}

static void need_numel(const char *op, const char *name, const mc_tensor *t, int64_t n, const char *what) {
    if (mc_tensor_numel(t) != n)
        op_fail(op, name, textf("%lld elements (%s)", (long long)n, what).s,
                textf("%lld elements %s", (long long)mc_tensor_numel(t), shape_text(t).s).s);
}

static void need_apart(const char *op, const char *name, const mc_tensor *t, const char *other_name,
                       const mc_tensor *other) {
    if (t->data == other->data)
        op_fail(op, name, textf("memory apart from %s's", other_name).s, textf("the same address as %s", other_name).s);
}

static void need_probability(const char *op, const char *name, float p) {
    if (!(p >= 0.0f && p < 1.0f)) op_fail(op, name, "a probability in [0, 1)", textf("%g", (double)p).s);
}

static void need_pointer(const char *op, const char *name, const void *p) {
    if (!p) op_fail(op, name, "a buffer", "NULL");
}

/* The backend's own limits, after the generic checks. */
static void need_supported(mc_backend *be, const char *op, const mc_op_sizes *sizes) {
    mc_op_refusal why; /* filled by a refusal only: no clearing on every call */
    why.operand = NULL;
    if (be->supports && !be->supports(be, sizes, &why))
        op_fail(op, why.operand ? why.operand : "sizes", textf("%s (a limit of the %s backend)", why.expected, be->name).s,
                why.given);
}

/* ---- conversion and init ---- */

void mc_op_convert(mc_backend *be, mc_tensor *dst, const mc_tensor *src) {
    const char *op = "convert";
    need_storage(be, op, "src", src);
    need_storage(be, op, "dst", dst);
    need_numel(op, "dst", dst, mc_tensor_numel(src), "src's element count");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_CONVERT, .rows = mc_tensor_numel(src), .cols = 1});
    be->convert(be, dst, src);
}

void mc_op_fill(mc_backend *be, mc_tensor *x, double value) {
    const char *op = "fill";
    need_storage(be, op, "x", x);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_FILL, .rows = mc_tensor_numel(x), .cols = 1});
    be->fill(be, x, value);
}

void mc_op_init_normal(mc_backend *be, mc_tensor *p, uint64_t seed, uint64_t stream, double std,
                       const int64_t *row_index, int64_t row_stride, int64_t col_offset) {
    const char *op = "init_normal";
    need_storage(be, op, "p", p);
    if (p->ndim != 1 && p->ndim != 2) op_fail(op, "p", "a 1-D or 2-D tensor", shape_text(p).s);
    if (mc_tensor_numel(p) > 0) need_pointer(op, "row_index", row_index);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_INIT_NORMAL, .rows = rows_of(p), .cols = cols_of(p)});
    be->init_normal(be, p, seed, stream, std, row_index, row_stride, col_offset);
}

/* ---- GEMM and the linear layer ---- */

void mc_op_gemm(mc_backend *be, mc_tensor *c, const mc_tensor *a, bool trans_a, const mc_tensor *b, bool trans_b,
                float alpha, float beta) {
    const char *op = "gemm";
    mc_dtype dt = need_compute(be, op, "a", a);
    need_act(op, "b", b, dt, "a's");
    need_tensor(op, "c", c);
    if (c->dtype != dt && c->dtype != mc_stat_dtype(dt))
        op_fail(op, "c", textf("%s (a's dtype, or %s to accumulate in)", mc_dtype_name(dt), mc_dtype_name(mc_stat_dtype(dt))).s,
                mc_dtype_name(c->dtype));
    int64_t m = trans_a ? cols_of(a) : rows_of(a), k = trans_a ? rows_of(a) : cols_of(a);
    int64_t kb = trans_b ? cols_of(b) : rows_of(b), n = trans_b ? rows_of(b) : cols_of(b);
    if (kb != k)
        op_fail(op, "b", textf("op(b) with %lld rows (op(a)'s columns)", (long long)k).s,
                textf("op(b) with %lld rows, b %s%s", (long long)kb, shape_text(b).s, trans_b ? " transposed" : "").s);
    need_2d(op, "c", c, m, n, "op(a)'s rows x op(b)'s columns");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_GEMM, .m = m, .n = n, .k = k});
    be->gemm(be, c, a, trans_a, b, trans_b, alpha, beta);
}

/* The checks of y[N, out] = x[N, in] w[out, in]^T (+ b[out]) every forward linear shares. */
static mc_op_sizes linear_fwd_checks(mc_backend *be, const char *op, mc_op_kind kind, const mc_tensor *y,
                                     const mc_tensor *x, const mc_tensor *w, const mc_tensor *b) {
    mc_dtype dt = need_compute(be, op, "x", x);
    need_act(op, "w", w, dt, "x's");
    need_act(op, "y", y, dt, "x's");
    int64_t n = rows_of(x), in = cols_of(x), out = rows_of(w);
    need_2d(op, "w", w, out, in, "w's rows x x's last dim");
    need_2d(op, "y", y, n, out, "x's rows x w's rows");
    if (mc_tensor_present(b)) {
        need_act(op, "b", b, dt, "x's");
        need_numel(op, "b", b, out, "w's rows");
    }
    return (mc_op_sizes){.op = kind, .m = n, .n = out, .k = in};
}

void mc_op_linear_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, const mc_tensor *w, const mc_tensor *b) {
    const char *op = "linear_fwd";
    mc_op_sizes sizes = linear_fwd_checks(be, op, MC_OP_LINEAR_FWD, y, x, w, b);
    need_supported(be, op, &sizes);
    be->linear_fwd(be, y, x, w, b);
}

void mc_op_linear_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, const mc_tensor *dy,
                      const mc_tensor *x, const mc_tensor *w, bool accumulate) {
    const char *op = "linear_bwd";
    mc_dtype dt = need_compute(be, op, "dy", dy);
    need_act(op, "x", x, dt, "dy's");
    need_act(op, "w", w, dt, "dy's");
    int64_t n = rows_of(dy), out = cols_of(dy), in = cols_of(w);
    need_2d(op, "w", w, out, in, "dy's last dim x w's last dim");
    need_2d(op, "x", x, n, in, "dy's rows x w's last dim");
    if (mc_tensor_present(dx)) {
        need_act(op, "dx", dx, dt, "dy's");
        need_2d(op, "dx", dx, n, in, "x's shape");
    }
    if (mc_tensor_present(dw)) {
        need_stat(op, "dw", dw, dt);
        need_2d(op, "dw", dw, out, in, "w's shape");
    }
    if (mc_tensor_present(db)) {
        need_stat(op, "db", db, dt);
        need_numel(op, "db", db, out, "dy's last dim");
    }
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_LINEAR_BWD, .m = n, .n = in, .k = out});
    be->linear_bwd(be, dx, dw, db, dy, x, w, accumulate);
}

void mc_op_linear_residual_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x,
                               const mc_tensor *w, const mc_tensor *b) {
    const char *op = "linear_residual_fwd";
    mc_op_sizes sizes = linear_fwd_checks(be, op, MC_OP_LINEAR_RESIDUAL_FWD, y, x, w, b);
    need_act(op, "residual", residual, x->dtype, "x's");
    need_numel(op, "residual", residual, sizes.m * sizes.n, "y's element count");
    need_apart(op, "y", y, "residual", residual);
    need_supported(be, op, &sizes);
    be->linear_residual_fwd(be, y, residual, x, w, b);
}

void mc_op_linear_gelu_fwd(mc_backend *be, mc_tensor *y, mc_tensor *pre, const mc_tensor *x, const mc_tensor *w,
                           const mc_tensor *b) {
    const char *op = "linear_gelu_fwd";
    mc_op_sizes sizes = linear_fwd_checks(be, op, MC_OP_LINEAR_GELU_FWD, y, x, w, b);
    need_act(op, "pre", pre, x->dtype, "x's");
    need_2d(op, "pre", pre, sizes.m, sizes.n, "y's shape");
    need_apart(op, "y", y, "pre", pre);
    need_supported(be, op, &sizes);
    be->linear_gelu_fwd(be, y, pre, x, w, b);
}

void mc_op_linear_dgelu_bwd(mc_backend *be, mc_tensor *dpre, mc_tensor *db, const mc_tensor *dy, const mc_tensor *w,
                            const mc_tensor *pre) {
    const char *op = "linear_dgelu_bwd";
    mc_dtype dt = need_compute(be, op, "dy", dy);
    need_act(op, "w", w, dt, "dy's");
    need_act(op, "pre", pre, dt, "dy's");
    need_act(op, "dpre", dpre, dt, "dy's");
    int64_t n = rows_of(dy), out = cols_of(dy), f = cols_of(w);
    need_2d(op, "w", w, out, f, "dy's last dim x w's last dim");
    need_2d(op, "pre", pre, n, f, "dy's rows x w's last dim");
    need_2d(op, "dpre", dpre, n, f, "pre's shape");
    if (mc_tensor_present(db)) {
        need_stat(op, "db", db, dt);
        need_numel(op, "db", db, f, "w's last dim");
    }
    need_apart(op, "dpre", dpre, "pre", pre);
    need_apart(op, "dpre", dpre, "dy", dy);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_LINEAR_DGELU_BWD, .m = n, .n = f, .k = out});
    be->linear_dgelu_bwd(be, dpre, db, dy, w, pre);
}

/* ---- embedding ---- */

void mc_op_embedding_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *ids, const mc_tensor *table,
                         int64_t vocab_start, bool accumulate) {
    const char *op = "embedding_fwd";
    mc_dtype dt = need_compute(be, op, "table", table);
    need_act(op, "y", y, dt, "table's");
    need_ids(op, "ids", ids);
    int64_t ntok = mc_tensor_numel(ids), h = cols_of(table);
    need_2d(op, "y", y, ntok, h, "ids' count x table's last dim");
    need_supported(be, op,
                   &(mc_op_sizes){.op = MC_OP_EMBEDDING_FWD, .rows = ntok, .cols = h, .table_rows = rows_of(table)});
    be->embedding_fwd(be, y, ids, table, vocab_start, accumulate);
}

void mc_op_embedding_bwd(mc_backend *be, mc_tensor *dtable, const mc_tensor *dy, const mc_tensor *ids,
                         int64_t vocab_start) {
    const char *op = "embedding_bwd";
    mc_dtype dt = need_compute(be, op, "dy", dy);
    need_stat(op, "dtable", dtable, dt);
    need_ids(op, "ids", ids);
    int64_t ntok = mc_tensor_numel(ids), h = cols_of(dtable);
    need_2d(op, "dy", dy, ntok, h, "ids' count x dtable's last dim");
    need_supported(be, op,
                   &(mc_op_sizes){.op = MC_OP_EMBEDDING_BWD, .rows = ntok, .cols = h, .table_rows = rows_of(dtable)});
    be->embedding_bwd(be, dtable, dy, ids, vocab_start);
}

/* ---- norms ---- */

/* x [n, h] sets A; w [h] of A; a statistic [n] of S; a parameter gradient [h] of S. */
static void need_vec(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, int64_t h) {
    need_act(op, name, t, dt, "x's");
    need_numel(op, name, t, h, "x's last dim");
}

static void need_row_stat(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, int64_t n) {
    need_stat(op, name, t, dt);
    need_numel(op, name, t, n, "x's rows");
}

static void need_col_grad(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, int64_t h) {
    need_stat(op, name, t, dt);
    need_numel(op, name, t, h, "x's last dim");
}

static void need_like_x(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, int64_t n, int64_t h) {
    need_act(op, name, t, dt, "x's");
    need_2d(op, name, t, n, h, "x's shape");
}

/* The backward's optional outputs: dx, y (the forward's output again, apart from dx, dy and
 * x) and dxsum (dx's column sums, so dx is needed). */
static void norm_bwd_outputs(const char *op, const mc_tensor *dx, const mc_tensor *dxsum, const mc_tensor *y,
                             const mc_tensor *dy, const mc_tensor *x, mc_dtype dt, int64_t n, int64_t h) {
    if (mc_tensor_present(dx)) need_like_x(op, "dx", dx, dt, n, h);
    if (mc_tensor_present(y)) {
        need_like_x(op, "y", y, dt, n, h);
        if (mc_tensor_present(dx)) need_apart(op, "y", y, "dx", dx);
        need_apart(op, "y", y, "dy", dy);
        need_apart(op, "y", y, "x", x);
    }
    if (mc_tensor_present(dxsum)) {
        if (!mc_tensor_present(dx)) op_fail(op, "dx", "a tensor (dxsum sums its columns)", "none");
        need_col_grad(op, "dxsum", dxsum, dt, h);
    }
}

void mc_op_layernorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *mean, mc_tensor *rstd, const mc_tensor *x,
                         const mc_tensor *w, const mc_tensor *b, float eps) {
    const char *op = "layernorm_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), h = cols_of(x);
    need_like_x(op, "y", y, dt, n, h);
    need_vec(op, "w", w, dt, h);
    if (mc_tensor_present(b)) need_vec(op, "b", b, dt, h);
    if (mc_tensor_present(mean)) need_row_stat(op, "mean", mean, dt, n);
    if (mc_tensor_present(rstd)) need_row_stat(op, "rstd", rstd, dt, n);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_LAYERNORM_FWD, .rows = n, .cols = h});
    be->layernorm_fwd(be, y, mean, rstd, x, w, b, eps);
}

void mc_op_layernorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *db, mc_tensor *dxsum,
                         mc_tensor *y, const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w,
                         const mc_tensor *b, const mc_tensor *mean, const mc_tensor *rstd) {
    const char *op = "layernorm_bwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), h = cols_of(x);
    need_like_x(op, "dy", dy, dt, n, h);
    need_vec(op, "w", w, dt, h);
    if (mc_tensor_present(b)) need_vec(op, "b", b, dt, h);
    need_row_stat(op, "mean", mean, dt, n);
    need_row_stat(op, "rstd", rstd, dt, n);
    if (mc_tensor_present(dw)) need_col_grad(op, "dw", dw, dt, h);
    if (mc_tensor_present(db)) need_col_grad(op, "db", db, dt, h);
    norm_bwd_outputs(op, dx, dxsum, y, dy, x, dt, n, h);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_LAYERNORM_BWD, .rows = n, .cols = h});
    be->layernorm_bwd(be, dx, dw, db, dxsum, y, dy, x, w, b, mean, rstd);
}

void mc_op_rmsnorm_fwd(mc_backend *be, mc_tensor *y, mc_tensor *rstd, const mc_tensor *x, const mc_tensor *w,
                       float eps) {
    const char *op = "rmsnorm_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), h = cols_of(x);
    need_like_x(op, "y", y, dt, n, h);
    need_vec(op, "w", w, dt, h);
    if (mc_tensor_present(rstd)) need_row_stat(op, "rstd", rstd, dt, n);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_RMSNORM_FWD, .rows = n, .cols = h});
    be->rmsnorm_fwd(be, y, rstd, x, w, eps);
}

void mc_op_rmsnorm_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *dw, mc_tensor *dxsum, mc_tensor *y,
                       const mc_tensor *dy, const mc_tensor *x, const mc_tensor *w, const mc_tensor *rstd) {
    const char *op = "rmsnorm_bwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), h = cols_of(x);
    need_like_x(op, "dy", dy, dt, n, h);
    need_vec(op, "w", w, dt, h);
    need_row_stat(op, "rstd", rstd, dt, n);
    if (mc_tensor_present(dw)) need_col_grad(op, "dw", dw, dt, h);
    norm_bwd_outputs(op, dx, dxsum, y, dy, x, dt, n, h);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_RMSNORM_BWD, .rows = n, .cols = h});
    be->rmsnorm_bwd(be, dx, dw, dxsum, y, dy, x, w, rstd);
}

/* ---- rotary embedding ---- */

/* A descriptor's field names in messages: the rope op's own, or the one attention_bwd
 * carries. */
typedef struct {
    const char *d, *seq, *heads, *head_dim, *rot_dim, *cos, *sin, *pos;
} rope_names;
static const rope_names k_rope_names = {"d", "d.seq", "d.heads", "d.head_dim", "d.rot_dim", "d.cos", "d.sin", "d.pos"};
static const rope_names k_attn_rope_names = {"d.rope",         "d.rope.seq", "d.rope.heads", "d.rope.head_dim",
                                             "d.rope.rot_dim", "d.rope.cos", "d.rope.sin",   "d.rope.pos"};

/* heads a positive multiple of groups, head_dim positive. */
static void need_heads(const char *op, const char *heads_name, const char *head_dim_name, int heads, int groups,
                       int head_dim) {
    if (!(heads > 0 && groups > 0 && heads % groups == 0))
        op_fail(op, heads_name, "a positive multiple of groups", textf("heads %d, groups %d", heads, groups).s);
    if (head_dim <= 0) op_fail(op, head_dim_name, "a positive head dim", textf("%d", head_dim).s);
}

/* The packed QKV activation [S, B, groups, heads/groups + 2, head_dim]. */
static void need_qkv(const char *op, const char *name, const mc_tensor *t, int64_t seq, int64_t batch, int heads,
                     int groups, int head_dim) {
    int64_t n = seq * batch * (int64_t)(heads + 2 * groups) * head_dim;
    if (mc_tensor_numel(t) != n)
        need_numel(op, name, t, n, textf("S %lld x B %lld x (heads %d + 2 groups %d) x head_dim %d", (long long)seq,
                                         (long long)batch, heads, groups, head_dim).s);
}

/* A rope descriptor for qkv (whose dtype is dt). */
static void rope_checks(const char *op, const rope_names *nm, const mc_tensor *qkv, mc_dtype dt, const mc_rope_desc *d) {
    need_pointer(op, nm->d, d);
    if (d->seq < 0 || d->batch <= 0)
        op_fail(op, nm->seq, "seq >= 0 and batch > 0", textf("seq %lld, batch %lld", (long long)d->seq, (long long)d->batch).s);
    need_heads(op, nm->heads, nm->head_dim, d->heads, d->groups, d->head_dim);
    if (!(d->rot_dim > 0 && d->rot_dim % 2 == 0 && d->rot_dim <= d->head_dim))
        op_fail(op, nm->rot_dim, textf("an even count in (0, head_dim %d]", d->head_dim).s, textf("%d", d->rot_dim).s);
    need_qkv(op, "qkv", qkv, d->seq, d->batch, d->heads, d->groups, d->head_dim);
    need_stat(op, nm->cos, &d->cos, dt);
    need_stat(op, nm->sin, &d->sin, dt);
    int64_t max_pos = rows_of(&d->cos);
    need_2d(op, nm->cos, &d->cos, max_pos, d->rot_dim / 2, "positions x rot_dim/2");
    need_2d(op, nm->sin, &d->sin, max_pos, d->rot_dim / 2, "cos's shape");
    if (mc_tensor_present(&d->pos)) {
        need_ids(op, nm->pos, &d->pos);
        need_numel(op, nm->pos, &d->pos, d->seq * d->batch, "S x B tokens");
    } else if (d->seq > max_pos) {
        op_fail(op, nm->cos, textf("at least seq %lld positions (no pos given: positions are 0 .. seq-1)", (long long)d->seq).s,
                textf("%lld", (long long)max_pos).s);
    }
}

void mc_op_rope(mc_backend *be, mc_tensor *qkv, const mc_rope_desc *d, bool inverse) {
    const char *op = "rope";
    mc_dtype dt = need_compute(be, op, "qkv", qkv);
    rope_checks(op, &k_rope_names, qkv, dt, d);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ROPE, .rows = d->seq * d->batch, .cols = cols_of(qkv)});
    be->rope(be, qkv, d, inverse);
}

/* ---- activations ---- */

void mc_op_gelu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, bool tanh) {
    const char *op = "gelu_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    need_act(op, "y", y, dt, "x's");
    need_numel(op, "y", y, mc_tensor_numel(x), "x's element count");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_GELU_FWD, .rows = mc_tensor_numel(x), .cols = 1});
    be->gelu_fwd(be, y, x, tanh);
}

void mc_op_gelu_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh) {
    const char *op = "gelu_bwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    need_act(op, "dy", dy, dt, "x's");
    need_act(op, "dx", dx, dt, "x's");
    need_numel(op, "dy", dy, mc_tensor_numel(x), "x's element count");
    need_numel(op, "dx", dx, mc_tensor_numel(x), "x's element count");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_GELU_BWD, .rows = mc_tensor_numel(x), .cols = 1});
    be->gelu_bwd(be, dx, dy, x, tanh);
}

/* x [N, 2f] = [gate | up]: its last dim even; returns f. */
static int64_t swiglu_width(const char *op, const mc_tensor *x) {
    if (cols_of(x) % 2 != 0) op_fail(op, "x", "an even last dim ([gate | up])", shape_text(x).s);
    return cols_of(x) / 2;
}

void mc_op_swiglu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    const char *op = "swiglu_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), f = swiglu_width(op, x);
    need_act(op, "y", y, dt, "x's");
    need_2d(op, "y", y, n, f, "x's rows x half x's last dim");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_SWIGLU_FWD, .rows = n, .cols = 2 * f});
    be->swiglu_fwd(be, y, x);
}

void mc_op_swiglu_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x) {
    const char *op = "swiglu_bwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    int64_t n = rows_of(x), f = swiglu_width(op, x);
    need_act(op, "dy", dy, dt, "x's");
    need_act(op, "dx", dx, dt, "x's");
    need_2d(op, "dy", dy, n, f, "x's rows x half x's last dim");
    need_2d(op, "dx", dx, n, 2 * f, "x's shape");
    if (mc_tensor_present(y)) {
        need_act(op, "y", y, dt, "x's");
        need_2d(op, "y", y, n, f, "dy's shape");
    }
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_SWIGLU_BWD, .rows = n, .cols = 2 * f});
    be->swiglu_bwd(be, dx, y, dy, x);
}

/* ---- attention ---- */

/* The descriptor, qkv (sets A) and the optional seg_start. */
static mc_dtype attention_checks(mc_backend *be, const char *op, const mc_tensor *qkv, const mc_attn_desc *d) {
    need_pointer(op, "d", d);
    if (d->seq <= 0 || d->batch <= 0)
        op_fail(op, "d.seq", "seq > 0 and batch > 0", textf("seq %lld, batch %lld", (long long)d->seq, (long long)d->batch).s);
    need_heads(op, "d.heads", "d.head_dim", d->heads, d->groups, d->head_dim);
    need_probability(op, "d.dropout", d->dropout);
    mc_dtype dt = need_compute(be, op, "qkv", qkv);
    need_qkv(op, "qkv", qkv, d->seq, d->batch, d->heads, d->groups, d->head_dim);
    if (mc_tensor_present(&d->seg_start)) {
        need_ids(op, "d.seg_start", &d->seg_start);
        need_numel(op, "d.seg_start", &d->seg_start, d->batch * d->seq, "B x S");
    }
    return dt;
}

void mc_op_attention_fwd(mc_backend *be, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                         const mc_attn_desc *d) {
    const char *op = "attention_fwd";
    mc_dtype dt = attention_checks(be, op, qkv, d);
    need_act(op, "out", out, dt, "qkv's");
    need_numel(op, "out", out, d->seq * d->batch * d->heads * d->head_dim, "S x B x heads x head_dim");
    need_stat(op, "lse", lse, dt);
    need_numel(op, "lse", lse, d->batch * d->heads * d->seq, "B x heads x S");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ATTENTION_FWD, .attn = d});
    be->attention_fwd(be, out, lse, qkv, d);
}

void mc_op_attention_kv_fwd(mc_backend *be, mc_tensor *out, mc_tensor *cache, const mc_tensor *qkv,
                            const mc_tensor *pos, const mc_attn_desc *d) {
    const char *op = "attention_kv_fwd";
    mc_dtype dt = attention_checks(be, op, qkv, d);
    if (d->dropout != 0.0f) op_fail(op, "d.dropout", "0 (generation)", textf("%g", (double)d->dropout).s);
    if (mc_tensor_present(&d->seg_start)) op_fail(op, "d.seg_start", "absent (generation)", "present");
    need_act(op, "out", out, dt, "qkv's");
    need_numel(op, "out", out, d->seq * d->batch * d->heads * d->head_dim, "S x B x heads x head_dim");
    need_ids(op, "pos", pos);
    need_numel(op, "pos", pos, d->seq * d->batch, "S x B");
    need_act(op, "cache", cache, dt, "qkv's");
    int64_t per_seq_pos = d->batch * d->groups * 2 * d->head_dim, n = mc_tensor_numel(cache);
    if (n == 0 || n % per_seq_pos != 0)
        op_fail(op, "cache", "[B, cap, groups, 2, head_dim] with cap >= 1",
                textf("%lld elements for B %lld, groups %d, head_dim %d", (long long)n, (long long)d->batch, d->groups,
                      d->head_dim).s);
    need_apart(op, "cache", cache, "qkv", qkv);
    need_apart(op, "cache", cache, "out", out);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ATTENTION_KV_FWD, .attn = d});
    be->attention_kv_fwd(be, out, cache, qkv, pos, d);
}

void mc_op_argmax_rows(mc_backend *be, mc_tensor *ids, const mc_tensor *x, int64_t vocab) {
    const char *op = "argmax_rows";
    need_compute(be, op, "x", x);
    need_ids(op, "ids", ids);
    int64_t n = mc_tensor_numel(ids), rows = rows_of(x), cols = cols_of(x);
    if (n == 0 || rows % n != 0)
        op_fail(op, "x", textf("a multiple of %lld rows (shards x ids' element count)", (long long)n).s,
                shape_text(x).s);
    if (vocab < 1 || vocab > rows / n * cols)
        op_fail(op, "vocab", textf("in [1, %lld] (the ids the shards hold)", (long long)(rows / n * cols)).s,
                textf("%lld", (long long)vocab).s);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ARGMAX_ROWS, .rows = rows, .cols = cols});
    be->argmax_rows(be, ids, x, vocab);
}

void mc_op_decode_advance(mc_backend *be, mc_tensor *tokens, mc_tensor *pos, const mc_tensor *ids, int64_t cap) {
    const char *op = "decode_advance";
    need_ids(op, "ids", ids);
    need_ids(op, "tokens", tokens);
    need_ids(op, "pos", pos);
    const int64_t n = mc_tensor_numel(ids);
    if (mc_tensor_numel(tokens) < n || mc_tensor_numel(pos) < n)
        op_fail(op, mc_tensor_numel(tokens) < n ? "tokens" : "pos",
                textf("at least %lld elements (one an id)", (long long)n).s,
                shape_text(mc_tensor_numel(tokens) < n ? tokens : pos).s);
    if (cap < 1) op_fail(op, "cap", "at least 1 (positions a cache slot holds)", textf("%lld", (long long)cap).s);
    need_apart(op, "tokens", tokens, "pos", pos);
    be->decode_advance(be, tokens, pos, ids, cap);
}

void mc_op_attention_bwd(mc_backend *be, mc_tensor *dqkv, mc_tensor *dbias, const mc_tensor *dout,
                         const mc_tensor *qkv, const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d) {
    const char *op = "attention_bwd";
    mc_dtype dt = attention_checks(be, op, qkv, d);
    int64_t nout = d->seq * d->batch * d->heads * d->head_dim;
    need_act(op, "dqkv", dqkv, dt, "qkv's");
    need_numel(op, "dqkv", dqkv, mc_tensor_numel(qkv), "qkv's element count");
    need_apart(op, "dqkv", dqkv, "qkv", qkv);
    need_act(op, "dout", dout, dt, "qkv's");
    need_numel(op, "dout", dout, nout, "S x B x heads x head_dim");
    need_act(op, "out", out, dt, "qkv's");
    need_numel(op, "out", out, nout, "S x B x heads x head_dim");
    need_stat(op, "lse", lse, dt);
    need_numel(op, "lse", lse, d->batch * d->heads * d->seq, "B x heads x S");
    if (mc_tensor_present(dbias)) {
        need_stat(op, "dbias", dbias, dt);
        need_numel(op, "dbias", dbias, (int64_t)(d->heads + 2 * d->groups) * d->head_dim, "the qkv width");
    }
    if (d->rope) rope_checks(op, &k_attn_rope_names, dqkv, dt, d->rope);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ATTENTION_BWD, .attn = d});
    be->attention_bwd(be, dqkv, dbias, dout, qkv, out, lse, d);
}

/* ---- dropout and residual ---- */

void mc_op_dropout_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, float p, uint64_t seed, uint64_t stream) {
    const char *op = "dropout_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    need_act(op, "y", y, dt, "x's");
    need_numel(op, "y", y, mc_tensor_numel(x), "x's element count");
    need_probability(op, "p", p);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_DROPOUT_FWD, .rows = mc_tensor_numel(x), .cols = 1});
    be->dropout_fwd(be, y, x, p, seed, stream);
}

void mc_op_dropout_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, float p, uint64_t seed, uint64_t stream) {
    const char *op = "dropout_bwd";
    mc_dtype dt = need_compute(be, op, "dy", dy);
    need_act(op, "dx", dx, dt, "dy's");
    need_numel(op, "dx", dx, mc_tensor_numel(dy), "dy's element count");
    need_probability(op, "p", p);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_DROPOUT_BWD, .rows = mc_tensor_numel(dy), .cols = 1});
    be->dropout_bwd(be, dx, dy, p, seed, stream);
}

void mc_op_dropout_add_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *residual, const mc_tensor *x, float p,
                           uint64_t seed, uint64_t stream) {
    const char *op = "dropout_add_fwd";
    mc_dtype dt = need_compute(be, op, "x", x);
    need_act(op, "residual", residual, dt, "x's");
    need_act(op, "y", y, dt, "x's");
    need_numel(op, "residual", residual, mc_tensor_numel(x), "x's element count");
    need_numel(op, "y", y, mc_tensor_numel(x), "x's element count");
    need_probability(op, "p", p);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_DROPOUT_ADD_FWD, .rows = mc_tensor_numel(x), .cols = 1});
    be->dropout_add_fwd(be, y, residual, x, p, seed, stream);
}

void mc_op_add_inplace(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    const char *op = "add_inplace";
    mc_dtype dt = need_compute(be, op, "y", y);
    need_act(op, "x", x, dt, "y's");
    need_numel(op, "x", x, mc_tensor_numel(y), "y's element count");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ADD_INPLACE, .rows = mc_tensor_numel(y), .cols = 1});
    be->add_inplace(be, y, x);
}

void mc_op_scale_inplace(mc_backend *be, mc_tensor *x, float s) {
    const char *op = "scale_inplace";
    need_compute(be, op, "x", x);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_SCALE_INPLACE, .rows = mc_tensor_numel(x), .cols = 1});
    be->scale_inplace(be, x, s);
}

/* ---- softmax cross-entropy ---- */

/* logits [n, v] (sets A) and targets [n] I32; with `need_cols`, at least one column when
 * there are rows (a softmax over nothing). */
static mc_dtype xent_logits(mc_backend *be, const char *op, const mc_tensor *logits, const mc_tensor *targets,
                            bool need_cols) {
    mc_dtype dt = need_compute(be, op, "logits", logits);
    if (need_cols && rows_of(logits) > 0 && cols_of(logits) == 0)
        op_fail(op, "logits", "at least one column", shape_text(logits).s);
    need_ids(op, "targets", targets);
    need_numel(op, "targets", targets, rows_of(logits), "logits' rows");
    return dt;
}

static void need_logits_stat(const char *op, const char *name, const mc_tensor *t, mc_dtype dt, int64_t n,
                             const char *what) {
    need_stat(op, name, t, dt);
    need_numel(op, name, t, n, what);
}

void mc_op_xent_rowstats(mc_backend *be, mc_tensor *rowmax, mc_tensor *stats, const mc_tensor *logits,
                         const mc_tensor *targets, int64_t vocab_start) {
    const char *op = "xent_rowstats";
    mc_dtype dt = xent_logits(be, op, logits, targets, true);
    int64_t n = rows_of(logits);
    need_logits_stat(op, "rowmax", rowmax, dt, n, "logits' rows");
    need_logits_stat(op, "stats", stats, dt, 2 * n, "2 x logits' rows");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_XENT_ROWSTATS, .rows = n, .cols = cols_of(logits)});
    be->xent_rowstats(be, rowmax, stats, logits, targets, vocab_start);
}

void mc_op_xent_rescale(mc_backend *be, mc_tensor *stats, const mc_tensor *local_max, const mc_tensor *global_max) {
    const char *op = "xent_rescale";
    need_tensor(op, "stats", stats);
    /* no activations here: stats must be the statistics dtype of some dtype the backend computes on */
    uint32_t stat_dtypes = 0;
    for (int dt = 0; dt < MC_DTYPE_COUNT; dt++)
        if (be->compute_dtypes & MC_DTYPE_BIT(dt)) stat_dtypes |= MC_DTYPE_BIT(mc_stat_dtype((mc_dtype)dt));
    if (!(stat_dtypes & MC_DTYPE_BIT(stats->dtype)))
        op_fail(op, "stats", textf("%s (statistics of what the %s backend computes on)", dtype_list(stat_dtypes).s, be->name).s,
                mc_dtype_name(stats->dtype));
    need_dtype(op, "local_max", local_max, stats->dtype, "stats' dtype");
    need_dtype(op, "global_max", global_max, stats->dtype, "stats' dtype");
    int64_t n = mc_tensor_numel(local_max);
    need_numel(op, "stats", stats, 2 * n, "2 x local_max's element count");
    need_numel(op, "global_max", global_max, n, "local_max's element count");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_XENT_RESCALE, .rows = n, .cols = 1});
    be->xent_rescale(be, stats, local_max, global_max);
}

void mc_op_xent_loss_grad(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                          const mc_tensor *rowmax, const mc_tensor *stats, const mc_tensor *targets,
                          const mc_tensor *mask, int64_t vocab_start, float grad_scale) {
    const char *op = "xent_loss_grad";
    mc_dtype dt = xent_logits(be, op, logits, targets, mc_tensor_present(dlogits));
    int64_t n = rows_of(logits), v = cols_of(logits);
    need_logits_stat(op, "loss", loss, dt, n, "logits' rows");
    need_logits_stat(op, "rowmax", rowmax, dt, n, "logits' rows");
    need_logits_stat(op, "stats", stats, dt, 2 * n, "2 x logits' rows");
    if (mc_tensor_present(dlogits)) {
        need_act(op, "dlogits", dlogits, dt, "logits'");
        need_2d(op, "dlogits", dlogits, n, v, "logits' shape");
    }
    if (mc_tensor_present(mask)) need_logits_stat(op, "mask", mask, dt, n, "logits' rows");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_XENT_LOSS_GRAD, .rows = n, .cols = v});
    be->xent_loss_grad(be, loss, dlogits, logits, rowmax, stats, targets, mask, vocab_start, grad_scale);
}

void mc_op_xent_fused(mc_backend *be, mc_tensor *loss, mc_tensor *dlogits, const mc_tensor *logits,
                      const mc_tensor *targets, const mc_tensor *mask, float grad_scale) {
    const char *op = "xent_fused";
    mc_dtype dt = xent_logits(be, op, logits, targets, true);
    int64_t n = rows_of(logits), v = cols_of(logits);
    need_logits_stat(op, "loss", loss, dt, n, "logits' rows");
    if (mc_tensor_present(dlogits)) {
        need_act(op, "dlogits", dlogits, dt, "logits'");
        need_2d(op, "dlogits", dlogits, n, v, "logits' shape");
    }
    if (mc_tensor_present(mask)) need_logits_stat(op, "mask", mask, dt, n, "logits' rows");
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_XENT_FUSED, .rows = n, .cols = v});
    be->xent_fused(be, loss, dlogits, logits, targets, mask, grad_scale);
}

/* ---- optimizer ---- */

/* Segment i of a list: offsets and count non-negative, inside buffers of state_numel and
 * grad_numel elements (grad_numel < 0: grad_offset unused). */
static void need_segment(const char *op, const mc_adamw_segment *sg, int i, int64_t state_numel, const char *state_name,
                         int64_t grad_numel, const char *grad_name) {
    if (sg->offset < 0 || sg->count < 0 || (grad_numel >= 0 && sg->grad_offset < 0))
        op_fail(op, textf("segments[%d]", i).s, "non-negative offset, count and grad_offset",
                textf("offset %lld, count %lld, grad_offset %lld", (long long)sg->offset, (long long)sg->count,
                      (long long)sg->grad_offset).s);
    if (sg->count > state_numel - sg->offset)
        op_fail(op, textf("segments[%d]", i).s,
                textf("a range inside %s's %lld elements", state_name, (long long)state_numel).s,
                textf("[%lld, %lld + %lld)", (long long)sg->offset, (long long)sg->offset, (long long)sg->count).s);
    if (grad_numel >= 0 && sg->count > grad_numel - sg->grad_offset)
        op_fail(op, textf("segments[%d]", i).s,
                textf("a grad range inside %s's %lld elements", grad_name, (long long)grad_numel).s,
                textf("[%lld, %lld + %lld)", (long long)sg->grad_offset, (long long)sg->grad_offset, (long long)sg->count).s);
}

static void need_segment_list(const char *op, const mc_adamw_segment *segments, int nsegments) {
    if (nsegments < 0) op_fail(op, "nsegments", "a count >= 0", textf("%d", nsegments).s);
    if (nsegments > 0) need_pointer(op, "segments", segments);
}

void mc_op_adamw(mc_backend *be, const mc_adamw_desc *d) {
    const char *op = "adamw";
    need_pointer(op, "d", d);
    bool split = d->param_lo != NULL; /* the master as param_copy's high halves and param_lo */
    if (split && d->param) op_fail(op, "d.param", "NULL (the master is split: d.param_copy and d.param_lo)", "a buffer");
    if (!split) need_pointer(op, "d.param", d->param);
    need_pointer(op, "d.grad", d->grad);
    need_pointer(op, "d.exp_avg", d->exp_avg);
    need_pointer(op, "d.exp_avg_sq", d->exp_avg_sq);
    if (d->step < 1) op_fail(op, "d.step", "a step >= 1 (1-based)", textf("%lld", (long long)d->step).s);
    need_segment_list(op, d->segments, d->nsegments);
    bool copy = mc_tensor_present(&d->param_copy);
    if (copy) need_storage(be, op, "d.param_copy", &d->param_copy);
    if (split) need_dtype(op, "d.param_copy", &d->param_copy, MC_BF16, "the master's high halves, beside d.param_lo");
    int64_t grad_numel = d->grad_numel;
    const char *grad_name = "d.grad";
    if (copy && mc_tensor_numel(&d->param_copy) < grad_numel) {
        grad_numel = mc_tensor_numel(&d->param_copy); /* the segments' grad ranges address it too */
        grad_name = "d.param_copy";
    }
    for (int i = 0; i < d->nsegments; i++)
        need_segment(op, &d->segments[i], i, d->state_numel, split ? "d.param_lo" : "d.param", grad_numel, grad_name);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_ADAMW, .rows = d->state_numel, .cols = 1});
    be->adamw(be, d);
}

/* master_join and master_split: master F32 and copy BF16 addressed by the segments' grad
 * ranges, lo U16 by their state ranges. */
static void need_master_operands(mc_backend *be, const char *op, mc_op_kind kind, const mc_tensor *master,
                                 const mc_tensor *copy, const mc_tensor *lo, const mc_adamw_segment *segments,
                                 int nsegments) {
    need_dtype(op, "master", master, MC_F32, "the F32 master");
    need_dtype(op, "copy", copy, MC_BF16, "the master's high halves");
    need_dtype(op, "lo", lo, MC_U16, "the master's low halves");
    need_segment_list(op, segments, nsegments);
    int64_t grad_numel = mc_tensor_numel(master);
    const char *grad_name = "master";
    if (mc_tensor_numel(copy) < grad_numel) {
        grad_numel = mc_tensor_numel(copy);
        grad_name = "copy";
    }
    for (int i = 0; i < nsegments; i++) need_segment(op, &segments[i], i, mc_tensor_numel(lo), "lo", grad_numel, grad_name);
    need_supported(be, op, &(mc_op_sizes){.op = kind, .rows = grad_numel, .cols = 1});
}

void mc_op_master_join(mc_backend *be, mc_tensor *master, const mc_tensor *copy, const mc_tensor *lo,
                       const mc_adamw_segment *segments, int nsegments) {
    need_master_operands(be, "master_join", MC_OP_MASTER_JOIN, master, copy, lo, segments, nsegments);
    be->master_join(be, master->data, copy->data, lo->data, segments, nsegments);
}

void mc_op_master_split(mc_backend *be, mc_tensor *copy, mc_tensor *lo, const mc_tensor *master,
                        const mc_adamw_segment *segments, int nsegments) {
    need_master_operands(be, "master_split", MC_OP_MASTER_SPLIT, master, copy, lo, segments, nsegments);
    be->master_split(be, copy->data, lo->data, master->data, segments, nsegments);
}

double mc_op_sumsq(mc_backend *be, const mc_tensor *x) {
    const char *op = "sumsq";
    need_compute(be, op, "x", x);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_SUMSQ, .rows = mc_tensor_numel(x), .cols = 1});
    return be->sumsq(be, x);
}

void mc_op_sumsq_segments(mc_backend *be, mc_tensor *out, const mc_tensor *buf, const mc_adamw_segment *segments,
                          int nsegments) {
    const char *op = "sumsq_segments";
    need_dtype(op, "buf", buf, MC_F32, "the gradient and state buffers");
    need_dtype(op, "out", out, MC_F64, "a sum in double");
    need_numel(op, "out", out, 1, "one sum");
    need_segment_list(op, segments, nsegments);
    for (int i = 0; i < nsegments; i++) need_segment(op, &segments[i], i, mc_tensor_numel(buf), "buf", -1, NULL);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_SUMSQ_SEGMENTS, .rows = mc_tensor_numel(buf), .cols = 1});
    be->sumsq_segments(be, out->data, buf->data, segments, nsegments);
}

int64_t mc_op_count_zeros(mc_backend *be, const mc_tensor *x) {
    const char *op = "count_zeros";
    need_compute(be, op, "x", x);
    need_supported(be, op, &(mc_op_sizes){.op = MC_OP_COUNT_ZEROS, .rows = mc_tensor_numel(x), .cols = 1});
    return be->count_zeros(be, x);
}
