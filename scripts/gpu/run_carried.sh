#!/usr/bin/env bash
# Runs the binaries packed by scripts/gpu/carry_build.sh on the GPU machine: the GPU
# training tests, then bench/gpu_train.sh (Megatron-C beside PyTorch and the floor), then a
# shortened bench/preprocess.sh. Logs under $OUT.
set -uo pipefail
ROOT=$(pwd)
C=$ROOT/.carry/gpu
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT" "$C/lib"
tar -xJf "$C/lib.tar.xz" -C "$C/lib"
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
CUDA_DIR=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$C/lib:$CUDA_DIR:$NCCL_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MC_SHARED_DIR="$C/shared" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$C/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1
ldd "$B/megatron-c" | grep -E 'not found' && echo "MISSING LIBRARIES" | tee -a "$OUT/gpu.txt"
echo "== tests"
timeout 150 "$B/test_train_determinism" > "$OUT/determinism.log" 2>&1; tail -4 "$OUT/determinism.log"
MC_TEST_DEVICE=cuda timeout 60 "$B/test_golden_parity" > "$OUT/golden_cuda.log" 2>&1; tail -1 "$OUT/golden_cuda.log"
echo "== gpu_train"
MC_BENCH_ITERS=${MC_BENCH_ITERS:-8} OUT="$OUT" timeout "${BENCH_TIMEOUT:-380}" bench/gpu_train.sh "$B" "$C/shared/bench" all
echo "== preprocess"
BENCH_MB=${BENCH_MB:-40} MC_BUILD_DIR="$B" timeout "${PREP_TIMEOUT:-100}" bench/preprocess.sh > "$OUT/preprocess.log" 2>&1
tail -15 "$OUT/preprocess.log"
