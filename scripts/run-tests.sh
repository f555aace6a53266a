#!/usr/bin/env bash
# Runs every test binary of the workspace (all features), several at once.
#
# Most of the time of the suite is spent waiting (leases running out, sessions expiring, servers
# restarting), one case after another inside each backend's binary, and `cargo test` runs the
# binaries one after another too. Different binaries talk to different servers (or to private
# servers on their own ports), so they can wait side by side: this builds everything once, then
# runs the binaries in $DISTLOCK_TEST_LANES lanes (default 3), the longest first, each binary
# still running its own cases as it chooses. DISTLOCK_TEST_LANES=1 gives the old one-by-one run.
#
# Each binary's output goes to a log; a binary that fails has its whole log printed, and the run
# ends with a table of every binary, its verdict and its wall time, then fails if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

lanes=${DISTLOCK_TEST_LANES:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/distlock-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

command -v jq >/dev/null 2>&1 || {
  echo "run-tests: installing jq" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >/dev/null
}

echo "run-tests: building every test binary" >&2
cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >"$work/build.json"

# One line per test binary: NAME<TAB>PACKAGE_DIR<TAB>EXECUTABLE. Unit tests of a crate are named
# after the crate.
jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
       | [(.target.kind[0] as $k | if $k == "test" then .target.name else "\(.target.name) (\($k))" end),
          (.manifest_path | sub("/Cargo.toml$"; "")), .executable] | @tsv' \
  "$work/build.json" >"$work/binaries.tsv"

# The slowest binaries first (seconds of a full run on an otherwise idle 2-core machine,
# 2026-11-29), so no lane is left with a long one at the end; binaries not listed run after
# them, in name order.
weight() {
  case "$1" in
    zookeeper) echo 273 ;;
    etcd) echo 226 ;;
    torture) echo 215 ;;
    mysql) echo 196 ;;
    postgres) echo 190 ;;
    secrets) echo 134 ;;
    objectstore_s3) echo 300 ;;
    objectstore_az) echo 160 ;;
    redis_cluster) echo 131 ;;
    redis_sentinel) echo 107 ;;
    redis) echo 63 ;;
    postgres_session) echo 62 ;;
    sqlite) echo 60 ;;
    memcached) echo 53 ;;
    redlock) echo 41 ;;
    mysql_session) echo 40 ;;
    serve) echo 43 ;;
    *) echo 0 ;;
  esac
}
# Tests that start whole clusters of their own (3 JVMs, 3 etcds) and time elections: beside
# other binaries on 2 cores their workers starve (one run saw 13 holds after a leader's death
# where 20 are asked), so they run alone, after the lanes.
solo() {
  case "$1" in
    etcd_cluster | zookeeper_ensemble) return 0 ;;
    *) return 1 ;;
  esac
}
: >"$work/queue.tsv"
: >"$work/solo.tsv"
while IFS=$'\t' read -r name dir exe; do
  if solo "$name"; then
    printf '%s\t%s\t%s\n' "$name" "$dir" "$exe" >>"$work/solo.tsv"
  else
    printf '%s\t%s\t%s\t%s\n' "$(weight "$name")" "$name" "$dir" "$exe" >>"$work/queue.tsv"
  fi
done <"$work/binaries.tsv"
sort -t$'\t' -k1,1nr -k2,2 -o "$work/queue.tsv" "$work/queue.tsv"

run_one() { # run_one NAME DIR EXE: runs one binary, records verdict and time
  local name=$1 dir=$2 exe=$3 log start status
  log="$work/log.$(basename "$exe")"
  start=$(date +%s)
  set +e
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe") >"$log" 2>&1 </dev/null
  status=$?
  set -e
  local took=$(($(date +%s) - start))
  if [ $status -eq 0 ]; then
    printf 'ok\t%s\t%ss\n' "$name" "$took" >>"$work/results"
    echo "run-tests: ok     $name (${took}s)" >&2
  else
    printf 'FAILED\t%s\t%ss\n' "$name" "$took" >>"$work/results"
    echo "run-tests: FAILED $name (${took}s, exit $status); its output:" >&2
    cat "$log" >&2
    # Why, in short, for the end of the run (where a reader of only the last lines looks): the
    # test harness's "failures:" section (each failed case and its message), else the log's end.
    {
      echo "run-tests: why $name failed:"
      if grep -q '^failures:$' "$log"; then
        awk '/^failures:$/ { n++; next } n == 1' "$log" | head -n 60
      else
        tail -n 30 "$log"
      fi
    } >"$work/why.$(basename "$exe")"
  fi
}
export -f run_one
export work

echo "run-tests: [${SECONDS}s] $(wc -l <"$work/queue.tsv") test binaries in $lanes lanes" >&2
cut -f2- "$work/queue.tsv" | tr '\t\n' '\0\0' |
  xargs -0 -n 3 -P "$lanes" bash -c 'run_one "$@"' _
echo "run-tests: [${SECONDS}s] $(wc -l <"$work/solo.tsv") test binaries alone" >&2
while IFS=$'\t' read -r name dir exe; do
  run_one "$name" "$dir" "$exe"
done <"$work/solo.tsv"

# Doc tests are compiled and run by cargo itself.
doc_status=0
echo "run-tests: [${SECONDS}s] doc tests" >&2
cargo test --workspace --all-features --doc || doc_status=$?

echo
echo "run-tests: results"
sort -t$'\t' -k2 "$work/results" | while IFS=$'\t' read -r verdict name took; do
  printf '  %-7s %-32s %6s\n' "$verdict" "$name" "$took"
done
cat "$work"/why.* 2>/dev/null || true
failed=$(grep -c '^FAILED' "$work/results" || true)
if [ "$failed" -ne 0 ] || [ $doc_status -ne 0 ]; then
  echo "run-tests: $failed test binaries failed; doc tests exit $doc_status" >&2
  exit 1
fi
echo "run-tests: every test binary passed"
