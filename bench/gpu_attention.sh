#!/usr/bin/env bash
# Attention-only benchmark, run in one call on the GPU machine: Megatron-C's causal attention
# (`megatron-c bench attention`) beside PyTorch's SDPA backends (shared/bench/sdpa_backends.py:
# flash, cuDNN, efficient) on the same shapes, bf16, forward and forward+backward.
#   ours      the CUDA backend's attention op as the trainer runs it (cuDNN's fused attention
#             where it takes the shape, else our kernels)
#   ours-own  the same with MC_ATTN_CUDNN=0: our own kernels only
#   torch     each SDPA backend (sdpa_backends.py: 3 warm-up runs, the median of 20)
# Shapes B:H:G:D:S (batch, query heads, key/value heads, head dim, sequence), default:
#   1:32:8:128:8192 1:32:8:128:16384 4:32:8:64:2048 2:32:32:128:4096 1:64:8:128:8192
# Both sides time with CUDA events and count causal FLOPs at half (forward 4 B H S^2 D / 2,
# forward+backward 3.5x that). sdpa_backends.py times no backward alone: the table's torch
# backward is its forward+backward minus its forward (marked ~).
# Logs and RESULT lines under $OUT/gpu_attention (default a directory under ${TMPDIR:-/tmp}).
#   [ATTN_SHAPES=B:H:G:D:S,...] [ATTN_ITERS=20] [ATTN_WARMUP=3] [ATTN_TIMEOUT=600]
#   bench/gpu_attention.sh BUILD_DIR [SHARED_BENCH_DIR]
set -uo pipefail
BUILD=${1:-build}
SHARED_BENCH=${2:-${MC_SHARED_DIR:-../shared}/bench}
SHAPES=${ATTN_SHAPES:-1:32:8:128:8192,1:32:8:128:16384,4:32:8:64:2048,2:32:32:128:4096,1:64:8:128:8192}
ITERS=${ATTN_ITERS:-20} WARMUP=${ATTN_WARMUP:-3} LIMIT=${ATTN_TIMEOUT:-600}
OUTDIR=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_attention.XXXXXX")}/gpu_attention
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
echo "# logs: $OUTDIR; shapes $SHAPES; ours --iters $ITERS --warmup $WARMUP"

ours() { # tag, env VAR=VAL...
    local tag=$1
    shift
    env "$@" timeout "$LIMIT" "$BUILD/megatron-c" bench attention --shapes "$SHAPES" --iters "$ITERS" --warmup "$WARMUP" \
        > "$OUTDIR/$tag.log" 2>&1
    local rc=$?
    grep '^RESULT {' "$OUTDIR/$tag.log" | sed "s/^RESULT/RESULT $tag/"
    if [ $rc != 0 ]; then echo "RESULT $tag FAILED rc $rc (see $OUTDIR/$tag.log)"; tail -3 "$OUTDIR/$tag.log"; fi
}

{
ours ours
ours ours-own MC_ATTN_CUDNN=0
IFS=, read -r -a shape_list <<< "$SHAPES"
for shape in "${shape_list[@]}"; do
    IFS=: read -r b h g d s <<< "$shape"
    log="$OUTDIR/torch_${b}_${h}_${g}_${d}_${s}.log"
    timeout "$LIMIT" python3 "$SHARED_BENCH/sdpa_backends.py" --b "$b" --h "$h" --kv "$g" --d "$d" --s "$s" > "$log" 2>&1
    rc=$?
    grep '^RESULT {' "$log" | sed "s/^RESULT/RESULT torch $shape/"
    if [ $rc != 0 ]; then echo "RESULT torch $shape FAILED rc $rc (see $log)"; tail -3 "$log"; fi
done
} | tee "$OUTDIR/results.txt"

