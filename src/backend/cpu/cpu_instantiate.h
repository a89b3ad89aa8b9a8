/* cpu_instantiate.h: compiles the dtype-generic half of a CPU op file twice, once with
 * REAL = float and once with REAL = double. An op file X.c reads
 *
 *     #ifdef REAL
 *     ... kernels in terms of REAL, named RNAME(foo) (foo_f32 / foo_f64) ...
 *     #else
 *     #include "backend/cpu/cpu_internal.h"
 *     #define MC_CPU_TEMPLATE "backend/cpu/X.c"
 *     #include "backend/cpu/cpu_instantiate.h"
 *     ... checks and MC_CPU_DISPATCH to the kernels ...
 *     #endif
 *
 * Math helpers available to the kernels, matching REAL:
 *   R_EXP   fast exp for float (mc_cpu_expf), libm exp for double (the gradient checks)
 *   R_SQRT, R_LOG, R_FMA, R_FABS, R_ERF   the libm function of REAL's precision
 *   R_IS_F32   1 for float, 0 for double
 * No include guard: included once per op file, and it includes that file twice. */
#ifndef MC_CPU_TEMPLATE
#error "define MC_CPU_TEMPLATE (the including file's path) before including cpu_instantiate.h"
#endif

#define REAL float
#define RNAME(name) name##_f32
#define R_IS_F32 1
#define R_EXP mc_cpu_expf
#define R_SQRT sqrtf
#define R_LOG logf
#define R_FMA fmaf
#define R_FABS fabsf
#define R_ERF erff
#include MC_CPU_TEMPLATE
#undef REAL
#undef RNAME
#undef R_IS_F32
#undef R_EXP
#undef R_SQRT
#undef R_LOG
#undef R_FMA
#undef R_FABS
#undef R_ERF

#define REAL double
#define RNAME(name) name##_f64
#define R_IS_F32 0
#define R_EXP exp
#define R_SQRT sqrt
#define R_LOG log
#define R_FMA fma
#define R_FABS fabs
#define R_ERF erf
#include MC_CPU_TEMPLATE
#undef REAL
#undef RNAME
#undef R_IS_F32
#undef R_EXP
#undef R_SQRT
#undef R_LOG
#undef R_FMA
#undef R_FABS
#undef R_ERF

#undef MC_CPU_TEMPLATE
