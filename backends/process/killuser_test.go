package process

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillUserRefusesRoot(t *testing.T) {
	for _, uid := range []int{0, -1} {
		if err := killUser(uid); err == nil {
			t.Errorf("killUser(%d) = nil, want a refusal", uid)
		}
	}
}

func TestKillUser(t *testing.T) {
	requireRoot(t)
	h := newTestHost(t, true, false)
	b := h.backend(t).Backend
	uid, err := b.allocUID("killuser-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.releaseUID(uid) })
	h.mu.Lock()
	h.uids[uid] = true // the host's cleanup checks nothing of it is left
	h.mu.Unlock()

	// 50 children that sleep, and 20 that keep forking.
	cmd := exec.Command("/bin/sh", "-c", `
		for i in $(seq 50); do sleep 1000 & done
		for i in $(seq 20); do (while :; do sleep 0.05; done) & done
		wait`)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := len(liveUserPids(uid))
		if n >= 71 {
			break
		}
		if time.Now().After(deadline) {
			_ = killUser(uid)
			t.Fatalf("only %d processes of uid %d started", n, uid)
		}
	}
	if err := killUser(uid); err != nil {
		t.Fatalf("killUser: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the shell did not die")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pids := liveUserPids(uid)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = killUser(uid)
			t.Fatalf("processes of uid %d survived killUser: %v", uid, pids)
		}
	}
	// With nothing left it is a no-op.
	if err := killUser(uid); err != nil {
		t.Errorf("killUser with no process: %v", err)
	}
}

// TestKillUserKeepsDaemonCredentials: killUser drops the credentials of the
// thread it runs on and means that thread to end with its goroutine. The Go
// runtime never ends the main thread, though: a locked goroutine that exits
// there wedges it. When killUser's goroutine runs on the main thread (it
// does, often on the first call), the daemon's thread group leader keeps the
// sandbox's uid for good: /proc/PID/status shows it, and every process of
// that uid (the sandbox, or the next one given the uid) may signal, so kill,
// the daemon; "kill -9 -1" in the sandbox does it.
func TestKillUserKeepsDaemonCredentials(t *testing.T) {
	requireRoot(t)
	const uid = testUIDBase + 99_999
	leader := func() string {
		b, _ := os.ReadFile("/proc/self/status")
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Uid:") {
				return strings.Join(strings.Fields(line)[1:], " ")
			}
		}
		return ""
	}
	// What this thread has, as the whole process should (an earlier
	// killUser in this test binary may already have changed the leader).
	before := fmt.Sprintf("%d %d %d %d", os.Getuid(), os.Geteuid(), os.Geteuid(), os.Geteuid())
	for i := 0; i < 5000; i++ {
		if err := killUser(uid); err != nil {
			t.Fatal(err)
		}
		if got := leader(); got != before {
			cmd := exec.Command("/bin/kill", "-0", strconv.Itoa(os.Getpid()))
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
			err := cmd.Run()
			t.Fatalf("after %d calls of killUser(%d) the test process's uids are %q (were %q); uid %d may signal it: %v",
				i+1, uid, got, before, uid, err == nil)
		}
	}
}
