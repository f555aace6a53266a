#!/usr/bin/env bash
# Makes sure every server the test suite needs is installed and answering on 127.0.0.1.
# Idempotent: a server that already answers is left alone; a missing package is installed with
# apt-get; a server that is installed but down is started in the background (no systemd).
#
#   scripts/services.sh            all servers
#   scripts/services.sh redis pg   only these (names: redis, redlock, sentinel, cluster, pg, mysql,
#                                  etcd, zk, memcached, s3, az)
#   scripts/services.sh url s3     prints the URL of a local server (s3, az) and starts nothing
#
# State of servers started here (data dirs, logs, pids) lives under $DISTLOCK_SERVICES_DIR
# (default /var/tmp/distlock-services); servers that are not Debian packages (RustFS, Azurite)
# are installed once per machine under $DISTLOCK_TOOLS_DIR (default /var/tmp/distlock-tools).
set -euo pipefail

D=${DISTLOCK_SERVICES_DIR:-/var/tmp/distlock-services}
TOOLS=${DISTLOCK_TOOLS_DIR:-/var/tmp/distlock-tools}
PG_MAX_CONNECTIONS=400

log() { printf 'services: %s\n' "$*" >&2; }

# The object stores' fixed test credentials. S3: RustFS takes whatever it is started with.
# Azure: Azurite's account devstoreaccount1 and its key, both public and documented.
OBJ_BUCKET=distlock
S3_PORT=9000
S3_REGION=us-east-1
S3_ACCESS_KEY=distlock
S3_SECRET_KEY=distlock-secret
AZ_PORT=10000
AZ_ACCOUNT=devstoreaccount1
AZ_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
AZ_ENDPOINT=http://127.0.0.1:$AZ_PORT/$AZ_ACCOUNT

# %-encodes a URL component (the Azure key holds / + =).
urlenc() {
  local s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case "$c" in
      [A-Za-z0-9._~-]) out+=$c ;;
      *) printf -v c '%%%02X' "'$c"; out+=$c ;;
    esac
  done
  printf '%s' "$out"
}

if [ "${1:-}" = url ]; then
  case "${2:-}" in
    s3) echo "s3://$(urlenc "$S3_ACCESS_KEY"):$(urlenc "$S3_SECRET_KEY")@$OBJ_BUCKET?endpoint=http://127.0.0.1:$S3_PORT&region=$S3_REGION" ;;
    az) echo "az://$(urlenc "$AZ_ACCOUNT"):$(urlenc "$AZ_KEY")@$OBJ_BUCKET?endpoint=$AZ_ENDPOINT" ;;
    *) log "usage: services.sh url s3|az"; exit 2 ;;
  esac
  exit 0
fi

mkdir -p "$D"
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(redis redlock sentinel cluster pg mysql etcd zk memcached s3 az)

