#!/usr/bin/env bash
# GPU training benchmark, run in one call on the GPU machine: Megatron-C beside PyTorch and the
# GEMM+attention floor (shared/bench/floor.py) on the same shapes, bf16, mock data, one GPU.
# PyTorch is this repository's own bench/torch_train.py (torch.compile, fused AdamW, bf16
# autocast over fp32 parameters, --sdpa best: the fastest SDPA backend timed on the shape);
# with CROSS=1 shared/bench/torch_llama.py also runs each shape as a cross-check (its lines
# are "RESULT cross ...", its column "cross").
# Shapes, by group:
#   old = llama + gpt2
#   llama  llama-1.5b      --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4
#          llama-1.5b-x8   the same with 8 micro-batches per optimizer step (Megatron-C --global-batch-size 32)
#          llama-1.5b-recompute  (ours only: selective recompute; compared with PyTorch's llama-1.5b)
#   gpt2   gpt2-124m       --arch gpt2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --mbs 64
#                          (its floor also at the padded vocabulary 50304, which our run uses: that one is
#                          the ours/floor column's)
#   long   llama3-8b-8l    8 layers of Llama 3 8B: hidden 4096, 32 heads / 8 KV, ffn 14336, vocab 128256,
#                          seq 8192, mbs 1, RoPE base 500000
#          llama2-7b-8l    8 layers of Llama 2 7B: hidden 4096, 32 heads (no GQA), ffn 11008, vocab 32000,
#                          seq 4096, mbs 2, RoPE base 10000
#          llama3-70b-2l   2 layers of Llama 3 70B: hidden 8192, 64 heads / 8 KV, ffn 28672, vocab 128256,
#                          seq 8192, mbs 1, RoPE base 500000
#   all = old + long; torch-only / ours-only: all shapes, one trainer (and the floor with torch-only);
#   or one shape's name.
# Prints tokens/s, TFLOP/s (Megatron's FLOPs formula on both sides), MFU and peak memory for
# each, with the ratios ours/torch of tokens/s and memory.
# Both trainers are measured alike, in the GPU's hot state: the median step of the last
# MEASURE steps after WARM steps (ours: iterations WARM+1 .. WARM+MEASURE of a run of that
# many; torch_train.py: --warmup WARM --steps MEASURE, after its compile). The H200 runs at
# its power cap under these loads and slows as it heats, so a run of a second or two
# measures how warm the previous run left the GPU as much as the trainer: defaults 10 + 20
# steps for the one-micro-batch and GPT-2 shapes, 3 + 7 for the 8-micro-batch one (whose
# steps are 8 times longer) and for the long shapes (steps of ~1-2 s).
# With CLOCKS=nvidia-smi's CSV (timestamp, clocks.sm, ...; run_carried.sh samples it) the
# table also gives the SM clock's median over each side's measured steps.
# A/B of our trainer: OURS_ENV (space-separated VAR=VAL, set for our runs only) and OURS_SUFFIX
# (appended to our runs' names), e.g. a second call with
#   OURS_ENV="MC_ATTN_CUDNN=0" OURS_SUFFIX=-own bench/gpu_train.sh build ../shared/bench long ours-only
#   [MC_BENCH_WARM=10] [MC_BENCH_MEASURE=20] [MC_BENCH_LONG_WARM=3] [MC_BENCH_LONG_MEASURE=7]
#   [CROSS=1] [FLOOR=0] [CLOCKS=csv] [OURS_ENV="VAR=VAL ..."] [OURS_SUFFIX=-x] [TORCH_TRAIN=path/torch_train.py]
#   bench/gpu_train.sh BUILD_DIR [SHARED_BENCH_DIR] [which: all|old|llama|gpt2|long|torch-only|ours-only|SHAPE]
#   [sides: both|ours-only|torch-only (default both; a 3rd argument torch-only/ours-only means all shapes)]
set -uo pipefail
BUILD=${1:-build}
SHARED_BENCH=${2:-${MC_SHARED_DIR:-../shared}/bench}
WHICH=${3:-all}
SIDES=${4:-both}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TORCH_TRAIN=${TORCH_TRAIN:-$HERE/torch_train.py}
OUTDIR=${OUT:-$(mktemp -d)}/gpu_train
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
WARM=${MC_BENCH_WARM:-10} MEASURE=${MC_BENCH_MEASURE:-20}
LWARM=${MC_BENCH_LONG_WARM:-3} LMEASURE=${MC_BENCH_LONG_MEASURE:-7}
OURS_ENV=${OURS_ENV:-} OURS_SUFFIX=${OURS_SUFFIX:-}
case $WHICH in
torch-only | ours-only) SIDES=$WHICH WHICH=all ;;
esac
case $SIDES in
both | ours-only | torch-only) ;;
*) echo "gpu_train.sh: sides '$SIDES' is not both, ours-only or torch-only" >&2; exit 2 ;;
esac
ALL_SHAPES="llama-1.5b llama-1.5b-x8 gpt2-124m llama3-8b-8l llama2-7b-8l llama3-70b-2l"
case $WHICH in
all) SHAPES=$ALL_SHAPES ;;
old) SHAPES="llama-1.5b llama-1.5b-x8 gpt2-124m" ;;
llama) SHAPES="llama-1.5b llama-1.5b-x8" ;;
gpt2) SHAPES="gpt2-124m" ;;
long) SHAPES="llama3-8b-8l llama2-7b-8l llama3-70b-2l" ;;
*)
    case " $ALL_SHAPES " in
    *" $WHICH "*) SHAPES=$WHICH ;;
    *) echo "gpu_train.sh: which '$WHICH' is not all, old, llama, gpt2, long, torch-only, ours-only or one of: $ALL_SHAPES" >&2
       exit 2 ;;
    esac ;;
