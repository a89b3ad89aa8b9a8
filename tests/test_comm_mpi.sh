#!/usr/bin/env bash
# test_comm_mpi.sh BUILD_DIR: the comm layer over real ranks (CPU, MPI).
#
#   - every collective on every group for several layouts, under mpirun with 2, 3 (with
#     a tiny scratch, so large messages go in slices), 4 and 8 ranks
#     (tests/test_comm_mpi_ranks.c does the checking), and with 4 ranks on device memory
#     staged through the host (--distributed-backend mpi);
#   - the same started torchrun-style (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, no mpirun);
#   - failures, each a clear message on every rank and a non-zero exit, never a hang:
#     a config that differs on one rank, an impossible layout, a rank that never joins a
#     collective (the timeout), a rank that dies inside a collective, launcher env errors;
#   - megatron-c bench comm.
# Prints "N passed, N failed"; exits non-zero on any failure, 77 when MPI is missing.
set -u
BUILD=${1:-build}
PROG=$BUILD/test_comm_mpi_ranks
CLI=$BUILD/megatron-c
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: no mpirun"; exit 77; fi
if [ ! -x "$PROG" ]; then echo "SKIP: $PROG is not built"; exit 77; fi
if ! nm "$PROG" 2>/dev/null | grep -q "MPI_Init_thread"; then echo "SKIP: this build has no MPI"; exit 77; fi
# Oversubscribed hosts (CI has 2 cores): ranks yield instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1"
    [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 25 "$2" | sed 's/^/    | /'
    fail=$((fail + 1))
}
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
# lines FILE PATTERN: how many lines match
lines() { grep -c -- "$2" "$1" || true; }

# ---- collectives, every group, several layouts ----
run_collectives() { # name np [env...]
    local name=$1 np=$2
    shift 2
    local out=$TMP/$np.out
    env "$@" "${MPIRUN[@]}" -np "$np" "$PROG" >"$out" 2>&1
    local rc=$?
    # (at least one layout checked: a run that checks nothing fails)
    if [ $rc -eq 0 ] && grep -q " 0 failed" "$out" && ! grep -q "^FAIL" "$out" && grep -q "^ok" "$out"; then
        ok "$name ($(grep -c '^ok' "$out") layouts)"
    else
        bad "$name (rc $rc)" "$out"
    fi
}
run_collectives "mpirun -np 2: all layouts" 2
run_collectives "mpirun -np 3: all layouts, sliced messages (4 KiB scratch)" 3 MC_COMM_SCRATCH_BYTES=4096
run_collectives "mpirun -np 4: all layouts (TP2xDP2, TP2xPP2, CP2xTP2, ...)" 4
run_collectives "mpirun -np 8: TP2xPP2xDP2, CP2xTP2xDP2, TP2xPP4, DP8" 8 "MC_TEST_COMM_LAYOUTS=2,2,1;2,1,2;2,4,1;1,1,1"
# device memory over MPI through host staging (--distributed-backend mpi), on the CPU
run_collectives "mpirun -np 4, device memory over MPI (staged): TP2xDP2, TP2xPP2, DP4" 4 MC_TEST_COMM_DEVICE=staged \
    "MC_TEST_COMM_LAYOUTS=2,1,1;2,2,1;1,1,1"

# ---- torchrun-style launch: separate processes joined through MPI connect/accept ----
torchrun() { # np mode timeout_s [env...]: starts np processes, waits, writes $TMP/tr<r>.out and .rc
    local np=$1 mode=$2 tmo=$3
    shift 3
    local port=$((20000 + RANDOM % 30000)) pids=()
    for ((r = 0; r < np; r++)); do
        (env "$@" MC_TEST_COMM_MODE="$mode" RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout "$tmo" "$PROG" >"$TMP/tr$r.out" 2>&1
         echo $? >"$TMP/tr$r.rc") &
        pids+=($!)
    done
    wait "${pids[@]}"
}
t0=$(now)
torchrun 3 collectives 60 "MC_TEST_COMM_LAYOUTS=1,1,1;3,1,1;1,3,1" MC_TEST_COMM_QUICK=1
if [ "$(cat "$TMP"/tr0.rc "$TMP"/tr1.rc "$TMP"/tr2.rc | tr -d '\n')" = "000" ] && grep -q "3 passed, 0 failed" "$TMP/tr0.out"; then
    ok "torchrun env, 3 processes: DP3, TP3, PP3 ($(elapsed "$t0" | cut -c1-4) s)"
else
    bad "torchrun env, 3 processes (rc $(cat "$TMP"/tr?.rc | tr '\n' ' '))" "$TMP/tr0.out"
    cat "$TMP"/tr1.out "$TMP"/tr2.out | tail -n 10 | sed 's/^/    | /'
fi

# A rank that joins too late: every rank ends with its own message (no mpirun to end them).
t0=$(now)
torchrun 3 timeout 60 MC_COMM_TIMEOUT_SECONDS=2 MC_TEST_COMM_SLEEP=4
t=$(elapsed "$t0")
good=1
for r in 0 1 2; do
    [ "$(cat "$TMP/tr$r.rc")" != 0 ] || good=0
    grep -q "megatron-c: error: rank $r: all_reduce on group world (size 3)" "$TMP/tr$r.out" || good=0
done
if [ $good = 1 ] && (($(echo "$t < 20" | bc))); then
    ok "torchrun env: a late rank, every rank ends with a message ($(echo "$t" | cut -c1-4) s)"
else
    bad "torchrun env: late rank (rc $(cat "$TMP"/tr?.rc | tr '\n' ' '), $t s)" "$TMP/tr0.out"
    cat "$TMP"/tr1.out "$TMP"/tr2.out | tail -n 10 | sed 's/^/    | /'
