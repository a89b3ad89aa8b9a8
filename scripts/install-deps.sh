#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Megatron-C builds against, only those missing.
# Idempotent and quiet when everything is present.
set -euo pipefail
need=()
have_header() { for d in /usr/include /usr/include/x86_64-linux-gnu /usr/local/include; do
                  [ -e "$d/$1" ] && return 0; done; return 1; }
have_header cblas.h || ls /usr/include/x86_64-linux-gnu/openblas*/cblas.h >/dev/null 2>&1 || need+=(libopenblas-dev)
# The OpenMP build of OpenBLAS shares our OpenMP threads (see CMakeLists.txt).
[ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so ] || need+=(libopenblas-openmp-dev)
have_header cjson/cJSON.h   || need+=(libcjson-dev)
have_header pcre2.h         || need+=(libpcre2-dev)
have_header zlib.h          || need+=(zlib1g-dev)
have_header microhttpd.h    || need+=(libmicrohttpd-dev)  # megatron-c serve's HTTP server
have_header mpi.h || ls /usr/include/x86_64-linux-gnu/mpi/mpi.h /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h >/dev/null 2>&1 \
                            || need+=(libopenmpi-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v cmake  >/dev/null || need+=(cmake)
command -v curl   >/dev/null || need+=(curl)               # tests/test_serve.sh's client
command -v gcc    >/dev/null || need+=(gcc)
command -v make   >/dev/null || need+=(make)
gcc -fopenmp -x c -o /dev/null - <<<'int main(void){return 0;}' >/dev/null 2>&1 || need+=(libgomp1)
# The cuDNN frontend's headers (cuDNN's fused attention, src/backend/cuda/attention_cudnn.cu),
# only where CUDA code is built: header-only, from its PyPI package (NVIDIA ships them there),
# into .deps/cudnn-frontend. Without them the build says so and uses our own kernels.
CUDNN_FE_VERSION=1.32.0
fe_dir="$(dirname "$0")/../.deps/cudnn-frontend"
if command -v nvcc >/dev/null && [ ! -e "$fe_dir/include/cudnn_frontend.h" ]; then
    tmp=$(mktemp -d)
    if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FE_VERSION" \
           >/dev/null 2>&1 && mkdir -p "$fe_dir" && python3 -c "
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('include/')])" "$tmp"/*.whl "$fe_dir"; then
        echo "install-deps: cuDNN frontend $CUDNN_FE_VERSION headers in .deps/cudnn-frontend"
    else
        echo "install-deps: warning: could not fetch the cuDNN frontend headers (pip, PyPI): building without cuDNN attention"
    fi
    rm -rf "$tmp"
fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${need[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
