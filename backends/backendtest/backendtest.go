// Package backendtest is the conformance suite of the backends.Backend,
// backends.Sandbox, backends.Process and backends.Terminal contracts.
//
// Every backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backends.Backend { ... }, backendtest.Options{...})
//	}
//
// Each subtest creates sandboxes of its own (and destroys them when it
// ends), so subtests are independent; Options says what a backend cannot do,
// and the subtests that need it are skipped.
//
// Most subtests need a shell and coreutils. Those that check the contracts
// every backend shares (exit statuses, output, Wait, Kill, Destroy, FS) run
// only the few programs of Programs, so a backend without a shell (wasm)
// runs them too, with programs of its own kind.
package backendtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// Options describes what the backend under test can do and how to look into
// it.
type Options struct {
	// Network is the Spec.Network of every sandbox the suite creates (the
	// process backend only has api.NetworkHost).
	Network string
	// Image is the Spec.Image of every sandbox the suite creates.
	Image string
	// Limits are the limits of every sandbox the suite creates. Zero fields
	// get the suite's defaults (DefaultLimits).
	Limits api.Limits

	// NoShell says the sandbox has no sh, bash and coreutils; almost every
	// subtest needs them and is skipped. The subtests that need only
	// Programs still run if Programs is set.
	NoShell bool
	// NoTTY says the backend gives no terminals; the TTY subtests are
	// skipped.
	NoTTY bool
	// UserIsolation says every sandbox runs as a user of its own, never the
	// test's; the UserIsolation subtest checks it.
	UserIsolation bool

	// Workdir, if set, checks a sandbox's Workdir() beyond what every
	// backend must satisfy (absolute, what pwd prints).
	Workdir func(t *testing.T, spec backends.Spec, workdir string)
	// Processes lists the host pids of the processes still running in sb
	// (zombies excluded). With it the suite checks that Kill, Destroy and
	// Close leave nothing behind; nil skips those checks.
	Processes func(sb backends.Sandbox) ([]int, error)

	// Programs are the programs the shell-free subtests run. nil means
	// ShellPrograms, unless NoShell is set: then those subtests are skipped
	// too.
	Programs *Programs

	// Skip maps subtest names to the reason to skip them, for what the
	// backend does not do yet ("BUG: ..." for known bugs).
	Skip map[string]string
}

// Programs build the argv of the programs that the subtests which need no
// shell start in a sandbox. Every field but Symlink must be set. Paths are
// as the sandbox names them: relative to its workdir, or absolute in its
// view (what FS.Path returns). Text is a few printable ASCII characters,
// with no backslash and no leading "-", so that echo prints it as it is.
type Programs struct {
	// Echo prints text and a newline on stdout and exits 0.
	Echo func(text string) []string
	// EchoErrExit prints out and a newline on stdout, then err and a
	// newline on stderr, and exits with code (0 to 125).
	EchoErrExit func(out, err string, code int) []string
	// Cat prints the content of the file at path on stdout and exits 0.
	Cat func(path string) []string
	// Append appends text (nothing added) to the file at path, creating it
	// if it does not exist, and exits 0.
	Append func(path, text string) []string
	// SleepEcho sleeps for d, then prints text and a newline on stdout and
	// exits 0.
	SleepEcho func(d time.Duration, text string) []string
	// Forever runs until it is killed, doing nothing; a kill must stop it
	// within a second.
	Forever func() []string
	// Symlink creates a symbolic link at link whose target is the text
	// target, which need not exist, and exits 0. nil means the suite plants
	// links itself, through the sandbox's FS.
	Symlink func(target, link string) []string
}

// ShellPrograms returns the Programs of a sandbox with sh and coreutils.
func ShellPrograms() *Programs {
	return &Programs{
		Echo: func(text string) []string { return []string{"echo", text} },
		EchoErrExit: func(out, err string, code int) []string {
			// Arguments, not text pasted into the script: nothing to quote.
			return []string{"sh", "-c", `echo "$1"; echo "$2" >&2; exit "$3"`, "sh", out, err, strconv.Itoa(code)}
		},
		Cat: func(path string) []string { return []string{"cat", path} },
		Append: func(path, text string) []string {
			return []string{"sh", "-c", `printf '%s' "$2" >> "$1"`, "sh", path, text}
		},
		SleepEcho: func(d time.Duration, text string) []string {
			return []string{"sh", "-c", `sleep "$1"; echo "$2"`, "sh", strconv.FormatFloat(d.Seconds(), 'f', -1, 64), text}
		},
		Forever: func() []string { return []string{"sleep", "100000"} },
		Symlink: func(target, link string) []string { return []string{"ln", "-s", target, link} },
	}
}

// check reports the first required field of p that is nil.
func (p *Programs) check() error {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Echo", p.Echo != nil},
		{"EchoErrExit", p.EchoErrExit != nil},
		{"Cat", p.Cat != nil},
		{"Append", p.Append != nil},
		{"SleepEcho", p.SleepEcho != nil},
		{"Forever", p.Forever != nil},
	} {
		if !f.set {
			return fmt.Errorf("Options.Programs.%s is nil; every field but Symlink must be set", f.name)
		}
	}
	return nil
}

// DefaultLimits are the limits of suite sandboxes where Options.Limits
// leaves a field zero: enough for every subtest, small enough to be limits.
var DefaultLimits = api.Limits{MemoryMB: 1024, Pids: 256}

// suite is one run of the conformance suite.
type suite struct {
	newBackend func(t *testing.T) backends.Backend
	opts       Options
	progs      *Programs // nil: the backend runs nothing the suite knows
}