esac
want() { case " $SHAPES " in *" $1 "*) return 0 ;; esac; return 1; }
run_ours() { [ "$SIDES" != torch-only ]; }
run_torch() { [ "$SIDES" != ours-only ]; }

ours() { # name, warm steps, measured steps, extra flags...
    local name=$1$OURS_SUFFIX warm=$2 measure=$3
    shift 3
    local iters=$((warm + measure))
    local log="$OUTDIR/ours_$name.log" dir="$OUTDIR/ours_$name"
    rm -rf "$dir"
    local t0
    t0=$(date +%s.%N)
    # OURS_ENV: word splitting into VAR=VAL arguments of env is the point
    # shellcheck disable=SC2086
    env $OURS_ENV "$BUILD/megatron-c" train "$@" --train-iters "$iters" --log-interval 1 --eval-iters 0 --lr 3e-4 \
        --attention-dropout 0 --hidden-dropout 0 --mock-data --tokenizer-type NullTokenizer --device cuda --bf16 \
        --log-dir "$dir" > "$log" 2>&1
    local rc=$?
    python3 - "$dir/metrics.jsonl" "$log" "$t0" "$name" "$warm" "$OURS_ENV" <<'PY'
import json, sys, statistics, re, datetime
path, log, t0, name, warm, env = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
try:
    rows = [json.loads(l) for l in open(path)]
except OSError:
    rows = []
if not rows:
    print(f"RESULT ours {name} FAILED (see {log})"); sys.exit(0)
text = open(log).read()
steady = rows[warm:] if len(rows) > warm else rows[1:] or rows
ms = statistics.median(r["elapsed_ms_per_iteration"] for r in steady)
tok = statistics.median(r["tokens_per_sec_per_gpu"] for r in steady)
tfl = statistics.median(r["tflops_per_gpu"] for r in steady)
# Megatron's "max allocated" is in MB of 2**20 bytes: /1024 gives GiB, torch_train.py's unit
m = re.search(r"max allocated: ([0-9.]+)", text)
mem = float(m.group(1)) / 1024 if m else float("nan")
# launch -> first iteration: the timestamp of the iteration-1 line
stamps = [datetime.datetime.strptime(t, "%Y-%m-%d %H:%M:%S.%f").timestamp()
          for t in re.findall(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration +\d+/", text)]
first = stamps[0] - t0 if stamps else float("nan")
# the measured steps' span (wall clock), for the SM clock over them
window = [stamps[warm - 1], stamps[-1]] if len(stamps) > warm else []
print("RESULT ours " + json.dumps(dict(name=name, step_ms=ms, tok_s=tok, tflops=tfl, mfu=tfl / 989, mem_gb=mem,
                                         first_iter_s=first, loss_last=rows[-1]["lm_loss"], window=window, env=env)))
PY
    return $rc
}

# PyTorch: KIND torch (bench/torch_train.py) or cross (shared/bench/torch_llama.py); name, warm, measured, args...
py_run() {
    local kind=$1 name=$2 warm=$3 measure=$4 script
    shift 4
    if [ "$kind" = torch ]; then script=$TORCH_TRAIN; else script=$SHARED_BENCH/torch_llama.py; fi
    # END: when its RESULT line came out, just after its measured steps
    python3 "$script" "$@" --steps "$measure" --warmup "$warm" --compile 1 --sdpa best --tag "$name" 2>&1 |
        tee "$OUTDIR/${kind}_$name.log" | while IFS= read -r l; do
            case $l in RESULT*) echo "END $kind $name $measure $(date +%s.%N)" ;; esac
        done
    grep '^RESULT {' "$OUTDIR/${kind}_$name.log" | sed "s/^RESULT/RESULT $kind/" || echo "RESULT $kind $name FAILED"
}

# both PyTorch trainers on a shape: torch_train.py, then with CROSS=1 torch_llama.py (which has
# no --rope-base: its RoPE base is 500000 always, the same work)
torch_pair() { # name, warm, measured, rope base (- for none: GPT-2), shared args...
    local name=$1 warm=$2 measure=$3 base=$4
    shift 4
    local rope=()
    if [ "$base" != - ]; then rope=(--rope-base "$base"); fi
    py_run torch "$name" "$warm" "$measure" "$@" "${rope[@]}"
    if [ "${CROSS:-0}" = 1 ]; then py_run cross "$name" "$warm" "$measure" "$@"; fi
}

floor_run() { # FLOOR=0: none (a shorter call)
    [ "${FLOOR:-1}" = 0 ] && return 0
    local name=$1
    shift
    python3 "$SHARED_BENCH/floor.py" "$@" --tag "$name" > "$OUTDIR/floor_$name.log" 2>&1
    grep '^RESULT' "$OUTDIR/floor_$name.log" || echo "RESULT floor $name FAILED"
}

# Megatron-C's flags of GPT-2 and the long shapes (GPT2, L3_8B, L2_7B, L3_70B) and LLAMA_ARCH
source "$HERE/../scripts/gpu/shapes.sh"
# the 1.5B shape without its --global-batch-size (each run gives its own)
LLAMA=("${LLAMA_ARCH[@]}" --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention
       --num-query-groups 8 --ffn-hidden-size 8192 --rotary-base 500000 --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4)
# GPT2 (shapes.sh): Megatron pads the vocabulary to 50304 (--make-vocab-size-divisible-by 128): our
# run does that slightly larger head; PyTorch and the floor use 50257.
# the same shapes for PyTorch and the floor
T_LLAMA=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4)
T_L3_8B=(--layers 8 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --seq 8192 --mbs 1)
T_L2_7B=(--layers 8 --hidden 4096 --heads 32 --kv-heads 32 --ffn 11008 --vocab 32000 --seq 4096 --mbs 2)
T_L3_70B=(--layers 2 --hidden 8192 --heads 64 --kv-heads 8 --ffn 28672 --vocab 128256 --seq 8192 --mbs 1)
T_GPT2=(--layers 12 --hidden 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50257 --seq 1024 --mbs 64)

