#!/usr/bin/env bash
# megatron-c convert from the command line: a Hugging Face Llama imported is a checkpoint
# that `train --load DIR --finetune` starts from (one process, and TP 2 under mpirun: any
# layout), whose first loss is the same in both (the TP-2 run pads the vocabulary to the
# same 384 rows with --make-vocab-size-divisible-by 64: rows a layout pads beyond the stored
# ones keep their initial values, and the loss covers the padded columns, as Megatron's);
# exported again it is a Hugging Face directory with the tokenizer files given; bad flags
# are one line and exit 2.
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
source "$(dirname "$0")/check.sh"

FIX=tests/fixtures/hf/llama31
"$BIN" convert --input "$FIX" --output "$TMP/ckpt" --to megatron-c > "$TMP/import.log" 2>&1
check import $? "$(tail -1 "$TMP/import.log")"

# The fixture's model in Megatron flags (config.json: 2 layers, hidden 32, 4 heads / 2 groups,
# ffn 64, RoPE base 500000 with Llama 3.1 scaling 8, RMSNorm eps 1e-6, untied, vocab 300).
MODEL=(--num-layers 2 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 --group-query-attention
       --num-query-groups 2 --kv-channels 8 --swiglu --normalization RMSNorm --norm-epsilon 1e-6
       --position-embedding-type rope --rotary-base 500000 --use-rope-scaling --rope-scaling-factor 8
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 300 --seq-length 16
       --max-position-embeddings 16384 --init-method-std 0.1)
TRAIN=(--micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer
       --device cpu --eval-iters 0 --log-interval 1 --attention-dropout 0 --hidden-dropout 0 --seed 5)
loss1() { grep -m1 -o 'lm loss: [0-9.E+-]*' "$1" | awk '{print $3}'; }
OMP_NUM_THREADS=1 "$BIN" train "${MODEL[@]}" "${TRAIN[@]}" --load "$TMP/ckpt" --finetune > "$TMP/ft1.log" 2>&1
check finetune_from_import $? "$(tail -2 "$TMP/ft1.log")"
grep -q "finetune" "$TMP/ft1.log"
check finetune_loaded_weights $? "no line saying the weights were loaded"
if command -v mpirun > /dev/null; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS "$BIN" train "${MODEL[@]}" \
        "${TRAIN[@]}" --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --load "$TMP/ckpt" --finetune \
        > "$TMP/ft2.log" 2>&1
    check finetune_tp2 $? "$(tail -2 "$TMP/ft2.log")"
    a=$(loss1 "$TMP/ft1.log") b=$(loss1 "$TMP/ft2.log")
    python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))" "$a" "$b"
    check tp2_first_loss_equals_one_rank $? "$a vs $b"
else
    echo "skip finetune_tp2: no mpirun"
fi
# a model flag that differs from the imported config is refused, naming it
OMP_NUM_THREADS=1 "$BIN" train "${MODEL[@]/500000/10000}" "${TRAIN[@]}" --load "$TMP/ckpt" --finetune > "$TMP/bad.log" 2>&1
[ $? = 2 ] && grep -q -- "--rotary-base" "$TMP/bad.log"
check mismatch_named $? "$(tail -1 "$TMP/bad.log")"

"$BIN" convert --input "$TMP/ckpt" --output "$TMP/hf" --to hf --tokenizer-model ../shared/data/llama3/tokenizer.json \
    > "$TMP/export.log" 2>&1
rc=$?
[ $rc = 0 ] && [ -s "$TMP/hf/model.safetensors" ] && [ -s "$TMP/hf/config.json" ] && [ -s "$TMP/hf/generation_config.json" ]
check export $? "rc $rc: $(tail -1 "$TMP/export.log")"
if [ -e ../shared/data/llama3/tokenizer.json ]; then
    cmp -s ../shared/data/llama3/tokenizer.json "$TMP/hf/tokenizer.json"
    check export_tokenizer_copied $? "tokenizer.json not copied"
fi
grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$TMP/hf/config.json"
check export_default_bf16 $? "config.json's torch_dtype"

# bad flags: one line, exit 2, nothing written
for args in "--input $FIX --to megatron-c" "--input $FIX --output $TMP/x --to onnx" \
            "--input $FIX --output $TMP/x --to megatron-c --dtype int8" "--input $TMP/nowhere --output $TMP/x --to hf" \
            "--input $FIX --output $TMP/ckpt --to megatron-c"; do
    # shellcheck disable=SC2086
    "$BIN" convert $args > /dev/null 2> "$TMP/err"
    code=$?
    [ $code = 2 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && [ ! -e "$TMP/x" ]
    check "bad_flags: $args" $? "exit $code, $(wc -l < "$TMP/err") lines: $(head -2 "$TMP/err")"
done
check_summary
