/* Reference parity with PyTorch / Hugging Face (fixtures from tools/reference/make_golden.py):
 * tiny GPT2LMHeadModel and LlamaForCausalLM (GQA, untied head) with fixed weights.
 * The model is built from the fixture's own Megatron command line, loads the HF weights
 * through the HF converter, and must match:
 *   - the logits and every parameter gradient within 1e-4 relative (also with the LM head
 *     in chunks, the backward's held in the gradient buffer),
 *   - the loss of each of 5 AdamW steps under Megatron's warmup + cosine schedule with
 *     gradient clipping within 1e-5 relative.
 * Runs on the CPU backend; MC_TEST_DEVICE=cuda runs the same checks on the CUDA backend
 * (fp32), skipping when no GPU is present. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "io/hf_convert.h"
#include "io/safetensors.h"
#include "megatron.h"
#include "model/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/model_options.h"

typedef struct {
    mc_config cfg;
    mc_comm comm;
    mc_backend *be;
    mc_model model;
    mc_hf_arch arch;
    mc_safetensors *ref;
    mc_host_params hf_weights, weights; /* HF names, Megatron names */
    int64_t B, S, N;
    int32_t *tokens, *labels, *pos; /* [s, b] */
    float *mask;
    void *dev_tokens, *dev_labels, *dev_pos, *dev_mask;
    mc_microbatch mb;
} golden;


static mc_backend *test_backend(void) {
    const char *dev = getenv("MC_TEST_DEVICE");
    if (dev && !strcmp(dev, "cuda")) {
        if (!mc_backend_cuda_available()) check_skip("MC_TEST_DEVICE=cuda but no GPU/CUDA backend here");
        mc_err err;
        mc_backend *be = mc_backend_cuda_create(0, &err);
        if (!be) check_skip(err.msg);
        return be;
    }
    return mc_backend_cpu_create();
}

/* Parses the fixture's Megatron command line into a config. */
static int config_from_fixture(golden *g, const char *family) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/golden/%s_config.json", family);
    char *text = check_read_file(path, NULL);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    const char *flags = cJSON_GetStringValue(cJSON_GetObjectItem(root, "megatron_flags"));
    const char *arch = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "hf_architecture"));
    CHECK(flags && arch);
    g->arch = (mc_hf_arch)mc_hf_arch_parse(arch);
    char *buf = mc_xstrdup(flags);
    char *argv[256];
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 256; tok = strtok(NULL, " ")) argv[argc++] = tok;
    mc_config_init(&g->cfg);
    mc_err err;
    int rc = mc_config_parse_args(&g->cfg, argc, argv, &err);
    CHECK(rc == MC_OK, "%s", err.msg);
    g->cfg.data.mock_data = true; /* any data source satisfies validation; the batch comes from the fixture */
    rc = rc == MC_OK ? mc_config_validate(&g->cfg, 1, &err) : rc;
    CHECK(rc == MC_OK, "%s", err.msg);
    free(buf);
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* Copies the Megatron-named host tensors into the model's parameter buffer. */
static void load_weights(golden *g) {
    mc_model *m = &g->model;
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        mc_host_tensor *t = mc_host_params_find(&g->weights, p->name);
        CHECK(t != NULL, "no weight for %s", p->name);
        if (!t) continue;
        CHECK(t->numel == p->numel, "%s: %lld vs %lld elements", p->name, (long long)t->numel, (long long)p->numel);
        g->be->copy_h2d(g->be, (float *)m->param_buf + p->offset, t->data, (size_t)p->numel * sizeof(float));
    }
}

