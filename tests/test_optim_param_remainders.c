/* test_optim_param_remainders.c: the fp32 master kept as the BF16 parameters plus their
 * 16-bit remainders (store_param_remainders, tensor/backend.h's mc_master_hi):
 *  - master_split then master_join gives every bit pattern back (exact ties, negatives,
 *    the BF16 maximum, infinities, NaNs), and the BF16 half is the master rounded to
 *    nearest with ties away from zero: round-to-nearest-even's value except on exact ties;
 *  - AdamW on the split master is AdamW on an F32 master, bit for bit (sharded segments,
 *    clipping, a skipped step);
 *  - the optimizer over a BF16 model on the CPU (which trains in F32 only: its gradients
 *    here are synthetic, written as a backward would): 2 bytes a parameter less state; the
 *    same master, moments, params norm and checkpoint files as --no-store-param-remainders
 *    when the gradients do not depend on the parameters; the same loss curve within a tight
 *    tolerance when they do (the BF16 copies differ on exact ties); a checkpoint round trip
 *    (async, with params norms between steps) bit for bit; cross loads between the two
 *    forms keeping the master's bits;
 *  - with a GPU, bf16 training through the trainer: the loss curve of
 *    --no-store-param-remainders within a tight tolerance, and a bitwise resume. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/philox.h"
#include "check.h"
#include "fixture_util.h"
#include "ckpt/ckpt.h"
#include "tensor/ops.h"
#include "tiny_llama.h"
#include "train/model_options.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static float float_of(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static bool finite_bits(uint32_t b) { return ((b >> 23) & 0xff) != 0xff; }

/* The value of BF16 bits b, with the one past the largest finite magnitude (exponent all
 * ones, no mantissa) read as 2^128, the next step of the scale. */
static double bf16_value(uint16_t b) {
    if (((b >> 7) & 0xff) == 0xff) return (b >> 15) ? -0x1p128 : 0x1p128;
    return (double)float_of((uint32_t)b << 16);
}

/* A finite F32 rounded to BF16 to nearest, ties away from zero, from the values: the
 * candidates toward zero (the high half) and away from it (the next bit pattern). */
static uint16_t ties_away(uint32_t bits) {
    uint16_t down = (uint16_t)(bits >> 16), up = (uint16_t)(down + 1);
    double x = (double)float_of(bits);
    return fabs(x - bf16_value(down)) < fabs(bf16_value(up) - x) ? down : up;
}

/* ================================================================ the ops */

