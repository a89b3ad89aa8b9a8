/* Training-level checks through the public API:
 *  - two runs with the same seed give bitwise-identical losses and grad norms (CPU; and
 *    CUDA in bf16 and in fp16 when a GPU is present);
 *  - bf16 and fp16 (loss-scaled) training on the GPU track the fp32 CPU loss curve of the
 *    tiny Llama model (the golden fixture's shape) within 2% (0.02 nats below a loss of 1)
 *    at every step while it learns, and end as low;
 *  - the same for a tiny GPT-2-style model (biases, tanh GELU), whose CUDA runs take the
 *    cuBLASLt GELU and bias-gradient epilogues. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "megatron.h"
#include "tiny_llama.h"
#include "train_run.h"
#include "tensor/backend.h"

#define STEPS_CURVE 200
#define STEPS_REPEAT 20
/* The curves are compared step by step until the fp32 loss first falls below CURVE_FLOOR:
 * after that the models have memorized their few batches and the loss jumps between ~1e-3
 * and ~0.06 from step to step (its relative gaps mean nothing); there both runs must only be
 * as low, their mean over the last CURVE_TAIL steps below CURVE_END. */
#define CURVE_FLOOR 0.1
#define CURVE_MIN_STEPS 15
#define CURVE_TAIL 20
#define CURVE_END 0.05

static void tiny_llama(mc_config *c) {
    tiny_llama_base(c);
    c->model.seq_length = 64;
    c->model.attention_dropout = 0.0f;
    c->model.hidden_dropout = 0.0f;
    c->train.micro_batch_size = 4;
    c->train.global_batch_size = 8;
    c->optim.min_lr = 3e-4;
    c->optim.lr_warmup_iters = 10;
    c->optim.adam_beta2 = 0.95f;
}

/* The same size GPT-2 style: LayerNorm, learned positions, biases, tied head, the tanh
 * GELU (fused with fc1 in linear_gelu_fwd / linear_dgelu_bwd) with ffn 128, a multiple of
 * 8, as cuBLASLt's GELU epilogues need. */
static void tiny_gpt2(mc_config *c) {
    tiny_llama(c);
    c->model.group_query_attention = false;
    c->model.normalization = MC_NORM_LAYERNORM;
    c->model.position_embedding_type = MC_POS_LEARNED_ABSOLUTE;
    c->model.swiglu = false;
    c->model.openai_gelu = true;
    c->model.ffn_hidden_size = 128;
    c->model.add_bias_linear = true;
    c->model.untie_embeddings_and_output_weights = false;
}

/* tiny_llama with an exact-GELU MLP (Megatron's default activation): its activation is
 * kept, or recomputed by a pass of its own under --recompute-granularity selective. */
static void tiny_llama_gelu(mc_config *c) {
    tiny_llama(c);
    c->model.swiglu = false;
}

typedef void (*model_fn)(mc_config *c);

typedef enum { FP32, BF16, FP16 } precision;

/* fp16 starts from a loss scale of 2^12 (from Megatron's default 2^32 the first several
 * steps would overflow and be skipped while the scale comes down; the curves would then be
 * steps apart) and doubles it every 50 clean steps,
 * so the curve also runs through scale changes; with the loss seed at scale / 512, no
 * gradient of this model comes near fp16's 65504. */
static void set_precision(mc_config *c, precision p) {
    c->precision.bf16 = p == BF16;
    c->precision.fp16 = p == FP16;
    if (p == FP16) {
        c->precision.initial_loss_scale = 4096.0;
        c->precision.loss_scale_window = 50;
    }
}

/* dropout > 0: its draws must replay too; 0 lets the GPU take cuDNN's attention, whose
 * deterministic backward is then what is checked. */
static void repeat_bitwise_dropout(model_fn model, mc_device_choice dev, precision p, float dropout) {
    mc_config c;
    model(&c);
    c.train.device = dev;
    set_precision(&c, p);
    c.train.deterministic_mode = true;
    c.model.hidden_dropout = dropout;
    c.model.attention_dropout = dropout;
    double l1[STEPS_REPEAT], n1[STEPS_REPEAT], l2[STEPS_REPEAT], n2[STEPS_REPEAT];
    if (train_run(&c, STEPS_REPEAT, l1, n1) || train_run(&c, STEPS_REPEAT, l2, n2)) return;
    for (int i = 0; i < STEPS_REPEAT; i++) {
        CHECK(memcmp(&l1[i], &l2[i], sizeof(double)) == 0, "step %d loss %.17g vs %.17g", i + 1, l1[i], l2[i]);
        CHECK(memcmp(&n1[i], &n2[i], sizeof(double)) == 0, "step %d grad norm %.17g vs %.17g", i + 1, n1[i], n2[i]);
    }
    CHECK(l1[STEPS_REPEAT - 1] < l1[0], "the loss did not go down (%.4f -> %.4f)", l1[0], l1[STEPS_REPEAT - 1]);
}

