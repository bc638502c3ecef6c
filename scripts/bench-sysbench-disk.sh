#!/usr/bin/env bash
# sysbench's 1M-row prepare and 20 s of oltp_read_write (4 threads) on its
# unmodified schema against `latsdb start --default-column-storage disk`
# with a small data memory: its c and pad columns go to disk, id and k stay
# in memory. STORAGE=memory runs the same with every column in memory
# (where 1M rows do not fit 256 MiB). Prints the table, memory and
# tablespace use, and sysbench's summary.
#
#   scripts/bench-sysbench-disk.sh              # MEM=256 STORAGE=disk
#   MEM=256 STORAGE=memory scripts/bench-sysbench-disk.sh
set -euo pipefail
cd /work/main
scripts/install-deps.sh
source scripts/lib.sh
MEM=${MEM:-256}
start_latsdb 2 --data-memory-mb "$MEM" --default-column-storage "${STORAGE:-disk}"
HP=$(cat "$WORK/latsdb/sql.addr" 2>/dev/null || grep -oE "sql +[0-9.:]+" "$WORK/start.log" | awk '{print $2}')
H=${HP%:*}; P=${HP##*:}
mariadb -h "$H" -P "$P" -u root -e "CREATE DATABASE sbtest"
common=(--db-driver=mysql --mysql-host="$H" --mysql-port="$P" --mysql-user=root --mysql-db=sbtest --tables=1 --table-size=1000000)
start=$(date +%s)
sysbench oltp_read_write "${common[@]}" --threads=2 prepare 2>&1 | tail -3 || echo "PREPARE FAILED"
echo "prepare took $(( $(date +%s) - start )) s"
mariadb -h "$H" -P "$P" -u root -e "SHOW CREATE TABLE sbtest.sbtest1\G; SELECT COUNT(*) FROM sbtest.sbtest1" 2>&1 | tail -12
$BIN mgm --mgmd "$MGMD" report-memory
sysbench oltp_read_write "${common[@]}" --threads=4 --time=20 run 2>&1 | grep -E "transactions:|queries:|95th|errors" || echo "RUN FAILED"
$BIN mgm --mgmd "$MGMD" report-memory