// Run runs the conformance suite as subtests of t.
//
// newBackend returns the backend to test. The suite calls it once or more
// per subtest; every call must return a new instance with the same
// configuration, as a daemon restarted on the same host would have (the
// CloseThenRecover subtests rely on this). It registers its own cleanup
// with t.
func Run(t *testing.T, newBackend func(t *testing.T) backends.Backend, opts Options) {
	s := &suite{newBackend: newBackend, opts: opts, progs: opts.Programs}
	if s.progs == nil && !opts.NoShell {
		s.progs = ShellPrograms()
	}
	if s.progs != nil {
		if err := s.progs.check(); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		shell bool // needs sh and coreutils
		progs bool // needs only Programs
		tty   bool // needs terminals
		fn    func(t *testing.T)
	}{
		{"ExecBasics", false, true, false, s.testExecBasics},
		{"Stdin", true, false, false, s.testStdin},
		{"EnvSanitized", true, false, false, s.testEnv},
		{"Workdir", true, false, false, s.testWorkdir},
		{"ProgramLookup", true, false, false, s.testProgramLookup},
		{"SignalExit", true, false, false, s.testSignalExit},
		{"KillKillsTree", true, false, false, s.testKillTree},
		{"KillAndDestroyStopPrograms", false, true, false, s.testKillAndDestroy},
		{"DestroyKillsEverything", true, false, false, s.testDestroy},
		{"DestroyCancelledContext", true, false, false, s.testDestroyCancelled},
		{"OutputFlood", true, false, false, s.testOutputFlood},
		{"OutputSlowWriter", true, false, false, s.testOutputSlowWriter},
		{"OutputDeliveredAfterExit", true, false, false, s.testOutputAfterExit},
		{"ChildKeepsStdoutOpen", true, false, false, s.testChildKeepsStdoutOpen},
		{"TTY", true, false, true, s.testTTY},
		{"Concurrency", false, true, false, s.testConcurrency},
		{"WaitCancelledContext", false, true, false, s.testWaitCancelled},
		{"CloseThenRecover", false, true, false, s.testCloseRecover},
		{"CloseThenRecoverOnNewBackend", false, true, false, s.testCloseRecoverNewBackend},
		{"UserIsolation", true, false, false, s.testUserIsolation},
		{"FSRoundTrip", false, true, false, s.testFSRoundTrip},
		{"FSConfined", false, true, false, s.testFSConfined},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if reason, ok := opts.Skip[tc.name]; ok {
				t.Skip(reason)
			}
			if tc.shell && opts.NoShell {
				t.Skip("the backend has no shell")
			}
			if tc.progs && s.progs == nil {
				t.Skip("the backend has no shell and Options.Programs is nil: nothing to run")
			}
			if tc.tty && opts.NoTTY {
				t.Skip("the backend has no terminals")
			}
			tc.fn(t)
		})
	}
}

// NewID returns a fresh sandbox id: "sb-" and 12 lowercase letters and
// digits.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "sb-" + string(b[:])
}

// NewSpec returns a fresh spec: a new id, a private directory (0700) that
// t removes, and the given limits and network.
func NewSpec(t testing.TB, network string, limits api.Limits) backends.Spec {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return backends.Spec{ID: NewID(), Dir: dir, Limits: limits, Network: network}
}

// CreateSandbox creates a sandbox of spec on b and destroys it when t ends
// (an error of that Destroy fails t).
func CreateSandbox(t testing.TB, b backends.Backend, spec backends.Spec) backends.Sandbox {
	t.Helper()
	sb, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create(%s): %v", spec.ID, err)
	}
	if sb == nil {
		t.Fatalf("Create(%s) returned a nil sandbox and no error", spec.ID)
	}
	t.Cleanup(func() { Destroy(t, sb) })
	return sb
}

// Destroy destroys sb, failing t on an error.
func Destroy(t testing.TB, sb backends.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy(%s): %v", sb.ID(), err)
	}
}

// Buffer is an io.Writer that may be written and read concurrently.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor waits until what was written so far matches re, and returns it.
func (b *Buffer) WaitFor(re *regexp.Regexp, timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := b.String()
		if re.MatchString(s) {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start starts ps in sb, failing t if it does not start.
func Start(t testing.TB, sb backends.Sandbox, ps backends.ProcessSpec) backends.Process {
	t.Helper()
	p, err := sb.Start(context.Background(), ps)
	if err != nil {
		t.Fatalf("Start(%q): %v", ps.Argv, err)
	}
	if p == nil {
		t.Fatalf("Start(%q) returned a nil process and no error", ps.Argv)
	}
	return p
}

// WaitExit waits up to timeout for p, failing t (after killing p) if it
// does not end.
func WaitExit(t testing.TB, p backends.Process, timeout time.Duration) backends.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := p.Wait(ctx)
	if err != nil {
		_ = p.Kill()
		t.Fatalf("Wait: %v (the process did not end within %v)", err, timeout)
	}
	return st
}

// Exec runs argv in sb to its end and returns its status and output.
func Exec(t testing.TB, sb backends.Sandbox, argv ...string) (st backends.ExitStatus, stdout, stderr string) {
	t.Helper()
	var out, errb Buffer
	p := Start(t, sb, backends.ProcessSpec{Argv: argv, Stdout: &out, Stderr: &errb})
	st = WaitExit(t, p, 60*time.Second)
	return st, out.String(), errb.String()
}

// MustExec is Exec that fails t unless the process exits 0.
func MustExec(t testing.TB, sb backends.Sandbox, argv ...string) string {
	t.Helper()
	st, out, errs := Exec(t, sb, argv...)
	if st.Code != 0 || st.Signal != 0 {
		t.Fatalf("%q: exit %+v, stdout %q, stderr %q", argv, st, out, errs)
	}
	return out
}

// ----------------------------------------------------------------------
// helpers of the suite

// limits returns the suite's limits: Options.Limits over DefaultLimits.
func (s *suite) limits() api.Limits {
	l := s.opts.Limits
	if l.MemoryMB == 0 {
		l.MemoryMB = DefaultLimits.MemoryMB
	}
	if l.Pids == 0 {
		l.Pids = DefaultLimits.Pids
	}
	return l
}

func (s *suite) spec(t *testing.T) backends.Spec {
	t.Helper()
	spec := NewSpec(t, s.opts.Network, s.limits())
	spec.Image = s.opts.Image
	return spec
}

// sandbox makes a backend and a sandbox on it, destroyed when t ends.
func (s *suite) sandbox(t *testing.T) (backends.Backend, backends.Sandbox, backends.Spec) {
	t.Helper()
	b := s.newBackend(t)
	spec := s.spec(t)
	return b, CreateSandbox(t, b, spec), spec
}

// busy starts what a sandbox runs when the daemon destroys it or lets go of
// it, and waits until it runs: with a shell, processes that left the
// started one's process group and session; without, a Forever program.
func (s *suite) busy(t *testing.T, sb backends.Sandbox) backends.Process {
	t.Helper()
	if s.opts.NoShell {
		p := Start(t, sb, backends.ProcessSpec{Argv: s.progs.Forever()})
		s.waitProcesses(t, sb, 1)
		return p
	}
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"sh", "-c", "sleep 1000 & setsid sleep 1001 & wait"}})
	s.waitProcesses(t, sb, 3)
	return p
}

