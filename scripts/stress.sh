#!/usr/bin/env bash
# Runs a command beside a CPU hog and reports every failed test by name, so that tests which
# fail only on a loaded machine show up here rather than in CI:
#
#   scripts/stress.sh go test -race -count=5 ./redlock/ ./scheduler/
#   scripts/stress.sh bash .ci/run          # the whole CI, hogged
#
# The hog is Debian's stress-ng with HOG workers (default: one per core), each spinning on a
# core at normal priority, so the command under test gets about half the machine. stress-ng is
# installed with apt-get when missing (as root). The command's output goes to stdout and to
# LOG (default stress.log); at the end comes a table of failed tests, "--- FAIL" lines counted
# by test name, and the script exits with the command's status.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/stress.sh COMMAND [ARG...]" >&2
  exit 2
fi
hog="${HOG:-$(nproc)}"
log="${LOG:-stress.log}"
if ! command -v stress-ng >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: stress-ng — install it with your package manager (e.g. apt-get install stress-ng)" >&2
    exit 1
  fi
  echo "installing: stress-ng"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng >/dev/null || exit 1
fi

stress-ng --cpu "$hog" --cpu-method matrixprod --quiet &
hog_pid=$!
trap 'kill "$hog_pid" 2>/dev/null; wait "$hog_pid" 2>/dev/null' EXIT
echo "stress: $hog CPU hog workers (stress-ng pid $hog_pid) beside: $*"
start=$(date +%s)
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "stress: exit $status after $(( $(date +%s) - start ))s, $hog hog workers; failed tests (count, name):"
grep -E '^[[:space:]]*--- FAIL: ' "$log" | sed -E 's/^[[:space:]]*--- FAIL: ([^ ]+).*/\1/' | sort | uniq -c | sort -rn \
  || echo "  none"
exit "$status"
