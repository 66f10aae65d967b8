package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

var (
	guestOnce sync.Once
	guestWasm []byte
	guestErr  error
)

// guest builds testdata/wasmguest for WASI once per test binary.
func guest(t testing.TB) []byte {
	t.Helper()
	guestOnce.Do(func() {
		out := filepath.Join(os.TempDir(), fmt.Sprintf("sandboxd-wasmguest-%d.wasm", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", out, "./testdata/wasmguest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			guestErr = fmt.Errorf("build the wasm guest: %v\n%s", err, b)
			return
		}
		guestWasm, guestErr = os.ReadFile(out)
		os.Remove(out)
	})
	require(t, "a Go toolchain that builds GOOS=wasip1", guestErr)
	return guestWasm
}

// wasmSandbox creates a wasm sandbox holding the guest as guest.wasm.
func wasmSandbox(t testing.TB, c *client.Client, req api.CreateSandboxRequest) string {
	t.Helper()
	req.Backend = api.BackendWasm
	sb, err := c.CreateSandbox(ctxT(t, 30*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Workdir != "/workspace" || sb.Network != api.NetworkNone {
		t.Fatalf("wasm sandbox: %+v", sb)
	}
	g := guest(t)
	if _, err := c.Upload(ctxT(t, 30*time.Second), sb.ID, "guest.wasm", bytes.NewReader(g), int64(len(g)), false); err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func TestWasmExec(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := wasmSandbox(t, c, api.CreateSandboxRequest{Env: map[string]string{"FROM_SANDBOX": "s"}})
	if _, err := c.WriteFile(ctxT(t, 10*time.Second), id, "in.txt", "input file\n"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		action *api.Action
		code   int
		stdout string // exact, or a prefix when it ends with "..."
		stderr string
	}{
		{"hello", api.Exec("guest.wasm"), 0, "hello from wasm\n", ""},
		{"args", api.Exec("guest.wasm", "args", "a b", "$HOME", ";"), 0, "args|a b|$HOME|;\n", ""},
		{"env: the sandbox's and the action's, nothing else", &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "env"}, Env: map[string]string{"FROM_ACTION": "a"}}, 0, "FROM_ACTION=a\nFROM_SANDBOX=s\nPWD=/workspace\n", ""},
		{"files", api.Exec("/workspace/guest.wasm", "files"), 0, "input file\nguest.wasm\nin.txt\nout.txt\nsub\n", ""},
		{"exit 3", api.Exec("guest.wasm", "exit", "3"), 3, "", ""},
		{"stderr", api.Exec("guest.wasm", "stderr"), 7, "", "to stderr\n"},
		{"stdin", &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "stdin"}, Stdin: "shout\n"}, 0, "SHOUT\n", ""},
		{"no stdin: end of file at once, never a block", &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "stdin"}, TimeoutS: api.Seconds(30)}, 0, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRun(t, c, id, tc.action)
			if o.ExitCode == nil || *o.ExitCode != tc.code || o.Stdout != tc.stdout || o.Stderr != tc.stderr {
				t.Fatalf("exit %s stdout %q stderr %q", exitCode(o), o.Stdout, o.Stderr)
			}
		})
	}
	// What the module wrote is the sandbox's files.
	for p, want := range map[string]string{"out.txt": "written by wasm\n", "sub/dir/rel.txt": "relative\n"} {
		if o, err := c.ReadFile(ctxT(t, 10*time.Second), id, p); err != nil || o.Content != want {
			t.Errorf("%s: %+v %v", p, o, err)
		}
	}
}