// processes lists sb's processes via the hook; ok is false without one.
func (s *suite) processes(t *testing.T, sb backends.Sandbox) (pids []int, ok bool) {
	t.Helper()
	if s.opts.Processes == nil {
		return nil, false
	}
	pids, err := s.opts.Processes(sb)
	if err != nil {
		t.Fatalf("Options.Processes: %v", err)
	}
	return pids, true
}

// waitProcesses waits until the hook sees at least n processes in sb, so
// that a later check for none left is not vacuous. Without a hook it just
// gives the processes a moment to start.
func (s *suite) waitProcesses(t *testing.T, sb backends.Sandbox, n int) {
	t.Helper()
	if s.opts.Processes == nil {
		time.Sleep(300 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, _ := s.processes(t, sb)
		if len(pids) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Options.Processes sees %d processes in the sandbox (%s), want at least %d", len(pids), describe(pids), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNoProcesses checks that within timeout no process of sb is left.
func (s *suite) waitNoProcesses(t *testing.T, sb backends.Sandbox, timeout time.Duration, after string) {
	t.Helper()
	if s.opts.Processes == nil {
		return
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, _ := s.processes(t, sb)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after %s: processes of the sandbox still run: %s", timeout, after, describe(pids))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe renders pids with their command lines, for failure messages.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		parts = append(parts, fmt.Sprintf("%d %q", pid, strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " ")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", b)
}

func expectStatus(t *testing.T, what string, got backends.ExitStatus, code int, sig syscall.Signal) {
	t.Helper()
	if got.Code != code || got.Signal != sig {
		t.Errorf("%s: exit status %+v, want code %d signal %d (%v)", what, got, code, int(sig), sig)
	}
}

// countingWriter counts bytes, optionally sleeping in every Write.
type countingWriter struct {
	n     atomic.Int64
	delay time.Duration
	bad   atomic.Bool // a non-zero byte was seen
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	// A cheap look at the content: the writer must stay fast.
	if len(p) > 0 && (p[0] != 0 || p[len(p)-1] != 0) {
		w.bad.Store(true)
	}
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// ----------------------------------------------------------------------
// subtests

func (s *suite) testExecBasics(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	if sb.ID() == "" {
		t.Error("ID() is empty")
	}
	var out, errb Buffer
	p := Start(t, sb, backends.ProcessSpec{
		Argv:   s.progs.EchoErrExit("out", "err", 3),
		Stdout: &out, Stderr: &errb,
	})
	if w := p.Stdin(); w != nil {
		t.Errorf("Stdin() of a non-TTY process = %T, want nil", w)
	}
	st := WaitExit(t, p, 30*time.Second)
	expectStatus(t, "exit 3", st, 3, 0)
	if st.OOMKilled {
		t.Error("OOMKilled set for a plain exit")
	}
	if got := out.String(); got != "out\n" {
		t.Errorf("stdout = %q, want %q", got, "out\n")
	}
	if got := errb.String(); got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
	// Wait may be called again and says the same.
	if st2 := WaitExit(t, p, time.Second); st2 != st {
		t.Errorf("second Wait = %+v, first %+v", st2, st)
	}
	// Nil writers discard.
	p = Start(t, sb, backends.ProcessSpec{Argv: s.progs.EchoErrExit("out", "err", 0)})
	expectStatus(t, "nil writers", WaitExit(t, p, 30*time.Second), 0, 0)
	// An empty argv does not start.
	if p, err := sb.Start(context.Background(), backends.ProcessSpec{}); err == nil {
		_ = p.Kill()
		t.Error("Start with an empty argv succeeded")
	}
}

func (s *suite) testStdin(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	// Bigger than a pipe buffer, so it cannot be written in one go.
	var in strings.Builder
	for i := 0; in.Len() < 300<<10; i++ {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"cat"}, Stdin: strings.NewReader(in.String()), Stdout: &out})
	expectStatus(t, "cat with stdin", WaitExit(t, p, 30*time.Second), 0, 0)
	if got := out.String(); got != in.String() {
		t.Errorf("cat echoed %d bytes, want the %d bytes of stdin (equal: %v)", len(got), in.Len(), got == in.String())
	}

	// No Stdin: EOF at once.
	out = Buffer{}
	start := time.Now()
	p = Start(t, sb, backends.ProcessSpec{Argv: []string{"cat"}, Stdout: &out})
	expectStatus(t, "cat without stdin", WaitExit(t, p, 10*time.Second), 0, 0)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cat without stdin took %v", d)
	}
	if got := out.String(); got != "" {
		t.Errorf("cat without stdin printed %q", got)
	}

	// A process that never reads its stdin still ends.
	p = Start(t, sb, backends.ProcessSpec{Argv: []string{"true"}, Stdin: strings.NewReader(strings.Repeat("x", 4<<20))})
	expectStatus(t, "true with unread stdin", WaitExit(t, p, 10*time.Second), 0, 0)
}

func (s *suite) testEnv(t *testing.T) {
	secret := "secret-" + randomHex(16)
	t.Setenv("SANDBOXD_CONFORMANCE_SECRET", secret)
	b := s.newBackend(t)
	spec := s.spec(t)
	spec.Env = map[string]string{
		"SPEC_ONLY": "from spec",
		"BOTH":      "spec",
		"LANG":      "C.UTF-8", // same as AgentEnv: harmless
		"WITH_EQ":   "a=b c",
	}
	sb := CreateSandbox(t, b, spec)

	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{
		Argv:   []string{"env"},
		Env:    map[string]string{"BOTH": "process", "PROC_ONLY": "from process"},
		Stdout: &out,
	})
	expectStatus(t, "env", WaitExit(t, p, 30*time.Second), 0, 0)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("env printed %q", line)
			continue
		}
		if _, dup := got[k]; dup {
			t.Errorf("%s is in the environment twice", k)
		}
		got[k] = v
	}
	want := backends.AgentEnv()
	for k, v := range spec.Env {
		want[k] = v
	}
	want["BOTH"] = "process"
	want["PROC_ONLY"] = "from process"
	for k, v := range want {
		if gv, ok := got[k]; !ok {
			t.Errorf("%s is missing from the environment", k)
		} else if gv != v {
			t.Errorf("%s=%q, want %q", k, gv, v)
		}
	}
	if got["HOME"] == "" {
		t.Error("HOME is not set")
	}
	if _, ok := got["SANDBOXD_CONFORMANCE_SECRET"]; ok || strings.Contains(out.String(), secret) {
		t.Error("the test process's environment leaked into the sandbox (SANDBOXD_CONFORMANCE_SECRET)")
	}
	// Nothing else of the test process's environment either (beyond the
	// variables a backend or a shell sets itself).
	own := map[string]bool{"HOME": true, "TMPDIR": true, "USER": true, "LOGNAME": true, "PWD": true, "OLDPWD": true, "SHLVL": true, "_": true, "HOSTNAME": true}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := want[k]; ok || own[k] {
			continue
		}
		if gv, ok := got[k]; ok && gv == v {
			t.Errorf("the test process's %s leaked into the sandbox", k)
		}
	}

	// What the kernel has as the process's initial environment, too.
	out = Buffer{}
	p = Start(t, sb, backends.ProcessSpec{
		Argv:   []string{"cat", "/proc/self/environ"},
		Env:    map[string]string{"PROC_ONLY": "from process"},
		Stdout: &out,
	})
	expectStatus(t, "cat /proc/self/environ", WaitExit(t, p, 30*time.Second), 0, 0)
	environ := out.String()
	if !strings.Contains(environ, "PROC_ONLY=from process\x00") {
		t.Errorf("/proc/self/environ lacks PROC_ONLY: %q", environ)
	}
	if strings.Contains(environ, "SANDBOXD_CONFORMANCE_SECRET") || strings.Contains(environ, secret) {
		t.Error("/proc/self/environ of a sandbox process holds the test process's SANDBOXD_CONFORMANCE_SECRET")
	}
}

