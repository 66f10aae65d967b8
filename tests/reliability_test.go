package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// RELIABILITY.md cases that had no end-to-end test (see
// docs/reliability.md): fork and memory bombs through the API, timeouts
// and deletes of containers, an interrupt racing a natural exit, output
// floods on a terminal, and hostile paths on every backend. Each checks
// the four parts of a case: a clear error or the right observation,
// nothing lost, nothing leaked (the leak checker), and another sandbox
// carrying on.

// rig is one daemon, a client of it and the leak baseline taken before a
// test's work on one backend.
type rig struct {
	d       *daemon
	c       *client.Client
	backend string
	leaks   *leakBaseline
	ids     []string // sandboxes the test made, deleted by done if still there
}

// newRig starts a daemon for a test on backend, skipping (failing in CI)
// when the backend cannot run here.
func newRig(t *testing.T, backend string, extra ...string) *rig {
	t.Helper()
	d := startDaemon(t, extra...)
	c := d.client()
	if backend == api.BackendContainerd {
		requireContainerd(t, c)
	}
	r := &rig{d: d, c: c, backend: backend, leaks: newLeakCheck(t, d)}
	// Containers outlive their daemon: whatever happens, delete.
	t.Cleanup(func() {
		c := d.unixClient()
		defer c.Close()
		for _, id := range r.ids {
			_ = c.DeleteSandbox(context.Background(), id)
		}
	})
	return r
}

// sandbox creates a sandbox on the rig's backend.
func (r *rig) sandbox(t *testing.T, req api.CreateSandboxRequest) string {
	t.Helper()
	req.Backend = r.backend
	sb, err := r.c.CreateSandbox(ctxT(t, 60*time.Second), req)
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", r.backend, err)
	}
	r.ids = append(r.ids, sb.ID)
	return sb.ID
}

// remove deletes a sandbox and checks it is gone for the API.
func (r *rig) remove(t *testing.T, id string) {
	t.Helper()
	if err := r.c.DeleteSandbox(ctxT(t, 60*time.Second), id); err != nil {
		t.Fatalf("delete %s: %v", id, err)
	}
	if _, err := r.c.GetSandbox(ctxT(t, 10*time.Second), id); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get %s after its delete: %v, want not_found", id, err)
	}
}

// done deletes the sandboxes still there and checks that nothing leaked.
func (r *rig) done(t *testing.T) {
	t.Helper()
	for _, id := range r.ids {
		if err := r.c.DeleteSandbox(ctxT(t, 60*time.Second), id); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	r.c.CloseIdle()
	r.leaks.check()
}

// onEachBackend runs test once per backend, in a subtest of its own.
func onEachBackend(t *testing.T, backends []string, test func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// pidsCgroup finds the pids cgroup of sandbox id on the host: a directory
// named after it below a pids hierarchy (cgroup v1) or the unified one.
func pidsCgroup(t *testing.T, id string) string {
	t.Helper()
	var patterns []string
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		for depth := 1; depth <= 5; depth++ {
			patterns = append(patterns, root+strings.Repeat("/*", depth)+"/"+id)
		}
	}
	for _, pattern := range patterns {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if _, err := os.Stat(filepath.Join(m, "pids.max")); err == nil {
				return m
			}
		}
	}
	t.Fatalf("no pids cgroup of %s on the host", id)
	return ""
}

// cgroupPids reads a pids cgroup: its limit, the tasks it counts, and the
// processes in it.
func cgroupPids(dir string) (limit, current, procs int, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids.max"))
	if err != nil {
		return 0, 0, 0, err
	}
	if limit, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return 0, 0, 0, fmt.Errorf("pids.max %q: %v", b, err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "pids.current")); err != nil {
		return 0, 0, 0, err
	}
	if current, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return 0, 0, 0, err
	}
	if b, err = os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil {
		return 0, 0, 0, err
	}
	return limit, current, len(strings.Fields(string(b))), nil
}

