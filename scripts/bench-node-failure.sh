#!/usr/bin/env bash
# Throughput per second before, during and after a SIGKILL of one data node
# (one node group of two replicas) under the flex read/update mix. Prints a
# Markdown table and writes results/node-failure-<time>.{csv,svg}.
#
#   scripts/bench-node-failure.sh [seconds=20] [kill_at=8]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
KILL_AT=${2:-8}
ROWS=1000000
source scripts/lib.sh
start_latsdb 2
VICTIM=$($BIN mgm --mgmd "$MGMD" show | awk '/^id=3 /{for(i=1;i<=NF;i++) if ($i ~ /^pid=/) {sub("pid=","",$i); print $i}}')
load_rows $ROWS
CSV="results/node-failure-$STAMP.csv"
echo "== mixed read/update load for $SECS s; data node 3 (pid $VICTIM) is killed at second $KILL_AT"
$BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases mixed --warmup 0 --duration "$SECS" --cooldown 0 \
  --timeline "$CSV" --output "$WORK/mixed.json" > "$WORK/mixed.txt" 2>&1 &
FLEX=$!
sleep "$KILL_AT"
kill -9 "$VICTIM"
echo "killed data node 3 at $(date +%T)"
wait $FLEX || true   # failed operations around the kill make flex exit non-zero
python3 - "$CSV" "$KILL_AT" "results/node-failure-$STAMP.svg" <<'PY'
import csv, sys
path, kill_at, svg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [r for r in csv.DictReader(open(path)) if r["phase"] == "mixed"]
ok = [int(r["ok_ops"]) for r in rows]
bad = [int(r["failed_ops"]) for r in rows]
print("| second | ok ops/s | failed ops/s | |")
print("|---|---|---|---|")
for i, (o, b) in enumerate(zip(ok, bad)):
    print(f"| {i} | {o:,} | {b:,} | {'SIGKILL of data node 3 during this second' if i == kill_at else ''} |")
w, h, pad = 720, 300, 50
top = max(ok + [1])
x = lambda i: pad + i * (w - 2 * pad) / max(len(ok) - 1, 1)
y = lambda v: h - pad - v * (h - 2 * pad) / top
line = lambda vals: " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{pad}" y="20">latsdb flex mixed read/update, 2 replicas: ops/s per second (data node 3 killed at {kill_at} s)</text>',
         f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
         f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
         f'<text x="{w/2}" y="{h-15}">second</text>', f'<text x="5" y="{pad}">{top:,}</text>', f'<text x="35" y="{h-pad}">0</text>',
         f'<line x1="{x(kill_at):.1f}" y1="{pad}" x2="{x(kill_at):.1f}" y2="{h-pad}" stroke="gray" stroke-dasharray="4"/>',
         f'<polyline fill="none" stroke="steelblue" stroke-width="2" points="{line(ok)}"/>',
         f'<polyline fill="none" stroke="crimson" stroke-width="2" points="{line(bad)}"/>',
         f'<text x="{w-pad-140}" y="{pad}" fill="steelblue">ok ops/s</text>',
         f'<text x="{w-pad-140}" y="{pad+15}" fill="crimson">failed ops/s</text>', '</svg>']
open(svg, "w").write("\n".join(parts))
print(f"\nplot: {svg}; per-second data: {path}")
PY
