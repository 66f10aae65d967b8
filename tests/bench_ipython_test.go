package tests

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// ipythonFloor is Jupyter's own Python client (jupyter_client, which
// ipykernel depends on) running `1+1` in a kernel it started: n round
// trips, p50 in seconds.
const ipythonFloor = `
import sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel()
try:
    for _ in range(20):
        kc.execute_interactive("1+1", timeout=10, output_hook=lambda m: None)
    ts = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        kc.execute_interactive("1+1", timeout=10, output_hook=lambda m: None)
        ts.append(time.perf_counter() - t)
    ts.sort()
    print(ts[len(ts) // 2])
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// BenchmarkIPythonRoundTrip: `1+1` in a warm kernel over the REST API (a
// process sandbox), against jupyter_client doing the same in the same
// run; and the first cell of a sandbox (the kernel's start).
func BenchmarkIPythonRoundTrip(b *testing.B) {
	if err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		require(b, "python3-ipykernel", err)
	}
	_, c := benchDaemon(b)
	ctx := context.Background()
	var firsts []time.Duration
	for range 3 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		o, err := c.Act(ctx, sb.ID, &api.Action{Kind: api.KindIPython, Code: "1+1"})
		if err != nil || o.Output != "2" {
			b.Fatalf("first cell: %+v %v", o, err)
		}
		firsts = append(firsts, time.Since(start))
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	for range 20 {
		if _, err := c.Act(ctx, sb.ID, &api.Action{Kind: api.KindIPython, Code: "1+1"}); err != nil {
			b.Fatal(err)
		}
	}
	floorOut, err := exec.Command("/usr/bin/python3", "-c", ipythonFloor, strconv.Itoa(max(b.N, 50))).Output()
	if err != nil {
		b.Fatalf("floor: %v", err)
	}
	floorSec, err := strconv.ParseFloat(strings.TrimSpace(string(floorOut)), 64)
	if err != nil {
		b.Fatalf("floor output %q", floorOut)
	}
	floor := time.Duration(floorSec * float64(time.Second))
	var got []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		o, err := c.Act(ctx, sb.ID, &api.Action{Kind: api.KindIPython, Code: "1+1"})
		if err != nil || o.Output != "2" {
			b.Fatalf("1+1: %+v %v", o, err)
		}
		got = append(got, time.Since(start))
	}
	b.StopTimer()
	g := p50(got)
	b.ReportMetric(float64(g.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(floor.Microseconds())/1000, "floor-jupyter_client-p50-ms")
	b.ReportMetric(float64(g)/float64(floor), "ratio")
	b.ReportMetric(float64(p50(firsts).Milliseconds()), "first-cell-ms")
}
