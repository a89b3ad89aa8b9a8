#!/usr/bin/env bash
# Bad input in multi-rank runs (Distributed training I, acceptance 4), on the CPU under
# mpirun: sizes that do not divide, flags that differ across ranks, a rank that dies
# mid-step. Each must end every rank with a clear error and a non-zero exit, never a
# hang past the collective timeout.
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
command -v mpirun > /dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe)
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --train-iters 6 --lr 1e-3 --mock-data --tokenizer-type NullTokenizer --vocab-size 256 --eval-iters 0
      --log-interval 1 --device cpu)
pass=0
fail=0

# expect NAME NP EXIT_WANTED "message every rank prints" -- args...   (EXIT_WANTED: a code, or nz)
expect_all_ranks() {
    local name=$1 np=$2 want_exit=$3 want=$4
    shift 5
    local start end code n
    start=$(date +%s)
    timeout 120 "${MPI[@]}" -np "$np" "$BIN" train "$@" > "$TMP/$name.out" 2> "$TMP/$name.err"
    code=$?
    end=$(date +%s)
    n=$(grep -cF -- "$want" "$TMP/$name.err" || true)
    local ok=1
    if [ "$want_exit" = nz ]; then [ "$code" -ne 0 ] || ok=0; else [ "$code" -eq "$want_exit" ] || ok=0; fi
    [ "$n" -ge "$np" ] || ok=0
    [ "$code" -ne 124 ] || ok=0
    if [ $ok -eq 1 ]; then
        pass=$((pass + 1))
        echo "ok   $name: exit $code after $((end - start)) s, $n ranks said: $(grep -F -- "$want" "$TMP/$name.err" | head -1)"
    else
        fail=$((fail + 1))
        echo "FAIL $name: exit $code after $((end - start)) s, $n of $np ranks printed '$want'"
        head -8 "$TMP/$name.err"
    fi
}

expect_all_ranks world_vs_tp 3 2 "world size 3 is not divisible by --tensor-model-parallel-size 2" -- \
    "${BASE[@]}" --tensor-model-parallel-size 2
expect_all_ranks heads_vs_tp 2 2 "--num-attention-heads 3 must be divisible by --tensor-model-parallel-size 2" -- \
    "${BASE[@]}" --num-attention-heads 3 --hidden-size 48 --tensor-model-parallel-size 2
expect_all_ranks global_batch_vs_dp 2 2 "--global-batch-size 6 must be a multiple of --micro-batch-size 2 x data-parallel size 2 = 4" -- \
    "${BASE[@]}" --global-batch-size 6
expect_all_ranks sp_seq 2 2 "--sequence-parallel: --seq-length 33 must be divisible by --tensor-model-parallel-size 2" -- \
    "${BASE[@]}" --seq-length 33 --max-position-embeddings 64 --tensor-model-parallel-size 2 --sequence-parallel

# Flags that differ between the ranks of one launch (MPMD command lines).
start=$(date +%s)
timeout 120 "${MPI[@]}" -np 1 "$BIN" train "${BASE[@]}" --lr 1e-3 : -np 1 "$BIN" train "${BASE[@]}" --lr 2e-3 \
    > "$TMP/mismatch.out" 2> "$TMP/mismatch.err"
code=$?
n=$(grep -c "the training configuration differs across ranks: rank 0 has 0x[0-9a-f]*, rank 1 has 0x" "$TMP/mismatch.err" || true)
if [ "$code" -eq 2 ] && [ "$n" -ge 2 ]; then
    pass=$((pass + 1)); echo "ok   mismatched_flags: exit $code after $(( $(date +%s) - start )) s: $(head -1 "$TMP/mismatch.err")"
else
    fail=$((fail + 1)); echo "FAIL mismatched_flags: exit $code, $n ranks reported it"; head -5 "$TMP/mismatch.err"
fi

# A rank that dies at the start of iteration 3: the others are in (or reach) a collective
# it never joins; the job must end promptly with a message, well inside the timeout.
start=$(date +%s)
MC_COMM_TIMEOUT_SECONDS=30 MC_TEST_EXIT_RANK=1 MC_TEST_EXIT_AT_ITERATION=3 timeout 120 "${MPI[@]}" \
    -x MC_COMM_TIMEOUT_SECONDS -x MC_TEST_EXIT_RANK -x MC_TEST_EXIT_AT_ITERATION -x OMP_NUM_THREADS -np 4 \
    "$BIN" train "${BASE[@]}" --global-batch-size 8 > "$TMP/die.out" 2> "$TMP/die.err"
code=$?
secs=$(( $(date +%s) - start ))
if [ "$code" -ne 0 ] && [ "$code" -ne 124 ] && [ "$secs" -lt 60 ] && grep -q "fault injection: rank 1 exits" "$TMP/die.err" &&
   grep -qE "megatron-c: error: rank [0-9]+:" "$TMP/die.err"; then
    pass=$((pass + 1)); echo "ok   dying_rank: exit $code after $secs s: $(grep -E 'megatron-c: error: rank' "$TMP/die.err" | head -1)"
else
    fail=$((fail + 1)); echo "FAIL dying_rank: exit $code after $secs s"; head -8 "$TMP/die.err"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
