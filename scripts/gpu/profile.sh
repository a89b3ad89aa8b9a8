#!/usr/bin/env bash
# Where the step's time goes, on the GPU machine, with the binaries packed by
# scripts/gpu/carry_build.sh: Nsight Compute's kernel durations for three iterations of the
# 1.5B and GPT-2 bench shapes (summarized per kernel for one steady iteration by
# tools/ncu_summary.py), our attention and op timings, and PyTorch's SDPA and fused AdamW
# on the same shapes in the same call (bench/torch_ops.py). Logs under $OUT/profile.
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}/profile
mkdir -p "$OUT"
source "$(dirname "$0")/shapes.sh"
common_flags 3
prof() { # name, flags...
    local name=$1; shift
    timeout 200 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/ncu_$name.csv" "$B/megatron-c" train "${COMMON[@]}" "$@" --log-dir "$OUT/run_$name" \
        > "$OUT/ncu_$name.log" 2>&1
    echo "== $name (rc $?)"
    python3 tools/ncu_summary.py "$OUT/ncu_$name.csv" 45 | tee "$OUT/summary_$name.txt"
}
echo "ncu: $NCU"
prof llama "${LLAMA[@]}"
prof gpt2 "${GPT2[@]}"
if [ "${TORCH_OPS:-1}" = 1 ]; then
    echo "== torch ops"
    timeout 150 python3 bench/torch_ops.py 2>&1 | tee "$OUT/torch_ops.log" | grep RESULT
fi
echo "== our attention"
MC_BENCH_ATTN=only timeout 60 "$B/test_cuda_attention" 2>&1 | tee "$OUT/attn.log" | grep BENCH
if [ "${OPS_BENCH:-1}" = 1 ]; then
    echo "== our ops"
    MC_TEST_BENCH=1 timeout 90 "$B/test_backend_equivalence" > "$OUT/ops.log" 2>&1; grep -iE "bench|TB/s|TFLOP|us" "$OUT/ops.log" | tail -40
fi
