#!/usr/bin/env bash
# The layers of src/ (docs/ARCHITECTURE.md) depend only downward: no file includes a header
# of a higher layer, nor calls a function that a higher layer defines. The tokenizers live
# in src/tokenizer/, apart from the datasets in src/data/. include/megatron.h is the public
# API's types and may be included anywhere; its functions belong to the train layer.
set -u
cd "$(dirname "$0")/.."
# Each layer and the layers it may use (itself included).
declare -A ALLOWED=(
    [base]="base"
    [tensor]="base tensor"
    [backend/cpu]="base tensor backend/cpu"
    [backend/cuda]="base tensor backend/cuda"
    [comm]="base tensor comm"
    [tokenizer]="base tokenizer"
    [data]="base tokenizer data"
    [io]="base tensor io"
    [model]="base tensor comm model"
    [optim]="base tensor comm model optim"
    [ckpt]="base tensor comm model optim io ckpt"
    [train]="base tensor backend/cpu backend/cuda comm tokenizer data io model optim ckpt train"
    [generate]="base tensor comm tokenizer data io model optim ckpt train generate"
    [serve]="base tensor comm tokenizer generate serve"
    [cli]="base tensor comm tokenizer data io model optim ckpt train generate serve cli"
)
layer_of() { # a path under src/ -> its layer
    local p=${1#src/}
    case $p in backend/cpu/*) echo backend/cpu ;; backend/cuda/*) echo backend/cuda ;; *) echo "${p%%/*}" ;; esac
}
fail=0
checked=0
# ---- includes ----
while IFS= read -r f; do
    from=$(layer_of "$f")
    [ -n "${ALLOWED[$from]:-}" ] || { echo "FAIL $f: its directory is no layer this test knows"; fail=$((fail + 1)); continue; }
    while IFS= read -r inc; do
        to=$(layer_of "src/$inc")
        [ -d "src/${inc%/*}" ] || continue
        checked=$((checked + 1))
        [[ " ${ALLOWED[$from]} " == *" $to "* ]] || { echo "FAIL $f includes $inc (layer $from may use: ${ALLOWED[$from]})"; fail=$((fail + 1)); }
    done < <(grep -hoE '^#include "[a-z_]+(/[a-z_]+)*/[a-z_0-9]+\.(h|cuh)"' "$f" | sed -E 's/#include "(.*)"/\1/')
done < <(find src -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort)
# ---- calls: the public API's functions (include/megatron.h) are the train layer's ----
api=$(grep -oE '\bmc_[a-z0-9_]+\(' include/megatron.h | tr -d '(' | sort -u)
for f in $(find src -name '*.c' -o -name '*.cu' | sort); do
    from=$(layer_of "$f")
    [[ " ${ALLOWED[$from]} " == *" train "* ]] && continue
    for fn in $api; do
        if grep -qE "\b$fn\(" "$f"; then echo "FAIL $f calls $fn (the train layer's, above $from)"; fail=$((fail + 1)); fi
    done
done
# ---- tokenizers apart ----
if ls src/data/tok_* src/data/tokenizer.* > /dev/null 2>&1; then
    echo "FAIL tokenizer sources in src/data: $(ls src/data/tok_* src/data/tokenizer.* 2>/dev/null | tr '\n' ' ')"
    fail=$((fail + 1))
fi
echo "checked $checked includes"
echo "$([ $fail -eq 0 ] && echo 1 || echo 0) passed, $([ $fail -eq 0 ] && echo 0 || echo 1) failed"
[ "$fail" -eq 0 ]
