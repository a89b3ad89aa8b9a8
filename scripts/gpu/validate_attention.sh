#!/usr/bin/env bash
# One call on the GPU machine (after scripts/gpu/carry_build.sh) for the attention paths:
# the GPU tests with cuDNN's fused attention on (MC_ATTN_CUDNN=1, so that every shape cuDNN
# refuses is said in the logs) and then off (our own kernels alone), the attention
# benchmark (bench/gpu_attention.sh: ours, ours without cuDNN and PyTorch's SDPA backends,
# side by side) and the training benchmark's groups named in TRAIN (bench/gpu_train.sh,
# each shape beside the PyTorch reference trainer). Each part runs under a time limit so
# that the call ends inside the device's 10 minutes. Logs under $OUT.
#   OUT=... [TESTS="test_..."] [OWN_TESTS="test_..."] [ATTN=1] [TRAIN="long"] \
#   bash scripts/gpu/validate_attention.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/carried_env.sh
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT/tests" "$OUT/tests_own"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
echo "cuDNN: ${CUDNN_DIR:-none found}"
since() { echo "$(($(date +%s) - T0)) s"; }

# The tests check results, not times: they run at once, each with its own logs.
echo "== GPU tests, cuDNN attention on (MC_ATTN_CUDNN=1), and our kernels alone (MC_ATTN_CUDNN=0), at once"
for t in ${TESTS:-test_cuda_attention test_backend_equivalence test_train_determinism test_golden_parity test_trainer_batches test_cuda_wgmma test_ops_errors}; do
    (MC_ATTN_CUDNN=1 run_gpu_test "$B" "$t" "$OUT/tests" > "$OUT/tests/$t.summary"
     [ "$GPU_TEST_FAILURES" -eq 0 ] || echo FAILED >> "$OUT/tests/$t.summary") &
done
for t in ${OWN_TESTS:-test_backend_equivalence test_train_determinism}; do
    (MC_ATTN_CUDNN=0 run_gpu_test "$B" "$t" "$OUT/tests_own" > "$OUT/tests_own/$t.summary"
     [ "$GPU_TEST_FAILURES" -eq 0 ] || echo FAILED >> "$OUT/tests_own/$t.summary") &
done
wait
cat "$OUT"/tests/*.summary
echo "-- our kernels alone:"
cat "$OUT"/tests_own/*.summary
grep -q FAILED "$OUT"/tests/*.summary "$OUT"/tests_own/*.summary && GPU_TEST_FAILURES=1
grep -h "cuDNN refused\|could not be loaded\|cuDNN attention unavailable" "$OUT"/tests/*.log | sort | uniq -c | head -20
if [ "${ATTN:-1}" = 1 ]; then
    echo "== attention alone [$(since)]"
    timeout 200 bash bench/gpu_attention.sh "$B" "$C/shared/bench" 2>&1 | tail -30
fi
for group in ${TRAIN:-long}; do
    echo "== training, $group [$(since)]"
    bash bench/gpu_train.sh "$B" "$C/shared/bench" "$group" 2>&1 | grep -v '^RESULT\|^END' | tail -30
done
# one archive of every log (the device returns a few files only)
cd "$OUT" && tar -czf /tmp/logs.tgz . 2>/dev/null && find . -mindepth 1 -maxdepth 1 ! -name '*.txt' -exec rm -rf {} + &&
    mv /tmp/logs.tgz .
echo "== total $(since); GPU test failures: $GPU_TEST_FAILURES"
[ "$GPU_TEST_FAILURES" -eq 0 ]
