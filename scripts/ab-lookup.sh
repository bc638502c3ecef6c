#!/usr/bin/env bash
# Compares two latsdb builds side by side on REST batch lookups: for each
# round, a fresh `latsdb start` (2 replicas) of each build in turn loads the
# rows and runs `latsdb bench lookup` at peak; the script prints lookups/s,
# batch latency and the CPU time of the REST node and of the data nodes per
# lookup.
#
#   scripts/ab-lookup.sh OLD_BINARY NEW_BINARY
#   env: ROUNDS (2), TIME (6 s measured), CLIENTS (16), ROWS (100000),
#        ORDER ("old new"), EXTRA (more `bench lookup` flags, e.g.
#        "--read-columns" or "--rate 8800")
#
# Build the old one from a worktree, e.g.
#   git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p latsdb)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
OLD=$(realpath "$1"); NEW=$(realpath "$2")
cd "$(dirname "$0")/.."
source scripts/lib.sh
ROWS=${ROWS:-100000}
TIME=${TIME:-6}
one_round() {
  start_latsdb 2 > /dev/null
  [ -n "$REST" ] || { echo "this build's 'latsdb start' runs no REST node" >&2; exit 1; }
  $BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows "$ROWS" --warmup 0 --duration 1 \
    --output "$WORK/load.json" > /dev/null
  r0=$(cpu_seconds " rest "); d0=$(cpu_seconds datanode)
  $BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows "$ROWS" --no-load --clients "${CLIENTS:-16}" \
    --warmup 0 --duration "$TIME" ${EXTRA:-} --output "$WORK/lookup.json" > /dev/null
  r1=$(cpu_seconds " rest "); d1=$(cpu_seconds datanode)
  python3 - "$WORK/lookup.json" "$v" "$r0" "$r1" "$d0" "$d1" <<'PY'
import json, sys
path, label, r0, r1, d0, d1 = sys.argv[1:7]
d = json.load(open(path))
lookups = d["lookups_per_sec"] * d["seconds"]
lat = d["batch_latency_us"]
print(f"{label}: {d['lookups_per_sec']:,.0f} lookups/s, p50/p99 {lat['p50']}/{lat['p99']} us, "
      f"REST {(float(r1) - float(r0)) / lookups * 1e6:.3f} us CPU/lookup, "
      f"data nodes {(float(d1) - float(d0)) / lookups * 1e6:.3f} us CPU/lookup, "
      f"{d.get('failed_lookups', 0)} failed")
PY
  stop_latsdb
}
ab_rounds one_round 2
