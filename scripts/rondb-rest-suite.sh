#!/usr/bin/env bash
# Runs RonDB's own REST API integration tests (the Go packages of
# storage/ndb/rest-server2/server/test_go in logicalclocks/rondb) against a
# latsdb cluster this script starts, and prints pass/fail/skip per package.
# The suite is not part of latsdb: get it yourself and point RONDB_TESTS at
# its test_go folder.
#
#   RONDB_TESTS=/path/to/test_go scripts/rondb-rest-suite.sh
#
# Environment (defaults in brackets):
#   RONDB_TESTS   the suite's test_go folder (go.mod: hopsworks.ai/rdrs2)   [required]
#   PACKAGES      packages under internal/integrationtests
#                 [pkread batchpkread health ping jsonerrors batchwrite batchdelete batchcomprehensive,
#                  and feature_store batchfeaturestore when the suite has Hopsworks' schema]
#   SKIP          `go test -skip` pattern   [RateLimit|Performance|Benchmark]
#   GO            the go binary             [go on PATH, else /usr/local/go/bin/go]
#   OUT           logs, go test -json output and failures   [results/rondb-rest-suite-<time>]
#
# The suite's packages import RonDB's cgo bindings (internal/dal, log
# callbacks) only for RonDB's own server; to build them outside RonDB's
# tree those imports must be stubbed out (docs/compatibility.md says which).
# The suite sends RonDB's fixed test API key. When the suite has Hopsworks'
# metadata schema (resources/testdbs/fixed/hopsworks_40_schema.sql, its
# hopsworks-ddl migrations and hopsworks-data), the script loads it, with
# the feature-store databases fsdb001-004, registers each test database
# as a project shared with the key's project (as RonDB's loader does) and
# stores the key in hopsworks.api_key; the REST node then authorizes the
# key from Hopsworks' tables. Without it, the key is stored as a latsdb key
# with a grant on the test databases only, as one test expects a 401 for a
# database outside the grant.
set -euo pipefail
: "${RONDB_TESTS:?set RONDB_TESTS to the test_go folder of the suite}"
# Paths given relative to where the script is started from.
RONDB_TESTS=$(cd "$RONDB_TESTS" && pwd)
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd); fi
cd "$(dirname "$0")/.."
HOPSWORKS_SCHEMA=$RONDB_TESTS/resources/testdbs/fixed/hopsworks_40_schema.sql
DEFAULT_PACKAGES="pkread batchpkread health ping jsonerrors batchwrite batchdelete batchcomprehensive"
[ -f "$HOPSWORKS_SCHEMA" ] && DEFAULT_PACKAGES+=" feature_store batchfeaturestore"
PACKAGES=${PACKAGES:-$DEFAULT_PACKAGES}
SKIP=${SKIP:-RateLimit|Performance|Benchmark}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
command -v mysql > /dev/null || { echo "needs the mysql client (scripts/install-deps.sh installs it)" >&2; exit 1; }
[ -x "$GO" ] || command -v "$GO" > /dev/null || { echo "needs Go: set GO to the go binary" >&2; exit 1; }
source scripts/lib.sh
OUT=${OUT:-results/rondb-rest-suite-$STAMP}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

start_latsdb 2 --rest-auth api-key
SQL_HOST=${SQL%:*} SQL_PORT=${SQL##*:} REST_HOST=${REST%:*} REST_PORT=${REST##*:}
sql() { mysql -h "$SQL_HOST" -P "$SQL_PORT" -u root "$@"; }

# The suite's databases (its resources/testdbs): fixed/DBnnn.sql, and
# dynamic/textual_columns.sql instantiated for the text and binary kinds
# as the suite's own loader does.
TESTDBS=$RONDB_TESTS/resources/testdbs
DBS=$(seq -f 'db%03g' 0 28 | tr '\n' ' ')
for n in 1 2 3 4; do [ -f "$TESTDBS/fixed/FSDB00$n.sql" ] && DBS+=" fsdb00$n"; done
schema_of() {
  local textual=$TESTDBS/dynamic/textual_columns.sql
  case $1 in
    db012) sed -e "s/DATABASE_NAME/db012/g; s/COLUMN_TYPE/char/g; s/COLUMN_LENGTH/100/g" "$textual" ;;
    db014) sed -e "s/DATABASE_NAME/db014/g; s/COLUMN_TYPE/VARCHAR/g; s/COLUMN_LENGTH/50/g" "$textual" ;;
    db015) sed -e "s/DATABASE_NAME/db015/g; s/COLUMN_TYPE/VARCHAR/g; s/COLUMN_LENGTH/256/g" "$textual" ;;
    db016) sed -e "s/DATABASE_NAME/db016/g; s/COLUMN_TYPE/BINARY/g; s/COLUMN_LENGTH/100/g" "$textual" ;;
    db017) sed -e "s/DATABASE_NAME/db017/g; s/COLUMN_TYPE/VARBINARY/g; s/COLUMN_LENGTH/100/g" "$textual" ;;
    db018) sed -e "s/DATABASE_NAME/db018/g; s/COLUMN_TYPE/VARBINARY/g; s/COLUMN_LENGTH/256/g" "$textual" ;;
    *) cat "$TESTDBS/fixed/$(echo "$1" | tr a-z A-Z).sql" ;;
  esac
}

