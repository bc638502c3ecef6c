#!/usr/bin/env bash
# Installs the system packages the test suite and benchmarks need, once.
# Idempotent: packages already present are skipped, apt-get update runs at
# most once per call and only when something is missing.
#
#   scripts/install-deps.sh            # what the test suite needs
#   scripts/install-deps.sh bench      # plus the peers benchmarks compare with
set -euo pipefail

want=()
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || want+=("$1"); }

# The test suite needs nothing beyond the Rust toolchain today.
if [[ "${1:-}" == "bench" ]]; then
  need redis-server
  need redis-tools
fi

if ((${#want[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  echo "installing: ${want[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust from your distribution or rustup, then run this again" >&2
  exit 1
fi
