#!/usr/bin/env bash
# sysbench against latsdb (`latsdb start`, 2 replicas) and, in the same run,
# against Debian's MariaDB (InnoDB, innodb_flush_log_at_trx_commit=1, same
# tables), alternating per workload. Prints a Markdown table with the ratio
# and leaves JSON + SVG per system and workload in results/.
#
#   scripts/bench-sysbench-vs-mariadb.sh             # SIZE=100000 TIME=20 THREADS=1,4,16,32
#   SIZE=10000 TIME=5 THREADS=4 scripts/bench-sysbench-vs-mariadb.sh   # quick
#   WORKLOADS="noop_20 oltp_read_write" THREADS=16 scripts/bench-sysbench-vs-mariadb.sh
#
# noop_20 is 20 `SELECT 1` per transaction, as many statements as an
# oltp_read_write transaction (18 + BEGIN + COMMIT) but touching no table:
# its TPS is the most any server could reach on oltp_read_write here, with
# sysbench on the same cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh bench
source scripts/lib.sh
SIZE=${SIZE:-100000}
TIME=${TIME:-20}
THREADS=${THREADS:-1,4,16,32}
NO_RANGES=(--simple-ranges 0 --order-ranges 0 --distinct-ranges 0 --sum-ranges 0)
declare -A KNOBS=(
  [oltp_read_write]="--workload rw"
  [oltp_read_only]="--workload ro"
  [oltp_point_select]="--workload ro --skip-trx --point-selects 1 ${NO_RANGES[*]}"
  [key_lookups_10x100]="--workload ro --point-selects 0 --in-selects 10 --in-keys 100 ${NO_RANGES[*]}"
  [filtered_ranges_10]="--workload ro --point-selects 0 --filtered-ranges 10 ${NO_RANGES[*]}"
  [noop_20]="--workload ro --skip-trx --point-selects 0 --noop-selects 20 ${NO_RANGES[*]}"
)
# shellcheck disable=SC2206
ORDER=(${WORKLOADS:-oltp_read_write oltp_read_only oltp_point_select key_lookups_10x100 filtered_ranges_10 noop_20})
for w in "${ORDER[@]}"; do
  [[ -n ${KNOBS[$w]:-} ]] || { echo "unknown workload '$w' in WORKLOADS; known: ${!KNOBS[*]}" >&2; exit 2; }
done

start_mariadb sb sb
mariadb --socket="$MDB/sock" -u root -e "CREATE DATABASE sbtest"

start_latsdb 2

COMMON=(--table-size "$SIZE" --time "$TIME" --threads "$THREADS")
prepared_latsdb=0
prepared_mariadb=0
for w in "${ORDER[@]}"; do
  for sys in latsdb mariadb; do
    echo "== $w on $sys"
    if [[ $sys == latsdb ]]; then
      target=(--sql "$SQL" --label latsdb)
      skip=(); [[ $prepared_latsdb == 1 ]] && skip=(--skip-prepare); prepared_latsdb=1
    else
      target=(--sql "127.0.0.1:$MPORT" --user sb --password sb --label mariadb)
      skip=(); [[ $prepared_mariadb == 1 ]] && skip=(--skip-prepare); prepared_mariadb=1
    fi
    # shellcheck disable=SC2086
    $BIN bench sysbench "${target[@]}" "${COMMON[@]}" "${skip[@]}" ${KNOBS[$w]} \
      --output "results/sysbench-$w-$sys-$STAMP.json" | tee "$WORK/$w-$sys.txt"
  done
done

python3 - "$STAMP" "${ORDER[@]}" <<'PY'
import json, sys
stamp, workloads = sys.argv[1], sys.argv[2:]
print("\n| workload | threads | latsdb TPS | MariaDB TPS | ratio | latsdb p95 ms | MariaDB p95 ms |")
print("|---|---|---|---|---|---|---|")
for w in workloads:
    a = json.load(open(f"results/sysbench-{w}-latsdb-{stamp}.json"))["runs"]
    b = json.load(open(f"results/sysbench-{w}-mariadb-{stamp}.json"))["runs"]
    for x, y in zip(a, b):
        ratio = x["tps"] / y["tps"] if y["tps"] else float("inf")
        print(f"| {w} | {x['threads']} | {x['tps']:,.0f} | {y['tps']:,.0f} | {ratio:.2f}x | {x['p95_ms']:.2f} | {y['p95_ms']:.2f} |")
PY
