package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// core is `go test -v -bench` output of a group where one benchmark ran,
// one was skipped and one failed, followed by the script's group line.
const core = `goos: linux
goarch: amd64
pkg: github.com/sandboxd/sandboxd/tests
cpu: AMD EPYC
BenchmarkExecTrue
BenchmarkExecTrue-2            	    2000	   3347043 ns/op	       998.0 floor-p50-µs	      2349 p50-µs	         2.354 ratio
BenchmarkRunTrue
    bench_test.go:80: a note, not a reason
BenchmarkRunTrue-2             	    2000	   2434043 ns/op	      1036 floor-p50-µs	      1398 p50-µs	         1.349 ratio	         7.000 extra-thing
BenchmarkStartDocker
    bench_docker_test.go:18: skipping: a running dockerd (Debian: docker.io) is not available here: exit status 1
--- SKIP: BenchmarkStartDocker
BenchmarkIPythonRoundTrip
    bench_ipython_test.go:77: floor: exit status 1 | broken
--- FAIL: BenchmarkIPythonRoundTrip-2
FAIL
the tests left these behind:
  cgroup parent /sys/fs/cgroup/cpu/sandboxd-b38aba75
  cgroup parent /sys/fs/cgroup/pids/sandboxd-b38aba75
exit status 1
FAIL	github.com/sandboxd/sandboxd/tests	41.2s
make-bench: group core pkg ./tests/ benchtime 2000x exit 1 seconds 41.7 regex ^Benchmark(ExecTrue|RunTrue|StartDocker|IPythonRoundTrip)$
`

// crashed is a group whose benchmark panicked, and one whose process
// died before it announced anything.
const crashed = `goos: linux
pkg: github.com/sandboxd/sandboxd/tests
BenchmarkStream200MB
panic: test timed out after 10m0s
	running tests:
		BenchmarkStream200MB (10m0s)
FAIL	github.com/sandboxd/sandboxd/tests	600.1s
make-bench: group stream pkg ./tests/ benchtime 3x exit 1 seconds 600 regex ^Benchmark(Stream200MB)$
# github.com/sandboxd/sandboxd/tests
# [github.com/sandboxd/sandboxd/tests]
vet: tests/x.go:1:1: could not import math/rand/v2 (can't resolve import "")
FAIL	github.com/sandboxd/sandboxd/tests [build failed]
make-bench: group rss pkg ./tests/ benchtime 1x exit 2 seconds 3 regex ^Benchmark(IdleRSS)$
`

// extra is a benchmark the figures do not know, reporting only ns/op,
// from another package, in a group that passed.
const extra = `pkg: github.com/sandboxd/sandboxd/executors/browser
BenchmarkExecutorSnapshot
BenchmarkExecutorSnapshot-2   	 200	  16000000 ns/op	         7.12 p50-ms	         7.17 floor-rod-p50-ms
BenchmarkSomethingNew
BenchmarkSomethingNew-2   	 1000	      1234 ns/op
ok  	github.com/sandboxd/sandboxd/executors/browser	9.1s
make-bench: group browser-executor pkg ./executors/browser/ benchtime 200x exit 0 seconds 9.5 regex ^Benchmark(ExecutorSnapshot|SomethingNew)$
`