func TestWasmLimits(t *testing.T) {
	d := startDaemon(t)
	leaks := newLeakCheck(t, d)
	c := d.client()
	id := wasmSandbox(t, c, api.CreateSandboxRequest{Limits: &api.Limits{MemoryMB: 64}})

	// Compile first (tens of seconds under -race): the deadline is the
	// run's, and the check below times the run.
	if o := mustRun(t, c, id, api.Exec("guest.wasm")); o.Stdout != "hello from wasm\n" {
		t.Fatalf("hello: %+v", o)
	}
	// An infinite loop stops at its deadline.
	start := time.Now()
	o := mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "loop"}, TimeoutS: api.Seconds(1)})
	if !o.TimedOut || o.ExitCode == nil || *o.ExitCode != 137 || time.Since(start) > 10*time.Second {
		t.Fatalf("loop: timed_out=%v exit %s after %v", o.TimedOut, exitCode(o), time.Since(start))
	}
	// So does a module asleep in one long host call.
	start = time.Now()
	o = mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "sleep"}, TimeoutS: api.Seconds(1)})
	if !o.TimedOut || o.ExitCode == nil || *o.ExitCode != 137 || time.Since(start) > 10*time.Second {
		t.Fatalf("sleep: timed_out=%v exit %s after %v", o.TimedOut, exitCode(o), time.Since(start))
	}
	// Memory growth stops at the cap: the module fails, the daemon does not.
	o = mustRun(t, c, id, &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "alloc"}, TimeoutS: api.Seconds(30)})
	if o.ExitCode == nil || *o.ExitCode == 0 || o.TimedOut || !strings.Contains(o.Stderr, "out of memory") {
		t.Fatalf("alloc past 64 MiB: exit %s timed_out %v stderr %.200q", exitCode(o), o.TimedOut, o.Stderr)
	}
	// A flood of output is capped in the observation and kept in the log.
	o = mustRun(t, c, id, api.Exec("guest.wasm", "flood", "5000000"))
	if o.ExitCode == nil || *o.ExitCode != 0 || !o.Truncated || len(o.Stdout) > 1<<20+200 {
		t.Fatalf("flood: exit %s truncated %v len %d", exitCode(o), o.Truncated, len(o.Stdout))
	}
	if n, err := c.Output(ctxT(t, 30*time.Second), id, o.Cause, api.StreamStdout, discard{}); err != nil || n != 5000000 {
		t.Fatalf("flood in the log: %d %v", n, err)
	}
	// Still fine.
	if o := mustRun(t, c, id, api.Exec("guest.wasm")); o.Stdout != "hello from wasm\n" {
		t.Fatalf("after the limits: %+v", o)
	}
	if err := c.DeleteSandbox(ctxT(t, 30*time.Second), id); err != nil {
		t.Fatal(err)
	}
	c.CloseIdle()
	leaks.check()
}

func TestWasmConfinement(t *testing.T) {
	d := startDaemon(t, "--set", "wasm.max_module_bytes=4194304")
	c := d.client()
	id := wasmSandbox(t, c, api.CreateSandboxRequest{})
	outside := filepath.Join(d.dir, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o644)
	ws := filepath.Join(d.stateDir, "wasm", id)
	// Links planted in the workspace (as an upload or another module could).
	os.Symlink(outside, filepath.Join(ws, "abs"))
	os.Symlink("../../../outside", filepath.Join(ws, "rel"))
	before, passwd := treeHash(t, outside), treeHash(t, "/etc/passwd")
	o := mustRun(t, c, id, api.Exec("guest.wasm", "escape", "../../etc/passwd", "/etc/passwd", "/workspace/../../etc/passwd", "abs/secret", "rel/secret", "/workspace/abs/secret"))
	if strings.Contains(o.Stdout, "READ") || !strings.Contains(o.Stdout, "abs/secret: denied") || o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("escapes: exit %s\n%s%s", exitCode(o), o.Stdout, o.Stderr)
	}
	if treeHash(t, outside) != before || treeHash(t, "/etc/passwd") != passwd {
		t.Fatal("something outside the sandbox changed")
	}
	// Not a module, not valid, not there, too large: clear refusals.
	if _, err := c.WriteFile(ctxT(t, 10*time.Second), id, "bad.wasm", "not wasm"); err != nil {
		t.Fatal(err)
	}
	// One byte over wasm.max_module_bytes (set below): refused before
	// anything compiles.
	huge := append([]byte("\x00asm\x01\x00\x00\x00"), make([]byte, 4<<20)...)
	if _, err := c.Upload(ctxT(t, 30*time.Second), id, "huge.wasm", bytes.NewReader(huge), int64(len(huge)), false); err != nil {
		t.Fatal(err)
	}
	for argv0, says := range map[string]string{
		"bad.wasm":  "not a valid WebAssembly module",
		"in.txt":    "argv[0] must name a .wasm file in the sandbox",
		"huge.wasm": "more than the largest module the daemon runs (4194304)",
	} {
		if _, err := c.Exec(ctxT(t, 10*time.Second), id, argv0); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), says) {
			t.Errorf("exec %s: %v, want invalid_argument saying %q", argv0, err, says)
		}
	}
	// A module outside the sandbox is refused the way a shell refuses a
	// program it may not run: exit 126, said on stderr.
	for _, argv0 := range []string{"../x.wasm", "abs/x.wasm"} {
		if o, err := c.Exec(ctxT(t, 10*time.Second), id, argv0); err != nil || o.ExitCode == nil || *o.ExitCode != 126 || !strings.Contains(o.Stderr, "outside") {
			t.Errorf("exec %s: %+v %v", argv0, o, err)
		}
	}
	if o, err := c.Exec(ctxT(t, 10*time.Second), id, "missing.wasm"); err != nil || o.ExitCode == nil || *o.ExitCode != 127 {
		t.Errorf("missing module: %+v %v", o, err)
	}
	// What needs a shell is refused, saying what the backend does.
	for _, a := range []*api.Action{api.Run("ls"), {Kind: api.KindInterrupt}, {Kind: api.KindIPython, Code: "1"}} {
		if _, err := c.Act(ctxT(t, 10*time.Second), id, a); !errors.Is(err, client.ErrUnsupported) || !strings.Contains(err.Error(), ".wasm") {
			t.Errorf("%s on wasm: %v", a.Kind, err)
		}
	}
	for name, req := range map[string]api.CreateSandboxRequest{
		"network host": {Backend: api.BackendWasm, Network: api.NetworkHost},
		"image":        {Backend: api.BackendWasm, Image: "debian"},
	} {
		if _, err := c.CreateSandbox(ctxT(t, 10*time.Second), req); !errors.Is(err, client.ErrUnsupported) {
			t.Errorf("create with %s: %v", name, err)
		}
	}
}

