#!/usr/bin/env bash
# Compares two latsdb builds side by side on sysbench: for each round, a
# fresh `latsdb start` (2 replicas) of each build in turn runs the same
# workload, and the script prints TPS, p95 and the CPU time of the SQL node
# and of the data nodes per transaction.
#
#   scripts/ab-sysbench.sh OLD_BINARY NEW_BINARY
#   env: ROUNDS (3), TIME (15 s measured), THREADS (16), WL (rw), SIZE (100000),
#        ORDER ("old new"; "new old" to see whether the order matters),
#        EXTRA (more `latsdb bench sysbench` flags, e.g. for point selects:
#        "--skip-trx --point-selects 1 --simple-ranges 0 --order-ranges 0 --distinct-ranges 0 --sum-ranges 0")
#
# Build the old one from a worktree, e.g.
#   git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p latsdb)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
OLD=$(realpath "$1"); NEW=$(realpath "$2")
cd "$(dirname "$0")/.."
source scripts/lib.sh
one_round() {
  start_latsdb 2 > /dev/null
  common=(--sql "$SQL" --label $v --table-size "${SIZE:-100000}" --threads "${THREADS:-16}" --workload "${WL:-rw}" ${EXTRA:-})
  # Prepares the table and warms the caches for 3 s.
  $BIN bench sysbench "${common[@]}" --time 3 --output "$WORK/warm.json" > "$WORK/sb.txt" 2>&1 || { tail -5 "$WORK/sb.txt"; exit 1; }
  s0=$(cpu_seconds " sql "); d0=$(cpu_seconds datanode)
  $BIN bench sysbench "${common[@]}" --time "${TIME:-15}" --skip-prepare --output "$WORK/sb.json" > "$WORK/sb.txt" 2>&1 || { tail -5 "$WORK/sb.txt"; exit 1; }
  s1=$(cpu_seconds " sql "); d1=$(cpu_seconds datanode)
  python3 - "$WORK/sb.json" $v "$s0" "$s1" "$d0" "$d1" "${TIME:-15}" <<'PY'
import json, sys
path, label, s0, s1, d0, d1, secs = sys.argv[1:8]
run = json.load(open(path))["runs"][0]
txs = run["tps"] * float(secs)
print(f"{label}: {run['tps']:.0f} TPS, p95 {run['p95_ms']} ms, SQL node {(float(s1) - float(s0)) / txs * 1e3:.3f} ms CPU/tx, data nodes {(float(d1) - float(d0)) / txs * 1e3:.3f} ms CPU/tx")
PY
  stop_latsdb
}
ab_rounds one_round 3
