#!/usr/bin/env bash
# On the GPU machine: whether two megatron-c builds (or one build with and without an
# environment switch, as wrapper scripts) train the same numbers on a bench shape, beyond
# rounding: both sides run ITERS iterations in --deterministic-mode at a learning rate small
# enough that rounding differences do not grow into different trajectories, and the script
# prints each iteration's lm loss and grad norm on both sides with their relative
# differences, and the largest. A change that should only reorder sums (another chunking,
# another kernel) stays near 1e-4; a wrong gradient shows as a grad norm apart from the
# second iteration on.
#   [OUT=...] scripts/gpu/loss_match.sh BIN_A BIN_B [shape: llama|llama-x8|gpt2] [iters]
set -uo pipefail
A=$1 B=$2 SHAPE=${3:-llama} ITERS=${4:-6}
OUTDIR=${OUT:-$(mktemp -d)}/loss_match
mkdir -p "$OUTDIR"
source "$(dirname "$0")/shapes.sh" # LLAMA, LLAMA_X8, GPT2
shape_flags "$SHAPE" || exit 2
for side in A B; do
    bin=$A
    [ $side = B ] && bin=$B
    rm -rf "$OUTDIR/${SHAPE}_$side"
    "$bin" train "${FLAGS[@]}" --train-iters "$ITERS" --log-interval 1 --eval-iters 0 --lr 1e-6 --min-lr 1e-7 \
        --attention-dropout 0 --hidden-dropout 0 --mock-data --tokenizer-type NullTokenizer --device cuda --bf16 \
        --deterministic-mode --log-dir "$OUTDIR/${SHAPE}_$side" > "$OUTDIR/${SHAPE}_$side.log" 2>&1 ||
        { echo "side $side failed:"; tail -5 "$OUTDIR/${SHAPE}_$side.log"; exit 1; }
done
python3 - "$OUTDIR/${SHAPE}_A/metrics.jsonl" "$OUTDIR/${SHAPE}_B/metrics.jsonl" "$SHAPE" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
worst = 0.0
for ra, rb in zip(a, b):
    dl = abs(ra["lm_loss"] - rb["lm_loss"]) / abs(rb["lm_loss"])
    dg = abs(ra["grad_norm"] - rb["grad_norm"]) / abs(rb["grad_norm"])
    worst = max(worst, dl, dg)
    print(f"loss_match {sys.argv[3]} iteration {ra['iteration']}: lm loss {ra['lm_loss']:.6f} / {rb['lm_loss']:.6f} "
          f"(rel {dl:.1e}), grad norm {ra['grad_norm']:.4f} / {rb['grad_norm']:.4f} (rel {dg:.1e})")
print(f"loss_match {sys.argv[3]}: largest relative difference {worst:.1e} over {min(len(a), len(b))} iterations")
PY
