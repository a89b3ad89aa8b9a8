#!/usr/bin/env python3
"""make_golden.py: golden tensors for Megatron-C's reference-parity tests.

For a tiny GPT-2 (GPT2LMHeadModel, tied embeddings) and a tiny Llama (LlamaForCausalLM,
GQA, untied head) with fixed random weights, writes into tests/fixtures/golden/:

  {family}_weights.safetensors    every parameter, float32, Hugging Face names
  {family}_reference.safetensors  tokens, labels       I32 [B, S]
                                  logits               F32 [B, S, V]
                                  loss                 F64 []   mean cross-entropy
                                  grad.<hf name>       F32      d loss / d parameter
                                  train.losses         F64 [5]  loss before each AdamW update
                                  train.grad_norms     F64 [5]  global grad norm, before clipping
                                  train.lrs            F64 [5]  learning rate of each update
                                  train.final_loss     F64 []   loss after the 5 updates
  {family}_config.json            the model and the run in Megatron flag terms

The math runs on the CPU in float64 (weights are float32 values). Hugging Face's Llama
computes RMSNorm and the RoPE angles in float32 even in a float64 model; those two modules
are swapped for float64 equivalents (checked against the unmodified float32 model).

Training: AdamW (lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1; none for biases
and 1-D weights, as Megatron), global-norm clipping at 1.0 as Megatron
(coeff = 1 / (norm + 1e-6), applied only when < 1), and Megatron's
OptimizerParamScheduler counted in samples (global batch 2): warmup 4 samples from lr 0,
cosine decay to 1e-3 over 10 samples. Update k (1-based) uses get_lr((k - 1) * 2).
Every iteration sees the same batch.

Deterministic: two runs write identical files. Usage:
    python3 tools/reference/make_golden.py [--out DIR]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

SEED = 1234
BATCH, SEQ, VOCAB = 2, 16, 256
ITERS = 5
OPT = dict(lr=1e-2, min_lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip_grad=1.0,
           warmup_samples=4, decay_samples=10, warmup_init=0.0, global_batch=BATCH)


# ---- models -------------------------------------------------------------------------

def build_gpt2():
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     layer_norm_epsilon=1e-5, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                     attn_implementation="eager")
    model = GPT2LMHeadModel(cfg)
    megatron = dict(
        hf_architecture="GPT2LMHeadModel", num_layers=2, hidden_size=64, ffn_hidden_size=256,
        num_attention_heads=4, group_query_attention=False, num_query_groups=4, kv_channels=16,
        seq_length=SEQ, max_position_embeddings=32, vocab_size=VOCAB, make_vocab_size_divisible_by=128,
        padded_vocab_size=256, normalization="LayerNorm", norm_epsilon=1e-5,
        position_embedding_type="learned_absolute", activation="gelu_tanh", openai_gelu=True, swiglu=False,
        add_bias_linear=True, untie_embeddings_and_output_weights=False, attention_dropout=0.0,
        hidden_dropout=0.0)
    flags = ("--num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 "
             "--seq-length 16 --max-position-embeddings 32 --vocab-size 256 --normalization LayerNorm "
             "--norm-epsilon 1e-5 --position-embedding-type learned_absolute --openai-gelu "
             "--attention-dropout 0 --hidden-dropout 0")
    return model, megatron, flags


class RMSNorm64(torch.nn.Module):
    """LlamaRMSNorm without its float32 cast."""

    def __init__(self, weight, eps):
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class RotaryEmbedding64(torch.nn.Module):
    """LlamaRotaryEmbedding (default rope type) with the angles in float64."""

    def __init__(self, head_dim, base):
        super().__init__()
        self.inv_freq64 = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq64
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def build_llama():
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attention_bias=False, mlp_bias=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    rope = getattr(cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    assert theta == 10000.0 and rope.get("rope_type", "default") == "default", (theta, rope)
    megatron = dict(
        hf_architecture="LlamaForCausalLM", num_layers=2, hidden_size=64, ffn_hidden_size=96,
        num_attention_heads=4, group_query_attention=True, num_query_groups=2, kv_channels=16,
        seq_length=SEQ, max_position_embeddings=64, vocab_size=VOCAB, make_vocab_size_divisible_by=128,
        padded_vocab_size=256, normalization="RMSNorm", norm_epsilon=1e-5, position_embedding_type="rope",
        rotary_base=10000.0, rotary_percent=1.0, activation="swiglu", swiglu=True, add_bias_linear=False,
        untie_embeddings_and_output_weights=True, attention_dropout=0.0, hidden_dropout=0.0)
    flags = ("--num-layers 2 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4 "
             "--group-query-attention --num-query-groups 2 --seq-length 16 --max-position-embeddings 64 "
             "--vocab-size 256 --normalization RMSNorm --norm-epsilon 1e-5 --position-embedding-type rope "
             "--rotary-base 10000 --swiglu --disable-bias-linear --untie-embeddings-and-output-weights "
             "--attention-dropout 0 --hidden-dropout 0")
    return model, megatron, flags


def make_llama_float64(model):
    """Swaps the float32-internal modules of HF Llama for float64 ones (same weights)."""
    inner = model.model
    eps = model.config.rms_norm_eps
    for layer in inner.layers:
        layer.input_layernorm = RMSNorm64(layer.input_layernorm.weight, eps)
        layer.post_attention_layernorm = RMSNorm64(layer.post_attention_layernorm.weight, eps)
    inner.norm = RMSNorm64(inner.norm.weight, eps)
    assert hasattr(inner, "rotary_emb"), "this transformers version has no model.rotary_emb"
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    inner.rotary_emb = RotaryEmbedding64(head_dim, 10000.0)


def randomize(model, rng):
    """Every parameter: norm weights 1 + 0.1 N, biases 0.1 N, matrices 0.1 N; float32 values."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = rng.standard_normal(tuple(p.shape))
            if name.endswith(".bias"):
                v = 0.1 * z
            elif p.dim() == 1:
                v = 1.0 + 0.1 * z
            else:
                v = 0.1 * z
            p.copy_(torch.from_numpy(v.astype(np.float32)))