static void repeat_bitwise(model_fn model, mc_device_choice dev, precision p) {
    repeat_bitwise_dropout(model, dev, p, 0.1f);
}

static void test_cpu_runs_are_bitwise_identical(void) { repeat_bitwise(tiny_llama, MC_DEVICE_CPU_ONLY, FP32); }
static void test_cpu_gpt2_runs_are_bitwise_identical(void) { repeat_bitwise(tiny_gpt2, MC_DEVICE_CPU_ONLY, FP32); }

/* Selective recomputation (here: of the GELU activation; norm outputs and SwiGLU's
 * activation are always rewritten by their backward) repeats the same kernels: the same
 * bits as keeping the activation. */
static void recompute_changes_no_bit(model_fn model) {
    mc_config c;
    model(&c);
    c.train.device = MC_DEVICE_CPU_ONLY;
    c.model.hidden_dropout = 0.1f;
    double l1[STEPS_REPEAT], n1[STEPS_REPEAT], l2[STEPS_REPEAT], n2[STEPS_REPEAT];
    if (train_run(&c, STEPS_REPEAT, l1, n1)) return;
    model(&c);
    c.train.device = MC_DEVICE_CPU_ONLY;
    c.model.hidden_dropout = 0.1f;
    c.train.recompute_granularity = 1;
    if (train_run(&c, STEPS_REPEAT, l2, n2)) return;
    for (int i = 0; i < STEPS_REPEAT; i++)
        CHECK(l1[i] == l2[i] && n1[i] == n2[i], "step %d: loss %.17g vs %.17g, grad norm %.17g vs %.17g", i + 1, l1[i],
              l2[i], n1[i], n2[i]);
}

static void test_selective_recompute_changes_no_bit(void) { recompute_changes_no_bit(tiny_llama_gelu); }
static void test_gpt2_selective_recompute_changes_no_bit(void) { recompute_changes_no_bit(tiny_gpt2); }

static void cuda_repeat_bitwise(model_fn model, precision p) { repeat_bitwise(model, MC_DEVICE_CUDA_ONLY, p); }

static void test_cuda_bf16_runs_are_bitwise_identical(void) { cuda_repeat_bitwise(tiny_llama, BF16); }
static void test_cuda_fp16_runs_are_bitwise_identical(void) { cuda_repeat_bitwise(tiny_llama, FP16); }
static void test_cuda_bf16_gpt2_runs_are_bitwise_identical(void) { cuda_repeat_bitwise(tiny_gpt2, BF16); }
static void test_cuda_fp16_gpt2_runs_are_bitwise_identical(void) { cuda_repeat_bitwise(tiny_gpt2, FP16); }

/* Head dim 128 (the Llama 2/3 and Mistral heads) with two query heads per group, no dropout:
 * on the GPU cuDNN's attention when it is there. */
static void tiny_llama_d128(mc_config *c) {
    tiny_llama(c);
    c->model.hidden_size = 256;
    c->model.ffn_hidden_size = 256;
    c->model.num_attention_heads = 2;
    c->model.num_query_groups = 1;
}

static void test_cuda_bf16_d128_runs_are_bitwise_identical(void) {
    repeat_bitwise_dropout(tiny_llama_d128, MC_DEVICE_CUDA_ONLY, BF16, 0.0f);
}

/* The CPU fp32 curve of a model, run once and kept for its bf16 and fp16 comparisons. */
static const double *cpu_curve(model_fn model) {
    enum { MAX_MODELS = 4 };
    static model_fn done[MAX_MODELS];
    static double losses[MAX_MODELS][STEPS_CURVE], norms[STEPS_CURVE];
    int i = 0;
    while (i < MAX_MODELS && done[i] && done[i] != model) i++;
    if (i == MAX_MODELS) {
        CHECK(0, "more models than cpu_curve keeps");
        return NULL;
    }
    if (done[i]) return losses[i];
    mc_config c;
    model(&c);
    c.train.device = MC_DEVICE_CPU_ONLY;
    if (train_run(&c, STEPS_CURVE, losses[i], norms)) return NULL;
    done[i] = model;
    return losses[i];
}