static int setup(golden *g, const char *family) {
    memset(g, 0, sizeof *g);
    if (config_from_fixture(g, family) != MC_OK) return -1;
    mc_err err;
    CHECK(mc_comm_init(&g->comm, 1, 0, 0, 1, 1, 1, 1, &err) == MC_OK);
    g->be = test_backend();
    g->B = g->cfg.train.micro_batch_size;
    g->S = g->cfg.model.seq_length;
    g->N = g->B * g->S;
    mc_model_options mo = mc_model_options_from_config(&g->cfg, 1, MC_F32, MC_F32, MC_F32, g->B, NULL);
    if (mc_model_create(&g->model, &mo, g->be, &g->comm, &err) != MC_OK) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/golden/%s_weights.safetensors", family);
    mc_host_params_init(&g->hf_weights);
    mc_host_params_init(&g->weights);
    CHECK(mc_host_params_load_hf(&g->hf_weights, path, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_hf_import(g->arch, &g->cfg.model, g->model.padded_vocab, &g->hf_weights, &g->weights, &err) == MC_OK,
          "%s", err.msg);
    load_weights(g);

    snprintf(path, sizeof path, "tests/fixtures/golden/%s_reference.safetensors", family);
    CHECK(mc_safetensors_open(path, &g->ref, &err) == MC_OK, "%s", err.msg);
    const mc_st_tensor *tok = mc_safetensors_find(g->ref, "tokens"), *lab = mc_safetensors_find(g->ref, "labels");
    CHECK(tok && lab && tok->numel == g->N && lab->numel == g->N);
    g->tokens = malloc(g->N * 4);
    g->labels = malloc(g->N * 4);
    g->pos = malloc(g->N * 4);
    g->mask = malloc(g->N * 4);
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t s = 0; s < g->S; s++) { /* fixture [b, s] -> activations [s, b] */
            g->tokens[s * g->B + b] = ((const int32_t *)tok->data)[b * g->S + s];
            g->labels[s * g->B + b] = ((const int32_t *)lab->data)[b * g->S + s];
            g->pos[s * g->B + b] = (int32_t)s;
            g->mask[s * g->B + b] = 1.0f;
        }
    size_t nb = (size_t)g->N * 4;
    g->dev_tokens = g->be->alloc(g->be, nb);
    g->dev_labels = g->be->alloc(g->be, nb);
    g->dev_pos = g->be->alloc(g->be, nb);
    g->dev_mask = g->be->alloc(g->be, nb);
    g->be->copy_h2d(g->be, g->dev_tokens, g->tokens, nb);
    g->be->copy_h2d(g->be, g->dev_labels, g->labels, nb);
    g->be->copy_h2d(g->be, g->dev_pos, g->pos, nb);
    g->be->copy_h2d(g->be, g->dev_mask, g->mask, nb);
    g->mb = (mc_microbatch){.seq = g->S,
                            .batch = g->B,
                            .tokens = mc_tensor_1d(g->dev_tokens, MC_I32, g->N),
                            .labels = mc_tensor_1d(g->dev_labels, MC_I32, g->N),
                            .loss_mask = mc_tensor_1d(g->dev_mask, MC_F32, g->N),
                            .pos = mc_tensor_1d(g->dev_pos, MC_I32, g->N),
                            .seg_start = mc_tensor_none()};
    return MC_OK;
}

static void teardown(golden *g) {
    if (g->be) {
        g->be->free(g->be, g->dev_tokens);
        g->be->free(g->be, g->dev_labels);
        g->be->free(g->be, g->dev_pos);
        g->be->free(g->be, g->dev_mask);
        mc_model_free(&g->model);
        g->be->destroy(g->be);
    }
    if (g->ref) mc_safetensors_close(g->ref);
    mc_host_params_free(&g->hf_weights);
    mc_host_params_free(&g->weights);
    free(g->tokens);
    free(g->labels);
    free(g->pos);
    free(g->mask);
    mc_comm_free(&g->comm);
    mc_config_free(&g->cfg);
}

/* Relative errors of x against the reference y: L2 and max-abs over the max |y|. */
static void compare(const char *what, const float *x, const float *y, int64_t n, double tol) {
    double num = 0, den = 0, maxd = 0, maxy = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)y[i];
        num += d * d;
        den += (double)y[i] * y[i];
        maxd = fmax(maxd, fabs(d));
        maxy = fmax(maxy, fabs((double)y[i]));
    }
    double rel = sqrt(num / fmax(den, 1e-300)), relmax = maxd / fmax(maxy, 1e-30);
    CHECK(rel < tol && relmax < tol, "%s: relative L2 %.3g, max %.3g (tolerance %.0e)", what, rel, relmax, tol);
}

