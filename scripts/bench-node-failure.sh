#!/usr/bin/env bash
# Throughput per second before, during and after a SIGKILL of one data node
# (one node group of two replicas) under the flex read/update mix. Prints a
# Markdown table and writes results/node-failure-<time>.{csv,svg}.
#
#   scripts/bench-node-failure.sh [seconds=20] [kill_at=8]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
KILL_AT=${2:-8}
ROWS=1000000
source scripts/lib.sh
start_latsdb 2
VICTIM=$(datanode_pid 3)
load_rows $ROWS
CSV="results/node-failure-$STAMP.csv"
echo "== mixed read/update load for $SECS s; data node 3 (pid $VICTIM) is killed at second $KILL_AT"
start_mixed_timeline $ROWS "$SECS" "$CSV"
sleep "$KILL_AT"
kill -9 "$VICTIM"
echo "killed data node 3 at $(date +%T)"
wait $FLEX || true   # failed operations around the kill make flex exit non-zero
python3 scripts/timeline.py "$CSV" mixed "results/node-failure-$STAMP.svg" \
  "latsdb flex mixed read/update, 2 replicas: ops/s per second (data node 3 killed at $KILL_AT s)" \
  "$KILL_AT=SIGKILL of data node 3 during this second"