static void tracks_cpu_fp32_curve(model_fn model, precision p) {
    const char *name = p == BF16 ? "bf16" : "fp16";
    static double lg[STEPS_CURVE], ng[STEPS_CURVE];
    const double *lc = cpu_curve(model);
    if (!lc) return;
    mc_config c;
    model(&c);
    c.train.device = MC_DEVICE_CUDA_ONLY;
    set_precision(&c, p);
    if (train_run(&c, STEPS_CURVE, lg, ng)) return;
    double worst = 0;
    int worst_step = 0, compared = 0;
    while (compared < STEPS_CURVE && lc[compared] >= CURVE_FLOOR) {
        /* relative while the loss is above 1, in nats (0.02) below: on the steep fall to
         * 0.1 a one-step lag of bf16's curve is a few per cent of a small loss */
        double rel = fabs(lg[compared] - lc[compared]) / fmax(lc[compared], 1.0);
        if (rel > worst) {
            worst = rel;
            worst_step = compared + 1;
        }
        compared++;
    }
    double tail_c = 0, tail_g = 0;
    for (int i = STEPS_CURVE - CURVE_TAIL; i < STEPS_CURVE; i++) {
        tail_c += lc[i] / CURVE_TAIL;
        tail_g += lg[i] / CURVE_TAIL;
    }
    printf("   fp32 CPU loss %.4f -> %.4f, %s CUDA %.4f -> %.4f; over the first %d steps (fp32 above %.2f), "
           "worst step %d: %.4f (%.5f vs %.5f); last %d steps' mean %.4f vs %.4f\n",
           lc[0], lc[STEPS_CURVE - 1], name, lg[0], lg[STEPS_CURVE - 1], compared, CURVE_FLOOR, worst_step,
           worst, worst_step ? lg[worst_step - 1] : 0, worst_step ? lc[worst_step - 1] : 0, CURVE_TAIL, tail_g,
           tail_c);
    CHECK(compared >= CURVE_MIN_STEPS, "only %d steps before the fp32 loss fell below %.2f", compared, CURVE_FLOOR);
    CHECK(worst < 0.02, "%s differs from fp32 by %.4f (of the loss, or nats below 1) at step %d", name, worst,
          worst_step);
    CHECK(tail_g < CURVE_END && tail_c < CURVE_END, "the last %d steps' mean loss: %s %.4f, fp32 %.4f (want < %.2f)",
          CURVE_TAIL, name, tail_g, tail_c, CURVE_END);
}

static void test_cuda_bf16_tracks_cpu_fp32_curve(void) { tracks_cpu_fp32_curve(tiny_llama, BF16); }
static void test_cuda_fp16_tracks_cpu_fp32_curve(void) { tracks_cpu_fp32_curve(tiny_llama, FP16); }
static void test_cuda_bf16_gpt2_tracks_cpu_fp32_curve(void) { tracks_cpu_fp32_curve(tiny_gpt2, BF16); }
static void test_cuda_fp16_gpt2_tracks_cpu_fp32_curve(void) { tracks_cpu_fp32_curve(tiny_gpt2, FP16); }
static void test_cuda_bf16_d128_tracks_cpu_fp32_curve(void) { tracks_cpu_fp32_curve(tiny_llama_d128, BF16); }

int main(int argc, char **argv) {
    check_init(argc, argv, mc_backend_cuda_available());
    RUN(test_cpu_runs_are_bitwise_identical);
    RUN(test_cpu_gpt2_runs_are_bitwise_identical);
    RUN(test_selective_recompute_changes_no_bit);
    RUN(test_gpt2_selective_recompute_changes_no_bit);
    RUN_GPU(test_cuda_bf16_runs_are_bitwise_identical);
    RUN_GPU(test_cuda_fp16_runs_are_bitwise_identical);
    RUN_GPU(test_cuda_bf16_gpt2_runs_are_bitwise_identical);
    RUN_GPU(test_cuda_fp16_gpt2_runs_are_bitwise_identical);
    RUN_GPU(test_cuda_bf16_d128_runs_are_bitwise_identical);
    RUN_GPU(test_cuda_bf16_tracks_cpu_fp32_curve);
    RUN_GPU(test_cuda_fp16_tracks_cpu_fp32_curve);
    RUN_GPU(test_cuda_bf16_gpt2_tracks_cpu_fp32_curve);
    RUN_GPU(test_cuda_fp16_gpt2_tracks_cpu_fp32_curve);
    RUN_GPU(test_cuda_bf16_d128_tracks_cpu_fp32_curve);
    return check_summary();
}