static double ref_scalar(golden *g, const char *name) {
    double v = NAN;
    mc_err err;
    CHECK(mc_safetensors_read_f64_n(g->ref, name, 1, &v, &err) == MC_OK, "%s", err.msg);
    return v;
}

/* chunk > 0: the LM head in chunks of `chunk` rows, and the backward (the first after a
 * reset) in chunks of `first` rows held in the gradient buffer (mc_model_set_first_head_chunk),
 * whose borrowed range is poisoned first: that pass must zero or overwrite all of it. */
static void check_logits_loss_grads(const char *family, int64_t chunk, int64_t first) {
    golden g;
    if (setup(&g, family) != MC_OK) {
        teardown(&g);
        return;
    }
    mc_model *m = &g.model;
    if (chunk > 0) {
        m->head_chunk = chunk;
        mc_model_set_first_head_chunk(m, first);
        mc_model_zero_grads(m);
        size_t bytes = sizeof(float) * (size_t)(m->borrow_hi - m->borrow_lo);
        float *nan = malloc(bytes);
        for (int64_t i = 0; i < m->borrow_hi - m->borrow_lo; i++) nan[i] = NAN;
        g.be->copy_h2d(g.be, (float *)m->grad_buf + m->borrow_lo, nan, bytes);
        free(nan);
        if (first > 0)
            printf("   %s: head chunks of %lld rows, the backward's of %lld in [%lld, %lld) of the gradients\n",
                   family, (long long)chunk, (long long)first, (long long)m->borrow_lo, (long long)m->borrow_hi);
        else
            printf("   %s: head chunks of %lld rows\n", family, (long long)chunk);
    }
    int64_t V = m->vocab_local;
    /* Logits: ours are [s, b, V], the reference's [b, s, V]. */
    float *logits = malloc(sizeof(float) * (size_t)(g.N * V));
    float *ref = malloc(sizeof(float) * (size_t)(g.N * V));
    float *ours = malloc(sizeof(float) * (size_t)(g.N * V));
    mc_model_logits(m, &g.mb, logits);
    mc_err err;
    CHECK(mc_safetensors_read_f32_n(g.ref, "logits", g.N * V, ref, &err) == MC_OK, "%s", err.msg);
    for (int64_t b = 0; b < g.B; b++)
        for (int64_t s = 0; s < g.S; s++) memcpy(ours + (b * g.S + s) * V, logits + (s * g.B + b) * V, sizeof(float) * V);
    compare("logits", ours, ref, g.N * V, 1e-4);

    double loss_sum, ntok;
    mc_model_forward_backward(m, &g.mb, true, 1.0 / (double)g.N, 1, false, &loss_sum, &ntok);
    CHECK_REL(loss_sum / ntok, ref_scalar(&g, "loss"), 1e-5, "loss");

    /* Gradients: the reference's HF-named grads through the same converter. */
    mc_host_params hf_grads, grads;
    mc_host_params_init(&hf_grads);
    mc_host_params_init(&grads);
    for (int i = 0; i < mc_safetensors_count(g.ref); i++) {
        const mc_st_tensor *t = mc_safetensors_at(g.ref, i);
        if (strncmp(t->name, "grad.", 5) != 0) continue;
        float *dst = mc_host_params_add(&hf_grads, t->name + 5, t->ndim, t->shape);
        CHECK(mc_safetensors_read_f32_n(g.ref, t->name, t->numel, dst, &err) == MC_OK, "%s", err.msg);
    }
    CHECK(mc_hf_import(g.arch, &g.cfg.model, m->padded_vocab, &hf_grads, &grads, &err) == MC_OK, "%s", err.msg);
    float *host_grad = malloc(sizeof(float) * (size_t)m->numel);
    g.be->copy_d2h(g.be, host_grad, m->grad_buf, sizeof(float) * (size_t)m->numel);
    int compared = 0;
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        mc_host_tensor *t = mc_host_params_find(&grads, p->name);
        CHECK(t && t->numel == p->numel, "reference gradient for %s", p->name);
        if (!t) continue;
        compare(p->name, host_grad + p->offset, t->data, p->numel, 1e-4);
        compared++;
    }
    printf("   %s: logits and loss match; %d gradients compared\n", family, compared);
    free(host_grad);
    mc_host_params_free(&hf_grads);
    mc_host_params_free(&grads);
    free(logits);
    free(ref);
    free(ours);
    teardown(&g);
}

