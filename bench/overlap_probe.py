"""How much of the optimizer step could hide under the next step's forward GEMMs on this GPU.

Times, with CUDA events (median of 7 after warm-up), on the 1.5B bench shape (N = 8192
tokens, h 2048, GQA 32/8 heads of 64, ffn 8192, vocab 128256):
  gemms:   one forward's GEMMs (16 x QKV, attention projection, fc1 [gate|up], fc2; LM head)
  adamw:   torch's fused AdamW over 1.5B fp32 parameters (the same bytes as ours)
  both:    the two at once on two streams
and prints the saving of `both` against running them one after the other. It said 26% of
AdamW could hide (H200, 2026-12-01); Megatron-C's own overlap of its optimizer with the
next forward then measured 0.906x on the 1.5B step and was removed (bench/RESULTS.md):
the probe's GEMMs run back to back at full size, the real forward does not.
    python3 bench/overlap_probe.py
"""
import statistics

import torch

N, H, KV, FFN, V, L = 8192, 2048, 512, 8192, 128256, 16
dev = "cuda"
torch.manual_seed(0)
bf = torch.bfloat16


def rand(*shape):
    return torch.randn(*shape, device=dev, dtype=bf)


x = rand(N, H)
w_qkv, w_o, w_fc1, w_fc2, w_head = rand(H + 2 * KV, H), rand(H, H), rand(2 * FFN, H), rand(H, FFN), rand(V, H)
act = rand(N, FFN)
outs = [torch.empty(N, H + 2 * KV, device=dev, dtype=bf), torch.empty(N, H, device=dev, dtype=bf),
        torch.empty(N, 2 * FFN, device=dev, dtype=bf), torch.empty(N, H, device=dev, dtype=bf)]
logits = torch.empty(2048, V, device=dev, dtype=bf)


def gemms():
    for _ in range(L):
        torch.mm(x, w_qkv.t(), out=outs[0])
        torch.mm(x, w_o.t(), out=outs[1])
        torch.mm(x, w_fc1.t(), out=outs[2])
        torch.mm(act, w_fc2.t(), out=outs[3])
    for c in range(4):
        torch.mm(x[c * 2048:(c + 1) * 2048], w_head.t(), out=logits)


n_params = 1_498_482_688
chunks = 64
params = [torch.randn(n_params // chunks, device=dev, dtype=torch.float32) * 0.02 for _ in range(chunks)]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
opt = torch.optim.AdamW(params, lr=1e-4, fused=True)


def adamw():
    opt.step()


s_main, s_side = torch.cuda.Stream(), torch.cuda.Stream()


def timed(fn):
    t = []
    for i in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if i >= 3:
            t.append(a.elapsed_time(b))
    return statistics.median(t)


def both():
    cur = torch.cuda.current_stream()
    s_main.wait_stream(cur)
    s_side.wait_stream(cur)
    with torch.cuda.stream(s_side):
        adamw()
    with torch.cuda.stream(s_main):
        gemms()
    cur.wait_stream(s_main)
    cur.wait_stream(s_side)


tg, ta, tb = timed(gemms), timed(adamw), timed(both)
print(f"overlap probe: gemms {tg:.2f} ms, adamw {ta:.2f} ms, sequential {tg + ta:.2f} ms, "
      f"concurrent {tb:.2f} ms: saves {tg + ta - tb:.2f} ms ({(tg + ta - tb) / ta:.0%} of adamw)")