{
echo "# shapes: $SHAPES; sides: $SIDES; ours env: '${OURS_ENV}' suffix: '${OURS_SUFFIX}'; cross: ${CROSS:-0}"
if run_ours; then
    if want llama-1.5b; then
        ours llama-1.5b "$WARM" "$MEASURE" "${LLAMA[@]}" --global-batch-size 4
    fi
    if want llama-1.5b-x8; then ours llama-1.5b-x8 3 7 "${LLAMA[@]}" --global-batch-size 32; fi
    if want llama-1.5b; then
        ours llama-1.5b-recompute "$WARM" "$MEASURE" "${LLAMA[@]}" --global-batch-size 4 --recompute-granularity selective
    fi
    if want gpt2-124m; then ours gpt2-124m "$WARM" "$MEASURE" "${GPT2[@]}"; fi
    if want llama3-8b-8l; then ours llama3-8b-8l "$LWARM" "$LMEASURE" "${L3_8B[@]}"; fi
    if want llama2-7b-8l; then ours llama2-7b-8l "$LWARM" "$LMEASURE" "${L2_7B[@]}"; fi
    if want llama3-70b-2l; then ours llama3-70b-2l "$LWARM" "$LMEASURE" "${L3_70B[@]}"; fi
fi
if run_torch; then
    if want llama-1.5b; then
        torch_pair llama-1.5b "$WARM" "$MEASURE" 500000 "${T_LLAMA[@]}"
        floor_run llama-1.5b "${T_LLAMA[@]}"
    fi
    if want llama-1.5b-x8; then torch_pair llama-1.5b-x8 3 7 500000 "${T_LLAMA[@]}" --accum 8; fi
    if want gpt2-124m; then
        torch_pair gpt2-124m "$WARM" "$MEASURE" - --arch gpt2 "${T_GPT2[@]}"
        floor_run gpt2-124m "${T_GPT2[@]}" --swiglu 0
        # the floor of our GPT-2 run's own head: Megatron's padded vocabulary (cuBLASLt runs the
        # 50257-column LM head at ~131 TFLOP/s, which makes the floor above slower than both trainers)
        floor_run gpt2-124m-padded --layers 12 --hidden 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50304 --seq 1024 --mbs 64 --swiglu 0
    fi
    if want llama3-8b-8l; then
        torch_pair llama3-8b-8l "$LWARM" "$LMEASURE" 500000 "${T_L3_8B[@]}"
        floor_run llama3-8b-8l "${T_L3_8B[@]}"
    fi
    if want llama2-7b-8l; then
        torch_pair llama2-7b-8l "$LWARM" "$LMEASURE" 10000 "${T_L2_7B[@]}"
        floor_run llama2-7b-8l "${T_L2_7B[@]}"
    fi
    if want llama3-70b-2l; then
        torch_pair llama3-70b-2l "$LWARM" "$LMEASURE" 500000 "${T_L3_70B[@]}"
        floor_run llama3-70b-2l "${T_L3_70B[@]}"
    fi
fi
} | tee "$OUTDIR/results.txt"

