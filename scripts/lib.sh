# Shared by the benchmark scripts (sourced, not run): builds latsdb, makes a
# scratch folder that is removed on exit together with every process started
# through it, and starts the embedded cluster.
#
#   source scripts/lib.sh
#   start_latsdb REPLICAS      # sets MGMD
#   load_rows ROWS             # flex insert phase

cargo build --release -p latsdb --quiet
BIN=target/release/latsdb
WORK=$(mktemp -d)
mkdir -p results
STAMP=$(date +%s)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_latsdb() {
  echo "== starting latsdb (mgmd + 2 data nodes, $1 replica(s))"
  $BIN start --dir "$WORK/latsdb" --mgmd-port 0 --replicas "$1" > "$WORK/start.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do grep -q "Press Ctrl-C" "$WORK/start.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "Press Ctrl-C" "$WORK/start.log" || { cat "$WORK/start.log"; exit 1; }
  MGMD=$(cat "$WORK/latsdb/mgmd.addr")
}

load_rows() {
  echo "== loading $1 rows of 100 bytes"
  $BIN bench flex --mgmd "$MGMD" --rows "$1" --phases insert --output "$WORK/load.json" | grep insert
}
