#!/usr/bin/env bash
# YCSB's core workloads through `latsdb bench ycsb`, one generator for every
# target in the same run: latsdb over the native client against one `latsdb
# start` (2 data nodes, 2 replicas); Debian's redis-server (YCSB's Redis
# data model); latsdb's SQL node and Debian's MariaDB (InnoDB, flush at
# every commit, a 2 GiB buffer pool) with YCSB's JDBC statements. YCSB's
# recommended order: load, run A, B, C, F, D; load again; run E; each
# workload runs on every target in turn. Prints a table of throughput,
# latsdb/Redis and SQL node/MariaDB ratios and per-operation latency; every
# run's JSON and timeline plot are kept in
# results/ycsb-<target>-<workload>-<phase>-<time>.{json,svg}, and a bar
# chart of throughput per workload in results/ycsb-throughput-<time>.svg.
#
# TARGETS picks among "latsdb redis sql mariadb" (default: all four; REDIS=0
# drops redis, as before).
#
# DISK=1 keeps the native target's fields on disk (STORAGE DISK); CACHE_MB and DIRECT=on set
# latsdb's page cache and O_DIRECT; FIELDLENGTH the bytes per field (10
# fields); WORKLOADS a subset of "a b c f d e" (e reloads first).
#
#   scripts/bench-ycsb.sh [seconds per workload=20]
#   RECORDS=100000 THREADS=16 DISK=1 REDIS=0 scripts/bench-ycsb.sh 30
#   DISK=1 CACHE_MB=64 DIRECT=on FIELDLENGTH=400 REDIS=0 WORKLOADS="c" scripts/bench-ycsb.sh
#   TARGETS="sql mariadb" scripts/bench-ycsb.sh 20
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
DEFAULT_TARGETS="latsdb redis sql mariadb"
[ "$REDIS" = 1 ] || DEFAULT_TARGETS="latsdb sql mariadb"
read -r -a TARGETS <<< "${TARGETS:-$DEFAULT_TARGETS}"
for t in "${TARGETS[@]}"; do
  case $t in latsdb|redis|sql|mariadb) ;; *) echo "unknown target '$t' in TARGETS; known: latsdb redis sql mariadb" >&2; exit 2;; esac
done
has() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }
if has redis || has mariadb; then scripts/install-deps.sh bench; fi
source scripts/lib.sh

start_latsdb 2 --disk-page-cache-mb "$CACHE_MB" --disk-direct-io "$DIRECT"
if has redis; then
  echo "== starting redis-server"
  RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --daemonize no > "$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
if has mariadb; then
  start_mariadb ycsb ycsb
fi
disk=()
[ -n "$DISK" ] && disk=(--disk)
ycsb() { # target workload phase
  local db=latsdb flags=("${disk[@]}")
  case $1 in
    redis)
      db="redis://127.0.0.1:$RPORT"
      # A load starts from an empty server, as a fresh table does in latsdb.
      [ "$3" = load ] && redis-cli -p "$RPORT" flushall > /dev/null ;;
    sql) db="mysql://root@$SQL"; flags=(--table usertable_sql) ;;
    mariadb) db="mysql://ycsb:ycsb@127.0.0.1:$MPORT"; flags=() ;;
  esac
  $BIN bench ycsb --mgmd "$MGMD" --db "$db" --workload "$2" --phases "$3" -p recordcount="$RECORDS" -p operationcount=0 -p fieldlength="$FIELDLENGTH" \
    --threads "$THREADS" --duration "$SECS" "${flags[@]}" --output "results/ycsb-$1-$2-$3-$STAMP.json" \
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
print(f"{records} records, {threads} client tasks; latsdb: 2 data nodes x 2 replicas (native client, and SQL node as 'sql')")
ratios = [(a, b) for a, b in [("latsdb", "redis"), ("sql", "mariadb")] if a in targets and b in targets]
header = ["workload"] + [f"{t} ops/s" for t in targets] + [f"{a}/{b}" for a, b in ratios] + [f"{t} avg / p99 us" for t in targets]
print("| " + " | ".join(header) + " |")
print("|---" * len(header) + "|")
throughput = {}
for w in [w for w in "abcfde" if w in workloads]:
    runs = {t: json.load(open(f"results/ycsb-{t}-{w}-run-{stamp}.json"))["phases"][0] for t in targets}
    lat = lambda p: "; ".join(f"{k} {v['avg_us']:.0f} / {v['p99_us']}" for k, v in p["operations"].items())
    row = [w.upper()] + [f"{runs[t]['ops_per_sec']:,.0f}" for t in targets]
    for a, b in ratios:
        row.append(f"{runs[a]['ops_per_sec'] / max(runs[b]['ops_per_sec'], 1e-9):.2f}x")
    row += [lat(runs[t]) for t in targets]
    print("| " + " | ".join(row) + " |")
    throughput[w] = {t: runs[t]["ops_per_sec"] for t in targets}

# Throughput per workload: a group of bars per workload, a bar per target.
colours = ["steelblue", "darkorange", "seagreen", "crimson"]
top = max([v for per in throughput.values() for v in per.values()] + [1e-9]) * 1.1
W, H, pad, bar = 80 + 90 * len(throughput) * len(targets) // 2 + 120, 360, 60, 18
W = max(W, 560)
group = (W - 2 * pad) / max(len(throughput), 1)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{pad}" y="20">YCSB throughput per workload (ops/s), {records} records, {threads} client tasks</text>',
       f'<line x1="{pad}" y1="{H - pad}" x2="{W - pad}" y2="{H - pad}" stroke="black"/>']
for i, (w, per) in enumerate(throughput.items()):
    x0 = pad + i * group + (group - bar * len(targets)) / 2
    out.append(f'<text x="{pad + i * group + group / 2:.1f}" y="{H - pad + 16}" text-anchor="middle">{w.upper()}</text>')
    for j, t in enumerate(targets):
        h = per[t] / top * (H - 2 * pad)
        x = x0 + j * bar
        out.append(f'<rect x="{x:.1f}" y="{H - pad - h:.1f}" width="{bar - 2}" height="{h:.1f}" fill="{colours[j % 4]}"/>')
        out.append(f'<text x="{x + bar / 2:.1f}" y="{H - pad - h - 3:.1f}" font-size="9" text-anchor="middle">{per[t] / 1000:.0f}k</text>')
for j, t in enumerate(targets):
    out.append(f'<text x="{pad + 110 * j}" y="{H - pad + 40}" fill="{colours[j % 4]}">{t}</text>')
out.append("</svg>")
plot = f"results/ycsb-throughput-{stamp}.svg"
open(plot, "w").write("\n".join(out) + "\n")
print(f"plot: {plot}; each run's timeline: results/ycsb-<target>-<workload>-run-{stamp}.svg")
PY