static void test_split_join_bits(void) {
    enum { NG = 80000, NS = 70000 };
    static const mc_adamw_segment segs[] = {{.offset = 0, .count = 30000, .grad_offset = 5000},
                                            {.offset = 30000, .count = 0, .grad_offset = 40000},
                                            {.offset = 30001, .count = 39999, .grad_offset = 40001}};
    static const uint32_t special[] = {
        0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7e8000u, 0x00008000u, 0x80008000u, 0x3f808000u,
        0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f807fffu, 0x3f808001u, 0x00000000u, 0x80000000u, 0x00000001u,
        0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu, 0x7f808000u, 0xffff8000u, 0x0000ffffu};
    mc_backend *be = mc_backend_cpu_create();
    uint32_t *master = calloc(NG, 4), *back = calloc(NG, 4);
    uint16_t *copy = calloc(NG, 2), *lo = calloc(NS, 2);
    bool *in_seg = calloc(NG, 1);
    for (int s = 0; s < 3; s++)
        for (int64_t j = 0; j < segs[s].count; j++) in_seg[segs[s].grad_offset + j] = true;
    int64_t k = 0;
    for (int64_t i = 0; i < NG; i++) {
        uint32_t b = rnd32();
        if (in_seg[i] && k < (int64_t)(sizeof special / sizeof special[0])) b = special[k++];
        else if (i % 7 == 0) b = (b & 0xffff0000u) | 0x8000u; /* an exact tie */
        else if (i % 11 == 0) b = (b & 0xffff0000u) | (i % 2 ? 0x7fffu : 0x8001u);
        else if (i % 13 == 0) b = (b & 0x807f0000u) | 0x7f000000u | (b & 0xffffu); /* near the top of the range */
        master[i] = b;
        copy[i] = 0xabcd;
        back[i] = 0x7fbadbadu;
    }
    for (int64_t i = 0; i < NS; i++) lo[i] = 0xabcd;
    mc_tensor M = mc_tensor_1d(master, MC_F32, NG), C = mc_tensor_1d(copy, MC_BF16, NG), L = mc_tensor_1d(lo, MC_U16, NS);
    mc_tensor B = mc_tensor_1d(back, MC_F32, NG);
    mc_op_master_split(be, &C, &L, &M, segs, 3);
    mc_op_master_join(be, &B, &C, &L, segs, 3);
    int64_t lost = 0, untouched_bad = 0, not_ties_away = 0, rne_differs = 0, even_ties = 0, odd_ties = 0;
    for (int64_t i = 0; i < NG; i++) {
        if (!in_seg[i]) {
            untouched_bad += copy[i] != 0xabcd || back[i] != 0x7fbadbadu;
            continue;
        }
        uint32_t b = master[i];
        lost += back[i] != b;
        if (!finite_bits(b)) continue;
        not_ties_away += copy[i] != ties_away(b);
        bool tie = (b & 0xffffu) == 0x8000u, even = ((b >> 16) & 1u) == 0;
        bool differs = copy[i] != mc_f32_to_bf16(float_of(b));
        even_ties += tie && even;
        odd_ties += tie && !even;
        /* round-to-nearest-even's value, but on a tie toward an even high half */
        rne_differs += differs != (tie && even);
    }
    int64_t lo_bad = lo[30000] != 0xabcd; /* the state element between the segments */
    printf("   %lld exact ties (%lld with an even high half, where round-to-nearest-even differs)\n",
           (long long)(even_ties + odd_ties), (long long)even_ties);
    CHECK(k == (int64_t)(sizeof special / sizeof special[0]), "special patterns used: %lld", (long long)k);
    CHECK(lost == 0, "%lld masters not joined back bit for bit", (long long)lost);
    CHECK(untouched_bad == 0 && lo_bad == 0, "%lld elements outside the segments written", (long long)(untouched_bad + lo_bad));
    CHECK(not_ties_away == 0, "%lld BF16 halves are not the ties-away rounding", (long long)not_ties_away);
    CHECK(rne_differs == 0, "%lld BF16 halves differ from round-to-nearest-even other than on even ties",
          (long long)rne_differs);
    CHECK(even_ties > 100 && odd_ties > 100, "ties covered: %lld even, %lld odd", (long long)even_ties, (long long)odd_ties);
    /* the shared definitions themselves, on the extremes */
    CHECK(mc_master_hi(0x7f7fffffu) == 0x7f80 && mc_master_join(0x7f80, 0xffff) == 0x7f7fffffu, "FLT_MAX");
    CHECK(mc_master_hi(0xffffffffu) == 0x0000 && mc_master_join(0x0000, 0xffff) == 0xffffffffu, "the wrap");
    free(master), free(back), free(copy), free(lo), free(in_seg);
    be->destroy(be);
}

/* After AdamW on both forms: the split master joins to the F32 master, its BF16 half is
 * that master's ties-away rounding, and the round-to-nearest-even copy differs from it
 * exactly on the ties with an even high half; elements outside the segments untouched.
 * Returns the number of those ties. */
static int64_t check_split_state(const float *p, const uint16_t *lo, const uint16_t *copy_split,
                                 const uint16_t *copy_rne, const int64_t *state_of, int64_t n, int64_t step) {
    int64_t master_bad = 0, copy_bad = 0, rne_bad = 0, even_ties = 0, untouched_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = state_of[i];
        if (s < 0) {
            untouched_bad += copy_split[i] != 0x1234;
            continue;
        }
        uint32_t want = bits_of(p[s]);
        bool even_tie = (want & 0xffffu) == 0x8000u && ((want >> 16) & 1u) == 0;
        master_bad += mc_master_join(copy_split[i], lo[s]) != want;
        copy_bad += copy_split[i] != mc_master_hi(want);
        rne_bad += (copy_split[i] != copy_rne[i]) != even_tie;
        even_ties += even_tie;
    }
    CHECK(master_bad == 0, "step %lld: %lld split masters differ from the F32 master", (long long)step, (long long)master_bad);
    CHECK(copy_bad == 0, "step %lld: %lld BF16 halves wrong", (long long)step, (long long)copy_bad);
    CHECK(rne_bad == 0, "step %lld: %lld BF16 halves differ from round-to-nearest-even other than on even ties",
          (long long)step, (long long)rne_bad);
    CHECK(untouched_bad == 0, "step %lld: %lld copy elements outside the segments written", (long long)step,
          (long long)untouched_bad);
    return even_ties;
}

/* AdamW over sharded segments (state offsets differ from grad offsets), as the F32 master
 * with a round-to-nearest-even BF16 copy and as the split master: the same master bits.
 * Every fifth master starts on a tie; step 1 leaves those of the segment without weight
 * decay where they are (zero gradients), so that the copies differ there. */