// cgroupProcesses describes the processes of a cgroup, one a line: pid,
// state, parent and command line.
func cgroupProcesses(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out strings.Builder
	for _, pid := range strings.Fields(string(b)) {
		stat, _ := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		fmt.Fprintf(&out, "  %s %s ppid %s: %s\n", pid, f[0], f[1], strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out.String()
}

// pidsWatch samples a pids cgroup until it is gone, failing the test if
// the cgroup ever holds more than its limit.
type pidsWatch struct {
	startProcs int // processes when the watch began
	mu         sync.Mutex
	max        int // most tasks seen
	procs      int // most processes seen
	lastProcs  int
	quit       chan struct{}
	ended      chan struct{}
}

func startPidsWatch(t *testing.T, cg string, limit int) *pidsWatch {
	t.Helper()
	pmax, _, procs, err := cgroupPids(cg)
	if err != nil || pmax != limit {
		t.Fatalf("the sandbox's pids cgroup %s: pids.max %d, %v; want %d", cg, pmax, err, limit)
	}
	w := &pidsWatch{startProcs: procs, lastProcs: procs, quit: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for {
			pmax, cur, procs, err := cgroupPids(cg)
			if err != nil {
				return // deleted
			}
			if pmax != limit || cur > limit || procs > limit {
				t.Errorf("pids cgroup %s: pids.max %d, pids.current %d, %d processes; want all within %d", cg, pmax, cur, procs, limit)
			}
			w.mu.Lock()
			w.max, w.procs, w.lastProcs = max(w.max, cur), max(w.procs, procs), procs
			w.mu.Unlock()
			select {
			case <-w.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *pidsWatch) peak() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// processes is how many processes the cgroup held at the last look.
func (w *pidsWatch) processes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastProcs
}

// stop ends the watch and returns the most tasks and processes seen.
func (w *pidsWatch) stop() (tasks, procs int) {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.procs
}

// TestForkBomb sets off `:(){ :|:& };:` in a sandbox with a pids limit,
// through a run (with a hard timeout) and through an exec: the sandbox's
// processes never pass the limit, another sandbox and the host answer
// during the bomb, and the bombed sandbox is deleted leaving nothing.
func TestForkBomb(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd}, testForkBomb)
}

func testForkBomb(t *testing.T, backend string) {
	const limit = 64
	r := newRig(t, backend)
	other := r.sandbox(t, api.CreateSandboxRequest{})
	bomb := ":(){ :|:& };:; sleep 600"
	for _, tc := range []struct {
		name   string
		action *api.Action
		// check the bomb's own answer.
		check func(o *api.Observation) bool
	}{
		{"run", &api.Action{Kind: api.KindRun, Command: bomb, HardTimeoutS: 5, TimeoutS: api.Seconds(120)},
			// The command's foreground job is killed at the hard
			// timeout; its background bomb lives on until the sandbox
			// goes.
			func(o *api.Observation) bool { return o.TimedOut && !o.Running && o.ExitCode != nil }},
		{"exec", &api.Action{Kind: api.KindExec, Argv: []string{"bash", "-c", bomb}, TimeoutS: api.Seconds(5)},
			// The exec's timeout kills its whole tree.
			func(o *api.Observation) bool { return o.TimedOut && o.Signal == "SIGKILL" && exitCode(o) == "137" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := r.sandbox(t, api.CreateSandboxRequest{Limits: &api.Limits{Pids: limit}})
			cg := pidsCgroup(t, id)
			watch := startPidsWatch(t, cg, limit)

			answer := make(chan *api.Observation, 1)
			go func() {
				o, err := r.c.Act(context.Background(), id, tc.action)
				if err != nil {
					t.Errorf("the bomb's %s: %v", tc.name, err)
				}
				answer <- o
			}()
			// The bomb fills the limit and keeps trying.
			eventually(t, 30*time.Second, "the bomb to fill the pids limit", func() bool { return watch.peak() >= limit*3/4 })
			// Meanwhile the daemon, another sandbox and the host answer.
			for i := range 3 {
				word := fmt.Sprintf("alive-%d", i)
				wantRun(t, run(t, r.c, other, "echo "+word), 0, word+"\n")
				if out, err := exec.Command("echo", "host").Output(); err != nil || string(out) != "host\n" {
					t.Fatalf("the host during the bomb: %q %v", out, err)
				}
			}
			var o *api.Observation
			select {
			case o = <-answer:
			case <-time.After(150 * time.Second):
				t.Fatal("no answer to the bomb")
			}
			if o == nil {
				t.FailNow()
			}
			t.Logf("the bomb's %s answered: exit %s, signal %q, timed out %v", tc.name, exitCode(o), o.Signal, o.TimedOut)
			if !tc.check(o) {
				t.Errorf("the bomb's answer: %.500s", observationText(t, o))
			}
			if tc.name == "exec" {
				// Its timeout killed all of it, however it forked.
				deadline := time.Now().Add(30 * time.Second)
				for watch.processes() > watch.startProcs {
					if time.Now().After(deadline) {
						t.Fatalf("the exec's bomb is not gone 30s after its timeout: %d processes in its cgroup, %d before:\n%s", watch.processes(), watch.startProcs, cgroupProcesses(cg))
					}
					time.Sleep(20 * time.Millisecond)
				}
				if o := mustRun(t, r.c, id, api.Exec("echo", "after")); o.Stdout != "after\n" {
					t.Errorf("the sandbox after its exec's bomb: %+v", o)
				}
			}
			// Nothing lost: the bomb's answer is in the log, once.
			wantLogged(t, r.c, id, o)
			// The bombed sandbox is deleted whatever still runs in it.
			r.remove(t, id)
			eventually(t, 30*time.Second, "its cgroup to be gone", func() bool {
				_, err := os.Stat(cg)
				return errors.Is(err, os.ErrNotExist)
			})
			peak, procs := watch.stop()
			t.Logf("pids limit %d: at most %d tasks, %d processes", limit, peak, procs)
			wantRun(t, run(t, r.c, other, "echo after"), 0, "after\n")
		})
	}
	r.done(t)
}

// TestMemoryBomb allocates far past a sandbox's memory limit: the kernel
// kills the allocation inside the sandbox only, the answer says
// oom_killed, and a command running in another sandbox at the time is
// untouched.
func TestMemoryBomb(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd}, testMemoryBomb)
}

