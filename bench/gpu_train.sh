#!/usr/bin/env bash
# GPU training benchmark, run in one call on the GPU machine: Megatron-C beside PyTorch
# (shared/bench/torch_llama.py: torch.compile, SDPA flash attention, fused AdamW) and the
# GEMM+attention floor (shared/bench/floor.py) on the same shapes:
#   llama-1.5b      --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4
#   llama-1.5b-x8   the same with 8 micro-batches per optimizer step (Megatron-C --global-batch-size 32)
#   gpt2-124m       --arch gpt2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --mbs 64
#                   (its floor also at the padded vocabulary 50304, which our run uses: that one is
#                   the ours/floor column's)
# Prints tokens/s, TFLOP/s, MFU and peak memory for each, with the ratios.
# Both trainers are measured alike, in the GPU's hot state: the median step of the last
# MEASURE steps after WARM steps (ours: iterations WARM+1 .. WARM+MEASURE of a run of that
# many; torch_llama.py: --warmup WARM --steps MEASURE, after its compile). The H200 runs at
# its power cap under these loads and slows as it heats, so a run of a second or two
# measures how warm the previous run left the GPU as much as the trainer: defaults 10 + 20
# steps for the one-micro-batch and GPT-2 shapes, 3 + 7 for the 8-micro-batch one (whose
# steps are 8 times longer).
# With CLOCKS=nvidia-smi's CSV (timestamp, clocks.sm, ...; run_carried.sh samples it) the
# table also gives the SM clock's median over each side's measured steps.
#   [MC_BENCH_WARM=10] [MC_BENCH_MEASURE=20] [CLOCKS=csv] bench/gpu_train.sh BUILD_DIR [SHARED_BENCH_DIR] [which: all|llama|gpt2|torch-only|ours-only]
set -uo pipefail
BUILD=${1:-build}
SHARED_BENCH=${2:-${MC_SHARED_DIR:-../shared}/bench}
WHICH=${3:-all}
OUTDIR=${OUT:-$(mktemp -d)}/gpu_train
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
WARM=${MC_BENCH_WARM:-10} MEASURE=${MC_BENCH_MEASURE:-20}

ours() { # name, warm steps, measured steps, extra flags...
    local name=$1 warm=$2 measure=$3
    shift 3
    local iters=$((warm + measure))
    local log="$OUTDIR/ours_$name.log" dir="$OUTDIR/ours_$name"
    rm -rf "$dir"
    local t0
    t0=$(date +%s.%N)
    "$BUILD/megatron-c" train "$@" --train-iters "$iters" --log-interval 1 --eval-iters 0 --lr 3e-4 \
        --attention-dropout 0 --hidden-dropout 0 --mock-data --tokenizer-type NullTokenizer --device cuda --bf16 \
        --log-dir "$dir" > "$log" 2>&1
    local rc=$?
    python3 - "$dir/metrics.jsonl" "$log" "$t0" "$name" "$warm" <<'PY'
import json, sys, statistics, re, datetime
path, log, t0, name, warm = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
try:
    rows = [json.loads(l) for l in open(path)]
except OSError:
    print(f"RESULT ours {name} FAILED (see {log})"); sys.exit(0)
text = open(log).read()
steady = rows[warm:] if len(rows) > warm else rows[1:]
ms = statistics.median(r["elapsed_ms_per_iteration"] for r in steady)
tok = statistics.median(r["tokens_per_sec_per_gpu"] for r in steady)
tfl = statistics.median(r["tflops_per_gpu"] for r in steady)
m = re.search(r"max allocated: ([0-9.]+)", text)
mem = float(m.group(1)) / 1024 if m else float("nan")
# launch -> first iteration: the timestamp of the iteration-1 line
stamps = [datetime.datetime.strptime(t, "%Y-%m-%d %H:%M:%S.%f").timestamp()
          for t in re.findall(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration +\d+/", text)]
first = stamps[0] - t0 if stamps else float("nan")
# the measured steps' span (wall clock), for the SM clock over them
window = [stamps[warm - 1], stamps[-1]] if len(stamps) > warm else []
print("RESULT ours " + json.dumps(dict(name=name, step_ms=ms, tok_s=tok, tflops=tfl, mfu=tfl / 989, mem_gb=mem,
                                         first_iter_s=first, loss_last=rows[-1]["lm_loss"], window=window)))
PY
    return $rc
}

torch_run() { # name, warm steps, measured steps, args...
    local name=$1 warm=$2 measure=$3
    shift 3
    # END: when its RESULT line came out, just after its measured steps
    python3 "$SHARED_BENCH/torch_llama.py" "$@" --steps "$measure" --warmup "$warm" --compile 1 --tag "$name" 2>&1 |
        tee "$OUTDIR/torch_$name.log" | while IFS= read -r l; do
            case $l in RESULT*) echo "END torch $name $measure $(date +%s.%N)" ;; esac
        done
    grep '^RESULT' "$OUTDIR/torch_$name.log" | sed "s/^RESULT/RESULT torch/" || echo "RESULT torch $name FAILED"
}

floor_run() {
    local name=$1
    shift
    python3 "$SHARED_BENCH/floor.py" "$@" --tag "$name" > "$OUTDIR/floor_$name.log" 2>&1
    grep '^RESULT' "$OUTDIR/floor_$name.log" || echo "RESULT floor $name FAILED"
}

LLAMA=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4)
# GPT-2: Megatron pads the vocabulary to 50304 (--make-vocab-size-divisible-by 128): our run does
# that slightly larger head; PyTorch and the floor use 50257.
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu)

