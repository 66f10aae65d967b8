package main

import (
	"fmt"
	"strconv"
)

// comparison is how a figure is held against its target.
type comparison int

const (
	noTarget comparison = iota // reported, nothing to meet
	atMost                     // ≤ limit
	atLeast                    // ≥ limit
	below                      // < limit
)

// target is an issue's goal for a figure: on the ratio to the floor, or on
// the value itself (in the figure's displayed unit).
type target struct {
	cmp     comparison
	limit   float64
	onRatio bool
	text    string // as the issue states it, when the derived text would not be
}

func ratioAtMost(x float64) target  { return target{cmp: atMost, limit: x, onRatio: true} }
func ratioAtLeast(x float64) target { return target{cmp: atLeast, limit: x, onRatio: true} }
func valueAtMost(x float64) target  { return target{cmp: atMost, limit: x} }
func valueAtLeast(x float64) target { return target{cmp: atLeast, limit: x} }
func valueBelow(x float64) target   { return target{cmp: below, limit: x} }

// met reports whether value (or ratio) meets t.
func (t target) met(value, ratio float64) bool {
	x := value
	if t.onRatio {
		x = ratio
	}
	switch t.cmp {
	case atMost:
		return x <= t.limit
	case atLeast:
		return x >= t.limit
	case below:
		return x < t.limit
	}
	return false
}

// describe is the target as the table shows it; unit is the figure's.
func (t target) describe(unit string) string {
	if t.text != "" {
		return t.text
	}
	op := map[comparison]string{atMost: "≤ ", atLeast: "≥ ", below: "< "}[t.cmp]
	if op == "" {
		return "—"
	}
	n := strconv.FormatFloat(t.limit, 'f', -1, 64)
	if t.onRatio {
		return op + n + "×"
	}
	return op + withUnit(n, unit)
}

// figure is one row of the table: a metric a benchmark reports, with the
// floor it reports beside it in the same run.
type figure struct {
	bench      string  // the benchmark function
	label      string  // what is measured, as the table says it
	metric     string  // sandboxd's figure, as b.ReportMetric names it
	floor      string  // the floor's figure; "" when there is none
	floorLabel string  // what the floor is; "" when obvious
	ratio      string  // the benchmark's own ratio metric; "" computes metric/floor
	unit       string  // the unit shown
	scale      float64 // shown = reported × scale; 0 means 1
	target     target
}

func (f figure) shown(v float64) float64 {
	if f.scale != 0 {
		return v * f.scale
	}
	return v
}