func TestWasmConcurrentRuns(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := wasmSandbox(t, c, api.CreateSandboxRequest{Limits: &api.Limits{MemoryMB: 64}})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arg := fmt.Sprintf("run-%d", i)
			o, err := c.Exec(ctxT(t, 120*time.Second), id, "guest.wasm", "args", arg)
			if err == nil && (o.ExitCode == nil || *o.ExitCode != 0 || o.Stdout != "args|"+arg+"\n") {
				err = fmt.Errorf("run %d: %+v", i, o)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Memory is bounded by instances x cap: after the burst, the daemon's
	// peak resident memory is well under 200 x 64 MiB.
	pid := d.cmd.Process.Pid
	if rss := procStatus(pid, "VmHWM"); rss > 4<<20 {
		t.Fatalf("daemon peak RSS %d kB after 200 concurrent runs", rss)
	}

	// The cap is what bounds it: 20 modules that each touch all the memory
	// they can get together add at most 20 x 64 MiB at the peak, and give
	// it all back when they end.
	const n, capKB = 20, 64 << 10
	before := procStatus(pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the daemon's peak RSS: %v", err)
	}
	errs = make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := c.Act(ctxT(t, 120*time.Second), id, &api.Action{Kind: api.KindExec, Argv: []string{"guest.wasm", "alloc"}, TimeoutS: api.Seconds(60)})
			if err == nil && (o.ExitCode == nil || *o.ExitCode == 0 || o.TimedOut) {
				err = fmt.Errorf("alloc %d: exit %s timed_out %v", i, exitCode(o), o.TimedOut)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak := procStatus(pid, "VmHWM")
	t.Logf("daemon RSS %d MiB before %d capped allocators, peak %d MiB", before>>10, n, peak>>10)
	if grew := peak - before; grew > n*capKB+256<<10 {
		t.Errorf("peak RSS grew %d MiB for %d instances capped at 64 MiB", grew>>10, n)
	}
	after := procStatus(pid, "VmRSS")
	if after-before > 256<<10 {
		t.Errorf("RSS %d MiB after the allocators ended, %d MiB before: memory not given back", after>>10, before>>10)
	}
}

func TestWasmAfterRestart(t *testing.T) {
	d := startDaemon(t)
	c := d.unixClient()
	id := wasmSandbox(t, c, api.CreateSandboxRequest{})
	mustRun(t, c, id, api.Exec("guest.wasm", "files"))
	c.Close()
	d.kill9()
	d.restart()
	c = d.client()
	if sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after restart: %+v %v", sb, err)
	}
	if o := mustRun(t, c, id, api.Exec("guest.wasm")); o.Stdout != "hello from wasm\n" {
		t.Fatalf("run after restart: %+v", o)
	}
	if o, err := c.ReadFile(ctxT(t, 10*time.Second), id, "out.txt"); err != nil || o.Content != "written by wasm\n" {
		t.Fatalf("files after restart: %+v %v", o, err)
	}
}