func (s *suite) testWorkdir(t *testing.T) {
	_, sb, spec := s.sandbox(t)
	wd := sb.Workdir()
	if !strings.HasPrefix(wd, "/") {
		t.Fatalf("Workdir() = %q, want an absolute path", wd)
	}
	if s.opts.Workdir != nil {
		s.opts.Workdir(t, spec, wd)
	}
	if got := MustExec(t, sb, "pwd"); got != wd+"\n" {
		t.Errorf("pwd printed %q, want %q", got, wd+"\n")
	}
	MustExec(t, sb, "mkdir", "-p", "sub/dir")
	for _, dir := range []string{"sub/dir", wd + "/sub/dir", "./sub/../sub/dir"} {
		var out Buffer
		p := Start(t, sb, backends.ProcessSpec{Argv: []string{"pwd"}, Dir: dir, Stdout: &out})
		expectStatus(t, "pwd in "+dir, WaitExit(t, p, 30*time.Second), 0, 0)
		if got := out.String(); got != wd+"/sub/dir\n" {
			t.Errorf("pwd with Dir %q printed %q, want %q", dir, got, wd+"/sub/dir\n")
		}
	}
	for _, dir := range []string{"no-such-dir", wd + "/no/such/dir"} {
		p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{"pwd"}, Dir: dir})
		if err == nil {
			WaitExit(t, p, 10*time.Second)
			t.Errorf("Start with the missing Dir %q succeeded", dir)
		} else if !errors.Is(err, api.ErrNotFound) {
			t.Errorf("Start with the missing Dir %q: %v, want an error wrapping api.ErrNotFound", dir, err)
		}
	}
}

