#!/usr/bin/env bash
# Nsight Compute's full section set for single launches of named kernels as they run in
# training (a short megatron-c run on a bench shape; the first iteration's launches are
# skipped), on the GPU machine after scripts/gpu/carry_build.sh; prints the lines that say
# what bounds each kernel. Logs and reports under $OUT/ncu.
#   [SHAPE=gpt2|llama] [SKIP=launches to skip] bash scripts/gpu/ncu_kernels.sh REGEX...
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}/ncu
mkdir -p "$OUT"
source "$(dirname "$0")/shapes.sh"
common_flags 2
shape_flags "${SHAPE:-gpt2}" || exit 2
[ $# -gt 0 ] || { echo "usage: [SHAPE=gpt2|llama] [SKIP=N] bash scripts/gpu/ncu_kernels.sh REGEX..." >&2; exit 2; }
for k in "$@"; do
    name=${k//[^A-Za-z0-9_]/_}
    timeout 240 "$NCU" --clock-control none --set full -k "regex:$k" --launch-skip "${SKIP:-20}" -c 1 \
        -o "$OUT/$name" "$B/megatron-c" train "${COMMON[@]}" "${FLAGS[@]}" --log-dir "$OUT/run_$name" \
        > "$OUT/$name.log" 2>&1
    if [ ! -e "$OUT/$name.ncu-rep" ]; then
        echo "== $k: no report (no launch matched after ${SKIP:-20} skipped, or the run failed: $OUT/$name.log)"
        continue
    fi
    "$NCU" --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name.txt" 2>&1
    echo "== $k (${SHAPE:-gpt2}, launch ${SKIP:-20} skipped)"
    grep -E '^ +(Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Eligible Warps Per Scheduler|Block Size|Grid Size|Dynamic Shared Memory Per Block|L2 Hit Rate|Waves Per SM)' "$OUT/$name.txt" | head -20
    grep -E 'OPT|Est. Speedup' "$OUT/$name.txt" | head -6 | cut -c1-220
done
