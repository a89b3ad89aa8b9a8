/* hf_config.h: a Hugging Face model's config.json <-> Megatron-C's model config.
 *
 * Read: GPT2LMHeadModel (model_type gpt2), LlamaForCausalLM (llama) and MistralForCausalLM
 * (mistral, without a sliding window: the same network as Llama). Both spellings of the
 * RoPE settings are taken: transformers 4's rope_theta + rope_scaling and transformers 5's
 * rope_parameters. Anything the model cannot represent is refused with the field named (a
 * sliding window, a rope type other than Llama 3.1's with its low/high frequency factors 1
 * and 4 over 8192 positions, attention and MLP biases that differ, a partial rotary
 * factor, an activation other than SiLU / GELU): converting such a model would silently
 * give a different network.
 *
 * Write: the config.json of GPT2LMHeadModel or LlamaForCausalLM that transformers loads
 * into the same network, and a generation_config.json. */
#ifndef MC_IO_HF_CONFIG_H
#define MC_IO_HF_CONFIG_H

#include "base/error.h"
#include "io/hf_convert.h"
#include "megatron.h"

/* Special token ids of the config (-1: absent), kept for export. */
typedef struct mc_hf_tokens {
    int bos, eos;
} mc_hf_tokens;

/* Reads path (a config.json) into *arch and *m (every model field set; the rest of m as
 * mc_config_init leaves it must already be there). Errors name the file and the field. */
int mc_hf_config_read(const char *path, mc_hf_arch *arch, mc_model_config *m, mc_hf_tokens *tok, mc_err *err);

/* The family a Megatron-C model config converts to: GPT-2 (LayerNorm, learned positions,
 * GELU) or Llama (RMSNorm, RoPE, SwiGLU); an error for anything else. */
int mc_hf_arch_of(const mc_model_config *m, mc_hf_arch *arch, mc_err *err);

/* config.json's and generation_config.json's text (malloc'd) for the model; dtype is the
 * torch dtype name of the weights written ("float32", "bfloat16", "float16"). */
char *mc_hf_config_text(mc_hf_arch arch, const mc_model_config *m, const mc_hf_tokens *tok, const char *dtype);
char *mc_hf_generation_config_text(const mc_hf_tokens *tok);

#endif
