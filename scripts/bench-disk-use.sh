#!/usr/bin/env bash
# REDO and checkpoint disk use under steady writes: `latsdb start` (2
# replicas, default checkpoint trigger), 1M rows loaded, then `latsdb bench
# flex` updating them at random for the given minutes while the REDO and
# checkpoint bytes of both data nodes are sampled every 30 s. Prints a
# Markdown table (minute, MiB of REDO, MiB of checkpoints, updates/s over
# the last interval) and writes results/disk-use-<time>.csv.
#
#   scripts/bench-disk-use.sh [minutes=10]
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
ROWS=1000000
source scripts/lib.sh
start_latsdb 2 --no-rest --no-sql
load_rows $ROWS
SECS=$((MINUTES * 60))
CSV="results/disk-use-$STAMP.csv"
echo "== updating $ROWS rows at random for $MINUTES min, disk sampled every 30 s"
$BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases update --warmup 0 --duration "$SECS" --cooldown 0 \
  --timeline "$WORK/timeline.csv" --output "$WORK/update.json" > "$WORK/update.txt" 2>&1 &
FLEX=$!
PIDS+=($FLEX)
echo "second,redo_mib,checkpoint_mib" > "$CSV"
T0=$(date +%s)
while kill -0 "$FLEX" 2>/dev/null; do
  sleep 30
  python3 - "$WORK/latsdb" "$(($(date +%s) - T0))" >> "$CSV" <<'PY'
import os, sys
redo = lcp = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        try:
            n = os.path.getsize(os.path.join(root, f))
        except OSError:
            continue  # deleted by a trim meanwhile
        if f.startswith("redo-"): redo += n
        elif f.startswith("lcp-"): lcp += n
print(f"{sys.argv[2]},{redo / 2**20:.0f},{lcp / 2**20:.0f}")
PY
  tail -1 "$CSV" | awk -F, '{printf "  %4d s: REDO %5d MiB, checkpoints %5d MiB\n", $1, $2, $3}'
done
wait "$FLEX" || true
grep -E "update|failed" "$WORK/update.txt" || true
python3 - "$CSV" "$WORK/timeline.csv" <<'PY'
import csv, sys
disk = list(csv.DictReader(open(sys.argv[1])))
rates = {}
for row in csv.DictReader(open(sys.argv[2])):
    rates[int(row["second"])] = float(row["ok_ops"])
print("| second | REDO MiB (both nodes) | checkpoint MiB (both nodes) | updates/s (last 30 s) |")
print("|---|---|---|---|")
prev = 0
for d in disk:
    s = int(d["second"])
    window = [v for k, v in rates.items() if prev <= k < s]
    rate = sum(window) / len(window) if window else 0
    print(f"| {s} | {d['redo_mib']} | {d['checkpoint_mib']} | {rate:,.0f} |")
    prev = s
PY
ls -la "$WORK"/latsdb/datanode-*/shard-*/ | grep -E "redo-|lcp-" | awk '{print "    " $5, $9}'
