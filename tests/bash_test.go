package tests

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

func TestRunKeepsSessionState(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	steps := []struct {
		command string
		code    int
		output  string
	}{
		{"mkdir -p src/deep && cd src", 0, ""},
		{"pwd | sed 's|.*/||'", 0, "src\n"},
		{"export GREETING=hello; NOT_EXPORTED=local", 0, ""},
		{`echo "$GREETING $NOT_EXPORTED"; sh -c 'echo child:$GREETING:$NOT_EXPORTED'`, 0, "hello local\nchild:hello:\n"},
		{"greet() { echo \"hi $1\"; return 4; }", 0, ""},
		{"greet agent", 4, "hi agent\n"},
		{"alias ll='echo aliased'", 0, ""},
		{"ll", 0, "aliased\n"},
		{"cd deep && false", 1, ""},
		{"basename $PWD", 0, "deep\n"},
		{"declare -A m=([k]=v); echo ${m[k]}", 0, "v\n"},
		{"echo ${m[k]}", 0, "v\n"},
	}
	for _, s := range steps {
		wantRun(t, run(t, c, id, s.command), s.code, s.output)
	}
	o := run(t, c, id, "true")
	if !strings.HasSuffix(o.Cwd, "/src/deep") || o.Session != "default" {
		t.Fatalf("cwd %q session %q", o.Cwd, o.Session)
	}
}

func TestRunVenvActivationPersists(t *testing.T) {
	_, err := exec.LookPath("python3")
	require(t, "python3", err)
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	o := run(t, c, id, "python3 -m venv --without-pip venv && . venv/bin/activate && echo $VIRTUAL_ENV")
	if o.ExitCode == nil || *o.ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(o.Output), "/venv") {
		t.Fatalf("venv: exit %s output %q", exitCode(o), o.Output)
	}
	o = run(t, c, id, `python3 -c 'import sys; print(sys.prefix)'`)
	if !strings.HasSuffix(strings.TrimSpace(o.Output), "/venv") {
		t.Fatalf("python after activate runs from %q, want the venv", o.Output)
	}
	wantRun(t, run(t, c, id, "deactivate; [ -z \"$VIRTUAL_ENV\" ] && echo off"), 0, "off\n")
}

func TestRunScriptsHeredocsPipesAndJobs(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	wantRun(t, run(t, c, id, "echo one\necho two\n\necho three"), 0, "one\ntwo\nthree\n")
	wantRun(t, run(t, c, id, "cat <<'EOF' > f.txt\nliteral $HOME 'q' \"dq\" \\\nEOF\ncat f.txt"), 0, "literal $HOME 'q' \"dq\" \\\n")
	wantRun(t, run(t, c, id, "printf 'b\\na\\nc\\n' | sort | head -2 && echo ok || echo no"), 0, "a\nb\nok\n")
	wantRun(t, run(t, c, id, "echo \"tab\there\" 'single'\\''quote' \"$((6*7))\""), 0, "tab\there single'quote 42\n")
	wantRun(t, run(t, c, id, "echo 'é 日本 🚀'"), 0, "é 日本 🚀\n")
	// A command far beyond the terminal's 4095-byte line limit.
	long := strings.Repeat("x", 20000)
	wantRun(t, run(t, c, id, "v="+long+"; echo ${#v}"), 0, "20000\n")

	// Background jobs keep running and do not hold the command open.
	start := time.Now()
	o := run(t, c, id, "(sleep 1; echo bg-done > bg.txt) & echo started")
	if time.Since(start) > 900*time.Millisecond || !strings.Contains(o.Output, "started") {
		t.Fatalf("background job held the command: %v %q", time.Since(start), o.Output)
	}
	eventually(t, 5*time.Second, "background job output", func() bool {
		o := run(t, c, id, "cat bg.txt 2>/dev/null")
		return strings.Contains(o.Output, "bg-done")
	})

	// A syntax error is the command's failure, not the session's.
	o = run(t, c, id, "if then fi")
	if o.ExitCode == nil || *o.ExitCode != 2 || o.SessionEnded {
		t.Fatalf("syntax error: exit %s ended=%v", exitCode(o), o.SessionEnded)
	}
	wantRun(t, run(t, c, id, "echo after"), 0, "after\n")
}

