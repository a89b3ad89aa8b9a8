"""Each GEMM of our step beside PyTorch's matmul at the same shape, from megatron-c's GEMM
profile (MC_GEMM_PROFILE=1 lines on stderr, read from the file given):

    python3 bench/torch_gemms.py run.log [iterations]

For every profiled GEMM (row-major C[m,n] = op(A) op(B), transposes as ours): our mean
time per call, torch's median (CUDA events, after warm-up; bf16 in, and F32 out where ours
writes F32 and torch's mm takes out_dtype, else bf16 out), and ours / torch's time. Our
epilogues (bias, GELU, bias gradients, beta = 1 accumulation) are extra work torch's plain
matmul does not do; the column says which. With the run's iteration count the total is
also given per step."""
import re, sys, torch

def median_ms(fn, reps=30):
    for _ in range(5): fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]

LINE = re.compile(r"gemm profile: +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +m=(\d+) n=(\d+) k=(\d+) ([NT])([NT]) "
                  r"(\w+)->(\w+) (.*?) \| (.*)$")
rows = [LINE.search(l) for l in open(sys.argv[1])]
rows = [r for r in rows if r]
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if not rows:
    sys.exit(f"torch_gemms.py: no 'gemm profile' lines in {sys.argv[1]} (was MC_GEMM_PROFILE=1 set?)")
bf = torch.bfloat16
def mm_f32_supported():
    """Whether this torch's mm writes F32 from bf16 inputs (out_dtype)."""
    a = torch.ones(16, 16, device="cuda", dtype=bf)
    try:
        torch.mm(a, a, out_dtype=torch.float32)
        return True
    except (TypeError, RuntimeError):
        return False
f32_out = mm_f32_supported()
tot_ours = tot_torch = 0.0
print(f"{'calls':>6} {'ours us':>9} {'torch us':>9} {'ours/torch':>10} {'ours TF/s':>9}  gemm")
for r in rows:
    calls, _, mean_us = int(r[1]), float(r[2]), float(r[3])
    m, n, k, ta, tb, cdt, epi, algo = int(r[6]), int(r[7]), int(r[8]), r[9] == "T", r[10] == "T", r[12], r[13], r[14]
    a = torch.randn(k, m, device="cuda", dtype=bf).t() if ta else torch.randn(m, k, device="cuda", dtype=bf)
    b = torch.randn(n, k, device="cuda", dtype=bf).t() if tb else torch.randn(k, n, device="cuda", dtype=bf)
    if cdt == "F32" and f32_out:
        fn, out = (lambda: torch.mm(a, b, out_dtype=torch.float32)), "f32"
    else:
        fn, out = (lambda: a @ b), "bf16"
    t_us = median_ms(fn) * 1e3
    tot_ours += calls * mean_us; tot_torch += calls * t_us
    print(f"{calls:6d} {mean_us:9.1f} {t_us:9.1f} {mean_us / t_us:10.3f} {2 * m * n * k / mean_us / 1e6:9.1f}  "
          f"m={m} n={n} k={k} {r[9]}{r[10]} ->{cdt} {epi} (torch ->{out}) | {algo}")
    del a, b
per = f", per iteration: ours {tot_ours / iters / 1e3:.2f} ms, torch {tot_torch / iters / 1e3:.2f} ms" if iters else ""
print(f"RESULT gemms: ours {tot_ours / 1e3:.2f} ms, torch {tot_torch / 1e3:.2f} ms, ours/torch "
      f"{tot_ours / tot_torch:.3f}{per}")
