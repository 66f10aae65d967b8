#!/usr/bin/env bash
# make bench: every benchmark of the project beside its floor (the
# benchmarks measure both in the same run), group by group, then a short
# `sandboxd bench` load run against a daemon of its own, then the results
# written into docs/benchmarks.md between its markers (internal/benchdoc).
# The raw output stays in build/bench/.
#
# A group that fails does not stop the others: it shows as failed in the
# document, and the script exits 1 at the end.
#
# Environment:
#   GO             the Go command (default go); the tests build with it too
#   BENCHTIME      one -benchtime for every group instead of their own, to
#                  check the tooling quickly (BENCHTIME=1x); the figures of
#                  such a run mean little
#   LOAD_DURATION  the load run's --duration (default 10s)
#   BENCH_GROUPS   the names of the groups to run, space-separated (default
#                  all); the others show as not run
#   BENCH_DOC      the document to write (default docs/benchmarks.md)
set -u
cd "$(dirname "$0")/.."

GO=${GO:-go}
OUT=build/bench
LOAD_DURATION=${LOAD_DURATION:-10s}
BENCH_DOC=${BENCH_DOC:-docs/benchmarks.md}
# The tests' TestMain builds the daemon with the go on PATH: the same one.
if ! gobin=$(command -v "$GO"); then
	echo "bench.sh: no Go command $GO" >&2
	exit 2
fi
export PATH="$(dirname "$gobin"):$PATH"

# name, package, -benchtime, -bench expression (anchored: names overlap,
# e.g. ExecTrue and ContainerdExecTrue). Go runs each benchmark once with
# b.N = 1 before it runs b.N = N: the benchmarks that do a fixed amount of
# work whatever b.N (fixed-time spans, 10 starts, 3 cold and 30 warm wasm
# runs, 50 sandboxes) run at 1x, so once. With these a full run takes 6 to
# 9 minutes on 2 cores, depending on what else the machine is doing.
GROUPS_TABLE='
core-latency     ./tests/             2000x ^Benchmark(ExecTrue|RunTrue)$
files-edit       ./tests/             1000x ^BenchmarkStrReplace10kLines$
stream-files     ./tests/             3x    ^Benchmark(Stream200MB|IdleRSS|Transfer1GiB)$
fixed-work       ./tests/             1x    ^Benchmark(ExecTrueParallel32|WasmParallel32|WasmColdWarm|ContainerdIdleRSS|StartDocker)$
containerd       ./tests/             30x   ^BenchmarkContainerd(CreateFirstExec|CreateFirstExecWarm|ExecTrue)$
ipython-browser  ./tests/             300x  ^Benchmark(IPythonRoundTrip|BrowserSnapshot)$
browser-executor ./executors/browser/ 200x  ^BenchmarkExecutorSnapshot$
'

# An interrupted run leaves the document as it was.
trap 'echo "make bench: interrupted" >&2; exit 130' INT TERM
start=$EPOCHREALTIME
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
rm -rf "$OUT"
mkdir -p "$OUT"
failed=()
outputs=() # in the order run

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# group NAME PKG BENCHTIME REGEX ends its output file with the line
# internal/benchdoc reads the group's outcome from.
group() {
	local name=$1 pkg=$2 benchtime=${BENCHTIME:-$3} regex=$4 t0=$EPOCHREALTIME rc
	echo "=== make bench: $name: go test -bench '$regex' -benchtime $benchtime $pkg"
	# -v: skipped benchmarks and their reasons are printed only then.
	"$GO" test -v -run '^$' -bench "$regex" -benchtime "$benchtime" -count 1 -timeout 20m "$pkg" </dev/null 2>&1 | tee "$OUT/$name.txt"
	rc=${PIPESTATUS[0]}
	echo "make-bench: group $name pkg $pkg benchtime $benchtime exit $rc seconds $(since "$t0") regex $regex" | tee -a "$OUT/$name.txt"
	outputs+=("$OUT/$name.txt")
	if [ "$rc" != 0 ]; then
		failed+=("$name")
	fi
}

# load runs `sandboxd bench` against a daemon started here: a temporary
# state directory, a free loopback port (the daemon picks it and logs it),
# a random token, process sandboxes only.
load() {
	local dir pid addr="" rc
	"$GO" build -o "$OUT/sandboxd" ./cmd/sandboxd || return 1
	dir=$(mktemp -d /tmp/sandboxd-bench-XXXXXX) || return 1
	# Sandboxes run as users of their own under root: they pass through.
	chmod 711 "$dir"
	: >"$dir/config.toml" # not /etc/sandboxd's: the defaults
	SANDBOXD_TOKEN=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export SANDBOXD_TOKEN
	"$OUT/sandboxd" serve --config "$dir/config.toml" --state-dir "$dir/state" \
		--listen tcp://127.0.0.1:0 --log-level info --set containerd.enabled=false \
		>"$OUT/load-daemon.log" 2>&1 &
	pid=$!
	# Background jobs of a script ignore Ctrl-C: stop the daemon with it.
	trap 'stop "$pid"; rm -rf "$dir"; exit 130' INT TERM
	for _ in $(seq 300); do
		addr=$(grep -o 'addr=tcp://[0-9.:]*' "$OUT/load-daemon.log" | head -n 1 | cut -d/ -f3)
		if [ -n "$addr" ] || ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	rc=1
	if [ -n "$addr" ]; then
		echo "=== make bench: load: sandboxd bench --clients 8 --sandboxes 4 --duration $LOAD_DURATION (daemon at $addr)"
		"$OUT/sandboxd" bench --addr "http://$addr" --clients 8 --sandboxes 4 --duration "$LOAD_DURATION" --json </dev/null >"$OUT/load.json"
		rc=$?
		cat "$OUT/load.json"
	else
		echo "the daemon did not start; its log:"
		cat "$OUT/load-daemon.log"
	fi
	stop "$pid"
	rm -rf "$dir"
	return "$rc"
}

# stop ends the daemon gracefully (it removes its cgroups), or after 30 s
# the hard way.
stop() {
	kill -TERM "$1" 2>/dev/null
	for _ in $(seq 300); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$1" 2>/dev/null && kill -KILL "$1"
	wait "$1" 2>/dev/null
}

while read -r name pkg benchtime regex <&3; do
	if [ -n "$name" ] && [[ " ${BENCH_GROUPS:-$name} " == *" $name "* ]]; then
		group "$name" "$pkg" "$benchtime" "$regex"
	fi
done 3<<<"$GROUPS_TABLE"

t0=$EPOCHREALTIME
load 2>&1 | tee "$OUT/load.txt"
rc=${PIPESTATUS[0]}
echo "make-bench: group load exit $rc seconds $(since "$t0")" | tee -a "$OUT/load.txt"
outputs+=("$OUT/load.txt")
if [ "$rc" != 0 ]; then
	failed+=(load)
fi

docrc=0
"$GO" run ./internal/benchdoc -doc "$BENCH_DOC" -load "$OUT/load.json" -commit "$commit" "${outputs[@]}" || docrc=$?

total=$(since "$start")
echo "make bench: $(awk -v s="$total" 'BEGIN { printf "%d min %02d s", s / 60, s % 60 }') (${total} s); output in $OUT/, results in $BENCH_DOC"
if [ "${#failed[@]}" -gt 0 ]; then
	echo "make bench: failed: ${failed[*]}" >&2
	exit 1
fi
exit "$docrc"
