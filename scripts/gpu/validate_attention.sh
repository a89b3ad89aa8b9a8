#!/usr/bin/env bash
# One call on the GPU machine (after scripts/gpu/carry_build.sh, and carry_branches.sh for
# AB_BRANCH) for the attention paths, in the order of what matters most, each part started
# only while BUDGET seconds (from the start) leave room for it, so that the call ends inside
# the device's 10 minutes:
#  1. the GPU tests, all at once (they check results, not times): cuDNN's fused attention on
#     (MC_ATTN_CUDNN=1, so that every shape cuDNN refuses is said in the logs), and OWN_TESTS
#     again with our own kernels alone (MC_ATTN_CUDNN=0);
#  2. with AB_BRANCH: an interleaved A/B (bench/gpu_ab.sh) of that packed branch against the
#     current tree with our own attention (MC_ATTN_CUDNN=0), on AB_SHAPES: what changed
#     besides the attention path;
#  3. attention alone (bench/gpu_attention.sh: ours, ours without cuDNN, PyTorch's SDPA
#     backends, side by side);
#  4. with GEN=1: generation speed beside transformers (bench/gpu_generate.sh) at each
#     batch of GEN_BATCHES (default "1 32"); GEN_TESTS=1 adds tests/test_generate_cli.sh
#     (its GPU cases) to step 1, and HF_CHECK=CKPT_DIR tools/reference/check_hf_export.py
#     on that checkpoint with --device cuda;
#  5. with TRACE="shape ...": the CUPTI kernel trace of our step (scripts/gpu/trace.sh) on each;
#  6. the training benchmark (bench/gpu_train.sh) for each group or shape in TRAIN, each
#     beside the PyTorch reference trainer.
# Logs under $OUT, returned as one archive.
#   OUT=... [BUDGET=570] [TESTS="test_..."] [OWN_TESTS="test_..."] [AB_BRANCH=name]
#   [AB_SHAPES="llama gpt2"] [ATTN=1] [GEN=0] [TRACE=""] [TRAIN="long", "" for none] bash scripts/gpu/validate_attention.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
source scripts/gpu/carried_env.sh
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT/tests" "$OUT/tests_own"
T0=$(date +%s)
BUDGET=${BUDGET:-570}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
echo "cuDNN: ${CUDNN_DIR:-none found}"
since() { echo "$(($(date +%s) - T0)) s"; }
room() { [ $(($(date +%s) - T0 + $1)) -le "$BUDGET" ] || { echo "-- skipped (needs ~$1 s, $(since) spent of $BUDGET)"; false; }; }

echo "== GPU tests, cuDNN attention on (MC_ATTN_CUDNN=1), and our kernels alone (MC_ATTN_CUDNN=0), at once"
ALL_TESTS=${TESTS:-test_cuda_attention test_backend_equivalence test_train_determinism test_golden_parity test_trainer_batches test_ops_errors}
OWN=${OWN_TESTS:-test_backend_equivalence test_train_determinism}
NT=$(wc -w <<< "$ALL_TESTS $OWN")
SHARE=$(( $(nproc) / NT > 1 ? $(nproc) / NT : 1 ))
for t in $ALL_TESTS; do
    (export OMP_NUM_THREADS=$SHARE; MC_ATTN_CUDNN=1 run_gpu_test "$B" "$t" "$OUT/tests" > "$OUT/tests/$t.summary"
     [ "$GPU_TEST_FAILURES" -eq 0 ] || echo FAILED >> "$OUT/tests/$t.summary") &
done
for t in $OWN; do
    (export OMP_NUM_THREADS=$SHARE; MC_ATTN_CUDNN=0 run_gpu_test "$B" "$t" "$OUT/tests_own" > "$OUT/tests_own/$t.summary"
     [ "$GPU_TEST_FAILURES" -eq 0 ] || echo FAILED >> "$OUT/tests_own/$t.summary") &
done
if [ "${GEN_TESTS:-0}" = 1 ]; then # generate's GPU cases (greedy = transformers, batched = alone)
    (timeout "${GPU_TEST_TIMEOUT:-300}" bash tests/test_generate_cli.sh "$B" > "$OUT/tests/generate_cli.log" 2>&1
     echo "test_generate_cli.sh rc $?: $(tail -1 "$OUT/tests/generate_cli.log")" > "$OUT/tests/generate_cli.summary"
     grep -q "rc 0:" "$OUT/tests/generate_cli.summary" || echo FAILED >> "$OUT/tests/generate_cli.summary") &
