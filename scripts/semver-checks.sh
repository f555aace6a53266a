#!/usr/bin/env bash
# The public API of distlock and distlock-axum against the last released one: a breaking change
# fails unless it is announced, i.e. the workspace version says so (0.1.x → 0.2.0, by cargo's
# rules, which cargo-semver-checks applies) and CHANGELOG.md tells users what to change.
#
#   scripts/semver-checks.sh      check, installing cargo-semver-checks if it is missing
#
# When a version is released, move BASELINE to its commit.
set -euo pipefail
cd "$(dirname "$0")/.."

# 0.1.0: the API before the store contract was narrowed (issue #39), which kept it unchanged.
BASELINE=552b3686babee883f1d5782fb1525ead2963e5cb
VERSION=0.51.0
CRATES=(distlock distlock-axum)

if [ "$(cargo semver-checks --version 2>/dev/null)" != "cargo-semver-checks $VERSION" ]; then
  echo "semver-checks: installing cargo-semver-checks $VERSION (once per machine, ~15 min)" >&2
  cargo install cargo-semver-checks --version "$VERSION" --locked
fi

# Both sides' rustdoc JSON is built here rather than by cargo-semver-checks, which would build
# every dependency again for each crate and side (7 min on 2 cores): one target directory serves
# both sides, and the baseline's JSON, which only a new toolchain changes, is kept per machine.
root=$PWD
target=$root/target/semver
toolchain=$(rustc -V | cksum | cut -d' ' -f1)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/distlock/semver-baseline/${BASELINE:0:12}-$toolchain

# rustdoc's JSON output is unstable on a stable toolchain; RUSTC_BOOTSTRAP is how
# cargo-semver-checks itself asks for it.
rustdoc_json() { # CRATE DEST_DIR: run in the checkout to document
  RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$target cargo rustdoc --quiet -p "$1" --all-features --lib \
    -- -Z unstable-options --output-format json
  cp "$target/doc/${1//-/_}.json" "$2/"
}

if ! [ -f "$cache/distlock_axum.json" ]; then
  echo "semver-checks: building the baseline's API ($BASELINE), once per machine and toolchain" >&2
  # A shallow clone has no baseline to compare with: deepen it rather than skip the check.
  if ! git cat-file -e "$BASELINE^{commit}" 2>/dev/null; then
    git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$BASELINE"
  fi
  checkout=$(mktemp -d)
  trap 'git worktree remove --force "$checkout" 2>/dev/null || true; rm -rf "$checkout"' EXIT
  git worktree add --quiet --detach "$checkout" "$BASELINE"
  mkdir -p "$cache.part"
  for crate in "${CRATES[@]}"; do (cd "$checkout" && rustdoc_json "$crate" "$cache.part"); done
  rm -rf "$cache" && mv "$cache.part" "$cache"
fi

current=$target/current
mkdir -p "$current"
status=0
for crate in "${CRATES[@]}"; do
  rustdoc_json "$crate" "$current"
  json=${crate//-/_}.json
  echo "semver-checks: $crate against $BASELINE" >&2
  cargo semver-checks --baseline-rustdoc "$cache/$json" --current-rustdoc "$current/$json" ||
    status=$?
done
exit $status
