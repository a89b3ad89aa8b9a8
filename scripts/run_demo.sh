#!/usr/bin/env bash
# The main job behind `make run`: train a small Llama-style model on a real English text
# (the Jargon File, public domain, from Debian's jargon-text package), offline after the
# first fetch, on the CPU, and print a short sample of what it learned (drawn at temperature
# 0.8 from the top 95% of the probability: greedy decoding of so small a model loops).
# Falls back to Megatron's mock data when the corpus cannot be had. Leaves the trained model
# as a checkpoint in runs/demo/ckpt (megatron-c generate / convert take it).
set -euo pipefail
BUILD=${1:-build}
CACHE=.cache/corpus
CORPUS=$CACHE/jargon.txt
mkdir -p "$CACHE"

fetch_corpus() {
    local tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    ( cd "$tmp" && apt-get download jargon-text >/dev/null 2>&1 ) ||
        { [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1 && ( cd "$tmp" && apt-get download jargon-text >/dev/null 2>&1 ); } ||
        return 1
    dpkg -x "$tmp"/jargon-text_*.deb "$tmp/x" || return 1
    zcat "$tmp/x/usr/share/doc/jargon-text/jargon.txt.gz" > "$CORPUS.tmp.$$" || return 1
    mv "$CORPUS.tmp.$$" "$CORPUS"   # never leave a half-written corpus behind
}

if [ ! -s "$CORPUS" ]; then
    echo "make run: fetching the corpus (Debian package jargon-text, public domain) into $CACHE"
    fetch_corpus || rm -f "$CORPUS".tmp.*
fi

MODEL=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
       --ffn-hidden-size 768 --swiglu --normalization RMSNorm --position-embedding-type rope
       --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 256
       --attention-dropout 0.0 --hidden-dropout 0.0 --init-method-std 0.02)
TRAIN=(--micro-batch-size 8 --global-batch-size 16 --train-iters ${MC_DEMO_ITERS:-300}
       --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters $(( ${MC_DEMO_ITERS:-300} / 15 )) --weight-decay 0.1
       --adam-beta2 0.95 --clip-grad 1.0 --log-interval 10 --eval-interval 100 --eval-iters 4
       --device cpu --log-dir runs/demo --save runs/demo/ckpt)
if [ -s "$CORPUS" ]; then
    DATA=(--text-data-path "$CORPUS" --split 98,2,0 --sample-prompt "A hacker is " --sample-tokens 160
          --sample-temperature 0.8 --sample-top-p 0.95)
else
    echo "make run: could not fetch the corpus (no network or no apt); training on --mock-data instead"
    DATA=(--mock-data --tokenizer-type NullTokenizer --vocab-size 512 --sample-prompt "1 2 3 4" --sample-tokens 16)
fi
exec "$BUILD/megatron-c" train "${MODEL[@]}" "${TRAIN[@]}" "${DATA[@]}"