func TestRunExitAndSetERestartSession(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	run(t, c, id, "cd /tmp; export KEEP=1")
	o := run(t, c, id, "exit 3")
	if o.ExitCode == nil || *o.ExitCode != 3 || !o.SessionEnded || o.Note == "" {
		t.Fatalf("exit 3: exit %s ended=%v note %q", exitCode(o), o.SessionEnded, o.Note)
	}
	o = run(t, c, id, "echo ${KEEP:-gone} $PWD")
	if o.ExitCode == nil || *o.ExitCode != 0 || !strings.HasPrefix(o.Output, "gone ") || o.Output == "gone /tmp\n" {
		t.Fatalf("fresh session: exit %s output %q", exitCode(o), o.Output)
	}

	wantRun(t, run(t, c, id, "set -e"), 0, "")
	o = run(t, c, id, "echo before; false; echo never")
	if o.ExitCode == nil || *o.ExitCode != 1 || !o.SessionEnded || !strings.Contains(o.Output, "before") || strings.Contains(o.Output, "never") {
		t.Fatalf("set -e failure: exit %s ended=%v output %q", exitCode(o), o.SessionEnded, o.Output)
	}
	wantRun(t, run(t, c, id, "echo alive"), 0, "alive\n")

	// set -u in the session must not break the marker machinery.
	wantRun(t, run(t, c, id, "set -u; echo strict"), 0, "strict\n")
	wantRun(t, run(t, c, id, "echo still"), 0, "still\n")
}

func TestRunSoftTimeoutThenContinue(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	a := api.Run("for i in 1 2 3 4; do echo tick $i; sleep 0.3; done; echo done")
	a.TimeoutS = api.Seconds(0.45)
	o := mustRun(t, c, id, a)
	if !o.Running || o.ExitCode != nil || !strings.Contains(o.Output, "tick 1") || strings.Contains(o.Output, "done") {
		t.Fatalf("soft timeout: running=%v exit %s output %q", o.Running, exitCode(o), o.Output)
	}
	first := o.Output

	// While it runs, a new command is refused and runs nothing.
	_, err := c.Act(ctxT(t, 10*time.Second), id, api.Run("touch refused"))
	if !errors.Is(err, client.ErrConflict) {
		t.Fatalf("new command while busy: got %v, want conflict", err)
	}

	wait := api.Run("")
	wait.TimeoutS = api.Seconds(10)
	o = mustRun(t, c, id, wait)
	if o.Running || o.ExitCode == nil || *o.ExitCode != 0 || !strings.Contains(o.Output, "done") || strings.Contains(o.Output, "tick 1") {
		t.Fatalf("continue: running=%v exit %s output %q", o.Running, exitCode(o), o.Output)
	}
	if got := first + o.Output; got != "tick 1\ntick 2\ntick 3\ntick 4\ndone\n" {
		t.Fatalf("the two parts %q do not make the whole output", got)
	}
	// Nothing left: an empty run answers nothing new, the last exit code.
	wantRun(t, run(t, c, id, ""), 0, "")
	wantRun(t, run(t, c, id, "ls refused 2>/dev/null; echo $?"), 0, "2\n")
}