{
if [ "$WHICH" = all ] || [ "$WHICH" = llama ] || [ "$WHICH" = ours-only ]; then
    ours llama-1.5b "$WARM" "$MEASURE" "${LLAMA[@]}" --global-batch-size 4
    ours llama-1.5b-x8 3 7 "${LLAMA[@]}" --global-batch-size 32
    ours llama-1.5b-recompute "$WARM" "$MEASURE" "${LLAMA[@]}" --global-batch-size 4 --recompute-granularity selective
fi
if [ "$WHICH" = all ] || [ "$WHICH" = gpt2 ] || [ "$WHICH" = ours-only ]; then
    ours gpt2-124m "$WARM" "$MEASURE" "${GPT2[@]}"
fi
if [ "$WHICH" != ours-only ]; then
    if [ "$WHICH" = all ] || [ "$WHICH" = llama ] || [ "$WHICH" = torch-only ]; then
        torch_run llama-1.5b "$WARM" "$MEASURE" --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4
        torch_run llama-1.5b-x8 3 7 --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4 --accum 8
        floor_run llama-1.5b --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4
    fi
    if [ "$WHICH" = all ] || [ "$WHICH" = gpt2 ] || [ "$WHICH" = torch-only ]; then
        torch_run gpt2-124m "$WARM" "$MEASURE" --arch gpt2 --layers 12 --hidden 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50257 --seq 1024 --mbs 64
        floor_run gpt2-124m --layers 12 --hidden 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50257 --seq 1024 --mbs 64 --swiglu 0
        # the floor of our GPT-2 run's own head: Megatron's padded vocabulary (cuBLASLt runs the
        # 50257-column LM head at ~131 TFLOP/s, which makes the floor above slower than both trainers)
        floor_run gpt2-124m-padded --layers 12 --hidden 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50304 --seq 1024 --mbs 64 --swiglu 0
    fi
fi
} | tee "$OUTDIR/results.txt"

python3 - "$OUTDIR/results.txt" "${CLOCKS:-}" <<'PY'
import csv, datetime, json, re, statistics, sys
ours, torch, floor, ends = {}, {}, {}, {}
clocks = []  # (epoch s, SM MHz) from nvidia-smi's CSV (run_carried.sh samples it)
if len(sys.argv) > 2 and sys.argv[2]:
    try:
        rows = list(csv.reader(open(sys.argv[2])))
    except OSError:
        rows = []
    for r in rows:
        try:  # the sampler is still writing: a line may be cut short
            t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            clocks.append((t, float(r[1].split()[0])))
        except (IndexError, ValueError):
            pass
def mhz(lo, hi):  # the SM clock's median over [lo, hi]
    sel = [c for t, c in clocks if lo <= t <= hi]
    return f"{statistics.median(sel):.0f}" if sel else "-"
for line in open(sys.argv[1]):
    if line.startswith("END torch "):
        _, _, tag, measure, t = line.split()
        ends[tag] = (int(measure), float(t))
    if line.startswith("RESULT ours {"):
        r = json.loads(line[len("RESULT ours "):]); ours[r["name"]] = r
    elif line.startswith("RESULT torch {"):
        r = json.loads(line[len("RESULT torch "):]); torch[r["tag"]] = r
    elif line.startswith("RESULT floor"):
        m = re.match(r"RESULT floor (\S+): .* -> ([0-9,]+) tok/s max", line)
        if m: floor[m.group(1)] = float(m.group(2).replace(",", ""))
print()
print(f"{'shape':16s} {'ours tok/s':>11s} {'torch tok/s':>12s} {'floor tok/s':>12s} {'ours/torch':>10s} {'ours/floor':>10s}"
      f" {'ours TFLOP/s':>12s} {'ours MFU':>8s} {'ours GB':>8s} {'torch GB':>8s} {'1st iter s':>10s}"
      f" {'ours MHz':>8s} {'torch MHz':>9s}")
for name in ["llama-1.5b", "llama-1.5b-x8", "llama-1.5b-recompute", "gpt2-124m"]:
    base = name.replace("-x8", "").replace("-recompute", "")
    # GPT-2: the floor at the padded vocabulary our run uses, when measured
    o, t, f = ours.get(name), torch.get(base if name.endswith("-recompute") else name), floor.get(base + "-padded", floor.get(base))
    def g(d, k, fmt):
        return format(d[k], fmt) if d and k in d else "-"
    ratio_t = f"{o['tok_s'] / t['tok_s_per_gpu']:.3f}" if o and t else "-"
    ratio_f = f"{o['tok_s'] / f:.3f}" if o and f else "-"
    # the SM clock over each side's measured steps (torch's: the last `measure` steps before its end)
    o_mhz = mhz(*o["window"]) if o and len(o.get("window", [])) == 2 else "-"
    tag = base if name.endswith("-recompute") else name
    t_mhz = mhz(ends[tag][1] - ends[tag][0] * t["step_s"], ends[tag][1]) if t and tag in ends else "-"
    print(f"{name:16s} {g(o,'tok_s','11.0f')} {g(t,'tok_s_per_gpu','12.0f')} {format(f,'12.0f') if f else '           -'} "
          f"{ratio_t:>10s} {ratio_f:>10s} {g(o,'tflops','12.1f')} {g(o,'mfu','8.3f')} {g(o,'mem_gb','8.1f')} "
          f"{g(t,'mem_gb','8.1f')} {g(o,'first_iter_s','10.2f')} {o_mhz:>8s} {t_mhz:>9s}")
PY