func (s *suite) testProgramLookup(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	for _, argv0 := range []string{"no-such-program-xyz", "./no-such-program-xyz", "/no/such/program"} {
		p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{argv0}})
		if err == nil {
			st := WaitExit(t, p, 10*time.Second)
			t.Errorf("Start(%q) succeeded (exit %+v), want an error wrapping api.ErrNotFound", argv0, st)
		} else if !errors.Is(err, api.ErrNotFound) {
			t.Errorf("Start(%q): %v, want an error wrapping api.ErrNotFound", argv0, err)
		}
	}

	MustExec(t, sb, "sh", "-c", `mkdir bin && printf '#!/bin/sh\necho ran-$1\n' > bin/hello-xyz && chmod 755 bin/hello-xyz && cp bin/hello-xyz notexec && chmod 644 notexec`)
	for _, argv0 := range []string{"./notexec", sb.Workdir() + "/notexec"} {
		p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{argv0}})
		if err == nil {
			st := WaitExit(t, p, 10*time.Second)
			t.Errorf("Start(%q) of a non-executable file succeeded (exit %+v), want an error wrapping api.ErrPermissionDenied", argv0, st)
		} else if !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("Start(%q) of a non-executable file: %v, want an error wrapping api.ErrPermissionDenied", argv0, err)
		}
	}

	// A relative program path is relative to Dir.
	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"./hello-xyz", "rel"}, Dir: "bin", Stdout: &out})
	expectStatus(t, "./hello-xyz in bin", WaitExit(t, p, 30*time.Second), 0, 0)
	if got := out.String(); got != "ran-rel\n" {
		t.Errorf("./hello-xyz printed %q", got)
	}

	// argv[0] is looked up in the sandbox's PATH (with ProcessSpec.Env),
	// never the test process's.
	t.Setenv("PATH", sb.Workdir()+"/bin:"+os.Getenv("PATH"))
	if p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{"hello-xyz"}}); err == nil {
		WaitExit(t, p, 10*time.Second)
		t.Error("hello-xyz was found through the test process's PATH")
	} else if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("hello-xyz outside the sandbox's PATH: %v, want an error wrapping api.ErrNotFound", err)
	}
	out = Buffer{}
	p = Start(t, sb, backends.ProcessSpec{
		Argv:   []string{"hello-xyz", "path"},
		Env:    map[string]string{"PATH": sb.Workdir() + "/bin:" + backends.AgentEnv()["PATH"]},
		Stdout: &out,
	})
	expectStatus(t, "hello-xyz via PATH", WaitExit(t, p, 30*time.Second), 0, 0)
	if got := out.String(); got != "ran-path\n" {
		t.Errorf("hello-xyz via the process's PATH printed %q", got)
	}
}

func (s *suite) testSignalExit(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	st, _, _ := Exec(t, sb, "sh", "-c", "kill -TERM $$")
	expectStatus(t, "kill -TERM $$", st, 143, syscall.SIGTERM)

	// Process.Signal reaches the process itself.
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"sleep", "100"}})
	s.waitProcesses(t, sb, 1)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal(SIGTERM): %v", err)
	}
	expectStatus(t, "sleep after Signal(SIGTERM)", WaitExit(t, p, 10*time.Second), 143, syscall.SIGTERM)
	// Signalling a process that has ended is harmless.
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after the end: %v", err)
	}
}

func (s *suite) testKillTree(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{
		Argv:   []string{"sh", "-c", "sleep 1000 & setsid sleep 1001 & (sleep 1002 &) ; sleep 1003"},
		Stdout: &out, Stderr: &out,
	})
	// sh and the four sleeps.
	s.waitProcesses(t, sb, 5)
	if err := p.Kill(); err != nil {
		t.Errorf("Kill: %v", err)
	}
	st := WaitExit(t, p, 10*time.Second)
	expectStatus(t, "after Kill", st, 128+int(syscall.SIGKILL), syscall.SIGKILL)
	s.waitNoProcesses(t, sb, 5*time.Second, "Kill")
	// Kill after the end is harmless.
	if err := p.Kill(); err != nil {
		t.Errorf("Kill after the end: %v", err)
	}
	// The sandbox still works.
	if got := MustExec(t, sb, "echo", "alive"); got != "alive\n" {
		t.Errorf("echo after Kill printed %q", got)
	}
}

// testKillAndDestroy is what KillKillsTree and DestroyKillsEverything
// check, for a backend without processes of processes: Kill stops one
// program and no other, Destroy stops every program still running.
func (s *suite) testKillAndDestroy(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	procs := make([]backends.Process, 3)
	for i := range procs {
		procs[i] = Start(t, sb, backends.ProcessSpec{Argv: s.progs.Forever()})
	}
	s.waitProcesses(t, sb, len(procs))
	if err := procs[0].Kill(); err != nil {
		t.Errorf("Kill: %v, want nil", err)
	}
	expectStatus(t, "Forever after Kill", WaitExit(t, procs[0], 10*time.Second), 128+int(syscall.SIGKILL), syscall.SIGKILL)
	if err := procs[0].Kill(); err != nil {
		t.Errorf("Kill after the end: %v, want nil", err)
	}
	// The others were not killed with it. (They never end by themselves,
	// so a Wait that returns here is a failure whenever it happens.)
	for i, p := range procs[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if st, err := p.Wait(ctx); err == nil {
			t.Errorf("program %d ended (%+v) when program 0 was killed; want it to run on", i+1, st)
		}
		cancel()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy: %v, want nil", err)
	}
	for i, p := range procs[1:] {
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := p.Wait(wctx); err != nil {
			t.Errorf("program %d did not end within 5s of Destroy: %v", i+1, err)
			_ = p.Kill()
		}
		wcancel()
	}
	s.waitNoProcesses(t, sb, 5*time.Second, "Destroy")
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v, want nil", err)
	}
	if p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: s.progs.Echo("after")}); err == nil {
		WaitExit(t, p, 10*time.Second)
		t.Error("Start after Destroy succeeded, want an error")
	}
}

