package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// requireContainerd skips (fails in CI) unless the daemon's containerd
// backend is available.
func requireContainerd(t *testing.T, c *client.Client) {
	t.Helper()
	info, err := c.Info(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range info.Backends {
		if b.Name == api.BackendContainerd {
			if !b.Available {
				require(t, "containerd", errors.New(b.Reason))
			}
			return
		}
	}
	t.Fatal("no containerd backend in /v1/info")
}

// newContainerd creates a containerd sandbox, deleted when the test ends
// (containers outlive their daemon: nothing else would remove it).
func newContainerd(t *testing.T, d *daemon, req api.CreateSandboxRequest) string {
	t.Helper()
	req.Backend = api.BackendContainerd
	c := d.unixClient()
	defer c.Close()
	sb, err := c.CreateSandbox(ctxT(t, 60*time.Second), req)
	if err != nil {
		t.Fatalf("create containerd sandbox: %v", err)
	}
	t.Cleanup(func() {
		c := d.unixClient()
		defer c.Close()
		if err := c.DeleteSandbox(context.Background(), sb.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	})
	return sb.ID
}

func TestContainerdSandbox(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{Env: map[string]string{"GREETING": "hello"}})
	sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
	if err != nil || sb.Workdir != "/workspace" || sb.Backend != api.BackendContainerd || sb.Network != api.NetworkNone {
		t.Fatalf("sandbox %+v %v", sb, err)
	}

	// A stateful shell with the host's tools.
	wantRun(t, run(t, c, id, "mkdir -p src && cd src && export X=42 && echo $GREETING"), 0, "hello\n")
	o := run(t, c, id, `echo "$X $(pwd)"; python3 -c 'print(6*7)'; awk 'BEGIN{print "awk"}'`)
	wantRun(t, o, 0, "42 /workspace/src\n42\nawk\n")
	if o.Cwd != "/workspace/src" {
		t.Errorf("cwd %q", o.Cwd)
	}
	if o := run(t, c, id, "exit 3"); exitCode(o) != "3" || !o.SessionEnded {
		t.Fatalf("exit 3: %+v", o)
	}
	wantRun(t, run(t, c, id, "echo $X; pwd"), 0, "\n/workspace\n")

	// exec: literal argv, exit codes, not found.
	o = mustRun(t, c, id, api.Exec("sh", "-c", `echo "$1"; echo err >&2; exit 4`, "sh", "a;b $(x)"))
	if o.Stdout != "a;b $(x)\n" || o.Stderr != "err\n" || exitCode(o) != "4" {
		t.Fatalf("exec: %+v", o)
	}
	if o, err := c.Act(ctxT(t, 30*time.Second), id, api.Exec("no-such-program")); err != nil || exitCode(o) != "127" {
		t.Errorf("exec of a missing program: %v %+v", err, o)
	}
	o = mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"sleep", "30"}, TimeoutS: api.Seconds(0.5)})
	if !o.TimedOut || o.Signal != "SIGKILL" {
		t.Errorf("exec past its timeout: %+v", o)
	}

	// Files, through the container's own view.
	if _, err := c.WriteFile(ctxT(t, 10*time.Second), id, "src/a.py", "print('a')\n"); err != nil {
		t.Fatal(err)
	}
	o = mustRun(t, c, id, api.Exec("python3", "src/a.py"))
	if o.Stdout != "a\n" {
		t.Fatalf("python3 src/a.py: %+v", o)
	}
	o, err = c.ReadFile(ctxT(t, 10*time.Second), id, "/etc/os-release")
	if err != nil || !strings.Contains(o.Content, "NAME=") {
		t.Errorf("read /etc/os-release: %v %+v", err, o)
	}
	if o, err = c.ReadFile(ctxT(t, 10*time.Second), id, "/etc/shadow"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("read /etc/shadow: %v %+v", err, o)
	}
	if _, err := c.WriteFile(ctxT(t, 10*time.Second), id, "/usr/bin/evil", "x"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("write to the read-only /usr: %v", err)
	}
	run(t, c, id, "ln -s /proc/1/root/etc out; ln -s ../../../../../../ up")
	for _, p := range []string{"out/passwd", "up/etc/hostname"} {
		if _, err := c.ReadFile(ctxT(t, 10*time.Second), id, p); !errors.Is(err, client.ErrPermissionDenied) && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("read through planted link %s: %v", p, err)
		}
	}
	var buf strings.Builder
	if _, _, err := c.Download(ctxT(t, 10*time.Second), id, "src/a.py", &buf); err != nil || buf.String() != "print('a')\n" {
		t.Errorf("download: %q %v", buf.String(), err)
	}
}

