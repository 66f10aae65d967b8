package tests

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// bootedSystemd is a Debian root booted with systemd as PID 1 in a
// privileged container (containerd), with the binary under test at
// /opt/sbd/sandboxd.
type bootedSystemd struct {
	t  *testing.T
	ns string
	id string
}

// sh runs a command line in the booted system, as root with a normal
// PATH, and returns its combined output and error.
func (b *bootedSystemd) sh(cmd string) (string, error) {
	out, err := exec.Command("ctr", "-n", b.ns, "task", "exec", "--exec-id", "e"+randomHex(6), b.id,
		"/usr/bin/env", "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "/bin/sh", "-c", cmd).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (b *bootedSystemd) must(cmd string) string {
	b.t.Helper()
	out, err := b.sh(cmd)
	if err != nil {
		b.t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return out
}

// bootSystemd builds a Debian root with debootstrap and boots it.
func bootSystemd(t *testing.T) *bootedSystemd {
	t.Helper()
	for _, tool := range []string{"debootstrap", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			require(t, tool, err)
		}
	}
	if err := exec.Command("ctr", "version").Run(); err != nil {
		require(t, "containerd", err)
	}
	root, err := os.MkdirTemp("", "sbd-sysroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// It is the booted system's /: services that are not root (dbus)
	// must get through it.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mirror := os.Getenv("SANDBOXD_TEST_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	out, err := exec.Command("debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus,procps", "bookworm", root, mirror).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require(t, "a Debian root from debootstrap ("+mirror+")", fmt.Errorf("%v: %s", err, strings.Join(lines[max(0, len(lines)-5):], "\n")))
	}
	b := &bootedSystemd{t: t, ns: "sbd-systemd-test", id: "boot-" + randomHex(4)}
	run := exec.Command("ctr", "-n", b.ns, "run", "-d", "--privileged", "--env", "container=containerd",
		"--mount", "type=bind,src="+binary+",dst=/opt/sbd/sandboxd,options=rbind:ro",
		"--rootfs", root, b.id, "/lib/systemd/systemd")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("boot: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("ctr", "-n", b.ns, "task", "kill", "-s", "SIGKILL", b.id).Run()
		for range 50 {
			if exec.Command("ctr", "-n", b.ns, "task", "rm", b.id).Run() == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		exec.Command("ctr", "-n", b.ns, "container", "rm", b.id).Run()
	})
	var state string
	deadline := time.Now().Add(90 * time.Second)
	for {
		state, _ = b.sh("systemctl is-system-running")
		if state == "running" || state == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			jobs, _ := b.sh("systemctl list-jobs --no-pager; systemctl --failed --no-pager")
			t.Fatalf("systemd did not finish booting in 90s (state %q):\n%s", state, jobs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if state == "degraded" {
		failed, _ := b.sh("systemctl --failed --no-legend --no-pager")
		t.Logf("the system is degraded (not sandboxd's doing):\n%s", failed)
	}
	return b
}

// TestSystemdBoot: `sandboxd install --enable` in a booted systemd gives an
// active, hardened service that runs sandboxes through its socket, keeps
// its event logs across a restart, is started by its socket, leaves
// nothing running when stopped, and uninstall takes it all back.
func TestSystemdBoot(t *testing.T) {
	b := bootSystemd(t)
	b.must("/opt/sbd/sandboxd install --enable")
	if got := b.must("systemctl is-active sandboxd.service sandboxd.socket"); got != "active\nactive" {
		t.Fatalf("after install --enable: %q", got)
	}
	// READY came after the listeners: the status line is the daemon's.
	if got := b.must("systemctl show sandboxd.service --property=StatusText"); got != "StatusText=serving" {
		t.Errorf("status: %q", got)
	}
	const addr = "--addr unix:///run/sandboxd/sandboxd.sock"
	id := b.must("sandboxd create " + addr)
	if got := b.must("sandboxd run " + addr + " " + id + " 'echo hello from $(id -u)'"); !strings.HasPrefix(got, "hello from 2") {
		t.Errorf("run in the service: %q", got)
	}
	if got := b.must("grep NoNewPrivs /proc/$(systemctl show -P MainPID sandboxd)/status"); !strings.HasSuffix(got, "1") {
		t.Errorf("the service runs without no_new_privs: %q", got)
	}

	// A restart keeps the event log and the sandbox.
	b.must("systemctl restart sandboxd.service")
	events := b.must("sandboxd events " + addr + " " + id)
	if n := len(strings.Split(events, "\n")); n < 2 {
		t.Errorf("events after a restart: %d lines\n%s", n, events)
	}
	if got := b.must("sandboxd run " + addr + " " + id + " 'echo again'"); !strings.HasPrefix(got, "again\n") || !strings.Contains(got, "daemon restarted") {
		t.Errorf("run after a restart: %q", got)
	}

	// Socket activation: with the service stopped, a connection starts it.
	b.must("systemctl stop sandboxd.service")
	if got, _ := b.sh("systemctl is-active sandboxd.service"); got != "inactive" {
		t.Fatalf("after stop: %q", got)
	}
	b.must("sandboxd ps " + addr)
	if got := b.must("systemctl is-active sandboxd.service"); got != "active" {
		t.Errorf("after a connection to the socket: %q", got)
	}

	// Stopping leaves no daemon and no sandbox process.
	b.must("systemctl stop sandboxd.socket sandboxd.service")
	if got, _ := b.sh("pgrep -a -x sandboxd; ps -e -o uid= | awk '$1 >= 2000000000' | wc -l"); got != "0" {
		t.Errorf("left running after stop: %q", got)
	}

	b.must("sandboxd uninstall")
	for _, f := range []string{"/usr/local/bin/sandboxd", "/etc/systemd/system/sandboxd.service", "/etc/systemd/system/sandboxd.socket"} {
		if out, err := b.sh("test -e " + f); err == nil {
			t.Errorf("%s is still there after uninstall %s", f, out)
		}
	}
	if out, err := b.sh("systemctl cat sandboxd.service"); err == nil {
		t.Errorf("systemd still knows sandboxd.service:\n%s", out)
	}
}