static void test_adamw_split_matches_f32_master(void) {
    enum { N = 12000, NS = 10000 };
    static const mc_adamw_segment segs[] = {
        {.offset = 0, .count = 100, .grad_offset = 2000, .weight_decay = 0.1f},
        {.offset = 100, .count = 4900, .grad_offset = 2101, .weight_decay = 0.0f}, /* state [5000, 5001) untouched */
        {.offset = 5001, .count = 3, .grad_offset = 7001, .weight_decay = 0.1f},
        {.offset = 6000, .count = 4000, .grad_offset = 8000, .weight_decay = 0.05f}};
    mc_backend *be = mc_backend_cpu_create();
    float *p = calloc(NS, 4), *m1 = calloc(NS, 4), *v1 = calloc(NS, 4), *m2 = calloc(NS, 4), *v2 = calloc(NS, 4);
    float *g = calloc(N, 4);
    uint16_t *copy_rne = calloc(N, 2), *copy_split = calloc(N, 2), *lo = calloc(NS, 2);
    int64_t *state_of = malloc(sizeof(int64_t) * N);
    for (int64_t i = 0; i < N; i++) state_of[i] = -1, copy_rne[i] = copy_split[i] = 0x1234;
    for (int s = 0; s < 4; s++)
        for (int64_t j = 0; j < segs[s].count; j++) state_of[segs[s].grad_offset + j] = segs[s].offset + j;
    for (int64_t i = 0; i < NS; i++) {
        uint32_t b = bits_of((float)mc_philox_normal(7, 1, (uint64_t)i));
        if (i % 5 == 0) b = (b & 0xffff0000u) | 0x8000u;
        p[i] = float_of(b);
        lo[i] = (uint16_t)b;
    }
    for (int64_t i = 0; i < N; i++)
        if (state_of[i] >= 0) copy_split[i] = mc_master_hi(bits_of(p[state_of[i]]));
    double sumsq = 0;
    for (int64_t step = 1; step <= 5; step++) {
        for (int64_t i = 0; i < N; i++)
            g[i] = step == 1 && state_of[i] % 5 == 0 ? 0.0f : (float)mc_philox_normal(7, 10 + (uint64_t)step, (uint64_t)i);
        mc_adamw_desc d = {.param = p, .grad = g, .exp_avg = m1, .exp_avg_sq = v1,
                           .param_copy = mc_tensor_1d(copy_rne, MC_BF16, N), .segments = segs, .nsegments = 4,
                           .lr = 1e-3f * (float)step, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f,
                           .step = step, .state_numel = NS, .grad_numel = N};
        if (step >= 3) { /* 3: clipped on the device; 5: an infinite norm, nothing written */
            sumsq = step == 5 ? INFINITY : 400.0;
            d.grad_sumsq = &sumsq, d.loss_scale = 2.0, d.clip_grad = 1.0;
        }
        mc_op_adamw(be, &d);
        d.param = NULL, d.param_lo = lo, d.exp_avg = m2, d.exp_avg_sq = v2;
        d.param_copy = mc_tensor_1d(copy_split, MC_BF16, N);
        mc_op_adamw(be, &d);
        int64_t ties = check_split_state(p, lo, copy_split, copy_rne, state_of, N, step);
        if (step == 1) printf("   after step 1 the BF16 copies differ on %lld ties\n", (long long)ties);
        if (step == 1) CHECK(ties > 100, "only %lld ties left after step 1", (long long)ties);
    }
    CHECK(memcmp(m1, m2, NS * 4) == 0 && memcmp(v1, v2, NS * 4) == 0, "the moments differ");
    free(p), free(m1), free(v1), free(m2), free(v2), free(g), free(copy_rne), free(copy_split), free(lo), free(state_of);
    be->destroy(be);
}

/* ============================================ the optimizer over a BF16 model on the CPU */

/* A model with BF16 parameters and its optimizer, stepped on synthetic gradients. */
typedef struct rig {
    mc_config cfg;
    mc_comm comm;
    mc_backend *be;
    mc_model m;
    mc_optimizer o;
    mc_lr_schedule sched;
    float *grad;     /* host [numel] */
    uint16_t *param; /* host [numel] */
    bool ok;
} rig;