echo "== loading the suite's schemas through the SQL node (refused statements: $OUT/refused.txt)"
: > "$OUT/refused.txt"
n=0
for db in $DBS; do
  n=$((n + 1))
  printf '\r   %s (%d of %d)' "$db" "$n" "$(echo $DBS | wc -w)"
  schema_of "$db" > "$OUT/$db.sql"
  sql --force < "$OUT/$db.sql" > /dev/null 2> "$OUT/$db.err" || true
  grep '^ERROR' "$OUT/$db.err" | sed "s/^/$db: /" >> "$OUT/refused.txt" || true
done
echo
echo "   $(wc -l < "$OUT/refused.txt") statements refused"
# With this database present the suite does not load the schemas itself.
sql -e 'CREATE DATABASE sentinel'

KEY_ID=bkYjEz6OTZyevbqt
KEY_SECRET=ocHajJhnE0ytBh8zbYj3IXupyMqeMZp8PW464eTxzxqP5afBjodEQUgY0lmL33ub
if [ -f "$HOPSWORKS_SCHEMA" ]; then
  echo "== loading Hopsworks' metadata: schema, migrations, data, projects (refused: $OUT/hopsworks.refused.txt)"
  fixed=$TESTDBS/fixed
  {
    cat "$HOPSWORKS_SCHEMA"
    for f in $(ls "$fixed"/hopsworks-ddl/V*.sql | sort -V); do echo "USE hopsworks;"; cat "$f"; echo; done
    echo "USE hopsworks;"
    cat "$fixed/hopsworks-data/hopsworks_data.sql"
    echo
    # RonDB's test key, stored as Hopsworks stores keys: the SHA-256 of the
    # secret followed by the row's salt, in hex.
    echo "INSERT INTO api_key (id, prefix, secret, salt, created, modified, name, user_id, reserved)
          VALUES (1, '$KEY_ID', SHA2(CONCAT('$KEY_SECRET', 'latsdb-suite-salt'), 256), 'latsdb-suite-salt',
                  NOW(), NOW(), 'rondb-test-suite', 10000, 0);"
    n=0
    for db in $DBS; do
      n=$((n + 1))
      case $db in fsdb*) continue ;; esac
      sed -e "s/PROJECT_NUMBER/$n/g; s/PROJECT_NAME/$db/g" "$TESTDBS/dynamic/hopsworks_add_project.sql"
      echo
    done
  } > "$OUT/hopsworks.sql"
  sql --force < "$OUT/hopsworks.sql" > /dev/null 2> "$OUT/hopsworks.err" || true
  grep '^ERROR' "$OUT/hopsworks.err" > "$OUT/hopsworks.refused.txt" || true
  echo "   $(wc -l < "$OUT/hopsworks.refused.txt") statements refused"
else
echo "== storing RonDB's test API key (grant: the test databases)"
# The first key creates latsdb_system.api_keys; RonDB's key is then stored
# with its fixed secret, which `latsdb apikey create` does not take.
probe=$($BIN apikey --mgmd "$MGMD" create --name rondb-suite-probe --db db000 | sed -n 1p)
$BIN apikey --mgmd "$MGMD" delete "${probe%%.*}" > /dev/null
grants="$(echo $DBS | tr ' ' ','),fsdb001,fsdb002,fsdb003,fsdb004"
sql -e "INSERT INTO latsdb_system.api_keys (id, name, secret_sha256, \`databases\`, created)
        VALUES ('$KEY_ID', 'rondb-test-suite', UNHEX(SHA2('$KEY_SECRET', 256)), '$grants', NOW())"
fi

# The suite checks that a batch one operation over the server's limit is
# refused: tell it the REST node's (max_batch_ops, RonDB's 256 by default).
MAX_BATCH=${MAX_BATCH:-256}
cat > "$OUT/config.json" <<EOF
{
  "REST": {"Enable": true, "ServerIP": "$REST_HOST", "ServerPort": $REST_PORT, "ProbeEnable": false},
  "GRPC": {"Enable": false},
  "Internal": {"BatchMaxSize": $MAX_BATCH},
  "RonDB": {"Mgmds": [{"IP": "${MGMD%:*}", "Port": ${MGMD##*:}}]},
  "Security": {"TLS": {"EnableTLS": false},
               "APIKey": {"UseHopsworksAPIKeys": true, "CacheRefreshIntervalMS": 10000,
                          "CacheUnusedEntriesEvictionMS": 60000, "CacheRefreshIntervalJitterMS": 1000}},
  "Log": {"Level": "warn"},
  "Testing": {"MySQL": {"Servers": [{"IP": "$SQL_HOST", "Port": $SQL_PORT}], "User": "root", "Password": ""}}
}
EOF
export RDRS_CONFIG_FILE=$OUT/config.json GOFLAGS=${GOFLAGS:--p=1}

summary=""
for package in $PACKAGES; do
  echo "== go test ./internal/integrationtests/$package (at most 10 min)"
  (cd "$RONDB_TESTS" && "$GO" test -json -count=1 -timeout 10m -skip "$SKIP" \
    "./internal/integrationtests/$package/") > "$OUT/$package.json" 2>&1 || true
  python3 scripts/go-test-summary.py "$OUT/$package.json" --failures > "$OUT/$package.failures.txt"
  line=$(python3 scripts/go-test-summary.py "$OUT/$package.json")
  echo "   $line"
  summary+="$line"$'\n'
done
echo
echo "== RonDB REST suite against latsdb $(git rev-parse --short HEAD), $(date -u +%F)"
printf '%s' "$summary"
runs=()
for package in $PACKAGES; do runs+=("$OUT/$package.json"); done
python3 scripts/go-test-summary.py --total "${runs[@]}"
echo "failing cases with their requests and answers: $OUT/<package>.failures.txt"