func testMemoryBomb(t *testing.T, backend string) {
	r := newRig(t, backend)
	other := r.sandbox(t, api.CreateSandboxRequest{})
	id := r.sandbox(t, api.CreateSandboxRequest{Limits: &api.Limits{MemoryMB: 64}})
	// The other sandbox is busy while the bomb goes off.
	busy := make(chan *api.Observation, 1)
	go func() {
		o, err := r.c.Act(context.Background(), other, api.Run("for i in 1 2 3 4 5 6 7 8; do echo tick$i; sleep 0.25; done"))
		if err != nil {
			t.Errorf("the other sandbox's command: %v", err)
		}
		busy <- o
	}()
	o := mustRun(t, r.c, id, &api.Action{Kind: api.KindExec, Argv: []string{"python3", "-c", "x = bytearray(1 << 30); print('allocated')"}, TimeoutS: api.Seconds(60)})
	if !o.OOMKilled || o.Signal != "SIGKILL" || exitCode(o) != "137" || o.TimedOut || strings.Contains(o.Stdout, "allocated") {
		t.Errorf("1 GiB in 64 MiB: %.500s", observationText(t, o))
	}
	wantLogged(t, r.c, id, o)
	if o := <-busy; o != nil {
		wantRun(t, o, 0, "tick1\ntick2\ntick3\ntick4\ntick5\ntick6\ntick7\ntick8\n")
	}
	// What fits still runs, in the same sandbox, and is not called an
	// OOM kill.
	o = mustRun(t, r.c, id, api.Exec("python3", "-c", "x = bytearray(8 << 20); print(len(x))"))
	if o.Stdout != "8388608\n" || exitCode(o) != "0" || o.OOMKilled {
		t.Errorf("8 MiB in 64 MiB: %.500s", observationText(t, o))
	}
	wantRun(t, run(t, r.c, other, "echo fine"), 0, "fine\n")
	r.done(t)
}

