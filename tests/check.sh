# check.sh: what the shell tests share, sourced (the counterpart of check.h): a temporary
# directory $TMP removed at exit, the pass/fail counters, ok / bad / check, and
# check_summary, which prints "N passed, N failed" (the line the test runner reads) and
# returns non-zero on any failure.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# check NAME STATUS DETAIL: ok when STATUS is 0, else a failure that shows DETAIL
check() { if [ "$2" -eq 0 ]; then ok "$1"; else bad "$1: $3"; fi; }
check_summary() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