static void rig_init(rig *r, mc_dtype pdt, bool remainders) {
    memset(r, 0, sizeof *r);
    mc_err err;
    tiny_llama_base(&r->cfg);
    r->cfg.model.seq_length = 16;
    r->cfg.train.micro_batch_size = 1;
    r->cfg.train.train_iters = 100;
    r->cfg.train.device = MC_DEVICE_CPU_ONLY;
    r->cfg.optim.store_param_remainders = remainders;
    r->ok = mc_config_validate(&r->cfg, 1, &err) == MC_OK && mc_comm_init(&r->comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK;
    CHECK(r->ok, "%s", err.msg);
    if (!r->ok) return;
    r->be = mc_backend_cpu_create();
    mc_model_options mo = mc_model_options_from_config(&r->cfg, 1, pdt, MC_F32, MC_F32, 1, NULL);
    mo.keep_activations_apart = true; /* rig_step writes the gradients as no pass would: all after the reset */
    r->ok = mc_model_create(&r->m, &mo, r->be, &r->comm, &err) == MC_OK;
    CHECK(r->ok, "%s", err.msg);
    if (!r->ok) return;
    mc_model_init_params(&r->m, r->cfg.train.seed);
    r->ok = mc_optimizer_create(&r->o, &r->m, &r->cfg, &err) == MC_OK;
    CHECK(r->ok, "%s", err.msg);
    mc_lr_schedule_init(&r->sched, &r->cfg);
    r->grad = calloc((size_t)r->m.numel, sizeof(float));
    r->param = calloc((size_t)r->m.numel, sizeof(uint16_t));
}

static void rig_free(rig *r) {
    if (r->o.be) mc_optimizer_free(&r->o);
    if (r->m.be) mc_model_free(&r->m);
    if (r->be) r->be->destroy(r->be);
    if (r->comm.world_size) mc_comm_free(&r->comm);
    mc_config_free(&r->cfg);
    free(r->grad);
    free(r->param);
}

/* The target each parameter is pulled to (with feedback). */
static float target(int64_t i) { return (float)(0.05 * mc_philox_normal(99, 2, (uint64_t)i)); }

/* One step. The gradients, with `feedback` those of 0.5 |w - target|^2 at the BF16
 * parameters w, else independent of them, go in as a backward writes them: overwriting
 * the grad_overwritten parameters after a reset, adding to the others. Returns the loss at
 * w. */
static double rig_step(rig *r, int step, bool feedback) {
    mc_model *m = &r->m;
    mc_backend *be = r->be;
    be->copy_d2h(be, r->param, m->param_buf, (size_t)m->numel * 2);
    be->copy_d2h(be, r->grad, m->grad_buf, (size_t)m->numel * 4);
    double loss = 0;
    for (int k = 0; k < m->nparams; k++) {
        const mc_param *p = &m->params[k];
        bool overwrite = p->grad_overwritten && m->grads_reset;
        for (int64_t i = p->offset; i < p->offset + p->numel; i++) {
            float w = mc_bf16_to_f32(r->param[i]), d = w - target(i);
            float g = feedback ? d : (float)(0.01 * mc_philox_normal(99, 100 + (uint64_t)step, (uint64_t)i));
            r->grad[i] = overwrite ? g : r->grad[i] + g;
            loss += 0.5 * (double)d * d;
        }
    }
    be->copy_h2d(be, m->grad_buf, r->grad, (size_t)m->numel * 4);
    m->grads_reset = false;
    m->grads_held = true;
    mc_optimizer_step(&r->o, 1e-3, 0.1, 1.0);
    double norm;
    CHECK(mc_optimizer_finish_step(&r->o, &norm), "step %d skipped", step);
    return loss;
}

/* This rank's F32 master, the moments and the BF16 parameters, as bytes. */
typedef struct snapshot {
    float *master, *exp_avg, *exp_avg_sq;
    uint16_t *param;
} snapshot;

static snapshot take(rig *r) {
    mc_optimizer *o = &r->o;
    mc_backend *be = r->be;
    size_t n = (size_t)o->state_numel;
    snapshot s = {malloc(n * 4), malloc(n * 4), malloc(n * 4), malloc((size_t)r->m.numel * 2)};
    mc_optimizer_master_join(o);
    for (int k = 0; k < o->nsegments; k++)
        be->copy_d2h(be, s.master + o->segments[k].offset, mc_optimizer_master_of(o, k), (size_t)o->segments[k].count * 4);
    mc_optimizer_master_release(o);
    be->copy_d2h(be, s.exp_avg, o->exp_avg, n * 4);
    be->copy_d2h(be, s.exp_avg_sq, o->exp_avg_sq, n * 4);
    be->copy_d2h(be, s.param, r->m.param_buf, (size_t)r->m.numel * 2);
    return s;
}

static void snapshot_free(snapshot *s) { free(s->master), free(s->exp_avg), free(s->exp_avg_sq), free(s->param); }

/* Masters and moments bit for bit. */
static void same_state(const snapshot *a, const snapshot *b, int64_t n, const char *what) {
    int64_t master = 0, moments = 0;
    for (int64_t i = 0; i < n; i++) {
        master += bits_of(a->master[i]) != bits_of(b->master[i]);
        moments += bits_of(a->exp_avg[i]) != bits_of(b->exp_avg[i]) || bits_of(a->exp_avg_sq[i]) != bits_of(b->exp_avg_sq[i]);
    }
    CHECK(master == 0 && moments == 0, "%s: %lld masters and %lld moments differ", what, (long long)master, (long long)moments);
}

/* Every parameter element of s is its master rounded as `split` says: ties away (the split
 * form) or to nearest even (an F32 master's copy). */
static int64_t misrounded(const rig *r, const snapshot *s, bool split) {
    const mc_optimizer *o = &r->o;
    int64_t bad = 0;
    for (int k = 0; k < o->nsegments; k++)
        for (int64_t j = 0; j < o->segments[k].count; j++) {
            float w = s->master[o->segments[k].offset + j];
            uint16_t want = split ? mc_master_hi(bits_of(w)) : mc_f32_to_bf16(w);
            bad += s->param[o->segments[k].grad_offset + j] != want;
        }
    return bad;
}

static void test_state_bytes(void) {
    rig split, f32m, f32, f16;
    rig_init(&split, MC_BF16, true);
    rig_init(&f32m, MC_BF16, false);
    rig_init(&f32, MC_F32, true);
    rig_init(&f16, MC_F16, true);
    if (split.ok && f32m.ok && f32.ok && f16.ok) {
        size_t n = (size_t)split.o.state_numel, bs = mc_optimizer_state_bytes(&split.o),
               bm = mc_optimizer_state_bytes(&f32m.o);
        printf("   %zu parameters: %zu bytes of state split, %zu with an F32 master\n", n, bs, bm);
        CHECK(split.o.split_master && !f32m.o.split_master && !f32.o.split_master && !f16.o.split_master);
        CHECK(bs == 10 * n && bm == 12 * n && bm - bs == 2 * n, "split %zu, F32 master %zu, for %zu", bs, bm, n);
        CHECK(mc_optimizer_state_bytes(&f32.o) == 8 * n, "F32 parameters: %zu", mc_optimizer_state_bytes(&f32.o));
        CHECK(mc_optimizer_state_bytes(&f16.o) == 12 * n, "F16 parameters: %zu", mc_optimizer_state_bytes(&f16.o));
        size_t allocated, peak, reserved;
        split.be->memory_stats(split.be, &allocated, &peak, &reserved);
        size_t a2;
        f32m.be->memory_stats(f32m.be, &a2, &peak, &reserved);
        CHECK(a2 - allocated == 2 * n, "the backend's allocated bytes differ by %zu, not %zu", a2 - allocated, 2 * n);
    }
    rig_free(&split), rig_free(&f32m), rig_free(&f32), rig_free(&f16);
}

/* Gradients that do not depend on the parameters: the split master is the F32 master's, bit
 * for bit, and so is the params norm; the gradient buffer lent to the norm is zero again. */
static void test_same_master_as_f32(void) {
    rig a, b;
    rig_init(&a, MC_BF16, true);
    rig_init(&b, MC_BF16, false);
    if (a.ok && b.ok) {
        for (int step = 1; step <= 12; step++) rig_step(&a, step, false), rig_step(&b, step, false);
        double na = mc_optimizer_params_norm(&a.o), nb = mc_optimizer_params_norm(&b.o);
        CHECK(memcmp(&na, &nb, sizeof na) == 0, "params norm %.17g split, %.17g with an F32 master", na, nb);
        float *g = a.grad;
        a.be->copy_d2h(a.be, g, a.m.grad_buf, (size_t)a.m.numel * 4);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < a.m.numel; i++) nonzero += g[i] != 0;
        CHECK(nonzero == 0, "%lld gradient elements left nonzero by the params norm", (long long)nonzero);
        snapshot sa = take(&a), sb = take(&b);
        same_state(&sa, &sb, a.o.state_numel, "split vs F32 master");
        CHECK(misrounded(&a, &sa, true) == 0 && misrounded(&b, &sb, false) == 0, "BF16 copies misrounded");
        snapshot_free(&sa), snapshot_free(&sb);
    }
    rig_free(&a), rig_free(&b);
}

