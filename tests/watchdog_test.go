package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNotifyAndWatchdog: under a service manager (NOTIFY_SOCKET) the
// daemon says READY=1 once it serves, keeps a watchdog (WATCHDOG_USEC)
// alive, and says STOPPING=1 when it stops.
func TestNotifyAndWatchdog(t *testing.T) {
	dir, err := os.MkdirTemp("", "sbd-wd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o711)
	sockPath := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cmd := exec.Command(binary, "serve", "--state-dir", filepath.Join(dir, "state"),
		"--listen", "unix://"+filepath.Join(dir, "sbd.sock"), "--token-file", writeToken(t, dir),
		"--set", "containerd.enabled=false")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath, "WATCHDOG_USEC=200000")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var got []string
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for watchdogs := 0; watchdogs < 3; {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notifications %q, then %v\n%s", got, err, log.String())
		}
		got = append(got, string(buf[:n]))
		if string(buf[:n]) == "WATCHDOG=1" {
			if !strings.HasPrefix(got[0], "READY=1") {
				t.Fatalf("a watchdog ping before READY: %q", got)
			}
			watchdogs++
		}
	}
	cmd.Process.Signal(os.Interrupt)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no STOPPING=1 after SIGINT: %q, %v", got, err)
		}
		if string(buf[:n]) == "STOPPING=1" {
			break
		}
	}
	cmd.Wait()
}
