#!/usr/bin/env bash
# The test suite, in two tiers. Both build with the `checked` profile
# (Cargo.toml): optimised, with debug assertions and overflow checks on, so
# every invariant the state machines assert is checked by every test and
# every simulator seed.
#
#   scripts/test.sh          everything (what CI runs): installs the packages
#                            the tests need (scripts/install-deps.sh), then
#                            unit tests, the sans-I/O state machines, the
#                            simulator's seed sweeps, the tidy check and the
#                            multi-process cluster tests (each starts
#                            `latsdb start` on ephemeral loopback ports and
#                            stops it again) with real clients, then a
#                            bounded fuzzing run (scripts/fuzz.sh, 60 s per
#                            target; skipped when arguments filter tests)
#   scripts/test.sh quick    the inner loop: everything but the cluster
#                            tests; installs nothing
#
# Further arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

tier=full
if [[ "${1:-}" == "quick" || "${1:-}" == "full" ]]; then
  tier=$1
  shift
fi

if [[ $tier == quick ]]; then
  # Every crate's own tests, and the latsdb crate's unit tests; not its
  # integration tests (crates/latsdb/tests), which start clusters and need
  # the packages.
  cargo test --profile checked --locked --workspace --exclude latsdb "$@"
  cargo test --profile checked --locked -p latsdb --bins "$@"
else
  scripts/install-deps.sh
  cargo test --profile checked --locked --workspace "$@"
  if [[ $# -eq 0 ]]; then
    scripts/fuzz.sh --seconds 60
  fi
fi