// TestContainerdTimeoutsKillTrees: on containerd, what a timed-out or
// deleted command leaves is gone: `sleep infinity`, a child ignoring
// SIGTERM, setsid and double-forked children.
func TestContainerdTimeoutsKillTrees(t *testing.T) {
	r := newRig(t, api.BackendContainerd)
	id := r.sandbox(t, api.CreateSandboxRequest{})
	other := r.sandbox(t, api.CreateSandboxRequest{})
	marker := "sbxtmo" + randomHex(4)
	// detached starts a setsid child and a double-forked one, both
	// ignoring SIGTERM, named tag.
	detached := func(tag string) string {
		return fmt.Sprintf(`setsid -f bash -c "trap '' TERM; exec -a %[1]s-%[2]s-setsid sleep infinity" ; (trap '' TERM; bash -c "trap '' TERM; exec -a %[1]s-%[2]s-double sleep infinity" &)`, marker, tag)
	}
	count := func(tag string) int { return len(processesOf(marker + "-" + tag)) }

	t.Run("exec timeout", func(t *testing.T) {
		// The exec's timeout ends its whole tree, detached or not.
		script := detached("exec") + fmt.Sprintf(`; echo started; trap '' TERM; exec -a %s-exec-main sleep infinity`, marker)
		o := mustRun(t, r.c, id, &api.Action{Kind: api.KindExec, Argv: []string{"bash", "-c", script}, TimeoutS: api.Seconds(2)})
		if !o.TimedOut || exitCode(o) != "137" || o.Signal != "SIGKILL" || o.Stdout != "started\n" {
			t.Errorf("exec past its timeout: %.500s", observationText(t, o))
		}
		eventually(t, 20*time.Second, "every process of the exec to be gone", func() bool { return count("exec") == 0 })
		wantLogged(t, r.c, id, o)
	})
	t.Run("run hard timeout", func(t *testing.T) {
		// The hard timeout kills the command's foreground job, `sleep
		// infinity` ignoring SIGTERM, and the rest of the command line
		// never runs. The session lives on.
		cmd := detached("run") + fmt.Sprintf(`; bash -c "trap '' TERM; exec -a %s-run-fg sleep infinity"; echo not-reached`, marker)
		o := mustRun(t, r.c, id, &api.Action{Kind: api.KindRun, Command: cmd, HardTimeoutS: 8, TimeoutS: api.Seconds(0.5)})
		if !o.Running {
			t.Fatalf("the command ended at once: %.500s", observationText(t, o))
		}
		eventually(t, 20*time.Second, "the command's processes", func() bool {
			return count("run-setsid") == 1 && count("run-double") == 1 && count("run-fg") == 1
		})
		// An empty run waits for the command's end.
		o = mustRun(t, r.c, id, &api.Action{Kind: api.KindRun, TimeoutS: api.Seconds(60)})
		if !o.TimedOut || o.Running || o.ExitCode == nil || *o.ExitCode < 128 || strings.Contains(o.Output, "not-reached") {
			t.Errorf("run past its hard timeout: %.500s", observationText(t, o))
		}
		eventually(t, 20*time.Second, "the foreground job to be gone", func() bool { return count("run-fg") == 0 })
		wantLogged(t, r.c, id, o)
		wantRun(t, run(t, r.c, id, "echo survived"), 0, "survived\n")
		// What the command detached from its process group is not its
		// foreground job: API.md has the hard timeout kill the command's
		// process group, and a server started in the background must
		// outlive it. It lives until the sandbox is deleted.
		t.Logf("after the run's hard timeout: setsid child %d, double-forked child %d left (until delete)", count("run-setsid"), count("run-double"))
	})
	t.Run("delete", func(t *testing.T) {
		// Delete ends everything: what the run left, and a running
		// command with detached, TERM-ignoring children.
		cmd := detached("del") + fmt.Sprintf(`; bash -c "trap '' TERM; exec -a %s-del-fg sleep infinity"`, marker)
		a := &api.Action{Kind: api.KindRun, Command: cmd, TimeoutS: api.Seconds(1)}
		if o := mustRun(t, r.c, id, a); !o.Running {
			t.Fatalf("the command ended: %.500s", observationText(t, o))
		}
		eventually(t, 20*time.Second, "the command's processes", func() bool { return count("del") == 3 })
		r.remove(t, id)
		eventually(t, 20*time.Second, "every process of the sandbox to be gone", func() bool { return len(processesOf(marker)) == 0 })
	})
	wantRun(t, run(t, r.c, other, "echo unaffected"), 0, "unaffected\n")
	r.done(t)
}

