#!/usr/bin/env bash
# The long run behind docs/torture.md's failover table: `distlock torture --faults failover` on
# Redis behind Sentinel, N failovers (default 100) per setting of wait_replicas (0, 1, 2), each
# on a private group of its own (a master, two replicas, three Sentinels, on free loopback
# ports, started here and stopped at the end): the failover fault kills masters, so it never
# runs on the shared group of scripts/services.sh.
#
#   scripts/torture-failover.sh [FAILOVERS] [LEASE] [SETTINGS]
#                       e.g. scripts/torture-failover.sh 100 2s "0 1 2" (the default)
#
# The three settings run side by side (each group is its own). Uses DISTLOCK (default
# target/debug/distlock, built if missing); prints each run's table and exits 1 if a cell failed.
set -uo pipefail
cd "$(dirname "$0")/.."
failovers=${1:-100}
lease=${2:-2s}
settings=(${3:-0 1 2})
bin=${DISTLOCK:-target/debug/distlock}
[ -x "$bin" ] || cargo build -p distlock-cli || exit 1
command -v redis-server >/dev/null || scripts/services.sh sentinel >&2 || exit 1

work=$(mktemp -d "${TMPDIR:-/tmp}/distlock-failover.XXXXXX")
: >"$work/ports"
cleanup() {
  # Every node and Sentinel of the groups, by port (start_group runs in a subshell, so the
  # ports are in a file): the torture starts killed nodes again itself, on the same ports.
  local port
  while read -r port; do
    redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done <"$work/ports"
  rm -rf "$work"
}
# KEEP=1 leaves the groups running (to look at them after a failed run).
[ -z "${KEEP:-}" ] && trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_group NAME: starts a group under $work/NAME; prints its URL.
start_group() {
  local name=$1 dir=$work/$1 master port i data=() sentinels=()
  mkdir -p "$dir"
  for i in 0 1 2; do data+=("$(free_port)"); done
  master=${data[0]}
  for port in "${data[@]}"; do
    mkdir -p "$dir/node-$port"
    local follow=()
    [ "$port" != "$master" ] && follow=(--replicaof 127.0.0.1 "$master")
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/node-$port" --save '' \
      --appendonly no "${follow[@]}" --daemonize yes --logfile "$dir/node-$port/redis.log"
    echo "$port" >>"$work/ports"
  done
  for i in 0 1 2; do
    port=$(free_port)
    mkdir -p "$dir/sentinel-$port"
    printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir/sentinel-$port" \
      "sentinel monitor distlock 127.0.0.1 $master 2" \
      "sentinel down-after-milliseconds distlock 1500" \
      "sentinel failover-timeout distlock 5000" \
      "sentinel parallel-syncs distlock 2" >"$dir/sentinel-$port/sentinel.conf"
    redis-server "$dir/sentinel-$port/sentinel.conf" --sentinel --daemonize yes \
      --logfile "$dir/sentinel-$port/sentinel.log"
    sentinels+=("127.0.0.1:$port")
    echo "$port" >>"$work/ports"
  done
  # Ready once every Sentinel knows both replicas and the two other Sentinels.
  local deadline=$((SECONDS + 60)) ready
  while :; do
    ready=1
    for s in "${sentinels[@]}"; do
      redis-cli -h 127.0.0.1 -p "${s#*:}" sentinel master distlock 2>/dev/null |
        awk 'p == "num-slaves" { n = $0 } p == "num-other-sentinels" { o = $0 } { p = $0 }
             END { exit !(n == 2 && o == 2) }' || ready=0
    done
    [ $ready = 1 ] && break
    [ $SECONDS -gt $deadline ] && { echo "group $name not ready in 60 s" >&2; return 1; }
    sleep 0.5
  done
  local IFS=,
  echo "redis-sentinel://${sentinels[*]}/distlock"
}

pids=()
for n in "${settings[@]}"; do
  url=$(start_group "wait$n") || exit 1
  [ "$n" != 0 ] && url="$url?wait_replicas=$n&wait_timeout=300ms"
  echo "wait_replicas=$n: $url"
  "$bin" torture --url "$url" --faults failover --failovers "$failovers" --lease "$lease" \
    >"$work/wait$n.out" 2>"$work/wait$n.err" &
  pids+=($!)
done
failed=0
for i in "${!settings[@]}"; do
  n=${settings[$i]}
  wait "${pids[$i]}" || failed=1
  echo
  echo "== wait_replicas=$n"
  cat "$work/wait$n.out"
  [ -s "$work/wait$n.err" ] && tail -5 "$work/wait$n.err"
done
exit $failed
