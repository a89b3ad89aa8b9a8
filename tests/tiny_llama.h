/* tiny_llama.h: the tiny Llama of tests/fixtures/golden/llama_config.json (2 layers, hidden
 * 64, GQA 4/2, SwiGLU, RMSNorm, RoPE, untied head, no biases) on mock data, with the
 * optimizer settings the training tests share (lr 3e-3, cosine, weight decay 0.1, no
 * evaluation, quiet). Each test sets its sequence length, batch sizes, dropouts and steps. */
#ifndef MC_TESTS_TINY_LLAMA_H
#define MC_TESTS_TINY_LLAMA_H

#include "megatron.h"

/* The Llama architecture's switches: RMSNorm, RoPE, SwiGLU, no biases, untied head. */
static inline void tiny_llama_arch(mc_config *c) {
    c->model.normalization = MC_NORM_RMSNORM;
    c->model.position_embedding_type = MC_POS_ROPE;
    c->model.swiglu = true;
    c->model.add_bias_linear = false;
    c->model.untie_embeddings_and_output_weights = true;
}

static inline void tiny_llama_base(mc_config *c) {
    mc_config_init(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 64;
    c->model.ffn_hidden_size = 96;
    c->model.num_attention_heads = 4;
    c->model.group_query_attention = true;
    c->model.num_query_groups = 2;
    c->model.vocab_size = 256;
    tiny_llama_arch(c);
    c->data.mock_data = true;
    c->data.tokenizer_type = MC_TOKENIZER_NULL;
    c->train.eval_iters = 0;
    c->optim.lr = 3e-3;
    c->optim.lr_decay_style = MC_LR_COSINE;
    c->optim.weight_decay = 0.1f;
    c->log.quiet = true;
}

#endif
