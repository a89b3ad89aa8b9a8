/* Whole-model gradient checks: a tiny model of each family, run in F64 on the CPU
 * backend, against central finite differences of the masked loss sum. Every parameter
 * tensor is probed (a sample of its elements); the check passes when each probe matches
 * within 1e-4 relative and the whole set within 1e-4 relative L2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/philox.h"
#include "check.h"
#include "comm/comm.h"
#include "megatron.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "train/model_options.h"
#include "tiny_llama.h"

typedef struct {
    int64_t S, B;
    int32_t *tokens, *labels, *pos, *seg;
    double *mask;
    mc_microbatch mb;
} batch;

static void make_batch(batch *b, const mc_config *cfg, int64_t B, bool segments) {
    int64_t S = cfg->model.seq_length, N = S * B;
    b->S = S;
    b->B = B;
    b->tokens = calloc(N, 4);
    b->labels = calloc(N, 4);
    b->pos = calloc(N, 4);
    b->seg = calloc(N, 4);
    b->mask = calloc(N, 8);
    for (int64_t t = 0; t < N; t++) {
        b->tokens[t] = (int32_t)(mc_philox_bits(7, 1, t) % (uint32_t)cfg->model.vocab_size);
        b->labels[t] = (int32_t)(mc_philox_bits(7, 2, t) % (uint32_t)cfg->model.vocab_size);
        b->pos[t] = (int32_t)(t / B);
        b->mask[t] = mc_philox_uniform(7, 3, t) < 0.2f ? 0.0 : 1.0; /* some tokens masked out */
    }
    for (int64_t bb = 0; bb < B; bb++)
        for (int64_t s = 0; s < S; s++) b->seg[bb * S + s] = segments && s >= S / 2 ? (int32_t)(S / 2) : 0;
    b->mb = (mc_microbatch){
        .seq = S,
        .batch = B,
        .tokens = mc_tensor_1d(b->tokens, MC_I32, N),
        .labels = mc_tensor_1d(b->labels, MC_I32, N),
        .loss_mask = mc_tensor_1d(b->mask, MC_F64, N),
        .pos = mc_tensor_1d(b->pos, MC_I32, N),
        .seg_start = segments ? mc_tensor_2d(b->seg, MC_I32, B, S) : mc_tensor_none(),
    };
}

static void free_batch(batch *b) {
    free(b->tokens);
    free(b->labels);
    free(b->pos);
    free(b->seg);
    free(b->mask);
}

static double loss_of(mc_model *m, batch *b) {
    double loss, ntok;
    mc_model_forward_backward(m, &b->mb, false, 0.0, 5, true, &loss, &ntok);
    return loss;
}

