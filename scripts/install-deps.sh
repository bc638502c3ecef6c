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
# tests/bench_ycsb.rs drives a Redis server with `bench ycsb --db redis://`.
need redis-server
# A JDK (javac, and java's source-file mode) for the JDBC test; only when none is there.
command -v javac >/dev/null 2>&1 || need openjdk-17-jdk-headless

# The fault campaign (tests/chaos.rs, `latsdb chaos`) makes network
# namespaces with ip and tc, and judges histories with a Go program
# (crates/chaos/checker): Go from the distribution when none is installed.
need iproute2
command -v go >/dev/null 2>&1 || [[ -x /usr/local/go/bin/go ]] || need golang-go

if [[ "${1:-}" == "bench" ]]; then
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
# mysql-connector-python for the SQL node's client test, prometheus_client
# for the metrics test, kubernetes-validate and PyYAML for the Helm chart
# test. Each requirements
# file is installed again only when it differs from the copy kept beside the
# venv when it was last installed.
VENV=target/pyenv
for REQ in scripts/requirements-rest-fuzz.txt scripts/requirements-sql-clients.txt scripts/requirements-metrics.txt scripts/requirements-k8s.txt; do
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

# The campaign checker's one module (Porcupine, pinned in its go.mod and
# go.sum), through the go command from whatever module proxy it is set to use.
GO=$(command -v go || echo /usr/local/go/bin/go)
(cd crates/chaos/checker && "$GO" mod download)

# ---- JDBC driver for tests/sql_jdbc.rs (begin) ----
# MySQL Connector/J, pinned, into target/jdbc/, fetched by its Maven
# coordinates through Maven (installed here when absent) from whatever
# repository Maven is configured to use, so that mirrors and offline caches
# work; no repository host is named here. Maven checks the repository's
# checksums (--strict-checksums) and the jar must match the pinned SHA-256.
# Fetched only when the pinned jar is not there; jars of other versions are
# removed so the test finds exactly one.
JDBC_VERSION=9.7.0
JDBC_SHA256=0353648eaa1c91e0f4020c959abf756bc866ffd583df22ae6b6f6e0cbd43eb44
JDBC_JAR=target/jdbc/mysql-connector-j-$JDBC_VERSION.jar
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  echo "the JDBC test needs a JDK 11 or newer (javac and java); install one, e.g. apt-get install openjdk-17-jdk-headless" >&2
  exit 1
fi
if ! echo "$JDBC_SHA256  $JDBC_JAR" | sha256sum --check --status 2>/dev/null; then
  if ! command -v mvn >/dev/null 2>&1; then
    echo "installing: maven (to fetch MySQL Connector/J by its coordinates)"
    if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends maven
  fi
  echo "fetching MySQL Connector/J $JDBC_VERSION into target/jdbc through Maven"
  mkdir -p target/jdbc
  rm -f "$JDBC_JAR"
  # Maven's output is shown only when it fails (its quiet mode still
  # prints terminal colour codes).
  mvn_log=$(mktemp)
  if ! mvn --batch-mode --quiet --strict-checksums "$DEPENDENCY_PLUGIN:copy" \
    -Dartifact="com.mysql:mysql-connector-j:$JDBC_VERSION:jar" -DoutputDirectory=target/jdbc \
    -Dmdep.overWriteReleases=true > "$mvn_log" 2>&1; then
    cat "$mvn_log" >&2
    rm -f "$mvn_log"
    echo "Maven could not fetch com.mysql:mysql-connector-j:$JDBC_VERSION; check its repository settings (~/.m2/settings.xml) and network, then run this again" >&2
    exit 1
  fi
  rm -f "$mvn_log"
  if ! echo "$JDBC_SHA256  $JDBC_JAR" | sha256sum --check --status; then
    rm -f "$JDBC_JAR"
    echo "the Connector/J jar Maven fetched does not match the pinned SHA-256 $JDBC_SHA256; refusing it" >&2
    exit 1
  fi
  find target/jdbc -maxdepth 1 -name 'mysql-connector-j-*.jar' ! -name "${JDBC_JAR##*/}" -delete
fi
# ---- JDBC driver for tests/sql_jdbc.rs (end) ----

# cargo-fuzz for scripts/fuzz.sh (the full tier's bounded fuzzing run),
# pinned, by its crate name through cargo. It builds the fuzz targets on
# stable Rust with `--sanitizer none` (safe Rust needs no AddressSanitizer
# to turn a bad access into a panic).
CARGO_FUZZ_VERSION=0.13.2
if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
  echo "installing: cargo-fuzz $CARGO_FUZZ_VERSION (cargo install)"
  cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

# Helm for tests/helm_chart.rs (lint and template of deploy/helm/latsdb),
# pinned, built by the go command from whatever module proxy it is set to
# use, into target/tools (about a minute on 2 CPUs once its modules are
# fetched). The chart's schema check uses kubernetes-validate
# (scripts/requirements-k8s.txt), whose package carries the Kubernetes
# schemas: kubeconform would fetch them from a web address at each run.
HELM_VERSION=v3.22.0
# (A helm built this way reports only its minor version, so a stamp file
# says which one was built.)
if [[ ! -x target/tools/helm || ! -f target/tools/helm-$HELM_VERSION.built ]]; then
  echo "installing: helm $HELM_VERSION (go install)"
  GOBIN="$PWD/target/tools" "$GO" install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -f target/tools/helm-*.built
  touch "target/tools/helm-$HELM_VERSION.built"
fi
