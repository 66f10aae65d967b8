package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/backendtest"
	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

// fifosOnly is the IO of a process whose daemon died after making its
// FIFOs and asking for its start: nobody reads them.
type fifosOnly struct{ cfg cio.Config }

func (f fifosOnly) Config() cio.Config { return f.cfg }
func (fifosOnly) Cancel()              {}
func (fifosOnly) Wait()                {}
func (fifosOnly) Close() error         { return nil }

// TestRecoverAfterDeathMidStart: a daemon killed while a process start
// was in flight leaves the shim blocked on the process's FIFOs, answering
// no status. The next daemon still re-adopts the sandbox, stops the
// process and frees its FIFOs.
func TestRecoverAfterDeathMidStart(t *testing.T) {
	owner := t.TempDir()
	b := testBackend(t, owner)
	spec := backendtest.NewSpec(t, "none", backendtest.DefaultLimits)
	sb := backendtest.CreateSandbox(t, b, spec)
	s := sb.(*sandbox)

	id := newExecID(false)
	marker := fmt.Sprint(4000 + time.Now().UnixNano()%1000)
	cfg := cio.Config{
		Stdin:  filepath.Join(s.l.fifos(), id+"-stdin"),
		Stdout: filepath.Join(s.l.fifos(), id+"-stdout"),
		Stderr: filepath.Join(s.l.fifos(), id+"-stderr"),
	}
	for _, f := range []string{cfg.Stdin, cfg.Stdout, cfg.Stderr} {
		if err := unix.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pspec := s.proc
	pspec.Args = []string{helperPath, sbinit.Arg, sbinit.ModeExec, "sleep", marker}
	ctx := context.Background()
	cp, err := s.task.Exec(ctx, id, &pspec, func(string) (cio.IO, error) { return fifosOnly{cfg}, nil })
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- cp.Start(ctx) }()
	// The shim is stuck: containerd cannot learn the task's status.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := s.task.Status(ctx)
		if err == nil && st.Status == client.Unknown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shim never got stuck: status %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The daemon died: a new one re-adopts the sandbox.
	rs := testBackend(t, owner).Recover(ctx, []backends.Spec{spec})
	if rs[0].Err != nil {
		t.Fatalf("Recover: %v", rs[0].Err)
	}
	if out := backendtest.MustExec(t, rs[0].Sandbox, "echo", "adopted"); out != "adopted\n" {
		t.Errorf("after Recover: %q", out)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Error("the start the dead daemon asked for never returned")
	}
	for _, f := range []string{cfg.Stdin, cfg.Stdout, cfg.Stderr} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("FIFO %s is still there: %v", f, err)
		}
	}
	if ps := sleeping(marker); len(ps) > 0 {
		t.Errorf("the dead daemon's process still runs: %v", ps)
	}
}

// sleeping lists the processes running "sleep arg".
func sleeping(arg string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasSuffix(strings.ReplaceAll(string(b), "\x00", " "), "sleep "+arg+" ") {
			out = append(out, e.Name())
		}
	}
	return out
}