# ---- Megatron's optimizer pieces ------------------------------------------------------

def megatron_lr(num_steps):
    """OptimizerParamScheduler.get_lr, cosine style, steps counted in samples."""
    warm, decay = OPT["warmup_samples"], OPT["decay_samples"]
    max_lr, min_lr, init_lr = OPT["lr"], OPT["min_lr"], OPT["warmup_init"]
    if warm > 0 and num_steps <= warm:
        return init_lr + (max_lr - init_lr) * float(num_steps) / float(warm)
    if num_steps > decay:
        return min_lr
    ratio = float(num_steps - warm) / float(decay - warm)
    coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coeff * (max_lr - min_lr)


def clip_grads(params):
    """Megatron's clip_grad_norm_fp32: returns the norm before clipping."""
    total = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
    coeff = OPT["clip_grad"] / (total + 1.0e-6)
    if coeff < 1.0:
        with torch.no_grad():
            for p in params:
                p.grad.mul_(coeff)
    return total


def lm_loss(model, tokens, labels):
    logits = model(input_ids=tokens, use_cache=False).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="mean")
    return logits, loss


# ---- one family -----------------------------------------------------------------------

def run_family(family, build, out_dir, seed):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    model, megatron, flags = build()
    model.eval()  # no dropout (all rates are 0 anyway)
    randomize(model, rng)
    seq = rng.randint(0, VOCAB, size=(BATCH, SEQ + 1))
    tokens_np = seq[:, :SEQ].astype(np.int32)
    labels_np = seq[:, 1:].astype(np.int32)
    tokens = torch.from_numpy(tokens_np).long()
    labels = torch.from_numpy(labels_np).long()

    if family == "gpt2":
        assert model.lm_head.weight is model.transformer.wte.weight, "GPT-2 head is not tied"

    # Float32 HF forward, unmodified: a check that the float64 model is the same model.
    with torch.no_grad():
        logits32, loss32 = lm_loss(model, tokens, labels)

    weights = {n: p.detach().numpy().astype(np.float32).copy() for n, p in model.named_parameters()}
    model.double()
    if family == "llama":
        make_llama_float64(model)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    assert sorted(names) == sorted(weights), "parameter set changed"

    decay = [p for n, p in model.named_parameters() if not (n.endswith(".bias") or p.dim() == 1)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias") or p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.0, betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"], foreach=False)

    losses, grad_norms, lrs = [], [], []
    ref = {}
    for k in range(1, ITERS + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = lm_loss(model, tokens, labels)
        loss.backward()
        if k == 1:
            ref["logits"] = logits.detach().numpy().astype(np.float32)
            ref["loss"] = np.array(loss.item(), dtype=np.float64)
            for n, p in model.named_parameters():
                ref["grad." + n] = p.grad.detach().numpy().astype(np.float32)
            max_dev = float((logits.detach() - logits32.double()).abs().max())
            assert max_dev < 1e-4, f"{family}: float64 and float32 HF logits differ by {max_dev}"
        norm = clip_grads(params)
        lr = megatron_lr((k - 1) * OPT["global_batch"])
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(loss.item())
        grad_norms.append(norm)
        lrs.append(lr)
    with torch.no_grad():
        _, final = lm_loss(model, tokens, labels)

    ref["tokens"] = tokens_np
    ref["labels"] = labels_np
    ref["train.losses"] = np.array(losses, dtype=np.float64)
    ref["train.grad_norms"] = np.array(grad_norms, dtype=np.float64)
    ref["train.lrs"] = np.array(lrs, dtype=np.float64)
    ref["train.final_loss"] = np.array(final.item(), dtype=np.float64)

    # One metadata key only: the official writer emits __metadata__ in hash-map order.
    meta = {"format": "pt"}
    wfile, rfile = f"{family}_weights.safetensors", f"{family}_reference.safetensors"
    save_file(weights, os.path.join(out_dir, wfile), metadata=meta)
    save_file(ref, os.path.join(out_dir, rfile), metadata=meta)
    for f in (wfile, rfile):
        os.chmod(os.path.join(out_dir, f), 0o644)

    config = {
        "family": family,
        "files": {"weights": wfile, "reference": rfile},
        "model": megatron,
        "megatron_flags": flags + (" --micro-batch-size 2 --global-batch-size 2 --train-samples 10 "
                                   "--lr 1e-2 --min-lr 1e-3 --lr-decay-style cosine --lr-warmup-samples 4 "
                                   "--lr-decay-samples 10 --lr-warmup-init 0 --weight-decay 0.1 "
                                   "--adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --clip-grad 1.0"),
        "batch": {"micro_batch_size": BATCH, "global_batch_size": BATCH, "seq_length": SEQ,
                  "labels": "next token: tokens = seq[:, :16], labels = seq[:, 1:17]"},
        "optimizer": {"optimizer": "adamw", "lr": OPT["lr"], "min_lr": OPT["min_lr"], "lr_decay_style": "cosine",
                      "lr_warmup_samples": OPT["warmup_samples"], "lr_decay_samples": OPT["decay_samples"],
                      "lr_warmup_init": OPT["warmup_init"], "weight_decay": OPT["weight_decay"],
                      "adam_beta1": OPT["beta1"], "adam_beta2": OPT["beta2"], "adam_eps": OPT["eps"],
                      "clip_grad": OPT["clip_grad"], "train_iters": ITERS,
                      "no_weight_decay": "names ending in .bias and 1-D parameters"},
        "reference": {"loss": float(ref["loss"]), "losses": losses, "grad_norms": grad_norms, "lrs": lrs,
                      "final_loss": float(final.item()), "hf_float32_loss": float(loss32.item())},
        "seed": seed,
    }
    with open(os.path.join(out_dir, f"{family}_config.json"), "w") as f:
        json.dump(config, f, indent=1, sort_keys=True)
        f.write("\n")

    nparams = sum(v.size for v in weights.values())
    print(f"{family}: {len(weights)} tensors, {nparams} parameters; loss {ref['loss']:.12f} "
          f"(HF float32: {loss32.item():.8f}, max |logit diff| {max_dev:.2e})")
    for k in range(ITERS):
        print(f"  iter {k + 1}: loss {losses[k]:.12f}  grad_norm {grad_norms[k]:.10f}  lr {lrs[k]:.6g}")
    print(f"  after {ITERS} updates: loss {final.item():.12f}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "fixtures", "golden"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out, help="output directory (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # deterministic reductions
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}, "
          f"numpy {np.__version__}; writing {args.out}")
    run_family("gpt2", build_gpt2, args.out, args.seed)
    run_family("llama", build_llama, args.out, args.seed + 1)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in sorted(os.listdir(args.out)))
    print(f"fixtures: {total} bytes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
