#!/usr/bin/env python3
"""bench/torch_train.py: Megatron-C's own PyTorch reference trainer, for side-by-side throughput.

Trains one of two decoder models on mock data (random tokens) and prints one line
`RESULT {json}`, so a clone of this repository can reproduce the comparisons of
bench/gpu_train.sh without anything from outside it.

  --arch llama (default): RMSNorm, RoPE (--rope-base, default 500000), grouped-query attention
      (--kv-heads), SwiGLU MLP, untied input embedding and LM head, no biases.
  --arch gpt2: LayerNorm, learned absolute positions, GELU(tanh) MLP, biases, LM head tied to
      the input embedding.

Precision as shared/bench/torch_llama.py (so the two print comparable numbers): fp32
parameters (the AdamW master copy is the parameter itself), bf16 autocast for the forward,
the cross-entropy over fp32 logits; fused AdamW (lr 3e-4); torch.compile of the model
(--compile 1, the default); attention through SDPA, causal.

--sdpa picks SDPA's backend: cudnn, flash, efficient, math, default (PyTorch's own choice),
or best (the default): before training, time each backend on this model's attention shape
(forward+backward, bf16, CUDA events; with GQA both with SDPA's enable_gqa and with K/V
expanded to the query heads) and train with the fastest; the choice is printed and is the
RESULT's `sdpa`.

Timing: --warmup steps (the first one compiles), then --steps steps each timed with CUDA
events; the RESULT gives the median. One step is --accum micro-batches of --mbs sequences
and one optimizer step.

FLOPs per step: Megatron's count (training.py num_floating_point_operations at HEAD, the one
Megatron-C's trainer logs, src/train/flops.c), with B = mbs x accum sequences:
  MLP          B s 6 h c f L          (c = 3 with SwiGLU, 2 with GELU)
  projections  B s 6 (h (q + 2k) + q h) L   (q = heads x d, k = kv-heads x d, d = h / heads)
  attention    B s^2 6 q L            (QK^T and PV, halved by the causal mask)
  logits       B s 6 h V
Megatron counts its padded vocabulary (a multiple of 128); here V is --vocab, the head this
model computes (the same for 128256 and 32000; GPT-2's 50257 counts 0.1% less head than
Megatron-C's 50304). shared/bench/torch_llama.py counts differently (6 x matmul parameters x
tokens + 12 L h s tokens: causal attention not halved, norms counted), so its TFLOP/s run
higher than this script's on the same step time: compare tokens/s across the two.

Smoke test on a CPU (no GPU needed; checks that everything runs):
  python3 bench/torch_train.py --device cpu --compile 0 --steps 2 --warmup 1 --layers 2 \
      --hidden 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 --seq 32 --mbs 2 --accum 2
"""
import argparse
import contextlib
import json
import math
import statistics
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # PyTorch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older: only --sdpa default works
    SDPBackend = sdpa_kernel = None

