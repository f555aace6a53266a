#!/usr/bin/env python3
"""distlock's etcd lock against Python's aetcd lock on the same etcd, in one run, interleaved.

Each round runs every workload once with aetcd, then once with `distlock bench`, so both see the
same server and the same machine load. Per run it prints the rate, and what the run cost per
cycle (acquire + release): requests by gRPC method (etcd's own counters,
`grpc_server_msg_received_total`), raft proposals and WAL fsyncs, the server's CPU (from
/proc/<etcd pid>/stat) and the clients' CPU (rusage of the processes the run started). Then a table
of the rounds and the ratios distlock / aetcd.

Workloads (the issue's): uncontended C=1 (1 worker, 1 process), uncontended C=16 (16 workers
over 4 processes, each worker its own lock), contended (16 workers over 4 processes, one lock;
hand-offs = acquisitions by another worker than the one before, in token order).

aetcd's lock, as the library does it: every try grants a new lease (TTL 60 s, its default), puts
the key if it does not exist, and release deletes it if its value is the lock's; the lease is never
revoked. Those leases are revoked here after each run's figures are taken (so the next run does not
pay for them): etcd would otherwise revoke each when it expires, one more raft write per cycle that
the figures below do not charge to aetcd.

`--etcdctl N` instead counts the requests of N runs of `etcdctl lock NAME true` (etcd's own
`concurrency.Mutex` in a new session each run) and one distlock and one aetcd cycle the same way.

    scripts/etcd-vs-aetcd.py [--rounds 3] [--seconds 5] [--private | --endpoint 127.0.0.1:2379]
    scripts/etcd-vs-aetcd.py --etcdctl 50 [--private]

`--private` starts an etcd of its own on 127.0.0.1:23790 (metrics 23791, peer 23792; the flags of
scripts/services.sh, data in a temporary directory) and stops it at the end: no other client's
requests are counted. Needs a release build (`cargo build --release -p distlock-cli --features
etcd`; `--distlock PATH` for another binary; `--distlock before=PATH --distlock after=PATH` runs
both in every round). aetcd goes into a venv under
${XDG_CACHE_HOME:-~/.cache}/distlock/aetcd-venv the first time (pip install aetcd).
"""

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "distlock"
VENV = CACHE / "aetcd-venv"
AETCD_TTL = 60

# name: (workload, workers, processes)
WORKLOADS = {
    "C=1": ("uncontended", 1, 1),
    "C=16": ("uncontended", 16, 4),
    "contended": ("contended", 16, 4),
}


def ensure_aetcd():
    """Re-runs this script under the venv's Python, made and filled the first time."""
    try:
        import aetcd  # noqa: F401

        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"installing aetcd into {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "aetcd"], check=True)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def monotonic_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# ---------------------------------------------------------------------------------------------
# aetcd's side: one child process per share of the workers.


async def aetcd_child(job):
    import aetcd

    host, port = job["endpoint"].split(":")
    client = aetcd.Client(host=host, port=int(port))
    await client.connect()
    # Every lease aetcd grants, so they can be revoked after the figures are taken.
    leases = []
    grant = client.lease

    async def lease(ttl, lease_id=None):
        granted = await grant(ttl, lease_id)
        leases.append(granted.id)
        return granted

    client.lease = lease
    start, end = job["start_ns"], job["end_ns"]

    async def worker(w):
        index = w if job["workload"] == "uncontended" else 0
        lock = client.lock(f"{job['run']}/{index}".encode(), ttl=AETCD_TTL)
        holds = []
        errors = 0
        await asyncio.sleep(max(0, start - monotonic_ns()) / 1e9)
        while True:
            asked = monotonic_ns()
            if asked >= end:
                break
            try:
                if not await lock.acquire(timeout=(end - asked) / 1e9 + 1):
                    break
                got = monotonic_ns()
                token = lock.revision
                await lock.release()
                holds.append((index, w, got, token))
            except Exception as e:  # counted, as distlock bench counts its errors
                errors += 1
                print(f"aetcd: {e!r}", file=sys.stderr)
        return holds, errors

    first = job["first_worker"]
    results = await asyncio.gather(*(worker(first + i) for i in range(job["workers"])))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "holds": [h for holds, _ in results for h in holds],
        "errors": sum(e for _, e in results),
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    print(json.dumps(out), flush=True)
    # The figures are taken; wait for the parent's word, then revoke what aetcd left.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    sem = asyncio.Semaphore(32)

    async def revoke(id):
        async with sem:
            try:
                await client.revoke_lease(id)
            except Exception:
                pass

    await asyncio.gather(*(revoke(id) for id in leases))
    await client.close()


