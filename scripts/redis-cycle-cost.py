#!/usr/bin/env python3
"""What one uncontended lock cycle (take + release) costs a Redis server, in instructions.

Counts with valgrind's callgrind, so the figures repeat whatever else the machine is doing (a
shared 2-core machine makes timings too noisy to compare cycles that differ by a few µs). Each
measurement runs a private `redis-server` under callgrind twice: once with W warm-up cycles and
once with W + N; the difference over N is the cost of one cycle, parsing and replies included.

Real clients (the figure that matters): `examples/redis_vs_rslock --cycles N --library L` makes
exactly N acquire + release cycles on one key with one worker, as a user's program does
(library defaults: distlock's holder record, watchdog and re-entry; rslock's `SET NX PX` and its
compare-and-delete script). Both libraries wait for each answer, so every request is a read of
its own on the server, as in production at low load.

Layouts (synthetic requests, pipelined 100 cycles at a time over 50 keys; what a layout costs
the server, without any client):
  distlock        the Redis backend's acquire.lua and release.lua as the library sends them
                  (EVALSHA, prelude.lua's constants and the helpers each calls, a holder record)
  functions       the same scripts registered once as Redis functions (FCALL)
  token-floor     the least a take can do that draws a fencing token and stores it in the
                  holding, in a script: GET, INCR, SET … PX; release GET, compare, DEL. No clock
                  part, no holder record, no waiter mark: a floor, not a candidate
  token-floor-fn  the same as functions
  multi-take      a fenced take without Lua: MULTI, SET NX PX GET, INCR, EXEC (the holding
                  cannot carry the token the INCR draws); release as rslock's
  unfenced        rslock's cycle: SET key owner NX PX, then its compare-and-delete script

Candidates measured and not taken (docs/benchmarks.md says why):
  batched-2, batched-4
                  the library's take and release each run for 2 (4) locks in one call, as a
                  connection could coalesce the requests of concurrent tasks
  fence-by-set    the counter moved by one SET … PX … GET of the clock (a second SET only when
                  the clock is not ahead) instead of INCR and INCRBY
  take-by-set-nx  that, and the take as one SET … NX PX … GET (the token drawn before it is
                  known whether the lock is free) instead of GET, then SET

    scripts/redis-cycle-cost.py [N]     (default N = 2000; needs valgrind, redis-server, cargo)
    scripts/redis-cycle-cost.py --layouts-only [N]
"""

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "crates/distlock/src/backends/redis/scripts"
EXAMPLE = ROOT / "target/release/examples/redis_vs_rslock"
OWNER = "0123456789abcdef0123456789abcdef"
RECORD = "1234\tbenchhost\tbench"
WARM_UP = 200

TOKEN_FLOOR_TAKE = """if redis.call('GET', KEYS[1]) then
  return -1
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token"""
# Compares the owner part only (the synthetic client does not read the token back).
TOKEN_FLOOR_RELEASE = """local held = redis.call('GET', KEYS[1])
if held and string.find(held, ARGV[1], 1, true) == 1 then
  return redis.call('DEL', KEYS[1])
end
return 0"""
UNLOCK = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
          "else return 0 end")


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Server:
    """A private redis-server under callgrind, and one connection to it."""

    def __init__(self, port, out):
        self.out = out
        self.port = port
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            try:
                self.sock = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit(f"redis-server under valgrind exited ({out} writable?)")
                time.sleep(0.1)
        else:
            raise SystemExit(f"redis-server under valgrind did not start on port {port}")
        self.reader = self.sock.makefile("rb")

    def reply(self):
        line = self.reader.readline()
        kind = line[:1]
        if kind == b"-":
            raise SystemExit(f"redis-server answered {line.decode().strip()}")
        if kind == b"$":
            n = int(line[1:])
            return None if n < 0 else self.reader.read(n + 2)[:-2]
        if kind == b"*":
            n = int(line[1:])
            return None if n < 0 else [self.reply() for _ in range(n)]
        return line[1:].strip()

    def call(self, *args):
        self.sock.sendall(resp(*args))
        return self.reply()

    def instructions(self):
        try:
            self.call("SHUTDOWN", "NOSAVE")
        except (OSError, SystemExit):
            pass
        self.proc.wait()
        text = Path(self.out).read_text()
        return int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))


