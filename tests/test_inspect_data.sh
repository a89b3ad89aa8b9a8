#!/usr/bin/env bash
# The data-pipeline commands end to end: `megatron-c preprocess` (byte-identical to the
# golden outputs of tools/reference/make_preprocess_golden.py, also from .jsonl.gz, with
# --partitions, and its errors), `megatron-c merge-datasets`, and `megatron-c
# inspect-data`, whose samples must equal the golden GPTDataset samples of
# tools/reference/make_data_golden.py (tests/fixtures/data/idx_*).
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PFX=tests/fixtures/preprocess
FIX=tests/fixtures/data
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

# expect NAME "substring of the one error line" -- args...
expect() {
    local name=$1 want=$2
    shift 3
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    local code=$?
    local lines
    lines=$(grep -c '' "$TMP/err" || true)
    if [ "$code" -eq 2 ] && grep -qF -- "$want" "$TMP/err" && [ "$lines" -ge 1 ] &&
        [ "$(grep -c 'error' "$TMP/err")" -eq 1 ]; then
        ok "$name: $(grep error "$TMP/err")"
    else
        bad "$name: exit $code, wanted '$want'"
        head -5 "$TMP/err"
    fi
}

same_dataset() { # prefix golden_prefix
    cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx"
}

# ---- preprocess ---------------------------------------------------------------------------
NULLTOK=(--tokenizer-type NullTokenizer --vocab-size 1000)
BYTETOK=(--tokenizer-type ByteLevelTokenizer)
"$BIN" preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/bytes" --json-keys text title --append-eod \
    --workers 2 --log-interval 4 "${BYTETOK[@]}" 2>"$TMP/log"
check "preprocess byte-level = golden (text)" same_dataset "$TMP/bytes_text_document" $PFX/expected/bytes_text_document
check "preprocess byte-level = golden (title)" same_dataset "$TMP/bytes_title_document" $PFX/expected/bytes_title_document
check "progress lines every --log-interval documents" grep -q "Processed 8 documents" "$TMP/log"

if command -v gzip >/dev/null; then
    gzip -c $PFX/docs.jsonl >"$TMP/docs.jsonl.gz"
    "$BIN" preprocess --input "$TMP/docs.jsonl.gz" --output-prefix "$TMP/gz" --json-keys text title --append-eod \
        --workers 3 "${BYTETOK[@]}" 2>/dev/null
    check "preprocess .jsonl.gz = golden" same_dataset "$TMP/gz_text_document" $PFX/expected/bytes_text_document
fi

"$BIN" preprocess --input $PFX/nulls.jsonl --output-prefix "$TMP/rr" --json-keys text title --append-eod \
    --workers 3 --partitions 3 "${NULLTOK[@]}" 2>/dev/null
check "--partitions 3 (round-robin, merged) = golden" same_dataset "$TMP/rr_text_document" $PFX/expected/null_rr3_text_document
"$BIN" preprocess --input $PFX/nulls.jsonl --output-prefix "$TMP/seq" --json-keys text title --append-eod \
    --workers 2 --partitions 2 --keep-sequential-samples "${NULLTOK[@]}" 2>/dev/null
check "--keep-sequential-samples = one partition" same_dataset "$TMP/seq_title_document" $PFX/expected/null_title_document
check "no partition files left" bash -c "! ls '$TMP' | grep -q -e partition -e '_0_' -e '\\.tmp'"

GPT2_VOCAB=${MC_SHARED_DIR:-../shared}/data/gpt2/gpt2-vocab.json
GPT2_MERGES=${MC_SHARED_DIR:-../shared}/data/gpt2/gpt2-merges.txt
if [ -f "$GPT2_VOCAB" ]; then
    GPT2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES")
    "$BIN" preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/gpt2" --json-keys text title --append-eod \
        --workers 2 "${GPT2[@]}" 2>/dev/null
    check "preprocess GPT-2 = golden" same_dataset "$TMP/gpt2_text_document" $PFX/expected/gpt2_text_document
else
    echo "SKIP GPT-2 cases: $GPT2_VOCAB missing (set MC_SHARED_DIR)"
fi

expect unknown_tokenizer "--tokenizer-type: invalid choice 'WordPiece'" -- preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/x" --workers 1 --tokenizer-type WordPiece
expect missing_workers "--workers is required" -- preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/x" "${BYTETOK[@]}"
expect missing_tokenizer "--tokenizer-type is required" -- preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/x" --workers 1
expect split_sentences "--split-sentences" -- preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/x" --workers 1 --split-sentences "${BYTETOK[@]}"
expect no_output_dir "the directory $TMP/none does not exist" -- preprocess --input $PFX/docs.jsonl --output-prefix "$TMP/none/x" --workers 1 "${BYTETOK[@]}"
expect missing_input "--input $TMP/missing.jsonl" -- preprocess --input "$TMP/missing.jsonl" --output-prefix "$TMP/x" --workers 1 "${BYTETOK[@]}"
printf '{"text": "a"}\n{"text": oops}\n' >"$TMP/bad.jsonl"
expect bad_line "bad.jsonl:2: invalid JSON" -- preprocess --input "$TMP/bad.jsonl" --output-prefix "$TMP/x" --workers 2 "${BYTETOK[@]}"
check "nothing written by failed runs" bash -c "! ls '$TMP' | grep -q '^x'"
"$BIN" preprocess --input "$TMP/bad.jsonl" --output-prefix "$TMP/skipped" --workers 2 --skip-bad-lines "${BYTETOK[@]}" 2>"$TMP/log"
check "--skip-bad-lines reports and continues" bash -c "grep -q 'skipping $TMP/bad.jsonl:2' '$TMP/log' && grep -q '1 bad lines skipped' '$TMP/log' && [ -f '$TMP/skipped_text_document.idx' ]"

