#!/usr/bin/env bash
# The seed article's part 2: YCSB workload B at a steady rate through the
# native client (one node group of two replicas), while data node 3 is
# restarted (`latsdb mgm 3 restart`: it restores its disk, copies what
# changed from the live replica, checkpoints, rejoins) and later restarted
# from an empty disk (`mgm 3 restart --initial`: it copies everything).
# Prints the time of each restart stage from the node's log (restore =
# local recovery, copy = sync from the live replica, checkpoint = wait for
# the local checkpoint), a per-second table of throughput and read/update
# latency, and the longest stretch below 60% of the steady rate (goal: at
# most 2 s). Writes results/ycsb-restart-<time>.{json,svg,csv} and a
# timeline plot with the restarts marked (results/ycsb-restart-<time>-marked.svg).
#
#   scripts/bench-ycsb-restart.sh [seconds=90] [restart_at=20] [initial_at=50]
#   RATE=30000 RECORDS=100000 THREADS=16 scripts/bench-ycsb-restart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-90}
RESTART_AT=${2:-20}
INITIAL_AT=${3:-50}
RATE=${RATE:-30000}
RECORDS=${RECORDS:-100000}
THREADS=${THREADS:-16}
source scripts/lib.sh
start_latsdb 2
echo "== load $RECORDS records"
$BIN bench ycsb --mgmd "$MGMD" -w b --phases load -p recordcount="$RECORDS" --threads "$THREADS" \
  --output "$WORK/load.json" | grep -E '\[OVERALL\], Throughput'
OUT="results/ycsb-restart-$STAMP"
echo "== workload B at $RATE ops/s for $SECS s: mgm 3 restart at second $RESTART_AT, mgm 3 restart --initial at $INITIAL_AT"
$BIN bench ycsb --mgmd "$MGMD" -w b --phases run -p recordcount="$RECORDS" -p operationcount=0 --threads "$THREADS" \
  --target "$RATE" --duration "$SECS" --interval 1 --output "$OUT.json" > "$WORK/run.txt" 2>&1 &
BENCH=$!
PIDS+=($BENCH)
T0=$(date +%s.%N)
at() { sleep "$(python3 -c "import time; print(max(0, $T0 + $1 - time.time()))")"; }
at "$RESTART_AT"; echo "second $RESTART_AT: mgm 3 restart"; $BIN mgm --mgmd "$MGMD" 3 restart --timeout 300
at "$INITIAL_AT"; echo "second $INITIAL_AT: mgm 3 restart --initial"; $BIN mgm --mgmd "$MGMD" 3 restart --initial --timeout 300
wait $BENCH || true   # operations that fail around a restart make the bench exit non-zero; they are counted below
grep -E "OVERALL|Return=ERROR" "$WORK/run.txt" || true
echo
echo "restart stages (data node 3; restore = local recovery, copy = sync from the live replica, checkpoint = wait for the local checkpoint):"
grep -E "stage done|admitted to view" "$WORK/latsdb/datanode-3.log" | sed 's/^/    /'

python3 - "$OUT" "$RATE" "$RESTART_AT" "$INITIAL_AT" <<'PY'
import csv, json, sys
out, rate, restart_at, initial_at = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
run = json.load(open(out + ".json"))["phases"][0]
rows = run["timeline"]
def op(row, name, key):
    o = row["operations"].get(name)
    return o[key] if o and o["ops"] else 0
with open(out + ".csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["phase", "second", "ok_ops", "failed_ops"])
    for i, r in enumerate(rows):
        failed = sum(o["failed"] for o in r["operations"].values())
        w.writerow(["run", i, round(r["ops_per_sec"]), failed])
steady = sorted(r["ops_per_sec"] for r in rows[2:restart_at])
steady = steady[len(steady) // 2] if steady else rate
events = {restart_at: "mgm 3 restart", initial_at: "mgm 3 restart --initial"}
print(f"\nsteady rate (median of seconds 2-{restart_at}): {steady:,.0f} ops/s (target {rate:,.0f})")
print("| second | ops/s | READ avg / p99 us | UPDATE avg / p99 us | failed | |")
print("|---|---|---|---|---|---|")
longest, current, worst_at = 0, 0, None
for i, r in enumerate(rows):
    low = r["ops_per_sec"] < 0.6 * steady
    current = current + 1 if low else 0
    if current > longest:
        longest, worst_at = current, i
    failed = sum(o["failed"] for o in r["operations"].values())
    lat = lambda n: f"{op(r, n, 'avg_us'):.0f} / {op(r, n, 'p99_us')}"
    mark = ("below 60% " if low else "") + events.get(i, "")
    print(f"| {i} | {r['ops_per_sec']:,.0f} | {lat('READ')} | {lat('UPDATE')} | {failed} | {mark} |")
print(f"\nlongest stretch below 60% of the steady rate: {longest} s" + (f" (ending at second {worst_at})" if longest else "") + " (goal: at most 2 s)")
PY
python3 scripts/timeline.py "$OUT.csv" run "$OUT-marked.svg" \
  "latsdb YCSB B at $RATE ops/s, 2 replicas: ops/s per second across restarts of data node 3" \
  "$RESTART_AT=mgm 3 restart" "$INITIAL_AT=mgm 3 restart --initial" > /dev/null
echo "results: $OUT.json, $OUT.csv, $OUT.svg (timeline), $OUT-marked.svg (restarts marked)"
