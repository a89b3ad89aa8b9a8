#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): unpack the carried Debian packages,
# build with CUDA, and run a stage, writing every log under $OUT.
#   scripts/gpu/session.sh build|test|bench|tokenizers|all
# Prepared on the development machine by scripts/gpu/prepare.sh (.carry/ holds the .deb
# files and a copy of ../shared's data and bench scripts).
set -uo pipefail
STAGE=${1:-all}
ROOT=$(pwd)
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT"
export MC_SHARED_DIR="$ROOT/.carry/shared"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PREFIX="$ROOT/.carry/prefix"
if [ ! -d "$PREFIX/usr/include/cjson" ]; then
    mkdir -p "$PREFIX"
    for d in "$ROOT"/.carry/debs/*.deb; do dpkg -x "$d" "$PREFIX"; done
fi
export MC_DEPS_PREFIX="$PREFIX"
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
# Tests read ../shared by default; give them the carried copy.
[ -e "$ROOT/../shared" ] || ln -s "$ROOT/.carry/shared" "$ROOT/../shared" 2>/dev/null || true

build() {
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
    if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMC_WITH_CUDA=ON > "$OUT/cmake.log" 2>&1; then
        tail -30 "$OUT/cmake.log"; return 1
    fi
    grep 'megatron-c:' "$OUT/cmake.log"
    if ! cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1; then
        grep -E 'error|Error' "$OUT/build.log" | head -40; return 1
    fi
    echo "build ok"
}

run_tests() {
    (cd build-gpu && ctest --output-on-failure -j 4 --timeout 600 > "$OUT/ctest.log" 2>&1)
    grep -E 'tests passed|Failed|\*\*\*|Skipped' "$OUT/ctest.log" | head -30
    for t in test_backend_equivalence test_cuda_attention; do
        [ -x build-gpu/$t ] && build-gpu/$t > "$OUT/$t.log" 2>&1; echo "$t: $(tail -1 "$OUT/$t.log")"
    done
    MC_TEST_DEVICE=cuda build-gpu/test_golden_parity > "$OUT/golden_cuda.log" 2>&1
    echo "golden parity on CUDA: $(tail -1 "$OUT/golden_cuda.log")"
    build-gpu/test_train_determinism > "$OUT/determinism.log" 2>&1
    echo "determinism + bf16 curve: $(tail -1 "$OUT/determinism.log")"; grep 'fp32 CPU loss' "$OUT/determinism.log"
    [ -x build-gpu/test_cuda_attention ] && MC_BENCH_ATTN=1 build-gpu/test_cuda_attention > "$OUT/attention_bench.log" 2>&1
    grep -iE 'tflop' "$OUT/attention_bench.log" | head -10
}

case "$STAGE" in
build) build ;;
test) build && run_tests ;;
bench) build && OUT="$OUT" bench/gpu_train.sh build-gpu "$MC_SHARED_DIR/bench" "${2:-all}" ;;
tokenizers) build && [ -x bench/preprocess.sh ] && bench/preprocess.sh build-gpu > "$OUT/preprocess_bench.log" 2>&1; tail -20 "$OUT/preprocess_bench.log" ;;
all) build && run_tests && OUT="$OUT" bench/gpu_train.sh build-gpu "$MC_SHARED_DIR/bench" ;;
*) echo "unknown stage $STAGE"; exit 2 ;;
esac
