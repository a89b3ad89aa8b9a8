#!/usr/bin/env bash
# Builds other git branches here and adds them to the carried tree (after
# scripts/gpu/carry_build.sh), so that one call on the GPU machine can test and time them
# beside the current tree (scripts/gpu/run_branches.sh):
#   scripts/gpu/carry_branches.sh BRANCH[:VAR=VALUE,...] ...
# Each branch is built in a temporary worktree (CUDA, Release) and packed, stripped and
# xz-compressed, as .carry/gpu/branches/BRANCH.tar.xz: megatron-c and the GPU tests; the
# optional VAR=VALUE list is the environment its runs get (written to its `env` file), for
# a branch whose change is switched by a variable.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .carry/gpu ] || { echo "run scripts/gpu/carry_build.sh first"; exit 1; }
mkdir -p .carry/gpu/branches
ROOT=$(pwd)
BINS=(megatron-c test_cuda_wgmma test_cuda_attention test_backend_equivalence test_train_determinism)
for spec in "$@"; do
    branch=${spec%%:*}
    envs=""
    [ "$spec" != "$branch" ] && envs=${spec#*:}
    wt=$(mktemp -d /tmp/mc-branch-XXXXXX)
    git worktree add --detach -q "$wt" "$branch"
    (cd "$wt" && cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DMC_WITH_CUDA=ON \
        -DCMAKE_C_FLAGS_RELEASE="-O3 -march=x86-64-v3 -DNDEBUG" > /dev/null &&
        cmake --build build-cuda -j "$(nproc)" --target "${BINS[@]}" > build-cuda.log 2>&1) ||
        { grep -E 'error' "$wt/build-cuda.log" | head -20; git worktree remove --force "$wt"; exit 1; }
    pack=$(mktemp -d)
    for b in "${BINS[@]}"; do
        [ -x "$wt/build-cuda/$b" ] && strip -o "$pack/$b" "$wt/build-cuda/$b"
    done
    echo "$envs" | tr ',' '\n' | grep -v '^$' > "$pack/env" || true
    git -C "$wt" log --oneline -1 > "$pack/commit"
    tar -cJf "$ROOT/.carry/gpu/branches/$branch.tar.xz" -C "$pack" .
    rm -rf "$pack"
    git worktree remove --force "$wt"
    echo "packed $branch ($(cat "$ROOT/.carry/gpu/branches/$branch.tar.xz" | wc -c) bytes)"
done
du -sh .carry/gpu
