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
# cuDNN (our fused attention opens libcudnn.so.9 at run time): that machine has it only in
# PyTorch's wheel (site-packages/nvidia/cudnn/lib)
CUDNN_DIR=$(dirname "$(find / -name 'libcudnn.so.9' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$C/lib:$CUDA_DIR:$NCCL_DIR:$CUDNN_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MC_SHARED_DIR="$C/shared" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# run_gpu_test BIN_DIR TEST LOG_DIR [PREFIX]: runs a test binary there, and its GPU half
# (`--gpu`, tests/check.h) when it has one, each under a timeout (GPU_TEST_TIMEOUT s, default 300); one line each.
# Every failure (a skip too: on the GPU machine nothing should skip) adds to
# GPU_TEST_FAILURES, which the calling script turns into its exit code.
GPU_TEST_FAILURES=0
run_gpu_test() {
    local dir=$1 t=$2 log=$3 prefix=${4:-} args rc
    [ -x "$dir/$t" ] || return 0
    for args in "" "--gpu"; do
        [ -n "$args" ] && ! grep -q "the GPU cases need a GPU" "$dir/$t" && continue
        timeout "${GPU_TEST_TIMEOUT:-300}" "$dir/$t" $args > "$log/$prefix$t${args:+_gpu}.log" 2>&1
        rc=$?
        echo "$prefix$t${args:+ --gpu} rc $rc: $(tail -1 "$log/$prefix$t${args:+_gpu}.log")"
        [ $rc -eq 0 ] || GPU_TEST_FAILURES=$((GPU_TEST_FAILURES + 1))
    done
}