func (s *suite) testDestroy(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	var procs []backends.Process
	start := func(argv ...string) backends.Process {
		p := Start(t, sb, backends.ProcessSpec{Argv: argv})
		procs = append(procs, p)
		return p
	}
	start("sh", "-c", "sleep 1000 & wait")                                       // 2 processes
	double := start("sh", "-c", "(setsid sleep 1001 &) ; (sleep 1002 &) ; true") // leaves 2 orphans
	start("sh", "-c", `trap "" TERM HUP INT; sleep 1003`)                        // 2, ignoring TERM
	start("sh", "-c", "sleep 1004 & kill -STOP $$")                              // 2, one stopped
	start("nohup", "sleep", "1005")                                              // 1
	n := 9
	if !s.opts.NoTTY {
		p := Start(t, sb, backends.ProcessSpec{Argv: []string{"bash", "--noprofile", "--norc", "--noediting", "-i"}, TTY: true})
		procs = append(procs, p)
		n++
	}
	expectStatus(t, "double fork", WaitExit(t, double, 10*time.Second), 0, 0)
	s.waitProcesses(t, sb, n)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	for i, p := range procs {
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := p.Wait(wctx); err != nil {
			t.Errorf("process %d did not end with Destroy: %v", i, err)
			_ = p.Kill()
		}
		wcancel()
	}
	s.waitNoProcesses(t, sb, 5*time.Second, "Destroy")
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v, want nil", err)
	}
	if p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{"true"}}); err == nil {
		WaitExit(t, p, 10*time.Second)
		t.Error("Start after Destroy succeeded")
	}
}

func (s *suite) testDestroyCancelled(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"sh", "-c", "sleep 1000 & setsid sleep 1001 & wait"}})
	s.waitProcesses(t, sb, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy with a cancelled context: %v", err)
	}
	WaitExit(t, p, 5*time.Second)
	s.waitNoProcesses(t, sb, 5*time.Second, "Destroy with a cancelled context")
}

func (s *suite) testOutputFlood(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	const n = 50_000_000
	w := &countingWriter{}
	var errb Buffer
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}, Stdout: w, Stderr: &errb})
	expectStatus(t, "head", WaitExit(t, p, 120*time.Second), 0, 0)
	if got := w.n.Load(); got != n {
		t.Errorf("stdout got %d bytes, want %d", got, n)
	}
	if w.bad.Load() {
		t.Error("stdout got bytes that are not zero")
	}
	if errb.String() != "" {
		t.Errorf("stderr: %q", errb.String())
	}
}

func (s *suite) testOutputSlowWriter(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	const n = 50_000_000
	w := &countingWriter{delay: time.Millisecond}
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}, Stdout: w})
	expectStatus(t, "head", WaitExit(t, p, 120*time.Second), 0, 0)
	if got := w.n.Load(); got != n {
		t.Errorf("a writer sleeping 1ms per Write got %d bytes, want %d", got, n)
	}
}

// testOutputAfterExit checks that output the process wrote before it exited
// all reaches the writer even when the writer needs some time per Write
// (a network stream, a log with fsync): Wait returns after all output has
// been delivered.
func (s *suite) testOutputAfterExit(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	const n = 3 << 20
	w := &countingWriter{delay: 20 * time.Millisecond}
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}, Stdout: w})
	expectStatus(t, "head", WaitExit(t, p, 120*time.Second), 0, 0)
	if got := w.n.Load(); got != n {
		t.Errorf("a writer taking 20ms per Write got %d bytes after Wait returned, want all %d the process wrote before it exited", got, n)
	}
}

func (s *suite) testChildKeepsStdoutOpen(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	var out, errb Buffer
	start := time.Now()
	p := Start(t, sb, backends.ProcessSpec{Argv: []string{"sh", "-c", "sleep 100 & echo done"}, Stdout: &out, Stderr: &errb})
	st := WaitExit(t, p, 5*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Wait took %v with a child holding stdout open", d)
	}
	expectStatus(t, "sh", st, 0, 0)
	if got := out.String(); got != "done\n" {
		t.Errorf("stdout = %q, want %q", got, "done\n")
	}
}

func (s *suite) testTTY(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{
		Argv:   []string{"bash", "--noprofile", "--norc", "--noediting", "-i"},
		TTY:    true,
		Stdout: &out,
	})
	t.Cleanup(func() { _ = p.Kill() })
	term, ok := p.(backends.Terminal)
	if !ok {
		t.Fatalf("a TTY process (%T) does not implement backends.Terminal", p)
	}
	in := p.Stdin()
	if in == nil {
		t.Fatal("Stdin() of a TTY process is nil")
	}
	send := func(line string) {
		t.Helper()
		if err := term.Quiet(); err != nil {
			t.Fatalf("Quiet: %v", err)
		}
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatalf("write %q to the terminal: %v", line, err)
		}
	}
	expect := func(re string) string {
		t.Helper()
		got, ok := out.WaitFor(regexp.MustCompile(re), 10*time.Second)
		if !ok {
			t.Fatalf("terminal output %q does not match %s", got, re)
		}
		return got
	}

	send("echo hi-$((1+1))")
	got := expect(`hi-2`)
	if strings.Contains(got, "echo hi-") {
		t.Errorf("the terminal echoed the command after Quiet: %q", got)
	}
	if strings.Contains(got, "hi-2\r\n") {
		t.Errorf("the terminal translates LF to CR-LF after Quiet: %q", got)
	}

	send("tty")
	expect(`/dev/pts/[0-9]+\n`)

	// Idle at the prompt (a builtin ran last): nothing to signal.
	send("echo idle-$((4+5))")
	expect(`idle-9`)
	if sent, err := term.SignalForeground(syscall.SIGINT); err != nil || sent {
		t.Errorf("SignalForeground at the prompt = %v, %v; want false, nil", sent, err)
	}

	send("sleep 100")
	// Interrupt the sleep as a user would with ^C: until the shell has the
	// terminal back. (A SIGINT that lands between bash's fork giving the
	// child the terminal and its exec of sleep is taken by bash's own
	// handler and lost; the user presses ^C again.)
	sentAny, tries := false, 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		sent, err := term.SignalForeground(syscall.SIGINT)
		if err != nil {
			t.Fatalf("SignalForeground: %v", err)
		}
		if sent {
			sentAny = true
			tries++
		} else if sentAny {
			break // the shell is in the foreground again
		}
		if time.Now().After(deadline) {
			if !sentAny {
				t.Fatal("SignalForeground never found sleep 100 in the foreground")
			}
			t.Fatalf("sleep 100 still runs in the foreground after %d SIGINTs sent by SignalForeground", tries)
		}
	}
	if tries > 1 {
		t.Logf("it took %d SIGINTs to interrupt sleep 100", tries)
	}
	// The sleep is interrupted, so the next command runs at once.
	start := time.Now()
	send("echo back-$((3+4))")
	expect(`back-7`)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the shell took %v to come back after SignalForeground", d)
	}
	if sent, err := term.SignalForeground(syscall.SIGINT); err != nil || sent {
		t.Errorf("SignalForeground after the interrupted command = %v, %v; want false, nil", sent, err)
	}

	send("exit 5")
	expectStatus(t, "exit 5", WaitExit(t, p, 10*time.Second), 5, 0)
}

