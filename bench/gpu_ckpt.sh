#!/usr/bin/env bash
# Checkpoints on the GPU machine, in one call (scripts/gpu/carry_build.sh packs the
# binaries here; the GPU machine runs `source scripts/gpu/carried_env.sh; bash
# bench/gpu_ckpt.sh "$B" "$C/shared/bench"`):
#  1. bitwise resume of a small Llama in bf16 on the GPU (--deterministic-mode, dropout on):
#     20 iterations straight versus 10 + --load + 10, blocking and async saves; the GPU's
#     checkpoint then loads on the CPU;
#  2. speed: the 1.5B bench shape's full training state (fp32 master weights + Adam's two
#     moments, ~18 GB) beside PyTorch's torch.distributed.checkpoint and torch.save
#     (../shared/bench/torch_ckpt.py, which also times `dd oflag=direct` on the same disk):
#     a blocking save, the load, and an async save's hold on training and on the steps
#     that run while it is written.
# Prints a table with the ratios last; logs under $OUT.
#   bench/gpu_ckpt.sh BIN_DIR SHARED_BENCH_DIR
set -uo pipefail
B=$1
SB=$2
OUT=${OUT:-/tmp/mc-out}
W=${CKPT_BENCH_DIR:-/tmp/mc-ckpt-bench}
mkdir -p "$OUT"
source "$(dirname "$0")/../scripts/gpu/shapes.sh"
rm -rf "$W" && mkdir -p "$W"
df -h "$W" | tee "$OUT/ckpt_df.txt"

# ---- 1. bitwise resume on the GPU ----
TINY=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
      --ffn-hidden-size 512 --swiglu --normalization RMSNorm --position-embedding-type rope
      --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 256 --max-position-embeddings 256
      --micro-batch-size 4 --global-batch-size 16 --vocab-size 1024 --mock-data --tokenizer-type NullTokenizer
      --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 3 --train-iters 20 --log-interval 1
      --eval-iters 0 --device cuda --bf16 --deterministic-mode --attention-dropout 0.1 --hidden-dropout 0.1)
same_run() { # two log dirs: every iteration line's numbers and the exported parameters, bit for bit
    python3 - "$1" "$2" <<'PY'
import json, sys, hashlib
keys = ("iteration", "consumed_samples", "lm_loss", "learning_rate", "grad_norm", "loss_scale", "skipped_iterations")
def lines(d):
    return [tuple(json.loads(l).get(k) for k in keys) for l in open(d + "/metrics.jsonl") if '"split"' not in l]
a, b = lines(sys.argv[1]), lines(sys.argv[2])
pa, pb = (hashlib.sha256(open(d + "/p.st", "rb").read()).hexdigest() for d in sys.argv[1:3])
ok = len(a) == 20 and a == b and pa == pb
diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
print(f"{'BITWISE' if ok else 'DIFFERENT'}: {len(a)} vs {len(b)} lines, differing iterations {diff[:5]}, "
      f"parameters {'equal' if pa == pb else 'differ'}; loss at 20: {a[-1][2] if a else None}")
PY
}
echo "== bitwise resume on the GPU (bf16, deterministic mode, dropout)"
"$B/megatron-c" train "${TINY[@]}" --log-dir "$W/straight" --export-params "$W/straight/p.st" > "$OUT/ckpt_straight.log" 2>&1
echo "straight rc $?"
for mode in blocking async; do
    extra=()
    [ $mode = async ] && extra=(--async-save --save-interval 4)
    "$B/megatron-c" train "${TINY[@]}" "${extra[@]}" --save "$W/$mode" --exit-interval 10 --log-dir "$W/$mode.out" \
        > "$OUT/ckpt_${mode}_1.log" 2>&1
    r1=$?
    "$B/megatron-c" train "${TINY[@]}" "${extra[@]}" --save "$W/$mode" --load "$W/$mode" --log-dir "$W/$mode.out" \
        --export-params "$W/$mode.out/p.st" > "$OUT/ckpt_${mode}_2.log" 2>&1
    echo "$mode: rc $r1 $?: $(same_run "$W/straight" "$W/$mode.out")"
done
"$B/megatron-c" inspect-ckpt "$W/blocking" --verify > "$OUT/ckpt_inspect.log" 2>&1
echo "inspect-ckpt --verify rc $?: $(tail -1 "$OUT/ckpt_inspect.log")"
CPU_TINY=()
for a in "${TINY[@]}"; do
    case $a in cuda) CPU_TINY+=(cpu) ;; --deterministic-mode) ;; *) CPU_TINY+=("$a") ;; esac
done
"$B/megatron-c" train "${CPU_TINY[@]}" --exit-interval 12 --load "$W/blocking" --ckpt-step 10 \
    --log-dir "$W/on_cpu" > "$OUT/ckpt_gpu_to_cpu.log" 2>&1
