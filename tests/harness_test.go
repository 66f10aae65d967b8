package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// binary is the sandboxd executable under test, built once by TestMain;
// staticHelper is a static build of cmd/sandboxd-helper, the containers'
// init and exec wrapper.
var binary, staticHelper string

// e2eNamespace is the containerd namespace of the daemons the tests start:
// what is left in it at the end is a leak.
const e2eNamespace = "sandboxd-e2e"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sandboxd")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		// The daemon is where concurrency lives: when the suite runs
		// under -race, so does the daemon.
		args = append(args, "-race")
	}
	args = append(args, "github.com/sandboxd/sandboxd/cmd/sandboxd")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sandboxd:", err)
		os.Exit(1)
	}
	// A race-enabled binary is dynamically linked: the containers' init
	// and exec wrapper is a static build, which runs in any image.
	staticHelper = filepath.Join(dir, "sandboxd-helper-static")
	cmd = exec.Command("go", "build", "-o", staticHelper, "github.com/sandboxd/sandboxd/cmd/sandboxd-helper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build static sandboxd:", err)
		os.Exit(1)
	}
	before := &leakBaseline{host: hostHoldings(nil)}
	code := m.Run()
	os.RemoveAll(dir)
	// Stopping is asynchronous at the very end: give the last daemon a
	// moment.
	if leaks := before.leaks(5 * time.Second); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "the tests left these behind:\n  %s\n", strings.Join(leaks, "\n  "))
		code = 1
	}
	os.Exit(code)
}

// cgroupParents lists the daemons' cgroup parents (sandboxd-*) on the host.
func cgroupParents() map[string]bool {
	out := map[string]bool{}
	for _, pattern := range []string{"/sys/fs/cgroup/sandboxd-*", "/sys/fs/cgroup/*/sandboxd-*", "/sys/fs/cgroup/*/*/*/sandboxd-*"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			// runc makes the containerd namespace's parent cgroup and
			// leaves it; what would leak is a sandbox's cgroup in it
			// (see containerdLeftovers).
			if filepath.Base(m) != e2eNamespace {
				out["cgroup parent "+m] = true
			}
		}
	}
	return out
}

// containerdLeftovers lists the containers, tasks and sandbox snapshots
// left in the tests' containerd namespace (nothing if ctr is missing).
func containerdLeftovers() []string {
	var out []string
	for _, what := range [][]string{{"containers", "ls", "-q"}, {"tasks", "ls", "-q"}, {"snapshots", "ls"}, {"leases", "ls", "-q"}} {
		b, err := exec.Command("ctr", append([]string{"-n", e2eNamespace}, what...)...).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] == "KEY" || f[0] == "TASK" {
				continue
			}
			// Image layers stay with their images; only a sandbox's own
			// snapshot (named after it) is its leftover.
			if what[0] == "snapshots" && !strings.HasPrefix(f[0], "sb-") {
				continue
			}
			out = append(out, "containerd "+what[0]+" "+f[0])
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + e2eNamespace + "/sb-*")
	for _, cg := range cgs {
		out = append(out, "cgroup "+cg)
	}
	return out
}

// dockerLeftovers lists the daemon containers StartDocker made that are
// still there (nothing if docker is missing).
func dockerLeftovers() []string {
	out, err := exec.Command("docker", "ps", "-a", "-q", "--filter", "label=io.sandboxd.daemon").Output()
	if err != nil {
		return nil
	}
	var leaks []string
	for _, id := range strings.Fields(string(out)) {
		leaks = append(leaks, "docker container "+id)
	}
	return leaks
}

// inCI reports whether missing components must fail tests.
func inCI() bool { return os.Getenv("CI") != "" }

// require fails (in CI) or skips (elsewhere) when a component is missing.
func require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if inCI() {
		t.Fatalf("%s is required in CI: %v", what, err)
	}
	t.Skipf("skipping: %s is not available here: %v", what, err)
}

// daemon is a running sandboxd process.
type daemon struct {
	t        testing.TB
	dir      string // private root: state, socket, token
	stateDir string
	sock     string
	tcp      string // host:port
	token    string
	cmd      *exec.Cmd
	log      *syncBuffer
	exited   chan struct{}
	extra    []string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDaemon starts sandboxd with a private state directory, listening on
// a unix socket and a loopback TCP port, and waits until it is healthy.
// It is stopped (SIGTERM, then SIGKILL) at the end of the test.
func startDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	return startDaemonAt(t, "", extra...)
}

