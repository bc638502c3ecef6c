# Shared by the benchmark scripts (sourced, not run): builds latsdb, makes a
# scratch folder that is removed on exit together with every process started
# through it, and starts the embedded cluster.
#
#   source scripts/lib.sh
#   start_latsdb REPLICAS [latsdb start flags...]   # sets MGMD, REST, SQL and LAUNCHER (pid)
#   stop_latsdb                # stops it (SIGTERM) and waits
#   start_mariadb USER PASSWORD   # MariaDB in a throwaway datadir, a user
#                              # with every grant; sets MPORT and MDB
#   load_rows ROWS             # flex insert phase
#   datanode_pid ID            # pid of a data node, from `mgm show`
#   start_mixed_timeline ROWS SECS CSV   # flex read/update mix in the background
#                              # with a per-second CSV; sets FLEX (pid)
#   ab_rounds FN DEFAULT_ROUNDS   # A/B scripts: FN once per round and build

cargo build --release -p latsdb --quiet
BIN=target/release/latsdb
WORK=$(mktemp -d)
mkdir -p results
STAMP=$(date +%s)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# Idle CPUs poll instead of halting for the whole run, the peers' rounds
# included: latsdb's data nodes ask for that themselves while they run
# (`idle_poll`, docs/configuration.md), so Redis and MariaDB are measured
# under the same machine setting. IDLE_POLL=off runs everything without it.
IDLE_POLL=${IDLE_POLL:-on}
if [ "$IDLE_POLL" = on ] && [ -w /dev/cpu_dma_latency ]; then
  python3 -c 'import os, signal, struct; fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY); os.write(fd, struct.pack("i", 0)); signal.pause()' &
  PIDS+=($!)
fi

start_latsdb() {
  local replicas=$1
  shift
  echo "== starting latsdb (mgmd + 2 data nodes, $replicas replica(s)) $*"
  rm -rf "$WORK/latsdb"
  local poll=()
  # Builds older than the flag (scripts/ab-*.sh compare with them) lack it.
  if $BIN start --help | grep -q -- --idle-poll; then poll=(--idle-poll "$IDLE_POLL"); fi
  $BIN start --dir "$WORK/latsdb" --mgmd-port 0 --rest-port 0 --sql-port 0 --replicas "$replicas" \
    "${poll[@]}" "$@" > "$WORK/start.log" 2>&1 &
  LAUNCHER=$!
  PIDS+=($LAUNCHER)
  for _ in $(seq 1 300); do grep -q "Press Ctrl-C" "$WORK/start.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "Press Ctrl-C" "$WORK/start.log" || { cat "$WORK/start.log"; exit 1; }
  MGMD=$(cat "$WORK/latsdb/mgmd.addr")
  REST=$(cat "$WORK/latsdb/rest.addr" 2>/dev/null || true)
  SQL=$(cat "$WORK/latsdb/sql.addr" 2>/dev/null || true)
}

# The SQL peer as docs/benchmarks.md runs it: InnoDB with a 2 GiB buffer
# pool, its log flushed at every commit, on a free loopback port.
start_mariadb() {
  echo "== starting MariaDB (throwaway datadir, flush at every commit)"
  MDB=$WORK/mariadb
  mariadb-install-db --user=root --datadir="$MDB" --skip-test-db > "$WORK/mariadb-install.log" 2>&1
  MPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mariadbd --user=root --datadir="$MDB" --port="$MPORT" --bind-address=127.0.0.1 --socket="$MDB/sock" \
    --innodb-buffer-pool-size=2G --innodb-log-file-size=512M --innodb-flush-log-at-trx-commit=1 \
    --skip-name-resolve --max-connections=500 > "$WORK/mariadbd.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do [[ -S "$MDB/sock" ]] && break; sleep 0.2; done
  [[ -S "$MDB/sock" ]] || { cat "$WORK/mariadbd.log"; echo "MariaDB did not start" >&2; exit 1; }
  mariadb --socket="$MDB/sock" -u root -e "CREATE USER $1@'%' IDENTIFIED BY '$2'; GRANT ALL ON *.* TO $1@'%'"
}

stop_latsdb() {
  kill -TERM "$LAUNCHER" 2>/dev/null || true
  wait "$LAUNCHER" 2>/dev/null || true
}

# CPU seconds used so far by the launcher's children whose command line
# contains $2 (e.g. "datanode" or " rest "): with $1 = total, user + system
# summed over the processes; with $1 = threads, per thread kind, one "name
# user system" line each (thread names lose their digits: "shard-3" and
# "shard-4" are both "shard-").
proc_cpu() {
  python3 - "$LAUNCHER" "$1" "$2" <<'PY'
import os, re, sys
launcher, mode, role = sys.argv[1:4]
tick = os.sysconf("SC_CLK_TCK")

def times(stat):
    f = stat[stat.rindex(")") + 2:].split()
    return f, int(f[11]) / tick, int(f[12]) / tick

total, kinds = 0.0, {}
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        continue
    fields, user, system = times(stat)
    if fields[1] != launcher or role not in f" {cmd} ":
        continue
    total += user + system
    for tid in os.listdir(f"/proc/{pid}/task") if mode == "threads" else []:
        try:
            t = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = re.sub(r"[0-9]+", "", t[t.index("(") + 1:t.rindex(")")])
        _, u, s = times(t)
        ku, ks = kinds.get(name, (0.0, 0.0))
        kinds[name] = (ku + u, ks + s)
if mode == "threads":
    for name, (u, s) in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name} {u:.2f} {s:.2f}")
else:
    print(total)
PY
}

cpu_seconds() { proc_cpu total "$1"; }
thread_cpu() { proc_cpu threads "$1"; }

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

# The rounds of an A/B script (scripts/ab-*.sh): runs the function named $1
# once per round and per build, in the order ORDER ("old new"), with r (the
# round), v (old or new) and BIN (OLD or NEW) set. ROUNDS rounds, $2 unless
# set.
ab_rounds() {
  for r in $(seq 1 "${ROUNDS:-$2}"); do
    for v in ${ORDER:-old new}; do
      if [ "$v" = old ]; then BIN=$OLD; else BIN=$NEW; fi
      echo "== round $r: $v ($BIN)"
      "$1"
    done
  done
}
