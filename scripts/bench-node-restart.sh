#!/usr/bin/env bash
# Throughput per second across a node restart and an initial node restart
# under the flex read/update mix (one node group of two replicas, 1M rows):
# data node 3 is killed with SIGKILL and started again from its disk
# (`latsdb mgm 3 start`), and later restarted from an empty disk (`latsdb
# mgm 3 restart --initial`). Prints a Markdown table, the duration of each
# restart stage from the node's log, and writes
# results/node-restart-<time>.{csv,svg}.
#
#   scripts/bench-node-restart.sh [seconds=45] [kill_at=5] [start_at=8] [initial_at=25]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-45}
KILL_AT=${2:-5}
START_AT=${3:-8}
INITIAL_AT=${4:-25}
ROWS=1000000
source scripts/lib.sh
start_latsdb 2
VICTIM=$(datanode_pid 3)
load_rows $ROWS
CSV="results/node-restart-$STAMP.csv"
echo "== mixed read/update load for $SECS s: SIGKILL of data node 3 at second $KILL_AT, mgm 3 start at $START_AT, mgm 3 restart --initial at $INITIAL_AT"
start_mixed_timeline $ROWS "$SECS" "$CSV"
T0=$(date +%s.%N)
at() { sleep "$(python3 -c "import time,sys; print(max(0, $T0 + $1 - time.time()))")"; }
at "$KILL_AT"; kill -9 "$VICTIM"; echo "killed data node 3"
at "$START_AT"; $BIN mgm --mgmd "$MGMD" 3 start --timeout 300
at "$INITIAL_AT"; $BIN mgm --mgmd "$MGMD" 3 restart --initial --timeout 300
wait $FLEX || true   # failed operations around the kill make flex exit non-zero
grep -E "mixed|failed:" "$WORK/mixed.txt" || true
echo
echo "restart stages (data node 3):"
grep -E "restore stage done|shard 3.0: |copy stage done|checkpoint stage done|admitted to view" "$WORK/latsdb/datanode-3.log" | tail -n +4 | sed 's/^/    /'
python3 scripts/timeline.py "$CSV" mixed "results/node-restart-$STAMP.svg" \
  "latsdb flex mixed read/update, 2 replicas: ops/s per second across node restarts of data node 3" \
  "$KILL_AT=SIGKILL of data node 3" "$START_AT=mgm 3 start (node restart)" "$INITIAL_AT=mgm 3 restart --initial"
