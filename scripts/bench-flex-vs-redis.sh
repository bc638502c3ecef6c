#!/usr/bin/env bash
# Batched key reads (and updates) of `latsdb bench flex` against `latsdb
# start`, side by side with redis-benchmark against Debian's redis-server on
# the same machine, in alternating rounds; prints medians and ratios as a
# Markdown table and writes results/flex-vs-redis-<time>.json.
#
#   scripts/bench-flex-vs-redis.sh [rounds=3] [seconds=10]
#   REPLICAS=1 scripts/bench-flex-vs-redis.sh    # latsdb with one replica (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
ROWS=1000000
REPLICAS=${REPLICAS:-2}
scripts/install-deps.sh bench
source scripts/lib.sh

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_latsdb "$REPLICAS"

echo "== starting redis-server"
RPORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --daemonize no > "$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

load_rows $ROWS
redis-benchmark -h 127.0.0.1 -p "$RPORT" -t set -n 5000000 -c 16 -P 50 -r $ROWS -d 100 -q | tail -1

flex() { # phase round
  $BIN bench flex --mgmd "$MGMD" --rows $ROWS --phases "$1" --warmup 2 --duration "$SECS" --cooldown 0.5 \
    --output "$WORK/flex-$1-$2.json" > "$WORK/flex-$1-$2.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['phases'][0]; print(p['ops_per_sec'], p['failed_ops'], p['batch_latency_us']['p50'], p['batch_latency_us']['p99'])" "$WORK/flex-$1-$2.json"
}
redis() { # test n
  redis-benchmark -h 127.0.0.1 -p "$RPORT" --csv -t "$1" -n "$2" -c 16 -P 100 -r $ROWS -d 100 | tail -1 | tr -d '"' | cut -d, -f2
}

declare -a LR LW RR RW
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  read -r ops failed p50 p99 < <(flex read "$r"); LR+=("$ops"); echo "latsdb read:   $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
  x=$(redis get 8000000); RR+=("$x"); echo "redis GET:     $x ops/s"
  read -r ops failed p50 p99 < <(flex update "$r"); LW+=("$ops"); echo "latsdb update: $ops ops/s (failed $failed, batch p50 ${p50}us p99 ${p99}us)"
  x=$(redis set 8000000); RW+=("$x"); echo "redis SET:     $x ops/s"
done

python3 - "$STAMP" "$REPLICAS" "${LR[*]}" "${RR[*]}" "${LW[*]}" "${RW[*]}" <<'PY'
import json, statistics, sys, os, platform
stamp, replicas, lr, rr, lw, rw = sys.argv[1], int(sys.argv[2]), *[list(map(float, a.split())) for a in sys.argv[3:]]
m = statistics.median
res = {"unix_time": int(stamp), "cpus": os.cpu_count(), "rounds": len(lr), "latsdb_replicas": replicas,
       "latsdb_read_ops": lr, "redis_get_ops": rr, "latsdb_update_ops": lw, "redis_set_ops": rw,
       "read_ratio": m(lr) / m(rr), "write_ratio": m(lw) / m(rw)}
json.dump(res, open(f"results/flex-vs-redis-{stamp}.json", "w"), indent=2)
print()
print(f"latsdb with {replicas} replica(s)")
print("| workload | latsdb (median ops/s) | Redis (median ops/s) | ratio |")
print("|---|---|---|---|")
print(f"| batched reads: flex read, 100 keys/batch, 16 batches in flight vs GET -P 100 -c 16 | {m(lr):,.0f} | {m(rr):,.0f} | {m(lr)/m(rr):.2f} |")
print(f"| batched writes: flex update, 100 keys/batch, 16 in flight vs SET -P 100 -c 16 | {m(lw):,.0f} | {m(rw):,.0f} | {m(lw)/m(rw):.2f} |")
print(f"\nper round: latsdb read {lr}, redis GET {rr}, latsdb update {lw}, redis SET {rw}")
PY
