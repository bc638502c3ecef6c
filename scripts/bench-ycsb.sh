#!/usr/bin/env bash
# YCSB's core workloads through `latsdb bench ycsb` (native client) against
# one `latsdb start` (2 data nodes, 2 replicas), in YCSB's recommended
# order: load, run A, B, C, F, D; load again; run E. Prints a table of
# throughput and per-operation latency; every run's JSON is kept in
# results/ycsb-<workload>-<time>.json.
#
#   scripts/bench-ycsb.sh [seconds per workload=20]
#   RECORDS=100000 THREADS=16 DISK=1 scripts/bench-ycsb.sh 30
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
RECORDS=${RECORDS:-100000}
THREADS=${THREADS:-16}
DISK=${DISK:-}
source scripts/lib.sh

start_latsdb 2
disk=()
[ -n "$DISK" ] && disk=(--disk)
ycsb() { # workload phases
  $BIN bench ycsb --mgmd "$MGMD" --workload "$1" --phases "$2" -p recordcount="$RECORDS" -p operationcount=0 \
    --threads "$THREADS" --duration "$SECS" "${disk[@]}" --output "results/ycsb-$1-$2-$STAMP.json" \
    | grep -E '^\[(OVERALL|load|run)\]|OVERALL' | grep -v '^\[load\] ' || true
}
echo "== load $RECORDS records"
ycsb a load
for w in a b c f d; do echo "== workload $w"; ycsb "$w" run; done
echo "== load again, then workload e"
ycsb e load
ycsb e run

python3 - "$STAMP" "$RECORDS" "$THREADS" <<'PY'
import json, sys
stamp, records, threads = sys.argv[1], sys.argv[2], sys.argv[3]
print()
print(f"{records} records, {threads} client tasks, native client, 2 data nodes x 2 replicas")
print("| workload | ops/s | operation: avg / p95 / p99 us |")
print("|---|---|---|")
for w in "abcfde":
    d = json.load(open(f"results/ycsb-{w}-run-{stamp}.json"))
    p = d["phases"][0]
    ops = "; ".join(f"{k} {v['avg_us']:.0f} / {v['p95_us']} / {v['p99_us']}" for k, v in p["operations"].items())
    print(f"| {w.upper()} | {p['ops_per_sec']:,.0f} | {ops} |")
PY