/* Gradients at the BF16 parameters, as training's: the two forms see different BF16 copies
 * where a master lies exactly halfway between two BF16 values with an even high half (one
 * element update in 2^17 or so), so their masters drift apart there, and the losses stay
 * within a tight tolerance of each other. (A split master that lost its remainders would
 * train as pure BF16, whose updates below half a BF16 step vanish.) */
static void test_training_tracks_f32_master(void) {
    enum { STEPS = 40 };
    rig a, b;
    rig_init(&a, MC_BF16, true);
    rig_init(&b, MC_BF16, false);
    if (a.ok && b.ok) {
        double worst = 0, la = 0, lb = 0, first = 0;
        for (int step = 1; step <= STEPS; step++) {
            la = rig_step(&a, step, true), lb = rig_step(&b, step, true);
            if (step == 1) first = la;
            double rel = fabs(la - lb) / lb;
            if (rel > worst) worst = rel;
        }
        snapshot sa = take(&a), sb = take(&b);
        int64_t differ = 0;
        for (int64_t i = 0; i < a.o.state_numel; i++) differ += bits_of(sa.master[i]) != bits_of(sb.master[i]);
        printf("   loss %.6f -> %.6f; worst relative difference %.2e; %lld of %lld masters differ\n", first, la, worst,
               (long long)differ, (long long)a.o.state_numel);
        CHECK(la < 0.9 * first, "the loss did not go down: %.6f -> %.6f", first, la);
        CHECK(worst < 1e-6, "the losses differ by %.3e", worst);
        CHECK(differ < a.o.state_numel / 100, "%lld masters differ", (long long)differ);
        CHECK(misrounded(&a, &sa, true) == 0 && misrounded(&b, &sb, false) == 0, "BF16 copies misrounded");
        snapshot_free(&sa), snapshot_free(&sb);
    }
    rig_free(&a), rig_free(&b);
}