func TestRunInputToProgram(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	a := api.Run(`read -r -p "name? " name; read -r age; echo "hello $name ($age)"`)
	a.TimeoutS = api.Seconds(0.5)
	o := mustRun(t, c, id, a)
	if !o.Running || !strings.Contains(o.Output, "name? ") {
		t.Fatalf("prompt: running=%v output %q", o.Running, o.Output)
	}
	in := &api.Action{Kind: api.KindRun, Command: "Ada\n", Input: true, TimeoutS: api.Seconds(0.5)}
	o = mustRun(t, c, id, in)
	if !o.Running {
		t.Fatalf("after the first line the program should still wait: %+v", o)
	}
	in.Command = "36\n"
	in.TimeoutS = api.Seconds(10)
	o = mustRun(t, c, id, in)
	wantRun(t, o, 0, "hello Ada (36)\n")

	// A program other than bash reading stdin (python's input()).
	if _, err := exec.LookPath("python3"); err == nil {
		a := api.Run(`python3 -c 'print(int(input())*2)'`)
		a.TimeoutS = api.Seconds(0.5)
		o := mustRun(t, c, id, a)
		if !o.Running {
			t.Fatalf("python should wait for input: %+v", o)
		}
		in := &api.Action{Kind: api.KindRun, Command: "21\n", Input: true, TimeoutS: api.Seconds(10)}
		wantRun(t, mustRun(t, c, id, in), 0, "42\n")
	}

	// Typing with nothing running is refused.
	_, err := c.Act(ctxT(t, 10*time.Second), id, &api.Action{Kind: api.KindRun, Command: "x\n", Input: true})
	if !errors.Is(err, client.ErrConflict) {
		t.Fatalf("input with nothing running: %v", err)
	}
}

func TestInterrupt(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	a := api.Run("echo started; sleep 60; echo not-reached")
	a.TimeoutS = api.Seconds(0.3)
	if o := mustRun(t, c, id, a); !o.Running {
		t.Fatalf("should still run: %+v", o)
	}
	o := mustRun(t, c, id, &api.Action{Kind: api.KindInterrupt})
	if o.Kind != api.KindInterrupt || o.Running || o.ExitCode == nil || *o.ExitCode != 130 || strings.Contains(o.Output, "not-reached") {
		t.Fatalf("interrupt: kind %q running=%v exit %s output %q", o.Kind, o.Running, exitCode(o), o.Output)
	}
	// A busy loop in bash itself stops too.
	a = api.Run("while :; do :; done")
	a.TimeoutS = api.Seconds(0.3)
	mustRun(t, c, id, a)
	o = mustRun(t, c, id, &api.Action{Kind: api.KindInterrupt})
	if o.Running || o.ExitCode == nil || *o.ExitCode != 130 {
		t.Fatalf("interrupt builtin loop: running=%v exit %s", o.Running, exitCode(o))
	}
	wantRun(t, run(t, c, id, "echo next"), 0, "next\n")
	// Interrupt with nothing running says so.
	o = mustRun(t, c, id, &api.Action{Kind: api.KindInterrupt})
	if o.Running || o.Note == "" {
		t.Fatalf("idle interrupt: %+v", o)
	}
}

func TestHardTimeoutKillsCommand(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	marker := "sbxhard" + randomHex(4)
	a := api.Run(fmt.Sprintf("bash -c 'exec -a %s-child sleep 300' ; echo not-reached", marker))
	a.HardTimeoutS = 0.5
	start := time.Now()
	o := mustRun(t, c, id, a)
	if !o.TimedOut || o.Running || o.ExitCode == nil || *o.ExitCode < 128 || strings.Contains(o.Output, "not-reached") {
		t.Fatalf("hard timeout: timed_out=%v running=%v exit %s output %q", o.TimedOut, o.Running, exitCode(o), o.Output)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("hard timeout took %v", el)
	}
	eventually(t, 5*time.Second, "the timed-out command's processes to be gone", func() bool {
		return len(processesOf(marker)) == 0
	})
	// A pipeline's whole process group goes.
	a = api.Run(fmt.Sprintf("sleep 301 | bash -c 'exec -a %s-pipe cat'", marker))
	a.HardTimeoutS = 0.5
	if o := mustRun(t, c, id, a); !o.TimedOut {
		t.Fatalf("pipeline not timed out: %+v", o)
	}
	eventually(t, 5*time.Second, "pipeline processes gone", func() bool { return len(processesOf(marker)) == 0 })
	// The session survives its command's timeout.
	wantRun(t, run(t, c, id, "echo survived"), 0, "survived\n")
}