// TestContainerdWorkdirAndHostNetwork: a workdir of the caller's choice,
// and the host's network on request.
func TestContainerdWorkdirAndHostNetwork(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{Workdir: "/app/src", Network: api.NetworkHost})
	sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
	if err != nil || sb.Workdir != "/app/src" || sb.Network != api.NetworkHost {
		t.Fatalf("sandbox %+v %v", sb, err)
	}
	wantRun(t, run(t, c, id, "pwd; touch made-here"), 0, "/app/src\n")
	if o, err := c.ReadFile(ctxT(t, 10*time.Second), id, "/app/src/made-here"); err != nil || o.Path != "/app/src/made-here" {
		t.Errorf("read in the workdir: %+v %v", o, err)
	}
	o := run(t, c, id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '")
	if strings.TrimSpace(o.Output) == "lo" {
		t.Errorf("network host sees only loopback: %q", o.Output)
	}
	for _, wd := range []string{"relative", "/", "/proc/x", "/usr/local"} {
		_, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{Backend: api.BackendContainerd, Workdir: wd})
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("workdir %q: %v, want invalid_argument", wd, err)
		}
	}
}

// TestContainerdIsolation probes what a sandbox must not be able to do.
func TestContainerdIsolation(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{})
	for _, tc := range []struct{ name, cmd string }{
		{"mount", "mount -t tmpfs none /mnt 2>&1 || mount -t tmpfs none /tmp"},
		{"unshare", "unshare -Ur true"},
		{"unshare-net", "unshare -n true"},
		{"proc-sys", "echo 1 > /proc/sys/kernel/panic"},
		{"kcore", "head -c 1 /proc/kcore | wc -c | grep -qx 1"},
		{"mknod", "mknod /tmp/sda b 8 0"},
		{"raw-socket", `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'`},
		{"network", `python3 -c 'import socket; socket.create_connection(("1.1.1.1", 53), timeout=3)'`},
		{"ptrace-init", "cat /proc/1/environ | grep -q SANDBOXD_E2E"},
		{"write-usr", "touch /usr/bin/x"},
		{"write-etc", "echo x >> /etc/passwd"},
		{"chroot", "chroot / true"},
		{"kmsg", "head -c 1 /dev/kmsg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, c, id, tc.cmd)
			if o.ExitCode == nil || *o.ExitCode == 0 {
				t.Errorf("%q was allowed: exit %s, output %q", tc.cmd, exitCode(o), o.Output)
			}
		})
	}
	// Only loopback.
	o := run(t, c, id, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
	wantRun(t, o, 0, "lo\n")
	// Nothing of the daemon: env, token, state dir, other sandboxes.
	o = run(t, c, id, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; ls / /workspace")
	for _, secret := range []string{"SANDBOXD_E2E_DAEMON_SECRET", d.token, d.stateDir} {
		if strings.Contains(o.Output, secret) {
			t.Errorf("the sandbox sees %q", secret)
		}
	}
	if o := run(t, c, id, "ls "+d.stateDir); o.ExitCode == nil || *o.ExitCode == 0 {
		t.Errorf("the sandbox sees the state directory: %q", o.Output)
	}
}

func TestContainerdLimits(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{Limits: &api.Limits{MemoryMB: 96, Pids: 64}})
	if o := mustRun(t, c, id, api.Exec("sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max")); strings.TrimSpace(o.Stdout) != "64" {
		t.Errorf("pids.max inside = %q (%q), want 64", o.Stdout, o.Stderr)
	}

	t.Run("ForkBomb", func(t *testing.T) {
		bomb := newContainerd(t, d, api.CreateSandboxRequest{Limits: &api.Limits{Pids: 64}})
		// The bomb fills the pids limit and goes on trying; whatever its
		// root does, the sandbox's processes stay within the limit and
		// the daemon and the other sandboxes carry on.
		o := mustRun(t, c, bomb, &api.Action{Kind: api.KindExec, Argv: []string{"bash", "-c", "b(){ b | b & }; b; wait"}, TimeoutS: api.Seconds(5)})
		t.Logf("fork bomb: exit %s, timed out %v", exitCode(o), o.TimedOut)
		if o := mustRun(t, c, id, api.Exec("echo", "ok")); o.Stdout != "ok\n" {
			t.Errorf("another sandbox during the bomb: %+v", o)
		}
		// The bombed sandbox can still be destroyed, leaving nothing.
		if err := c.DeleteSandbox(ctxT(t, 60*time.Second), bomb); err != nil {
			t.Fatalf("delete the bombed sandbox: %v", err)
		}
		out, _ := exec.Command("ctr", "-n", e2eNamespace, "tasks", "ls", "-q").Output()
		if strings.Contains(string(out), bomb) {
			t.Errorf("the bombed sandbox's task is still there")
		}
	})
	t.Run("MemoryBomb", func(t *testing.T) {
		o := mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"python3", "-c", "x = bytearray(1 << 30); print('allocated')"}, TimeoutS: api.Seconds(60)})
		if !o.OOMKilled || o.Signal != "SIGKILL" || strings.Contains(o.Stdout, "allocated") {
			t.Errorf("memory bomb: %+v", o)
		}
		if o := mustRun(t, c, id, api.Exec("echo", "ok")); o.Stdout != "ok\n" {
			t.Errorf("after the memory bomb: %+v", o)
		}
	})
	t.Run("KillTree", func(t *testing.T) {
		marker := fmt.Sprintf("sleep %d", 3000+time.Now().UnixNano()%1000)
		o := mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"sh", "-c", "setsid sh -c '" + marker + "' & (" + marker + " &) ; " + marker}, TimeoutS: api.Seconds(1)})
		if !o.TimedOut {
			t.Errorf("not timed out: %+v", o)
		}
		eventually(t, 10*time.Second, "the whole tree to be gone", func() bool { return len(processesOf(marker)) == 0 })
	})
}

