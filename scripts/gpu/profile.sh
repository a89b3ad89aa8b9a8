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
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
COMMON=(--train-iters 3 --log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0
        --mock-data --tokenizer-type NullTokenizer --device cuda --bf16)
LLAMA=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4 --global-batch-size 4)
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu)
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