func (s *suite) testConcurrency(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var out Buffer
			p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: s.progs.Echo(strconv.Itoa(i)), Stdout: &out})
			if err != nil {
				t.Errorf("Start %d: %v", i, err)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			st, err := p.Wait(ctx)
			if err != nil {
				t.Errorf("Wait %d: %v", i, err)
				_ = p.Kill()
				return
			}
			if st.Code != 0 || st.Signal != 0 {
				t.Errorf("echo %d: exit %+v, want 0", i, st)
			}
			if got, want := out.String(), strconv.Itoa(i)+"\n"; got != want {
				t.Errorf("echo %d printed %q, want %q", i, got, want)
			}
		}(i)
	}
	wg.Wait()
}

func (s *suite) testWaitCancelled(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	var out Buffer
	p := Start(t, sb, backends.ProcessSpec{Argv: s.progs.SleepEcho(time.Second, "alive"), Stdout: &out})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context: %v, want context.Canceled", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	if _, err := p.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with an expiring context: %v, want context.DeadlineExceeded", err)
	}
	// The process was not killed: it finishes normally.
	expectStatus(t, "sleep then echo", WaitExit(t, p, 30*time.Second), 0, 0)
	if got := out.String(); got != "alive\n" {
		t.Errorf("stdout = %q, want %q", got, "alive\n")
	}
}

