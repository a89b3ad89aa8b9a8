/* A training pass's activations living in the embedding's gradient (mc_model.host_hi):
 *  - the plan: hosted exactly when a step has one micro-batch and the head has a weight of
 *    its own, the bytes the activations add then smaller by what the embedding's gradient
 *    holds (at most its size), at a Llama 3 shape as well as the tiny one;
 *  - training: the same losses and grad norms, bit for bit, as with the activations in
 *    memory of their own (MC_KEEP_ACTIVATIONS_APART=1), on the CPU, and in bf16 on a GPU;
 *  - a pass while the last backward's gradients are held is refused (it would overwrite
 *    them), by the assertion's message in a child process. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "model/model.h"
#include "tensor/backend.h"
#include "tiny_llama.h"
#include "train/model_options.h"
#include "train_run.h"

#define STEPS 6

typedef struct {
    size_t params, grads, acts, hosted;
} plan_bytes;

/* The plan of cfg's model on the CPU backend (nothing allocated). */
static int plan(const mc_config *given, bool apart, mc_dtype dt, plan_bytes *out) {
    mc_err err;
    mc_comm comm;
    mc_config c = *given, *cfg = &c;
    if (mc_config_validate(cfg, 1, &err) != MC_OK || mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) != MC_OK) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    mc_backend *be = mc_backend_cpu_create();
    mc_model_options mo = mc_model_options_from_config(cfg, 1, dt, MC_F32, dt, cfg->train.micro_batch_size, NULL);
    mo.keep_activations_apart = apart;
    mc_model m;
    int rc = mc_model_plan(&m, &mo, be, &comm, &err);
    CHECK(rc == MC_OK, "%s", err.msg);
    if (rc == MC_OK) {
        mc_model_bytes(&m, &out->params, &out->grads, &out->acts);
        out->hosted = m.act_hosted;
        mc_model_free(&m);
    }
    be->destroy(be);
    mc_comm_free(&comm);
    return rc;
}

static void tiny(mc_config *c) {
    tiny_llama_base(c);
    c->model.seq_length = 32;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 2;
    c->model.attention_dropout = 0.0f;
    c->model.hidden_dropout = 0.0f;
    c->train.train_iters = STEPS;
}

static void test_plan_hosts_only_where_it_may(void) {
    mc_config c;
    plan_bytes hosted, apart;
    tiny(&c);
    if (plan(&c, false, MC_F32, &hosted) || plan(&c, true, MC_F32, &apart)) return;
    const size_t emb = (size_t)256 * 64 * sizeof(float); /* the padded vocabulary x hidden, F32 */
    CHECK(hosted.hosted > 0 && hosted.hosted <= emb, "hosted %zu bytes, the embedding's gradient is %zu", hosted.hosted,
          emb);
    CHECK(hosted.acts + hosted.hosted == apart.acts, "hosted: %zu + %zu bytes, apart %zu", hosted.acts, hosted.hosted,
          apart.acts);
    CHECK(hosted.grads == apart.grads && hosted.params == apart.params, "the parameters and gradients changed");

    c.train.global_batch_size = 4; /* two micro-batches: the first one's gradient is held */
    CHECK(plan(&c, false, MC_F32, &hosted) == MC_OK && hosted.hosted == 0, "hosted %zu bytes with 2 micro-batches",
          hosted.hosted);
    tiny(&c);
    c.model.untie_embeddings_and_output_weights = false; /* the head writes the embedding's gradient first */
    CHECK(plan(&c, false, MC_F32, &hosted) == MC_OK && hosted.hosted == 0, "hosted %zu bytes with a tied head",
          hosted.hosted);
}

/* 8 layers of Llama 3 8B at sequence 8192 in bf16: the embedding's gradient (128256 x 4096
 * F32, 2 GiB) holds 2 GiB of the activations. */
