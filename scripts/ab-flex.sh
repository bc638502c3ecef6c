#!/usr/bin/env bash
# Compares two latsdb builds side by side on `latsdb bench flex`: for each
# round, a fresh `latsdb start` (2 replicas) of each build in turn loads the
# rows, warms up, then runs each phase; the script prints ops/s and the CPU
# time of the data nodes and of the benchmark client per operation.
#
#   scripts/ab-flex.sh OLD_BINARY NEW_BINARY
#   env: ROUNDS (3), TIME (8 s measured per phase), PHASES (read,update),
#        ROWS (1000000), ORDER ("old new"), EXTRA (more `bench flex` flags),
#        CLIENT (run the benchmark client from this binary in every round, so
#        that only the cluster differs)
#
# Build the old one from a worktree, e.g.
#   git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p latsdb)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
OLD=$(realpath "$1"); NEW=$(realpath "$2")
cd "$(dirname "$0")/.."
source scripts/lib.sh
ROWS=${ROWS:-1000000}
one_round() {
  start_latsdb 2 > /dev/null
  load_rows "$ROWS" > /dev/null
  $BIN bench flex --mgmd "$MGMD" --rows "$ROWS" --phases read --warmup 0 --duration 2 --cooldown 0 \
    --output "$WORK/warm.json" ${EXTRA:-} > /dev/null
  for phase in ${PHASES:-read update}; do
    phase=${phase//,/ }
    d0=$(cpu_seconds datanode)
    client=$(python3 - "${CLIENT:-$BIN}" "$MGMD" "$ROWS" "$phase" "${TIME:-8}" "$WORK/flex.json" ${EXTRA:-} <<'PY'
import resource, subprocess, sys
bin, mgmd, rows, phase, secs, out, *extra = sys.argv[1:]
subprocess.run([bin, "bench", "flex", "--mgmd", mgmd, "--rows", rows, "--phases", phase, "--warmup", "0",
                "--duration", secs, "--cooldown", "0", "--output", out, *extra], check=True, stdout=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
PY
)
    d1=$(cpu_seconds datanode)
    python3 - "$WORK/flex.json" "$v" "$d0" "$d1" "$client" <<'PY'
import json, sys
path, label, d0, d1, client = sys.argv[1:6]
p = json.load(open(path))["phases"][0]
ops = p["ops"] if "ops" in p else p["ops_per_sec"] * p["seconds"]
print(f"{label} {p['phase'] if 'phase' in p else ''}: {p['ops_per_sec']:,.0f} ops/s, data nodes {(float(d1) - float(d0)) / ops * 1e6:.3f} us CPU/op, client {float(client) / ops * 1e6:.3f} us CPU/op")
PY
  done
  stop_latsdb
}
ab_rounds one_round 3
