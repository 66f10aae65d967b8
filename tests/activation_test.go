package tests

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// TestSocketActivation: the daemon serves on a unix socket the service
// manager bound and passed (LISTEN_PID, LISTEN_FDS, descriptor 3) instead
// of binding the configured address itself, leaves the socket file when it
// stops, and serves on it again when started again with it.
func TestSocketActivation(t *testing.T) {
	dir, err := os.MkdirTemp("", "sbd-act-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Sandboxes run as users of their own: they pass through to their
	// workspaces.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "activated.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	f, err := ln.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := func() (*exec.Cmd, *syncBuffer, chan struct{}) {
		log := &syncBuffer{}
		// systemd sets LISTEN_PID to the daemon's own pid: the shell's
		// pid is the daemon's once it execs.
		cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, binary, "serve",
			"--state-dir", filepath.Join(dir, "state"),
			"--listen", "unix://"+sock,
			"--token-file", writeToken(t, dir),
			"--set", "containerd.enabled=false")
		cmd.ExtraFiles = []*os.File{f}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		return cmd, log, exited
	}
	for round := range 2 {
		cmd, log, exited := start()
		c, err := client.New("unix://" + sock)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("round %d: not healthy on the passed socket: %v\n%s", round, err, log.String())
		}
		cancel()
		id := newSandbox(t, c)
		wantRun(t, run(t, c, id, "echo activated"), 0, "activated\n")
		if err := c.DeleteSandbox(ctxT(t, 30*time.Second), id); err != nil {
			t.Fatal(err)
		}
		c.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: did not stop\n%s", round, log.String())
		}
		if _, err := os.Lstat(sock); err != nil {
			t.Fatalf("round %d: the daemon removed the service manager's socket: %v", round, err)
		}
	}
}

func writeToken(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte(randomHex(20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