echo "the GPU's checkpoint (iteration 10) trains on on the CPU: rc $? $(python3 -c "
import json,sys
a=[json.loads(l) for l in open('$W/straight/metrics.jsonl')][10:12]
b=[json.loads(l) for l in open('$W/on_cpu/metrics.jsonl')]
print('losses', [round(x['lm_loss'],5) for x in b], 'GPU', [round(x['lm_loss'],5) for x in a])" 2>&1)"
rm -rf "$W"/*

# ---- 2. speed: the 1.5B shape's training state ----
echo "== PyTorch: torch.distributed.checkpoint, torch.save, dd (same disk)"
timeout 400 python3 "$SB/torch_ckpt.py" --dir "$W/torch" 2>&1 | tee "$OUT/torch_ckpt.log" | grep RESULT
rm -rf "$W"/*
common_flags 3
echo "== Megatron-C: blocking save of the 1.5B shape's state"
"$B/megatron-c" train "${LLAMA[@]}" "${COMMON[@]}" --exit-interval 2 --save "$W/a" > "$OUT/ckpt_save.log" 2>&1
echo "rc $?"; grep -E "checkpoint:|successfully saved" "$OUT/ckpt_save.log"
"$B/megatron-c" inspect-ckpt "$W/a" > "$OUT/ckpt_inspect_big.log" 2>&1; grep -E "^files" "$OUT/ckpt_inspect_big.log"
echo "== Megatron-C: load"
"$B/megatron-c" train "${LLAMA[@]}" "${COMMON[@]}" --load "$W/a" > "$OUT/ckpt_load.log" 2>&1
echo "rc $?"; grep -E "loaded" "$OUT/ckpt_load.log"
rm -rf "$W"/*
echo "== Megatron-C: async save at iteration 20 of 26 (8 micro-batches a step), written while 21-26 train"
common_flags 26
"$B/megatron-c" train "${LLAMA_X8[@]}" "${COMMON[@]}" --save "$W/c" --save-interval 20 --async-save --log-dir "$W/c.out" \
    > "$OUT/ckpt_async.log" 2>&1
echo "rc $?"; grep -E "async save|checkpoint:|successfully saved" "$OUT/ckpt_async.log"
cp "$W/c.out/metrics.jsonl" "$OUT/ckpt_async_metrics.jsonl" 2>/dev/null
rm -rf "$W"

python3 - "$OUT" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
def grab(path, pat, cast=float):
    m = re.search(pat, open(path).read())
    return cast(m.group(1)) if m else None
t = {}
for l in open(out + "/torch_ckpt.log"):
    if l.startswith("RESULT"): t = json.loads(l[7:])
dd = re.search(r"([\d.]+) GB/s", t.get("dd_write", ""))
dd_gbps = float(dd.group(1)) if dd else None
save_gb = grab(out + "/ckpt_save.log", r"checkpoint: ([\d.]+) GB in")
save_s = grab(out + "/ckpt_save.log", r"checkpoint: [\d.]+ GB in ([\d.]+) s")
load_s = grab(out + "/ckpt_load.log", r"loaded [\d.]+ GB in ([\d.]+) s")
held = grab(out + "/ckpt_async.log", r"async save of iteration 20: training held for ([\d.]+) s")
steps = {}
for l in open(out + "/ckpt_async_metrics.jsonl"):
    o = json.loads(l); steps[o["iteration"]] = o["elapsed_ms_per_iteration"]
before = statistics.median(steps[i] for i in range(5, 20) if i in steps) if steps else None
during = [round(steps[i]) for i in range(21, 26) if i in steps]
print("\n| | seconds | GB/s | vs PyTorch DCP | target |")
print("|---|---|---|---|---|")
if save_s and t:
    print(f"| blocking save, {save_gb} GB | {save_s:.2f} | {save_gb / save_s:.2f} | {t['dcp_save_s'] / save_s:.2f}x faster "
          f"(DCP {t['dcp_save_s']:.1f} s, torch.save {t['torch_save_s']:.1f} s) | >= 2x |")
    if dd_gbps:
        print(f"| dd oflag=direct on that disk | {save_gb / dd_gbps:.2f} (for {save_gb} GB) | {dd_gbps} | ours / dd time "
              f"{save_s / (save_gb / dd_gbps):.2f} | <= 1.3 |")
if load_s and t:
    print(f"| load | {load_s:.2f} | {save_gb / load_s:.2f} | {t['dcp_load_s'] / load_s:.2f}x faster (DCP {t['dcp_load_s']:.1f} s) | >= 1x |")
if held is not None:
    print(f"| async save: training held | {held:.3f} | | | < 1 s |")
if before:
    print(f"| steps while it is written (ms) | {during} | | median before {before:.0f} ms | |")
PY
