#!/usr/bin/env bash
# CPU step benchmark: a GPT-2-small-shaped model (12 layers, hidden 768, 12 heads,
# seq 256, micro-batch 4, vocab 50257) trained on mock data. Prints the median ms per
# iteration and the achieved GFLOP/s (Megatron's FLOPs formula) next to this machine's
# measured sgemm GFLOP/s, and their ratio (target: at least 50%).
#   bench/cpu_step.sh [build-dir] [iterations]
set -euo pipefail
BUILD=${1:-build}
ITERS=${2:-6}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$BUILD/megatron-c" train --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256 \
    --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4 --train-iters "$ITERS" \
    --lr 6e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --attention-dropout 0 \
    --hidden-dropout 0 --eval-iters 0 --log-interval 1 --device cpu --log-dir "$OUT" > "$OUT/log.txt"
python3 - "$OUT" <<'PY'
import json, sys, re, statistics
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
peak = float(re.search(r"MFU peak: ([0-9.]+) TFLOP/s", open(f"{d}/log.txt").read()).group(1)) * 1e3
steady = rows[1:] if len(rows) > 2 else rows          # the first iteration warms caches
ms = statistics.median(r["elapsed_ms_per_iteration"] for r in steady)
gflops = statistics.median(r["tflops_per_gpu"] for r in steady) * 1e3
print(f"GPT-2 small shape (12 x 768, seq 256, mbs 4, vocab 50257), {len(steady)} steady iterations")
print(f"  ms per iteration (median):   {ms:10.1f}")
print(f"  achieved GFLOP/s:            {gflops:10.1f}")
print(f"  measured sgemm GFLOP/s:      {peak:10.1f}")
print(f"  ratio achieved / sgemm:      {gflops / peak:10.2f}  (target >= 0.50)")
PY
