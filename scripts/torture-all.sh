#!/usr/bin/env bash
# The long run behind the README's torture tables: `distlock torture` on every store that
# scripts/services.sh starts, each with every fault that applies to it, DURATION per fault
# (default 30s), lease 1 s, 4 workers over 2 processes; then a "session store partitioned" run
# on ZooKeeper and etcd (half the processes cut off for 6 s, twice their 3 s sessions).
#
#   scripts/torture-all.sh [DURATION]        e.g. scripts/torture-all.sh 60s
#
# Uses DISTLOCK (default target/release/distlock, built with the etcd feature if missing),
# starts the servers it needs, prints one table per store and a closing line per store, and
# exits 1 if any cell failed. The faults that need a server of the run's own (restart, clock
# jumps) are in the test suite (crates/distlock-cli/tests/torture.rs), not here.
set -uo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30s}
bin=${DISTLOCK:-target/release/distlock}
if [ ! -x "$bin" ]; then
  scripts/build-deps.sh
  cargo build --release -p distlock-cli --features etcd
fi
scripts/services.sh redis redlock pg mysql etcd zk memcached >&2 || exit 1

redlock=redlock://127.0.0.1:6390,127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394
pg=postgres://postgres@127.0.0.1:5432/distlock_test
my=mysql://root@127.0.0.1:3306/distlock_test
sqlite_dir=$(mktemp -d)
trap 'rm -rf "$sqlite_dir"' EXIT

# store URL | faults | extra arguments
runs=(
  "sqlite:$sqlite_dir/torture.db|kill,stop|"
  "redis://127.0.0.1:6379|kill,stop,delay,blackhole,reset|"
  "$redlock|kill,stop,delay,blackhole,reset,minority|"
  "$pg|kill,stop,delay,blackhole,reset,session-kill|"
  "$pg?lock=session|kill,stop,delay,blackhole,reset,session-kill|"
  "$my|kill,stop,delay,blackhole,reset,session-kill|"
  "$my?lock=session|kill,stop,delay,blackhole,reset,session-kill|"
  "memcached://127.0.0.1:11211|kill,stop,delay,blackhole,reset|"
  "zk://127.0.0.1:2181/torture?timeout=3s|kill,stop,delay,blackhole,reset|--stop-for 6s"
  "etcd://127.0.0.1:2379?ttl=3|kill,stop,delay,blackhole,reset|--stop-for 5s"
  "zk://127.0.0.1:2181/torture?timeout=3s|blackhole|--lease 3s"
  "etcd://127.0.0.1:2379?ttl=3|blackhole|--lease 3s"
)

failed=0
for run in "${runs[@]}"; do
  IFS='|' read -r url faults extra <<<"$run"
  echo
  # shellcheck disable=SC2086 # extra is a list of arguments
  if "$bin" torture --url "$url" --faults "$faults" --duration "$duration" $extra; then
    echo "torture-all: ok     $url ($faults${extra:+; $extra})"
  else
    echo "torture-all: FAILED $url ($faults${extra:+; $extra})"
    failed=1
  fi
done
exit $failed
