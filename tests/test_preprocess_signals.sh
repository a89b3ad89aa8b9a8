#!/usr/bin/env bash
# SIGTERM or SIGINT during `megatron-c preprocess` (and merge-datasets, convert) removes the
# temporary files (*.tmp.*, the partition inputs and datasets) and ends the process as the
# signal would (exit status 128 + the signal); the output directory holds nothing after.
set -u
set -m # background jobs keep SIGINT (a shell without job control starts them ignoring it)
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

# About 40 MB of JSON lines: long enough that the signal lands while the .bin is written.
line='{"text": "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families."}'
yes "$line" | head -n 140000 > "$TMP/big.jsonl"

# interrupt NAME SIGNAL PATTERN -- args: starts the command, waits until a file matching
# PATTERN exists in $TMP/out, sends SIGNAL, and checks the exit status and that $TMP/out is
# empty.
interrupt() {
    local name=$1 sig=$2 pattern=$3
    shift 4
    rm -rf "$TMP/out" && mkdir "$TMP/out"
    OMP_NUM_THREADS=1 "$BIN" "$@" > "$TMP/$name.log" 2>&1 &
    local pid=$! seen=0
    for _ in $(seq 1 400); do
        if compgen -G "$TMP/out/$pattern" > /dev/null; then
            seen=1
            break
        fi
        sleep 0.05
    done
    kill -s "$sig" "$pid" 2> /dev/null
    wait "$pid"
    local code=$? want=$((128 + $(kill -l "$sig")))
    local left
    left=$(ls -A "$TMP/out")
    if [ "$seen" -eq 1 ] && [ "$code" -eq "$want" ] && [ -z "$left" ]; then
        pass=$((pass + 1))
        echo "ok   $name: exit $code, nothing left"
    else
        fail=$((fail + 1))
        echo "FAIL $name: saw $pattern: $seen, exit $code (want $want), left: $left"
        tail -3 "$TMP/$name.log"
    fi
}

PP=(preprocess --input "$TMP/big.jsonl" --output-prefix "$TMP/out/corpus" --tokenizer-type ByteLevelTokenizer
    --append-eod)
interrupt sigterm_bin TERM '*.tmp.*' -- "${PP[@]}" --workers 1
interrupt sigint_bin INT '*.tmp.*' -- "${PP[@]}" --workers 1
interrupt sigterm_partitions TERM 'corpus_[01]_text_document.bin*' -- "${PP[@]}" --workers 2 --partitions 2

# merge-datasets writes its .bin under a temporary name too.
"$BIN" "${PP[@]}" --workers 2 --output-prefix "$TMP/part" > /dev/null 2>&1 || { echo "FAIL: making the merge input"; exit 1; }
for i in 1 2 3 4 5 6; do
    cp "$TMP/part_text_document.bin" "$TMP/p$i.bin"
    cp "$TMP/part_text_document.idx" "$TMP/p$i.idx"
done
interrupt sigterm_merge TERM '*.tmp.*' -- merge-datasets --input "$TMP/p1" "$TMP/p2" "$TMP/p3" "$TMP/p4" "$TMP/p5" \
    "$TMP/p6" --output-prefix "$TMP/out/merged"

# convert writes into a temporary directory, removed with what it holds: the export of a
# model of ~130M parameters (about 0.5 GB written), made by one training step here.
"$BIN" train --num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 16 \
    --max-position-embeddings 16 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 1e-4 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 50000 --device cpu --eval-iters 0 --no-save-optim \
    --save "$TMP/ckpt" > "$TMP/ckpt.log" 2>&1 || { echo "FAIL: making the checkpoint"; tail -3 "$TMP/ckpt.log"; exit 1; }
interrupt sigterm_convert TERM 'hf.tmp-*' -- convert --input "$TMP/ckpt" --output "$TMP/out/hf" --to hf --dtype fp32

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