// closeForRecovery creates a sandbox on b, leaves a file and running
// processes in it, and closes it. It returns the spec and where the test
// keeps the sandbox to destroy at its end (checkRecovered replaces it).
func (s *suite) closeForRecovery(t *testing.T, b backends.Backend) (backends.Spec, *backends.Sandbox) {
	t.Helper()
	spec := s.spec(t)
	sb, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	// Destroy what is left when the test ends: the re-adopted sandbox if
	// there is one, else the closed one.
	current := &sb
	t.Cleanup(func() { Destroy(t, *current) })
	MustExec(t, sb, s.progs.Append("kept.txt", "kept\n")...)
	p := s.busy(t, sb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	WaitExit(t, p, 5*time.Second)
	s.waitNoProcesses(t, sb, 5*time.Second, "Close")
	return spec, current
}

// checkRecovered checks the outcome of Recover(spec, missing).
func (s *suite) checkRecovered(t *testing.T, rs []backends.Recovered, spec, missing backends.Spec, current *backends.Sandbox) {
	t.Helper()
	if len(rs) != 2 {
		t.Fatalf("Recover of 2 specs returned %d results", len(rs))
	}
	if rs[1].ID != missing.ID {
		t.Errorf("Recover result 1 has ID %q, want %q", rs[1].ID, missing.ID)
	}
	if rs[1].Err == nil {
		t.Error("Recover of a spec whose Dir holds no state: Err is nil")
		if rs[1].Sandbox != nil {
			t.Cleanup(func() { Destroy(t, rs[1].Sandbox) })
		}
	}
	r := rs[0]
	if r.ID != spec.ID {
		t.Errorf("Recover result 0 has ID %q, want %q", r.ID, spec.ID)
	}
	if r.Err != nil {
		t.Fatalf("Recover of a closed sandbox: %v", r.Err)
	}
	if r.Sandbox == nil {
		t.Fatal("Recover: no Err and no Sandbox")
	}
	*current = r.Sandbox
	sb := r.Sandbox
	if sb.ID() != spec.ID {
		t.Errorf("recovered sandbox has ID %q, want %q", sb.ID(), spec.ID)
	}
	if got := MustExec(t, sb, s.progs.Cat("kept.txt")...); got != "kept\n" {
		t.Errorf("kept.txt after Recover = %q, want %q", got, "kept\n")
	}
	MustExec(t, sb, s.progs.Append("again.txt", "again\n")...)
	if got := MustExec(t, sb, s.progs.Cat("again.txt")...); got != "again\n" {
		t.Errorf("a new file after Recover = %q, want %q", got, "again\n")
	}
	// Destroy finds everything it started.
	p := s.busy(t, sb)
	Destroy(t, sb)
	WaitExit(t, p, 5*time.Second)
	s.waitNoProcesses(t, sb, 5*time.Second, "Destroy after Recover")
}

func (s *suite) testCloseRecover(t *testing.T) {
	b := s.newBackend(t)
	spec, current := s.closeForRecovery(t, b)
	missing := s.spec(t)
	rs := b.Recover(context.Background(), []backends.Spec{spec, missing})
	s.checkRecovered(t, rs, spec, missing, current)
}

// testCloseRecoverNewBackend is a daemon restart within one process: the
// sandboxes of one backend instance are closed, and a new instance with the
// same configuration re-adopts them.
func (s *suite) testCloseRecoverNewBackend(t *testing.T) {
	spec, current := s.closeForRecovery(t, s.newBackend(t))
	missing := s.spec(t)
	rs := s.newBackend(t).Recover(context.Background(), []backends.Spec{spec, missing})
	s.checkRecovered(t, rs, spec, missing, current)
}

func (s *suite) testUserIsolation(t *testing.T) {
	if !s.opts.UserIsolation {
		t.Skip("the backend does not isolate users")
	}
	secret := "secret-" + randomHex(16)
	t.Setenv("SANDBOXD_CONFORMANCE_SECRET", secret)
	_, a, _ := s.sandbox(t)
	_, b, _ := s.sandbox(t)
	uidA := strings.TrimSpace(MustExec(t, a, "id", "-u"))
	uidB := strings.TrimSpace(MustExec(t, b, "id", "-u"))
	if uidA == uidB {
		t.Errorf("two sandboxes run as the same uid %s", uidA)
	}
	for _, u := range []string{uidA, uidB} {
		if u == strconv.Itoa(os.Geteuid()) || u == "0" {
			t.Errorf("a sandbox runs as uid %s (the test's is %d)", u, os.Geteuid())
		}
	}
	MustExec(t, a, "sh", "-c", "echo "+secret+" > secret.txt")
	st, out, _ := Exec(t, b, "cat", a.Workdir()+"/secret.txt")
	if strings.Contains(out, secret) {
		t.Errorf("sandbox B read sandbox A's file (exit %+v)", st)
	}
	// The test process's (the daemon's) environment is out of reach too.
	st, out, _ = Exec(t, b, "cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ")
	if strings.Contains(out, secret) {
		t.Errorf("a sandbox read the test process's environment (exit %+v)", st)
	}
}

// testFSRoundTrip: what the daemon writes through FS, the sandbox reads as
// its own (at the path FS.Path names, owned by its user), and the other way
// round.
func (s *suite) testFSRoundTrip(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	fsys := sb.FS()
	// Rel of a relative path is the path below the workdir, wherever
	// the workdir is below Root.
	rel, err := fsys.Rel("dir/from-daemon.txt")
	if err != nil || !strings.HasSuffix("/"+rel, "/dir/from-daemon.txt") {
		t.Fatalf("Rel: %q %v", rel, err)
	}
	if want := path.Join(sb.Workdir(), "dir/from-daemon.txt"); fsys.Path(rel) != want {
		t.Fatalf("Path(Rel(dir/from-daemon.txt)) = %q, want %q", fsys.Path(rel), want)
	}
	dir := path.Dir(rel)
	fromSandbox, err := fsys.Rel("dir/from-sandbox.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fsys.Rel(fsys.Path(rel)); err != nil || got != rel {
		t.Fatalf("Rel(Path(%q)) = %q, %v", rel, got, err)
	}
	root, err := fsys.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := root.Create(rel)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("written by the daemon\n")
	uid, gid := fsys.Owner()
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := root.Lchown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if got := MustExec(t, sb, s.progs.Cat(fsys.Path(rel))...); got != "written by the daemon\n" {
		t.Fatalf("the sandbox reads %q, want %q", got, "written by the daemon\n")
	}
	// The sandbox can change what the daemon gave it, and make files of
	// its own in the directory the daemon made.
	MustExec(t, sb, s.progs.Append(fsys.Path(rel), "appended\n")...)
	MustExec(t, sb, s.progs.Append("dir/from-sandbox.txt", "from the sandbox\n")...)
	for name, want := range map[string]string{rel: "written by the daemon\nappended\n", fromSandbox: "from the sandbox\n"} {
		b, err := root.ReadFile(name)
		if err != nil || string(b) != want {
			t.Errorf("%s through FS: %q %v, want %q", name, b, err, want)
		}
	}
}

// testFSConfined: paths the sandbox may not see, and links it plants that
// lead out, never resolve through FS.
func (s *suite) testFSConfined(t *testing.T) {
	_, sb, _ := s.sandbox(t)
	fsys := sb.FS()
	// What is outside the view (Path(".")) is refused; a backend whose
	// view is the whole container (/) has no outside.
	view := fsys.Path(".")
	for _, p := range []string{"..", "../x", "a/../../x", "/etc/passwd", view + "/../x"} {
		abs := p
		if !path.IsAbs(abs) {
			abs = path.Join(sb.Workdir(), p)
		}
		abs = path.Clean(abs)
		inside := view == "/" || abs == view || strings.HasPrefix(abs, view+"/")
		rel, err := fsys.Rel(p)
		switch {
		case !inside && !errors.Is(err, api.ErrPermissionDenied):
			t.Errorf("Rel(%q): %v, want permission denied", p, err)
		case inside && (err != nil || fsys.Path(rel) != abs):
			t.Errorf("Rel(%q) = %q, %v; want the path of %s", p, rel, err, abs)
		}
	}
	root, err := fsys.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, l := range []struct{ target, link string }{
		{"/etc", "out"},
		{"../../../../../../..", "up"},
		{"out", "chain"},
	} {
		if s.progs.Symlink == nil {
			// os.Root.Symlink stores any target, as a program in the
			// sandbox would: links are confined where they are followed.
			link, err := fsys.Rel(l.link)
			if err != nil {
				t.Fatal(err)
			}
			if err := root.Symlink(l.target, link); err != nil {
				t.Fatalf("plant %s -> %s through FS: %v", l.link, l.target, err)
			}
			continue
		}
		MustExec(t, sb, s.progs.Symlink(l.target, l.link)...)
	}
	for _, name := range []string{"out/passwd", "up/etc/passwd", "chain/passwd"} {
		p, err := fsys.Rel(name)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := root.Open(p); err == nil {
			f.Close()
			t.Errorf("Open(%q) through a planted link succeeded", p)
		} else if !errors.Is(backends.FSError(p, err), api.ErrPermissionDenied) {
			t.Errorf("Open(%q): %v, classified %v; want permission denied", p, err, backends.FSError(p, err))
		}
		if err := root.WriteFile(p, []byte("x"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) through a planted link succeeded", p)
		}
	}
}