fi
if [ -n "${HF_CHECK:-}" ]; then # a trained checkpoint exported, loaded by transformers, greedy on the GPU
    (timeout "${GPU_TEST_TIMEOUT:-300}" python3 tools/reference/check_hf_export.py "$B" tests/fixtures/hf \
         --checkpoint "$HF_CHECK" --device cuda > "$OUT/tests/hf_export.log" 2>&1
     echo "check_hf_export.py rc $?: $(grep -c '^ok' "$OUT/tests/hf_export.log") ok, $(grep -c '^FAIL' "$OUT/tests/hf_export.log") FAIL" \
         > "$OUT/tests/hf_export.summary"
     grep -q "rc 0:" "$OUT/tests/hf_export.summary" || echo FAILED >> "$OUT/tests/hf_export.summary") &
fi
wait
cat "$OUT"/tests/*.summary
echo "-- our kernels alone:"
cat "$OUT"/tests_own/*.summary
grep -q FAILED "$OUT"/tests/*.summary "$OUT"/tests_own/*.summary && GPU_TEST_FAILURES=1
grep -h "cuDNN refused\|could not be loaded\|cuDNN attention unavailable" "$OUT"/tests/*.log | sort | uniq -c | head -20

if [ -n "${AB_BRANCH:-}" ] && room 90; then
    echo "== A/B: branch $AB_BRANCH (A) against this tree with MC_ATTN_CUDNN=0 (B) [$(since)]"
    printf '#!/bin/sh\nexec env MC_ATTN_CUDNN=0 %s "$@"\n' "$B/megatron-c" > "$B/megatron-c-own"
    chmod +x "$B/megatron-c-own"
    for shape in ${AB_SHAPES:-llama gpt2}; do
        OUT="$OUT/ab" MC_BENCH_ITERS=${MC_BENCH_ITERS:-8} bash bench/gpu_ab.sh "$C/branches/$AB_BRANCH/megatron-c" \
            "$B/megatron-c-own" "${ROUNDS:-2}" "$shape" 2>&1 | grep "^AB" | sed "s/^/$shape: /"
    done
fi
if [ "${ATTN:-1}" = 1 ] && room 60; then
    echo "== attention alone [$(since)]"
    ATTN_TIMEOUT=60 timeout 100 bash bench/gpu_attention.sh "$B" "$C/shared/bench" 2>&1 | grep -v '^RESULT' | tail -30
fi
if [ "${GEN:-0}" = 1 ] && room 100; then
    echo "== generation speed (bench/gpu_generate.sh) [$(since)]"
    for batch in ${GEN_BATCHES:-1 32}; do
        room 60 || break
        BATCH=$batch C="$C" OUT="$OUT/gen_b$batch" timeout ${GEN_TIMEOUT:-150} bash bench/gpu_generate.sh "$B" "$C/shared/bench" 2>&1 | tail -${GEN_LINES:-8}
    done
fi
if [ -n "${TRACE:-}" ] && room 60; then # where our step's time goes (scripts/gpu/trace.sh), per shape
    echo "== kernel trace: $TRACE [$(since)]"
    TRACE_SHAPES="$TRACE" OUT="$OUT" timeout 150 bash scripts/gpu/trace.sh 2>&1 | grep -v '^ *#' | head -${TRACE_LINES:-45}
fi
for group in ${TRAIN-long}; do
    case $group in long) need=200 ;; *) need=60 ;; esac
    room $need || continue
    echo "== training, $group [$(since)]"
    OUT="$OUT/train_$group" timeout $((BUDGET - ($(date +%s) - T0))) bash bench/gpu_train.sh "$B" "$C/shared/bench" "$group" 2>&1 |
        grep -v '^RESULT\|^END' | tail -30
done
# one archive of every log (the device returns a few files only)
cd "$OUT" && tar -czf /tmp/logs.tgz . 2>/dev/null && find . -mindepth 1 -maxdepth 1 ! -name '*.txt' -exec rm -rf {} + &&
    mv /tmp/logs.tgz .
echo "== total $(since); GPU test failures: $GPU_TEST_FAILURES"
[ "$GPU_TEST_FAILURES" -eq 0 ]
