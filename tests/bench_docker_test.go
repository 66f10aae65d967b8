package tests

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// BenchmarkStartDocker: client.StartDocker until the first `run` in a new
// sandbox has answered, and Close, against a bare
// `docker run --rm --entrypoint true IMAGE` in the same run, interleaved;
// p50 of max(b.N, 10) starts each.
func BenchmarkStartDocker(b *testing.B) {
	requireDocker(b)
	if raceEnabled {
		b.Skip("benchmarks are meaningless under -race")
	}
	ctx := context.Background()
	var got, floor, closes []time.Duration
	b.ResetTimer()
	for range max(b.N, 10) {
		start := time.Now()
		if out, err := exec.Command("docker", "run", "--rm", "--entrypoint", "true", dockerImage).CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v %s", err, out)
		}
		floor = append(floor, time.Since(start))

		start = time.Now()
		c, err := client.StartDocker(ctx, client.DockerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		o, err := c.Run(ctx, sb.ID, "echo ready")
		if err != nil || o.Output != "ready\n" {
			b.Fatalf("first run: %+v %v", o, err)
		}
		got = append(got, time.Since(start))
		start = time.Now()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		closes = append(closes, time.Since(start))
	}
	b.StopTimer()
	g, f := p50(got), p50(floor)
	b.ReportMetric(float64(g.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(f.Milliseconds()), "floor-docker-run-p50-ms")
	b.ReportMetric(float64(g)/float64(f), "ratio")
	b.ReportMetric(float64(p50(closes).Milliseconds()), "close-p50-ms")
}