static int save_at(rig *r, const char *dir, int64_t iteration, bool async, mc_err *err) {
    mc_ckpt_state st = {.model = &r->m, .opt = &r->o, .sched = &r->sched, .comm = &r->comm, .cfg = &r->cfg};
    mc_ckpt_save_opts so = {.dir = dir, .save_optim = true, .save_rng = true, .async = async};
    mc_ckpt_saver *saver = mc_ckpt_saver_create(&st, &so, err);
    if (!saver) return MC_ERR;
    mc_ckpt_progress pr = {.iteration = iteration, .sched_samples = iteration, .optimizer_step = r->o.step,
                           .rng_seed = r->cfg.train.seed};
    mc_loss_scaler_init_constant(&pr.scaler, 1.0);
    int rc = mc_ckpt_save(saver, &pr, err);
    if (rc == MC_OK && async) { /* training goes on while the writer writes */
        rig_step(r, (int)iteration + 1, true);
        rc = mc_ckpt_saver_wait(saver, NULL, err);
    }
    mc_ckpt_saver_free(saver);
    return rc;
}

static int load_from(rig *r, const char *dir, mc_err *err) {
    mc_ckpt_state st = {.model = &r->m, .opt = &r->o, .sched = &r->sched, .comm = &r->comm, .cfg = &r->cfg};
    mc_ckpt_load_opts lo = {.dir = dir, .step = -1, .load_optim = true, .load_rng = true, .flag = "--load"};
    mc_ckpt_progress pr;
    bool loaded = false;
    int rc = mc_ckpt_load(&st, &lo, &pr, &loaded, err);
    if (rc == MC_OK && !loaded) rc = mc_err_set(err, "%s: no checkpoint", dir);
    if (rc == MC_OK) r->o.step = pr.optimizer_step;
    return rc;
}

/* A directory from fu_tmpdir, removed with its files. */
static void remove_dir(char *d) {
    fu_rmtree(d);
    free(d);
}

/* Split: straight, straight with an async save at 6 (its step 7 running while the writer
 * writes) and a params norm after every step, and resumed from that save: all three alike
 * at step 12, bit for bit. */
static void test_checkpoint_round_trip(void) {
    enum { AT = 6, END = 12 };
    char *dir = fu_tmpdir("param-remainders");
    rig a, c, b;
    rig_init(&a, MC_BF16, true);
    rig_init(&c, MC_BF16, true);
    mc_err err;
    if (a.ok && c.ok) {
        for (int step = 1; step <= END; step++) {
            rig_step(&c, step, true);
            if (step <= AT) rig_step(&a, step, true);
            if (step <= AT) (void)mc_optimizer_params_norm(&a.o);
        }
        CHECK(save_at(&a, dir, AT, true, &err) == MC_OK, "%s", err.msg); /* runs step AT + 1 */
        for (int step = AT + 2; step <= END; step++) rig_step(&a, step, true), (void)mc_optimizer_params_norm(&a.o);
        rig_init(&b, MC_BF16, true);
        if (b.ok && load_from(&b, dir, &err) == MC_OK) {
            for (int step = AT + 1; step <= END; step++) rig_step(&b, step, true);
            snapshot sa = take(&a), sb = take(&b), sc = take(&c);
            same_state(&sa, &sc, a.o.state_numel, "straight with a save vs straight");
            same_state(&sb, &sc, a.o.state_numel, "resumed vs straight");
            CHECK(memcmp(sa.param, sc.param, (size_t)a.m.numel * 2) == 0 &&
                      memcmp(sb.param, sc.param, (size_t)a.m.numel * 2) == 0,
                  "the BF16 parameters differ");
            snapshot_free(&sa), snapshot_free(&sb), snapshot_free(&sc);
        } else {
            CHECK(b.ok == false, "%s", err.msg);
        }
        rig_free(&b);
    }
    rig_free(&a), rig_free(&c);
    remove_dir(dir);
}

