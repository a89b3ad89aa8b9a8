#!/usr/bin/env bash
# Bad input on the command line: every case must print exactly one line on stderr that
# names what was wrong, and exit with code 2 (nothing trained, nothing written).
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

# A small valid command; each case appends or replaces flags.
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --train-iters 2 --lr 1e-3 --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --device cpu)

# expect NAME "substring of the error line" -- args...
expect() {
    local name=$1 want=$2
    shift 3
    local out err code
    out=$("$BIN" "$@" 2>"$TMP/err")
    code=$?
    err=$(cat "$TMP/err")
    local lines
    lines=$(printf '%s' "$err" | grep -c '' || true)
    if [ "$code" -eq 2 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -qF -- "$want"; then
        pass=$((pass + 1))
        echo "ok   $name: $err"
    else
        fail=$((fail + 1))
        echo "FAIL $name: exit $code, $lines stderr lines, wanted '$want'"
        printf '%s\n' "$err" | head -5
    fi
}

expect unknown_flag "unknown flag --num-layer (did you mean --num-layers?)" -- train "${BASE[@]}" --num-layer 3
expect bad_integer "--num-layers: expected an integer, got 'two'" -- train "${BASE[@]}" --num-layers two
expect bad_number "--lr: expected a number, got '1e-3x'" -- train "${BASE[@]}" --lr 1e-3x
expect out_of_range "--hidden-dropout: 1.5 is out of range" -- train "${BASE[@]}" --hidden-dropout 1.5
expect bad_choice "--normalization: invalid choice 'BatchNorm' (choose from LayerNorm, RMSNorm)" -- train "${BASE[@]}" --normalization BatchNorm
expect missing_value "--seq-length: expected a value" -- train "${BASE[@]}" --seq-length
expect value_on_switch "--swiglu takes no value" -- train "${BASE[@]}" --swiglu=1
expect heads_divide_hidden "--hidden-size 100 is not divisible by --num-attention-heads 3" -- train "${BASE[@]}" --hidden-size 100 --num-attention-heads 3
expect groups_divide_heads "--num-attention-heads 4 must be divisible by --num-query-groups 3" -- train "${BASE[@]}" --group-query-attention --num-query-groups 3
expect global_batch "--global-batch-size 5 must be a multiple of --micro-batch-size 2 x data-parallel size 1" -- train "${BASE[@]}" --global-batch-size 5
expect tp_world "world size 1 is not divisible by --tensor-model-parallel-size 2" -- train "${BASE[@]}" --tensor-model-parallel-size 2
expect missing_lr "--lr is required" -- train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --train-iters 2 --mock-data --vocab-size 128
expect no_data "no training data" -- train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --train-iters 2 --lr 1e-3
expect two_sources "mutually exclusive" -- train "${BASE[@]}" --text-data-path "$TMP/x.txt"
expect missing_file "$TMP/missing.txt" -- train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --train-iters 2 --lr 1e-3 --text-data-path "$TMP/missing.txt"
: > "$TMP/empty.txt"
expect empty_file "$TMP/empty.txt" -- train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --train-iters 2 --lr 1e-3 --text-data-path "$TMP/empty.txt"
expect iters_and_samples "--train-iters and --train-samples are mutually exclusive" -- train "${BASE[@]}" --train-samples 8
expect warmup_both "--lr-warmup-fraction and --lr-warmup-iters" -- train "${BASE[@]}" --lr-warmup-fraction 0.1 --lr-warmup-iters 1
expect min_lr "--min-lr 0.1 is larger than --lr" -- train "${BASE[@]}" --min-lr 0.1
expect ckpt_step_without_load "--ckpt-step 5 needs --load" -- train "${BASE[@]}" --ckpt-step 5 --save "$TMP/ckpt"
expect several_refused "unknown flags: --num-layer (did you mean --num-layers?); and not in this version yet: --fp8-format (fp8 training is not in this version yet), --num-experts (mixture-of-experts layers are not in this version yet)" -- train "${BASE[@]}" --fp8-format hybrid --num-experts 8 --num-layer 2
touch "$TMP/a_file"
expect export_params_unwritable "--export-params $TMP/a_file/p.st: cannot write there: cannot create the directory $TMP/a_file: a file of that name exists" -- train "${BASE[@]}" --export-params "$TMP/a_file/p.st"
expect export_params_directory "--export-params $TMP is a directory" -- train "${BASE[@]}" --export-params "$TMP"
expect not_yet_fp8 "--fp8-format: fp8 training is not in this version yet" -- train "${BASE[@]}" --fp8-format hybrid
expect rope_odd "--rotary-percent" -- train "${BASE[@]}" --position-embedding-type rope --rotary-percent 0.05
expect seed_range "--seed: -1 is out of range" -- train "${BASE[@]}" --seed -1
expect unknown_command "unknown command 'trian'" -- trian "${BASE[@]}"
expect positional "unexpected argument 'extra'" -- train "${BASE[@]}" extra
expect log_dir_is_file "--log-dir $TMP/empty.txt" -- train "${BASE[@]}" --log-dir "$TMP/empty.txt"
expect sample_prompt_ids "--sample-prompt: NullTokenizer: token \"999\" is out of range [0, 128)" -- train "${BASE[@]}" --sample-prompt "1 999"
expect warmup_too_long "the LR warmup (16 samples) must be shorter than the decay (4 samples" -- train "${BASE[@]}" --lr-warmup-iters 8
expect dataloader_cyclic "--dataloader-type cyclic: the random (cyclic) sampler is not in this version yet" -- train "${BASE[@]}" --dataloader-type cyclic
expect fp16_and_bf16 "--fp16 and --bf16 are mutually exclusive" -- train "${BASE[@]}" --fp16 --bf16
expect loss_scale_zero "--loss-scale: 0 is out of range" -- train "${BASE[@]}" --fp16 --loss-scale 0
expect loss_scale_negative "--loss-scale: -4 is out of range" -- train "${BASE[@]}" --fp16 --loss-scale -4
expect initial_loss_scale_zero "--initial-loss-scale: 0 is out of range" -- train "${BASE[@]}" --fp16 --initial-loss-scale 0
expect min_loss_scale_negative "--min-loss-scale: -1 is out of range" -- train "${BASE[@]}" --fp16 --min-loss-scale -1
expect min_above_initial "--min-loss-scale 65536 must be positive and at most --initial-loss-scale 1024" -- train "${BASE[@]}" --fp16 --initial-loss-scale 1024 --min-loss-scale 65536
expect hysteresis_zero "--hysteresis: 0 is out of range" -- train "${BASE[@]}" --fp16 --hysteresis 0
expect loss_scale_window_zero "--loss-scale-window: 0 is out of range" -- train "${BASE[@]}" --fp16 --loss-scale-window 0
expect recompute_full "--recompute-granularity full: whole-layer recomputation is not in this version yet" -- train "${BASE[@]}" --recompute-granularity full
# Models too large for the memory: refused before any of it is allocated.
HUGE=(--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --micro-batch-size 1 --train-iters 1
      --lr 1e-3 --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --device cpu)
expect too_wide "a model of 2 layers, hidden size 1048576, sequence length 32 and micro-batch 1 needs" -- train "${HUGE[@]}" --hidden-size 1048576
# (10^8 tokens: about 1 TiB, so that no machine runs it; 10^7 would fit in 108 GiB)
expect too_long "a model of 2 layers, hidden size 64, sequence length 100000000 and micro-batch 1 needs" -- train "${HUGE[@]}" --seq-length 100000000
expect too_large_to_count "is too large to plan: its buffers may exceed 2^60 bytes" -- train "${HUGE[@]}" --num-layers 1000000 --hidden-size 10000000

# Token ids outside the tokenizer's vocabulary (data made with another tokenizer) stop the
# run at data open instead of reading as zero embeddings.
TRAIN_DATA=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
            --train-iters 2 --lr 1e-3 --device cpu --data-cache-path "$TMP/cache")