// TestInterruptRacesExit sends an interrupt just as a command ends by
// itself, many times: each time there is one final status, which the
// run's and the interrupt's answers agree on, the event log holds one
// result per action, and the session goes on working.
func TestInterruptRacesExit(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd}, testInterruptRacesExit)
}

func testInterruptRacesExit(t *testing.T, backend string) {
	const rounds = 30
	r := newRig(t, backend)
	id := r.sandbox(t, api.CreateSandboxRequest{})
	other := r.sandbox(t, api.CreateSandboxRequest{})
	var natural, interrupted, early int
	for i := range rounds {
		// A known status before the race: 3 is what an interrupt that
		// finds nothing running yet reports.
		wantRun(t, run(t, r.c, id, "(exit 3)"), 3, "")
		cmd := &api.Action{ID: fmt.Sprintf("cmd-%d-%s", i, randomHex(3)), Kind: api.KindRun, Command: "sleep 0.05; (exit 7)", TimeoutS: api.Seconds(60)}
		answer := make(chan *api.Observation, 1)
		go func() {
			o, err := r.c.Act(context.Background(), id, cmd)
			if err != nil {
				t.Errorf("round %d: run: %v", i, err)
			}
			answer <- o
		}()
		// About when the command ends by itself, a little before or
		// after from round to round.
		time.Sleep(time.Duration(25+(i%5)*12) * time.Millisecond)
		intr := &api.Action{ID: fmt.Sprintf("intr-%d-%s", i, randomHex(3)), Kind: api.KindInterrupt}
		iobs, err := r.c.Act(ctxT(t, 60*time.Second), id, intr)
		if err != nil {
			t.Fatalf("round %d: interrupt: %v", i, err)
		}
		ro := <-answer
		if ro == nil {
			t.FailNow()
		}
		switch {
		case ro.Running || ro.ExitCode == nil || (*ro.ExitCode != 7 && *ro.ExitCode != 130) || ro.SessionEnded:
			t.Errorf("round %d: the run's answer is not one final status: %s", i, observationText(t, ro))
		case iobs.Running || iobs.ExitCode == nil:
			t.Errorf("round %d: the interrupt's answer is not final: %s", i, observationText(t, iobs))
		case iobs.Note == "no command was running" && *iobs.ExitCode == 3:
			// It came before the command started, which then ran its
			// course.
			early++
			if *ro.ExitCode != 7 {
				t.Errorf("round %d: an interrupt before the command, yet the command was interrupted: %s", i, observationText(t, ro))
			}
		case *iobs.ExitCode != *ro.ExitCode:
			t.Errorf("round %d: two final statuses: the run says %d, the interrupt %d (%s)", i, *ro.ExitCode, *iobs.ExitCode, observationText(t, iobs))
		case *ro.ExitCode == 7:
			natural++
		default:
			interrupted++
		}
		wantLogged(t, r.c, id, ro)
		wantLogged(t, r.c, id, iobs)
		// The session works, and nothing of the race spills into the
		// next command.
		word := fmt.Sprintf("next-%d", i)
		wantRun(t, run(t, r.c, id, "echo "+word), 0, word+"\n")
	}
	t.Logf("%d rounds: %d ended by themselves, %d interrupted, %d interrupts before the command", rounds, natural, interrupted, early)
	// Every action of the races has exactly one result.
	results := map[int64]int{}
	actions := 0
	for _, ev := range allEvents(t, r.c, id) {
		if ev.Type == api.EventAction {
			actions++
		} else {
			results[ev.Cause]++
		}
	}
	if len(results) != actions {
		t.Errorf("%d actions, %d with a result", actions, len(results))
	}
	for cause, n := range results {
		if n != 1 {
			t.Errorf("action %d has %d results", cause, n)
		}
	}
	wantRun(t, run(t, r.c, other, "echo unaffected"), 0, "unaffected\n")
	r.done(t)
}

