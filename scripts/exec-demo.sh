#!/usr/bin/env bash
# A short demonstration on the embedded SQLite default, no server needed: 4 processes each add
# 1 to a counter file 25 times with a deliberately slow read-modify-write. Without a lock they
# lose updates; under `distlock exec` the counter ends at exactly 100.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/distlock
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
increment='v=$(cat "$1" 2>/dev/null || echo 0); sleep 0.005; echo $((v + 1)) > "$1"'

run() { # run LABEL COMMAND-PREFIX...
  local label=$1
  shift
  echo 0 >"$work/counter"
  local start=$SECONDS
  for _ in 1 2 3 4; do
    (for _ in $(seq 25); do "$@" sh -c "$increment" sh "$work/counter"; done) &
  done
  wait
  printf '%-28s counter = %3s of 100 (%ss)\n' "$label" "$(cat "$work/counter")" $((SECONDS - start))
}

run "no lock" env
run "distlock exec (sqlite)" "$bin" exec --url "sqlite:$work/locks.db" counter --