fi

# ---- failures under mpirun ----
fail_case() { # name np mode expect_lines pattern max_seconds [env...]
    local name=$1 np=$2 mode=$3 want=$4 pat=$5 max=$6
    shift 6
    local out=$TMP/$mode.out t0
    t0=$(now)
    env "$@" MC_TEST_COMM_MODE="$mode" timeout 120 "${MPIRUN[@]}" -np "$np" -x MC_TEST_COMM_MODE \
        -x MC_COMM_TIMEOUT_SECONDS "$PROG" >"$out" 2>&1
    local rc=$? t
    t=$(elapsed "$t0")
    local n
    n=$(lines "$out" "$pat")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -ge "$want" ] && (($(echo "$t < $max" | bc))); then
        ok "$name (exit $rc, $n ranks said so, $(echo "$t" | cut -c1-4) s)"
    else
        bad "$name (exit $rc, $n of $want lines matching '$pat', $t s)" "$out"
    fi
}
export MC_COMM_TIMEOUT_SECONDS=30
fail_case "config differs on rank 3: every rank names it" 4 mismatch 4 \
    "megatron-c: error: the validated configuration differs across ranks: rank 0 has 0x000000000000600d, rank 3 has 0x0000000000000bad" 20
fail_case "world 4 with TP 3: every rank gives the divisibility rule" 4 layout 4 \
    "megatron-c: error: world size 4 is not divisible by --tensor-model-parallel-size 3 x --pipeline-model-parallel-size 1 x --context-parallel-size 1 = 3" 20
# Open MPI ends the others with SIGTERM, then SIGKILL odls_base_sigkill_timeout (1 s) later;
# on a loaded 2-core box a rank can miss that second to print its note, so give it 3.
fail_case "rank 2 dies inside an all_reduce: the others end at once, naming it" 4 die 3 \
    "megatron-c: error: rank [013]: .*all_reduce on group world (size 4)" 20 OMPI_MCA_odls_base_sigkill_timeout=3
MC_COMM_TIMEOUT_SECONDS=2 fail_case "rank 1 never joins: the timeout ends the job, each stuck rank names the op" 4 timeout 3 \
    "megatron-c: error: rank [023]: all_reduce on group world (size 4) did not complete within 2 seconds" 15

# ---- launcher environment errors ----
env_case() { # name expect_rc pattern env...
    local name=$1 want=$2 pat=$3
    shift 3
    local out=$TMP/env.out
    env "$@" timeout 60 "$PROG" >"$out" 2>&1
    local rc=$?
    if [ $rc -eq "$want" ] && grep -q -- "$pat" "$out"; then ok "$name"; else bad "$name (rc $rc)" "$out"; fi
}
env_case "srun step of 2 that MPI cannot join: a clear error" 2 \
    "the launcher (srun) started 2 processes but MPI sees a world of 1" SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0
env_case "srun step of 1: a single process" 0 "1 passed, 0 failed" SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0
env_case "WORLD_SIZE without RANK: a clear error" 2 "both RANK and WORLD_SIZE must be set" WORLD_SIZE=2
env_case "RANK outside WORLD_SIZE: a clear error" 2 "RANK=2 is outside WORLD_SIZE=2" RANK=2 WORLD_SIZE=2
env_case "bad MC_COMM_TIMEOUT_SECONDS: a clear error" 2 "MC_COMM_TIMEOUT_SECONDS: expected a positive number" MC_COMM_TIMEOUT_SECONDS=abc
env_case "torchrun env, nobody at MASTER_PORT: ends within the timeout" 2 "could not reach rank 0 at MASTER_ADDR=127.0.0.1" \
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 30000)) MC_COMM_TIMEOUT_SECONDS=1

# ---- megatron-c bench comm ----
if [ -x "$CLI" ]; then
    out=$TMP/bench.out
    "${MPIRUN[@]}" -np 2 "$CLI" bench comm --sizes 8B-256KB --iters 3 --warmup 1 >"$out" 2>&1
    rc=$?
    rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +(sum|none) +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$out")
    if [ $rc -eq 0 ] && [ "$rows" -eq 48 ] && grep -q "# all_reduce" "$out" && grep -q "# reduce_scatter" "$out" &&
        grep -q "Avg bus bandwidth (all_gather)" "$out"; then
        ok "bench comm on 2 ranks: 3 ops x 16 sizes, no wrong values"
    else
        bad "bench comm (rc $rc, $rows rows)" "$out"
    fi
    "${MPIRUN[@]}" -np 2 "$CLI" bench comm --sizes 1KB,4MB --ops all_reduce --dtype bf16 --iters 2 --warmup 0 >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -cE 'bf16 +sum .* 0$' "$out")" -eq 2 ]; then
        ok "bench comm bf16 list of sizes"
    else
        bad "bench comm bf16 (rc $rc)" "$out"
    fi
    "${MPIRUN[@]}" -np 2 "$CLI" bench comm --sizes 8XB >"$out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ "$(lines "$out" "megatron-c: error: --sizes: unknown unit in '8XB'")" -eq 2 ]; then
        ok "bench comm --sizes 8XB: the error on every rank"
    else
        bad "bench comm bad size (rc $rc)" "$out"
    fi
    "$CLI" bench comm --ops all_reduce,broadcast >"$out" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "unknown operation 'broadcast'" "$out"; then ok "bench comm --ops broadcast: a clear error"; else bad "bench comm bad op (rc $rc)" "$out"; fi
    "$CLI" bench comm --sizes 64B-1KB --iters 1 >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "one rank: every collective is a no-op" "$out"; then ok "bench comm on one rank"; else bad "bench comm 1 rank (rc $rc)" "$out"; fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
