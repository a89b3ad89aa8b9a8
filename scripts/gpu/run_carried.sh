#!/usr/bin/env bash
# Runs the binaries packed by scripts/gpu/carry_build.sh on the GPU machine: the GPU tests
# (GPU_TESTS), our attention beside PyTorch's SDPA and fused AdamW (bench/torch_ops.py),
# then bench/gpu_train.sh (Megatron-C beside PyTorch and the floor) with the SM clock and
# power sampled, and with PREP=1 a shortened bench/preprocess.sh. Logs under $OUT.
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1
ldd "$B/megatron-c" | grep -E 'not found' && echo "MISSING LIBRARIES" | tee -a "$OUT/gpu.txt"
echo "== tests"
for t in ${GPU_TESTS:-test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism test_trainer_batches test_golden_parity test_optim_param_remainders test_ops_errors}; do
    run_gpu_test "$B" "$t" "$OUT"
done
echo "== fp16 smoke run (dynamic loss scale from 2^32: the first steps are skipped while it comes down)"
timeout 120 "$B/megatron-c" train --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256 \
    --max-position-embeddings 256 --micro-batch-size 8 --global-batch-size 8 --vocab-size 1024 --mock-data \
    --tokenizer-type NullTokenizer --train-iters 60 --log-interval 10 --eval-iters 0 --lr 1e-3 --device cuda --fp16 \
    > "$OUT/fp16_smoke.log" 2>&1; echo "rc $?"; grep -E "iteration +[0-9]+/" "$OUT/fp16_smoke.log" | cut -c1-400 | tail -6
if [ "${ATTN_BENCH:-1}" = 1 ]; then
    echo "== attention and AdamW: ours, then PyTorch's (same call)"
    # ATTN_CONFIGS: space-separated runs, each "default" or "mma" (MC_ATTN_WGMMA=0: the
    # mma.sync kernels instead of the wgmma ones)
    for cfg in ${ATTN_CONFIGS:-default mma}; do
        case $cfg in
        mma) envs=(MC_ATTN_WGMMA=0) ;;
        *) envs=() ;;
        esac
        echo "-- attention config $cfg"
        env "${envs[@]}" MC_BENCH_ATTN=only timeout 60 "$B/test_cuda_attention" 2>&1 | grep BENCH | sed "s/^BENCH/BENCH[$cfg]/" | tee -a "$OUT/attn_bench.log"
    done
    timeout 150 python3 bench/torch_ops.py 2>&1 | tee "$OUT/torch_ops.log" | grep RESULT
fi
echo "== gpu_train (SM clock and power sampled every 500 ms into clocks.csv)"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
CLOCKS="$OUT/clocks.csv" OUT="$OUT" timeout "${BENCH_TIMEOUT:-420}" bash bench/gpu_train.sh "$B" "$C/shared/bench" "${BENCH_WHICH:-old}"
kill $SMI 2>/dev/null
tar -czf "$OUT/gpu_train_logs.tgz" -C "$OUT" gpu_train && rm -rf "$OUT/gpu_train"
python3 - "$OUT/clocks.csv" <<'PY'
import csv, sys, statistics
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0][:2] == "20"]
busy = [r for r in rows if float(r[2].split()[0]) > 300]  # power > 300 W: under load
if busy:
    clk = [float(r[1].split()[0]) for r in busy]
    pw = [float(r[2].split()[0]) for r in busy]
    print(f"under load (>300 W, {len(busy)} samples): SM clock median {statistics.median(clk):.0f} MHz "
          f"(min {min(clk):.0f}, max {max(clk):.0f}), power median {statistics.median(pw):.0f} W, "
          f"reasons {sorted(set(r[3].strip() for r in busy))}")
PY
if [ "${PREP:-0}" = 1 ]; then
    echo "== preprocess"
    BENCH_MB=${BENCH_MB:-40} MC_BUILD_DIR="$B" timeout "${PREP_TIMEOUT:-100}" bench/preprocess.sh > "$OUT/preprocess.log" 2>&1
    tail -15 "$OUT/preprocess.log"
fi
if [ "$GPU_TEST_FAILURES" -gt 0 ]; then
    echo "FAILED: $GPU_TEST_FAILURES GPU test run(s) did not pass (logs under $OUT)"
    exit 1
fi
