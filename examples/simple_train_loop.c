/* simple_train_loop.c: build a small GPT model from a config struct and run 10 training
 * steps on mock data through the public API only (include/megatron.h, libmegatron).
 * The counterpart of Megatron-Core's examples/run_simple_mcore_train_loop.py.
 *
 *   build/simple_train_loop
 */
#include <stdio.h>

#include "megatron.h"

int main(void) {
    mc_config cfg;
    mc_config_init(&cfg); /* Megatron's defaults */
    cfg.model.num_layers = 2;
    cfg.model.hidden_size = 64;
    cfg.model.num_attention_heads = 4;
    cfg.model.seq_length = 64;
    cfg.model.vocab_size = 512;
    cfg.model.hidden_dropout = 0.0f;
    cfg.model.attention_dropout = 0.0f;
    cfg.data.mock_data = true;
    cfg.data.tokenizer_type = MC_TOKENIZER_NULL;
    cfg.train.micro_batch_size = 4;
    cfg.train.global_batch_size = 8; /* 2 micro-batches of gradient accumulation */
    cfg.train.train_iters = 10;
    cfg.train.eval_iters = 0;
    cfg.train.device = MC_DEVICE_CPU_ONLY;
    cfg.optim.lr = 1e-3;
    cfg.log.quiet = true;

    mc_err err;
    mc_trainer *trainer = mc_trainer_create(&cfg, &err);
    if (!trainer) {
        fprintf(stderr, "simple_train_loop: %s\n", err.msg);
        return 2;
    }
    printf("model with %lld parameters\n", (long long)mc_trainer_num_params(trainer));
    double first = 0, last = 0;
    for (int i = 0; i < cfg.train.train_iters; i++) {
        mc_step_stats st;
        if (mc_trainer_step(trainer, &st, &err) != MC_OK) {
            fprintf(stderr, "simple_train_loop: %s\n", err.msg);
            mc_trainer_free(trainer);
            return 1;
        }
        printf("step %2lld  lm loss %.4f  grad norm %.3f  lr %.3e\n", (long long)st.iteration, st.lm_loss,
               st.grad_norm, st.learning_rate);
        if (i == 0) first = st.lm_loss;
        last = st.lm_loss;
    }
    mc_trainer_free(trainer);
    /* Mock sequences are 1, 2, 3, ... so a few steps already lower the loss. */
    if (!(last < first)) {
        fprintf(stderr, "simple_train_loop: loss did not decrease (%.4f -> %.4f)\n", first, last);
        return 1;
    }
    return 0;
}