// TestContainerdDaemonKill9 kills the daemon with two containerd sandboxes,
// one with a command running, and checks everything is re-adopted.
func TestContainerdDaemonKill9(t *testing.T) {
	d := startDaemon(t)
	c := d.unixClient()
	requireContainerd(t, c)
	a := newContainerd(t, d, api.CreateSandboxRequest{})
	b := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, a, "mkdir -p /tmp/w && cd /tmp/w && export KEPT=yes && echo ready"), 0, "ready\n")
	wantRun(t, run(t, c, b, "cd /root && SECOND=1; export SECOND"), 0, "")
	long := api.Run("for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; echo end-$KEPT-$(pwd)")
	long.ID = "long-" + randomHex(4)
	long.TimeoutS = api.Seconds(120)
	errc := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		_, err := c.ActStream(context.Background(), a, long, func(o client.Output) { lines <- string(o.Data) })
		errc <- err
	}()
	select {
	case <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("the long command printed nothing")
	}
	d.kill9()
	if err := <-errc; err == nil {
		t.Fatal("the stream answered although the daemon was killed")
	}
	c.Close()
	d.restart()
	c = d.client()
	// The in-flight action is answered when it ends: its retry waits for
	// it (conflict while it runs), and the event log has its observation
	// with the output from before and after the restart.
	var obs *api.Observation
	eventually(t, 30*time.Second, "the resumed observation", func() bool {
		o, err := c.Act(ctxT(t, 30*time.Second), a, long)
		if errors.Is(err, client.ErrConflict) {
			return false
		}
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		obs = o
		return true
	})
	want := "line1\nline2\nline3\nline4\nline5\nline6\nend-yes-/tmp/w\n"
	if obs.Output != want || exitCode(obs) != "0" || obs.Lost {
		t.Fatalf("resumed observation: %+v, want output %q", obs, want)
	}
	var full strings.Builder
	if _, err := c.Output(ctxT(t, 10*time.Second), a, obs.Cause, "", &full); err != nil || full.String() != want {
		t.Errorf("logged output %q %v", full.String(), err)
	}
	wantRun(t, run(t, c, a, "echo $KEPT; pwd"), 0, "yes\n/tmp/w\n")
	wantRun(t, run(t, c, b, "echo $SECOND; pwd"), 0, "1\n/root\n")
	// Sessions started after the restart are fine too.
	o := mustRun(t, c, b, &api.Action{Kind: api.KindRun, Command: "echo other", Session: "other"})
	wantRun(t, o, 0, "other\n")
}

