#!/usr/bin/env python3
"""make_hf_fixtures.py: tiny Hugging Face models, written by transformers itself, and their
logits, for the tests of `megatron-c convert` (tests/test_hf_checkpoint.c).

For each family it writes into tests/fixtures/hf/{family}/:
  config.json, generation_config.json      as save_pretrained writes them
  model.safetensors                        float32 weights (gpt2: sharded, with the index,
                                           to exercise model.safetensors.index.json)
  reference.safetensors                    tokens  I32 [2, 24]  random ids
                                           logits  F32 [2, 24, V] the model's float32 logits
                                           greedy  I32 [2, 16]  generate(do_sample=False) after
                                                                the first 8 tokens of each row
  greedy.json                              the same prompts and greedy tokens as JSON

Families (vocabularies of 300, not a multiple of 128, so import pads and export strips):
  gpt2         GPT2LMHeadModel, tanh GELU, tied head
  llama2       LlamaForCausalLM, no GQA, untied head, RoPE base 10000
  llama31      LlamaForCausalLM, GQA, Llama 3.1 RoPE scaling (factor 8, 1/4, 8192), base 500000
  llama32_tied LlamaForCausalLM, GQA, tied head (Llama 3.2 1B's choice)
  mistral      MistralForCausalLM without a sliding window, GQA, base 1e6

Weights are drawn N(0, 0.1) (initializer_range) so that the logits are far from uniform.
Deterministic: two runs write identical tensors. Usage:
    python3 tools/reference/make_hf_fixtures.py [--out tests/fixtures/hf]
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM)

VOCAB, BATCH, SEQ, PROMPT, NEW = 300, 2, 24, 8, 16
COMMON = dict(vocab_size=VOCAB, initializer_range=0.1, bos_token_id=1, eos_token_id=2, attn_implementation="eager")


def llama_like(cls_cfg, **kw):
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=128, rms_norm_eps=1e-6)
    base.update(kw)
    return cls_cfg(**COMMON, **base)


def families():
    yield "gpt2", GPT2LMHeadModel, GPT2Config(**COMMON, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                               activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                               attn_pdrop=0.0, layer_norm_epsilon=1e-5)
    yield "llama2", LlamaForCausalLM, llama_like(LlamaConfig, num_key_value_heads=4, rope_theta=10000.0,
                                                 tie_word_embeddings=False)
    yield "llama31", LlamaForCausalLM, llama_like(
        LlamaConfig, num_key_value_heads=2, rope_theta=500000.0, tie_word_embeddings=False,
        max_position_embeddings=16384,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192))
    yield "llama32_tied", LlamaForCausalLM, llama_like(LlamaConfig, num_key_value_heads=2, rope_theta=500000.0,
                                                       tie_word_embeddings=True)
    yield "mistral", MistralForCausalLM, llama_like(MistralConfig, num_key_value_heads=2, rope_theta=1e6,
                                                    sliding_window=None, tie_word_embeddings=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/hf")
    a = ap.parse_args()
    for i, (name, cls, cfg) in enumerate(families()):
        torch.manual_seed(1000 + i)
        model = cls(cfg).float().eval()
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        # gpt2 in shards, to read model.safetensors.index.json
        model.save_pretrained(d, safe_serialization=True, max_shard_size="100KB" if name == "gpt2" else "50GB")
        g = torch.Generator().manual_seed(7 + i)
        tokens = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
        with torch.no_grad():
            logits = model(tokens).logits.float()
            greedy = model.generate(tokens[:, :PROMPT], attention_mask=torch.ones_like(tokens[:, :PROMPT]),
                                    do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0,
                                    eos_token_id=None)[:, PROMPT:]
        save_file({"tokens": tokens.to(torch.int32).contiguous(), "logits": logits.contiguous(),
                   "greedy": greedy.to(torch.int32).contiguous()}, os.path.join(d, "reference.safetensors"))
        with open(os.path.join(d, "greedy.json"), "w") as f:  # for shell tests, which read no safetensors
            json.dump({"prompts": tokens[:, :PROMPT].tolist(), "greedy": greedy.tolist()}, f)
            f.write("\n")
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters -> {d}")


if __name__ == "__main__":
    main()
