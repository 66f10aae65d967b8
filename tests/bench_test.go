package tests

// Benchmarks of the daemon core against their floors, measured in the same
// run. Run them with
//
//	go test -run '^$' -bench . -benchtime 2000x ./tests/
//
// Each reports its own p50 (or throughput) next to the floor's and the
// ratio; docs/benchmarks.md records the results. The containerd backend's
// are in bench_containerd_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// benchDaemon starts a daemon for a benchmark and returns a TCP client: the
// benchmarks measure the REST API on loopback, token and all.
func benchDaemon(b *testing.B, extra ...string) (*daemon, *client.Client) {
	b.Helper()
	if raceEnabled {
		b.Skip("benchmarks are meaningless under -race")
	}
	d := startDaemon(b, append([]string{"--log-level", "warn"}, extra...)...)
	c := d.tcpClient(d.token)
	b.Cleanup(func() { c.Close() })
	return d, c
}

// osExecTrue is the floor: plain os/exec of true from Go.
func osExecTrue(b *testing.B) time.Duration {
	start := time.Now()
	if err := exec.Command("true").Run(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkExecTrue: one-shot `exec true` over REST vs os/exec of true.
func BenchmarkExecTrue(b *testing.B) { benchLatency(b, api.Exec("true")) }

// BenchmarkRunTrue: `run true` in a warm bash session vs os/exec of true.
func BenchmarkRunTrue(b *testing.B) { benchLatency(b, api.Run("true")) }

// benchLatency measures a over REST against os/exec of true, alternately,
// and reports both p50s and their ratio.
func benchLatency(b *testing.B, a *api.Action) {
	_, c := benchDaemon(b)
	ctx := context.Background()
	id := newSandbox(b, c)
	for i := 0; i < 20; i++ { // warm up connections, caches, the session
		osExecTrue(b)
		if _, err := c.Act(ctx, id, a); err != nil {
			b.Fatal(err)
		}
	}
	var floor, got []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		floor = append(floor, osExecTrue(b))
		start := time.Now()
		o, err := c.Act(ctx, id, a)
		got = append(got, time.Since(start))
		if err != nil || o.ExitCode == nil || *o.ExitCode != 0 {
			b.Fatalf("%s: %+v %v", a.Kind, o, err)
		}
	}
	b.StopTimer()
	f, g := p50(floor), p50(got)
	b.ReportMetric(micros(f), "floor-p50-µs")
	b.ReportMetric(micros(g), "p50-µs")
	b.ReportMetric(float64(g)/float64(f), "ratio")
}

// throughput runs op in workers goroutines (w is the worker's index) for
// span and returns the operations per second; the first error fails b.
func throughput(b *testing.B, workers int, span time.Duration, op func(w int) error) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	deadline := time.Now().Add(span)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := op(w); err != nil {
					failed.Store(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

// BenchmarkExecTrueParallel32: 32 concurrent clients, each with a sandbox
// of its own, doing `exec true`, vs 32 goroutines doing os/exec of true.
// b.N is ignored: each side runs for the same fixed time.
func BenchmarkExecTrueParallel32(b *testing.B) {
	const workers = 32
	const span = 3 * time.Second
	_, c := benchDaemon(b)
	ctx := context.Background()
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = newSandbox(b, c)
	}
	measure := func(op func(w int) error) float64 { return throughput(b, workers, span, op) }
	floorOp := func(int) error { return exec.Command("true").Run() }
	a := api.Exec("true")
	apiOp := func(w int) error {
		o, err := c.Act(ctx, ids[w], a)
		if err == nil && (o.ExitCode == nil || *o.ExitCode != 0) {
			err = fmt.Errorf("exec true: %+v", o)
		}
		return err
	}
	b.ResetTimer()
	// Interleave halves so drift affects both sides alike.
	f1, g1 := measure(floorOp), measure(apiOp)
	g2, f2 := measure(apiOp), measure(floorOp)
	b.StopTimer()
	f, g := (f1+f2)/2, (g1+g2)/2
	b.ReportMetric(f, "floor-ops/s")
	b.ReportMetric(g, "ops/s")
	b.ReportMetric(g/f, "ratio")
}

// procStatus reads a field (in kB) of /proc/PID/status.
func procStatus(pid int, field string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkStream200MB: 200 MB of printable output (`yes` of a 100-byte
// line into head) through exec with NDJSON streaming, received by the
// client; reports throughput and the daemon's peak RSS growth.
func BenchmarkStream200MB(b *testing.B) {
	const total = 200_000_000
	d, c := benchDaemon(b)
	ctx := context.Background()
	id := newSandbox(b, c)
	line := strings.Repeat("y", 99)
	script := fmt.Sprintf("yes %s | head -c %d", line, total)
	a := api.Exec("sh", "-c", script)
	a.TimeoutS = api.Seconds(300)
	// The floor: this program reading the same pipeline through os/exec.
	floorRate := func() float64 {
		cmd := exec.Command("sh", "-c", script)
		r, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 128<<10)
		var n int64
		for {
			k, err := r.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		cmd.Wait()
		if n != total {
			b.Fatalf("floor read %d bytes", n)
		}
		return float64(n) / time.Since(start).Seconds() / 1e9
	}
	var rates, floors []float64
	var growth int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		floors = append(floors, floorRate())
		pid := d.cmd.Process.Pid
		// "5" resets the peak RSS (VmHWM) to the current RSS.
		_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
		base := procStatus(pid, "VmRSS")
		var got, dropped atomic.Int64
		start := time.Now()
		o, err := c.ActStream(ctx, id, a, func(out client.Output) {
			got.Add(int64(len(out.Data)))
			dropped.Add(out.Dropped)
		})
		el := time.Since(start)
		if err != nil || o.ExitCode == nil || *o.ExitCode != 0 {
			b.Fatalf("stream: %+v %v", o, err)
		}
		if got.Load()+dropped.Load() != total {
			b.Fatalf("received %d + dropped %d bytes, want %d", got.Load(), dropped.Load(), total)
		}
		if dropped.Load() > 0 {
			b.Logf("the client fell behind: %d bytes dropped from the live stream", dropped.Load())
		}
		rates = append(rates, float64(got.Load())/el.Seconds()/1e9)
		if g := procStatus(pid, "VmHWM") - base; g > growth {
			growth = g
		}
	}
	b.StopTimer()
	slices.Sort(rates)
	slices.Sort(floors)
	b.ReportMetric(floors[len(floors)/2], "floor-GB/s")
	b.ReportMetric(rates[len(rates)/2], "GB/s")
	b.ReportMetric(rates[len(rates)/2]/floors[len(floors)/2], "ratio")
	b.ReportMetric(float64(growth)/1024, "peak-rss-growth-MB")
}

// BenchmarkIdleRSS reports the resident memory of an idle daemon: started,
// one sandbox created and deleted, then left alone for a second.
func BenchmarkIdleRSS(b *testing.B) {
	var rss []float64
	for i := 0; i < b.N; i++ {
		d, c := benchDaemon(b)
		ctx := context.Background()
		idle := procStatus(d.cmd.Process.Pid, "VmRSS")
		id := newSandbox(b, c)
		if err := c.DeleteSandbox(ctx, id); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		after := procStatus(d.cmd.Process.Pid, "VmRSS")
		rss = append(rss, float64(max(idle, after))/1024)
		d.stop()
	}
	slices.Sort(rss)
	b.ReportMetric(rss[len(rss)/2], "idle-rss-MB")
}

// BenchmarkTransfer1GiB: a 1 GiB file uploaded, then downloaded, through
// the files endpoints, each against `cp` of the same file on the same disk;
// reports throughputs, ratios and the daemon's peak RSS growth.
func BenchmarkTransfer1GiB(b *testing.B) {
	const size = 1 << 30
	d, c := benchDaemon(b)
	ctx := context.Background()
	id := newSandbox(b, c)
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	for i := 0; i < size/len(chunk); i++ {
		f.Write(chunk)
	}
	f.Close()
	gbps := func(d time.Duration) float64 { return size / d.Seconds() / 1e9 }
	var cpRates, upRates, downRates []float64
	var growth int64
	b.ResetTimer()
	// Every timed phase starts with nothing dirty in the page cache: each
	// writes a gigabyte, and the kernel throttles writers once too much is
	// dirty, which would bill one phase for another's writes.
	settle := func() { exec.Command("sync").Run() }
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(dir, "cp.bin")
		settle()
		start := time.Now()
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		cpRates = append(cpRates, gbps(time.Since(start)))
		os.Remove(dst)

		pid := d.cmd.Process.Pid
		_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
		base := procStatus(pid, "VmRSS")
		in, _ := os.Open(src)
		settle()
		start = time.Now()
		// A new name each time, as cp writes a new file: replacing a file
		// costs more on ext4 (a rename over an existing file starts the
		// new one's writeback at once).
		name := fmt.Sprintf("big%d.bin", i)
		res, err := c.Upload(ctx, id, name, in, size, false)
		in.Close()
		if err != nil || res.Bytes != size {
			b.Fatalf("upload: %+v %v", res, err)
		}
		upRates = append(upRates, gbps(time.Since(start)))
		out, _ := os.Create(filepath.Join(dir, "down.bin"))
		settle()
		start = time.Now()
		_, n, err := c.Download(ctx, id, name, out)
		out.Close()
		if err != nil || n != size {
			b.Fatalf("download: %d %v", n, err)
		}
		downRates = append(downRates, gbps(time.Since(start)))
		os.Remove(filepath.Join(dir, "down.bin"))
		if _, err := c.Exec(ctx, id, "rm", name); err != nil {
			b.Fatal(err)
		}
		if g := procStatus(pid, "VmHWM") - base; g > growth {
			growth = g
		}
	}
	b.StopTimer()
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(cpRates), "cp-GB/s")
	b.ReportMetric(med(upRates), "upload-GB/s")
	b.ReportMetric(med(downRates), "download-GB/s")
	b.ReportMetric(med(upRates)/med(cpRates), "upload-ratio")
	b.ReportMetric(med(downRates)/med(cpRates), "download-ratio")
	b.ReportMetric(float64(growth)/1024, "peak-rss-growth-MB")
}

// BenchmarkStrReplace10kLines: str_replace on a 10,000-line file over the
// API, p50.
func BenchmarkStrReplace10kLines(b *testing.B) {
	_, c := benchDaemon(b)
	ctx := context.Background()
	id := newSandbox(b, c)
	var sb strings.Builder
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&sb, "line %05d: some source code here, x = compute(%d)\n", i, i)
	}
	if _, err := c.WriteFile(ctx, id, "big.py", sb.String()); err != nil {
		b.Fatal(err)
	}
	pair := [2]string{"line 05000: some", "line 05000: SOME"}
	var got []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := c.Edit(ctx, id, api.StrReplace("big.py", pair[i%2], pair[(i+1)%2])); err != nil {
			b.Fatal(err)
		}
		got = append(got, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(micros(p50(got)), "p50-µs")
}

