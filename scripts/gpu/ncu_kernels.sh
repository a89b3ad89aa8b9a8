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
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
COMMON=(--train-iters 2 --log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0
        --mock-data --tokenizer-type NullTokenizer --device cuda --bf16)
case ${SHAPE:-gpt2} in
llama) FLAGS=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention
              --num-query-groups 8 --ffn-hidden-size 8192 --swiglu --normalization RMSNorm
              --position-embedding-type rope --rotary-base 500000 --untie-embeddings-and-output-weights
              --disable-bias-linear --vocab-size 128256 --seq-length 2048 --micro-batch-size 4 --global-batch-size 4) ;;
*) FLAGS=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
          --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu) ;;
esac
for k in "$@"; do
    name=${k//[^A-Za-z0-9_]/_}
    timeout 240 "$NCU" --clock-control none --set full -k "regex:$k" --launch-skip "${SKIP:-20}" -c 1 \
        -o "$OUT/$name" "$B/megatron-c" train "${COMMON[@]}" "${FLAGS[@]}" --log-dir "$OUT/run_$name" \
        > "$OUT/$name.log" 2>&1
    "$NCU" --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name.txt" 2>&1
    echo "== $k (${SHAPE:-gpt2}, launch ${SKIP:-20} skipped)"
    grep -E '^ +(Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Eligible Warps Per Scheduler|Block Size|Grid Size|Dynamic Shared Memory Per Block|L2 Hit Rate|Waves Per SM)' "$OUT/$name.txt" | head -20
    grep -E 'OPT|Est. Speedup' "$OUT/$name.txt" | head -6 | cut -c1-220
done
