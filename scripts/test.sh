#!/usr/bin/env bash
# The whole test suite: unit tests, the sans-I/O state machine tests and the
# multi-process cluster tests (each starts `latsdb start` on ephemeral
# loopback ports and stops it again).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --release --locked "$@"