/* Reads a checkpoint's data file (rank 0 of 1). */
static char *rank_file(const char *dir, int64_t iteration, size_t *n) {
    char path[512], it[32];
    mc_ckpt_iter_name(iteration, it);
    snprintf(path, sizeof path, "%s/%s/rank-00000-of-00001.safetensors", dir, it);
    char *data = NULL;
    mc_err err;
    CHECK(mc_read_file(path, &data, n, &err) == MC_OK, "%s", err.msg);
    return data;
}

/* Moves every 97th master onto a tie with an even high half (where the two forms' BF16
 * copies differ), in either form's own layout. */
static void plant_ties(rig *r) {
    mc_optimizer *o = &r->o;
    snapshot s = take(r);
    for (int k = 0; k < o->nsegments; k++)
        for (int64_t j = 0; j < o->segments[k].count; j++) {
            int64_t i = o->segments[k].offset + j, gi = o->segments[k].grad_offset + j;
            if (i % 97) continue;
            uint32_t b = (bits_of(s.master[i]) & 0xfffe0000u) | 0x8000u;
            s.master[i] = float_of(b);
            s.param[gi] = o->split_master ? mc_master_hi(b) : mc_f32_to_bf16(float_of(b));
            if (o->split_master) r->be->copy_h2d(r->be, o->param_lo + i, &(uint16_t){(uint16_t)b}, 2);
        }
    if (!o->split_master) r->be->copy_h2d(r->be, o->master, s.master, (size_t)o->state_numel * 4);
    r->be->copy_h2d(r->be, r->m.param_buf, s.param, (size_t)r->m.numel * 2);
    snapshot_free(&s);
}

/* The same state saved from either form makes the same file, byte for byte (the format is
 * the F32 master's), and each form loads the other's checkpoint with the master's bits,
 * its BF16 copy rounded its own way (masters on ties planted where the two differ). */
static void test_cross_load(void) {
    enum { AT = 5 };
    char *dir_s = fu_tmpdir("param-remainders"), *dir_f = fu_tmpdir("param-remainders");
    rig s, f;
    rig_init(&s, MC_BF16, true);
    rig_init(&f, MC_BF16, false);
    mc_err err;
    if (s.ok && f.ok) {
        for (int step = 1; step <= AT; step++) rig_step(&s, step, false), rig_step(&f, step, false);
        plant_ties(&s), plant_ties(&f);
        CHECK(save_at(&s, dir_s, AT, false, &err) == MC_OK, "%s", err.msg);
        CHECK(save_at(&f, dir_f, AT, false, &err) == MC_OK, "%s", err.msg);
        size_t ns = 0, nf = 0;
        char *bs = rank_file(dir_s, AT, &ns), *bf = rank_file(dir_f, AT, &nf);
        CHECK(bs && bf && ns == nf && memcmp(bs, bf, ns) == 0, "the two forms saved different files (%zu, %zu bytes)", ns,
              nf);
        free(bs), free(bf);
        snapshot ss = take(&s);
        rig fs, sf; /* an F32 master from the split form's checkpoint, and the reverse */
        rig_init(&fs, MC_BF16, false);
        rig_init(&sf, MC_BF16, true);
        if (fs.ok && sf.ok) {
            CHECK(load_from(&fs, dir_s, &err) == MC_OK, "%s", err.msg);
            CHECK(load_from(&sf, dir_f, &err) == MC_OK, "%s", err.msg);
            snapshot a = take(&fs), b = take(&sf);
            same_state(&a, &ss, s.o.state_numel, "F32 master loaded from the split form");
            same_state(&b, &ss, s.o.state_numel, "split form loaded from an F32 master");
            CHECK(misrounded(&fs, &a, false) == 0 && misrounded(&sf, &b, true) == 0, "loaded BF16 copies misrounded");
            snapshot_free(&a), snapshot_free(&b);
        }
        rig_free(&fs), rig_free(&sf);
        snapshot_free(&ss);
    }
    rig_free(&s), rig_free(&f);
    remove_dir(dir_s), remove_dir(dir_f);
}

/* ================================================= bf16 training through the trainer (GPU) */

static void gpu_llama(mc_config *c, bool remainders) {
    tiny_llama_base(c);
    c->model.seq_length = 64;
    c->model.attention_dropout = c->model.hidden_dropout = 0.0f;
    c->train.micro_batch_size = 4;
    c->train.global_batch_size = 8;
    c->train.device = MC_DEVICE_CUDA_ONLY;
    c->train.deterministic_mode = true;
    c->precision.bf16 = true;
    c->optim.min_lr = 3e-4;
    c->optim.lr_warmup_iters = 5;
    c->optim.adam_beta2 = 0.95f;
    c->optim.store_param_remainders = remainders;
}

