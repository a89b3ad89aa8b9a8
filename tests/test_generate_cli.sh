#!/usr/bin/env bash
# megatron-c generate on the tiny models transformers wrote (tests/fixtures/hf): greedy
# continuations equal transformers' generate(do_sample=False) token for token (from an
# imported checkpoint with --load, and straight from the Hugging Face directory with
# --load-hf), also under TP 2; prompts of different lengths continued together give each
# what it gives alone and transformers' tokens, in all at once, two at a time and under TP
# 2, greedy and sampled; the key/value cache gives what recomputing the window gives
# (greedy and sampled); seeded sampling repeats itself; decode steps replayed from CUDA
# graphs print what steps run op by op print, and the CPU ignores graphs; the memory line;
# bad input is one line, exit 2. (generate/generator.h's own cases, such as ends at the end of document,
# are tests/test_generator.c's.)
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
source "$(dirname "$0")/check.sh"
# NullTokenizer: prompts are space-separated ids; its end of document is id 299 (V - 1),
# which no fixture continuation holds, so none stops early
TOK=(--tokenizer-type NullTokenizer --vocab-size 300 --device cpu)

# FIX -> a JSONL of its prompts, and the greedy ids transformers generated, one line each
prompts() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]));
[print(json.dumps({"prompt": " ".join(map(str, p))})) for p in d["prompts"]]' "$1/greedy.json"; }
expected() { python3 -c 'import json,sys; [print(json.dumps(g)) for g in json.load(open(sys.argv[1]))["greedy"]]' "$1/greedy.json"; }
ids_of() { python3 -c 'import json,sys; [print(json.dumps(json.loads(l)["ids"])) for l in sys.stdin]'; }
# FIX -> prompts of different lengths: a prompt and its first K greedy tokens continues with
# the rest of them (--max-new-tokens 8); "prompt" lines, or (want) the 8 ids expected
RAGGED="[[0, 0], [1, 5], [0, 8], [1, 2], [0, 3]]"
ragged() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); want=sys.argv[2] == "want"
for p, k in json.loads(sys.argv[3]):
    ids = d["prompts"][p] + d["greedy"][p][:k]
    print(json.dumps(d["greedy"][p][k:k + 8]) if want else json.dumps({"prompt": " ".join(map(str, ids))}))' \
    "$1/greedy.json" "$2" "$RAGGED"; }

for fam in gpt2 llama2 llama31 llama32_tied mistral; do
    FIX=tests/fixtures/hf/$fam
    prompts "$FIX" > "$TMP/$fam.jsonl"
    "$BIN" convert --input "$FIX" --output "$TMP/$fam" --to megatron-c > /dev/null 2>&1
    OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.jsonl" --max-new-tokens 16 "${TOK[@]}" \
        > "$TMP/$fam.out" 2> "$TMP/$fam.err"
    rc=$?
    expected "$FIX" > "$TMP/$fam.want"
    [ -s "$TMP/$fam.want" ] || { bad "greedy_equals_transformers_$fam: no reference ids in $FIX/greedy.json"; continue; }
    diff <(grep '^{' "$TMP/$fam.out" | ids_of) "$TMP/$fam.want" > "$TMP/$fam.diff"
    check "greedy_equals_transformers_$fam" $(( rc != 0 || $? != 0 )) "rc $rc $(tail -1 "$TMP/$fam.err") $(head -4 "$TMP/$fam.diff")"
done

