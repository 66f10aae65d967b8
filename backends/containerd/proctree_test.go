package containerd

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

func TestKillTreeRefusesNonProcesses(t *testing.T) {
	// pid 0 and 1 (and no pidfd) must never reach kill(2): kill(0) is the
	// caller's own process group.
	for _, tc := range []struct{ pid, pidfd int }{{0, -1}, {1, -1}, {-1, -1}, {os.Getpid(), -1}, {0, 3}, {1, 3}} {
		if err := killTree(tc.pid, tc.pidfd); err == nil {
			t.Errorf("killTree(%d, %d) = nil, want a refusal", tc.pid, tc.pidfd)
		}
	}
}

func TestKillTreeKillsDetachedDescendants(t *testing.T) {
	// A root whose children detach (setsid, double fork), started through
	// the exec wrapper (this test binary is one, see TestMain), which
	// makes it a subreaper as every sandbox process is.
	cmd := exec.Command(os.Args[0], sbinit.Arg, sbinit.ModeExec, "sh", "-c", "setsid sleep 1001 & (sleep 1002 &); sleep 1003")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Skip("no pidfd:", err)
	}
	defer unix.Close(pidfd)
	deadline := time.Now().Add(5 * time.Second)
	for len(descendants(cmd.Process.Pid)) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	kids := descendants(cmd.Process.Pid)
	if len(kids) < 3 {
		t.Fatalf("descendants = %v", kids)
	}
	if err := killTree(cmd.Process.Pid, pidfd); err != nil {
		t.Fatal(err)
	}
	<-done
	for _, k := range kids {
		deadline := time.Now().Add(5 * time.Second)
		for {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(k, &ws, unix.WNOHANG, nil)
			if unix.Kill(k, 0) != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("descendant %d survived", k)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