PEAK_TFLOPS = 989.0  # H100/H200 dense bf16: Megatron-C's MFU denominator too


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["llama", "gpt2"], default="llama")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads (GQA groups); default 8 for llama, --heads for gpt2 (which has no GQA)")
    p.add_argument("--ffn", type=int, default=None, help="MLP hidden size; default 4 x --hidden")
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--mbs", type=int, default=4, help="sequences per micro-batch")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (gradient accumulation)")
    p.add_argument("--steps", type=int, default=10, help="timed steps (the RESULT gives their median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first one compiles)")
    p.add_argument("--compile", type=int, default=1, help="1: torch.compile the model")
    p.add_argument("--sdpa", choices=["best", "cudnn", "flash", "efficient", "math", "default"], default="best",
                   help="SDPA backend; best = time each on this attention shape and take the fastest")
    p.add_argument("--rope-base", type=float, default=500000.0, help="RoPE theta (llama)")
    p.add_argument("--tag", default="", help="the RESULT's name")
    p.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke test)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS, help="MFU denominator")
    a = p.parse_args(argv)
    if a.kv_heads is None:
        a.kv_heads = a.heads if a.arch == "gpt2" else 8
    if a.ffn is None:
        a.ffn = 4 * a.hidden
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.heads % a.kv_heads:
        p.error(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    if a.arch == "gpt2" and a.kv_heads != a.heads:
        p.error("--arch gpt2 has no grouped-query attention: --kv-heads must equal --heads")
    if min(a.layers, a.hidden, a.vocab, a.seq, a.mbs, a.accum, a.steps) < 1 or a.warmup < 0:
        p.error("sizes and --steps must be >= 1, --warmup >= 0")
    return a


# ---- attention: SDPA under the chosen backend ------------------------------------------------

class SdpaChoice:
    """The SDPA backend the model uses (None: PyTorch's own choice) and whether K/V are expanded
    to the query heads before the call (for backends that take GQA faster, or only, that way)."""

    def __init__(self, backend=None, expand_kv=False, label="default"):
        self.backend, self.expand_kv, self.label = backend, expand_kv, label

    def context(self):
        if self.backend is None:
            return contextlib.nullcontext()
        return sdpa_kernel(self.backend)


SDPA = SdpaChoice()


def causal_attention(q, k, v):
    """q: (B, n, s, d); k, v: (B, g, s, d) with n a multiple of g. Returns (B, n, s, d)."""
    gqa = k.shape[1] != q.shape[1]
    if gqa and SDPA.expand_kv:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        gqa = False
    with SDPA.context():
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def backend_table():
    if SDPBackend is None:
        raise SystemExit("--sdpa other than default needs torch.nn.attention (PyTorch >= 2.3)")
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def time_attention(choice, B, n, g, s, d, device, iters=10, warm=3):
    """Median ms of forward+backward of the model's attention call under `choice`, bf16."""
    global SDPA
    saved, SDPA = SDPA, choice
    try:
        gen = torch.Generator(device=device).manual_seed(1)
        q = torch.randn(B, n, s, d, device=device, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        k = torch.randn(B, g, s, d, device=device, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        v = torch.randn(B, g, s, d, device=device, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        dout = torch.randn(B, n, s, d, device=device, dtype=torch.bfloat16, generator=gen)

        def once():
            torch.autograd.grad(causal_attention(q, k, v), (q, k, v), dout)

        for _ in range(warm):
            once()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for _ in range(iters):
            e0.record()
            once()
            e1.record()
            torch.cuda.synchronize()
            ms.append(e0.elapsed_time(e1))
        return statistics.median(ms)
    finally:
        SDPA = saved


def choose_sdpa(a, device):
    """Sets SDPA from --sdpa; for `best`, times the candidates and keeps the fastest."""
    global SDPA
    if a.sdpa == "default":
        SDPA = SdpaChoice()
        return
    if device.type != "cuda":  # the fused backends are CUDA's: on a CPU, PyTorch's own choice
        if a.sdpa != "math":
            print(f"sdpa: --sdpa {a.sdpa} on {device.type}: PyTorch's default backend", flush=True)
            SDPA = SdpaChoice()
        else:
            SDPA = SdpaChoice(backend_table()["math"], label="math")
        return
    table = backend_table()
    if a.sdpa != "best":
        SDPA = SdpaChoice(table[a.sdpa], label=a.sdpa)
        return
    B, n, g, s, d = a.mbs, a.heads, a.kv_heads, a.seq, a.hidden // a.heads
    names = ["cudnn", "flash", "efficient"]
    # math materializes the B n s^2 scores (several copies, fp32 among them): time it only where
    # that is small; at long sequences it is far slower than any fused backend anyway
    if B * n * s * s <= 2 ** 30:
        names.append("math")
    else:
        print(f"sdpa: math not timed (B n s^2 = {B * n * s * s:.3g} scores)", flush=True)
    results = []
    for name in names:
        for expand in ([False, True] if g != n else [False]):
            label = name + ("+expand-kv" if expand else "")
            try:
                with warnings.catch_warnings():  # a refusing backend warns why, then raises: one line below
                    warnings.simplefilter("ignore")
                    ms = time_attention(SdpaChoice(table[name], expand, label), B, n, g, s, d, device)
                results.append((ms, label, name, expand))
                print(f"sdpa: {label:22s} {ms:9.3f} ms fwd+bwd", flush=True)
            except Exception as e:  # this backend does not take the shape (or this build lacks it)
                print(f"sdpa: {label:22s} unavailable: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}",
                      flush=True)
            torch.cuda.empty_cache()
    if not results:
        print("sdpa: no backend ran the shape standalone: PyTorch's default", flush=True)
        SDPA = SdpaChoice()
        return
    ms, label, name, expand = min(results)
    print(f"sdpa: best = {label} ({ms:.3f} ms fwd+bwd at B={B} heads={n}/{g} s={s} d={d})", flush=True)
    SDPA = SdpaChoice(table[name], expand, label)


# ---- models -----------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_tables(seq, head_dim, base):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    ang = torch.cat((ang, ang), dim=-1)  # rotate-half layout (Megatron's and HF's default)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class LlamaLayer(nn.Module):
    def __init__(self, a):
        super().__init__()
        h, self.n, self.g, self.d = a.hidden, a.heads, a.kv_heads, a.hidden // a.heads
        self.attn_norm, self.mlp_norm = RMSNorm(h), RMSNorm(h)
        self.qkv = nn.Linear(h, (self.n + 2 * self.g) * self.d, bias=False)  # Megatron's linear_qkv
        self.proj = nn.Linear(self.n * self.d, h, bias=False)
        self.fc1 = nn.Linear(h, 2 * a.ffn, bias=False)  # gate and up, as Megatron's SwiGLU fc1
        self.fc2 = nn.Linear(a.ffn, h, bias=False)

    def forward(self, x, cos, sin):
        B, s, _ = x.shape
        qkv = self.qkv(self.attn_norm(x))
        q, k, v = qkv.split([self.n * self.d, self.g * self.d, self.g * self.d], dim=-1)
        q = apply_rope(q.view(B, s, self.n, self.d).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, s, self.g, self.d).transpose(1, 2), cos, sin)
        v = v.view(B, s, self.g, self.d).transpose(1, 2)
        o = causal_attention(q, k, v).transpose(1, 2).reshape(B, s, self.n * self.d)
        x = x + self.proj(o)
        gate, up = self.fc1(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab = a.vocab
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(LlamaLayer(a) for _ in range(a.layers))
        self.final_norm = RMSNorm(a.hidden)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)  # untied
        cos, sin = rope_tables(a.seq, a.hidden // a.heads, a.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        logits = self.head(self.final_norm(x))
        return F.cross_entropy(logits.float().view(-1, self.vocab), targets.reshape(-1))


class GPT2Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        h, self.n, self.d = a.hidden, a.heads, a.hidden // a.heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, a.ffn), nn.Linear(a.ffn, h)

    def forward(self, x):
        B, s, h = x.shape
        q, k, v = (t.view(B, s, self.n, self.d).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(h, dim=-1))
        x = x + self.proj(causal_attention(q, k, v).transpose(1, 2).reshape(B, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab = a.vocab
        self.wte, self.wpe = nn.Embedding(a.vocab, a.hidden), nn.Embedding(a.seq, a.hidden)
        self.layers = nn.ModuleList(GPT2Layer(a) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.hidden)
        self.register_buffer("pos", torch.arange(a.seq), persistent=False)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(self.pos[: tokens.shape[1]])
        for layer in self.layers:
            x = layer(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, self.vocab), targets.reshape(-1))


def init_weights(model, std=0.02):
    """Megatron's default init: normal(0, 0.02) matrices and embeddings, zero biases, unit norms."""
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, std=std)
            if getattr(mod, "bias", None) is not None:
                nn.init.zeros_(mod.bias)


def megatron_flops(a):
    """Model FLOPs of one optimizer step: Megatron's formula (see the module docstring)."""
    B, s, h, L = a.mbs * a.accum, a.seq, a.hidden, a.layers
    d = h // a.heads
    q, k = a.heads * d, a.kv_heads * d
    c = 3 if a.arch == "llama" else 2
    mlp = B * s * 6 * h * c * a.ffn * L
    proj = B * s * 6 * (h * (q + 2 * k) + q * h) * L
    core = B * s * s * 6 * q * L
    logits = B * s * 6 * h * a.vocab
    return float(mlp + proj + core + logits)


# ---- training ---------------------------------------------------------------------------------

def make_optimizer(model, lr, device):
    try:
        return torch.optim.AdamW(model.parameters(), lr=lr, fused=True), "fused"
    except (RuntimeError, TypeError, ValueError):
        if device.type == "cuda":
            raise
        return torch.optim.AdamW(model.parameters(), lr=lr), "foreach"  # an old CPU build


def main(argv=None):
    a = parse_args(argv)
    device = torch.device(a.device)
    torch.manual_seed(a.seed)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}",
          flush=True)

    choose_sdpa(a, device)

    model = (GPT2(a) if a.arch == "gpt2" else Llama(a)).to(device)
    init_weights(model)
    nparams = sum(p.numel() for p in model.parameters())
    flops = megatron_flops(a)
    print(f"model: {a.arch}, {nparams / 1e6:.1f}M parameters, {flops / 1e12:.2f} TFLOP per step "
          f"({a.mbs} x {a.accum} x {a.seq} tokens)", flush=True)
    fwd = torch.compile(model) if a.compile else model
    opt, opt_kind = make_optimizer(model, a.lr, device)

    # mock data: fresh random tokens for every micro-batch (made on the device, outside the
    # compiled model: microseconds), so the loss stays near ln(vocab) as on Megatron-C's mock data
    gen = torch.Generator(device=device).manual_seed(a.seed + 1)

    def mock_batch():
        t = torch.randint(0, a.vocab, (a.mbs, a.seq + 1), device=device, generator=gen)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()

    def train_step():
        for _ in range(a.accum):
            tokens, targets = mock_batch()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = fwd(tokens, targets)
            (loss / a.accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        train_step()
    sync()
    warmup_s = time.perf_counter() - t0

    step_ms, losses = [], []
    for _ in range(a.steps):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            loss = train_step()
            e1.record()
            e1.synchronize()
            step_ms.append(e0.elapsed_time(e1))
        else:
            t = time.perf_counter()
            loss = train_step()
            step_ms.append((time.perf_counter() - t) * 1e3)
        losses.append(loss)
    ms = statistics.median(step_ms)
    tokens = a.mbs * a.accum * a.seq
    tflops = flops / (ms * 1e-3) / 1e12
    loss_last = float(losses[-1])
    # GiB (2**30 bytes), named mem_gb as shared/bench/torch_llama.py and gpu_train.sh name it:
    # the same unit as Megatron-C's "max allocated" (Megatron's MB are 2**20 bytes) / 1024
    mem = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None
    result = dict(name=a.tag, step_ms=ms, tok_s=tokens / (ms * 1e-3), tflops=tflops, mfu=tflops / a.peak_tflops,
                  mem_gb=mem, sdpa=SDPA.label, loss_last=loss_last if math.isfinite(loss_last) else None,
                  arch=a.arch, params=nparams, flops_per_step=flops, layers=a.layers, hidden=a.hidden,
                  heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, vocab=a.vocab, seq=a.seq, mbs=a.mbs,
                  accum=a.accum, steps=a.steps, warmup=a.warmup, compile=a.compile, optimizer=opt_kind,
                  warmup_s=warmup_s, step_ms_min=min(step_ms), step_ms_max=max(step_ms),
                  torch=torch.__version__, device=device.type)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