# ---- merge-datasets --------------------------------------------------------------------------
"$BIN" merge-datasets --input $FIX/idx_a $FIX/idx_b --output-prefix "$TMP/ab" >/dev/null
check "merge-datasets = add_index golden" same_dataset "$TMP/ab" $FIX/idx_ab
expect merge_dtype "int32" -- merge-datasets --input $FIX/idx_a $FIX/idx_c --output-prefix "$TMP/mix"

# ---- inspect-data ----------------------------------------------------------------------------
read -r _ W0 W1 <$FIX/idx_single.txt
DATA=(--data-path $FIX/idx_a "${NULLTOK[@]}" --seq-length 32 --seed 1234 --data-cache-path "$TMP/cache")
"$BIN" inspect-data "${DATA[@]}" --split-name train --num-samples "$W0" --start 0 --count 200 >"$TMP/samples.jsonl" 2>"$TMP/log"
check "inspect-data prints 200 JSON lines" [ "$(grep -c '^{"index": ' "$TMP/samples.jsonl")" -eq 200 ]
if command -v python3 >/dev/null && python3 -c "import numpy" 2>/dev/null; then
    check "inspect-data samples = golden GPTDataset samples" python3 - "$TMP/samples.jsonl" $FIX/idx_single_train_samples200.i32 <<'EOF'
import json, sys
import numpy as np
want = np.fromfile(sys.argv[2], dtype="<i4").reshape(200, 33)
for i, line in enumerate(open(sys.argv[1])):
    s = json.loads(line)
    assert s["index"] == i, s["index"]
    assert s["tokens"] == want[i, :32].tolist() and s["labels"] == want[i, 1:].tolist(), i
EOF
else
    echo "SKIP sample comparison: no python3 with numpy"
fi
"$BIN" inspect-data "${DATA[@]}" --split-name valid --num-samples "$W1" --start 3 --count 2 --decode >"$TMP/valid.jsonl" 2>/dev/null
check "inspect-data --decode adds the text" bash -c "[ \$(grep -c '\"text\": \"' '$TMP/valid.jsonl') -eq 2 ] && grep -q '\"index\": 4' '$TMP/valid.jsonl'"
"$BIN" inspect-data --data-path 0.3 $FIX/idx_a 0.7 $FIX/idx_b --split 90,10,0 "${NULLTOK[@]}" --seq-length 32 \
    --data-cache-path "$TMP/cache" --num-samples 300 --count 3 >"$TMP/blend.jsonl" 2>/dev/null
check "inspect-data on a blend names the dataset of each sample" grep -q '"dataset": 1, "dataset_sample": 0' "$TMP/blend.jsonl"
"$BIN" inspect-data "${DATA[@]}" --split-name train --count 1 >/dev/null 2>"$TMP/log"
check "inspect-data without a sample count says one epoch, not \"(requested 0)\"" \
    bash -c "grep -q 'one epoch, as no sample count was requested' '$TMP/log' && ! grep -q 'requested 0' '$TMP/log'"
check "inspect-data with a sample count says it" bash -c "'$BIN' inspect-data ${DATA[*]} --num-samples $W0 --count 1 2>&1 >/dev/null | grep -q '(requested $W0)'"
expect inspect_range "outside the" -- inspect-data "${DATA[@]}" --num-samples 10 --start 1000 --count 5
expect inspect_no_seq "--seq-length is required" -- inspect-data --data-path $FIX/idx_a "${NULLTOK[@]}"
expect inspect_bad_prefix "no_such" -- inspect-data --data-path $FIX/no_such "${NULLTOK[@]}" --seq-length 32 --data-cache-path "$TMP/cache"
expect train_split_with_per_split "--split cannot be combined" -- inspect-data --train-data-path $FIX/idx_a --split 1,1,1 "${NULLTOK[@]}" --seq-length 32

# A file that is not an index.
cp $FIX/idx_a.bin "$TMP/foreign.idx"
cp $FIX/idx_a.bin "$TMP/foreign.bin"
expect foreign_idx "not a Megatron indexed dataset index" -- inspect-data --data-path "$TMP/foreign" "${NULLTOK[@]}" --seq-length 32

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
