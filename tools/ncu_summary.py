"""Summarizes an Nsight Compute CSV (--metrics gpu__time_duration.sum --csv) of a
Megatron-C training run: the kernels of one steady iteration (between the last two
launches of the AdamW kernel, or the last third of the run), grouped by kernel name, with
their total time, count and share, and the sum.
  python3 tools/ncu_summary.py run.csv [top]"""
import csv, sys, collections, re

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
rows = []
with open(path, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "ns")
    v = float(r["Metric Value"].replace(",", ""))
    ns = v * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
    rows.append((int(r["ID"]), r["Kernel Name"], ns))
rows.sort()
opt = [i for i, (_, n, _) in enumerate(rows) if "adamw" in n.lower()]
if len(opt) >= 2:
    sel = rows[opt[-2] + 1: opt[-1] + 1]
else:
    sel = rows[2 * len(rows) // 3:]
short = lambda n: re.sub(r"\(.*", "", re.sub(r"<.*", "", n))[:70] + ("<...>" if "<" in n else "")
agg = collections.OrderedDict()
for _, n, ns in sel:
    k = short(n) if not any(x in n.lower() for x in ("gemm", "nvjet", "sm90_", "cutlass")) else "cuBLASLt GEMM kernels"
    t, c = agg.get(k, (0.0, 0))
    agg[k] = (t + ns, c + 1)
total = sum(t for t, _ in agg.values())
print(f"kernels in one iteration: {len(sel)}, summed kernel time {total / 1e6:.2f} ms")
for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"{t / 1e6:9.3f} ms {100 * t / total:5.1f}% {c:5d}x  {k}")