// TestContainerdUnavailable: a daemon whose containerd is not there lists
// the backend as unavailable with the reason, refuses containerd creates
// with 503, runs process sandboxes, and picks containerd up once it is.
func TestContainerdUnavailable(t *testing.T) {
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "containerd.sock")
	d := startDaemon(t, "--set", "containerd.socket="+sock)
	c := d.client()
	info, err := c.Info(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range info.Backends {
		if b.Name == api.BackendContainerd && (b.Available || !strings.Contains(b.Reason, sock)) {
			t.Errorf("containerd backend: %+v", b)
		}
	}
	if _, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{Backend: api.BackendContainerd}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("create with containerd down: %v", err)
	}
	wantRun(t, run(t, c, newSandbox(t, c), "echo process"), 0, "process\n")
	if o := mustRun(t, c, wasmSandbox(t, c, api.CreateSandboxRequest{}), api.Exec("guest.wasm")); o.Stdout != "hello from wasm\n" {
		t.Fatalf("wasm with containerd down: %+v", o)
	}

	real := "/run/containerd/containerd.sock"
	if _, err := os.Stat(real); err != nil {
		require(t, "containerd", err)
	}
	if err := os.Symlink(real, sock); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the containerd backend to come up", func() bool {
		info, err := c.Info(ctxT(t, 10*time.Second))
		if err != nil {
			return false
		}
		for _, b := range info.Backends {
			if b.Name == api.BackendContainerd {
				return b.Available
			}
		}
		return false
	})
	id := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, id, "echo up"), 0, "up\n")
}

// TestContainerdRestartContainerd restarts containerd under a running
// daemon: a command running across it completes normally, and the
// sandboxes work afterwards. It uses a containerd of its own, so that
// other tests (and packages tested at the same time) keep theirs.
func TestContainerdRestartContainerd(t *testing.T) {
	cd := startContainerd(t)
	d := startDaemon(t, "--set", "containerd.socket="+cd.sock)
	c := d.client()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, id, "cd /tmp && export KEEP=1"), 0, "")
	done := make(chan *api.Observation, 1)
	go func() {
		o, err := c.Act(context.Background(), id, &api.Action{Kind: api.KindExec, Argv: []string{"sh", "-c", "sleep 3; echo across"}, TimeoutS: api.Seconds(60)})
		if err != nil {
			t.Errorf("exec across the containerd restart: %v", err)
		}
		done <- o
	}()
	time.Sleep(500 * time.Millisecond)
	cd.restart(t)
	if o := <-done; o != nil && (o.Stdout != "across\n" || exitCode(o) != "0") {
		t.Errorf("exec across the restart: %+v", o)
	}
	eventually(t, 30*time.Second, "the sandbox to answer", func() bool {
		o, err := c.Act(ctxT(t, 30*time.Second), id, api.Exec("echo", "after"))
		return err == nil && o.Stdout == "after\n"
	})
	wantRun(t, run(t, c, id, "echo $KEEP $(pwd)"), 0, "1 /tmp\n")
	id2 := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, id2, "echo new"), 0, "new\n")
}

// privateContainerd is a containerd of a test's own.
type privateContainerd struct {
	bin, dir, sock string
	cmd            *exec.Cmd
	exited         chan struct{}
}

// startContainerd starts a containerd with its own root, state and
// sockets (the CRI plugin off), stopped when the test ends.
func startContainerd(t *testing.T) *privateContainerd {
	t.Helper()
	bin, err := exec.LookPath("containerd")
	if err != nil {
		require(t, "containerd", err)
	}
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	cd := &privateContainerd{bin: bin, dir: dir, sock: filepath.Join(dir, "containerd.sock")}
	cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), cd.sock, cd.sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cd.start(t)
	t.Cleanup(func() {
		cd.stop(t)
		os.RemoveAll(dir)
	})
	return cd
}

func (cd *privateContainerd) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(cd.dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cd.cmd = exec.Command(cd.bin, "--config", filepath.Join(cd.dir, "config.toml"))
	cd.cmd.Stdout, cd.cmd.Stderr = logf, logf
	if err := cd.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cd.exited = make(chan struct{})
	go func() { cd.cmd.Wait(); close(cd.exited) }()
	eventually(t, 30*time.Second, "the private containerd to answer", func() bool {
		return exec.Command("ctr", "--address", cd.sock, "version").Run() == nil
	})
}

// stop stops containerd (SIGTERM; its shims and containers live on).
func (cd *privateContainerd) stop(t *testing.T) {
	_ = cd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cd.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the private containerd did not stop in 20s")
		_ = cd.cmd.Process.Kill()
		<-cd.exited
	}
}