def run_aetcd(args, server, name, run_id):
    workload, workers, processes = WORKLOADS[name]
    start = monotonic_ns() + 2_000_000_000  # time for every child to import and connect
    end = start + int(args.seconds * 1e9)
    children = []
    first = 0
    for p in range(processes):
        share = workers // processes + (1 if p < workers % processes else 0)
        job = dict(endpoint=server.endpoint, workload=workload, workers=share,
                   first_worker=first, start_ns=start, end_ns=end, run=run_id)
        first += share
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--aetcd-child", json.dumps(job)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    before = server.snapshot()
    outs = [json.loads(c.stdout.readline()) for c in children]
    after = server.snapshot()
    for c in children:
        c.stdin.close()
    for c in children:
        c.wait()
    holds = sorted((h for o in outs for h in o["holds"]), key=lambda h: (h[0], h[3]))
    last = max((h[2] for h in holds), default=end)
    seconds = (max(last, end) - start) / 1e9
    handoffs = sum(1 for a, b in zip(holds, holds[1:]) if a[0] == b[0] and a[1] != b[1])
    per_worker = {w: 0 for w in range(workers)}
    for h in holds:
        per_worker[h[1]] += 1
    return dict(
        cycles=len(holds),
        cycles_per_sec=len(holds) / seconds,
        handoffs_per_sec=handoffs / seconds,
        min_per_worker=min(per_worker.values()),
        max_per_worker=max(per_worker.values()),
        errors=sum(o["errors"] for o in outs),
        client_cpu_s=sum(o["cpu_s"] for o in outs),
        **server.delta(before, after),
    )


# ---------------------------------------------------------------------------------------------
# distlock's side: `distlock bench`.


def run_distlock(args, server, name, binary):
    workload, workers, processes = WORKLOADS[name]
    cmd = [binary, "bench", "--url", f"etcd://{server.endpoint}", "--workload", workload,
           "--workers", str(workers), "--processes", str(processes),
           "--duration", f"{args.seconds}s", "--json"]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = server.snapshot()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    after = server.snapshot()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(out)
    if report["overlaps"] or report["token_order_violations"]:
        sys.exit(f"distlock bench reported an unsafe run: {out}")
    return dict(
        cycles=report["cycles"],
        cycles_per_sec=report["cycles_per_sec"],
        handoffs_per_sec=report["handoffs_per_sec"],
        min_per_worker=report["min_per_worker"],
        max_per_worker=report["max_per_worker"],
        errors=report["errors"],
        client_cpu_s=(used.ru_utime + used.ru_stime) - (usage.ru_utime + usage.ru_stime),
        **server.delta(before, after),
    )


# ---------------------------------------------------------------------------------------------
# The server: its counters and its CPU.

COUNTER = re.compile(r'^grpc_server_msg_received_total\{grpc_method="(\w+)".*\} (\S+)$')
SERVER_COUNTERS = {
    "etcd_server_proposals_committed_total": "proposals",
    "etcd_disk_wal_fsync_duration_seconds_count": "fsyncs",
    "etcd_disk_wal_fsync_duration_seconds_sum": "fsync_s",
}


