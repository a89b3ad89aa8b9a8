#!/usr/bin/env bash
# One call on the GPU machine after scripts/gpu/carry_build.sh and
# scripts/gpu/carry_branches.sh: the current tree's GPU tests and golden parity on CUDA,
# interleaved A/Bs of each packed branch against the current tree (run_branches.sh, its
# tests skipped) and of the current tree against itself with each VARIANTS environment
# setting (a kernel kept behind a switch for its A/B; VAR=VALUE@shape,... limits one to those
# shapes), the kernel benchmarks of
# test_backend_equivalence (MC_TEST_BENCH) and our attention kernels timed, with NCU=1 an
# Nsight Compute profile of the attention backward, then the CUPTI trace of both bench
# shapes. Logs under $OUT.
# With BRANCH_ATTN=1 the packed branches' attention kernels are timed too; OPS_BENCH=0 skips
# the kernel benchmarks.
#   OUT=... [ROUNDS=2] [SHAPES="llama gpt2"] [VARIANTS="VAR=1 ..."] [NCU=0] [TRACE=1] [BRANCH_ATTN=0] [OPS_BENCH=1] \
#   bash scripts/gpu/validate.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
T0=$(date +%s)
BRANCH_TESTS=none MAIN_TESTS="${MAIN_TESTS:-test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism test_trainer_batches test_golden_parity test_optim_param_remainders test_ops_errors}" \
    OUT="$OUT" bash scripts/gpu/run_branches.sh 2>&1 | tee "$OUT/branches.txt"
grep -q FAILED "$OUT/branches.txt" && TESTS_FAILED=1
source scripts/gpu/carried_env.sh
for spec in ${VARIANTS:-}; do
    v=${spec%%@*} shapes=${SHAPES:-llama gpt2}
    [ "$spec" != "$v" ] && shapes=${spec#*@} && shapes=${shapes//,/ } # VAR=VALUE@shape,shape: only those
    printf '#!/bin/sh\nexec env %s %s "$@"\n' "$v" "$B/megatron-c" > "$B/megatron-c-$v"
    chmod +x "$B/megatron-c-$v"
    for shape in $shapes; do
        OUT="$OUT/variant_$v" MC_BENCH_ITERS=${MC_BENCH_ITERS:-10} bash bench/gpu_ab.sh "$B/megatron-c" \
            "$B/megatron-c-$v" "${ROUNDS:-2}" "$shape" 2>&1 | grep "AB median" | sed "s/^/$v $shape: /"
    done
done
echo "== tests + A/Bs took $(( $(date +%s) - T0 )) s"
if [ "${OPS_BENCH:-1}" = 1 ]; then
    echo "== kernel benchmarks (MC_TEST_BENCH)"
    MC_TEST_BENCH=1 timeout 120 "$B/test_backend_equivalence" > "$OUT/ops_bench.log" 2>&1
    grep -E '^ +bench ' "$OUT/ops_bench.log"
fi
echo "== attention timings"
MC_BENCH_ATTN=only timeout 90 "$B/test_cuda_attention" > "$OUT/attn_bench.log" 2>&1
grep BENCH "$OUT/attn_bench.log"
if [ "${BRANCH_ATTN:-0}" = 1 ]; then # the same timings of each packed branch's kernels
    for dir in "$C"/branches/*/; do
        [ -x "$dir/test_cuda_attention" ] || continue
        name=$(basename "$dir")
        echo "-- branch $name"
        MC_BENCH_ATTN=only timeout 90 "$dir/test_cuda_attention" > "$OUT/attn_bench_$name.log" 2>&1
        grep BENCH "$OUT/attn_bench_$name.log"
    done
fi
if [ "${NCU:-0}" = 1 ]; then
    NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    echo "== ncu: attention backward (llama shape), one launch, full set"
    MC_BENCH_ATTN=only timeout 150 "$NCU_BIN" --clock-control none --set full -k regex:attn_wg_bwd_pipe -c 1 \
        -o "$OUT/ncu_attn_bwd" "$B/test_cuda_attention" > "$OUT/ncu_attn.log" 2>&1
    "$NCU_BIN" --import "$OUT/ncu_attn_bwd.ncu-rep" --page details > "$OUT/ncu_attn_bwd.txt" 2>&1
    grep -E 'Duration|Throughput|Pipe|Stall|Warp Cycles|Achieved Occupancy|Bank' "$OUT/ncu_attn_bwd.txt" | head -40
fi
if [ "${TRACE:-1}" = 1 ]; then
    OUT="$OUT" TRACE_ITERS=6 timeout 150 bash scripts/gpu/trace.sh 2>&1 | tee "$OUT/trace.txt" | head -150
fi
cd "$OUT" && tar -czf logs.tgz --exclude=logs.tgz . 2>/dev/null; ls "$OUT"
echo "== total $(( $(date +%s) - T0 )) s"
if [ "${TESTS_FAILED:-0}" = 1 ]; then
    echo "FAILED: a GPU test did not pass (see $OUT/branches.txt)"
    exit 1
fi