yes '{"text": "1 5 900 999 3 2 7 8 9 10 11 12 13 14 15 16 17 18 19 20"}' | head -n 50 > "$TMP/ids.jsonl"
"$BIN" preprocess --input "$TMP/ids.jsonl" --output-prefix "$TMP/null1000" --tokenizer-type NullTokenizer \
    --vocab-size 1000 --workers 1 > /dev/null 2>&1 || { fail=$((fail + 1)); echo "FAIL preprocess for vocab_outside"; }
expect vocab_outside_null "--data-path $TMP/null1000_text_document: token id 999 in $TMP/null1000_text_document.bin is outside the vocabulary of --tokenizer-type NullTokenizer --vocab-size 128 (128 ids" -- train "${TRAIN_DATA[@]}" --split 100,0,0 --data-path "$TMP/null1000_text_document" --tokenizer-type NullTokenizer --vocab-size 128
expect vocab_outside_blend "--train-data-path $TMP/null1000_text_document: token id 999" -- train "${TRAIN_DATA[@]}" --train-data-path "$TMP/null1000_text_document" --tokenizer-type NullTokenizer --vocab-size 500
SHARED=${MC_SHARED_DIR:-../shared}/data
if [ -f "$SHARED/llama3/tokenizer.json" ] && [ -f "$SHARED/gpt2/gpt2-vocab.json" ]; then
    printf '{"text": "It is a truth universally acknowledged."}\n{"text": "However little known the feelings."}\n' > "$TMP/text.jsonl"
    "$BIN" preprocess --input "$TMP/text.jsonl" --output-prefix "$TMP/llama3" --tokenizer-type HuggingFaceTokenizer \
        --tokenizer-model "$SHARED/llama3/tokenizer.json" --workers 1 > /dev/null 2>&1 ||
        { fail=$((fail + 1)); echo "FAIL preprocess with Llama 3"; }
    expect vocab_outside_gpt2 "--data-path $TMP/llama3_text_document: token id 128000 in $TMP/llama3_text_document.bin is outside the vocabulary of --tokenizer-type GPT2BPETokenizer (50257 ids" -- train "${TRAIN_DATA[@]}" --split 100,0,0 --seq-length 4 --data-path "$TMP/llama3_text_document" --tokenizer-type GPT2BPETokenizer --vocab-file "$SHARED/gpt2/gpt2-vocab.json" --merge-file "$SHARED/gpt2/gpt2-merges.txt"
else
    echo "SKIP vocab_outside_gpt2: no shared tokenizer data (set MC_SHARED_DIR)"
fi

# Nothing may be left behind by the failed runs.
if [ -e "$TMP/ckpt" ]; then
    fail=$((fail + 1))
    echo "FAIL a failed run created $TMP/ckpt"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
