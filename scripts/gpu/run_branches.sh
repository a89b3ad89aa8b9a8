#!/usr/bin/env bash
# On the GPU machine: for every branch packed by scripts/gpu/carry_branches.sh, its GPU
# tests, then an interleaved A/B of its megatron-c (with its `env`) against the current
# tree's (bench/gpu_ab.sh, ROUNDS rounds, SHAPES shapes). Logs under $OUT/branches.
#   OUT=... [ROUNDS=2] [SHAPES="llama gpt2"] bash scripts/gpu/run_branches.sh
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT/branches"
for dir in "$C"/branches/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    log="$OUT/branches/$name"
    mkdir -p "$log"
    echo "== branch $name: $(cat "$dir/commit")"
    envs=()
    while read -r kv; do [ -n "$kv" ] && envs+=("$kv"); done < "$dir/env"
    for t in test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism; do
        [ -x "$dir/$t" ] || continue
        env "${envs[@]}" timeout 200 "$dir/$t" > "$log/$t.log" 2>&1
        echo "$t rc $?: $(tail -1 "$log/$t.log")"
    done
    grep -h "worst step" "$log/test_train_determinism.log" 2>/dev/null
    # the branch's binary with its environment, as one executable for gpu_ab.sh
    printf '#!/bin/sh\nexec env %s %s "$@"\n' "${envs[*]:-}" "$dir/megatron-c" > "$dir/megatron-c-env"
    chmod +x "$dir/megatron-c-env"
    for shape in ${SHAPES:-llama gpt2}; do
        OUT="$log" MC_BENCH_ITERS=${MC_BENCH_ITERS:-10} bash bench/gpu_ab.sh "$B/megatron-c" "$dir/megatron-c-env" \
            "${ROUNDS:-2}" "$shape" 2>&1 | grep "AB median" | sed "s/^/$shape: /"
    done
done
