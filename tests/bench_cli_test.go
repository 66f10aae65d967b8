package tests

import (
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// TestBenchCommand: `sandboxd bench` drives a running daemon with several
// clients and a mix of actions, reports latency, throughput and errors,
// and cleans up its sandboxes; the daemon's goroutines and fds come back
// near where they were.
func TestBenchCommand(t *testing.T) {
	d := startDaemon(t)
	out, err := exec.Command(binary, "bench", "--addr", "unix://"+d.sock, "--clients", "4", "--sandboxes", "2", "--duration", "3s", "--json").Output()
	if err != nil {
		t.Fatalf("sandboxd bench: %v\n%s", err, out)
	}
	var rep struct {
		Actions   int     `json:"actions"`
		PerSecond float64 `json:"actions_per_s"`
		Latency   struct {
			N             int
			P50, P90, P99 float64
		} `json:"latency_ms"`
		ByKind       map[string]any     `json:"latency_ms_by_kind"`
		Errors       map[string]int     `json:"errors_by_code"`
		DaemonBefore map[string]float64 `json:"daemon_before"`
		DaemonAfter  map[string]float64 `json:"daemon_after"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if rep.Actions < 10 || rep.PerSecond <= 0 || rep.Latency.N != rep.Actions || !(rep.Latency.P50 <= rep.Latency.P90 && rep.Latency.P90 <= rep.Latency.P99) {
		t.Errorf("report: %s", out)
	}
	for _, k := range []string{"run", "exec", "file"} {
		if rep.ByKind[k] == nil {
			t.Errorf("no %s actions in the report: %s", k, out)
		}
	}
	if len(rep.Errors) > 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	if sbs, err := d.client().ListSandboxes(ctxT(t, 10*time.Second)); err != nil || len(sbs) != 0 {
		t.Errorf("sandboxes left after the bench: %v %v", sbs, err)
	}
	for _, g := range []string{"sandboxd_goroutines", "sandboxd_open_fds"} {
		before, after := rep.DaemonBefore[g], rep.DaemonAfter[g]
		// The bench's own connections stay open a while: some slack.
		if before == 0 || after > before+40 {
			t.Errorf("%s: %v before, %v after", g, before, after)
		}
	}
}
