#!/usr/bin/env bash
# On the GPU machine: for every branch packed by scripts/gpu/carry_branches.sh, its GPU
# tests (all branches at once: correctness only, nothing timed), then one by one an
# interleaved A/B of its megatron-c (with its `env`) against the current tree's
# (bench/gpu_ab.sh, ROUNDS rounds, SHAPES shapes). A file .carry/gpu/branches/NAME.abflags
# beside a branch's pack holds flags both sides of its A/B get (say --deterministic-mode
# for a change to that mode). Logs under $OUT/branches.
# MAIN_TESTS names tests of the current tree to run beside the branches', before any timing
# (a test with a GPU half runs it too: carried_env.sh's run_gpu_test). A test that fails
# makes the script's exit code 1.
#   OUT=... [ROUNDS=2] [SHAPES="llama gpt2"] [BRANCH_TESTS="test_..."] [MAIN_TESTS="test_..."]
#   bash scripts/gpu/run_branches.sh
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
        [ ${#envs[@]} -gt 0 ] && export "${envs[@]}"
        for t in ${BRANCH_TESTS:-test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism test_trainer_batches test_golden_parity}; do
            run_gpu_test "$dir" "$t" "$log" >> "$log/summary"
        done
        [ "$GPU_TEST_FAILURES" -eq 0 ] || echo "FAILED" >> "$log/summary"
    ) &
done
(
    for t in ${MAIN_TESTS:-}; do
        run_gpu_test "$B" "$t" "$OUT/branches" main_ >> "$OUT/branches/main_summary"
    done
    [ "$GPU_TEST_FAILURES" -eq 0 ] || echo "FAILED" >> "$OUT/branches/main_summary"
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
if cat "$OUT"/branches/*summary "$OUT"/branches/*/summary 2>/dev/null | grep -q FAILED; then
    echo "FAILED: a GPU test did not pass (see the summaries above)"
    exit 1
fi
