#!/usr/bin/env bash
# Installs headless Chromium (Debian's package) for tests/serve.rs, which loads the
# `distlock serve` status page in it. Idempotent: does nothing when chromium is on PATH.
# scripts/build-deps.sh runs it; the test runs it too when it finds no Chromium.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
echo "install-chromium: installing chromium (and a font for its screenshots)" >&2
export DEBIAN_FRONTEND=noninteractive
# Another script (services.sh, run-tests.sh) may hold apt's lock for a while: wait for it.
apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
