#!/usr/bin/env bash
# Each GEMM of a training step beside PyTorch's matmul at the same shape, on the GPU
# machine: megatron-c with MC_GEMM_PROFILE=1 (CUDA events around every cuBLASLt call; the
# table is printed when the run ends) on the bench shapes, then bench/torch_gemms.py times
# the same shapes with torch. Logs under $OUT/gemm.
#   [GEMM_ITERS=4] [GEMM_SHAPES="llama gpt2"] bash scripts/gpu/gemm_profile.sh [extra megatron-c flags...]
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}/gemm
mkdir -p "$OUT"
ITERS=${GEMM_ITERS:-4}
source "$(dirname "$0")/shapes.sh"
common_flags "$ITERS"
for shape in ${GEMM_SHAPES:-llama gpt2}; do
    shape_flags "$shape" || exit 2
    MC_GEMM_PROFILE=1 timeout 200 "$B/megatron-c" train "${COMMON[@]}" "${FLAGS[@]}" "$@" \
        --log-dir "$OUT/run_$shape" > "$OUT/run_$shape.log" 2>&1
    echo "== $shape (rc $?), $ITERS iterations"
    grep "gemm profile" "$OUT/run_$shape.log" | head -3
    python3 bench/torch_gemms.py "$OUT/run_$shape.log" "$ITERS" 2>&1 | tee "$OUT/vs_torch_$shape.txt"
done