// BenchmarkWasmColdWarm: the first run of a 2.9 MB Go-built module on a
// daemon with an empty compile cache (compile included), against creating a
// wasm sandbox, uploading the module and running it once the cache is warm.
func BenchmarkWasmColdWarm(b *testing.B) {
	g := guest(b)
	ctx := context.Background()
	var cold, warm, warmAll, warmExec, warmCreate []time.Duration
	var c *client.Client
	// Cold: three daemons, each with a new state directory (an empty
	// cache), whatever b.N is: each costs a compile.
	for range 3 {
		_, c = benchDaemon(b)
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendWasm})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Upload(ctx, sb.ID, "guest.wasm", bytes.NewReader(g), int64(len(g)), false); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if o, err := c.Exec(ctx, sb.ID, "guest.wasm"); err != nil || *o.ExitCode != 0 {
			b.Fatalf("cold: %+v %v", o, err)
		}
		cold = append(cold, time.Since(start))
	}
	// Warm, on the last daemon: create, upload, exec. The upload is a
	// transfer of 3 MB, timed apart from the rest.
	b.ResetTimer()
	for range max(b.N, 30) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendWasm})
		if err != nil {
			b.Fatal(err)
		}
		created := time.Since(t0)
		if _, err := c.Upload(ctx, sb.ID, "guest.wasm", bytes.NewReader(g), int64(len(g)), false); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if o, err := c.Exec(ctx, sb.ID, "guest.wasm"); err != nil || *o.ExitCode != 0 {
			b.Fatalf("warm: %+v %v", o, err)
		}
		exec := time.Since(t1)
		warmCreate = append(warmCreate, created)
		warmExec = append(warmExec, exec)
		warm = append(warm, created+exec)
		warmAll = append(warmAll, time.Since(t0))
		c.DeleteSandbox(ctx, sb.ID)
	}
	b.ReportMetric(micros(p50(cold))/1000, "cold-exec-ms")
	b.ReportMetric(micros(p50(warm))/1000, "warm-create+exec-ms")
	b.ReportMetric(micros(p50(warmCreate))/1000, "warm-create-ms")
	b.ReportMetric(micros(p50(warmExec))/1000, "warm-exec-ms")
	b.ReportMetric(micros(p50(warmAll))/1000, "warm-create+upload+exec-ms")
	b.ReportMetric(float64(p50(cold))/float64(p50(warm)), "cold/warm")
}

