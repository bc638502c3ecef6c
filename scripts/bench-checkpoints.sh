#!/usr/bin/env bash
# Cost of local checkpoints on the flex write mix: `latsdb bench flex`
# insert + update of 1M rows (2 replicas, REDO synced every epoch) against
# `latsdb start` with checkpoints disabled and with the default trigger, in
# alternating rounds; prints each run, the medians and the ratio, the CPU
# time of the data nodes per operation (less noisy than throughput on a
# shared machine), and the REDO and checkpoint bytes on disk at the end of
# each run.
#
#   scripts/bench-checkpoints.sh [rounds=3] [seconds=20] [trigger_mb=64]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-20}
TRIGGER=${3:-64}
ROWS=1000000
source scripts/lib.sh

disk_usage() { # prints "redo_mib lcp_mib" summed over the data nodes
  python3 - "$WORK/latsdb" <<'PY'
import os, sys
redo = lcp = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        n = os.path.getsize(os.path.join(root, f))
        if f.startswith("redo-"): redo += n
        elif f.startswith("lcp-"): lcp += n
print(f"{redo / 2**20:.0f} {lcp / 2**20:.0f}")
PY
}

run() { # trigger round
  start_latsdb 2 --no-rest --checkpoint-trigger-mb "$1" >&2
  $BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases insert,update --warmup 2 --duration "$SECS" --cooldown 0.5 \
    --output "$WORK/ckpt-$1-$2.json" > "$WORK/ckpt-$1-$2.txt"
  local usage
  usage=$(disk_usage)
  local checkpoints
  checkpoints=$(grep -c "" <(ls "$WORK"/latsdb/datanode-*/shard-*/lcp-*.ckpt 2>/dev/null) || true)
  local cpu
  cpu=$(cpu_seconds datanode)
  { echo "   data-node CPU seconds by thread (name user system):"; thread_cpu datanode | sed 's/^/     /'; } >&2
  stop_latsdb >&2
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' '.join(str(p['ops_per_sec']) for p in d['phases']))" "$WORK/ckpt-$1-$2.json" | tr '\n' ' '
  # Data-node CPU microseconds per operation over the whole run (load,
  # warm-ups and both phases' operations).
  local per_op
  per_op=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(float(sys.argv[2]) * 1e6 / sum(p['ops'] for p in d['phases']))" "$WORK/ckpt-$1-$2.json" "$cpu")
  echo "$usage $checkpoints $per_op"
}

declare -a OFF ON
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r of $ROUNDS"
  OFF[$r]=$(run 0 "$r"); echo "checkpoints off: insert/s update/s redo_MiB lcp_MiB checkpoints cpu_us/op = ${OFF[$r]}"
  ON[$r]=$(run "$TRIGGER" "$r"); echo "checkpoints on:  insert/s update/s redo_MiB lcp_MiB checkpoints cpu_us/op = ${ON[$r]}"
done
python3 - "${OFF[@]}" -- "${ON[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]
cut = args.index("--")
off = [list(map(float, a.split())) for a in args[:cut]]
on = [list(map(float, a.split())) for a in args[cut + 1:]]
med = lambda rows, i: statistics.median(r[i] for r in rows)
print("| phase | checkpoints off (ops/s) | checkpoints on (ops/s) | on / off |")
print("|---|---|---|---|")
for i, name in enumerate(["insert", "update"]):
    print(f"| {name} | {med(off, i):,.0f} | {med(on, i):,.0f} | {med(on, i) / med(off, i):.2f} |")
print(f"| disk at end: REDO MiB | {med(off, 2):.0f} | {med(on, 2):.0f} | |")
print(f"| disk at end: checkpoint MiB | {med(off, 3):.0f} | {med(on, 3):.0f} | |")
print(f"| data-node CPU us per operation | {med(off, 5):.2f} | {med(on, 5):.2f} | {med(on, 5) / med(off, 5):.2f} |")
PY
