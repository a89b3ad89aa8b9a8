#!/usr/bin/env bash
# Every MC_* environment variable the code, the tests or the scripts read is in the one
# table of docs/ENVIRONMENT.md, and that table lists nothing that is read nowhere.
set -u
cd "$(dirname "$0")/.."
# C sources: MC_ names in string literals are environment variables (getenv, setenv, the
# small env helpers); shell scripts and the Makefile: ${MC_NAME...}, $MC_NAME, MC_NAME=...;
# CMake: $ENV{MC_NAME}.
used=$( (grep -rhoE '"MC_[A-Z0-9_]+"' src tests tools examples --include=*.c --include=*.h --include=*.cu | tr -d '"'
         grep -rhoE '\$\{?MC_[A-Z0-9_]+|MC_[A-Z0-9_]+=' scripts bench tests Makefile .ci \
             --include=*.sh --include=Makefile --include=run --exclude=test_env_documented.sh 2>/dev/null |
             grep -oE 'MC_[A-Z0-9_]+'
         grep -hoE 'ENV\{MC_[A-Z0-9_]+' CMakeLists.txt | grep -oE 'MC_[A-Z0-9_]+') | sort -u)
documented=$(awk -F'|' '/^\| `MC_/ {print $2}' docs/ENVIRONMENT.md | grep -oE 'MC_[A-Z0-9_]+' | sort -u)
fail=0
for v in $used; do
    grep -qx "$v" <<< "$documented" || { echo "FAIL $v is read but not in docs/ENVIRONMENT.md"; fail=$((fail + 1)); }
done
for v in $documented; do
    grep -qx "$v" <<< "$used" || { echo "FAIL $v is in docs/ENVIRONMENT.md but nothing reads it"; fail=$((fail + 1)); }
done
echo "ok   $(wc -w <<< "$used") variables read, all documented"
echo "$([ $fail -eq 0 ] && echo 1 || echo 0) passed, $([ $fail -eq 0 ] && echo 0 || echo 1) failed"
[ "$fail" -eq 0 ]
