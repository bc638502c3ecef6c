#!/usr/bin/env bash
# Where the tail of REST batch latency comes from: runs `latsdb bench lookup`
# (batches of 100 pk-reads, 16 clients) at a fixed request rate against
# `latsdb start` (2 replicas) while `perf` records every context switch on
# the machine, then lines each request up with the CPU bursts of processes
# that are not part of the benchmark (kernel threads such as kdamond, other
# tenants' work; ksoftirqd and perf itself count as the benchmark's).
# Prints the latency of requests that overlapped such a burst and of those
# that did not; writes results/lookup-stalls-<time>.json.
#
#   scripts/bench-lookup-stalls.sh [rate=half of a 5 s peak run] [seconds=10]
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-}
SECS=${2:-10}
ROWS=100000
scripts/install-deps.sh bench
source scripts/lib.sh
command -v perf >/dev/null || { echo "perf is needed (Debian package linux-perf)" >&2; exit 1; }

start_latsdb 2
echo "== loading $ROWS rows"
$BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows $ROWS --warmup 0 --duration 1 --output "$WORK/load.json" > /dev/null
if [[ -z "$RATE" ]]; then
  echo "== peak run (5 s) to find half load"
  $BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows $ROWS --no-load --warmup 1 --duration 5 --output "$WORK/peak.json" > /dev/null
  RATE=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['requests_per_sec']/2))" "$WORK/peak.json")
fi
echo "== $RATE requests/s for $SECS s with a scheduler trace"
$BIN bench lookup --mgmd "$MGMD" --rest "$REST" --rows $ROWS --no-load --warmup 1 --duration "$SECS" --rate "$RATE" \
  --output "$WORK/run.json" --latency-log "$WORK/latency.log" > "$WORK/run.txt" &
LOADGEN=$!
PIDS+=($LOADGEN)
sleep 1.2
OURS="$LOADGEN $LAUNCHER $(pgrep -P "$LAUNCHER" | tr '\n' ' ')"
perf record -q -e sched:sched_switch -a -k CLOCK_MONOTONIC -o "$WORK/sched.data" -- sleep "$SECS" > /dev/null 2>&1
wait $LOADGEN
perf sched timehist -i "$WORK/sched.data" 2> /dev/null > "$WORK/timehist.txt"

python3 - "$WORK/latency.log" "$WORK/timehist.txt" "$OURS" "$RATE" "$STAMP" <<'PY'
import bisect, json, os, re, sys
log_path, hist_path, ours, rate, stamp = sys.argv[1:6]
ours = {int(p) for p in ours.split()}
requests = []  # (sent s, latency s)
for line in open(log_path):
    sent, micros = line.split()
    requests.append((int(sent) / 1e9, int(micros) / 1e6))
# perf sched timehist: time [cpu] task[tid/pid] wait delay run (ms)
row = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.*?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
bursts, foreign_ms, by_task, first, last = [], 0.0, {}, None, None
for line in open(hist_path):
    m = row.match(line)
    if not m:
        continue
    end, task, pid, run = float(m[1]), m[3].strip(), int(m[5] or m[4]), float(m[8]) / 1e3
    first = end if first is None else first
    last = end
    # ksoftirqd mostly carries the benchmark's own loopback packets, and perf
    # is this measurement: both count as the benchmark's, not as others'.
    if pid in ours or pid == 0 or task.startswith(("<idle>", "ksoftirqd", "perf")):
        continue
    foreign_ms += run * 1e3
    name = re.sub(r"\d+", "", task)
    by_task[name] = by_task.get(name, 0.0) + run * 1e3
    if run >= 0.0005:
        bursts.append((end - run, end))
if first is None or not requests:
    sys.exit("no scheduler trace or no requests: is perf allowed to trace (perf_event_paranoid)?")
window = [(t, l) for t, l in requests if first <= t <= last]
bursts.sort()
starts = [b[0] for b in bursts]
AFTER = 0.02  # a backlog drains for a while after the CPU comes back

def near_burst(sent, latency):
    # any burst that starts before the answer came and ends within AFTER before the send
    i = bisect.bisect_left(starts, sent + latency)
    return any(e > sent - AFTER for s, e in bursts[max(0, i - 64):i])

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1e3 if xs else float("nan")

hit = [l for t, l in window if near_burst(t, l)]
clean = [l for t, l in window if not near_burst(t, l)]
allv = [l for _, l in window]
slow = [(t, l) for t, l in window if l > 0.002]
slow_near = sum(1 for t, l in slow if near_burst(t, l))
secs = last - first
print()
print(f"Trace {secs:.1f} s at {rate} requests/s: other processes ran {foreign_ms:.0f} ms of CPU "
      f"({foreign_ms / secs / 10:.2f}% of one CPU), {len(bursts)} bursts of 0.5 ms or more.")
print("Other processes by CPU time: " + ", ".join(f"{n} {ms:.0f} ms" for n, ms in sorted(by_task.items(), key=lambda kv: -kv[1])[:5]))
print()
print("| requests | count | p50 ms | p95 ms | p99 ms |")
print("|---|---|---|---|---|")
for label, xs in (("all", allv), ("overlapping another process's burst, or within 20 ms after one", hit), ("the others", clean)):
    print(f"| {label} | {len(xs)} | {pct(xs, .5):.2f} | {pct(xs, .95):.2f} | {pct(xs, .99):.2f} |")
print()
print(f"Requests over 2 ms: {len(slow)} ({len(slow) / max(1, len(window)) * 100:.2f}%), "
      f"{slow_near} of them overlapping or just after another process's burst.")
os.makedirs("results", exist_ok=True)
out = f"results/lookup-stalls-{stamp}.json"
json.dump({"unix_time": int(stamp), "rate": float(rate), "trace_seconds": secs, "foreign_cpu_ms": foreign_ms,
           "foreign_bursts": len(bursts), "foreign_by_task_ms": by_task,
           "all": {"count": len(allv), "p50_ms": pct(allv, .5), "p95_ms": pct(allv, .95), "p99_ms": pct(allv, .99)},
           "near_foreign_burst": {"count": len(hit), "p50_ms": pct(hit, .5), "p99_ms": pct(hit, .99)},
           "others": {"count": len(clean), "p50_ms": pct(clean, .5), "p95_ms": pct(clean, .95), "p99_ms": pct(clean, .99)},
           "over_2ms": len(slow), "over_2ms_near_foreign_burst": slow_near}, open(out, "w"), indent=2)
print(f"results written to {out}")
PY
