#!/usr/bin/env bash
# Bad checkpoint input (checkpoint issue, acceptance 6): each case prints exactly one line
# on stderr naming what was wrong, exits with code 2, and writes or overwrites nothing (the
# checkpoint directory's files are the same, byte for byte, before and after). Also: a
# damaged newest checkpoint beside a valid older one is named in one warning line and
# skipped, and inspect-ckpt --verify finds damage.
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
source "$(dirname "$0")/check.sh"

BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --micro-batch-size 2 --global-batch-size 4 --train-iters 6 --lr 1e-3 --mock-data --tokenizer-type NullTokenizer
      --vocab-size 128 --device cpu --eval-iters 0 --peak-tflops 1)


# A fresh checkpoint directory $TMP/$1 holding iterations 2 and 4 (or only 2 with "one").
make_ckpt() {
    rm -rf "$TMP/$1"
    local stop=4
    [ "${2:-}" = one ] && stop=2
    OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" --save "$TMP/$1" --save-interval 2 --exit-interval $stop > "$TMP/$1.make.log" 2>&1 ||
        { echo "could not make $1"; cat "$TMP/$1.make.log"; exit 1; }
}
snapshot() { (cd "$TMP/$1" && find . -type f -exec sha256sum {} + | sort; find . | sort) ; }

# expect NAME CKPT_DIR "substring" -- args: exit 2, one stderr line with the substring, the
# directory unchanged.
expect() {
    local name=$1 dir=$2 want=$3
    shift 4
    local before after code err lines
    before=$(snapshot "$dir")
    OMP_NUM_THREADS=1 "$BIN" "$@" > "$TMP/out" 2> "$TMP/err"
    code=$?
    err=$(cat "$TMP/err")
    lines=$(printf '%s' "$err" | grep -c '')
    after=$(snapshot "$dir")
    if [ "$code" -eq 2 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -qF -- "$want" && [ "$before" = "$after" ] &&
        ! grep -q "iteration .*/" "$TMP/out"; then
        ok "$name: $err"
    else
        bad "$name: exit $code, $lines stderr lines, wanted '$want', directory unchanged: $([ "$before" = "$after" ] && echo yes || echo NO)"
        printf '%s\n' "$err" | head -5
    fi
}
shard() { echo "$TMP/$1/iter_000000$2/rank-00000-of-00001.safetensors"; }

make_ckpt missing one
echo 7 > "$TMP/missing/latest_checkpointed_iteration.txt"
expect tracker_names_missing missing "latest_checkpointed_iteration.txt names iteration 7, but" -- \
    train "${BASE[@]}" --load "$TMP/missing" --save "$TMP/missing"

make_ckpt trunc one
truncate -s -100 "$(shard trunc 2)"
expect truncated_shard trunc "(truncated or overwritten)" -- train "${BASE[@]}" --load "$TMP/trunc" --save "$TMP/trunc"

make_ckpt flip one
f=$(shard flip 2)
printf '\xff' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") - 12 )) conv=notrunc status=none
expect checksum_mismatch flip "checksum mismatch in bytes" -- train "${BASE[@]}" --load "$TMP/flip" --save "$TMP/flip"
expect inspect_verify_damage flip "checksum mismatch in bytes" -- inspect-ckpt "$TMP/flip" --verify

make_ckpt cfg one
expect config_differs cfg "--hidden-size is 64 in the checkpoint and 128 here" -- \
    train "${BASE[@]}" --hidden-size 128 --load "$TMP/cfg" --save "$TMP/cfg"
expect config_differs_choice cfg "--normalization is LayerNorm in the checkpoint and RMSNorm here" -- \
    train "${BASE[@]}" --normalization RMSNorm --load "$TMP/cfg"
expect ckpt_step_missing cfg "--ckpt-step 3: $TMP/cfg has no iter_0000003 (its checkpoints: 2)" -- \
    train "${BASE[@]}" --load "$TMP/cfg" --ckpt-step 3
expect schedule_differs cfg "learning rate is 0.001 in the checkpoint and 0.002 from the flags (--lr)" -- \
    train "${BASE[@]}" --lr 2e-3 --load "$TMP/cfg"

make_ckpt noopt one
rm -rf "$TMP/noopt"
OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" --save "$TMP/noopt" --no-save-optim --exit-interval 2 > /dev/null 2>&1
expect no_optimizer_state noopt "saved without optimizer state (--no-save-optim); pass --no-load-optim" -- \
    train "${BASE[@]}" --load "$TMP/noopt"

rm -rf "$TMP/norng"
mkdir -p "$TMP/norng"
OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" --save "$TMP/norng" --no-save-rng --exit-interval 2 > /dev/null 2>&1
expect no_rng_state norng "saved without RNG state (--no-save-rng); pass --no-load-rng" -- train "${BASE[@]}" --load "$TMP/norng"

make_ckpt meta one
echo '{"format": "megatron-c-checkpoint", "version": 1, "iter' > "$TMP/meta/iter_0000002/metadata.json"
expect metadata_garbage meta "metadata.json: not valid JSON" -- train "${BASE[@]}" --load "$TMP/meta"

# a save directory that cannot be written: found before training starts
touch "$TMP/a_file"
mkdir -p "$TMP/empty"
expect save_not_writable empty "--save: cannot create the directory $TMP/a_file: a file of that name exists" -- \
    train "${BASE[@]}" --save "$TMP/a_file/ckpt"
expect inspect_nothing empty "holds no checkpoint" -- inspect-ckpt "$TMP/empty"

# A damaged newest checkpoint is skipped (one warning line) for the valid older one.
make_ckpt older
f=$(shard older 4)
printf '\x00\x01' | dd of="$f" bs=1 seek=5000 conv=notrunc status=none
OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" --load "$TMP/older" > "$TMP/out" 2> "$TMP/err"
code=$?
if [ $code -eq 0 ] && [ "$(grep -c '' "$TMP/err")" -eq 1 ] && grep -q "iter_0000004 is damaged (.*checksum mismatch.*); skipping it" "$TMP/err" &&
    grep -q "successfully loaded checkpoint from $TMP/older .* at iteration 2" "$TMP/out"; then
    ok "damaged_newest_skipped: $(cat "$TMP/err")"
else
    bad "damaged_newest_skipped: exit $code"
    cat "$TMP/err" | head -3
fi

check_summary
