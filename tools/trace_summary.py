"""Summarizes a kernel_trace.c CSV (CUPTI activity records of a Megatron-C training run on
the GPU, kernels running as they do in training, not replayed one by one): for each steady
iteration (windows ending at the end of each AdamW kernel; the first `skip` windows are
left out as warm-up), the window's length, the time some kernel, memset or memcpy was
running (the union of their intervals), the idle rest and the largest gaps with the work
on either side, then the kernels of the last window grouped by name.
  python3 tools/trace_summary.py trace.csv [skip=2] [top=30]"""
import collections, sys

from kernel_names import demangler, read_records, short as short_name

path = sys.argv[1]
skip = int(sys.argv[2]) if len(sys.argv) > 2 else 2
top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
rows = read_records(path)
if not rows:
    sys.exit(f"{path}: no records")

demangle = demangler(n for _, _, k, n in rows if k == "kernel")


def short(n):
    return short_name(demangle(n))


ends = []  # end of each run of consecutive AdamW kernels
for i, (s, e, k, n) in enumerate(rows):
    if "adamw" in demangle(n).lower():
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        if nxt is None or "adamw" not in demangle(nxt[3]).lower():
            ends.append(e)
if len(ends) < skip + 2:
    sys.exit(f"{path}: {len(ends)} iterations found (AdamW kernels), need at least {skip + 2}")


def window(lo, hi):
    sel = [r for r in rows if r[0] >= lo and r[1] <= hi]
    busy, cur_s, cur_e, gaps, prev = 0, None, None, [], None
    for s, e, k, n in sel:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
                gaps.append((s - cur_e, short(prev[3]), short(n)))
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
        prev = (s, e, k, n)
    if cur_e is not None:
        busy += cur_e - cur_s
    if sel:  # from the previous iteration's AdamW to this iteration's first work
        gaps.append((sel[0][0] - lo, "the previous iteration's AdamW", short(sel[0][3])))
    return sel, busy, gaps


print(f"{len(rows)} records, {len(ends)} iterations")
for i in range(skip, len(ends) - 1):
    lo, hi = ends[i], ends[i + 1]
    sel, busy, gaps = window(lo, hi)
    span = hi - lo
    ksum = sum(e - s for s, e, k, _ in sel if k == "kernel")
    print(f"iteration window {i + 1}: {span / 1e6:.2f} ms, busy {busy / 1e6:.2f} ms ({100 * busy / span:.1f}%), "
          f"idle {(span - busy) / 1e6:.2f} ms in {len(gaps)} gaps, kernel sum {ksum / 1e6:.2f} ms, "
          f"{len(sel)} records")
sel, busy, gaps = window(ends[-2], ends[-1])
gaps.sort(reverse=True)
hist = collections.Counter()
for g, _, _ in gaps:
    hist["<2us" if g < 2000 else "2-5us" if g < 5000 else "5-20us" if g < 20000 else "20-100us" if g < 100000 else ">100us"] += g
print("idle by gap size (last window): " + ", ".join(f"{k} {v / 1e6:.2f} ms" for k, v in sorted(hist.items())))
print("largest gaps (last window):")
for g, a, b in gaps[:12]:
    print(f"  {g / 1e3:9.1f} us  after {a}  before {b}")
agg = collections.defaultdict(lambda: [0, 0])
for s, e, k, n in sel:
    key = short(n) if k == "kernel" else k
    agg[key][0] += e - s
    agg[key][1] += 1
total = sum(t for t, _ in agg.values())
print(f"work in the last window, by name (sum {total / 1e6:.2f} ms):")
for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"{t / 1e6:9.3f} ms {100 * t / total:5.1f}% {c:5d}x  {k}")