func TestRunOutputIsCapped(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	// 100,000 numbered lines: far over the 30,000-character cap.
	o := run(t, c, id, "seq 1 100000")
	if !o.Truncated || o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("truncated=%v exit %s", o.Truncated, exitCode(o))
	}
	if n := len([]rune(o.Output)); n > 30500 || n < 30000 {
		t.Fatalf("output has %d characters, want the cap of 30000 plus a marker line", n)
	}
	if !strings.HasPrefix(o.Output, "1\n2\n3\n") || !strings.HasSuffix(o.Output, "99999\n100000\n") || !strings.Contains(o.Output, "omitted") {
		t.Fatalf("head/tail wrong: %q ... %q", o.Output[:40], o.Output[len(o.Output)-40:])
	}
	// The full output is in the event log.
	var full strings.Builder
	if _, err := c.Output(ctxT(t, 30*time.Second), id, o.Cause, "", &full); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if full.String() != want.String() {
		t.Fatalf("recorded output: %d bytes, want %d", full.Len(), want.Len())
	}
}

func TestSessionsAreIndependent(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	slow := &api.Action{Kind: api.KindRun, Session: "server", Command: "sleep 2; echo slow-done", TimeoutS: api.Seconds(0.2)}
	if o := mustRun(t, c, id, slow); !o.Running || o.Session != "server" {
		t.Fatalf("server session: %+v", o)
	}
	// The default session is not blocked by the busy one.
	start := time.Now()
	wantRun(t, run(t, c, id, "cd /; echo free"), 0, "free\n")
	if time.Since(start) > time.Second {
		t.Fatal("default session waited for another session")
	}
	other := &api.Action{Kind: api.KindRun, Session: "server", Command: "", TimeoutS: api.Seconds(10)}
	o := mustRun(t, c, id, other)
	if o.Running || !strings.Contains(o.Output, "slow-done") {
		t.Fatalf("server session result: %+v", o)
	}
	if o := mustRun(t, c, id, &api.Action{Kind: api.KindRun, Session: "server", Command: "pwd"}); o.Output == "/\n" {
		t.Fatal("sessions share a cwd")
	}

	// Many sessions at once, each with its own state.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := fmt.Sprintf("s%d", i)
			for j := 0; j < 5; j++ {
				a := &api.Action{Kind: api.KindRun, Session: s, Command: fmt.Sprintf("X=${X:-0}; X=$((X+%d)); echo $X", i)}
				o, err := c.Act(ctxT(t, 30*time.Second), id, a)
				if err != nil {
					errs <- err
					return
				}
				if want := fmt.Sprintf("%d\n", i*(j+1)); o.Output != want {
					errs <- fmt.Errorf("session %s step %d: %q want %q", s, j, o.Output, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRunStreamsOutput(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	var mu sync.Mutex
	var chunks []string
	var firstAt time.Time
	start := time.Now()
	obs, err := c.ActStream(ctxT(t, 30*time.Second), id, api.Run("echo first; sleep 0.5; echo second"), func(o client.Output) {
		mu.Lock()
		defer mu.Unlock()
		if len(chunks) == 0 {
			firstAt = time.Now()
		}
		chunks = append(chunks, o.Stream+":"+string(o.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRun(t, obs, 0, "first\nsecond\n")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(chunks, ""); !strings.Contains(got, "pty:first") || !strings.Contains(got, "second") {
		t.Fatalf("streamed %q", chunks)
	}
	if firstAt.Sub(start) > 400*time.Millisecond {
		t.Fatalf("first output arrived after %v: not streamed as it happened", firstAt.Sub(start))
	}
	// A refusal on a streaming request is a plain HTTP error.
	slow := api.Run("sleep 5")
	slow.TimeoutS = api.Seconds(0.1)
	mustRun(t, c, id, slow)
	if _, err := c.ActStream(ctxT(t, 10*time.Second), id, api.Run("echo x"), nil); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("streamed conflict: %v", err)
	}
}
