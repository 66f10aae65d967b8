package exec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/process"
)

// sandbox returns a process sandbox without user isolation or cgroups:
// what exec adds does not depend on them.
func sandbox(t *testing.T) backends.Sandbox {
	t.Helper()
	dir := t.TempDir()
	b, err := process.New(process.Config{WorkspaceRoot: filepath.Join(dir, "ws"), TmpRoot: filepath.Join(dir, "tmp")})
	if err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(dir, "sb")
	if err := os.Mkdir(sd, 0o700); err != nil {
		t.Fatal(err)
	}
	sb, err := b.Create(context.Background(), backends.Spec{ID: "sb-exectest0001", Dir: sd, Network: api.NetworkHost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// sink records what the executor passes on.
type sink struct {
	mu         sync.Mutex
	live, kept map[string]string
}

func newSink() *sink { return &sink{live: map[string]string{}, kept: map[string]string{}} }
func (s *sink) Live(stream string, p []byte) {
	s.mu.Lock()
	s.live[stream] += string(p)
	s.mu.Unlock()
}
func (s *sink) Record(stream string, p []byte) {
	s.mu.Lock()
	s.kept[stream] += string(p)
	s.mu.Unlock()
}

func TestExecute(t *testing.T) {
	sb := sandbox(t)
	ex := New(sb, Config{DefaultTimeout: 10 * time.Second, MaxTimeout: time.Minute, MaxStreamBytes: 100})
	long := strings.Repeat("a", 60) + strings.Repeat("b", 100) + strings.Repeat("c", 60)
	cases := []struct {
		name      string
		action    *api.Action
		code      int
		signal    string
		stdout    string
		stderr    string
		timedOut  bool
		truncated bool
	}{
		{"exit code and streams", api.Exec("sh", "-c", "echo o; echo e >&2; exit 4"), 4, "", "o\n", "e\n", false, false},
		{"stdin", &api.Action{Kind: api.KindExec, Argv: []string{"cat"}, Stdin: "in\n"}, 0, "", "in\n", "", false, false},
		{"signal", api.Exec("sh", "-c", "kill -TERM $$"), 143, "SIGTERM", "", "", false, false},
		{"not found is 127", api.Exec("no-such-cmd-x"), 127, "", "", "sandboxd: exec no-such-cmd-x: no-such-cmd-x: command not found in PATH\n", false, false},
		{"timeout kills", &api.Action{Kind: api.KindExec, Argv: []string{"sleep", "30"}, TimeoutS: api.Seconds(0.2)}, 137, "SIGKILL", "", "", true, false},
		{"head and tail", &api.Action{Kind: api.KindExec, Argv: []string{"printf", "%s", long}}, 0, "", strings.Repeat("a", 50) + "\n[... 120 bytes omitted; the full output is in the event log ...]\n" + strings.Repeat("c", 50), "", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := newSink()
			o, err := ex.Execute(context.Background(), tc.action, out)
			if err != nil {
				t.Fatal(err)
			}
			if o.ExitCode == nil || *o.ExitCode != tc.code || o.Signal != tc.signal || o.Stdout != tc.stdout || o.Stderr != tc.stderr || o.TimedOut != tc.timedOut || o.Truncated != tc.truncated {
				t.Fatalf("got %+v (exit %v)", o, o.ExitCode)
			}
			// Everything goes to the log and the live stream, uncut.
			if tc.truncated && (out.kept[api.StreamStdout] != long || out.live[api.StreamStdout] != long) {
				t.Fatalf("recorded %q, streamed %q", out.kept[api.StreamStdout], out.live[api.StreamStdout])
			}
		})
	}
}

func TestExecuteNotExecutable(t *testing.T) {
	sb := sandbox(t)
	f := filepath.Join(sb.Workdir(), "data.txt")
	if err := os.WriteFile(f, []byte("not a program\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := New(sb, DefaultConfig()).Execute(context.Background(), api.Exec("./data.txt"), newSink())
	if err != nil {
		t.Fatal(err)
	}
	if o.ExitCode == nil || *o.ExitCode != 126 || !strings.HasPrefix(o.Stderr, "sandboxd: exec ./data.txt: ") {
		t.Fatalf("got exit %v stderr %q", o.ExitCode, o.Stderr)
	}
}

func TestExecuteStopsWhenCancelled(t *testing.T) {
	ex := New(sandbox(t), DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	o, err := ex.Execute(ctx, api.Exec("sleep", "30"), newSink())
	if err != nil {
		t.Fatal(err)
	}
	if o.TimedOut || o.Note == "" || o.Signal != "SIGKILL" || time.Since(start) > 10*time.Second {
		t.Fatalf("cancelled exec: %+v after %v", o, time.Since(start))
	}
}

func TestExecuteRefusesOtherKinds(t *testing.T) {
	ex := New(sandbox(t), DefaultConfig())
	if _, err := ex.Execute(context.Background(), api.Run("true"), newSink()); err == nil {
		t.Fatal("exec ran a run action")
	}
}
