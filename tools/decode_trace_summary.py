"""Summarizes a kernel_trace.c CSV of a `megatron-c generate` run on the GPU: its decode
steps (each window ends at an argmax_rows kernel, the step's greedy choice; the first
`skip` are left out: the prompts' prefills (one each; bench/gpu_generate.sh passes its batch + 3)
and the eager steps before a graph is captured), their length, the time some kernel ran in
them, and the kernels by name, per step.
  python3 tools/decode_trace_summary.py trace.csv [skip=4] [top=15]"""
import collections, statistics, sys

from kernel_names import demangler, read_records, short as short_name

path = sys.argv[1]
skip = int(sys.argv[2]) if len(sys.argv) > 2 else 4
top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
rows = [(s, e, n) for s, e, _, n in read_records(path, ("kernel",))]
if not rows:
    sys.exit(f"{path}: no kernel records")
demangle = demangler(n for _, _, n in rows)


def short(n):
    return short_name(demangle(n))


ends = [e for s, e, n in rows if "argmax_rows" in demangle(n)]
windows = list(zip(ends, ends[1:]))[skip:]
if not windows:
    sys.exit(f"{path}: {len(ends)} argmax kernels, no decode step after the first {skip}")
lengths, busy, per = [], [], collections.Counter()
for lo, hi in windows:
    inside = [(max(s, lo), min(e, hi), n) for s, e, n in rows if e > lo and s < hi]
    lengths.append((hi - lo) / 1e6)
    busy.append(sum(e - s for s, e, _ in inside) / 1e6)
    for s, e, n in inside:
        per[short(n)] += (e - s) / 1e6
k = len(windows)
print(f"decode steps: {k}, median {statistics.median(lengths):.3f} ms a step, kernels running "
      f"{statistics.median(busy):.3f} ms of it ({statistics.median(busy) / statistics.median(lengths):.0%})")
for name, ms in per.most_common(top):
    print(f"  {ms / k:8.4f} ms a step  {name}")