def with_prelude(body):
    """`body` behind prelude.lua as `with_helpers` in scripts.rs puts it: the prelude's head and
    only the helpers the body calls (or that those call)."""
    head, *helpers = (SCRIPTS / "prelude.lua").read_text().split("\nlocal function ")
    names = [part.split("(")[0].strip() for part in helpers]
    wanted = [f"{name}(" in body for name in names]
    while True:
        more = [w or any(t and f"{name}(" in part for part, t in zip(helpers, wanted))
                for name, w in zip(names, wanted)]
        if more == wanted:
            break
        wanted = more
    return "".join([head] + ["\nlocal function " + part
                             for part, w in zip(helpers, wanted) if w]) + "\n" + body


FENCE_BY_SET = """local function next_fence_by_set(key, now)
  local last = redis.call('SET', key, string.format('%d', now), 'PX', FENCE_TTL_MS, 'GET')
  if last and tonumber(last) >= now then
    local token = tonumber(last) + 1
    redis.call('SET', key, string.format('%d', token), 'PX', FENCE_TTL_MS)
    return token
  end
  return now
end
"""
# acquire.lua's take with the token drawn first and the lock set by SET NX GET; the rest of
# acquire.lua (the owner's own holding, the waiter's mark) follows as it is.
TAKE_BY_SET_NX = r"""local now = now_us()
local token = next_fence_by_set(KEYS[2], now)
local value = string.format('%s:%d\t%d\t%s\n', ARGV[1], token, math.floor(now / 1000), ARGV[3])
local held = redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2], 'GET')
if not held then
  return token
end
"""


def batched(body, keys, args, locks):
    """`body` (a script of `keys` KEYS and `args` ARGV) run for `locks` locks in one call: its
    text as a local function of its own KEYS and ARGV, called once per lock."""
    for i in range(max(keys, args), 0, -1):
        body = body.replace(f"KEYS[{i}]", f"k{i}").replace(f"ARGV[{i}]", f"a{i}")
    params = [f"k{i}" for i in range(1, keys + 1)] + [f"a{i}" for i in range(1, args + 1)]
    call = ", ".join([f"KEYS[{keys} * i + {j}]" for j in range(1, keys + 1)]
                     + [f"ARGV[{args} * i + {j}]" for j in range(1, args + 1)])
    return (f"local function one({', '.join(params)})\n{body}\nend\nlocal out = {{}}\n"
            f"for i = 0, {locks - 1} do\n  out[i + 1] = one({call})\nend\nreturn out")


def layout(server, variant):
    """Loads what `variant` needs; answers (requests of one cycle on each of a group of keys,
    replies per group, keys per group)."""
    fence = "{%s}:fence"
    if variant.startswith("batched-"):
        locks = int(variant.split("-")[1])
        take = with_prelude(batched((SCRIPTS / "acquire.lua").read_text(), 2, 3, locks))
        free = with_prelude(batched((SCRIPTS / "release.lua").read_text(), 1, 1, locks))
        take_sha = server.call("SCRIPT", "LOAD", take).decode()
        free_sha = server.call("SCRIPT", "LOAD", free).decode()

        def group(keys):
            take_keys = [x for k in keys for x in (k, fence % k)]
            return (resp("EVALSHA", take_sha, len(take_keys), *take_keys,
                         *[x for _ in keys for x in (OWNER, 30000, RECORD)])
                    + resp("EVALSHA", free_sha, len(keys), *keys, *[OWNER + ":"] * len(keys)))
        return group, 2, locks
    if variant in ("fence-by-set", "take-by-set-nx"):
        acquire = (SCRIPTS / "acquire.lua").read_text()
        if variant == "fence-by-set":
            acquire = acquire.replace("next_fence(KEYS[2], now)", "next_fence_by_set(KEYS[2], now)")
        else:
            acquire = TAKE_BY_SET_NX + acquire[acquire.index("local mine = "):]
        take = with_prelude(acquire).replace("\n" + acquire, "\n" + FENCE_BY_SET + acquire)
        take_sha = server.call("SCRIPT", "LOAD", take).decode()
        free_sha = server.call("SCRIPT", "LOAD", with_prelude(
            (SCRIPTS / "release.lua").read_text())).decode()
        return (lambda keys: resp("EVALSHA", take_sha, 2, keys[0], fence % keys[0], OWNER, 30000,
                                  RECORD)
                + resp("EVALSHA", free_sha, 1, keys[0], OWNER + ":")), 2, 1
    cycle, replies = single_layout(server, variant)
    return (lambda keys: cycle(keys[0])), replies, 1


