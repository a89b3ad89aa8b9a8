/* activation.c: GELU (exact and tanh approximation) and SwiGLU, forward and backward.
 *   exact:   gelu(x) = 0.5 x (1 + erf(x / sqrt 2)), gelu'(x) = 0.5 (1 + erf(x / sqrt 2)) + x phi(x),
 *            phi the standard normal density;
 *   tanh:    gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the
 *            equal x sigmoid(2u) (one exp, no cancellation for small x);
 *            gelu'(x) = s + 2 x s (1 - s) u',  s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 *   swiglu: x [N, 2f] = [gate | up], y = silu(gate) up, silu(a) = a sigmoid(a);
 *           d gate = dy up sigmoid(a) (1 + a (1 - sigmoid(a))), d up = dy silu(a). */
#ifdef REAL

#define GELU_K0 ((REAL)0.7978845608028654) /* sqrt(2/pi) */
#define GELU_K1 ((REAL)0.044715)

static inline REAL RNAME(sigmoid)(REAL z) { return 1 / (1 + R_EXP(-z)); }

static void RNAME(gelu_fwd)(REAL *y, const REAL *x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        REAL v = x[i], u = GELU_K0 * (v + GELU_K1 * v * v * v);
        y[i] = v * RNAME(sigmoid)(2 * u);
    }
}

/* dx may alias dy: each element is read before it is written. */
static void RNAME(gelu_bwd)(REAL *dx, const REAL *dy, const REAL *x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        REAL v = x[i], u = GELU_K0 * (v + GELU_K1 * v * v * v);
        REAL s = RNAME(sigmoid)(2 * u), du = GELU_K0 * (1 + 3 * GELU_K1 * v * v);
        dx[i] = dy[i] * (s + 2 * v * s * (1 - s) * du);
    }
}

static void RNAME(gelu_erf_fwd)(REAL *y, const REAL *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)0.5 * x[i] * (1 + R_ERF(x[i] * (REAL)M_SQRT1_2));
}

static void RNAME(gelu_erf_bwd)(REAL *dx, const REAL *dy, const REAL *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        REAL v = x[i];
        REAL cdf = (REAL)0.5 * (1 + R_ERF(v * (REAL)M_SQRT1_2));
        REAL pdf = (REAL)0.3989422804014327 * R_EXP(-(REAL)0.5 * v * v); /* 1/sqrt(2 pi) */
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

static void RNAME(swiglu_fwd)(REAL *restrict y, const REAL *restrict x, int64_t n, int64_t f) {
#pragma omp parallel for schedule(static) if (n * f > 32768)
    for (int64_t t = 0; t < n; t++) {
        const REAL *gate = x + t * 2 * f, *up = gate + f;
        REAL *yt = y + t * f;
        for (int64_t j = 0; j < f; j++) yt[j] = gate[j] * RNAME(sigmoid)(gate[j]) * up[j];
    }
}

/* dx may alias x (the model writes the fc1 gradient over the saved fc1 output): no restrict
 * on them, and each pair (gate, up) is read before its gradients are written. y (optional)
 * gets the forward's output again, by swiglu_fwd's expression (selective recomputation). */
/* y may alias dy: each element of dy is read before y's is written. */
static void RNAME(swiglu_bwd)(REAL *dx, REAL *y, const REAL *dy, const REAL *x, int64_t n, int64_t f) {
#pragma omp parallel for schedule(static) if (n * f > 32768)
    for (int64_t t = 0; t < n; t++) {
        const REAL *gate = x + t * 2 * f, *up = gate + f, *dyt = dy + t * f;
        REAL *dgate = dx + t * 2 * f, *dup = dgate + f;
        REAL *yt = y ? y + t * f : NULL;
        for (int64_t j = 0; j < f; j++) {
            REAL a = gate[j], u = up[j], s = RNAME(sigmoid)(a), g = dyt[j];
            dgate[j] = g * u * s * (1 + a * (1 - s));
            dup[j] = g * a * s;
            if (yt) yt[j] = a * s * u;
        }
    }
}

#undef GELU_K0
#undef GELU_K1

#else /* the dtype-independent half */

#include "backend/cpu/cpu_internal.h"

#define MC_CPU_TEMPLATE "backend/cpu/activation.c"
#include "backend/cpu/cpu_instantiate.h"

void mc_cpu_gelu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x, bool tanh) {
    (void)be;
    if (tanh)
        MC_CPU_DISPATCH(x->dtype, gelu_fwd, y->data, x->data, mc_tensor_numel(x));
    else
        MC_CPU_DISPATCH(x->dtype, gelu_erf_fwd, y->data, x->data, mc_tensor_numel(x));
}

void mc_cpu_gelu_bwd(mc_backend *be, mc_tensor *dx, const mc_tensor *dy, const mc_tensor *x, bool tanh) {
    (void)be;
    if (tanh)
        MC_CPU_DISPATCH(x->dtype, gelu_bwd, dx->data, dy->data, x->data, mc_tensor_numel(x));
    else
        MC_CPU_DISPATCH(x->dtype, gelu_erf_bwd, dx->data, dy->data, x->data, mc_tensor_numel(x));
}

void mc_cpu_swiglu_fwd(mc_backend *be, mc_tensor *y, const mc_tensor *x) {
    (void)be;
    MC_CPU_DISPATCH(x->dtype, swiglu_fwd, y->data, x->data, mc_cpu_rows(x), mc_cpu_cols(x) / 2);
}

void mc_cpu_swiglu_bwd(mc_backend *be, mc_tensor *dx, mc_tensor *y, const mc_tensor *dy, const mc_tensor *x) {
    (void)be;
    void *yd = mc_tensor_present(y) ? y->data : NULL;
    MC_CPU_DISPATCH(x->dtype, swiglu_bwd, dx->data, yd, dy->data, x->data, mc_cpu_rows(x), mc_cpu_cols(x) / 2);
}

#endif