apt_updated=0
need_pkg() { # need_pkg COMMAND|/FILE PACKAGE...
  case "$1" in
    /*) [ -e "$1" ] && return 0 ;;
    *) command -v "$1" >/dev/null 2>&1 && return 0 ;;
  esac
  shift
  if [ $apt_updated -eq 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

wait_for() { # wait_for NAME SECONDS CHECK...
  local name=$1 secs=$2
  shift 2
  for _ in $(seq 1 $((secs * 10))); do
    if "$@" >/dev/null 2>&1; then log "$name ready"; return 0; fi
    sleep 0.1
  done
  log "$name did not answer within ${secs}s"
  return 1
}

redis_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

start_redis() { # start_redis PORT [NAME]
  local port=$1 name=${2:-redis}
  redis_ping "$port" && return 0
  mkdir -p "$D/$name-$port"
  log "starting $name on 127.0.0.1:$port"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$D/$name-$port" --save '' --appendonly no \
    --daemonize yes --logfile "$D/$name-$port/redis.log" --pidfile "$D/$name-$port/redis.pid"
  wait_for "$name:$port" 10 redis_ping "$port"
}

ensure_redis() {
  need_pkg redis-server redis-server redis-tools
  need_pkg redis-benchmark redis-tools
  # The rediss:// (TLS) test makes its own CA and certificates.
  need_pkg openssl openssl
  start_redis 6379
}

# Redlock's masters: independent redis-servers without persistence. A master that ran before and
# is down now lost every lock share it held, so starting it at once could let a second holder
# win a majority while the first still holds its lease (the Redlock docs' "delayed restart"
# remedy): it stays down for the longest lease in use, $DISTLOCK_REDLOCK_RESTART_DELAY seconds
# (default 30, distlock's default lease), before it is started again.
REDLOCK_PORTS=(6390 6391 6392 6393 6394)

ensure_redlock() {
  need_pkg redis-server redis-server redis-tools
  local port delayed=()
  for port in "${REDLOCK_PORTS[@]}"; do
    if ! redis_ping "$port" && [ -e "$D/redlock-$port/ran" ]; then delayed+=("$port"); fi
  done
  if [ ${#delayed[@]} -gt 0 ]; then
    local delay=${DISTLOCK_REDLOCK_RESTART_DELAY:-30}
    log "redlock masters ${delayed[*]} ran before and lost their locks: waiting ${delay}s (the longest lease) before starting them"
    sleep "$delay"
  fi
  for port in "${REDLOCK_PORTS[@]}"; do
    start_redis "$port" redlock
    touch "$D/redlock-$port/ran"
  done
}

# Redis behind Sentinel (redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,127.0.0.1:6412/distlock):
# a master and two replicas (6400-6402, no persistence) and three Sentinels (6410-6412, quorum
# 2), all from Debian's redis-server (its `--sentinel` mode needs no other package). A failover
# moves the master: the running Sentinels are asked where it is before a node or a Sentinel is
# started again, so what is started follows the current master.
SENTINEL_DATA_PORTS=(6400 6401 6402)
SENTINEL_PORTS=(6410 6411 6412)
SENTINEL_MASTER=distlock

redis_role() { redis-cli -h 127.0.0.1 -p "$1" role 2>/dev/null | head -1; }

# The master's port as a running Sentinel names it, else the running data node that says it is
# a master, else the first data port.
sentinel_master_port() {
  local port addr
  for port in "${SENTINEL_PORTS[@]}"; do
    addr=$(redis-cli -h 127.0.0.1 -p "$port" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tail -1)
    if [ -n "$addr" ] && redis_ping "$addr"; then echo "$addr"; return; fi
  done
  for port in "${SENTINEL_DATA_PORTS[@]}"; do
    if [ "$(redis_role "$port")" = master ]; then echo "$port"; return; fi
  done
  echo "${SENTINEL_DATA_PORTS[0]}"
}

# Every Sentinel knows the master's two replicas and the two other Sentinels (a failover needs
# a quorum of Sentinels that know each other, and a replica to promote).
sentinel_ready() {
  local port
  for port in "${SENTINEL_PORTS[@]}"; do
    redis-cli -h 127.0.0.1 -p "$port" sentinel master "$SENTINEL_MASTER" 2>/dev/null |
      awk 'prev == "num-slaves" { s = $0 } prev == "num-other-sentinels" { o = $0 } { prev = $0 }
           END { exit !(s == 2 && o == 2) }' || return 1
  done
}

ensure_sentinel() {
  need_pkg redis-server redis-server redis-tools
  local master port dir
  master=$(sentinel_master_port)
  for port in "${SENTINEL_DATA_PORTS[@]}"; do
    redis_ping "$port" && continue
    dir="$D/sentinel-node-$port"
    mkdir -p "$dir"
    local follow=()
    [ "$port" != "$master" ] && follow=(--replicaof 127.0.0.1 "$master")
    log "starting Sentinel's redis node on 127.0.0.1:$port${follow[*]:+ (replica of $master)}"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
      "${follow[@]}" --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
    wait_for "redis node $port" 10 redis_ping "$port"
  done
  for port in "${SENTINEL_PORTS[@]}"; do
    redis_ping "$port" && continue
    dir="$D/sentinel-$port"
    mkdir -p "$dir"
    # Written afresh at each start (a Sentinel rewrites its file as it learns): it monitors the
    # current master and learns the replicas and the other Sentinels from it. A master is judged
    # down after 2 s without an answer; a failover may take 10 s before another is tried.
    printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir" \
      "sentinel monitor $SENTINEL_MASTER 127.0.0.1 $master 2" \
      "sentinel down-after-milliseconds $SENTINEL_MASTER 2000" \
      "sentinel failover-timeout $SENTINEL_MASTER 10000" \
      "sentinel parallel-syncs $SENTINEL_MASTER 2" >"$dir/sentinel.conf"
    log "starting Sentinel on 127.0.0.1:$port (master on $master)"
    redis-server "$dir/sentinel.conf" --sentinel --daemonize yes --logfile "$dir/sentinel.log" \
      --pidfile "$dir/sentinel.pid"
    wait_for "sentinel $port" 10 redis_ping "$port"
  done
  # Sentinels find each other through the master's hello channel (every 2 s).
  wait_for "sentinels (knowing the replicas and each other)" 30 sentinel_ready
}

# Redis Cluster (redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002): three masters and
# one replica each on 7000-7005 (cluster bus on port + 10000), no persistence, from Debian's
# redis-server (7.0: sharded pub/sub). A node is judged failing after 2 s without an answer, so a
# killed master's replica takes over within a few seconds. Each node keeps its cluster identity
# in its nodes.conf: a node started again rejoins the cluster (a master that was failed over
# comes back as a replica); `redis-cli --cluster create` runs only while no node has a slot.
CLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)

# Every slot served, six nodes known, three masters each with a replica.
cluster_ready() {
  local info
  info=$(redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" cluster info 2>/dev/null) || return 1
  grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_known_nodes:6' <<<"$info" &&
    grep -q '^cluster_size:3' <<<"$info" &&
    [ "$(redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" cluster nodes 2>/dev/null | grep -c ' slave ')" = 3 ]
}

ensure_cluster() {
  need_pkg redis-server redis-server redis-tools
  local port dir
  for port in "${CLUSTER_PORTS[@]}"; do
    redis_ping "$port" && continue
    dir="$D/cluster-$port"
    mkdir -p "$dir"
    log "starting Redis Cluster node on 127.0.0.1:$port"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
    wait_for "cluster node $port" 10 redis_ping "$port"
  done
  cluster_ready && { log "redis cluster ready"; return 0; }
  local assigned=0
  for port in "${CLUSTER_PORTS[@]}"; do
    if redis-cli -h 127.0.0.1 -p "$port" cluster info | grep -q '^cluster_slots_assigned:[1-9]'; then
      assigned=1
    fi
  done
  if [ $assigned -eq 0 ]; then
    log "creating the redis cluster (3 masters, 3 replicas)"
    local nodes=()
    for port in "${CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$D/cluster-create.log"
  fi
  wait_for "redis cluster (every slot served, 3 masters with a replica each)" 60 cluster_ready
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }

ensure_pg() {
  need_pkg pg_isready postgresql postgresql-client
  if ! pg_up; then
    local cluster
    cluster=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1 || true)
    if [ -n "$cluster" ] && command -v pg_ctlcluster >/dev/null; then
      log "starting the PostgreSQL $cluster cluster"
      pg_ctlcluster --skip-systemctl-redirect "$cluster" main start || true
    fi
  fi
  if ! pg_up; then
    # No usable cluster: a private one, trusting local connections.
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    if [ ! -f "$D/pg/data/PG_VERSION" ]; then
      log "initdb in $D/pg"
      mkdir -p "$D/pg" && chown postgres "$D/pg"
      runuser -u postgres -- "$bin/initdb" -D "$D/pg/data" -U postgres --auth=trust >/dev/null
    fi
    log "starting a private PostgreSQL on 127.0.0.1:5432"
    runuser -u postgres -- "$bin/pg_ctl" -D "$D/pg/data" -l "$D/pg/log" -w start \
      -o "-c listen_addresses=127.0.0.1 -c port=5432 -k $D/pg -c fsync=off -c max_connections=$PG_MAX_CONNECTIONS" >/dev/null
  fi
  wait_for postgresql 30 pg_up
  # The suite runs three test binaries at once, each with child processes and their pools (and
  # session locks hold a connection each): PostgreSQL's default 100 connections ran out on a
  # loaded run ("sorry, too many clients already"). Raised once, which needs a restart.
  local max
  max=$(psql -h 127.0.0.1 -U postgres -Atc 'show max_connections')
  if [ "$max" -lt "$PG_MAX_CONNECTIONS" ]; then
    log "PostgreSQL: max_connections $max -> $PG_MAX_CONNECTIONS (restarting it)"
    psql -h 127.0.0.1 -U postgres -qc "alter system set max_connections = $PG_MAX_CONNECTIONS"
    local data cluster
    data=$(psql -h 127.0.0.1 -U postgres -Atc 'show data_directory')
    cluster=$(pg_lsclusters -h 2>/dev/null | awk -v d="$data" '$6 == d {print $1, $2}' || true)
    if [ -n "$cluster" ]; then
      # shellcheck disable=SC2086 # "VERSION NAME", two arguments
      pg_ctlcluster --skip-systemctl-redirect $cluster restart -m fast
    else
      local bin
      bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
      runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w restart -m fast >/dev/null
    fi
    wait_for postgresql 30 pg_up
  fi
  if ! psql -h 127.0.0.1 -U postgres -Atc "select 1 from pg_database where datname='distlock_test'" | grep -q 1; then
    psql -h 127.0.0.1 -U postgres -qc 'create database distlock_test'
  fi
}

mysql_up() { mariadb -h127.0.0.1 -P3306 -uroot -e 'select 1'; }

ensure_mysql() {
  need_pkg mariadbd mariadb-server mariadb-client
  if ! mysql_up >/dev/null 2>&1; then
    log "starting mariadbd"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- \
      --bind-address=127.0.0.1 --port=3306 >/dev/null 2>&1 || true
    if ! wait_for mariadb 15 mysql_up; then
      # No usable system instance: a private one.
      if [ ! -d "$D/maria/mysql" ]; then
        mariadb-install-db --no-defaults --datadir="$D/maria" --user=root \
          --auth-root-authentication-method=normal --skip-test-db >/dev/null
      fi
      log "starting a private mariadbd on 127.0.0.1:3306"
      (mariadbd --no-defaults --datadir="$D/maria" --user=root --bind-address=127.0.0.1 \
        --port=3306 --socket="$D/mysqld.sock" --pid-file="$D/mysqld.pid" --skip-log-bin \
        --max-connections=500 >"$D/maria.log" 2>&1 &)
    fi
  fi
  wait_for mariadb 30 mysql_up
  # As for PostgreSQL (the default 151 came within reach); MariaDB takes it without a restart.
  mariadb -h127.0.0.1 -uroot -e "set global max_connections = greatest(@@max_connections, 500)"
  mariadb -h127.0.0.1 -uroot -e 'create database if not exists distlock_test'
}

etcd_up() { ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:2379 --dial-timeout=1s endpoint health; }

ensure_etcd() {
  need_pkg etcd etcd-server
  # `etcdctl lock` is the other holder of the interoperability tests.
  need_pkg etcdctl etcd-client
  # Compaction every 10 s (keeping 10 s of history): every take leaves a deleted key's
  # revisions in the lock's key range until a compaction, and each contender's range read
  # walks them, so takes slow down as history piles up. Contended bench, 16 workers × 4
  # processes, 300 s: 186 cycles/s with a minute of history, 359 with 10 s (54 averaged over
  # 560 s without compaction). distlock's watches start at the current revision, so no watch
  # ever asks for compacted history.
  if ! etcd_up >/dev/null 2>&1; then
    log "starting etcd on 127.0.0.1:2379"
    mkdir -p "$D/etcd"
    (etcd --name distlock --data-dir "$D/etcd/data" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster distlock=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
      --auto-compaction-mode periodic --auto-compaction-retention 10s \
      >"$D/etcd/etcd.log" 2>&1 &)
  fi
  wait_for etcd 30 etcd_up
}

# Answers the four-letter word $2 sent to 127.0.0.1:$1 (ZooKeeper's admin commands over TCP).
zk_4lw() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"; printf %s "$1" >&3; cat <&3' "$1" "$2"; }
# `ruok` answers imok as soon as the process listens; `srvr` tells its mode only once it serves.
zk_running() { [ "$(zk_4lw 2181 ruok 2>/dev/null)" = imok ]; }
zk_up() { zk_4lw 2181 srvr 2>/dev/null | grep -q '^Mode: '; }
# The tests count watches per node (wchp): a server started with an older configuration that
# refuses it is started again.
zk_current() { ! zk_4lw 2181 wchp 2>/dev/null | grep -q 'whitelist'; }

ensure_zk() {
  need_pkg java default-jre-headless
  need_pkg /usr/share/java/zookeeper.jar zookeeper
  # The Curator interoperability tests compile a small Java holder against Debian's Curator.
  need_pkg javac default-jdk-headless
  need_pkg /usr/share/java/curator-recipes.jar libcurator-recipes-java
  if zk_running && ! zk_current && [ -f "$D/zk/zk.pid" ]; then
    log "restarting zookeeper (its configuration predates this script's)"
    kill "$(cat "$D/zk/zk.pid")" 2>/dev/null || true
    for _ in $(seq 1 100); do zk_running || break; sleep 0.1; done
  fi
  if ! zk_running; then
    log "starting zookeeper on 127.0.0.1:2181"
    mkdir -p "$D/zk/data"
    # maxSessionTimeout: clients may ask for sessions up to 2 min (the default stops at 40 s);
    # minSessionTimeout: down to one tick (the default is two), for short crash tests.
    cat >"$D/zk/zoo.cfg" <<EOF
tickTime=2000
minSessionTimeout=2000
maxSessionTimeout=120000
dataDir=$D/zk/data
clientPort=2181
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchp,wchc
EOF
    # Debian's jar has no SLF4J binding and would log nothing: slf4j-simple (libslf4j-java, a
    # dependency of the package) sends the log to stderr.
    # Empty container nodes (lock parents) are reaped after a second, not a minute.
    (java -Xmx256m -Dznode.container.checkIntervalMs=1000 \
      -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
      org.apache.zookeeper.server.ZooKeeperServerMain "$D/zk/zoo.cfg" >"$D/zk/zk.log" 2>&1 &
      echo $! >"$D/zk/zk.pid")
  fi
  wait_for zookeeper 30 zk_up
}

# Answers memcached's `version` on 127.0.0.1:$1.
memcached_up() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"; printf "version\r\n" >&3; head -c 8 <&3' "$1" 2>/dev/null | grep -q '^VERSION'; }

ensure_memcached() {
  need_pkg memcached memcached
  if ! memcached_up 11211; then
    log "starting memcached on 127.0.0.1:11211"
    mkdir -p "$D/memcached"
    # -U 0: no UDP. 64 MB; it keeps nothing on disk (the backend's docs.md says what that costs).
    (memcached -l 127.0.0.1 -p 11211 -U 0 -u root -m 64 >"$D/memcached/memcached.log" 2>&1 &
      echo $! >"$D/memcached/memcached.pid")
  fi
  wait_for memcached 10 memcached_up 11211
}

# once NAME FILE FUNCTION: runs FUNCTION, which makes FILE, unless FILE exists; under a flock on
# $TOOLS/NAME.lock, so that two runs on one machine never install at once (the second waits,
# then finds FILE). The lock's fd is closed again before any server is started: a daemon that
# inherited it would hold the lock for its whole life.
once() {
  local name=$1 file=$2 fn=$3 lock
  [ -e "$file" ] && return 0
  mkdir -p "$TOOLS"
  exec {lock}>"$TOOLS/$name.lock"
  if ! flock -n "$lock"; then
    log "$name is being installed by another process: waiting for it"
    flock "$lock"
  fi
  # (in an `if`, not after `||`: set -e would not apply inside FUNCTION there)
  if [ ! -e "$file" ]; then "$fn"; fi
  exec {lock}>&-
  [ -e "$file" ] || { log "$name: $file is still missing after its install"; return 1; }
}

# detach DIR NAME COMMAND...: starts COMMAND in the background in its own session (no signal
# from this script's terminal or process group reaches it), stdin from /dev/null, output to
# DIR/NAME.log, none of this script's other fds open (a caller reading our output through a
# pipe would otherwise wait for the server's end), pid in DIR/NAME.pid, working directory DIR
# (for whatever it writes next to itself).
detach() {
  local dir=$1 name=$2 fd
  shift 2
  mkdir -p "$dir"
  (
    cd "$dir"
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] && exec {fd}>&-
    done
    setsid "$@" </dev/null >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
  )
}

# S3 (s3://...): RustFS, an S3-compatible server in Rust with conditional writes (If-None-Match: *
# and If-Match), on 127.0.0.1:9000, one local volume. It has no Debian package and publishes only
# its source as a crate, so it is built once per machine (about an hour of 2 cores; 1 h 37 min at nice 19 beside other builds) with the toolchain
# it needs (rustc >= 1.98.1) into $TOOLS/rustfs-VERSION/bin. opt-level 1 and no debug info
# shorten the build (the tests need correctness, not its speed); default features off drop its
# FTPS, WebDAV and GCS front ends, which the tests do not use. The multi-GB target dir is deleted
# after the install.
RUSTFS_VERSION=1.0.1
RUSTFS_TOOLCHAIN=1.98.1
RUSTFS_BIN=$TOOLS/rustfs-$RUSTFS_VERSION/bin/rustfs

build_rustfs() {
  command -v rustup >/dev/null || { log "rustfs: rustup is needed to build RustFS"; return 1; }
  need_pkg cc build-essential
  local buildlog=$TOOLS/rustfs-$RUSTFS_VERSION.build.log
  log "building RustFS $RUSTFS_VERSION: a one-time build of about an hour on 2 cores (log: $buildlog)"
  rustup toolchain install "$RUSTFS_TOOLCHAIN" --profile minimal >"$buildlog" 2>&1
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_TARGET_DIR="$TOOLS/rustfs-build" nice -n 19 \
    cargo "+$RUSTFS_TOOLCHAIN" install rustfs --version "$RUSTFS_VERSION" --locked \
    --no-default-features --root "$TOOLS/rustfs-$RUSTFS_VERSION" >>"$buildlog" 2>&1 ||
    { log "rustfs: the build failed, see $buildlog"; return 1; }
  rm -rf "$TOOLS/rustfs-build"
}

# (RustFS, as S3, wants the payload's hash header, which curl 7.88's --aws-sigv4 does not add:
# the requests here have no body, so "unsigned" is as good.)
s3_curl() { # s3_curl CURL-ARGS... (SigV4-signed with the test credentials)
  curl -sS --max-time 5 --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
# An authenticated ListBuckets answers 200: the server is up and has our credentials.
s3_up() { [ "$(s3_curl -o /dev/null -w '%{http_code}' "http://127.0.0.1:$S3_PORT/" 2>/dev/null)" = 200 ]; }

ensure_s3() {
  once "rustfs-$RUSTFS_VERSION" "$RUSTFS_BIN" build_rustfs
  if ! s3_up; then
    log "starting RustFS on 127.0.0.1:$S3_PORT"
    mkdir -p "$D/rustfs/data"
    # The web console (a second port) is off, and so is the check for a newer release (a call
    # to rustfs.com at each start). With no RUSTFS_OBS_LOG_DIRECTORY it logs to stdout.
    detach "$D/rustfs" rustfs env RUSTFS_ADDRESS="127.0.0.1:$S3_PORT" RUSTFS_VOLUMES="$D/rustfs/data" \
      RUSTFS_ACCESS_KEY="$S3_ACCESS_KEY" RUSTFS_SECRET_KEY="$S3_SECRET_KEY" RUSTFS_REGION="$S3_REGION" \
      RUSTFS_CONSOLE_ENABLE=false RUSTFS_CHECK_UPDATE=false "$RUSTFS_BIN" server
  fi
  wait_for "rustfs (s3)" 60 s3_up
  if [ "$(s3_curl -o /dev/null -w '%{http_code}' -I "http://127.0.0.1:$S3_PORT/$OBJ_BUCKET")" != 200 ]; then
    log "creating the S3 bucket $OBJ_BUCKET"
    s3_curl -f -o /dev/null -X PUT "http://127.0.0.1:$S3_PORT/$OBJ_BUCKET"
  fi
}

# Azure Blob (az://...): Azurite, Microsoft's emulator, from npm (Node 20), blob service only, on
# 127.0.0.1:10000. --skipApiVersionCheck: the SDK's x-ms-version may be newer than this Azurite
# knows; --disableTelemetry: it would otherwise report to Microsoft.
AZURITE_VERSION=3.37.0
AZURITE_DIR=$TOOLS/azurite-$AZURITE_VERSION
AZURITE_BIN=$AZURITE_DIR/node_modules/.bin/azurite-blob

install_azurite() {
  need_pkg node nodejs
  need_pkg npm npm
  log "installing Azurite $AZURITE_VERSION into $AZURITE_DIR"
  # (its package.json asks for Node >= 22; it serves the blob API on Node 20 all the same)
  npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --loglevel error "azurite@$AZURITE_VERSION" >/dev/null
}

# Any answer from a server that says it is Azurite's blob service.
az_up() { curl -s -o /dev/null -D - --max-time 2 "$AZ_ENDPOINT?comp=list" | grep -qi '^server: azurite-blob'; }

ensure_az() {
  once "azurite-$AZURITE_VERSION" "$AZURITE_BIN" install_azurite
  if ! az_up; then
    log "starting Azurite (blob) on 127.0.0.1:$AZ_PORT"
    mkdir -p "$D/azurite/data"
    detach "$D/azurite" azurite "$AZURITE_BIN" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" \
      --location "$D/azurite/data" --skipApiVersionCheck --disableTelemetry --silent
  fi
  wait_for "azurite (az)" 30 az_up
  # A signed request: this also checks the account key.
  python3 "$(dirname "$0")/azurite-container.py" "$AZ_ENDPOINT" "$AZ_ACCOUNT" "$AZ_KEY" "$OBJ_BUCKET"
}

for s in "${want[@]}"; do
  case "$s" in
    redis) ensure_redis ;;
    redlock) ensure_redlock ;;
    sentinel) ensure_sentinel ;;
    cluster) ensure_cluster ;;
    pg|postgres) ensure_pg ;;
    mysql|mariadb) ensure_mysql ;;
    etcd) ensure_etcd ;;
    zk|zookeeper) ensure_zk ;;
    memcached) ensure_memcached ;;
    s3|rustfs) ensure_s3 ;;
    az|azurite) ensure_az ;;
    *) log "unknown service $s (known: redis, redlock, sentinel, cluster, pg, mysql, etcd, zk, memcached, s3, az)"; exit 2 ;;
  esac
done
