#!/usr/bin/env bash
# The whole test suite: start (installing if needed) every server, then every test of every
# crate with every backend compiled in. Backend tests fail, naming the server, if it is down;
# DISTLOCK_SKIP=redis,postgres,… skips those backends on purpose (and the run says so).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh
scripts/services.sh
cargo test --workspace --all-features --no-fail-fast "$@"