/* Runs iterations [first, last) of a trainer made from c, into losses and norms. */
static bool run_steps(mc_trainer *t, int first, int last, double *losses, double *norms) {
    mc_err err;
    for (int i = first; i < last; i++) {
        mc_step_stats st;
        if (mc_trainer_step(t, &st, &err) != MC_OK) {
            CHECK(0, "step %d: %s", i + 1, err.msg);
            return false;
        }
        losses[i] = st.lm_loss, norms[i] = st.grad_norm;
    }
    return true;
}

static bool train_gpu(mc_config *c, int steps, double *losses, double *norms) {
    mc_err err;
    c->train.train_iters = steps;
    mc_trainer *t = mc_trainer_create(c, &err);
    CHECK(t, "%s", t ? "" : err.msg);
    if (!t) return false;
    bool ok = run_steps(t, 0, steps, losses, norms);
    mc_trainer_free(t);
    return ok;
}

static void test_cuda_bf16_tracks_f32_master(void) {
    enum { STEPS = 40 };
    double la[STEPS], na[STEPS], lb[STEPS], nb[STEPS];
    mc_config a, b;
    gpu_llama(&a, true);
    gpu_llama(&b, false);
    if (!train_gpu(&a, STEPS, la, na) || !train_gpu(&b, STEPS, lb, nb)) return;
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs(la[i] - lb[i]) / lb[i]);
    printf("   loss %.4f -> %.4f split, %.4f -> %.4f F32 master; worst relative difference %.2e\n", la[0],
           la[STEPS - 1], lb[0], lb[STEPS - 1], worst);
    CHECK(memcmp(&la[0], &lb[0], sizeof la[0]) == 0, "the first losses differ: %.17g vs %.17g", la[0], lb[0]);
    CHECK(worst < 5e-3, "the losses differ by %.3e", worst);
    mc_config_free(&a), mc_config_free(&b);
}

/* Split: 20 iterations straight, and 10, a save (async too), a load, 10 more: the same
 * losses and grad norms bit for bit. */
static void resume_bitwise(bool async) {
    enum { STEPS = 20, AT = 10 };
    double l1[STEPS], n1[STEPS], l2[STEPS], n2[STEPS];
    mc_config c;
    gpu_llama(&c, true);
    if (!train_gpu(&c, STEPS, l1, n1)) return;
    char *dir = fu_tmpdir("param-remainders");
    mc_err err;
    c.ckpt.save = dir;
    c.ckpt.async_save = async;
    c.train.train_iters = STEPS;
    mc_trainer *t = mc_trainer_create(&c, &err);
    CHECK(t, "%s", t ? "" : err.msg);
    bool ok = t && run_steps(t, 0, AT, l2, n2);
    if (ok) CHECK(mc_trainer_save_checkpoint(t, &err) == MC_OK, "%s", err.msg);
    mc_trainer_free(t);
    c.ckpt.load = dir;
    t = ok ? mc_trainer_create(&c, &err) : NULL;
    CHECK(!ok || t, "%s", t ? "" : err.msg);
    if (t && run_steps(t, AT, STEPS, l2, n2))
        for (int i = 0; i < STEPS; i++)
            CHECK(memcmp(&l1[i], &l2[i], sizeof l1[i]) == 0 && memcmp(&n1[i], &n2[i], sizeof n1[i]) == 0,
                  "iteration %d: loss %.17g vs %.17g, grad norm %.17g vs %.17g", i + 1, l1[i], l2[i], n1[i], n2[i]);
    mc_trainer_free(t);
    c.ckpt.save = c.ckpt.load = NULL;
    mc_config_free(&c);
    remove_dir(dir);
}

static void test_cuda_bf16_resume_bitwise(void) { resume_bitwise(false); }
static void test_cuda_bf16_async_resume_bitwise(void) { resume_bitwise(true); }

int main(int argc, char **argv) {
    check_init(argc, argv, mc_backend_cuda_available());
    RUN(test_split_join_bits);
    RUN(test_adamw_split_matches_f32_master);
    RUN(test_state_bytes);
    RUN(test_same_master_as_f32);
    RUN(test_training_tracks_f32_master);
    RUN(test_checkpoint_round_trip);
    RUN(test_cross_load);
    RUN_GPU(test_cuda_bf16_tracks_f32_master);
    RUN_GPU(test_cuda_bf16_resume_bitwise);
    RUN_GPU(test_cuda_bf16_async_resume_bitwise);
    return check_summary();
}