python3 - "$OUTDIR/results.txt" "${CLOCKS:-}" "$OURS_SUFFIX" <<'PY'
import csv, datetime, json, math, re, statistics, sys
results, clocks_path, suffix = sys.argv[1], sys.argv[2], sys.argv[3]
ORDER = ["llama-1.5b", "llama-1.5b-x8", "llama-1.5b-recompute", "gpt2-124m",
         "llama3-8b-8l", "llama2-7b-8l", "llama3-70b-2l"]
ours, py, floor, ends = {}, {"torch": {}, "cross": {}}, {}, {}
clocks = []  # (epoch s, SM MHz) from nvidia-smi's CSV (run_carried.sh samples it)
if clocks_path:
    try:
        rows = list(csv.reader(open(clocks_path)))
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
def norm(kind, r):
    """torch_train.py's RESULT and torch_llama.py's, in one form: name, tok_s, step_s, mem_gb, tflops, sdpa."""
    if kind == "torch":
        return dict(name=r.get("name", ""), tok_s=r["tok_s"], step_s=r["step_ms"] / 1e3, mem_gb=r.get("mem_gb"),
                    tflops=r.get("tflops"), sdpa=r.get("sdpa", "-"))
    return dict(name=r.get("tag", ""), tok_s=r.get("tok_s_per_gpu", r.get("tok_s")), step_s=r["step_s"],
                mem_gb=r.get("mem_gb"), tflops=r.get("tflops"), sdpa=r.get("sdpa", "-"))
