#!/usr/bin/env bash
# What TLS on the native protocol costs: `latsdb bench flex` reads and
# replicated updates against `latsdb start` (2 data nodes, 2 replicas) and
# against `latsdb start --tls`, in alternating rounds (a fresh cluster per
# round and mode, loaded with the same rows); prints medians and the
# TLS/plain ratio as a Markdown table and writes results/tls-<time>.json.
#
#   scripts/bench-tls.sh [rounds=3] [seconds=10]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
ROWS=${ROWS:-1000000}
source scripts/lib.sh

flex() { # phase mode round
  $BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases "$1" --warmup 2 --duration "$SECS" --cooldown 0.5 \
    --output "$WORK/flex-$1-$2-$3.json" > "$WORK/flex-$1-$2-$3.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['phases'][0]; print(p['ops_per_sec'], p['failed_ops'], p['batch_latency_us']['p50'], p['batch_latency_us']['p99'])" "$WORK/flex-$1-$2-$3.json"
}

declare -a PR PW TR TW
for r in $(seq 1 "$ROUNDS"); do
  for mode in plain tls; do
    echo "== round $r/$ROUNDS: $mode"
    if [ "$mode" = tls ]; then
      start_latsdb 2 --tls
      export LATSDB_TLS_DIR="$WORK/latsdb/tls"
    else
      unset LATSDB_TLS_DIR
      start_latsdb 2
    fi
    load_rows $ROWS
    read -r ops failed p50 p99 < <(flex read $mode "$r")
    echo "$mode read:   $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
    if [ "$mode" = tls ]; then TR+=("$ops"); else PR+=("$ops"); fi
    read -r ops failed p50 p99 < <(flex update $mode "$r")
    echo "$mode update: $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
    if [ "$mode" = tls ]; then TW+=("$ops"); else PW+=("$ops"); fi
    stop_latsdb
  done
done
unset LATSDB_TLS_DIR

python3 - "$STAMP" "${PR[*]}" "${TR[*]}" "${PW[*]}" "${TW[*]}" <<'PY'
import json, statistics, sys, os
stamp, pr, tr, pw, tw = sys.argv[1], *[list(map(float, a.split())) for a in sys.argv[2:]]
m = statistics.median
res = {"unix_time": int(stamp), "cpus": os.cpu_count(), "rounds": len(pr),
       "plain_read_ops": pr, "tls_read_ops": tr, "plain_update_ops": pw, "tls_update_ops": tw,
       "read_ratio": m(tr) / m(pr), "update_ratio": m(tw) / m(pw)}
json.dump(res, open(f"results/tls-{stamp}.json", "w"), indent=2)
print()
print("| workload (2 data nodes, 2 replicas) | plain TCP (median ops/s) | TLS (median ops/s) | TLS / plain |")
print("|---|---|---|---|")
print(f"| flex read, 100 keys/batch, 16 batches in flight | {m(pr):,.0f} | {m(tr):,.0f} | {m(tr)/m(pr):.2f} |")
print(f"| flex update (replicated), 100 keys/batch, 16 in flight | {m(pw):,.0f} | {m(tw):,.0f} | {m(tw)/m(pw):.2f} |")
print(f"\nper round: plain read {pr}, TLS read {tr}, plain update {pw}, TLS update {tw}")
PY
