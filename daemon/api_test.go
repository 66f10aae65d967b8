package daemon_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/daemon"
)

// inProcess runs a daemon in this process, on a unix socket and a loopback
// port, and returns clients of both (the TCP one with the token).
func inProcess(t *testing.T, configure ...func(*daemon.Config)) (unix, tcp *client.Client, addr string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd-api-")
	if err != nil {
		t.Fatal(err)
	}
	// Sandboxes may run as users of their own: they pass through.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	cfg := daemon.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Listen = []string{"unix://" + filepath.Join(dir, "s.sock"), "tcp://" + addr}
	cfg.Process.UIDLockDir = "/run/sandboxd/uids"
	if os.Geteuid() != 0 {
		cfg.Process.UIDLockDir = ""
	}
	for _, f := range configure {
		f(&cfg)
	}
	d, err := daemon.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, func([]string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	unix, _ = client.New("unix://" + filepath.Join(dir, "s.sock"))
	tcp, _ = client.New("http://"+addr, client.WithToken(d.Token()))
	t.Cleanup(func() {
		unix.Close()
		tcp.Close()
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return unix, tcp, addr
}

func TestInProcessAPI(t *testing.T) {
	unix, tcp, addr := inProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sb, err := tcp.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := unix.GetSandbox(ctx, sb.ID); err != nil || got.Labels["k"] != "v" {
		t.Fatalf("get over the socket: %+v %v", got, err)
	}
	o, err := tcp.Run(ctx, sb.ID, "cd /tmp; echo $((1+1))")
	if err != nil || o.Output != "2\n" || *o.ExitCode != 0 || o.Cwd != "/tmp" {
		t.Fatalf("run: %+v %v", o, err)
	}
	o, err = unix.Exec(ctx, sb.ID, "sh", "-c", "echo err >&2; exit 5")
	if err != nil || o.Stderr != "err\n" || *o.ExitCode != 5 {
		t.Fatalf("exec: %+v %v", o, err)
	}
	var streamed strings.Builder
	o, err = tcp.ActStream(ctx, sb.ID, api.Run("printf 'a\\nb\\n'"), func(out client.Output) { streamed.Write(out.Data) })
	if err != nil || streamed.String() != "a\nb\n" || o.Output != "a\nb\n" {
		t.Fatalf("stream: %q %+v %v", streamed.String(), o, err)
	}
	var kinds []string
	if err := unix.Events(ctx, sb.ID, 0, false, func(ev api.Event) error {
		kinds = append(kinds, ev.Type)
		return nil
	}); err != nil || len(kinds) != 6 {
		t.Fatalf("events: %v %v", kinds, err)
	}

	// API errors keep their class across the wire, on both transports.
	busy := api.Run("sleep 5")
	busy.TimeoutS = api.Seconds(0.1)
	if _, err := tcp.Act(ctx, sb.ID, busy); err != nil {
		t.Fatal(err)
	}
	wsb, err := tcp.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendWasm})
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := client.New("http://"+addr, client.WithToken("not-the-token-not-the-token"))
	defer bad.Close()
	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"not found":        {errOf(unix.GetSandbox(ctx, "sb-nothere00000")), client.ErrNotFound},
		"conflict":         {errOf(tcp.Run(ctx, sb.ID, "echo busy")), client.ErrConflict},
		"invalid argument": {errOf(tcp.Act(ctx, sb.ID, &api.Action{Kind: api.KindExec})), client.ErrInvalidArgument},
		"unsupported":      {errOf(tcp.Act(ctx, wsb.ID, &api.Action{Kind: api.KindBrowser, Op: "snapshot"})), client.ErrUnsupported},
		"unauthenticated":  {errOf(bad.ListSandboxes(ctx)), client.ErrUnauthenticated},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v", name, tc.err)
		}
		var ce *client.Error
		if !errors.As(tc.err, &ce) || ce.Message == "" {
			t.Errorf("%s: not a *client.Error with a message: %v", name, tc.err)
		}
	}
	if err := unix.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := tcp.DeleteSandbox(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestAdmission: past max_actions in flight, an action is refused with
// 429 resource_exhausted before anything is recorded; an interrupt still
// passes; once the load is gone, actions run again.
func TestAdmission(t *testing.T) {
	unix, _, _ := inProcess(t, func(c *daemon.Config) { c.Sandbox.MaxActions = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := unix.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := unix.Exec(ctx, sb.ID, "sleep", "3")
		slow <- err
	}()
	// Wait until the slow action holds the slot: its record is in the log.
	for started := false; !started; time.Sleep(10 * time.Millisecond) {
		if err := unix.Events(ctx, sb.ID, 0, false, func(ev api.Event) error {
			started = started || ev.Type == api.EventAction
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, refused := unix.Exec(ctx, sb.ID, "true")
	if !errors.Is(refused, client.ErrResourceExhausted) || !strings.Contains(refused.Error(), "maximum of 1 actions") {
		t.Fatalf("an action past the cap: %v", refused)
	}
	if _, err := unix.Act(ctx, sb.ID, &api.Action{Kind: api.KindInterrupt}); errors.Is(err, client.ErrResourceExhausted) {
		t.Errorf("an interrupt was refused: %v", err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if o, err := unix.Exec(ctx, sb.ID, "true"); err != nil || *o.ExitCode != 0 {
		t.Fatalf("after the load: %+v %v", o, err)
	}
	// The refused actions left nothing in the log.
	n := 0
	if err := unix.Events(ctx, sb.ID, 0, false, func(ev api.Event) error {
		if ev.Type == api.EventAction && ev.Action.Kind == api.KindExec {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d exec actions in the log, want 2 (the slow one and the last)", n)
	}
}

func TestMemoryAdmission(t *testing.T) {
	unix, _, _ := inProcess(t, func(c *daemon.Config) { c.Sandbox.MemoryBudgetMB = 1024 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	half := api.CreateSandboxRequest{Limits: &api.Limits{MemoryMB: 512}}
	var ids []string
	for i := 0; i < 2; i++ {
		sb, err := unix.CreateSandbox(ctx, half)
		if err != nil {
			t.Fatalf("sandbox %d of 512 MB in a 1024 MB budget: %v", i, err)
		}
		ids = append(ids, sb.ID)
	}
	m, err := unix.Metrics(ctx)
	if err != nil || m["sandboxd_memory_promised_bytes"] != 1024<<20 || m["sandboxd_memory_available_bytes"] <= 0 {
		t.Fatalf("metrics: promised %v, available %v (%v)", m["sandboxd_memory_promised_bytes"], m["sandboxd_memory_available_bytes"], err)
	}
	// The default limit (2048 MB) and one more half are both past it.
	for _, req := range []api.CreateSandboxRequest{{}, half} {
		_, err := unix.CreateSandbox(ctx, req)
		var cerr *client.Error
		if !errors.As(err, &cerr) || cerr.Status != 429 || cerr.RetryAfter <= 0 || !strings.Contains(cerr.Message, "past the daemon's memory budget of 1024 MB") {
			t.Fatalf("a create past the budget: %v", err)
		}
	}
	// The sandboxes in the budget work, and freeing one makes room.
	if o, err := unix.Exec(ctx, ids[0], "true"); err != nil || *o.ExitCode != 0 {
		t.Fatalf("exec in a sandbox within the budget: %+v %v", o, err)
	}
	if err := unix.DeleteSandbox(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	sb, err := unix.CreateSandbox(ctx, half)
	if err != nil {
		t.Fatalf("after a delete freed 512 MB: %v", err)
	}
	for _, id := range []string{ids[0], sb.ID} {
		if err := unix.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