for line in open(results):
    if line.startswith("END "):
        parts = line.split()
        if len(parts) == 5:
            ends[(parts[1], parts[2])] = (int(parts[3]), float(parts[4]))
    elif line.startswith("RESULT ours {"):
        r = json.loads(line[len("RESULT ours "):]); ours[r["name"]] = r
    else:
        for kind in py:
            if line.startswith(f"RESULT {kind} {{"):
                r = norm(kind, json.loads(line[len(f"RESULT {kind} "):])); py[kind][r["name"]] = r
    m = re.match(r"RESULT floor (\S+): .* -> ([0-9,]+) tok/s max", line)
    if m: floor[m.group(1)] = float(m.group(2).replace(",", ""))
# one row per shape any side measured: our names carry OURS_SUFFIX
def base_of(name):
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name
names = {base_of(n) for n in ours} | set(py["torch"]) | set(py["cross"])
names = [n for n in ORDER if n in names] + sorted(names - set(ORDER))
cross = bool(py["cross"])
def num(v, fmt, width):
    ok = isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
    return format(v, f"{width}{fmt}") if ok else " " * (width - 1) + "-"
def ratio(a, b, width=10):
    ok = all(isinstance(v, (int, float)) and v == v for v in (a, b)) and b
    return format(a / b, f"{width}.3f") if ok else " " * (width - 1) + "-"
print()
head = f"{'shape':22s} {'ours tok/s':>11s} {'torch tok/s':>12s} {'ours/torch':>10s}"
if cross: head += f" {'cross tok/s':>12s} {'ours/cross':>10s}"
head += (f" {'floor tok/s':>12s} {'ours/floor':>10s} {'ours TFLOP/s':>12s} {'torch TFLOP/s':>13s} {'ours MFU':>8s}"
         f" {'ours GiB':>8s} {'torch GiB':>9s} {'mem o/t':>8s} {'torch sdpa':>18s} {'1st iter s':>10s}"
         f" {'ours MHz':>8s} {'torch MHz':>9s}")
print(head)
for name in names:
    # the recompute run is compared with PyTorch's run of its shape (which recomputes nothing)
    shape = name[: -len("-recompute")] if name.endswith("-recompute") else name
    o, t, c = ours.get(name + suffix), py["torch"].get(shape), py["cross"].get(shape)
    base = shape.replace("-x8", "")
    f = floor.get(base + "-padded", floor.get(base))  # GPT-2: the floor at our padded vocabulary
    g = lambda d, k: d.get(k) if d else None
    o_mhz = mhz(*o["window"]) if o and len(o.get("window", [])) == 2 else "-"
    end = ends.get(("torch", shape))
    t_mhz = mhz(end[1] - end[0] * t["step_s"], end[1]) if t and end else "-"
    row = f"{name + (suffix if o else ''):22s} {num(g(o,'tok_s'),'.0f',11)} {num(g(t,'tok_s'),'.0f',12)} {ratio(g(o,'tok_s'), g(t,'tok_s'))}"
    if cross: row += f" {num(g(c,'tok_s'),'.0f',12)} {ratio(g(o,'tok_s'), g(c,'tok_s'))}"
    row += (f" {num(f,'.0f',12)} {ratio(g(o,'tok_s'), f)} {num(g(o,'tflops'),'.1f',12)} {num(g(t,'tflops'),'.1f',13)}"
            f" {num(g(o,'mfu'),'.3f',8)} {num(g(o,'mem_gb'),'.1f',8)} {num(g(t,'mem_gb'),'.1f',9)}"
            f" {ratio(g(o,'mem_gb'), g(t,'mem_gb'), 8)} {str(g(t,'sdpa') or '-'):>18s} {num(g(o,'first_iter_s'),'.2f',10)}"
            f" {o_mhz:>8s} {t_mhz:>9s}")
    print(row)
print("(tok/s per GPU; TFLOP/s by Megatron's formula on both sides; GiB = 2**30 bytes, peak allocated;"
      " torch = bench/torch_train.py" + (", cross = shared/bench/torch_llama.py)" if cross else ")"))
PY
