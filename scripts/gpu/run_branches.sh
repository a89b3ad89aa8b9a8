#!/usr/bin/env bash
# On the GPU machine: for every branch packed by scripts/gpu/carry_branches.sh, its GPU
# tests (all branches at once: correctness only, nothing timed), then one by one an
# interleaved A/B of its megatron-c (with its `env`) against the current tree's
# (bench/gpu_ab.sh, ROUNDS rounds, SHAPES shapes). A file .carry/gpu/branches/NAME.abflags
# beside a branch's pack holds flags both sides of its A/B get (say --deterministic-mode
# for a change to that mode). Logs under $OUT/branches.
# MAIN_TESTS names tests of the current tree to run beside the branches' (and golden parity
# on CUDA with MAIN_GOLDEN=1), before any timing.
#   OUT=... [ROUNDS=2] [SHAPES="llama gpt2"] [BRANCH_TESTS="test_..."] [MAIN_TESTS="test_..."]
#   [MAIN_GOLDEN=1] bash scripts/gpu/run_branches.sh
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT/branches"
branch_env() { # the branch's VAR=VALUE lines, one per line
    cat "$1/env"
}
for dir in "$C"/branches/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    log="$OUT/branches/$name"
    mkdir -p "$log"
    (
        mapfile -t envs < <(branch_env "$dir")
        for t in ${BRANCH_TESTS:-test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism}; do
            [ -x "$dir/$t" ] || continue
            env "${envs[@]}" timeout 300 "$dir/$t" > "$log/$t.log" 2>&1
            echo "$t rc $?: $(tail -1 "$log/$t.log")" >> "$log/summary"
        done
    ) &
done
(
    for t in ${MAIN_TESTS:-}; do
        timeout 300 "$B/$t" > "$OUT/branches/main_$t.log" 2>&1
        echo "main $t rc $?: $(tail -1 "$OUT/branches/main_$t.log")" >> "$OUT/branches/main_summary"
    done
    if [ "${MAIN_GOLDEN:-0}" = 1 ]; then
        MC_TEST_DEVICE=cuda timeout 60 "$B/test_golden_parity" > "$OUT/branches/main_golden.log" 2>&1
        echo "main golden parity on CUDA rc $?: $(tail -1 "$OUT/branches/main_golden.log")" >> "$OUT/branches/main_summary"
    fi
) &
wait
[ -f "$OUT/branches/main_summary" ] && { echo "== current tree"; cat "$OUT/branches/main_summary"; }
for dir in "$C"/branches/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    log="$OUT/branches/$name"
    echo "== branch $name: $(cat "$dir/commit")"
    cat "$log/summary"
    grep -h "worst step" "$log/test_train_determinism.log" 2>/dev/null
done
for dir in "$C"/branches/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    log="$OUT/branches/$name"
    mapfile -t envs < <(branch_env "$dir")
    # the branch's binary with its environment, as one executable for gpu_ab.sh
    printf '#!/bin/sh\nexec env %s %s "$@"\n' "${envs[*]:-}" "$dir/megatron-c" > "$dir/megatron-c-env"
    chmod +x "$dir/megatron-c-env"
    flags=""
    [ -f "$C/branches/$name.abflags" ] && flags=$(cat "$C/branches/$name.abflags")
    for shape in ${SHAPES:-llama gpt2}; do
        AB_FLAGS="$flags" OUT="$log" MC_BENCH_ITERS=${MC_BENCH_ITERS:-10} bash bench/gpu_ab.sh "$B/megatron-c" \
            "$dir/megatron-c-env" "${ROUNDS:-2}" "$shape" 2>&1 | grep "AB median" | sed "s/^/$name $shape ${flags:+($flags) }: /"
    done
done
