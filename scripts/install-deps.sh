#!/usr/bin/env bash
# Installs the system packages the test suite and benchmarks need, once.
# Idempotent: packages already present are skipped, apt-get update runs at
# most once per call and only when something is missing.
#
#   scripts/install-deps.sh            # what the test suite needs
#   scripts/install-deps.sh bench      # plus the peers benchmarks compare with
set -euo pipefail
cd "$(dirname "$0")/.."

want=()
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || want+=("$1"); }

# The SQL node's tests drive it with real clients.
need sysbench
need mariadb-client
# tests/sql_differential.rs compares the SQL node's answers with MariaDB's.
need mariadb-server
need openssl
# A JDK (javac, and java's source-file mode) for the JDBC test; only when none is there.
command -v javac >/dev/null 2>&1 || need openjdk-17-jdk-headless

if [[ "${1:-}" == "bench" ]]; then
  need redis-server
  need redis-tools
  need linux-perf
fi

if ((${#want[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  echo "installing: ${want[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}"
fi

# Python tools of the test suite, pinned, in a virtual environment of the
# project's own (target/pyenv), so nothing depends on what is installed by hand:
# schemathesis for the REST fuzz test, the MySQL drivers PyMySQL and
# mysql-connector-python for the SQL node's client test. Each requirements
# file is installed again only when it differs from the copy kept beside the
# venv when it was last installed.
VENV=target/pyenv
for REQ in scripts/requirements-rest-fuzz.txt scripts/requirements-sql-clients.txt; do
  INSTALLED="$VENV/installed-$(basename "$REQ")"
  if ! cmp -s "$REQ" "$INSTALLED" 2>/dev/null; then
    command -v python3 >/dev/null 2>&1 || { echo "python3 is needed for the Python test tools ($REQ); install it" >&2; exit 1; }
    echo "installing Python test tools of $REQ into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
    cp "$REQ" "$INSTALLED"
  fi
done

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust from your distribution or rustup, then run this again" >&2
  exit 1
fi

# ---- JDBC driver for tests/sql_jdbc.rs (begin) ----
# MySQL Connector/J from Maven Central, pinned, into target/jdbc/. Fetched only
# when the pinned jar is not there with the expected SHA-256; a download is
# checked against the .sha1 Maven Central publishes beside it. Jars of other
# versions are removed so the test finds exactly one.
JDBC_VERSION=9.7.0
JDBC_SHA256=0353648eaa1c91e0f4020c959abf756bc866ffd583df22ae6b6f6e0cbd43eb44
JDBC_JAR=target/jdbc/mysql-connector-j-$JDBC_VERSION.jar
if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  echo "the JDBC test needs a JDK 11 or newer (javac and java); install one, e.g. apt-get install openjdk-17-jdk-headless" >&2
  exit 1
fi
if ! echo "$JDBC_SHA256  $JDBC_JAR" | sha256sum --check --status 2>/dev/null; then
  command -v curl >/dev/null 2>&1 || { echo "curl is needed to fetch the JDBC driver; install it" >&2; exit 1; }
  jdbc_url=https://repo1.maven.org/maven2/com/mysql/mysql-connector-j/$JDBC_VERSION/mysql-connector-j-$JDBC_VERSION.jar
  echo "fetching MySQL Connector/J $JDBC_VERSION into target/jdbc"
  mkdir -p target/jdbc
  curl -fsSL --retry 3 -o "$JDBC_JAR.part" "$jdbc_url"
  jdbc_sha1=$(curl -fsSL --retry 3 "$jdbc_url.sha1" | cut -c1-40)
  if ! echo "$jdbc_sha1  $JDBC_JAR.part" | sha1sum --check --status ||
    ! echo "$JDBC_SHA256  $JDBC_JAR.part" | sha256sum --check --status; then
    rm -f "$JDBC_JAR.part"
    echo "the downloaded $jdbc_url does not match its .sha1 or the pinned SHA-256" >&2
    exit 1
  fi
  mv "$JDBC_JAR.part" "$JDBC_JAR"
  find target/jdbc -maxdepth 1 -name 'mysql-connector-j-*.jar' ! -name "${JDBC_JAR##*/}" -delete
fi
# ---- JDBC driver for tests/sql_jdbc.rs (end) ----
