package bash

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/process"
	"github.com/sandboxd/sandboxd/executors"
)

// processExecutor returns a bash executor on a sandbox of the process
// backend, or skips when that cannot run here.
func processExecutor(t *testing.T) *Executor {
	t.Helper()
	requireBash(t)
	root := t.TempDir()
	b, err := process.New(process.Config{WorkspaceRoot: root + "/ws", TmpRoot: root + "/tmp"})
	if err != nil {
		t.Skipf("process backend: %v", err)
	}
	ctx := context.Background()
	sb, err := b.Create(ctx, backends.Spec{ID: "hardtimeout", Dir: t.TempDir(), Network: api.NetworkHost})
	if err != nil {
		t.Skipf("process sandbox: %v", err)
	}
	e := New(sb, DefaultConfig())
	t.Cleanup(func() {
		e.Close(context.Background())
		sb.Destroy(context.Background())
	})
	return e
}

// A hard timeout far in the future must not fire: the command runs to its
// end.
func TestHardTimeoutHuge(t *testing.T) {
	e := processExecutor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A normal hard timeout first: the session works.
	obs, err := e.Execute(ctx, &api.Action{Kind: api.KindRun, Command: "sleep 0.3; echo done", HardTimeoutS: 60}, executors.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if obs.TimedOut || obs.ExitCode == nil || *obs.ExitCode != 0 || !strings.Contains(obs.Output, "done") {
		t.Fatalf("hard_timeout_s 60: %+v", obs)
	}
	for _, hard := range []float64{1e10, 1e300} {
		obs, err := e.Execute(ctx, &api.Action{Kind: api.KindRun, Command: "sleep 0.3; echo done", HardTimeoutS: hard}, executors.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if obs.TimedOut || obs.ExitCode == nil || *obs.ExitCode != 0 || !strings.Contains(obs.Output, "done") {
			t.Errorf("hard_timeout_s %g: %+v", hard, obs)
		}
	}
}
