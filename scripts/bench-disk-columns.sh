#!/usr/bin/env bash
# A table whose attribute is kept on disk (STORAGE DISK) against the same
# table in memory, with `latsdb bench flex` against one `latsdb start`, in
# alternating rounds: batched key reads and updates. The page cache holds
# the whole disk table (the "fully cached" case); with CACHE_MB smaller than
# the table it measures reads that miss. Prints medians, the disk/memory
# ratio and the page-cache hit rate; writes results/disk-columns-<time>.json.
# DIRECT=on reads and writes the tablespace with O_DIRECT, so that reads
# that miss the page cache go to the device instead of the OS page cache.
#
#   scripts/bench-disk-columns.sh [rounds=3] [seconds=10]
#   ROWS=1000000 SIZE=100 CACHE_MB=512 DIRECT=off scripts/bench-disk-columns.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
ROWS=${ROWS:-1000000}
SIZE=${SIZE:-100}
CACHE_MB=${CACHE_MB:-512}
DIRECT=${DIRECT:-off}
source scripts/lib.sh

start_latsdb 2 --disk-page-cache-mb "$CACHE_MB" --disk-direct-io "$DIRECT"
flex() { # table disk-attributes phase round
  $BIN bench flex --mgmd "$MGMD" --table "$1" --disk-attributes "$2" --rows "$ROWS" --attribute-size "$SIZE" \
    --phases "$3" --warmup 2 --duration "$SECS" --cooldown 0.5 --output "$WORK/$1-$3-$4.json" > "$WORK/$1-$3-$4.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['phases'][0]; print(p['ops_per_sec'], p['failed_ops'], p['batch_latency_us']['p50'], p['batch_latency_us']['p99'])" "$WORK/$1-$3-$4.json"
}
echo "== loading $ROWS rows of $SIZE bytes into flex_memory and flex_disk"
flex flex_memory 0 insert 0 | sed 's/^/flex_memory insert: /'
flex flex_disk 1 insert 0 | sed 's/^/flex_disk insert: /'

declare -a MR MU DR DU
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  for phase in read update; do
    read -r ops failed p50 p99 < <(flex flex_memory 0 "$phase" "$r")
    echo "memory $phase: $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
    [ "$phase" = read ] && MR+=("$ops") || MU+=("$ops")
    read -r ops failed p50 p99 < <(flex flex_disk 1 "$phase" "$r")
    echo "disk   $phase: $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
    [ "$phase" = read ] && DR+=("$ops") || DU+=("$ops")
  done
done
$BIN mgm --mgmd "$MGMD" report-memory | tee "$WORK/memory.txt"

python3 - "$STAMP" "$ROWS" "$SIZE" "$CACHE_MB" "$DIRECT" "${MR[*]}" "${DR[*]}" "${MU[*]}" "${DU[*]}" "$WORK/memory.txt" <<'PY'
import json, statistics, sys, os
stamp, rows, size, cache, direct = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
mr, dr, mu, du = [list(map(float, a.split())) for a in sys.argv[6:10]]
m = statistics.median
res = {"unix_time": int(stamp), "cpus": os.cpu_count(), "rows": rows, "attribute_bytes": size, "page_cache_mb": cache, "direct_io": direct,
       "memory_read_ops": mr, "disk_read_ops": dr, "memory_update_ops": mu, "disk_update_ops": du,
       "read_ratio": m(dr) / m(mr), "update_ratio": m(du) / m(mu), "report_memory": open(sys.argv[10]).read()}
json.dump(res, open(f"results/disk-columns-{stamp}.json", "w"), indent=2)
print()
print(f"{rows} rows, one {size}-byte attribute, page cache {cache} MiB per data node, O_DIRECT {direct}")
print("| workload | in memory (median ops/s) | on disk (median ops/s) | disk/memory |")
print("|---|---|---|---|")
print(f"| batched reads | {m(mr):,.0f} | {m(dr):,.0f} | {m(dr)/m(mr):.2f}x |")
print(f"| batched updates (2 replicas) | {m(mu):,.0f} | {m(du):,.0f} | {m(du)/m(mu):.2f}x |")
PY