static void test_plan_at_llama3_8b(void) {
    mc_config c;
    tiny(&c);
    c.model.num_layers = 8;
    c.model.hidden_size = 4096;
    c.model.num_attention_heads = 32;
    c.model.num_query_groups = 8;
    c.model.ffn_hidden_size = 14336;
    c.model.vocab_size = 128256;
    c.model.seq_length = 8192;
    c.model.max_position_embeddings = 8192;
    c.train.micro_batch_size = 1;
    c.train.global_batch_size = 1;
    plan_bytes hosted, apart;
    if (plan(&c, false, MC_BF16, &hosted) || plan(&c, true, MC_BF16, &apart)) return;
    const size_t emb = (size_t)128256 * 4096 * sizeof(float);
    printf("   activations %.2f GiB apart, %.2f GiB beside the gradients hosted (%.2f GiB in the embedding's)\n",
           (double)apart.acts / (1 << 30), (double)hosted.acts / (1 << 30), (double)hosted.hosted / (1 << 30));
    CHECK(hosted.hosted <= emb && hosted.hosted + 256 > (apart.acts < emb ? apart.acts : emb) - (size_t)(1 << 29),
          "hosted %zu of %zu bytes", hosted.hosted, emb);
    CHECK(hosted.acts + hosted.hosted == apart.acts, "hosted: %zu + %zu bytes, apart %zu", hosted.acts, hosted.hosted,
          apart.acts);
}

/* train_run with the activations hosted where they may be, or always apart. */
static int train(const mc_config *cfg, bool apart, double *losses, double *norms) {
    if (apart) setenv("MC_KEEP_ACTIVATIONS_APART", "1", 1);
    else unsetenv("MC_KEEP_ACTIVATIONS_APART");
    int rc = train_run(cfg, STEPS, losses, norms);
    unsetenv("MC_KEEP_ACTIVATIONS_APART");
    return rc;
}

static void same_training(mc_device_choice dev, bool bf16) {
    mc_config c;
    tiny(&c);
    c.train.device = dev;
    c.precision.bf16 = bf16;
    double l1[STEPS], n1[STEPS], l2[STEPS], n2[STEPS];
    if (train(&c, false, l1, n1) || train(&c, true, l2, n2)) return;
    for (int i = 0; i < STEPS; i++)
        CHECK(memcmp(&l1[i], &l2[i], sizeof(double)) == 0 && memcmp(&n1[i], &n2[i], sizeof(double)) == 0,
              "step %d: hosted loss %.17g norm %.17g, apart %.17g %.17g", i + 1, l1[i], n1[i], l2[i], n2[i]);
    printf("   %d steps: loss %.4f -> %.4f, the same bits both ways\n", STEPS, l1[0], l1[STEPS - 1]);
}

static void test_cpu_training_is_the_same(void) { same_training(MC_DEVICE_CPU_ONLY, false); }
static void test_cuda_bf16_training_is_the_same(void) { same_training(MC_DEVICE_CUDA_ONLY, true); }

/* A child builds the model, runs a backward and then a forward with the gradients held;
 * it must die by the assertion, saying why. */
static void test_pass_over_held_gradients_is_refused(void) {
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        mc_config c;
        tiny(&c);
        mc_err err;
        mc_comm comm;
        if (mc_config_validate(&c, 1, &err) != MC_OK || mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, &err) != MC_OK) _exit(3);
        mc_backend *be = mc_backend_cpu_create();
        mc_model_options mo = mc_model_options_from_config(&c, 1, MC_F32, MC_F32, MC_F32, 2, NULL);
        mc_model m;
        if (mc_model_create(&m, &mo, be, &comm, &err) != MC_OK) _exit(3);
        mc_model_init_params(&m, 1);
        mc_model_zero_grads(&m);
        const int64_t n = 2 * 32;
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
        float *mask = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)(i % 200), pos[i] = (int32_t)(i % 32), mask[i] = 1.0f;
        mc_microbatch mb = {.seq = 32,
                            .batch = 2,
                            .tokens = mc_tensor_1d(tok, MC_I32, n),
                            .labels = mc_tensor_1d(tok, MC_I32, n),
                            .pos = mc_tensor_1d(pos, MC_I32, n),
                            .loss_mask = mc_tensor_1d(mask, MC_F32, n),
                            .seg_start = mc_tensor_none()};
        double loss, ntok;
        mc_model_forward_backward(&m, &mb, true, 1.0, 1, true, &loss, &ntok);
        mc_model_forward_backward(&m, &mb, false, 1.0, 1, false, &loss, &ntok);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the pass over held gradients ran");
    CHECK(strstr(buf, "overwrite the embedding's gradient") != NULL, "the message was: %s", buf);
}

int main(int argc, char **argv) {
    check_init(argc, argv, mc_backend_cuda_available());
    RUN(test_plan_hosts_only_where_it_may);
    RUN(test_plan_at_llama3_8b);
    RUN(test_pass_over_held_gradients_is_refused);
    RUN(test_cpu_training_is_the_same);
    RUN_GPU(test_cuda_bf16_training_is_the_same);
    return check_summary();
}