// startDaemonAt is startDaemon with the state directory at stateDir (""
// is the private one), for tests that need it on a file system of their
// own, such as a small tmpfs that fills up.
func startDaemonAt(t testing.TB, stateDir string, extra ...string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd-")
	if err != nil {
		t.Fatal(err)
	}
	// Sandboxes run as users of their own when we are root: they must be
	// able to pass through to their workspaces.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		t:        t,
		dir:      dir,
		stateDir: filepath.Join(dir, "state"),
		sock:     filepath.Join(dir, "sandboxd.sock"),
		tcp:      freePort(t),
		token:    randomHex(20),
		extra:    extra,
	}
	if stateDir != "" {
		d.stateDir = stateDir
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(d.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(func() {
		d.stop()
		d.checkLog()
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log.String())
		}
		os.RemoveAll(dir)
	})
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	args := append([]string{"serve",
		"--state-dir", d.stateDir,
		"--listen", "unix://" + d.sock,
		"--listen", "tcp://" + d.tcp,
		"--token-file", filepath.Join(d.dir, "token"),
		"--log-level", "debug",
		"--set", "containerd.helper=" + staticHelper,
		"--set", "containerd.namespace=" + e2eNamespace,
		// No warm containers unless a test asks (later flags win).
		"--set", "containerd.pool_size=0",
	}, d.extra...)
	if d.log != nil {
		d.checkLog() // of the run before this restart
	}
	d.log = &syncBuffer{}
	d.cmd = exec.Command(binary, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	// A secret in the daemon's own environment: no sandbox may see it.
	d.cmd.Env = append(os.Environ(), "SANDBOXD_E2E_DAEMON_SECRET=daemon-env-"+d.token[:8])
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.exited) }()
	c := d.unixClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if err := c.Health(ctx); err == nil {
			return
		}
		select {
		case <-d.exited:
			d.t.Fatalf("sandboxd exited at start:\n%s", d.log.String())
		case <-ctx.Done():
			d.t.Fatalf("sandboxd not healthy in 30s:\n%s", d.log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkLog fails the test when the daemon's log shows a data race (the
// daemon is built with -race when the suite is: a race in it must fail
// the suite, not only a test of the daemon package) or the token: tokens
// never appear in logs.
func (d *daemon) checkLog() {
	d.t.Helper()
	log := d.log.String()
	if i := strings.Index(log, "WARNING: DATA RACE"); i >= 0 {
		d.t.Errorf("the daemon hit a data race:\n%s", log[i:min(len(log), i+6000)])
	}
	if strings.Contains(log, d.token) {
		d.t.Errorf("the daemon's log shows its token")
	}
}

// stop sends SIGTERM and waits for a graceful exit (SIGKILL after 30s).
func (d *daemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.t.Errorf("sandboxd did not stop within 30s of SIGTERM")
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// kill9 kills the daemon the hard way.
func (d *daemon) kill9() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// restart starts the daemon again on the same state directory.
func (d *daemon) restart() { d.start() }

func (d *daemon) unixClient() *client.Client {
	c, err := client.New("unix://" + d.sock)
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

func (d *daemon) tcpClient(token string) *client.Client {
	c, err := client.New("http://"+d.tcp, client.WithToken(token))
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

// client returns a unix-socket client closed at the end of the test.
func (d *daemon) client() *client.Client {
	c := d.unixClient()
	d.t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a process sandbox.
func newSandbox(t testing.TB, c *client.Client) string {
	t.Helper()
	sb, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return sb.ID
}

// mustRun runs a command and fails the test on an error answer.
func mustRun(t testing.TB, c *client.Client, id string, a *api.Action) *api.Observation {
	t.Helper()
	obs, err := c.Act(ctxT(t, 60*time.Second), id, a)
	if err != nil {
		t.Fatalf("%s %q: %v", a.Kind, a.Command, err)
	}
	return obs
}

// run runs command in the default session and returns its observation.
func run(t testing.TB, c *client.Client, id, command string) *api.Observation {
	t.Helper()
	return mustRun(t, c, id, api.Run(command))
}

func exitCode(o *api.Observation) string {
	if o.ExitCode == nil {
		return "null"
	}
	return fmt.Sprint(*o.ExitCode)
}

// wantRun checks a finished run observation.
func wantRun(t testing.TB, o *api.Observation, code int, output string) {
	t.Helper()
	if o.Running || o.ExitCode == nil || *o.ExitCode != code || o.Output != output {
		t.Fatalf("got exit %s running=%v output %q; want exit %d output %q (note %q)", exitCode(o), o.Running, o.Output, code, output, o.Note)
	}
}

// processesOf lists processes whose command line contains marker.
func processesOf(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	self := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		if e.Name() == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, marker) {
			out = append(out, e.Name()+": "+cmdline)
		}
	}
	return out
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