static void gradcheck(mc_config *cfg, bool segments) {
    mc_err err;
    if (mc_config_validate(cfg, 1, &err) != MC_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mc_comm comm;
    CHECK(mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK, "%s", err.msg);
    mc_backend *be = mc_backend_cpu_create();
    mc_model m;
    mc_model_options mo = mc_model_options_from_config(cfg, 1, MC_F64, MC_F64, MC_F64, 2, NULL);
    mo.keep_activations_apart = true; /* the perturbed passes run while the analytic gradients are held */
    CHECK(mc_model_create(&m, &mo, be, &comm, &err) == MC_OK, "%s", err.msg);
    mc_model_init_params(&m, 42);
    /* Perturb every parameter (norm weights 1 and zero biases make weak checks). */
    double *p = m.param_buf;
    for (int64_t i = 0; i < m.numel; i++) p[i] += 0.3 * mc_philox_normal(9, 9, (uint64_t)i);
    batch b;
    make_batch(&b, cfg, 2, segments);
    double ntok;
    double loss;
    /* grad_scale 1: gradients of the masked loss sum. Dropout draws come from stream 5,
     * identical in every evaluation, so the function is deterministic. The gradient buffer
     * is poisoned before the reset: the linear layers' gradients are then left as they are
     * (NaN) for the backward to overwrite, so a gradient it failed to write shows below. */
    double *g = m.grad_buf;
    for (int64_t i = 0; i < m.numel; i++) g[i] = NAN;
    mc_model_zero_grads(&m);
    mc_model_forward_backward(&m, &b.mb, true, 1.0, 5, true, &loss, &ntok);
    CHECK(ntok > 0 && isfinite(loss));
    { /* one and two backward passes after the reset give what they give from a zeroed
       * buffer, every pass accumulating, element for element */
        size_t bytes = sizeof(double) * (size_t)m.numel;
        double *one = malloc(bytes), *two = malloc(bytes), l2, n2;
        memcpy(one, g, bytes);
        mc_model_forward_backward(&m, &b.mb, true, 1.0, 5, true, &l2, &n2);
        memcpy(two, g, bytes);
        memset(g, 0, bytes);
        m.grads_reset = false;
        for (int pass = 0; pass < 2; pass++) {
            mc_model_forward_backward(&m, &b.mb, true, 1.0, 5, true, &l2, &n2);
            const double *got = pass ? two : one;
            int64_t off = 0;
            for (int64_t i = 0; i < m.numel; i++) off += !(got[i] == g[i]);
            CHECK(off == 0, "backward %d after the reset: %lld gradient elements differ from accumulating into zeros",
                  pass + 1, (long long)off);
        }
        memcpy(g, one, bytes);
        free(one);
        free(two);
    }
    double num = 0, den = 0;
    int probes = 0, bad = 0;
    for (int pi = 0; pi < m.nparams; pi++) {
        const mc_param *par = &m.params[pi];
        int k = par->numel < 6 ? (int)par->numel : 6;
        for (int j = 0; j < k; j++) {
            int64_t e = par->offset + (int64_t)(mc_philox_bits(11, (uint64_t)pi, (uint64_t)j) % (uint64_t)par->numel);
            double keep = p[e], h = 1e-5;
            p[e] = keep + h;
            double lp = loss_of(&m, &b);
            p[e] = keep - h;
            double lm = loss_of(&m, &b);
            p[e] = keep;
            double fd = (lp - lm) / (2 * h);
            double an = g[e];
            double diff = fabs(fd - an), scale = fmax(fmax(fabs(fd), fabs(an)), 1e-6);
            num += (fd - an) * (fd - an);
            den += fd * fd;
            probes++;
            if (diff > 1e-4 * scale && diff > 1e-9) {
                bad++;
                CHECK(0, "%s[%lld]: analytic %.10g vs finite difference %.10g", par->name,
                      (long long)(e - par->offset), an, fd);
            }
        }
    }
    double rel = sqrt(num / den);
    printf("   %d probes over %d tensors, relative L2 error %.3g\n", probes, m.nparams, rel);
    CHECK(rel < 1e-4, "relative L2 error %.3g", rel);
    CHECK(bad == 0);
    free_batch(&b);
    mc_model_free(&m);
    be->destroy(be);
    mc_comm_free(&comm);
}

static void base_config(mc_config *c) {
    mc_config_init(c);
    c->data.mock_data = true;
    c->model.vocab_size = 100; /* padded to 128: padded rows take part in the softmax */
    c->model.num_layers = 2;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 2;
    c->model.seq_length = 8;
    c->model.init_method_std = 0.3f;
    c->model.attention_dropout = 0.0f;
    c->model.hidden_dropout = 0.0f;
    c->train.micro_batch_size = 2;
    c->train.train_iters = 1;
    c->optim.lr = 1e-3;
}

static void test_gpt2_family(void) {
    mc_config c;
    base_config(&c);
    gradcheck(&c, false);
}

static void test_gpt2_family_with_dropout(void) {
    mc_config c;
    base_config(&c);
    c.model.attention_dropout = 0.2f;
    c.model.hidden_dropout = 0.2f;
    gradcheck(&c, false);
}

/* The tanh GELU: fc1 and the GELU run as linear_gelu_fwd / linear_dgelu_bwd. */
static void test_gpt2_family_openai_gelu(void) {
    mc_config c;
    base_config(&c);
    c.model.openai_gelu = true;
    gradcheck(&c, false);
}

static void test_gpt2_family_openai_gelu_selective_recompute(void) {
    mc_config c;
    base_config(&c);
    c.model.openai_gelu = true;
    c.train.recompute_granularity = 1;
    gradcheck(&c, false);
}

static void test_gpt2_family_selective_recompute(void) {
    mc_config c;
    base_config(&c);
    c.train.recompute_granularity = 1;
    c.model.hidden_dropout = 0.1f;
    gradcheck(&c, false);
}

/* base_config as a Llama: RMSNorm, RoPE, SwiGLU, no biases, untied head. */
static void llama_config(mc_config *c) {
    base_config(c);
    tiny_llama_arch(c);
    c->model.ffn_hidden_size = 24;
}

static void test_llama_family_gqa_untied(void) {
    mc_config c;
    llama_config(&c);
    c.model.num_attention_heads = 4;
    c.model.group_query_attention = true;
    c.model.num_query_groups = 2;
    gradcheck(&c, false);
}

static void test_llama_family_partial_rope_doc_mask(void) {
    mc_config c;
    base_config(&c);
    c.model.normalization = MC_NORM_RMSNORM;
    c.model.position_embedding_type = MC_POS_ROPE;
    c.model.rotary_percent = 0.5f;
    c.model.swiglu = true;
    c.model.ffn_hidden_size = 40;
    c.model.untie_embeddings_and_output_weights = true;
    c.model.hidden_dropout = 0.1f;
    gradcheck(&c, true);
}

/* The LM head in chunks: the first backward after a reset in the longer chunks held in the
 * gradient buffer (mc_model_set_first_head_chunk: the plan sets one on GPUs only, so it is
 * set here), later ones in head_chunk rows. Two micro-batches give the losses and
 * gradients of the unchunked head. The borrowed range is poisoned after the reset, which
 * leaves its zeroing to the pass, so a gradient (or padding) that pass neither zeroed nor
 * overwrote after its head shows. */
static void test_llama_head_chunks(void) {
    mc_config c;
    llama_config(&c);
    mc_err err;
    CHECK(mc_config_validate(&c, 1, &err) == MC_OK, "%s", err.msg);
    mc_comm comm;
    CHECK(mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK, "%s", err.msg);
    mc_backend *be = mc_backend_cpu_create();
    mc_model m;
    mc_model_options mo = mc_model_options_from_config(&c, 1, MC_F64, MC_F64, MC_F64, 2, NULL);
    mo.keep_activations_apart = true; /* the perturbed passes run while the analytic gradients are held */
    CHECK(mc_model_create(&m, &mo, be, &comm, &err) == MC_OK, "%s", err.msg);
    mc_model_init_params(&m, 42);
    double *p = m.param_buf, *g = m.grad_buf;
    for (int64_t i = 0; i < m.numel; i++) p[i] += 0.3 * mc_philox_normal(9, 9, (uint64_t)i);
    batch b;
    make_batch(&b, &c, 2, false);
    const int64_t N = 16;
    CHECK(m.head_chunk == N && m.head_chunk_first == 0, "CPU plan: chunk %lld, first %lld", (long long)m.head_chunk,
          (long long)m.head_chunk_first);
    size_t bytes = sizeof(double) * (size_t)m.numel;
    double *ref = malloc(bytes), ref_loss[2], loss[2], ntok;
    mc_model_zero_grads(&m);
    for (int k = 0; k < 2; k++) mc_model_forward_backward(&m, &b.mb, true, 1.0, 5, true, &ref_loss[k], &ntok);
    memcpy(ref, g, bytes);
    const int64_t plans[][2] = {{4, 0}, {4, 8}, {3, 16}, {5, 16}}; /* head_chunk, head_chunk_first */
    for (int t = 0; t < 4; t++) {
        m.head_chunk = plans[t][0];
        mc_model_set_first_head_chunk(&m, plans[t][1]);
        mc_model_zero_grads(&m);
        if (m.head_chunk_first) {
            const mc_param *o = &m.params[m.out_w];
            CHECK(m.borrow_hi <= o->offset || m.borrow_lo >= o->offset + o->numel, "the range holds the head's gradient");
            CHECK(m.borrow_hi - m.borrow_lo >= m.numel / 2, "borrowed [%lld, %lld) of %lld", (long long)m.borrow_lo,
                  (long long)m.borrow_hi, (long long)m.numel);
            for (int64_t i = m.borrow_lo; i < m.borrow_hi; i++) g[i] = NAN;
        }
        for (int k = 0; k < 2; k++) mc_model_forward_backward(&m, &b.mb, true, 1.0, 5, true, &loss[k], &ntok);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m.numel; i++) {
            num += (g[i] - ref[i]) * (g[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        CHECK(sqrt(num / den) < 1e-12, "chunks %lld / first %lld: gradients' relative L2 error %.3g",
              (long long)plans[t][0], (long long)plans[t][1], sqrt(num / den));
        for (int k = 0; k < 2; k++) CHECK_REL(loss[k], ref_loss[k], 1e-13, "micro-batch %d, plan %d", k, t);
    }
    free(ref);
    free_batch(&b);
    mc_model_free(&m);
    be->destroy(be);
    mc_comm_free(&comm);
}

/* The LM head's chunk rule (mc_model_head_chunk) on the bench shapes' numbers: the GPU takes
 * a whole micro-batch's logits only where a backward would chunk otherwise and the logits
 * are no larger than the activations the layers keep. */
static void test_head_chunk_rule(void) {
    const size_t GB = (size_t)1 << 30;
    /* GPT-2 124M, batch 64: the gradient buffer lends 3418 rows, not 65536 */
    mc_head_plan gpt2 = {.gpu = true, .tokens = 65536, .vocab = 50304, .borrow_rows = 3418, .micro_batches = 1,
                         .elem = 2, .scratch = GB, .kept = 17 * GB};
    CHECK(mc_model_head_chunk(&gpt2) == 65536, "GPT-2: %lld rows", (long long)mc_model_head_chunk(&gpt2));
    gpt2.kept = 6 * GB; /* 6.6 GB of logits against 6 GiB kept: chunks as long as the scratch */
    CHECK(mc_model_head_chunk(&gpt2) == 8192, "GPT-2, little kept: %lld rows", (long long)mc_model_head_chunk(&gpt2));
    /* the 1.5B shape: one micro-batch a step borrows 19.5K rows, so the plan stays short */
    mc_head_plan llama = {.gpu = true, .tokens = 8192, .vocab = 128256, .borrow_rows = 19500, .micro_batches = 1,
                          .elem = 2, .scratch = GB / 2, .kept = 6 * GB};
    CHECK(mc_model_head_chunk(&llama) == 2048, "1.5B: %lld rows", (long long)mc_model_head_chunk(&llama));
    llama.micro_batches = 8; /* accumulating micro-batches cannot borrow */
    CHECK(mc_model_head_chunk(&llama) == 8192, "1.5B x 8: %lld rows", (long long)mc_model_head_chunk(&llama));
    llama.gpu = false; /* the CPU: 2^24 logits (130 rows: under 256 not rounded), whatever else */
    CHECK(mc_model_head_chunk(&llama) == 130, "CPU: %lld rows", (long long)mc_model_head_chunk(&llama));
}

int main(void) {
    RUN(test_head_chunk_rule);
    RUN(test_gpt2_family);
    RUN(test_gpt2_family_with_dropout);
    RUN(test_gpt2_family_selective_recompute);
    RUN(test_gpt2_family_openai_gelu);
    RUN(test_gpt2_family_openai_gelu_selective_recompute);
    RUN(test_llama_family_gqa_untied);
    RUN(test_llama_family_partial_rope_doc_mask);
    RUN(test_llama_head_chunks);
    return check_summary();
}