func (cd *privateContainerd) restart(t *testing.T) {
	t.Helper()
	cd.stop(t)
	time.Sleep(time.Second)
	cd.start(t)
}

// TestContainerdDelete: deleting is idempotent, stops what runs, and
// leaves nothing in containerd.
func TestContainerdDelete(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	requireContainerd(t, c)
	sb, err := c.CreateSandbox(ctxT(t, 60*time.Second), api.CreateSandboxRequest{Backend: api.BackendContainerd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	marker := fmt.Sprintf("sleep %d", 4000+time.Now().UnixNano()%1000)
	go c.Act(context.Background(), sb.ID, api.Run("nohup setsid "+marker+" & "+marker))
	eventually(t, 20*time.Second, "the commands to run", func() bool { return len(processesOf(marker)) >= 2 })
	if err := c.DeleteSandbox(ctxT(t, 60*time.Second), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctxT(t, 60*time.Second), sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	eventually(t, 10*time.Second, "its processes to be gone", func() bool { return len(processesOf(marker)) == 0 })
	for _, what := range [][]string{{"containers", "ls", "-q"}, {"tasks", "ls", "-q"}, {"snapshots", "ls"}} {
		out, _ := exec.Command("ctr", append([]string{"-n", e2eNamespace}, what...)...).Output()
		if strings.Contains(string(out), sb.ID) {
			t.Errorf("ctr %s still lists %s:\n%s", what[0], sb.ID, out)
		}
	}
	if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("its state directory is still there: %v", err)
	}
}

// TestContainerdAdoptedWhenBack: a daemon that starts while containerd is
// unreachable keeps its containerd sandboxes (unavailable, not lost for
// good) and re-adopts them, shells and all, once containerd answers.
func TestContainerdAdoptedWhenBack(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	real := "/run/containerd/containerd.sock"
	if err := os.Symlink(real, sock); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--set", "containerd.socket="+sock)
	c := d.unixClient()
	requireContainerd(t, c)
	id := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, id, "cd /root && export BACK=again && echo set"), 0, "set\n")
	c.Close()
	d.stop()

	// containerd "goes away" for the daemon, which starts anyway.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	d.restart()
	c = d.client()
	sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
	if err != nil || sb.State != api.StateLost || !strings.Contains(sb.Reason, "re-adopted when it is back") {
		t.Fatalf("sandbox while containerd is away: %+v %v", sb, err)
	}
	if _, err := c.Act(ctxT(t, 10*time.Second), id, api.Run("true")); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("action while containerd is away: %v", err)
	}
	if err := os.Symlink(real, sock); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the sandbox to be re-adopted", func() bool {
		sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
		return err == nil && sb.State == api.StateRunning
	})
	wantRun(t, run(t, c, id, "echo $BACK; pwd"), 0, "again\n/root\n")
}

// TestContainerdPool: with a warm pool, creates take started containers;
// neither a delete, a kill -9 of the daemon nor its stop leaves any
// container behind (the harness checks at the end).
func TestContainerdPool(t *testing.T) {
	d := startDaemon(t, "--set", "containerd.pool_size=1")
	c := d.unixClient()
	requireContainerd(t, c)
	poolContainers := func() []string {
		out, _ := exec.Command("ctr", "-n", e2eNamespace, "containers", "ls", "-q").Output()
		var ids []string
		for _, id := range strings.Fields(string(out)) {
			if strings.HasPrefix(id, "pool-") {
				ids = append(ids, id)
			}
		}
		return ids
	}
	first := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, first, "echo first"), 0, "first\n")
	eventually(t, 30*time.Second, "a warm container", func() bool { return len(poolContainers()) >= 1 })
	second := newContainerd(t, d, api.CreateSandboxRequest{Env: map[string]string{"WARM": "yes"}, Limits: &api.Limits{Pids: 99}})
	wantRun(t, run(t, c, second, "echo $WARM $(cat /sys/fs/cgroup/pids/pids.max); pwd"), 0, "yes 99\n/workspace\n")
	d.kill9()
	c.Close()
	d.restart()
	c = d.client()
	wantRun(t, run(t, c, second, "echo $WARM"), 0, "yes\n")
	third := newContainerd(t, d, api.CreateSandboxRequest{})
	wantRun(t, run(t, c, third, "echo third"), 0, "third\n")
}
