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

failed=()
start=$SECONDS
for t in "${targets[@]}"; do
  set -- $t
  pkg=$1 name=$2
  echo "== fuzz $name ($pkg) for $FUZZTIME"
  before=$(ls "$pkg/testdata/fuzz/$name" 2>/dev/null | sort)
  if ! "$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 10s "$pkg"; then
    failed+=("$name")
    after=$(ls "$pkg/testdata/fuzz/$name" 2>/dev/null | sort)
    for f in $(comm -13 <(echo "$before") <(echo "$after")); do
      echo "-- failing input $pkg/testdata/fuzz/$name/$f:"
      cat "$pkg/testdata/fuzz/$name/$f"
    done
  fi
done
echo "fuzzing took $((SECONDS - start))s"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