// TestRunOutputFlood floods a run's terminal with 50 MB: one line with no
// newline, and a storm of carriage returns (a progress line redrawn a
// million times). The command is never blocked, the answer is valid JSON
// capped as API.md says (the first and last 15,000 characters around a
// marker), the stream and the log carry every byte, and the daemon's
// memory grows by far less than the output.
func TestRunOutputFlood(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd}, testRunOutputFlood)
}

func testRunOutputFlood(t *testing.T, backend string) {
	const total, half = 50000000, 15000
	r := newRig(t, backend)
	id := r.sandbox(t, api.CreateSandboxRequest{})
	other := r.sandbox(t, api.CreateSandboxRequest{})
	for _, tc := range []struct {
		name, command string
		pattern       string // the output repeats it
	}{
		{"one line", "head -c 50000000 /dev/zero | tr '\\0' a", "a"},
		{"carriage returns", "yes $'\\rprogress 42%' | tr -d '\\n' | head -c 50000000", "\rprogress 42%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The output's characters from..to.
			slice := func(from, to int) string {
				var b strings.Builder
				for i := from; i < to; i++ {
					b.WriteByte(tc.pattern[i%len(tc.pattern)])
				}
				return b.String()
			}
			mem := startMemWatch(t, r.d)
			var streamed atomic.Int64
			o, err := r.c.ActStream(ctxT(t, 300*time.Second), id, &api.Action{Kind: api.KindRun, Command: tc.command, TimeoutS: api.Seconds(300)}, func(out client.Output) {
				streamed.Add(int64(len(out.Data)) + out.Dropped)
			})
			m := mem.stop()
			if err != nil {
				t.Fatal(err)
			}
			// Not blocked: it ran to its end.
			if o.Running || o.TimedOut || exitCode(o) != "0" || !o.Truncated {
				t.Fatalf("running %v timed out %v exit %s truncated %v", o.Running, o.TimedOut, exitCode(o), o.Truncated)
			}
			want := slice(0, half) + fmt.Sprintf("\n[... %d characters omitted; the full output is in the event log ...]\n", total-2*half) + slice(total-half, total)
			if o.Output != want {
				t.Errorf("output of %d characters: %.80q ... %.80q; want the first and last %d characters around a marker", len([]rune(o.Output)), o.Output, o.Output[max(0, len(o.Output)-80):], half)
			}
			if streamed.Load() != total {
				t.Errorf("streamed %d bytes (data and dropped), want %d", streamed.Load(), total)
			}
			// Nothing lost: the log holds all of it, and its events are
			// whole JSON (Events fails on any that is not).
			n, err := r.c.Output(ctxT(t, 60*time.Second), id, o.Cause, "", discard{})
			if err != nil || n != total {
				t.Errorf("the log holds %d bytes of output (%v), want %d", n, err, total)
			}
			wantLogged(t, r.c, id, o)
			t.Logf("%d MB of output: the daemon's RSS went from %d to at most %d MB, its heap from %d to at most %d MB", total>>20, m.rss>>20, m.peakRSS>>20, m.heap>>20, m.peakHeap>>20)
			if raceEnabled {
				// The race detector's shadow memory and its pools
				// blur the RSS: the heap in use tells whether output
				// is held.
				if grew := m.peakHeap - m.heap; grew > total*3/4 {
					t.Errorf("the daemon's heap grew by %d MB for %d MB of output", grew>>20, total>>20)
				}
			} else if grew := m.peakRSS - m.rss; grew > total/4 {
				t.Errorf("the daemon's RSS grew by %d MB for %d MB of output", grew>>20, total>>20)
			}
			wantRun(t, run(t, r.c, id, "echo after"), 0, "after\n")
		})
	}
	wantRun(t, run(t, r.c, other, "echo unaffected"), 0, "unaffected\n")
	r.done(t)
}

// memWatch samples the daemon's resident memory and heap in use (its
// metrics) until stopped.
type memWatch struct {
	quit  chan struct{}
	ended chan struct{}
	// Readings at the start and the most seen.
	rss, heap, peakRSS, peakHeap int64
}

