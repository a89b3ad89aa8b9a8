#!/usr/bin/env bash
# Where a training step's time goes on the GPU machine, as the kernels really run: the
# CUPTI tracer (tools/kernel_trace.c, packed by carry_build.sh into lib/trace/) on the
# 1.5B and GPT-2 bench shapes, summarized by tools/trace_summary.py (each steady
# iteration's busy and idle time, the largest gaps, the kernels grouped by name), with
# nvidia-smi's clocks and power sampled alongside. Logs under $OUT/trace.
#   bash scripts/gpu/trace.sh [extra megatron-c flags...]
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}/trace
mkdir -p "$OUT"
ITERS=${TRACE_ITERS:-6}
COMMON=(--train-iters "$ITERS" --log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0
        --mock-data --tokenizer-type NullTokenizer --device cuda --bf16)
LLAMA=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4 --global-batch-size 4)
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu)
trace() { # name, flags...
    local name=$1; shift
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$OUT/smi_$name.csv" &
    local smi=$!
    LD_LIBRARY_PATH="$C/lib/trace:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH="$C/lib/trace/libmc_kernel_trace.so" \
        MC_TRACE_OUT="$OUT/trace_$name.csv" timeout 200 "$B/megatron-c" train "${COMMON[@]}" "$@" \
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
trace llama "${LLAMA[@]}" "$@"
trace gpt2 "${GPT2[@]}" "$@"
