#!/usr/bin/env python3
"""distlock's ZooKeeper lock against Apache Curator's InterProcessMutex on the same ZooKeeper, in
one run, interleaved round by round.

Workloads (issue #31's): uncontended C=1 (1 worker, 1 process), uncontended C=16 (16 workers over
4 processes, each worker its own lock), contended (16 workers over 4 processes, one lock). Both
locks are FIFO queues of sequential nodes, so under contention every cycle hands the lock to
another worker: contended cycles/s are hand-offs/s for both.

Curator: `zk-vs-curator/CuratorBench.java`, compiled with javac against Debian's Curator 5.4
jars (what `scripts/services.sh zk` installs) into ${XDG_CACHE_HOME:-~/.cache}/distlock/; its
threads in one process share one CuratorFramework (one session), as distlock's workers share one
client. distlock: `distlock bench` (a release build, `cargo build --release -p distlock-cli`).
Each run counts the cycles of its own window (after every worker's first cycle), SECONDS long:
20 s by default, because the JVM compiles Curator's hot path during the first seconds (in 5 s
runs Curator made 2,200 cycles/s at C=16, in 20 s runs 3,400-4,000).

    scripts/zk-vs-curator.py [--rounds 3] [--seconds 20] [--connect 127.0.0.1:2181]
                             [--distlock target/release/distlock]
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "scripts/zk-vs-curator/CuratorBench.java"
JARS = ["curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
        "guava", "slf4j-api", "slf4j-simple"]
WORKLOADS = [("uncontended C=1", "uncontended", 1, 1),
             ("uncontended C=16", "uncontended", 16, 4),
             ("contended", "contended", 16, 4)]


def classpath():
    jars = [f"/usr/share/java/{jar}.jar" for jar in JARS]
    missing = [jar for jar in jars if not Path(jar).exists()]
    if missing:
        sys.exit(f"Curator's jars are missing ({', '.join(missing)}): run scripts/services.sh zk")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "distlock/curator-bench"
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-d", str(cache), "-cp", ":".join(jars), str(SOURCE)], check=True)
    return ":".join([str(cache)] + jars)


def curator(cp, connect, tag, kind, workers, processes, seconds):
    # Curator's and ZooKeeper's INFO lines (and a WARN at every close) would bury the table.
    runs = [subprocess.Popen(["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp", cp,
                              "CuratorBench", connect, f"/curator-bench/{tag}",
                              str(workers // processes), str(seconds), kind],
                             stdout=subprocess.PIPE, text=True)
            for _ in range(processes)]
    total = 0
    for run in runs:
        out, _ = run.communicate()
        if run.returncode != 0:
            sys.exit(f"CuratorBench failed (exit {run.returncode})")
        total += int(out.split()[-1])
    return total / seconds


def distlock(binary, connect, kind, workers, processes, seconds):
    out = subprocess.run([binary, "bench", "--url", f"zk://{connect}/distlock-bench",
                          "--workload", kind, "--workers", str(workers), "--processes",
                          str(processes), "--duration", f"{seconds}s"],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"^cycles_per_sec\s+(\S+)", out, re.M).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connect", default="127.0.0.1:2181")
    parser.add_argument("--distlock", default=str(ROOT / "target/release/distlock"))
    a = parser.parse_args()
    if not Path(a.distlock).exists():
        sys.exit(f"{a.distlock} is missing: cargo build --release -p distlock-cli")
    cp = classpath()
    print(f"cycles/s on zk://{a.connect}, {a.seconds} s a run")
    print("| round | workload | distlock | Curator | distlock / Curator |")
    print("|---:|---|---:|---:|---:|")
    for r in range(1, a.rounds + 1):
        for name, kind, workers, processes in WORKLOADS:
            theirs = curator(cp, a.connect, f"r{r}-{kind}-{workers}", kind, workers, processes,
                             a.seconds)
            ours = distlock(a.distlock, a.connect, kind, workers, processes, a.seconds)
            print(f"| {r} | {name} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
