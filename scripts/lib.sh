# Shared by the benchmark scripts (sourced, not run): builds latsdb, makes a
# scratch folder that is removed on exit together with every process started
# through it, and starts the embedded cluster.
#
#   source scripts/lib.sh
#   start_latsdb REPLICAS [latsdb start flags...]   # sets MGMD, REST, SQL and LAUNCHER (pid)
#   stop_latsdb                # stops it (SIGTERM) and waits
#   load_rows ROWS             # flex insert phase
#   datanode_pid ID            # pid of a data node, from `mgm show`
#   start_mixed_timeline ROWS SECS CSV   # flex read/update mix in the background
#                              # with a per-second CSV; sets FLEX (pid)

cargo build --release -p latsdb --quiet
BIN=target/release/latsdb
WORK=$(mktemp -d)
mkdir -p results
STAMP=$(date +%s)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_latsdb() {
  local replicas=$1
  shift
  echo "== starting latsdb (mgmd + 2 data nodes, $replicas replica(s)) $*"
  rm -rf "$WORK/latsdb"
  $BIN start --dir "$WORK/latsdb" --mgmd-port 0 --rest-port 0 --sql-port 0 --replicas "$replicas" "$@" > "$WORK/start.log" 2>&1 &
  LAUNCHER=$!
  PIDS+=($LAUNCHER)
  for _ in $(seq 1 300); do grep -q "Press Ctrl-C" "$WORK/start.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "Press Ctrl-C" "$WORK/start.log" || { cat "$WORK/start.log"; exit 1; }
  MGMD=$(cat "$WORK/latsdb/mgmd.addr")
  REST=$(cat "$WORK/latsdb/rest.addr" 2>/dev/null || true)
  SQL=$(cat "$WORK/latsdb/sql.addr" 2>/dev/null || true)
}

stop_latsdb() {
  kill -TERM "$LAUNCHER" 2>/dev/null || true
  wait "$LAUNCHER" 2>/dev/null || true
}

# CPU seconds (user + system) used so far by the launcher's children whose
# command line contains $1 (e.g. "datanode" or " rest "), summed.
cpu_seconds() {
  python3 - "$LAUNCHER" "$1" <<'PY'
import os, sys
launcher, role = sys.argv[1], sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
total = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        continue
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[1] == launcher and role in f" {cmd} ":
        total += (int(fields[11]) + int(fields[12])) / tick
print(total)
PY
}

# CPU seconds per thread kind (user/system) of the launcher's children whose
# command line contains $1, summed over processes; thread names lose their
# digits ("shard-3" and "shard-4" are both "shard-"). One "name user system"
# line per kind.
thread_cpu() {
  python3 - "$LAUNCHER" "$1" <<'PY'
import os, re, sys
launcher, role = sys.argv[1], sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
kinds = {}
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        continue
    if stat[stat.rindex(")") + 2:].split()[1] != launcher or role not in f" {cmd} ":
        continue
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            t = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = re.sub(r"[0-9]+", "", t[t.index("(") + 1:t.rindex(")")])
        f = t[t.rindex(")") + 2:].split()
        u, s = kinds.get(name, (0.0, 0.0))
        kinds[name] = (u + int(f[11]) / tick, s + int(f[12]) / tick)
for name, (u, s) in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name} {u:.2f} {s:.2f}")
PY
}

load_rows() {
  echo "== loading $1 rows of 100 bytes"
  $BIN bench flex --mgmd "$MGMD" --rows "$1" --phases insert --output "$WORK/load.json" | grep insert
}

datanode_pid() {
  $BIN mgm --mgmd "$MGMD" show | awk -v id="$1" '$1 == "id=" id {for(i=1;i<=NF;i++) if ($i ~ /^pid=/) {sub("pid=","",$i); print $i}}'
}

start_mixed_timeline() {
  $BIN bench flex --mgmd "$MGMD" --rows "$1" --phases mixed --warmup 0 --duration "$2" --cooldown 0 \
    --timeline "$3" --output "$WORK/mixed.json" > "$WORK/mixed.txt" 2>&1 &
  FLEX=$!
}