func startMemWatch(t *testing.T, d *daemon) *memWatch {
	t.Helper()
	c := d.unixClient()
	read := func() (rss, heap int64) {
		m, err := c.Metrics(context.Background())
		if err != nil {
			t.Errorf("metrics: %v", err)
			return 0, 0
		}
		if _, ok := m["sandboxd_resident_bytes"]; !ok {
			t.Error("no sandboxd_resident_bytes in the metrics")
		}
		return int64(m["sandboxd_resident_bytes"]), int64(m["sandboxd_heap_bytes"])
	}
	w := &memWatch{quit: make(chan struct{}), ended: make(chan struct{})}
	w.rss, w.heap = read()
	w.peakRSS, w.peakHeap = w.rss, w.heap
	go func() {
		defer close(w.ended)
		defer c.Close()
		for {
			rss, heap := read()
			w.peakRSS, w.peakHeap = max(w.peakRSS, rss), max(w.peakHeap, heap)
			select {
			case <-w.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

// stop ends the watch and returns its readings.
func (w *memWatch) stop() *memWatch {
	close(w.quit)
	<-w.ended
	return w
}

// TestContainerdDeleteEdgeCases: deleting a container twice at once,
// while creates are in flight, and when its processes are stopped or
// frozen is idempotent and leaves nothing in containerd.
func TestContainerdDeleteEdgeCases(t *testing.T) {
	r := newRig(t, api.BackendContainerd)
	other := r.sandbox(t, api.CreateSandboxRequest{})
	marker := "sbxdel" + randomHex(4)
	// busy starts a detached process in a sandbox and waits for it.
	busy := func(t *testing.T, id, tag string) {
		t.Helper()
		run(t, r.c, id, fmt.Sprintf("(setsid bash -c 'exec -a %s-%s sleep infinity' > /dev/null 2>&1 &); sleep 0.1", marker, tag))
		eventually(t, 20*time.Second, "its process", func() bool { return len(processesOf(marker+"-"+tag)) == 1 })
	}
	// gone checks that nothing of a deleted sandbox is left: not for the
	// API, not in containerd, not as a process.
	gone := func(t *testing.T, id, tag string) {
		t.Helper()
		if _, err := r.c.GetSandbox(ctxT(t, 10*time.Second), id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get %s after delete: %v", id, err)
		}
		if err := r.c.DeleteSandbox(ctxT(t, 60*time.Second), id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delete %s once more: %v, want not_found", id, err)
		}
		for _, what := range [][]string{{"containers", "ls", "-q"}, {"tasks", "ls", "-q"}, {"snapshots", "ls"}, {"leases", "ls", "-q"}} {
			out, _ := exec.Command("ctr", append([]string{"-n", e2eNamespace}, what...)...).Output()
			if strings.Contains(string(out), id) {
				t.Errorf("ctr %s still lists %s", what[0], id)
			}
		}
		eventually(t, 20*time.Second, "its processes to be gone", func() bool { return len(processesOf(marker+"-"+tag)) == 0 })
	}

	t.Run("twice at once", func(t *testing.T) {
		id := r.sandbox(t, api.CreateSandboxRequest{})
		busy(t, id, "twice")
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- r.c.DeleteSandbox(ctxT(t, 60*time.Second), id) }()
		}
		var ok, notFound int
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errors.Is(err, client.ErrNotFound):
				notFound++
			default:
				t.Errorf("concurrent delete: %v", err)
			}
		}
		if ok != 1 || notFound != 1 {
			t.Errorf("two deletes at once: %d succeeded, %d not_found; want one each", ok, notFound)
		}
		gone(t, id, "twice")
	})

	t.Run("during creates", func(t *testing.T) {
		// Creates in flight while a sweeper deletes every sandbox it
		// sees (but the one that must stay): each created sandbox is
		// deleted exactly once, as soon as it shows.
		const creates = 4
		created := make(chan string, creates)
		var wg sync.WaitGroup
		for range creates {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := r.c.CreateSandbox(ctxT(t, 120*time.Second), api.CreateSandboxRequest{Backend: api.BackendContainerd})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				created <- sb.ID
			}()
		}
		creating := make(chan struct{})
		go func() { wg.Wait(); close(creating) }()
		deleted := map[string]int{}
		for finished := false; ; {
			select {
			case <-creating:
				finished = true
			default:
			}
			sbs, err := r.c.ListSandboxes(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			left := 0
			for _, sb := range sbs {
				if sb.ID == other {
					continue
				}
				left++
				switch err := r.c.DeleteSandbox(ctxT(t, 60*time.Second), sb.ID); {
				case err == nil:
					deleted[sb.ID]++
				case !errors.Is(err, client.ErrNotFound):
					t.Errorf("delete %s during creates: %v", sb.ID, err)
				}
			}
			if finished && left == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(created)
		n := 0
		for id := range created {
			n++
			r.ids = append(r.ids, id)
			if deleted[id] != 1 {
				t.Errorf("%s was deleted %d times", id, deleted[id])
			}
			gone(t, id, "none")
		}
		if n != creates || len(deleted) != creates {
			t.Errorf("%d creates answered, %d sandboxes deleted; want %d", n, len(deleted), creates)
		}
	})

	for _, stuck := range []struct {
		name string
		// stick makes the container's processes (those of pids) stuck,
		// through its cgroup dirs (by controller).
		stick func(t *testing.T, cgroup func(ctl string) string)
	}{
		{"stopped", func(t *testing.T, cgroup func(string) string) {
			b, err := os.ReadFile(filepath.Join(cgroup("pids"), "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Logf("SIGSTOP %d: %v", pid, err)
				}
			}
		}},
		{"frozen", func(t *testing.T, cgroup func(string) string) {
			dir := cgroup("freezer")
			file, value := "freezer.state", "FROZEN"
			if dir == "" {
				dir, file, value = cgroup(""), "cgroup.freeze", "1"
			}
			if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
				t.Fatalf("freeze: %v", err)
			}
		}},
	} {
		t.Run(stuck.name, func(t *testing.T) {
			id := r.sandbox(t, api.CreateSandboxRequest{})
			busy(t, id, stuck.name)
			// A command is running in it when it gets stuck.
			go r.c.Act(context.Background(), id, api.Run("sleep 600"))
			cgroup := func(ctl string) string {
				for _, dir := range []string{"/sys/fs/cgroup/" + ctl + "/" + e2eNamespace + "/" + id, "/sys/fs/cgroup/" + e2eNamespace + "/" + id} {
					if _, err := os.Stat(dir); err == nil {
						return dir
					}
				}
				return ""
			}
			if cgroup("pids") == "" && cgroup("") == "" {
				t.Fatalf("no cgroup of %s found", id)
			}
			stuck.stick(t, cgroup)
			if o, err := r.c.Act(ctxT(t, 60*time.Second), other, api.Exec("echo", "ok")); err != nil || o.Stdout != "ok\n" {
				t.Errorf("another sandbox while one is stuck: %+v %v", o, err)
			}
			if err := r.c.DeleteSandbox(ctxT(t, 120*time.Second), id); err != nil {
				t.Fatalf("delete a %s container: %v", stuck.name, err)
			}
			gone(t, id, stuck.name)
		})
	}
	wantRun(t, run(t, r.c, other, "echo unaffected"), 0, "unaffected\n")
	r.done(t)
}

// wantLogged checks that the sandbox's event log holds exactly one result
// for the action o answers, and that it is o.
func wantLogged(t *testing.T, c *client.Client, id string, o *api.Observation) {
	t.Helper()
	var results []api.Event
	for _, ev := range allEvents(t, c, id) {
		if ev.Type != api.EventAction && ev.Cause == o.Cause {
			results = append(results, ev)
		}
	}
	if len(results) != 1 || results[0].Observation == nil {
		t.Errorf("the log holds %d results for action %d, want its one observation", len(results), o.Cause)
		return
	}
	if got, want := observationText(t, results[0].Observation), observationText(t, o); got != want {
		t.Errorf("action %d was answered\n  %.500s\nbut the log has\n  %.500s", o.Cause, want, got)
	}
}

// observationText is an observation as the API writes it.
func observationText(t *testing.T, o *api.Observation) string {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