/* Five AdamW steps with Megatron's schedule and clipping, as the fixture's flags say. */
static void check_adamw_steps(const char *family) {
    golden g;
    if (setup(&g, family) != MC_OK) {
        teardown(&g);
        return;
    }
    mc_model *m = &g.model;
    mc_optimizer opt;
    mc_err err;
    CHECK(mc_optimizer_create(&opt, m, &g.cfg, &err) == MC_OK, "%s", err.msg);
    mc_lr_schedule sched;
    mc_lr_schedule_init(&sched, &g.cfg);
    double losses[5], norms[5], lrs[5];
    CHECK(mc_safetensors_read_f64_n(g.ref, "train.losses", 5, losses, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_safetensors_read_f64_n(g.ref, "train.grad_norms", 5, norms, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_safetensors_read_f64_n(g.ref, "train.lrs", 5, lrs, &err) == MC_OK, "%s", err.msg);
    int64_t gbs = g.cfg.train.global_batch_size;
    for (int k = 0; k < 5; k++) {
        double loss_sum, ntok;
        mc_model_forward_backward(m, &g.mb, true, 1.0 / (double)g.N, 1, false, &loss_sum, &ntok);
        double lr = mc_lr_at(&sched, (double)(k * gbs)), wd = mc_wd_at(&sched, (double)(k * gbs)), gnorm = 0;
        mc_optimizer_step(&opt, lr, wd, 1.0);
        CHECK(mc_optimizer_finish_step(&opt, &gnorm), "step %d skipped (grad norm %g)", k + 1, gnorm);
        printf("   %s step %d: loss %.9f (reference %.9f), grad norm %.6f (%.6f), lr %.5g (%.5g)\n", family, k + 1,
               loss_sum / ntok, losses[k], gnorm, norms[k], lr, lrs[k]);
        CHECK_REL(loss_sum / ntok, losses[k], 1e-5, "loss of step %d", k + 1);
        CHECK_REL(gnorm, norms[k], 1e-4, "grad norm of step %d", k + 1);
        CHECK(fabs(lr - lrs[k]) <= 1e-12, "lr of step %d: %.17g vs %.17g", k + 1, lr, lrs[k]);
    }
    double loss_sum, ntok;
    mc_model_forward_backward(m, &g.mb, false, 0, 1, false, &loss_sum, &ntok);
    CHECK_REL(loss_sum / ntok, ref_scalar(&g, "train.final_loss"), 1e-5, "loss after 5 steps");
    mc_optimizer_free(&opt);
    teardown(&g);
}

static void test_gpt2_logits_loss_grads(void) { check_logits_loss_grads("gpt2", 0, 0); }
static void test_llama_logits_loss_grads(void) { check_logits_loss_grads("llama", 0, 0); }
static void test_llama_head_chunks_logits_loss_grads(void) { check_logits_loss_grads("llama", 5, 16); }
static void test_gpt2_head_chunks_logits_loss_grads(void) { check_logits_loss_grads("gpt2", 7, 0); }
static void test_gpt2_adamw_5_steps(void) { check_adamw_steps("gpt2"); }
static void test_llama_adamw_5_steps(void) { check_adamw_steps("llama"); }

/* Every case on the CPU; with --gpu (ctest's test_golden_parity_cuda) every case on CUDA. */
#define GOLDEN_CASES(X)                                                                             \
    X(test_gpt2_logits_loss_grads) X(test_llama_logits_loss_grads) X(test_llama_head_chunks_logits_loss_grads) \
    X(test_gpt2_head_chunks_logits_loss_grads) X(test_gpt2_adamw_5_steps) X(test_llama_adamw_5_steps)
#define ON_CPU(fn) RUN(fn);
#define ON_GPU(fn) RUN_GPU(fn);

int main(int argc, char **argv) {
    check_init(argc, argv, mc_backend_cuda_available());
    if (check_gpu_mode_) setenv("MC_TEST_DEVICE", "cuda", 1);
    GOLDEN_CASES(ON_CPU)
    GOLDEN_CASES(ON_GPU)
    return check_summary();
}
