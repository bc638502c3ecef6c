#!/usr/bin/env bash
# Adding a node group online, measured: loads RECORDS YCSB records (10 x
# 100 bytes) into `latsdb start` (2 data nodes, 2 replicas, one node group),
# runs YCSB workload A for SECS seconds with a 5 s timeline, and once the
# run is a third of the way in adds a second node group of 2 data nodes
# (`latsdb mgm nodegroup add`, which the launcher starts; their share of
# the partitions moves to them). Prints how long the move took and the
# workload's throughput before, during and after it. Files under results/.
#
# All four data nodes run on this host: on a machine with few CPUs the new
# nodes take CPU from the old ones, so "after" measures that too.
#
#   scripts/bench-add-node-group.sh [seconds=60]
#   RECORDS=1000000 THREADS=16 scripts/bench-add-node-group.sh 90
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
RECORDS=${RECORDS:-500000}
THREADS=${THREADS:-16}
source scripts/lib.sh

start_latsdb 2 --no-rest --no-sql
echo "== load $RECORDS records"
$BIN bench ycsb --mgmd "$MGMD" -w a --phases load -p recordcount="$RECORDS" --threads "$THREADS" \
  --output "results/add-group-load-$STAMP.json" | grep -E '\[OVERALL\], Throughput' || true
# The cluster's configuration with data nodes 4 and 5 appended.
GROWN=$WORK/grown.toml
python3 - "$WORK/latsdb/config.toml" "$GROWN" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
first = re.search(r"\[\[datanode\]\]\n(.*?)(?=\n\[|\Z)", text, re.S).group(1)
extra = ""
for node in (4, 5):
    extra += "\n[[datanode]]\n" + re.sub(r"node_id = \d+", f"node_id = {node}", first).rstrip() + "\n"
open(sys.argv[2], "w").write(text.rstrip() + "\n" + extra)
EOF
RUN_JSON=results/add-group-run-$STAMP.json
echo "== workload A for $SECS s; the node group is added at $((SECS / 3)) s"
$BIN bench ycsb --mgmd "$MGMD" -w a --phases run -p recordcount="$RECORDS" -p operationcount=0 \
  --threads "$THREADS" --duration "$SECS" --interval 5 --output "$RUN_JSON" > "$WORK/run.log" 2>&1 &
RUN=$!
PIDS+=($RUN)
sleep $((SECS / 3))
began=$(date +%s.%N)
$BIN mgm --mgmd "$MGMD" nodegroup add --config "$GROWN" --timeout 600 | tee "$WORK/add.log"
ended=$(date +%s.%N)
wait "$RUN"
$BIN mgm --mgmd "$MGMD" report-memory | grep rows | tee "$WORK/memory.log"
stop_latsdb

python3 - "$RUN_JSON" "$((SECS / 3))" "$began" "$ended" <<'EOF'
import json, sys
run, offset, began, ended = sys.argv[1:5]
# The run started just before the script slept `offset` seconds.
lo, hi = float(offset), float(offset) + float(ended) - float(began)
print(f"node group added and its partitions moved in {hi - lo:.1f} s")
phase = json.load(open(run))["phases"][-1]
print("workload A timeline (5 s rows; * = the move ran during the row):")
before, during, after = [], [], []
for row in phase["timeline"]:
    end = row["at_s"]
    hit = end > lo and end - 5 < hi
    (during if hit else before if end <= lo else after).append(row["ops_per_sec"])
    print(f"  {end:5.0f} s  {row['ops_per_sec']:9.0f} ops/s {'*' if hit else ''}")
if before and during:
    a = sum(before) / len(before)
    b = sum(during) / len(during)
    print(f"throughput: {a:.0f} ops/s before the move, {b:.0f} during it ({b / a:.2f}x)", end="")
    if after:
        c = sum(after) / len(after)
        print(f", {c:.0f} after it ({c / a:.2f}x)")
    else:
        print()
EOF
echo "host: $(grep -m1 -E 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 -E '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