def single_layout(server, variant):
    """The layouts of one lock per request: (requests of one cycle on `key`, replies)."""
    fence = "{%s}:fence"
    if variant in ("distlock", "functions"):
        take = with_prelude((SCRIPTS / "acquire.lua").read_text())
        free = with_prelude((SCRIPTS / "release.lua").read_text())
        take_args, free_args = [OWNER, 30000, RECORD], [OWNER + ":"]
    elif variant.startswith("token-floor"):
        take, free = TOKEN_FLOOR_TAKE, TOKEN_FLOOR_RELEASE
        take_args, free_args = [OWNER, 30000], [OWNER + ":"]
    if variant in ("distlock", "token-floor"):
        take_sha = server.call("SCRIPT", "LOAD", take).decode()
        free_sha = server.call("SCRIPT", "LOAD", free).decode()
        return (lambda k: resp("EVALSHA", take_sha, 2, k, fence % k, *take_args)
                + resp("EVALSHA", free_sha, 1, k, *free_args)), 2
    if variant in ("functions", "token-floor-fn"):
        server.call("FUNCTION", "LOAD",
                    f"#!lua name=cost\n"
                    f"redis.register_function('take', function(KEYS, ARGV)\n{take}\nend)\n"
                    f"redis.register_function('free', function(KEYS, ARGV)\n{free}\nend)\n")
        return (lambda k: resp("FCALL", "take", 2, k, fence % k, *take_args)
                + resp("FCALL", "free", 1, k, *free_args)), 2
    unlock = server.call("SCRIPT", "LOAD", UNLOCK).decode()
    if variant == "multi-take":
        value = OWNER + ":1"
        return (lambda k: resp("MULTI") + resp("SET", k, value, "NX", "PX", 30000, "GET")
                + resp("INCR", fence % k) + resp("EXEC")
                + resp("EVALSHA", unlock, 1, k, value)), 5
    if variant == "unfenced":
        return (lambda k: resp("SET", k, OWNER, "NX", "PX", 30000)
                + resp("EVALSHA", unlock, 1, k, OWNER)), 2
    raise SystemExit(f"unknown variant {variant}")


PORT = [6611]


def server(tag, cycles):
    PORT[0] += 1
    return Server(PORT[0], f"/tmp/redis-cycle-cost.{tag}.{cycles}.out")


def layout_run(variant, cycles):
    srv = server(variant, cycles)
    cycle, replies, locks = layout(srv, variant)
    batch = 100
    for _ in range(cycles // batch):
        srv.sock.sendall(b"".join(cycle([f"lock{(i + j) % 50}" for j in range(locks)])
                                  for i in range(0, batch, locks)))
        for _ in range(batch // locks * replies):
            srv.reply()
    return srv.instructions()


def client_run(library, cycles):
    srv = server(library, cycles)
    subprocess.run([str(EXAMPLE), "--url", f"redis://127.0.0.1:{srv.port}", "--cycles",
                    str(cycles), "--library", library], check=True, stdout=subprocess.DEVNULL)
    return srv.instructions()


def per_cycle(run, what, n):
    return (run(what, WARM_UP + n) - run(what, WARM_UP)) / n


def main():
    args = sys.argv[1:]
    layouts_only = "--layouts-only" in args
    args = [a for a in args if a != "--layouts-only"]
    n = int(args[0]) if args else 2000
    if not layouts_only:
        subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "distlock", "--features",
                        "redis", "--example", "redis_vs_rslock"], check=True, cwd=ROOT)
        print(f"server instructions per uncontended cycle, real clients, {n} cycles, one worker")
        real = {lib: per_cycle(client_run, lib, n) for lib in ["rslock", "distlock"]}
        for lib, cost in real.items():
            print(f"  {lib:14} {cost:9,.0f}   ({cost / real['rslock']:.2f}x rslock's)",
                  flush=True)
    print(f"server instructions per uncontended cycle by layout, {n} pipelined cycles")
    results = {}
    for variant in ["unfenced", "distlock", "functions", "token-floor", "token-floor-fn",
                    "multi-take", "batched-2", "batched-4", "fence-by-set", "take-by-set-nx"]:
        results[variant] = per_cycle(layout_run, variant, n)
        print(f"  {variant:14} {results[variant]:9,.0f}   "
              f"({results[variant] / results['unfenced']:.2f}x the unfenced cycle)", flush=True)


if __name__ == "__main__":
    main()
