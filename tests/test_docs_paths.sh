#!/usr/bin/env bash
# The docs name only what exists: every path in backticks in docs/*.md, README.md and
# scripts/gpu/README.md that starts with src/, include/, tests/, tools/, bench/, scripts/,
# docs/ or examples/ (brace lists like `src/base/file.{h,c}` and globs like `tok_*.c`
# expanded) must exist in the tree; Megatron-LM's own paths ("Megatron's `tools/...`") are
# not ours.
set -u
cd "$(dirname "$0")/.."
pass=0
fail=0
missing=()
for doc in docs/*.md README.md scripts/gpu/README.md; do
    [ -f "$doc" ] || continue
    while IFS= read -r path; do
        [[ $path == Megatron* ]] && continue
        path=${path#*\`}
        path=${path%\`}
        path=${path%/}
        [ -n "$path" ] || continue
        # brace lists: expand with bash
        if [[ $path == *"{"* ]]; then
            expanded=$(eval "echo $path" 2>/dev/null)
        else
            expanded=$path
        fi
        for p in $expanded; do
            if compgen -G "$p" > /dev/null; then
                pass=$((pass + 1))
            else
                fail=$((fail + 1))
                missing+=("$doc: $p")
            fi
        done
    done < <(grep -oE "(Megatron(-LM)?'s )?\`(src|include|tests|tools|bench|scripts|docs|examples)/[A-Za-z0-9_./{},*-]+\`" "$doc" | sort -u)
done
for m in "${missing[@]}"; do echo "FAIL missing: $m"; done
echo "ok   $pass paths named in the docs exist"
echo "$([ $fail -eq 0 ] && echo 1 || echo 0) passed, $([ $fail -eq 0 ] && echo 0 || echo 1) failed"
[ "$fail" -eq 0 ]
