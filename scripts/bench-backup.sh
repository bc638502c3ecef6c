#!/usr/bin/env bash
# Online backup and restore, measured: loads RECORDS YCSB records (10 x 100
# bytes) into `latsdb start` (2 data nodes, 2 replicas), runs YCSB workload
# A for SECS seconds with a 5 s timeline, takes `latsdb mgm backup start`
# once the run is a third of the way in, then restores the backup into a
# second cluster of another shape (3 data nodes, 1 replica). Prints the
# backup's size, time and MB/s, the workload's throughput before, during
# and after the backup, and the restore's rows/s. Files under results/.
#
#   scripts/bench-backup.sh [seconds=60]
#   RECORDS=1000000 THREADS=16 scripts/bench-backup.sh 90
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
RECORDS=${RECORDS:-500000}
THREADS=${THREADS:-16}
source scripts/lib.sh

start_latsdb 2 --no-rest --no-sql
SOURCE=$MGMD
SOURCE_DIR=$WORK/latsdb
echo "== load $RECORDS records"
$BIN bench ycsb --mgmd "$SOURCE" -w a --phases load -p recordcount="$RECORDS" --threads "$THREADS" \
  --output "results/backup-load-$STAMP.json" | grep -E '\[OVERALL\], Throughput' || true
RUN_JSON=results/backup-run-$STAMP.json
echo "== workload A for $SECS s; the backup starts at $((SECS / 3)) s"
$BIN bench ycsb --mgmd "$SOURCE" -w a --phases run -p recordcount="$RECORDS" -p operationcount=0 \
  --threads "$THREADS" --duration "$SECS" --interval 5 --output "$RUN_JSON" > "$WORK/run.log" 2>&1 &
RUN=$!
PIDS+=($RUN)
sleep $((SECS / 3))
began=$(date +%s.%N)
$BIN mgm --mgmd "$SOURCE" backup start | tee "$WORK/backup.log"
ended=$(date +%s.%N)
wait "$RUN"
mv "$SOURCE_DIR/backups" "$WORK/backups"
stop_latsdb

# The second cluster: another shape, on the same host.
rm -rf "$WORK/latsdb"
start_latsdb 1 --datanodes 3 --no-rest --no-sql
$BIN restore --mgmd "$MGMD" --backup "$WORK/backups/BACKUP-1" | tee "$WORK/restore.log"

python3 - "$RUN_JSON" "$((SECS / 3))" "$began" "$ended" "$WORK/backup.log" "$WORK/restore.log" <<'EOF'
import json, re, sys
run, offset, began, ended, backup_log, restore_log = sys.argv[1:7]
# The run started just before the script slept `offset` seconds.
lo, hi = float(offset), float(offset) + float(ended) - float(began)
phase = json.load(open(run))["phases"][-1]
line = open(backup_log).read()
m = re.search(r"completed; epoch \d+; ([\d.]+) MB in ([\d.]+) s", line)
mb, secs = float(m.group(1)), float(m.group(2))
print(f"backup: {mb:.0f} MB over 2 data nodes in {secs:.1f} s = {mb / secs:.0f} MB/s ({mb / secs / 2:.0f} MB/s per node)")
print("workload A timeline (5 s rows; * = the backup ran during the row):")
during, outside = [], []
for row in phase["timeline"]:
    end = row["at_s"]
    hit = end > lo and end - 5 < hi
    (during if hit else outside).append(row["ops_per_sec"])
    print(f"  {end:5.0f} s  {row['ops_per_sec']:9.0f} ops/s {'*' if hit else ''}")
if during and outside:
    a, b = sum(outside) / len(outside), sum(during) / len(during)
    print(f"throughput: {a:.0f} ops/s without the backup, {b:.0f} during it ({b / a:.2f}x)")
r = re.search(r"\((\d+) rows/s\)", open(restore_log).read())
print(f"restore: {r.group(1)} rows/s")
EOF
echo "host: $(grep -m1 -E 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 -E '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