python3 - "$OUTDIR/results.txt" <<'PY'
import json, sys
ours = {}    # (tag, shape) -> {fwd, bwd, fb, fb_tflops}
torch = {}   # shape -> {backend: {fwd, bwd, fb, fb_tflops}}
shapes = []
def add_shape(s):
    if s not in shapes: shapes.append(s)
for line in open(sys.argv[1]):
    parts = line.split(" ", 2)
    if len(parts) < 3 or parts[0] != "RESULT":
        continue
    tag = parts[1]
    if tag in ("ours", "ours-own") and parts[2].startswith("{"):
        r = json.loads(parts[2])
        shape = f"{r['b']}:{r['h']}:{r['kv']}:{r['d']}:{r['s']}"
        add_shape(shape)
        ours[(tag, shape)] = dict(fwd=r["fwd_ms"], bwd=r["bwd_ms"], fb=r["fwdbwd_ms"], fb_tflops=r["fwdbwd_tflops"])
    elif tag == "torch":
        shape, _, rest = parts[2].partition(" ")
        if not rest.startswith("{"):
            continue
        r = json.loads(rest)
        add_shape(shape)
        if "error" in r:
            torch.setdefault(shape, {})[r["backend"]] = dict(error=r["error"])
        else:
            torch.setdefault(shape, {})[r["backend"]] = dict(fwd=r["fwd_ms"], bwd=r["fwdbwd_ms"] - r["fwd_ms"],
                                                             fb=r["fwdbwd_ms"], fb_tflops=r["fwdbwd_tflops"])
def cell(v, w=9, fmt=".3f", mark=""):
    return f"{mark}{v:{fmt}}".rjust(w) if isinstance(v, (int, float)) else "-".rjust(w)
def speed(t, o, w=8):  # torch's best ms / ours ms: above 1, ours is faster
    return f"{t / o:{w}.2f}" if isinstance(t, (int, float)) and isinstance(o, (int, float)) and o > 0 else "-".rjust(w)
print()
print("per shape B:H:G:D:S, ms (median); x = the fastest PyTorch backend's ms / this row's ms (above 1: faster "
      "than PyTorch's best); torch backward ~ = its fwd+bwd minus its fwd")
print(f"{'shape':18s} {'impl':16s} {'fwd ms':>9s} {'bwd ms':>9s} {'f+b ms':>9s} {'f+b TF/s':>9s}"
      f" {'x fwd':>8s} {'x bwd':>8s} {'x f+b':>8s}")
for shape in shapes:
    ok = {k: v for k, v in torch.get(shape, {}).items() if "error" not in v}
    best = {c: min((v[c] for v in ok.values()), default=None) for c in ("fwd", "bwd", "fb")}
    for tag in ("ours", "ours-own"):
        o = ours.get((tag, shape))
        if not o:
            print(f"{shape:18s} {tag:16s} {'(no result)':>9s}")
            continue
        print(f"{shape:18s} {tag:16s} {cell(o['fwd'])} {cell(o['bwd'])} {cell(o['fb'])} {cell(o['fb_tflops'], fmt='.1f')}"
              f" {speed(best['fwd'], o['fwd'])} {speed(best['bwd'], o['bwd'])} {speed(best['fb'], o['fb'])}")
    for name, v in sorted(ok.items(), key=lambda kv: kv[1]["fb"]):
        print(f"{shape:18s} {'torch ' + name:16s} {cell(v['fwd'])} {cell(v['bwd'], mark='~')} {cell(v['fb'])}"
              f" {cell(v['fb_tflops'], fmt='.1f')} {speed(best['fwd'], v['fwd'])} {speed(best['bwd'], v['bwd'])}"
              f" {speed(best['fb'], v['fb'])}")
    for name, v in torch.get(shape, {}).items():
        if "error" in v:
            print(f"{shape:18s} {'torch ' + name:16s} unavailable: {v['error'][:90]}")
    if not torch.get(shape):
        print(f"{shape:18s} {'torch':16s} (no result)")
PY
