#!/usr/bin/env python3
"""What one uncontended lock cycle (take + release) costs a Redis server, in instructions.

Counts with valgrind's callgrind, so the figures repeat whatever else the machine is doing (a
shared 2-core machine makes timings too noisy to compare cycles that differ by a few µs). Each
variant runs on a private `redis-server` under callgrind: once with no cycles (start-up and
shutdown) and once with N cycles over 50 keys, pipelined 100 at a time; the difference over N is
the cost of one cycle, parsing and replies included.

Variants:
  distlock      the Redis backend's acquire.lua and release.lua as distlock sends them (EVALSHA,
                prelude.lua's constants and the helpers each calls in front, with a holder record)
  every-helper  the same with all of prelude.lua in front of each (distlock before it left out
                the helpers a script does not call)
  unfenced      rslock's cycle: SET key owner NX PX, then its compare-and-delete script
  lean-script   a fenced take reduced to GET, INCR, SET in a script; release GET, DEL
  functions     distlock's scripts registered once as Redis functions (FCALL): the prelude's
                helpers are defined at load, not at every call
  multi-take    a fenced take without Lua: MULTI, SET NX PX GET, INCR, EXEC (the holding could
                then not carry its token); lean release script

    scripts/redis-cycle-cost.py [N]        (default N = 3000; needs valgrind and redis-server)
"""

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "crates/distlock/src/backends/redis/scripts"
OWNER = "0123456789abcdef0123456789abcdef"
RECORD = "pid 1234 host bench"

LEAN_TAKE = """local held = redis.call('GET', KEYS[1])
if not held then
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
  return {1, token}
end
return {0, redis.call('PTTL', KEYS[1])}"""
LEAN_RELEASE = """local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0"""
UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


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
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                self.sock = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
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


def with_prelude(body, every_helper=False):
    """`body` behind prelude.lua, as `with_helpers` in scripts.rs puts it: the prelude's head and
    only the helpers the body calls (or that those call), unless `every_helper`."""
    head, *helpers = (SCRIPTS / "prelude.lua").read_text().split("\nlocal function ")
    names = [part.split("(")[0].strip() for part in helpers]
    wanted = [every_helper or f"{name}(" in body for name in names]
    while True:
        more = [w or any(t and f"{name}(" in part for part, t in zip(helpers, wanted))
                for name, w in zip(names, wanted)]
        if more == wanted:
            break
        wanted = more
    return "".join([head] + ["\nlocal function " + part
                             for part, w in zip(helpers, wanted) if w]) + "\n" + body


def prepare(server, variant):
    """Loads what `variant` needs; answers (requests of one cycle on `key`, replies per cycle)."""
    acquire = (SCRIPTS / "acquire.lua").read_text()
    release = (SCRIPTS / "release.lua").read_text()

    def evalsha(take, free):
        take_sha = server.call("SCRIPT", "LOAD", take).decode()
        free_sha = server.call("SCRIPT", "LOAD", free).decode()
        return (lambda k: resp("EVALSHA", take_sha, 2, k, "{%s}:fence" % k, OWNER, 30000, RECORD)
                + resp("EVALSHA", free_sha, 1, k, "ch", OWNER, "")), 2

    if variant == "distlock":
        return evalsha(with_prelude(acquire), with_prelude(release))
    if variant == "every-helper":
        return evalsha(with_prelude(acquire, True), with_prelude(release, True))
    if variant == "lean-script":
        return evalsha(LEAN_TAKE, LEAN_RELEASE)
    if variant == "unfenced":
        sha = server.call("SCRIPT", "LOAD", UNLOCK).decode()
        return (lambda k: resp("SET", k, OWNER, "NX", "PX", 30000)
                + resp("EVALSHA", sha, 1, k, OWNER)), 2
    if variant == "functions":
        library = (f"#!lua name=distlock_cost\n{(SCRIPTS / 'prelude.lua').read_text()}\n"
                   f"redis.register_function('take', function(KEYS, ARGV)\n{acquire}\nend)\n"
                   f"redis.register_function('free', function(KEYS, ARGV)\n{release}\nend)\n")
        server.call("FUNCTION", "LOAD", library)
        return (lambda k: resp("FCALL", "take", 2, k, "{%s}:fence" % k, OWNER, 30000, RECORD)
                + resp("FCALL", "free", 1, k, "ch", OWNER, "")), 2
    if variant == "multi-take":
        sha = server.call("SCRIPT", "LOAD", LEAN_RELEASE).decode()
        return (lambda k: resp("MULTI") + resp("SET", k, OWNER + ":n", "NX", "PX", 30000, "GET")
                + resp("INCR", "{%s}:fence" % k) + resp("EXEC")
                + resp("EVALSHA", sha, 1, k, "ch", OWNER, "")), 5
    raise SystemExit(f"unknown variant {variant}")


def run(variant, cycles, port):
    server = Server(port, f"/tmp/redis-cycle-cost.{variant}.{cycles}.out")
    cycle, replies = prepare(server, variant)
    batch = 100
    for _ in range(cycles // batch):
        server.sock.sendall(b"".join(cycle(f"lock{i % 50}") for i in range(batch)))
        for _ in range(batch * replies):
            server.reply()
    return server.instructions()


def main():
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    print(f"server instructions per uncontended cycle (take + release), {cycles} cycles each")
    port = 6611
    results = {}
    for variant in ["distlock", "every-helper", "unfenced", "lean-script", "functions", "multi-take"]:
        idle = run(variant, 0, port)
        busy = run(variant, cycles, port + 1)
        port += 2
        results[variant] = (busy - idle) / cycles
        ratio = results[variant] / results["distlock"]
        print(f"  {variant:12} {results[variant]:9,.0f}   ({ratio:.2f} of distlock's)", flush=True)


if __name__ == "__main__":
    main()