func parsed(t *testing.T, outputs ...string) *run {
	t.Helper()
	r := newRun()
	for i, o := range outputs {
		if err := r.parse("out"+string(rune('0'+i))+".txt", strings.NewReader(o)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestParse(t *testing.T) {
	r := parsed(t, core, crashed, extra)
	tests := []struct {
		name    string
		status  string
		reason  string
		metrics map[string]float64
	}{
		{"BenchmarkExecTrue", statusOK, "", map[string]float64{"ns/op": 3347043, "floor-p50-µs": 998, "p50-µs": 2349, "ratio": 2.354}},
		{"BenchmarkRunTrue", statusOK, "", map[string]float64{"p50-µs": 1398, "extra-thing": 7}},
		{"BenchmarkStartDocker", statusSkipped, "skipping: a running dockerd (Debian: docker.io) is not available here: exit status 1", nil},
		{"BenchmarkIPythonRoundTrip", statusFailed, "floor: exit status 1 | broken", nil},
		{"BenchmarkStream200MB", statusFailed, "panic: test timed out after 10m0s", nil},
		{"BenchmarkExecutorSnapshot", statusOK, "", map[string]float64{"p50-ms": 7.12, "floor-rod-p50-ms": 7.17}},
		{"BenchmarkSomethingNew", statusOK, "", map[string]float64{"ns/op": 1234}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := r.results[tt.name]
			if res == nil {
				t.Fatalf("no result; have %v", r.order)
			}
			if res.status != tt.status || res.reason != tt.reason {
				t.Errorf("status %q reason %q, want %q %q", res.status, res.reason, tt.status, tt.reason)
			}
			for k, v := range tt.metrics {
				if got, ok := res.metrics[k]; !ok || got != v {
					t.Errorf("%s = %v (%v), want %v", k, got, ok, v)
				}
			}
		})
	}
	if res := r.results["BenchmarkExecutorSnapshot"]; res.pkg != "github.com/sandboxd/sandboxd/executors/browser" {
		t.Errorf("package %q", res.pkg)
	}
	if _, ok := r.results["BenchmarkIdleRSS"]; ok {
		t.Errorf("a benchmark of a group that did not build has a result")
	}
	wantGroups := []group{
		{name: "core", pkg: "./tests/", benchtime: "2000x", exit: 1, seconds: 41.7, regex: "^Benchmark(ExecTrue|RunTrue|StartDocker|IPythonRoundTrip)$", file: "out0.txt",
			note: "the tests left these behind: cgroup parent /sys/fs/cgroup/cpu/sandboxd-b38aba75"},
		{name: "stream", pkg: "./tests/", benchtime: "3x", exit: 1, seconds: 600, regex: "^Benchmark(Stream200MB)$", file: "out1.txt", note: "panic: test timed out after 10m0s"},
		{name: "rss", pkg: "./tests/", benchtime: "1x", exit: 2, seconds: 3, regex: "^Benchmark(IdleRSS)$", file: "out1.txt", note: `vet: tests/x.go:1:1: could not import math/rand/v2 (can't resolve import "")`},
		{name: "browser-executor", pkg: "./executors/browser/", benchtime: "200x", exit: 0, seconds: 9.5, regex: "^Benchmark(ExecutorSnapshot|SomethingNew)$", file: "out2.txt"},
	}
	if len(r.groups) != len(wantGroups) {
		t.Fatalf("groups %+v", r.groups)
	}
	for i, g := range wantGroups {
		if r.groups[i] != g {
			t.Errorf("group %d: %+v, want %+v", i, r.groups[i], g)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"BenchmarkX-2 \t 10 \t 5 ns/op \t 7\n",       // a value without a unit
		"BenchmarkX-2 \t 10 \t five ns/op\n",         // not a number
		"make-bench: group g pkg\n",                  // a key without a value
		"make-bench: group g exit one regex ^X$\n",   // not a status
		"make-bench: group g seconds 1s regex ^X$\n", // not a number of seconds
	} {
		if err := newRun().parse("x.txt", strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestRows(t *testing.T) {
	r := parsed(t, core, crashed, extra)
	got := map[string]row{}
	for _, rw := range rows(r) {
		if _, dup := got[rw.bench]; dup {
			t.Errorf("two rows named %q", rw.bench)
		}
		got[rw.bench] = rw
	}
	tests := []struct {
		bench string
		want  row
	}{
		{"one-shot `exec true`, p50", row{floor: "os/exec `true`: 998 µs", value: "2349 µs", ratio: "2.35×", target: "≤ 1.3×", met: "no"}},
		{"`run true` in a warm session, p50", row{floor: "os/exec `true`: 1036 µs", value: "1398 µs", ratio: "1.35×", target: "≤ 2×", met: "**yes**"}},
		{"`BenchmarkRunTrue` extra-thing", row{floor: "—", value: "7.00", ratio: "—", target: "—", met: "—"}},
		{"StartDocker to the first `run` answer (`BenchmarkStartDocker`)", row{floor: "—", value: "**skipped**: a running dockerd (Debian: docker.io) is not available here: exit status 1", ratio: "—", target: "—", met: "not run"}},
		{"IPython `1+1` round trip, warm kernel, over REST (`BenchmarkIPythonRoundTrip`)", row{floor: "—", value: "**failed**: floor: exit status 1 \\| broken", ratio: "—", target: "≤ 5 ms", met: "failed"}},
		{"200 MB streamed through `exec` (NDJSON), received (`BenchmarkStream200MB`)", row{floor: "—", value: "**failed**: panic: test timed out after 10m0s", ratio: "—", target: "≥ 1 GB/s; ≤ 32 MB", met: "failed"}},
		{"idle daemon RSS (`BenchmarkIdleRSS`)", row{floor: "—", value: "**failed**: group rss exited with status 2 before reporting it (out1.txt)", ratio: "—", target: "≤ 15 MB", met: "failed"}},
		{"32 clients × `exec true`, throughput (`BenchmarkExecTrueParallel32`)", row{floor: "—", value: "**not run**: no group of `make bench` runs it", ratio: "—", target: "≥ 0.8×", met: "not run"}},
		// No ratio metric: computed from the floor.
		{"browser `snapshot` in the executor (no daemon, no REST)", row{floor: "rod: 7.17 ms", value: "7.12 ms", ratio: "0.99×", target: "—", met: "—"}},
		// Only ns/op: shown, since there is nothing else.
		{"`BenchmarkSomethingNew` ns/op", row{floor: "—", value: "1234", ratio: "—", target: "—", met: "—"}},
	}
	for _, tt := range tests {
		rw, ok := got[tt.bench]
		if !ok {
			t.Errorf("no row %q", tt.bench)
			continue
		}
		tt.want.bench = tt.bench
		if rw != tt.want {
			t.Errorf("row %q:\n got %+v\nwant %+v", tt.bench, rw, tt.want)
		}
	}
	if _, ok := got["`BenchmarkExecTrue` ns/op"]; ok {
		t.Errorf("ns/op shown for a benchmark with figures of its own")
	}
	// Every benchmark of the figures has a row, run or not.
	first := map[string]bool{}
	for _, f := range figures {
		want := f.label
		if res := r.results[f.bench]; res == nil || res.status != statusOK {
			if first[f.bench] {
				continue
			}
			want += " (`" + f.bench + "`)"
		}
		first[f.bench] = true
		if _, ok := got[want]; !ok {
			t.Errorf("no row %q", want)
		}
	}
}

func TestTargets(t *testing.T) {
	tests := []struct {
		t            target
		unit         string
		value, ratio float64
		text         string
		met          bool
	}{
		{ratioAtMost(1.3), "µs", 0, 1.3, "≤ 1.3×", true},
		{ratioAtMost(1.3), "µs", 0, 1.31, "≤ 1.3×", false},
		{ratioAtLeast(0.8), "/s", 0, 0.45, "≥ 0.8×", false},
		{valueAtLeast(1), "GB/s", 1.2, 0, "≥ 1 GB/s", true},
		{valueBelow(100), "ms", 100, 0, "< 100 ms", false},
		{valueBelow(100), "ms", 79.7, 0, "< 100 ms", true},
		{valueAtLeast(20), "×", 173, 0, "≥ 20×", true},
		{target{cmp: atMost, limit: 1024, text: "≤ 1 MB"}, "KB", 68, 0, "≤ 1 MB", true},
	}
	for _, tt := range tests {
		if got := tt.t.describe(tt.unit); got != tt.text {
			t.Errorf("describe %+v = %q, want %q", tt.t, got, tt.text)
		}
		if got := tt.t.met(tt.value, tt.ratio); got != tt.met {
			t.Errorf("%s met(%v, %v) = %v", tt.text, tt.value, tt.ratio, got)
		}
	}
}

func TestRewrite(t *testing.T) {
	const head = "# Benchmarks\n\nintro\n\n"
	const tail = "\n## Daemon core\n\nhand-written analysis | kept\n"
	tests := []struct {
		name, doc, want, err string
	}{
		{"placeholder", head + beginMarker + "\nrun make bench\n" + endMarker + tail, head + beginMarker + "\nNEW\n" + endMarker + tail, ""},
		{"previous run", head + beginMarker + "\nold\ntable\n\n" + endMarker + tail, head + beginMarker + "\nNEW\n" + endMarker + tail, ""},
		{"adjacent markers", head + beginMarker + endMarker + tail, head + beginMarker + "\nNEW\n" + endMarker + tail, ""},
		{"no markers", head + tail, "", "must both be in"},
		{"no end", head + beginMarker + tail, "", "must both be in"},
		{"reversed", head + endMarker + "\n" + beginMarker + tail, "", "before"},
		{"twice", head + beginMarker + endMarker + beginMarker + endMarker + tail, "", "once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rewrite(tt.doc, "\nNEW\n\n")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			// A second run replaces the first one's output.
			if again, err := rewrite(got, "NEW"); err != nil || again != tt.want {
				t.Fatalf("second rewrite: %v\n%s", err, again)
			}
		})
	}
}

func TestRender(t *testing.T) {
	r := parsed(t, core, extra)
	rep := &report{
		machine: machine{cpu: "AMD EPYC", cores: 2, memory: "23.4 GiB", kernel: "6.18.44", os: "Debian GNU/Linux 12 (bookworm)", goVer: "go1.26.8"},
		date:    "2026-11-30 12:00 UTC",
		commit:  "eeb32a6-dirty",
		run:     r,
		load: &loadReport{Clients: 8, Sandboxes: 4, DurationS: 10.02, PerSecond: 866.4,
			Errors:       map[string]int{"resource_exhausted": 3, "client": 1},
			Refused:      map[string]int{"resource_exhausted": 2},
			DaemonBefore: map[string]float64{"sandboxd_goroutines": 9, "sandboxd_open_fds": 14, "sandboxd_resident_bytes": 24.6 * (1 << 20)},
			DaemonAfter:  map[string]float64{"sandboxd_goroutines": 16, "sandboxd_open_fds": 14, "sandboxd_resident_bytes": 41.7 * (1 << 20)},
		},
	}
	rep.load.Latency.P50, rep.load.Latency.P90, rep.load.Latency.P99 = 8.37, 15.43, 23.86
	out := render(rep)
	for _, want := range []string{
		"- Machine: AMD EPYC, 2 cores, 23.4 GiB, Linux 6.18.44, Debian GNU/Linux 12 (bookworm), go1.26.8\n",
		"- Date: 2026-11-30 12:00 UTC\n",
		"- Commit: `eeb32a6-dirty`\n",
		"| benchmark | floor (same run) | sandboxd | ratio | target | met |\n",
		"| one-shot `exec true`, p50 | os/exec `true`: 998 µs | 2349 µs | 2.35× | ≤ 1.3× | no |\n",
		"`sandboxd bench --clients 8 --sandboxes 4 --duration 10s`",
		"| 8 × 4 | 866 | 8.37 ms | 15.4 ms | 23.9 ms | **client: 1, resource_exhausted: 3 (2 refused with Retry-After)** | 9 → 16 / 14 → 14 / 24.6 → 41.7 MiB |\n",
		"| core | 2000x | 42 s | **failed** (exit 1): the tests left these behind: cgroup parent /sys/fs/cgroup/cpu/sandboxd-b38aba75 |\n",
		"| browser-executor | 200x | 10 s | ok |\n",
		"| total | | 51 s (0.9 min) | |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	rep.load, rep.loadErr = nil, "build/bench/load.json holds no report"
	if out := render(rep); !strings.Contains(out, "Load (`sandboxd bench`): **not run**: build/bench/load.json holds no report.") {
		t.Errorf("render without a load report:\n%s", out)
	}
}

// TestGenerate runs the whole program on files, and keeps the project's
// document in a shape it can rewrite.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "benchmarks.md")
	const hand = "\n## Daemon core (issue 2)\n\nThe analysis stays.\n"
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\n"+beginMarker+"\nplaceholder\n"+endMarker+hand), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "core.txt")
	load := filepath.Join(dir, "load.json")
	os.WriteFile(out, []byte(core), 0o644)
	os.WriteFile(load, []byte(`{"clients": 8, "sandboxes": 4, "duration_s": 10, "actions_per_s": 800, "latency_ms": {"p50": 8, "p90": 15, "p99": 24}, "errors_by_code": {}}`), 0o644)
	if err := generate(doc, load, "abc1234", []string{out}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	s := string(b)
	if !strings.HasSuffix(s, endMarker+hand) || strings.Contains(s, "placeholder") || !strings.Contains(s, "- Commit: `abc1234`") || !strings.Contains(s, "| 8 × 4 | 800 | 8.00 ms") {
		t.Errorf("document:\n%s", s)
	}
	if err := generate(doc, "", "", []string{filepath.Join(dir, "missing.txt")}); err == nil {
		t.Error("no error for a missing output file")
	}

	real, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rewrite(string(real), "x"); err != nil {
		t.Errorf("docs/benchmarks.md: %v", err)
	}
}
