#!/usr/bin/env bash
# scripts/fuzz.sh (`make fuzz`): builds the libFuzzer harnesses of tests/fuzz with clang
# (AddressSanitizer + UndefinedBehaviorSanitizer) and runs each for FUZZ_SECONDS.
#
#   FUZZ_SECONDS  seconds per parser (default 600)
#   FUZZ_JOBS     parsers fuzzed at the same time (default 2)
#   FUZZ_TARGETS  which parsers (default: every tests/fuzz/fuzz_<parser>.c)
#   FUZZ_BUILD    the build directory (default build-fuzz)
#
# Each run first replays the seed corpus (tests/fuzz/corpus/<parser>) and every past finding
# (tests/fuzz/findings/<parser>), then mutates. New inputs that reach new code go to
# FUZZ_BUILD/corpus/<parser> (kept between runs, not committed); a crash, a sanitizer
# report, a leak or a timeout stops that parser's run and its reproducer is saved as
# tests/fuzz/findings/<parser>/<kind>-<sha1>: fix the bug, keep the file (the ctest
# fuzz_<parser>_replay replays it from then on). The figures of every run (executions,
# coverage, corpus, findings) go to FUZZ_BUILD/fuzz-summary.tsv and are printed at the end.
set -u
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-600}
JOBS=${FUZZ_JOBS:-2}
BUILD=${FUZZ_BUILD:-build-fuzz}
TARGETS=${FUZZ_TARGETS:-$(ls tests/fuzz/fuzz_*.c | sed 's#.*/fuzz_##; s#\.c$##')}

if ! command -v clang >/dev/null; then
    echo "make fuzz: needs clang with libFuzzer and libomp (apt-get install clang libomp-dev)" >&2
    exit 1
fi
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMC_WITH_CUDA=OFF -DMC_FUZZ=ON \
    > "$BUILD.cmake.log" 2>&1 || { cat "$BUILD.cmake.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target fuzzers > "$BUILD.build.log" 2>&1 || { tail -40 "$BUILD.build.log"; exit 1; }

mkdir -p "$BUILD/logs"
run_one() {
    local p=$1 log="$BUILD/logs/$1.log"
    mkdir -p "$BUILD/corpus/$p" "tests/fuzz/findings/$p"
    touch "$BUILD/logs/$p.start"
    local start=$(date +%s)
    # stdout of the library (progress lines) is closed; stderr keeps the sanitizers' reports
    OMP_NUM_THREADS=1 "$BUILD/fuzz_$p" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=30 \
        -rss_limit_mb=2560 -max_len=65536 -close_fd_mask=1 -artifact_prefix="tests/fuzz/findings/$p/" \
        "$BUILD/corpus/$p" "tests/fuzz/corpus/$p" "tests/fuzz/findings/$p" > "$log" 2>&1
    local rc=$? secs=$(( $(date +%s) - start ))
    local execs cov ft corp
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    corp=$(ls "$BUILD/corpus/$p" | wc -l)
    # what libFuzzer saved during this run (crash-, leak-, timeout-, oom-, slow-unit-)
    local found
    found=$(find "tests/fuzz/findings/$p" -type f -newer "$BUILD/logs/$p.start" \
        \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'slow-unit-*' \) | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$(date -u +%Y-%m-%d)" "$secs" "${execs:-0}" "${cov:-0}" \
        "${ft:-0}" "$corp" "$found" "$rc" >> "$BUILD/fuzz-summary.tsv"
}

printf 'parser\tdate\tseconds\texecutions\tcoverage(edges)\tfeatures\tcorpus\tnew findings\texit\n' > "$BUILD/fuzz-summary.tsv"
running=0
for p in $TARGETS; do
    run_one "$p" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
column -t -s $'\t' "$BUILD/fuzz-summary.tsv"
if awk -F'\t' 'NR > 1 && ($8 > 0 || $9 != 0) { bad = 1 } END { exit !bad }' "$BUILD/fuzz-summary.tsv"; then
    echo "findings: see tests/fuzz/findings/ and $BUILD/logs/" >&2
    exit 1
fi
