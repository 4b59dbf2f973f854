#!/usr/bin/env bash
# run.sh [-harvest] [DURATION] [PACKAGE...] — run every Go fuzz target of the
# module (or of the named packages) for DURATION each (default 10s) and print
# the executions and new-coverage counts the fuzzer reports.
# With -harvest, copy the inputs the fuzzer found interesting from the Go
# build cache into the package's testdata/fuzz/, so they are replayed by
# `go test` and can be committed, and report the statement coverage of the
# package that replaying the target's corpus reaches.
# FUZZPARALLEL=N sets the number of fuzzing workers (default: GOMAXPROCS);
# FUZZMINIMIZE sets -fuzzminimizetime (default 2000x: executions, not Go's
# 60 s, which a worker spends on each new interesting input while it runs
# nothing else: FuzzDiscoveryLog's entries of 1 KiB made a 60 s run 2 048
# executions, 1.47 million with 2000x);
# FUZZONLY=REGEXP runs only the targets whose names match.
# With a duration, Go 1.26's fuzz coordinator can end a clean run with a bare
# "context deadline exceeded" (go.dev/issue/75804, fixed in Go 1.27): a
# failure is real only when a failing input is written to testdata/fuzz.
# A count (e.g. 100000x) avoids the race.
set -euo pipefail
cd "$(dirname "$0")/.."
harvest=0
if [ "${1:-}" = "-harvest" ]; then harvest=1; shift; fi
dur=${1:-10s}; shift || true
pkgs=("$@"); [ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
cache=$(go env GOCACHE)/fuzz
log=$(mktemp); trap 'rm -f "$log"' EXIT
rc=0
for pkg in $(go list "${pkgs[@]}"); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -hoE '^func Fuzz[A-Za-z0-9_]+\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u); do
    if [ -n "${FUZZONLY:-}" ] && ! [[ $f =~ $FUZZONLY ]]; then continue; fi
    echo "== $pkg $f ($dur)"
    go test -run='^$' -fuzz="^${f}\$" -fuzztime="$dur" -fuzzminimizetime="${FUZZMINIMIZE:-2000x}" ${FUZZPARALLEL:+-parallel=$FUZZPARALLEL} "$pkg" >"$log" 2>&1 || true
    grep -E '^fuzz: elapsed' "$log" | tail -1 | sed 's/^/   /'
    if grep -q 'Failing input written' "$log"; then
      grep -E -- '--- FAIL|Failing input|panic|Error' "$log" | head -20; rc=1
    elif grep -qE '^(ok|PASS)' "$log"; then
      echo "   PASS"
    elif grep -q 'context deadline exceeded' "$log"; then
      echo "   PASS (no failing input; coordinator ended with go.dev/issue/75804's spurious deadline error)"
    else
      tail -20 "$log"; rc=1
    fi
    if [ $harvest = 1 ] && [ -d "$cache/$pkg/$f" ]; then
      mkdir -p "$dir/testdata/fuzz/$f"
      cp -n "$cache/$pkg/$f"/* "$dir/testdata/fuzz/$f/" 2>/dev/null || true
      echo "   corpus: $(ls "$dir/testdata/fuzz/$f" | wc -l) entries in testdata/fuzz/$f"
      go test -count=1 -run="^${f}\$" -cover -coverpkg="$pkg" "$pkg" 2>&1 | grep -oE 'coverage: [0-9.]+% of statements' | sed "s|^|   corpus replay: |;s|\$| in $pkg|"
    fi
  done
done
exit $rc
