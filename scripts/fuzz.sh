#!/usr/bin/env bash
# Runs every fuzz target of the project for FUZZTIME each (default 30s):
# briefly in CI, as long as you like on demand (FUZZTIME=30m make fuzz).
# Each target starts from its corpus in testdata/fuzz; an input that fails
# is written there by go test and printed here, so it can be committed as
# a regression seed once fixed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}

# package target: the action JSON decoder, the bash output marker parser,
# tar extraction, path resolution, the str_replace editor, and the event
# log's reader of a torn or corrupted file.
targets=(
  "./api FuzzDecodeAction"
  "./executors/bash FuzzMarkerParser"
  "./internal/tarfs FuzzExtract"
  "./executors/file FuzzPathConfinement"
  "./executors/file FuzzStrReplace"
  "./daemon/eventlog FuzzOpen"
)

# run_target fuzzes one target; it answers 0 when it passed, 1 when it
# failed (a failing input, if go test wrote one, is printed), and 2 for Go's
# own coordinator race at the end of -fuzztime (go.dev/issue/75804, fixed in
# Go 1.27): the bare "context deadline exceeded" with no input written,
# which says nothing about the code under test.
run_target() {
  local pkg=$1 name=$2 before after out f
  before=$(ls "$pkg/testdata/fuzz/$name" 2>/dev/null | sort)
  out=$(mktemp)
  "$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 10s "$pkg" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  after=$(ls "$pkg/testdata/fuzz/$name" 2>/dev/null | sort)
  local written
  written=$(comm -13 <(echo "$before") <(echo "$after"))
  for f in $written; do
    echo "-- failing input $pkg/testdata/fuzz/$name/$f:"
    cat "$pkg/testdata/fuzz/$name/$f"
  done
  if ((rc == 0)); then
    rm -f "$out"
    return 0
  fi
  if [[ -z $written ]] && grep -q '^    context deadline exceeded$' "$out" &&
    ! grep -q -e 'Failing input' -e '^panic' -e 'fuzz: minimizing' "$out"; then
    rm -f "$out"
    return 2
  fi
  rm -f "$out"
  return 1
}

failed=()
start=$SECONDS
for t in "${targets[@]}"; do
  set -- $t
  pkg=$1 name=$2
  echo "== fuzz $name ($pkg) for $FUZZTIME"
  run_target "$pkg" "$name"
  rc=$?
  if ((rc == 2)); then
    # Once more: the race is rare; twice in a row is worth a look.
    echo "-- $name: Go's fuzz coordinator raced its own deadline (go.dev/issue/75804, no input written); running it again"
    run_target "$pkg" "$name"
    rc=$?
  fi
  ((rc == 0)) || failed+=("$name")
done
echo "fuzzing took $((SECONDS - start))s"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