// BenchmarkWasmParallel32: 32 clients, each with a wasm sandbox, running
// the Go-built module and a minimal one, beside 32 clients doing the
// process backend's exec true, each for the same time.
func BenchmarkWasmParallel32(b *testing.B) {
	const workers = 32
	const span = 3 * time.Second
	g := guest(b)
	tiny := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x04, 0x01, 0x60, 0x00, 0x00, 0x03, 0x02, 0x01, 0x00, 0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, 0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b}
	_, c := benchDaemon(b)
	ctx := context.Background()
	var wasmIDs, procIDs []string
	for i := 0; i < workers; i++ {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendWasm, Limits: &api.Limits{MemoryMB: 64}})
		if err != nil {
			b.Fatal(err)
		}
		for name, code := range map[string][]byte{"guest.wasm": g, "tiny.wasm": tiny} {
			if _, err := c.Upload(ctx, sb.ID, name, bytes.NewReader(code), int64(len(code)), false); err != nil {
				b.Fatal(err)
			}
		}
		wasmIDs = append(wasmIDs, sb.ID)
		procIDs = append(procIDs, newSandbox(b, c))
	}
	rate := func(ids []string, argv ...string) float64 {
		return throughput(b, workers, span, func(w int) error {
			o, err := c.Exec(ctx, ids[w], argv...)
			if err == nil && (o.ExitCode == nil || *o.ExitCode != 0) {
				err = fmt.Errorf("%v: %+v", argv, o)
			}
			return err
		})
	}
	c.Exec(ctx, wasmIDs[0], "guest.wasm") // compile once, outside the timing
	c.Exec(ctx, wasmIDs[0], "tiny.wasm")
	b.ResetTimer()
	b.ReportMetric(rate(wasmIDs, "guest.wasm"), "wasm-go-runs/s")
	b.ReportMetric(rate(wasmIDs, "tiny.wasm"), "wasm-tiny-runs/s")
	b.ReportMetric(rate(procIDs, "true"), "process-exec-true/s")
}
