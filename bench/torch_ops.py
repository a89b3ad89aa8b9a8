"""PyTorch's kernels for the ops Megatron-C writes itself, timed with CUDA events (median of
20 after warm-up) on the GPU benchmark's shapes, so that our kernel timings
(MC_BENCH_ATTN=1 test_cuda_attention, MC_TEST_BENCH=1 test_backend_equivalence) have a
reference taken in the same call:
  - SDPA flash attention (causal, GQA) forward and forward+backward, bf16;
  - fused AdamW (torch.optim.AdamW(fused=True)) over the 1.5B shape's fp32 parameters.
Prints one `RESULT {json}` line per measurement."""
import json, statistics
import torch
import torch.nn.functional as F

dev = "cuda"


def timed(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def attention(name, B, H, G, S, d):
    q = torch.randn(B, H, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, G, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, G, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(B, H, S, d, device=dev, dtype=torch.bfloat16)
    gqa = G != H
    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    def fwdbwd():
        o = fwd()
        torch.autograd.grad(o, (q, k, v), do)
    flops_fwd = 4 * B * H * S * S * d / 2
    tf, tb = timed(fwd), timed(fwdbwd)
    print("RESULT " + json.dumps(dict(op="sdpa", shape=name, fwd_ms=tf, fwdbwd_ms=tb, bwd_ms=tb - tf,
                                      fwd_tflops=flops_fwd / tf / 1e9, fwdbwd_tflops=3.5 * flops_fwd / tb / 1e9)))


def adamw(n_params):
    # one flat fp32 tensor per layer-ish chunk: fused AdamW's multi-tensor path
    chunks = [torch.nn.Parameter(torch.randn(n, device=dev)) for n in split(n_params, 64)]
    for p in chunks:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(chunks, lr=1e-4, fused=True)
    t = timed(opt.step, iters=10, warmup=3)
    print("RESULT " + json.dumps(dict(op="adamw_fused", params=n_params, ms=t, gbps=30 * n_params / t / 1e6)))


def split(n, k):
    base = n // k
    return [base] * (k - 1) + [n - base * (k - 1)]


if __name__ == "__main__":
    attention("llama", 4, 32, 8, 2048, 64)
    attention("gpt2", 64, 12, 12, 1024, 64)
    attention("d128", 4, 16, 4, 2048, 128)
    adamw(1_498_482_688)
