#!/usr/bin/env bash
# YCSB's core workloads through `latsdb bench ycsb`: latsdb over the native
# client against one `latsdb start` (2 data nodes, 2 replicas), and the same
# generator against Debian's redis-server (YCSB's Redis data model) in the
# same run, in YCSB's recommended order: load, run A, B, C, F, D; load
# again; run E. Each workload runs on latsdb, then on Redis. Prints a table
# of throughput, the latsdb/Redis ratio and per-operation latency; every
# run's JSON is kept in results/ycsb-<target>-<workload>-<phase>-<time>.json.
#
# DISK=1 keeps the fields on disk (STORAGE DISK); CACHE_MB and DIRECT=on set
# latsdb's page cache and O_DIRECT; FIELDLENGTH the bytes per field (10
# fields); WORKLOADS a subset of "a b c f d e" (e reloads first).
#
#   scripts/bench-ycsb.sh [seconds per workload=20]
#   RECORDS=100000 THREADS=16 DISK=1 REDIS=0 scripts/bench-ycsb.sh 30
#   DISK=1 CACHE_MB=64 DIRECT=on FIELDLENGTH=400 REDIS=0 WORKLOADS="c" scripts/bench-ycsb.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
RECORDS=${RECORDS:-100000}
THREADS=${THREADS:-16}
DISK=${DISK:-}
REDIS=${REDIS:-1}
CACHE_MB=${CACHE_MB:-0}
DIRECT=${DIRECT:-off}
FIELDLENGTH=${FIELDLENGTH:-100}
WORKLOADS=${WORKLOADS:-a b c f d e}
[ "$REDIS" = 1 ] && scripts/install-deps.sh bench
source scripts/lib.sh

start_latsdb 2 --disk-page-cache-mb "$CACHE_MB" --disk-direct-io "$DIRECT"
TARGETS=(latsdb)
if [ "$REDIS" = 1 ]; then
  echo "== starting redis-server"
  RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --daemonize no > "$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  TARGETS+=(redis)
fi
disk=()
[ -n "$DISK" ] && disk=(--disk)
ycsb() { # target workload phase
  local db=latsdb
  if [ "$1" = redis ]; then
    db="redis://127.0.0.1:$RPORT"
    # A load starts from an empty server, as a fresh table does in latsdb.
    [ "$3" = load ] && redis-cli -p "$RPORT" flushall > /dev/null
  fi
  $BIN bench ycsb --mgmd "$MGMD" --db "$db" --workload "$2" --phases "$3" -p recordcount="$RECORDS" -p operationcount=0 -p fieldlength="$FIELDLENGTH" \
    --threads "$THREADS" --duration "$SECS" "${disk[@]}" --output "results/ycsb-$1-$2-$3-$STAMP.json" \
    | grep -E '\[OVERALL\], Throughput' | sed "s/^/$1 $2: /" || true
}
for t in "${TARGETS[@]}"; do echo "== $t: load $RECORDS records"; ycsb "$t" a load; done
for w in $WORKLOADS; do
  [ "$w" = e ] && continue
  for t in "${TARGETS[@]}"; do ycsb "$t" "$w" run; done
done
if [[ " $WORKLOADS " == *" e "* ]]; then
  for t in "${TARGETS[@]}"; do ycsb "$t" e load; ycsb "$t" e run; done
fi
$BIN mgm --mgmd "$MGMD" report-memory | tee "$WORK/memory.txt"

python3 - "$STAMP" "$RECORDS" "$THREADS" "${TARGETS[*]}" "$WORKLOADS" <<'PY'
import json, sys
stamp, records, threads, targets, workloads = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split()
print()
print(f"{records} records, {threads} client tasks; latsdb: native client, 2 data nodes x 2 replicas")
header = ["workload"] + [f"{t} ops/s" for t in targets] + (["latsdb/redis"] if len(targets) > 1 else []) + [f"{t} avg / p99 us" for t in targets]
print("| " + " | ".join(header) + " |")
print("|---" * len(header) + "|")
for w in [w for w in "abcfde" if w in workloads]:
    runs = {t: json.load(open(f"results/ycsb-{t}-{w}-run-{stamp}.json"))["phases"][0] for t in targets}
    lat = lambda p: "; ".join(f"{k} {v['avg_us']:.0f} / {v['p99_us']}" for k, v in p["operations"].items())
    row = [w.upper()] + [f"{runs[t]['ops_per_sec']:,.0f}" for t in targets]
    if len(targets) > 1:
        row.append(f"{runs['latsdb']['ops_per_sec'] / max(runs['redis']['ops_per_sec'], 1e-9):.2f}x")
    row += [lat(runs[t]) for t in targets]
    print("| " + " | ".join(row) + " |")
PY
