#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser that takes outside bytes (fuzz/,
# docs/reliability.md), bounded in time: builds the targets with libFuzzer's
# coverage instrumentation and debug assertions, then runs each for the
# given seconds, two at a time (one per core), from the seeds in
# fuzz/corpus/<target> (copied: what a run discovers stays in its work
# folder, fuzz/target/work/<target>, and feeds the next run there).
#
#   scripts/fuzz.sh                      every target, 60 s each
#   scripts/fuzz.sh --seconds 600 avro   one target, longer
#   scripts/fuzz.sh --runs 10000000      every target until 10 M executions
#
# A panic, abort, timeout (10 s for one input) or an allocation past 2 GiB
# is a finding: its input is kept in fuzz/artifacts/<target>/, the command
# that replays it is printed, and the script fails. Once fixed, the input
# goes into a regression test (fuzz/regressions/, docs/reliability.md).
# Needs cargo-fuzz (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
runs=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --runs) runs=${2:?--runs needs a number}; seconds=0; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "unknown option $1; see scripts/fuzz.sh --help" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$runs" =~ ^[0-9]+$ ]] || { echo "--seconds and --runs take whole numbers" >&2; exit 2; }
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: run scripts/install-deps.sh (or cargo install cargo-fuzz)" >&2
  exit 1
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cargo fuzz list)
fi

echo "fuzz: building ${#targets[@]} targets (coverage instrumentation, debug assertions)"
cargo fuzz build --sanitizer none

work=fuzz/target/work
log_dir=fuzz/target/logs
mkdir -p "$work" "$log_dir"

# Runs one target; its summary line goes to stdout.
run_one() {
  local target=$1 log="$log_dir/$1.log"
  mkdir -p "$work/$target" "fuzz/artifacts/$target"
  local limit=(-max_total_time="$seconds")
  [[ $runs -gt 0 ]] && limit=(-runs="$runs")
  local rc=0
  cargo fuzz run --sanitizer none "$target" "$work/$target" "fuzz/corpus/$target" -- \
    "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local done_line
  done_line=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
  if [[ $rc -eq 0 ]]; then
    echo "fuzz: $target: ${done_line:-finished}, no finding"
  else
    local artifact
    artifact=$(grep -Eo "fuzz/artifacts/$target/[a-z]+-[0-9a-f]+" "$log" | tail -1 || true)
    echo "fuzz: $target: FINDING (exit $rc): ${artifact:-see $log}"
    grep -m1 -A2 'panicked at' "$log" | sed 's/^/fuzz:   /' || true
    [[ -n $artifact ]] && echo "fuzz:   replay: cargo fuzz run --sanitizer none $target $artifact"
    echo "fuzz:   log: $log"
  fi
  return $rc
}

failed=0
running=0
for target in "${targets[@]}"; do
  if [[ ! -d fuzz/corpus/$target ]]; then
    echo "fuzz: no target $target (cargo fuzz list names them)" >&2
    exit 2
  fi
  # Two at a time: the next starts as soon as either ends.
  if [[ $running -ge 2 ]]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  if [[ $runs -gt 0 ]]; then echo "fuzz: $target started ($runs executions)"; else echo "fuzz: $target started (${seconds} s)"; fi
  run_one "$target" &
  running=$((running + 1))
done
while [[ $running -gt 0 ]]; do
  wait -n || failed=1
  running=$((running - 1))
done
if [[ $failed -ne 0 ]]; then
  echo "fuzz: a target found an input that fails it (above)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, no finding"
