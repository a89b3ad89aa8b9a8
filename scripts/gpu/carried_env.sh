# carried_env.sh: sourced by the scripts that run on the GPU machine (run_carried.sh,
# profile.sh, run_x2.sh, run_branches.sh), in the repository root there. Unpacks the
# binaries and libraries packed by carry_build.sh (and the branch builds of
# carry_branches.sh into $C/branches/NAME/) and points the loader at them and at that
# machine's own CUDA and NCCL; sets C (the carried tree), B (its binaries) and NVLink
# multicast off (KINDS.md).
C=$(pwd)/.carry/gpu
B=$C/bin
mkdir -p "$C/lib" "$B"
tar -xJf "$C/lib.tar.xz" -C "$C/lib"
tar -xJf "$C/bin.tar.xz" -C "$B"
for t in "$C"/branches/*.tar.xz; do
    [ -e "$t" ] || continue
    mkdir -p "${t%.tar.xz}" && tar -xJf "$t" -C "${t%.tar.xz}"
done
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
CUDA_DIR=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$C/lib:$CUDA_DIR:$NCCL_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MC_SHARED_DIR="$C/shared" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
