#!/usr/bin/env bash
# Installs the system packages the test suite and benchmarks need, once.
# Idempotent: packages already present are skipped, apt-get update runs at
# most once per call and only when something is missing.
#
#   scripts/install-deps.sh            # what the test suite needs
#   scripts/install-deps.sh bench      # plus the peers benchmarks compare with
set -euo pipefail
cd "$(dirname "$0")/.."

want=()
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || want+=("$1"); }

# The SQL node's tests drive it with real clients.
need sysbench
need mariadb-client

if [[ "${1:-}" == "bench" ]]; then
  need redis-server
  need redis-tools
  need mariadb-server
fi

if ((${#want[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  echo "installing: ${want[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}"
fi

# Python tools of the test suite, pinned, in a virtual environment of the
# project's own (target/pyenv), so nothing depends on what is installed by hand.
VENV=target/pyenv
REQ=scripts/requirements-rest-fuzz.txt
if ! cmp -s "$REQ" "$VENV/installed-requirements.txt" 2>/dev/null; then
  command -v python3 >/dev/null 2>&1 || { echo "python3 is needed for the REST fuzz test; install it" >&2; exit 1; }
  echo "installing Python test tools into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$VENV/installed-requirements.txt"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust from your distribution or rustup, then run this again" >&2
  exit 1
fi
