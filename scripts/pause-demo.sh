#!/bin/sh
# Runs `distlock demo --scenario pause` RUNS times (default 10) on SQLite locks and on Redis
# locks, and checks that every run gives the same verdicts: lock wrong (as expected), lock+fence
# correct. Needs Redis on 127.0.0.1:6379 (scripts/services.sh) and a built `distlock`
# (DISTLOCK, default target/debug/distlock).
set -eu
runs=${1:-10}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
bin=${DISTLOCK:-target/debug/distlock}
for lock in sqlite redis; do
    set --
    [ "$lock" = redis ] && set -- --lock-url redis://127.0.0.1:6379
    i=1
    while [ "$i" -le "$runs" ]; do
        if ! out=$("$bin" demo --scenario pause --requests 300 --json "$@" 2>"$err"); then
            echo "$lock run $i: distlock demo failed:" >&2
            cat "$err" >&2
            exit 1
        fi
        verdicts=$(printf '%s\n' "$out" | sed -n 's/.*"strategy":"\([^"]*\)".*"verdict":"\([^"]*\)".*/\1=\2/p' | tr '\n' ' ')
        lost=$(printf '%s\n' "$out" | sed -n 's/.*"strategy":"lock:[^"]*".*"lost_updates":\([0-9-]*\).*/\1/p')
        echo "$lock run $i: $verdicts(plain lock: $lost updates lost)"
        case "$verdicts" in
            "lock:$lock=wrong-as-expected lock+fence:$lock=correct ") ;;
            *) echo "unexpected verdicts" >&2; exit 1 ;;
        esac
        i=$((i + 1))
    done
done
echo "all $runs runs on each lock store gave the same verdicts"
