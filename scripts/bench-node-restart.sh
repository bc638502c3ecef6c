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
VICTIM=$($BIN mgm --mgmd "$MGMD" show | awk '/^id=3 /{for(i=1;i<=NF;i++) if ($i ~ /^pid=/) {sub("pid=","",$i); print $i}}')
load_rows $ROWS
CSV="results/node-restart-$STAMP.csv"
echo "== mixed read/update load for $SECS s: SIGKILL of data node 3 at second $KILL_AT, mgm 3 start at $START_AT, mgm 3 restart --initial at $INITIAL_AT"
$BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases mixed --warmup 0 --duration "$SECS" --cooldown 0 \
  --timeline "$CSV" --output "$WORK/mixed.json" > "$WORK/mixed.txt" 2>&1 &
FLEX=$!
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
python3 - "$CSV" "$KILL_AT" "$START_AT" "$INITIAL_AT" "results/node-restart-$STAMP.svg" <<'PY'
import csv, sys
path, kill_at, start_at, initial_at, svg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows = [r for r in csv.DictReader(open(path)) if r["phase"] == "mixed"]
ok = [int(r["ok_ops"]) for r in rows]
bad = [int(r["failed_ops"]) for r in rows]
events = {kill_at: "SIGKILL of data node 3", start_at: "mgm 3 start (node restart)", initial_at: "mgm 3 restart --initial"}
print("\n| second | ok ops/s | failed ops/s | |")
print("|---|---|---|---|")
for i, (o, b) in enumerate(zip(ok, bad)):
    print(f"| {i} | {o:,} | {b:,} | {events.get(i, '')} |")
w, h, pad = 760, 300, 50
top = max(ok + [1])
x = lambda i: pad + i * (w - 2 * pad) / max(len(ok) - 1, 1)
y = lambda v: h - pad - v * (h - 2 * pad) / top
line = lambda vals: " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{pad}" y="20">latsdb flex mixed read/update, 2 replicas: ops/s per second across node restarts of data node 3</text>',
         f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
         f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
         f'<text x="{w/2}" y="{h-15}">second</text>', f'<text x="5" y="{pad}">{top:,}</text>', f'<text x="35" y="{h-pad}">0</text>']
for i, (t, label) in enumerate(sorted(events.items())):
    parts.append(f'<line x1="{x(t):.1f}" y1="{pad}" x2="{x(t):.1f}" y2="{h-pad}" stroke="gray" stroke-dasharray="4"/>')
    parts.append(f'<text x="{x(t)+3:.1f}" y="{pad + 12 + 14 * i}" fill="gray">{label}</text>')
parts += [f'<polyline fill="none" stroke="steelblue" stroke-width="2" points="{line(ok)}"/>',
          f'<polyline fill="none" stroke="crimson" stroke-width="2" points="{line(bad)}"/>',
          f'<text x="{w-pad-100}" y="{h-pad-30}" fill="steelblue">ok ops/s</text>',
          f'<text x="{w-pad-100}" y="{h-pad-15}" fill="crimson">failed ops/s</text>', '</svg>']
open(svg, "w").write("\n".join(parts))
print(f"\nplot: {svg}; per-second data: {path}")
PY
