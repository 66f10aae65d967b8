package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LocalOptions configures StartLocal.
type LocalOptions struct {
	// Binary is the sandboxd executable. Default: $SANDBOXD_BIN, then
	// sandboxd on PATH, then a sandboxd next to this program.
	Binary string
	// StateDir keeps the daemon's state; default: a new temporary
	// directory, removed by Close unless KeepState is set.
	StateDir  string
	KeepState bool
	// Args are extra arguments to `sandboxd serve`.
	Args []string
	// Env is added to the daemon's environment.
	Env []string
	// Log receives the daemon's log; default: kept in memory and shown in
	// the error if the daemon fails to start.
	Log io.Writer
	// StartTimeout bounds the start (default 30s).
	StartTimeout time.Duration
}

// StartLocal starts a private daemon (`sandboxd serve` on a unix socket in
// a new temporary directory) and returns a client of it. Close stops the
// daemon and removes its temporary files.
func StartLocal(ctx context.Context, opts LocalOptions) (*Client, error) {
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	// A short directory of our own: socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "sandboxd-")
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	// Sandboxes may run as users of their own (when we are root): they
	// must be able to pass through to their workspaces.
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("client: %w", err)
	}
	state := opts.StateDir
	if state == "" {
		state = filepath.Join(dir, "state")
	}
	sock := filepath.Join(dir, "sandboxd.sock")
	notifyPath := filepath.Join(dir, "notify.sock")
	notifyConn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("client: %w", err)
	}
	defer notifyConn.Close()

	args := append([]string{"serve", "--listen", "unix://" + sock, "--state-dir", state}, opts.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET="+notifyPath), opts.Env...)
	logBuf := &tailBuffer{max: 64 << 10}
	var logw io.Writer = logBuf
	if opts.Log != nil {
		logw = io.MultiWriter(logBuf, opts.Log)
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	// Stop the daemon if this process dies without closing the client.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("client: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
			err = fmt.Errorf("the daemon did not stop in 20s and was killed: %w", err)
		}
		if !opts.KeepState {
			os.RemoveAll(dir)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 0 {
			err = nil
		}
		return err
	}

	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := notifyConn.ReadFromUnix(buf)
			if err != nil {
				ready <- err
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if line == "READY=1" {
					ready <- nil
					return
				}
			}
		}
	}()
	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case err := <-exited:
		if !opts.KeepState {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("client: the local daemon exited at start (%v): %s", err, logBuf.String())
	case <-timer.C:
		stop()
		return nil, fmt.Errorf("client: the local daemon was not ready within %v: %s", opts.StartTimeout, logBuf.String())
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	c, err := New("unix://" + sock)
	if err != nil {
		stop()
		return nil, err
	}
	c.close = stop
	return c, nil
}

func findBinary(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if b := os.Getenv("SANDBOXD_BIN"); b != "" {
		return b, nil
	}
	if p, err := exec.LookPath("sandboxd"); err == nil {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "sandboxd")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("client: no sandboxd binary: set LocalOptions.Binary or SANDBOXD_BIN, or put sandboxd on PATH")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.b.String())
}
