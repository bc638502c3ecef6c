#!/usr/bin/env bash
# Compares two latsdb builds side by side on YCSB through the SQL node: for
# each round, a fresh `latsdb start` (2 replicas) of each build in turn loads
# the records through the SQL node and runs the workloads, and the script
# prints each one's ops/s and the SQL node's and data nodes' CPU time per
# operation.
#
#   scripts/ab-ycsb.sh OLD_BINARY NEW_BINARY
#   env: ROUNDS (3), SECS (15 s per workload), WORKLOADS ("a f"), RECORDS
#        (100000), THREADS (16), ORDER ("old new")
#
# Build the old one from a worktree, e.g.
#   git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p latsdb)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
OLD=$(realpath "$1"); NEW=$(realpath "$2")
cd "$(dirname "$0")/.."
source scripts/lib.sh
RECORDS=${RECORDS:-100000}
one_round() {
  start_latsdb 2 > /dev/null
  common=(--mgmd "$MGMD" --db "mysql://root@$SQL" --table usertable_sql -p recordcount="$RECORDS" -p operationcount=0 --threads "${THREADS:-16}")
  $BIN bench ycsb "${common[@]}" --workload a --phases load --output "$WORK/load.json" > "$WORK/ycsb.txt" 2>&1 || { tail -5 "$WORK/ycsb.txt"; exit 1; }
  for w in ${WORKLOADS:-a f}; do
    s0=$(cpu_seconds " sql "); d0=$(cpu_seconds datanode)
    $BIN bench ycsb "${common[@]}" --workload "$w" --phases run --duration "${SECS:-15}" --output "$WORK/run.json" > "$WORK/ycsb.txt" 2>&1 || { tail -5 "$WORK/ycsb.txt"; exit 1; }
    s1=$(cpu_seconds " sql "); d1=$(cpu_seconds datanode)
    ops=$(grep -E '\[OVERALL\], Throughput' "$WORK/ycsb.txt" | awk -F', ' '{print $3}')
    python3 -c "import sys; ops, secs, s0, s1, d0, d1 = map(float, sys.argv[2:8]); n = ops * secs; print(f'{sys.argv[1]} {sys.argv[8]}: {ops:.0f} ops/s, SQL node {(s1 - s0) / n * 1e6:.1f} us CPU/op, data nodes {(d1 - d0) / n * 1e6:.1f} us CPU/op')" \
      "$v" "$ops" "${SECS:-15}" "$s0" "$s1" "$d0" "$d1" "$w"
  done
  stop_latsdb
}
ab_rounds one_round 3
