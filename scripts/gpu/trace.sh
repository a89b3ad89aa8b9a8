#!/usr/bin/env bash
# Where a training step's time goes on the GPU machine, as the kernels really run: the
# CUPTI tracer (tools/kernel_trace.c, packed by carry_build.sh into lib/trace/) on the
# bench shapes (TRACE_SHAPES: llama, gpt2 or a name shapes.sh knows), summarized by tools/trace_summary.py (each steady
# iteration's busy and idle time, the largest gaps, the kernels grouped by name), with
# nvidia-smi's clocks and power sampled alongside. Logs under $OUT/trace.
#   [TRACE_BIN=megatron-c binary] [TRACE_TAG=name] [TRACE_SHAPES="llama gpt2"] \
#   bash scripts/gpu/trace.sh [extra megatron-c flags...]
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}/trace
mkdir -p "$OUT"
ITERS=${TRACE_ITERS:-6}
BIN=${TRACE_BIN:-$B/megatron-c}
TAG=${TRACE_TAG:+_$TRACE_TAG}
source "$(dirname "$0")/shapes.sh"
common_flags "$ITERS"
trace() { # name, flags...
    local name=$1$TAG; shift
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$OUT/smi_$name.csv" &
    local smi=$!
    LD_LIBRARY_PATH="$C/lib/trace:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH="$C/lib/trace/libmc_kernel_trace.so" \
        MC_TRACE_OUT="$OUT/trace_$name.csv" timeout 200 "$BIN" train "${COMMON[@]}" "$@" \
        --log-dir "$OUT/run_$name" > "$OUT/run_$name.log" 2>&1
    local rc=$?
    kill $smi 2>/dev/null
    echo "== $name (rc $rc): host step times (ms): $(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' \
        "$OUT/run_$name.log" | awk '{print $NF}' | tr '\n' ' ')"
    python3 - "$OUT/smi_$name.csv" <<'PY'
import sys, statistics
rows = [l.split(",") for l in open(sys.argv[1]) if l.strip()]
busy = [(float(c), float(p)) for c, p in rows if float(p) > 200]
if busy:
    print(f"   SM clock median {statistics.median(c for c, _ in busy):.0f} MHz, power median "
          f"{statistics.median(p for _, p in busy):.0f} W over {len(busy)} busy samples")
PY
    python3 tools/trace_summary.py "$OUT/trace_$name.csv" 2 40 | tee "$OUT/summary_$name.txt"
    gzip -f "$OUT/trace_$name.csv"
}
for shape in ${TRACE_SHAPES:-llama gpt2}; do
    case $shape in
    llama) trace llama "${LLAMA[@]}" "$@" ;;
    gpt2) trace gpt2 "${GPT2[@]}" "$@" ;;
    *) shape_flags "$shape" && trace "$shape" "${FLAGS[@]}" "$@" ;;
    esac
done
