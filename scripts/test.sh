#!/usr/bin/env bash
# The whole test suite: start (installing if needed) every server, then every test of every
# crate with every backend compiled in. Backend tests fail, naming the server, if it is down;
# DISTLOCK_SKIP=redis,postgres,… skips those backends on purpose (and the run says so).
#
#   scripts/test.sh               every test binary, several at once (scripts/run-tests.sh)
#   scripts/test.sh ARGS…         `cargo test --workspace --all-features ARGS…` instead, e.g.
#                                 `scripts/test.sh -p distlock --test redis`
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh
scripts/services.sh
if [ $# -eq 0 ]; then
  exec scripts/run-tests.sh
fi
cargo test --workspace --all-features --no-fail-fast "$@"
