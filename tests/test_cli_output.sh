#!/usr/bin/env bash
# What a run prints: notes once under mpirun, the note for --sequence-parallel with TP 1,
# a CPU run's TFLOP/s as a number rather than 0.0, MFU never above 100%, a sample whose
# prompt and continuation are joined as the tokenizer joins text, and drawn samples.
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
source "$(dirname "$0")/check.sh"
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --train-iters 3
      --lr 1e-3 --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --device cpu --log-interval 1 --eval-iters 0)

if command -v mpirun > /dev/null; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS "$BIN" train "${BASE[@]}" \
        --use-mcore-models > "$TMP/mpi.log" 2>&1
    n=$(grep -c "note: --use-mcore-models" "$TMP/mpi.log")
    check notes_once_under_mpirun $([ "$n" -eq 1 ]; echo $?) "printed $n times"
else
    echo "skip notes_once_under_mpirun: no mpirun"
fi

OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" --sequence-parallel --peak-tflops 1e-6 --sample-prompt "1 2 3" \
    --sample-tokens 4 > "$TMP/run.log" 2>&1
check sequence_parallel_tp1_noted $(grep -q "note: --sequence-parallel: disabling sequence parallelism" "$TMP/run.log"; echo $?) \
    "no note"
tf=$(grep -o "TFLOP/s/GPU): [0-9.e+-]*" "$TMP/run.log" | head -1 | awk '{print $2}')
check tflops_has_digits $(awk -v v="$tf" 'BEGIN { exit !(v > 0) }'; echo $?) "throughput printed as '$tf'"
over=$(grep -o "MFU: [0-9.]*%" "$TMP/run.log" | awk '{ if ($2 + 0 > 100) print $2 }')
check mfu_at_most_100 $([ -z "$over" ]; echo $?) "MFU printed above 100%: $over"
check mfu_peak_raised_noted $(grep -q "above the MFU peak" "$TMP/run.log"; echo $?) "no note when the achieved rate passed --peak-tflops"
sample=$(grep -A1 "greedy sample" "$TMP/run.log" | tail -1)
check sample_joined $(echo "$sample" | grep -qE '^1 2 3( [0-9]+){4}$'; echo $?) "sample line '$sample'"

# Drawn samples: top-k 1 is the greedy one; the same seed draws the same; a temperature
# draws something other than the greedy loop.
S=(--sample-prompt "1 2 3" --sample-tokens 12 --train-iters 2)
sample_of() { OMP_NUM_THREADS=1 "$BIN" train "${BASE[@]}" "${S[@]}" "$@" 2>&1 | grep -A1 "sample (" | tail -1; }
greedy=$(sample_of)
top1=$(sample_of --sample-temperature 1 --sample-top-k 1)
hot1=$(sample_of --sample-temperature 1.5 --sample-top-p 0.95)
hot2=$(sample_of --sample-temperature 1.5 --sample-top-p 0.95)
check sample_top_k_1_is_greedy $([ -n "$greedy" ] && [ "$greedy" = "$top1" ]; echo $?) "'$greedy' vs '$top1'"
check sample_repeats_with_its_seed $([ -n "$hot1" ] && [ "$hot1" = "$hot2" ]; echo $?) "'$hot1' vs '$hot2'"
check sample_with_temperature_varies $([ "$hot1" != "$greedy" ]; echo $?) "the same as greedy: '$hot1'"

check_summary