# the key/value cache gives what recomputing the window gives: greedy and seeded draws, 40 tokens
for fam in gpt2 llama31 mistral; do
    for mode in "" "--temperature 0.9 --top-k 50 --seed 11"; do
        # shellcheck disable=SC2086
        a=$(OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.jsonl" --max-new-tokens 40 \
            "${TOK[@]}" $mode 2> /dev/null | grep '^{')
        # shellcheck disable=SC2086
        b=$(OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.jsonl" --max-new-tokens 40 \
            "${TOK[@]}" $mode --no-kv-cache 2> /dev/null | grep '^{')
        [ -n "$a" ] && [ "$a" = "$b" ]
        check "kv_cache_equals_window_${fam}${mode:+_sampled}" $? "$(diff <(echo "$a") <(echo "$b") | head -3)"
    done
done

# prompts of different lengths together: transformers' tokens, each what it gives alone (a
# one-prompt run prints its ids as text), the same two at a time; sampled, each as alone
for fam in gpt2 llama31 mistral; do
    FIX=tests/fixtures/hf/$fam
    ragged "$FIX" prompt > "$TMP/$fam.ragged.jsonl"
    ragged "$FIX" want > "$TMP/$fam.ragged.want"
    for mode in "" "--temperature 0.9 --top-k 50 --seed 11"; do
        tag=${fam}${mode:+_sampled}
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.ragged.jsonl" --max-new-tokens 8 \
            "${TOK[@]}" $mode > "$TMP/$tag.batched" 2> "$TMP/$tag.err"
        grep '^{' "$TMP/$tag.batched" | ids_of > "$TMP/$tag.batched.ids"
        [ -s "$TMP/$tag.batched.ids" ] || { bad "ragged_batch_$tag: no output: $(tail -1 "$TMP/$tag.err")"; continue; }
        if [ -z "$mode" ]; then
            diff "$TMP/$tag.batched.ids" "$TMP/$fam.ragged.want" > "$TMP/$tag.diff"
            check "ragged_batch_equals_transformers_$tag" $? "$(head -4 "$TMP/$tag.diff")"
        fi
        : > "$TMP/$tag.alone.ids"
        while IFS= read -r line; do
            echo "$line" > "$TMP/one.jsonl"
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/one.jsonl" --max-new-tokens 8 \
                "${TOK[@]}" $mode 2> /dev/null | grep -v checkpoint | python3 -c 'import sys,json; print(json.dumps(list(map(int, sys.stdin.read().split()))))' \
                >> "$TMP/$tag.alone.ids"
        done < "$TMP/$fam.ragged.jsonl"
        diff "$TMP/$tag.batched.ids" "$TMP/$tag.alone.ids" > "$TMP/$tag.diff"
        check "ragged_batch_equals_alone_$tag" $? "$(head -4 "$TMP/$tag.diff")"
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.ragged.jsonl" --max-new-tokens 8 \
            "${TOK[@]}" $mode --batch-size 2 2> /dev/null | grep '^{' | ids_of > "$TMP/$tag.b2.ids"
        diff "$TMP/$tag.batched.ids" "$TMP/$tag.b2.ids" > "$TMP/$tag.diff"
        check "ragged_two_at_a_time_equals_all_$tag" $? "$(head -4 "$TMP/$tag.diff")"
    done
done
grep -qE '^generate: memory per rank \(cpu backend\): weights [0-9.]+ KiB \(F32\), key/value cache [0-9.]+ KiB \(5 sequences x 24 positions\), activations' \
    "$TMP/llama31.err"
check memory_line $? "$(grep memory "$TMP/llama31.err")"

FIX=tests/fixtures/hf/llama31
OMP_NUM_THREADS=1 "$BIN" generate --load-hf "$FIX" --prompts-file "$TMP/llama31.jsonl" --max-new-tokens 16 "${TOK[@]}" \
    > "$TMP/hf.out" 2> "$TMP/hf.err"
diff <(grep '^{' "$TMP/hf.out" | ids_of) "$TMP/llama31.want" > /dev/null
check greedy_from_load_hf $? "$(tail -2 "$TMP/hf.err")"
if command -v mpirun > /dev/null; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS "$BIN" generate \
        --load "$TMP/llama31" --prompts-file "$TMP/llama31.jsonl" --max-new-tokens 16 "${TOK[@]}" \
        --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 > "$TMP/tp2.out" 2> "$TMP/tp2.err"
    diff <(grep '^{' "$TMP/tp2.out" | ids_of) "$TMP/llama31.want" > /dev/null
    check greedy_tp2_equals_transformers $? "$(tail -2 "$TMP/tp2.err")"
    for mode in "" "--temperature 0.9 --top-k 50 --seed 11"; do # prompts of different lengths together
        tag=llama31${mode:+_sampled}
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS "$BIN" generate \
            --load "$TMP/llama31" --prompts-file "$TMP/llama31.ragged.jsonl" --max-new-tokens 8 "${TOK[@]}" $mode \
            --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 2> "$TMP/tp2.err" | grep '^{' | ids_of \
            > "$TMP/$tag.tp2.ids"
        [ -s "$TMP/$tag.tp2.ids" ] && diff "$TMP/$tag.batched.ids" "$TMP/$tag.tp2.ids" > "$TMP/$tag.diff"
        check "ragged_batch_tp2_equals_one_rank_$tag" $? "$(head -4 "$TMP/$tag.diff") $(tail -2 "$TMP/tp2.err")"
    done
else
    echo "skip greedy_tp2_equals_transformers: no mpirun"
fi
# the CPU backend has no graphs: a run asking for them decodes as before and says nothing of them
MC_DECODE_GRAPHS=1 OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/llama31" --prompts-file "$TMP/llama31.ragged.jsonl" \
    --max-new-tokens 8 "${TOK[@]}" --batch-size 2 2> "$TMP/cpu_graphs.err" | grep '^{' | ids_of > "$TMP/cpu_graphs.ids"
[ -s "$TMP/cpu_graphs.ids" ] && diff "$TMP/cpu_graphs.ids" "$TMP/llama31.b2.ids" > /dev/null &&
    ! grep -qi graph "$TMP/cpu_graphs.err"
check cpu_ignores_decode_graphs $? "$(tail -2 "$TMP/cpu_graphs.err")"
sample() { OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/llama31" --prompt "1 2 3" --max-new-tokens 24 --temperature 1 \
    --top-p 0.9 "${TOK[@]}" --seed "$1" 2> /dev/null | grep -v "checkpoint"; }
# one prompt streams its tokens as they come: the same text as the window recompute prints at the end
one() { OMP_NUM_THREADS=1 "$BIN" generate --load "$TMP/llama31" --prompt "5 6 7" --max-new-tokens 30 "${TOK[@]}" "$@" \
    2> /dev/null | grep -v "checkpoint"; }
s1=$(one) s2=$(one --no-kv-cache)
[ -n "$s1" ] && [ "$s1" = "$s2" ]
check streamed_equals_window $? "'$s1' vs '$s2'"
a=$(sample 7) b=$(sample 7) c=$(sample 8)
[ -n "$a" ] && [ "$a" = "$b" ]
check sampling_repeats_with_its_seed $? "'$a' vs '$b'"
[ "$a" != "$c" ]
check sampling_differs_with_another_seed $? "'$a' for both seeds"

# On a GPU (a CUDA build with a device; skipped otherwise): fp32 greedy equals transformers'
# for prompts of different lengths together, and so does the window recompute; bf16's
# batch gives each prompt what it gives alone.
GTOK=(--tokenizer-type NullTokenizer --vocab-size 300 --device cuda)
"$BIN" generate --load "$TMP/llama31" --prompt-ids 1 --max-new-tokens 1 "${GTOK[@]}" > /dev/null 2> "$TMP/gpu.err"
if grep -qE "has no CUDA|no CUDA device is visible" "$TMP/gpu.err"; then
    echo "skip gpu_*: $(tail -1 "$TMP/gpu.err")"
else
    for fam in gpt2 llama31 mistral; do
        for recompute in "" --no-kv-cache; do
            # shellcheck disable=SC2086
            "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.ragged.jsonl" --max-new-tokens 8 "${GTOK[@]}" \
                $recompute 2> "$TMP/gpu.err" | grep '^{' | ids_of > "$TMP/gpu.ids"
            diff "$TMP/gpu.ids" "$TMP/$fam.ragged.want" > "$TMP/gpu.diff"
            check "gpu_fp32_ragged_batch_equals_transformers_$fam${recompute:+_window}" $? \
                "$(head -4 "$TMP/gpu.diff") $(tail -1 "$TMP/gpu.err")"
        done
        "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/$fam.ragged.jsonl" --max-new-tokens 8 "${GTOK[@]}" \
            --bf16 2> "$TMP/gpu.err" | grep '^{' | ids_of > "$TMP/gpu.ids"
        : > "$TMP/gpu.alone"
        while IFS= read -r line; do
            echo "$line" > "$TMP/one.jsonl"
            "$BIN" generate --load "$TMP/$fam" --prompts-file "$TMP/one.jsonl" --max-new-tokens 8 "${GTOK[@]}" --bf16 \
                2> /dev/null | grep -v checkpoint | python3 -c 'import sys,json; print(json.dumps(list(map(int, sys.stdin.read().split()))))' \
                >> "$TMP/gpu.alone"
        done < "$TMP/$fam.ragged.jsonl"
        [ -s "$TMP/gpu.ids" ] && diff "$TMP/gpu.ids" "$TMP/gpu.alone" > "$TMP/gpu.diff"
        check "gpu_bf16_ragged_batch_equals_alone_$fam" $? "$(head -4 "$TMP/gpu.diff") $(tail -1 "$TMP/gpu.err")"
    done
    # decode steps replayed from CUDA graphs print what steps run op by op print
    # (MC_DECODE_GRAPHS=0), and no capture fails: one prompt (batch 1); prompts of different
    # lengths all together, two and three at a time (a graph for each batch size, replayed
    # for the sequences that take the slots next), greedy and sampled. GEMM algorithms are
    # not timed, so that both runs pick the same ones.
    graphs_vs_op_by_op() { # FAM TAG ARGS...
        local fam=$1 tag=$2 rc
        shift 2
        MC_GEMM_AUTOTUNE=0 "$BIN" generate --load "$TMP/$fam" "${GTOK[@]}" --bf16 "$@" > "$TMP/graphs.out" \
            2> "$TMP/graphs.err"
        rc=$?
        MC_GEMM_AUTOTUNE=0 MC_DECODE_GRAPHS=0 "$BIN" generate --load "$TMP/$fam" "${GTOK[@]}" --bf16 "$@" \
            > "$TMP/eager.out" 2> "$TMP/eager.err"
        [ $rc = 0 ] && [ -s "$TMP/graphs.out" ] && ! grep -q "decode graphs off" "$TMP/graphs.err" &&
            diff "$TMP/graphs.out" "$TMP/eager.out" > "$TMP/graphs.diff"
        check "gpu_decode_graphs_equal_op_by_op_${fam}_$tag" $? \
            "rc $rc $(head -4 "$TMP/graphs.diff") $(grep -E "graphs|rror" "$TMP/graphs.err" | tail -2)"
    }
    for fam in gpt2 llama31 mistral; do
        graphs_vs_op_by_op "$fam" batch1 --prompt "5 6 7" --max-new-tokens 24
        for b in "" 2 3; do
            graphs_vs_op_by_op "$fam" "ragged${b:+_batch$b}" --prompts-file "$TMP/$fam.ragged.jsonl" \
                --max-new-tokens 16 ${b:+--batch-size $b}
        done
        graphs_vs_op_by_op "$fam" ragged_batch2_sampled --prompts-file "$TMP/$fam.ragged.jsonl" --max-new-tokens 16 \
            --batch-size 2 --temperature 0.9 --top-k 50 --seed 11
    done
fi

# bad input: one line on stderr, exit 2
for args in "--prompt-ids 1" "--load $TMP/llama31" "--load $TMP/llama31 --prompt-ids 1 --prompt 2" \
            "--load $TMP/llama31 --prompt-ids 300" "--load $TMP/nowhere --prompt-ids 1" \
            "--load $TMP/llama31 --prompts-file $TMP/nowhere.jsonl" "--load $TMP/llama31 --prompt-ids 1 --max-new-tokens 0" \
            "--load $TMP/gpt2 --prompt-ids 1 --max-new-tokens 64"; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "$BIN" generate $args "${TOK[@]}" > /dev/null 2> "$TMP/err"
    code=$?
    [ $code = 2 ] && [ "$(wc -l < "$TMP/err")" = 1 ]
    check "bad_input: $args" $? "exit $code: $(head -2 "$TMP/err")"
done
# --load-hf's temporary checkpoint is gone after a run, and after a refused one
mkdir -p "$TMP/tmpdir"
TMPDIR="$TMP/tmpdir" OMP_NUM_THREADS=1 "$BIN" generate --load-hf tests/fixtures/hf/gpt2 --prompt-ids 1 --max-new-tokens 2 \
    "${TOK[@]}" > /dev/null 2>&1
TMPDIR="$TMP/tmpdir" OMP_NUM_THREADS=1 "$BIN" generate --load-hf tests/fixtures/hf/gpt2 --prompt-ids 1 --max-new-tokens 99 \
    "${TOK[@]}" > /dev/null 2>&1
[ -z "$(ls -A "$TMP/tmpdir")" ]
check load_hf_leaves_nothing $? "left: $(ls "$TMP/tmpdir")"
check_summary