class Server:
    def __init__(self, endpoint, metrics, pid, stop=None):
        self.endpoint, self.metrics, self.pid, self.stop = endpoint, metrics, pid, stop
        self.idle = 0.0

    def snapshot(self):
        counts = {}
        for line in urllib.request.urlopen(self.metrics, timeout=5).read().decode().splitlines():
            m = COUNTER.match(line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + float(m.group(2))
            else:
                name, _, value = line.partition(" ")
                if name in SERVER_COUNTERS:
                    counts[SERVER_COUNTERS[name]] = float(value)
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        counts["server_cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        counts["wall_s"] = time.monotonic()
        return counts

    def measure_idle(self, seconds=3):
        """The server's CPU per second with no client of ours: subtracted from every run."""
        before = self.snapshot()
        time.sleep(seconds)
        after = self.snapshot()
        self.idle = (after["server_cpu_s"] - before["server_cpu_s"]) / (
            after["wall_s"] - before["wall_s"])

    def delta(self, before, after):
        d = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        d["server_cpu_s"] = d.get("server_cpu_s", 0) - self.idle * d["wall_s"]
        return {"server": d}


def listening_pid(port):
    """The pid of the process listening on 127.0.0.1:port (for its CPU time)."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    if not m:
        sys.exit(f"no process found listening on port {port} (ss -ltnp needs root)")
    return int(m.group(1))


def private_etcd():
    data = tempfile.mkdtemp(prefix="etcd-vs-aetcd-")
    log = open(Path(data) / "etcd.log", "w")
    proc = subprocess.Popen(
        ["etcd", "--name", "bench", "--data-dir", f"{data}/data",
         "--listen-client-urls", "http://127.0.0.1:23790",
         "--advertise-client-urls", "http://127.0.0.1:23790",
         "--listen-peer-urls", "http://127.0.0.1:23792",
         "--initial-advertise-peer-urls", "http://127.0.0.1:23792",
         "--initial-cluster", "bench=http://127.0.0.1:23792",
         "--listen-metrics-urls", "http://127.0.0.1:23791",
         "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "10s"],
        stdout=log, stderr=log)

    def stop():
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)

    for _ in range(100):
        try:
            urllib.request.urlopen("http://127.0.0.1:23791/health", timeout=1)
            return Server("127.0.0.1:23790", "http://127.0.0.1:23791/metrics", proc.pid, stop)
        except Exception:
            time.sleep(0.1)
    stop()
    sys.exit("the private etcd did not come up")


# ---------------------------------------------------------------------------------------------
# Reports.

KV_METHODS = ["Txn", "Range", "DeleteRange", "Put", "LeaseGrant", "LeaseRevoke", "LeaseKeepAlive",
              "Watch", "Status"]


def per_cycle(r):
    s, n = r["server"], max(r["cycles"], 1)
    requests = {m: s[m] / n for m in KV_METHODS if s.get(m)}
    return dict(
        requests=requests,
        proposals=s.get("proposals", 0) / n,
        fsyncs=s.get("fsyncs", 0) / n,
        fsync_us=s.get("fsync_s", 0) / n * 1e6,
        server_us=s.get("server_cpu_s", 0) / n * 1e6,
        client_us=r["client_cpu_s"] / n * 1e6,
    )


def describe(who, name, r):
    c = per_cycle(r)
    # Requests of the session's upkeep (a grant, keep-alives, connecting) round to 0.00.
    reqs = " ".join(f"{m} {v:.2f}" for m, v in c["requests"].items() if v >= 0.005)
    return (f"{who:9} {name:9} {r['cycles_per_sec']:7.0f} cycles/s {r['handoffs_per_sec']:6.0f} "
            f"hand-offs/s  min/max per worker {r['min_per_worker']}/{r['max_per_worker']}  "
            f"errors {r['errors']}  load {os.getloadavg()[0]:.1f}\n{'':19} per cycle: {reqs}; proposals {c['proposals']:.2f}, "
            f"fsyncs {c['fsyncs']:.2f} ({c['fsync_us']:.0f} µs); server CPU {c['server_us']:.0f} µs, clients' CPU "
            f"{c['client_us']:.0f} µs")


def spread(values, fmt="{:.0f}"):
    return "–".join(fmt.format(v) for v in (min(values), max(values)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--endpoint", default="127.0.0.1:2379")
    p.add_argument("--metrics", default="http://127.0.0.1:2381/metrics")
    p.add_argument("--private", action="store_true", help="start a private etcd (see above)")
    p.add_argument("--distlock", action="append", metavar="[NAME=]PATH",
                   help="the distlock binary (default target/release/distlock); given more than "
                   "once, e.g. before=PATH after=PATH, each runs in every round")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--only", choices=["aetcd", "distlock"], help="run one side only")
    p.add_argument("--etcdctl", type=int, metavar="N", help="count requests per cycle instead")
    p.add_argument("--aetcd-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    binaries = args.distlock or [str(ROOT / "target/release/distlock")]
    args.binaries = dict(b.split("=", 1) if "=" in b else ("distlock", b) for b in binaries)
    ensure_aetcd()
    if args.aetcd_child:
        asyncio.run(aetcd_child(json.loads(args.aetcd_child)))
        return
    if args.private:
        server = private_etcd()
    else:
        server = Server(args.endpoint, args.metrics, listening_pid(args.endpoint.split(":")[1]))
    try:
        server.measure_idle()
        if args.etcdctl:
            count_requests(args, server)
        else:
            compare(args, server)
    finally:
        if server.stop:
            server.stop()


def compare(args, server):
    names = args.workloads.split(",")
    sides = ([] if args.only == "distlock" else ["aetcd"]) + (
        [] if args.only == "aetcd" else list(args.binaries))
    results = {(s, n): [] for s in sides for n in names}
    print(f"etcd at {server.endpoint} (pid {server.pid}, idle {server.idle * 1e3:.0f} ms CPU/s, "
          f"subtracted); {args.rounds} rounds of {args.seconds:g} s; load "
          f"{Path('/proc/loadavg').read_text().strip()}", flush=True)
    for round_no in range(args.rounds):
        for name in names:
            for side in sides:
                run_id = f"bench-{side}-{os.getpid()}-{round_no}-{name}"
                r = (run_aetcd(args, server, name, run_id) if side == "aetcd"
                     else run_distlock(args, server, name, args.binaries[side]))
                results[(side, name)].append(r)
                print(describe(side, name, r), flush=True)
    print(f"\nload after: {Path('/proc/loadavg').read_text().strip()}\n")
    print("| workload | side | cycles/s | hand-offs/s | min/max per worker | requests per cycle "
          "| proposals, fsyncs (µs) per cycle | server CPU µs/cycle | clients' CPU µs/cycle |")
    print("|---|---|---:|---:|---|---|---|---:|---:|")
    for name in names:
        for side in sides:
            rs = results[(side, name)]
            cs = [per_cycle(r) for r in rs]
            reqs = {}
            for c in cs:
                for m, v in c["requests"].items():
                    reqs.setdefault(m, []).append(v)
            req = ", ".join(f"{m} {spread(v, '{:.2f}')}" for m, v in reqs.items()
                            if max(v) >= 0.005)
            rates = " / ".join("%.0f" % r["cycles_per_sec"] for r in rs)
            handoffs = " / ".join("%.0f" % r["handoffs_per_sec"] for r in rs)
            fairness = " / ".join("%d/%d" % (r["min_per_worker"], r["max_per_worker"]) for r in rs)
            disk = (f"{spread([c['proposals'] for c in cs], '{:.2f}')}, "
                    f"{spread([c['fsyncs'] for c in cs], '{:.2f}')} "
                    f"({spread([c['fsync_us'] for c in cs])})")
            print(f"| {name} | {side} | {rates} | {handoffs} | {fairness} | {req} | {disk} "
                  f"| {spread([c['server_us'] for c in cs])} "
                  f"| {spread([c['client_us'] for c in cs])} |")
    if "aetcd" in sides:
        print()
        for side in sides[1:]:
            for name in names:
                key = "handoffs_per_sec" if name == "contended" else "cycles_per_sec"
                ratios = [d[key] / a[key] for a, d in
                          zip(results[("aetcd", name)], results[(side, name)]) if a[key]]
                print(f"{side} / aetcd, {name} ({key}), per round: "
                      + " ".join(f"{x:.2f}" for x in ratios))


def count_requests(args, server):
    """Requests per cycle of `etcdctl lock`, distlock and aetcd, one client at a time."""
    n = args.etcdctl
    before = server.snapshot()
    for i in range(n):
        subprocess.run(["etcdctl", f"--endpoints={server.endpoint}", "lock",
                        f"count-etcdctl-{os.getpid()}", "true"], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "ETCDCTL_API": "3"})
    after = server.snapshot()
    r = dict(cycles=n, cycles_per_sec=0, handoffs_per_sec=0, min_per_worker=0,
             max_per_worker=0, errors=0, client_cpu_s=0, **server.delta(before, after))
    print(describe("etcdctl", f"{n} runs", r).replace("clients' CPU 0 µs", "(a process per run)"))
    args.seconds = 2
    for side in ["aetcd", *args.binaries]:
        r = (run_aetcd(args, server, "C=1", f"count-{side}-{os.getpid()}") if side == "aetcd"
             else run_distlock(args, server, "C=1", args.binaries[side]))
        print(describe(side, "C=1", r))


if __name__ == "__main__":
    main()
