#!/usr/bin/env bash
# A/B of two megatron-c builds (or one build with and without extra flags) on the GPU bench
# shapes, interleaved A B B A A B ... in one call, so that the GPU's power and clock state (it
# runs at its power cap under these loads) hits both sides alike. Prints the median steady
# tokens/s of every run and the per-side medians.
#   [AB_FLAGS="flags for both sides"] bench/gpu_ab.sh BIN_A BIN_B [rounds] [shape: llama|llama-x8|gpt2] [-- extra flags for B]
set -uo pipefail
A=$1 B=$2 ROUNDS=${3:-2} SHAPE=${4:-llama}
shift 4 2>/dev/null || shift $#
[ "${1:-}" = "--" ] && shift
EXTRA_B=("$@")
read -r -a BOTH <<< "${AB_FLAGS:-}"
OUTDIR=${OUT:-$(mktemp -d)}/gpu_ab
mkdir -p "$OUTDIR"
ITERS=${MC_BENCH_ITERS:-10}
source "$(dirname "$0")/../scripts/gpu/shapes.sh" # LLAMA, LLAMA_X8, GPT2
shape_flags "$SHAPE" || exit 2
run() { # side, binary, round, extra...
    local side=$1 bin=$2 r=$3
    shift 3
    local dir="$OUTDIR/${SHAPE}_${side}_$r"
    rm -rf "$dir"
    "$bin" train "${FLAGS[@]}" "${BOTH[@]}" "$@" --train-iters "$ITERS" --log-interval 1 --eval-iters 0 --lr 3e-4 \
        --attention-dropout 0 --hidden-dropout 0 --mock-data --tokenizer-type NullTokenizer --device cuda --bf16 \
        --log-dir "$dir" > "$dir.log" 2>&1
    python3 - "$dir/metrics.jsonl" "$side" "$r" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
steady = rows[3:] if len(rows) > 5 else rows[1:]
print(f"AB {sys.argv[2]} round {sys.argv[3]}: {statistics.median(r['tokens_per_sec_per_gpu'] for r in steady):.0f} tok/s")
PY
}
# A B, then B A, and so on: neither side always follows the other (the GPU's state drifts
# as it heats, so a fixed order would favour one side)
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        run A "$A" "$r"
        run B "$B" "$r" "${EXTRA_B[@]}"
    else
        run B "$B" "$r" "${EXTRA_B[@]}"
        run A "$A" "$r"
    fi
done 2>&1 | tee "$OUTDIR/${SHAPE}.txt"
python3 - "$OUTDIR/${SHAPE}.txt" <<'PY'
import re, sys, statistics
v = {"A": [], "B": []}
for l in open(sys.argv[1]):
    m = re.match(r"AB (\w) round \d+: (\d+)", l)
    if m: v[m.group(1)].append(int(m.group(2)))
if v["A"] and v["B"]:
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    print(f"AB median A {a:.0f}  B {b:.0f}  B/A {b / a:.4f}")
PY
