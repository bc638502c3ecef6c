#!/usr/bin/env bash
# REST batch lookups (`latsdb bench lookup`, batches of 100 pk-reads of rows
# with 5 INT columns) against `latsdb start` (2 replicas), side by side with
# Redis MGET of 100 keys (redis-benchmark, pipelined) on the same machine,
# in alternating rounds. Also measures the CPU seconds the REST node and the
# data nodes use per million lookups, and p99 batch latency at half of the
# peak request rate (one run per round, at half the median peak; the
# median p99 is reported). Prints a Markdown table; writes
# results/lookup-vs-redis-<time>.json.
#
#   scripts/bench-lookup-vs-redis.sh [rounds=3] [seconds=10]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
ROWS=100000
CLIENTS=16
scripts/install-deps.sh bench
source scripts/lib.sh
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_latsdb 2
echo "== starting redis-server"
RPORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --daemonize no > "$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=($REDIS_PID)
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "== loading $ROWS rows into latsdb and Redis"
$BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows $ROWS --warmup 0 --duration 1 --output "$WORK/load.json" > /dev/null
# The same key set in Redis: key:<12-digit id> (redis-benchmark's __rand_int__
# format) with the five integers as the value.
python3 - $ROWS <<'PY' | redis-cli -p "$RPORT" --pipe > /dev/null
import sys
out = sys.stdout
for i in range(int(sys.argv[1])):
    key = f"key:{i:012d}"
    value = ",".join(str((i * 31 + c) % 1000000) for c in range(1, 6))
    out.write(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n${len(value)}\r\n{value}\r\n")
PY
MGET_KEYS=$(for _ in $(seq 1 100); do printf 'key:__rand_int__ '; done)
redis_cpu() { python3 -c "import os,sys; f=open(f'/proc/{sys.argv[1]}/stat').read(); x=f[f.rindex(')')+2:].split(); print((int(x[11])+int(x[12]))/os.sysconf('SC_CLK_TCK'))" "$REDIS_PID"; }

lookup() { # round [rate] -> lookups/s p50 p95 p99 failed requests/s
  $BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows $ROWS --no-load --clients $CLIENTS --warmup 1 \
    --duration "$SECS" --rate "${2:-0}" --output "$WORK/lookup-$1.json" > "$WORK/lookup-$1.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); l=d['batch_latency_us']; print(d['lookups_per_sec'], l['p50'], l['p95'], l['p99'], d['failed_lookups'], d['requests_per_sec'], d['lookups'])" "$WORK/lookup-$1.json"
}

declare -a LL RL CPU_REST CPU_DN CPU_REDIS PEAK_RPS HALF
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  rest0=$(cpu_seconds " rest "); dn0=$(cpu_seconds "datanode")
  read -r lps p50 p95 p99 failed rps total < <(lookup "$r")
  rest1=$(cpu_seconds " rest "); dn1=$(cpu_seconds "datanode")
  LL+=("$lps"); PEAK_RPS+=("$rps")
  # CPU per million lookups (the warm-up second included in both counts).
  CPU_REST+=("$(python3 -c "print(($rest1-$rest0)/($lps*($SECS+1))*1e6)")")
  CPU_DN+=("$(python3 -c "print(($dn1-$dn0)/($lps*($SECS+1))*1e6)")")
  echo "latsdb lookups: $lps/s (failed $failed; batch p50 ${p50}us p95 ${p95}us p99 ${p99}us); CPU s per 1M lookups: rest ${CPU_REST[-1]}, data nodes ${CPU_DN[-1]}"
  red0=$(redis_cpu)
  n=$((SECS * 15000))
  rps=$(redis-benchmark -h 127.0.0.1 -p "$RPORT" --csv -n $n -c $CLIENTS -P 10 -r $ROWS mget $MGET_KEYS | tail -1 | tr -d '"' | cut -d, -f2)
  red1=$(redis_cpu)
  RL+=("$(python3 -c "print($rps*100)")")
  CPU_REDIS+=("$(python3 -c "print(($red1-$red0)/($n*100)*1e6)")")
  echo "redis MGET x100: $rps requests/s = ${RL[-1]} keys/s; CPU s per 1M keys: ${CPU_REDIS[-1]}"
done
RATE=$(python3 -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])) / 2)" "${PEAK_RPS[@]}")
for r in $(seq 1 "$ROUNDS"); do
  echo "== half load, round $r/$ROUNDS: $RATE requests/s"
  read -r hlps hp50 hp95 hp99 hfailed hrps htotal < <(lookup "half-$r" "$RATE")
  HALF+=("$hlps,$hp50,$hp95,$hp99")
  echo "latsdb at half load: $hlps lookups/s, batch p50 ${hp50}us p95 ${hp95}us p99 ${hp99}us"
done

python3 - "$STAMP" "${LL[*]}" "${RL[*]}" "${CPU_REST[*]}" "${CPU_DN[*]}" "${CPU_REDIS[*]}" "${HALF[*]}" <<'PY'
import json, statistics, sys, os
stamp = sys.argv[1]
ll, rl, cr, cd, cred = [list(map(float, a.split())) for a in sys.argv[2:7]]
half = [list(map(float, h.split(","))) for h in sys.argv[7].split()]
m = statistics.median
# The round with the median p99 stands for the half-load figures.
hlps, hp50, hp95, hp99 = sorted(half, key=lambda h: h[3])[len(half) // 2]
res = {"unix_time": int(stamp), "cpus": os.cpu_count(), "rounds": len(ll), "latsdb_lookups_per_sec": ll,
       "redis_mget_keys_per_sec": rl, "cpu_s_per_million_lookups_rest": cr, "cpu_s_per_million_lookups_datanodes": cd,
       "cpu_s_per_million_keys_redis": cred, "ratio": m(ll) / m(rl),
       "half_load": {"lookups_per_sec": hlps, "batch_p50_us": hp50, "batch_p95_us": hp95, "batch_p99_us": hp99},
       "half_load_rounds": [{"lookups_per_sec": h[0], "batch_p50_us": h[1], "batch_p95_us": h[2], "batch_p99_us": h[3]} for h in half]}
json.dump(res, open(f"results/lookup-vs-redis-{stamp}.json", "w"), indent=2)
print()
print("| measure | latsdb REST (median) | Redis MGET x100 (median) | ratio |")
print("|---|---|---|---|")
print(f"| keys looked up per second | {m(ll):,.0f} | {m(rl):,.0f} | {m(ll)/m(rl):.2f} |")
print(f"| CPU seconds per million lookups | REST node {m(cr):.2f}, data nodes {m(cd):.2f} | {m(cred):.2f} | |")
print(f"| REST lookups per REST-node CPU second | {1e6/m(cr):,.0f} | | RonDB published: ~220,000 |")
print(f"\nhalf of peak load (round with the median p99): {hlps:,.0f} lookups/s, batch latency p50 {hp50:.0f} us, p95 {hp95:.0f} us, p99 {hp99:.0f} us")
print("half load per round (p50/p95/p99 us): " + "; ".join(f"{h[1]:.0f}/{h[2]:.0f}/{h[3]:.0f}" for h in half))
print(f"per round: latsdb {ll}, redis {rl}")
PY