// figures are the project's benchmarks and the targets their issues set
// (docs/benchmarks.md has the hand-written record and the analysis). A
// benchmark listed here that did not run still gets a row; a metric or a
// benchmark missing here gets a row without a target.
var figures = []figure{
	// Daemon core (issue 2): process backend.
	{bench: "BenchmarkExecTrue", label: "one-shot `exec true`, p50", metric: "p50-µs", floor: "floor-p50-µs", floorLabel: "os/exec `true`", ratio: "ratio", unit: "µs", target: ratioAtMost(1.3)},
	{bench: "BenchmarkRunTrue", label: "`run true` in a warm session, p50", metric: "p50-µs", floor: "floor-p50-µs", floorLabel: "os/exec `true`", ratio: "ratio", unit: "µs", target: ratioAtMost(2)},
	{bench: "BenchmarkExecTrueParallel32", label: "32 clients × `exec true`, throughput", metric: "ops/s", floor: "floor-ops/s", floorLabel: "32 goroutines × os/exec", ratio: "ratio", unit: "/s", target: ratioAtLeast(0.8)},
	{bench: "BenchmarkStream200MB", label: "200 MB streamed through `exec` (NDJSON), received", metric: "GB/s", floor: "floor-GB/s", floorLabel: "Go reading the same pipeline", ratio: "ratio", unit: "GB/s", target: valueAtLeast(1)},
	{bench: "BenchmarkStream200MB", label: "peak RSS growth while streaming 200 MB", metric: "peak-rss-growth-MB", unit: "MB", target: valueAtMost(32)},
	{bench: "BenchmarkIdleRSS", label: "idle daemon RSS", metric: "idle-rss-MB", unit: "MB", target: valueAtMost(15)},

	// Files (issue 3).
	{bench: "BenchmarkTransfer1GiB", label: "upload a 1 GiB file (PUT files)", metric: "upload-GB/s", floor: "cp-GB/s", floorLabel: "`cp`", ratio: "upload-ratio", unit: "GB/s", target: ratioAtLeast(0.5)},
	{bench: "BenchmarkTransfer1GiB", label: "download it (GET files) into a local file", metric: "download-GB/s", floor: "cp-GB/s", floorLabel: "`cp`", ratio: "download-ratio", unit: "GB/s", target: ratioAtLeast(0.5)},
	{bench: "BenchmarkTransfer1GiB", label: "daemon RSS growth during upload + download", metric: "peak-rss-growth-MB", unit: "MB", target: valueAtMost(32)},
	{bench: "BenchmarkStrReplace10kLines", label: "`str_replace` on a 10,000-line file, p50", metric: "p50-µs", unit: "ms", scale: 1e-3, target: valueAtMost(2)},

	// wasm backend (issue 5).
	{bench: "BenchmarkWasmColdWarm", label: "wasm warm: create a sandbox + `exec` the 2.9 MB module, p50", metric: "warm-create+exec-ms", unit: "ms", target: valueAtMost(10)},
	{bench: "BenchmarkWasmColdWarm", label: "— of which create", metric: "warm-create-ms", unit: "ms"},
	{bench: "BenchmarkWasmColdWarm", label: "— of which `exec`", metric: "warm-exec-ms", unit: "ms"},
	{bench: "BenchmarkWasmColdWarm", label: "wasm warm, create + upload + `exec`", metric: "warm-create+upload+exec-ms", unit: "ms"},
	{bench: "BenchmarkWasmColdWarm", label: "wasm cold: first `exec` with an empty compile cache", metric: "cold-exec-ms", unit: "ms"},
	{bench: "BenchmarkWasmColdWarm", label: "wasm cold / warm", metric: "cold/warm", unit: "×", target: valueAtLeast(20)},
	{bench: "BenchmarkWasmParallel32", label: "32 clients, wasm Go module, runs", metric: "wasm-go-runs/s", unit: "/s"},
	{bench: "BenchmarkWasmParallel32", label: "32 clients, minimal wasm module, runs", metric: "wasm-tiny-runs/s", unit: "/s"},
	{bench: "BenchmarkWasmParallel32", label: "32 clients, process `exec true` beside them", metric: "process-exec-true/s", unit: "/s"},

	// containerd backend (issue 4).
	{bench: "BenchmarkContainerdCreateFirstExec", label: "containerd: create (`host` image) + first `exec true`, no warm pool", metric: "p50-ms", floor: "floor-p50-ms", floorLabel: "containerd client", ratio: "ratio", unit: "ms", target: ratioAtMost(1.3)},
	{bench: "BenchmarkContainerdCreateFirstExec", label: "— of which create", metric: "create-ms", floor: "floor-create-ms", unit: "ms"},
	{bench: "BenchmarkContainerdCreateFirstExec", label: "— of which the first `exec true`", metric: "first-exec-ms", floor: "floor-first-exec-ms", unit: "ms"},
	{bench: "BenchmarkContainerdCreateFirstExec", label: "containerd: delete (timed apart)", metric: "delete-ms", floor: "floor-delete-ms", unit: "ms"},
	{bench: "BenchmarkContainerdCreateFirstExecWarm", label: "containerd: create + first `exec true` with the warm pool", metric: "p50-ms", floor: "floor-p50-ms", floorLabel: "containerd client, no pool", ratio: "ratio", unit: "ms", target: valueBelow(100)},
	{bench: "BenchmarkContainerdCreateFirstExecWarm", label: "— of which create", metric: "create-ms", floor: "floor-create-ms", unit: "ms"},
	{bench: "BenchmarkContainerdCreateFirstExecWarm", label: "— of which the first `exec true`", metric: "first-exec-ms", floor: "floor-first-exec-ms", unit: "ms"},
	{bench: "BenchmarkContainerdCreateFirstExecWarm", label: "containerd with the warm pool: delete (timed apart)", metric: "delete-ms", floor: "floor-delete-ms", unit: "ms"},
	{bench: "BenchmarkContainerdExecTrue", label: "containerd: `exec true` in a running sandbox", metric: "p50-µs", floor: "floor-p50-µs", floorLabel: "containerd task exec", ratio: "ratio", unit: "ms", scale: 1e-3, target: ratioAtMost(1.3)},
	{bench: "BenchmarkContainerdIdleRSS", label: "containerd: daemon RSS growth per idle sandbox (50)", metric: "rss-growth-KB/sandbox", unit: "KB", target: target{cmp: atMost, limit: 1024, text: "≤ 1 MB"}},
	{bench: "BenchmarkContainerdIdleRSS", label: "containerd: daemon RSS before the 50 sandboxes", metric: "rss-before-MB", unit: "MB"},
	{bench: "BenchmarkContainerdIdleRSS", label: "containerd: daemon RSS with the 50 idle sandboxes", metric: "rss-after-MB", unit: "MB"},
	{bench: "BenchmarkContainerdIdleRSS", label: "containerd: per sandbox outside the daemon, shim + init RSS", metric: "shim+init-rss-KB/sandbox", unit: "MB", scale: 1.0 / 1024},
	{bench: "BenchmarkContainerdIdleRSS", label: "containerd: per sandbox outside the daemon, shim + init PSS", metric: "shim+init-pss-KB/sandbox", unit: "MB", scale: 1.0 / 1024},

	// IPython (issue 6).
	{bench: "BenchmarkIPythonRoundTrip", label: "IPython `1+1` round trip, warm kernel, over REST", metric: "p50-ms", floor: "floor-jupyter_client-p50-ms", floorLabel: "jupyter_client", ratio: "ratio", unit: "ms", target: valueAtMost(5)},
	{bench: "BenchmarkIPythonRoundTrip", label: "IPython first cell of a sandbox (the kernel's start)", metric: "first-cell-ms", unit: "ms"},

	// Browser (issue 7).
	{bench: "BenchmarkBrowserSnapshot", label: "browser `snapshot` over REST", metric: "p50-ms", floor: "floor-rod-p50-ms", floorLabel: "rod", ratio: "ratio", unit: "ms", target: ratioAtMost(1.2)},
	{bench: "BenchmarkBrowserSnapshot", label: "first browser action of a sandbox (Chromium's start + goto)", metric: "first-action-ms", unit: "ms"},
	{bench: "BenchmarkExecutorSnapshot", label: "browser `snapshot` in the executor (no daemon, no REST)", metric: "p50-ms", floor: "floor-rod-p50-ms", floorLabel: "rod", unit: "ms"},

	// Docker mode (issue 8).
	{bench: "BenchmarkStartDocker", label: "StartDocker to the first `run` answer", metric: "p50-ms", floor: "floor-docker-run-p50-ms", floorLabel: "`docker run --rm`", ratio: "ratio", unit: "ms"},
	{bench: "BenchmarkStartDocker", label: "Docker mode `Close` (stop, remove)", metric: "close-p50-ms", unit: "ms"},
}

// restated are metrics that only restate a target the table checks
// anyway (whether the p50 is under 100 ms, as 0 or 1).
var restated = map[string]bool{"under-100ms": true}

// standardMetrics are the testing package's own; the benchmarks here time
// their two sides themselves, so these mean nothing unless a benchmark
// reports nothing else.
var standardMetrics = map[string]bool{"ns/op": true, "B/op": true, "allocs/op": true, "MB/s": true}

// withUnit joins a number and a unit the way the hand-written tables do:
// "785/s", "2.35×", "998 µs".
func withUnit(n, unit string) string {
	switch {
	case unit == "":
		return n
	case unit == "×" || unit[0] == '/':
		return n + unit
	}
	return n + " " + unit
}

// number formats v with about three significant digits.
func number(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
