#!/usr/bin/env bash
# Installs what building and testing every feature needs beyond cargo: the etcd backend's client
# (etcd-client) runs protoc at build time and includes protobuf's well-known types; the
# `distlock serve` test drives headless Chromium (scripts/install-chromium.sh).
# Idempotent; CI runs it before clippy, scripts/test.sh before the tests.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v protoc >/dev/null 2>&1 || [ ! -f /usr/include/google/protobuf/descriptor.proto ]; then
  echo "build-deps: installing protobuf-compiler libprotobuf-dev" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null
fi
./install-chromium.sh
