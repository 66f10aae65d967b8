package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// The faults of issue 11 under load: kill -9 of the daemon, containerd
// going away, a full state directory, clients that vanish or read slowly.
// Each test checks the four parts of a RELIABILITY.md case: a structured
// error, nothing lost (the event log has every answered observation),
// nothing leaked, and the daemon and the other sandboxes carry on.

// answer is an observation a client was given, to be found in the log.
type answer struct {
	sandbox string
	id      string // the client's action id
	obs     *api.Observation
}

// sandboxLog is a sandbox's event log, read whole and indexed.
type sandboxLog struct {
	events  []api.Event
	actions map[int64]*api.Action // by seq
	byID    map[string]int64      // client action id -> seq
	results map[int64]api.Event   // action seq -> its observation or error
}

// readLog reads a sandbox's whole event log and checks what holds of any
// log, whatever happened to the daemon: every line is a whole event, seqs
// run from 1 without a gap, every result follows the action it answers,
// and no action has more than one result.
func readLog(t *testing.T, c *client.Client, id string) *sandboxLog {
	t.Helper()
	l := &sandboxLog{actions: map[int64]*api.Action{}, byID: map[string]int64{}, results: map[int64]api.Event{}}
	// Events fails on a line that is not a whole event.
	l.events = allEvents(t, c, id)
	for i, ev := range l.events {
		if ev.Seq != int64(i)+1 {
			t.Fatalf("%s: event %d has seq %d: seqs are not contiguous from 1", id, i+1, ev.Seq)
		}
		switch ev.Type {
		case api.EventAction:
			if ev.Action == nil {
				t.Fatalf("%s: action event %d without its action", id, ev.Seq)
			}
			l.actions[ev.Seq] = ev.Action
			if ev.Action.ID != "" {
				if prev, ok := l.byID[ev.Action.ID]; ok {
					t.Errorf("%s: action id %q recorded twice (seqs %d and %d)", id, ev.Action.ID, prev, ev.Seq)
				}
				l.byID[ev.Action.ID] = ev.Seq
			}
		case api.EventObservation, api.EventError:
			if ev.Type == api.EventObservation && ev.Observation == nil || ev.Type == api.EventError && ev.Error == nil {
				t.Fatalf("%s: %s event %d is empty", id, ev.Type, ev.Seq)
			}
			if l.actions[ev.Cause] == nil {
				t.Errorf("%s: %s event %d answers %d, which is not an earlier action", id, ev.Type, ev.Seq, ev.Cause)
			}
			if prev, ok := l.results[ev.Cause]; ok {
				t.Errorf("%s: action %d has two results (seqs %d and %d)", id, ev.Cause, prev.Seq, ev.Seq)
			}
			l.results[ev.Cause] = ev
		default:
			t.Fatalf("%s: event %d of unknown type %q", id, ev.Seq, ev.Type)
		}
	}
	return l
}

// settled checks that every action of the log has its result.
func (l *sandboxLog) settled(t *testing.T, id string) {
	t.Helper()
	for seq, a := range l.actions {
		if _, ok := l.results[seq]; !ok {
			t.Errorf("%s: action %d (%s, id %q) has no result", id, seq, a.Kind, a.ID)
		}
	}
}

// has checks that an answered observation is in the log, the same.
func (l *sandboxLog) has(t *testing.T, a answer) {
	t.Helper()
	seq, ok := l.byID[a.id]
	if !ok {
		t.Errorf("%s: answered action %q is not in the log", a.sandbox, a.id)
		return
	}
	if seq != a.obs.Cause {
		t.Errorf("%s: answered action %q has cause %d, the log has it at %d", a.sandbox, a.id, a.obs.Cause, seq)
	}
	res, ok := l.results[seq]
	if !ok || res.Observation == nil {
		t.Errorf("%s: the observation answered to %q is not in the log (result %+v)", a.sandbox, a.id, res)
		return
	}
	if got, want := obsJSON(t, res.Observation), obsJSON(t, a.obs); got != want {
		t.Errorf("%s: action %q was answered\n  %s\nbut the log has\n  %s", a.sandbox, a.id, want, got)
	}
}

func obsJSON(t *testing.T, o *api.Observation) string {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sideEffects counts, per action id, the lines of the sandbox's counter
// files (fx-*): each run or exec of the load appends its id once.
func sideEffects(t *testing.T, c *client.Client, id string) map[string]int {
	t.Helper()
	o := mustRun(t, c, id, api.Exec("sh", "-c", "cat fx-* 2>/dev/null; true"))
	if o.Truncated {
		t.Fatalf("%s: the counter files are too long to read", id)
	}
	n := map[string]int{}
	for _, line := range strings.Fields(o.Stdout) {
		n[line]++
	}
	return n
}

// loadAction is the n-th action of load worker w: a run and an exec that
// each leave their id in the worker's counter file, then a file write and
// a read of what it wrote. want checks an answer.
func loadAction(w, n int) (a *api.Action, want func(*api.Observation) bool) {
	aid := fmt.Sprintf("w%d-%d-%s", w, n, randomHex(3))
	fx := fmt.Sprintf("fx-%d", w)
	file := fmt.Sprintf("f-%d-%d.txt", w, n/4)
	switch n % 4 {
	case 0:
		a = &api.Action{Kind: api.KindRun, Session: fmt.Sprintf("s%d", w), TimeoutS: api.Seconds(60),
			Command: fmt.Sprintf("echo %s >> %s; sleep 0.1; echo %s", aid, fx, aid)}
		want = func(o *api.Observation) bool { return exitCode(o) == "0" && o.Output == aid+"\n" }
	case 1:
		a = api.Exec("sh", "-c", fmt.Sprintf("echo %s >> %s; echo %s", aid, fx, aid))
		want = func(o *api.Observation) bool { return exitCode(o) == "0" && o.Stdout == aid+"\n" }
	case 2:
		content := "content of " + file + "\n"
		a = &api.Action{Kind: api.KindFileWrite, Path: file, Content: &content}
		want = func(o *api.Observation) bool { return o.Bytes == int64(len(content)) }
	default:
		a = &api.Action{Kind: api.KindFileRead, Path: file}
		want = func(o *api.Observation) bool { return o.Content == "content of "+file+"\n" }
	}
	a.ID = aid
	return a, want
}

// TestKill9UnderLoad kills the daemon with -9 while clients run a mix of
// actions on several sandboxes, restarts it, and checks that nothing
// answered was lost, that retried actions run at most once, and that the
// sandboxes are re-adopted (process sandboxes: files kept, processes
// stopped; containerd sandboxes: with their state).
func TestKill9UnderLoad(t *testing.T) {
	for _, backend := range []string{api.BackendProcess, api.BackendContainerd} {
		t.Run(backend, func(t *testing.T) { testKill9UnderLoad(t, backend) })
	}
}

func testKill9UnderLoad(t *testing.T, backend string) {
	const sandboxes, workers = 3, 6
	d := startDaemon(t)
	c := d.unixClient()
	if backend == api.BackendContainerd {
		requireContainerd(t, c)
	}
	leaks := newLeakCheck(t, d)
	var ids []string
	for range sandboxes {
		sb, err := c.CreateSandbox(ctxT(t, 60*time.Second), api.CreateSandboxRequest{Backend: backend})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		// Containers outlive their daemon: whatever happens, delete.
		t.Cleanup(func() {
			c := d.unixClient()
			defer c.Close()
			_ = c.DeleteSandbox(context.Background(), sb.ID)
		})
	}
	// A process left running in each sandbox: a process sandbox's must
	// be stopped by the next daemon, a container's must live on.
	marker := "sbxk9" + randomHex(4)
	for _, id := range ids {
		run(t, c, id, fmt.Sprintf("(setsid bash -c 'exec -a %s sleep 300' > /dev/null 2>&1 &) ; sleep 0.1", marker))
	}
	eventually(t, 10*time.Second, "the background processes", func() bool { return len(processesOf(marker)) == sandboxes })

	var (
		mu         sync.Mutex
		answers    []answer
		unanswered = map[string]*api.Action{} // by action id
		sandboxOf  = map[string]string{}      // action id -> sandbox
		answeredN  atomic.Int64
		wg         sync.WaitGroup
	)
	for w := range workers {
		sb := ids[w%sandboxes]
		wc := d.unixClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wc.Close()
			for n := 0; ; n++ {
				a, want := loadAction(w, n)
				mu.Lock()
				sandboxOf[a.ID] = sb
				mu.Unlock()
				o, err := wc.Act(context.Background(), sb, a)
				var cerr *client.Error
				switch {
				case err == nil:
					if !want(o) {
						t.Errorf("%s %s: unexpected answer %+v", a.Kind, a.ID, o)
					}
					mu.Lock()
					answers = append(answers, answer{sb, a.ID, o})
					mu.Unlock()
					answeredN.Add(1)
				case errors.As(err, &cerr):
					// The daemon answered, and not with an observation:
					// nothing under this load may be refused.
					t.Errorf("%s %s: %v", a.Kind, a.ID, err)
					return
				default:
					// The daemon is gone: this action has no answer.
					mu.Lock()
					unanswered[a.ID] = a
					mu.Unlock()
					return
				}
			}
		}()
	}
	eventually(t, 60*time.Second, "some load to be answered", func() bool { return answeredN.Load() >= 40 })
	d.kill9()
	wg.Wait()
	c.Close()
	t.Logf("%d actions answered before the kill, %d without an answer", len(answers), len(unanswered))
	if t.Failed() {
		return
	}
	d.restart()
	c = d.unixClient()
	defer c.Close()

	// The sandboxes are back: re-adopted, or cleanly marked lost with
	// their workspace kept.
	sbs, err := c.ListSandboxes(ctxT(t, 10*time.Second))
	if err != nil || len(sbs) != sandboxes {
		t.Fatalf("after the restart: %+v %v", sbs, err)
	}
	for _, sb := range sbs {
		switch {
		case sb.State == api.StateRunning:
		case sb.State == api.StateLost && backend == api.BackendProcess && sb.Reason != "":
			if _, err := os.Stat(sb.Workdir); err != nil {
				t.Errorf("%s is lost (%s) and its workspace is gone: %v", sb.ID, sb.Reason, err)
			}
		default:
			t.Errorf("after the restart: %+v", sb)
		}
	}
	if backend == api.BackendProcess {
		eventually(t, 20*time.Second, "the previous daemon's sandbox processes to be stopped", func() bool { return len(processesOf(marker)) == 0 })
	} else if n := len(processesOf(marker)); n != sandboxes {
		t.Errorf("%d of the %d containers' background processes survived the restart", n, sandboxes)
	}

	// Each action that got no answer, retried with its id: answered from
	// the log if it was recorded (an action in flight at the kill is
	// "lost", or resumed in a shell that outlived the daemon), run now
	// if it was not.
	outcomes := map[string]int{}
	for aid, a := range unanswered {
		sb := sandboxOf[aid]
		var o *api.Observation
		eventually(t, 60*time.Second, "an answer to the retry of "+aid, func() bool {
			var err error
			o, err = c.Act(ctxT(t, 60*time.Second), sb, a)
			if errors.Is(err, client.ErrConflict) {
				// Resumed after the restart, still running.
				return false
			}
			if err != nil {
				t.Fatalf("retry of %s: %v", aid, err)
			}
			return true
		})
		switch {
		case o.Lost:
			outcomes["lost"]++
		case strings.Contains(o.Note, "re-attached"):
			outcomes["resumed"]++
		default:
			outcomes["run now"]++
		}
		answers = append(answers, answer{sb, aid, o})
		// Retried again, it is answered the same from the log.
		again := mustRun(t, c, sb, a)
		if obsJSON(t, again) != obsJSON(t, o) {
			t.Errorf("two retries of %s answered differently:\n  %s\n  %s", aid, obsJSON(t, o), obsJSON(t, again))
		}
	}

	t.Logf("retries of the actions without an answer: %v", outcomes)

	// Nothing answered is lost, every action is settled, and none ran
	// twice.
	for _, id := range ids {
		l := readLog(t, c, id)
		l.settled(t, id)
		fx := sideEffects(t, c, id)
		for _, a := range answers {
			if a.sandbox != id {
				continue
			}
			l.has(t, a)
			act := l.actions[a.obs.Cause]
			if act == nil || act.Kind != api.KindRun && act.Kind != api.KindExec {
				continue
			}
			switch n := fx[a.id]; {
			case n > 1:
				t.Errorf("%s: action %s ran %d times", id, a.id, n)
			case n == 0 && !a.obs.Lost:
				t.Errorf("%s: action %s was answered %+v but did not run", id, a.id, a.obs)
			}
		}
		// A lost action ran once or not at all; those the workers never
		// got to send ran not at all.
		for aid, n := range fx {
			if n > 1 {
				t.Errorf("%s: action %s ran %d times", id, aid, n)
			}
		}
	}

	// The sandboxes work, in the sessions the load used too.
	for w := range workers {
		a, want := loadAction(w, 0)
		if o := mustRun(t, c, ids[w%sandboxes], a); !want(o) {
			t.Errorf("after the restart: %+v", o)
		}
	}
	deleteAll(t, c, ids)
	leaks.check()
}

// TestContainerdRestartUnderLoad stops containerd and starts it again
// while clients keep acting on containerd sandboxes and a process
// sandbox. Meanwhile every answer is an observation or a structured 503
// unavailable; the process sandbox answers throughout; once containerd is
// back, every containerd sandbox works again within a bounded wait.
func TestContainerdRestartUnderLoad(t *testing.T) {
	cd := startContainerd(t)
	d := startDaemon(t, "--set", "containerd.socket="+cd.sock)
	c := d.unixClient()
	defer c.Close()
	requireContainerd(t, c)
	leaks := newLeakCheck(t, d)
	var ids []string
	for range 3 {
		ids = append(ids, newContainerd(t, d, api.CreateSandboxRequest{}))
	}
	procID := newSandbox(t, c)
	ids = append(ids, procID)

	// Phases: containerd up, down, back but not yet answering for every
	// sandbox, and answering for every sandbox.
	const (
		up = iota
		down
		returning
		back
	)
	type tally struct{ obs, unavailable int }
	var (
		phase   atomic.Int32
		mu      sync.Mutex
		counts  = map[string]*[4]tally{}
		answers []answer
		refusal string // the first 503's message
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w, id := range ids {
		counts[id] = &[4]tally{}
		wc := d.unixClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wc.Close()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				a, want := loadAction(w, n)
				p := phase.Load()
				o, err := wc.Act(ctxT(t, 2*time.Minute), id, a)
				var cerr *client.Error
				switch {
				case err == nil:
					if !want(o) {
						t.Errorf("%s %s %s: unexpected answer %+v", id, a.Kind, a.ID, o)
					}
					mu.Lock()
					counts[id][p].obs++
					answers = append(answers, answer{id, a.ID, o})
					mu.Unlock()
				case errors.As(err, &cerr) && cerr.Code == api.CodeUnavailable && cerr.Status == 503 && cerr.Message != "" && id != procID && p != back:
					mu.Lock()
					counts[id][p].unavailable++
					if refusal == "" {
						refusal = cerr.Message
					}
					mu.Unlock()
				default:
					t.Errorf("%s %s %s while containerd was %v: %v", id, a.Kind, a.ID, []string{"up", "down", "returning", "back"}[p], err)
				}
			}
		}()
	}
	seen := func(id string, p int, atLeast int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return counts[id][p].obs+counts[id][p].unavailable >= atLeast
		}
	}
	for _, id := range ids {
		eventually(t, 60*time.Second, "answers while containerd is up", seen(id, up, 4))
	}
	cd.stop(t)
	phase.Store(down)
	// The outage lasts until every sandbox has been answered a few times
	// during it.
	for _, id := range ids {
		eventually(t, 60*time.Second, "answers while containerd is down", seen(id, down, 4))
	}
	cd.start(t)
	phase.Store(returning)
	for _, id := range ids[:3] {
		eventually(t, 60*time.Second, "sandbox "+id+" to work again", func() bool {
			o, err := c.Act(ctxT(t, 30*time.Second), id, api.Exec("echo", "back"))
			return err == nil && o.Stdout == "back\n"
		})
	}
	phase.Store(back)
	for _, id := range ids {
		eventually(t, 60*time.Second, "answers once containerd is back", seen(id, back, 4))
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, id := range ids {
		t.Logf("%s: %+v", id, *counts[id])
	}
	t.Logf("refused with: %s", refusal)
	mu.Unlock()
	if got := counts[procID][down].obs; got == 0 {
		t.Errorf("the process sandbox answered nothing while containerd was down")
	}
	if err := c.Health(ctxT(t, 10*time.Second)); err != nil || !d.running() {
		t.Fatalf("the daemon after containerd's restart: %v", err)
	}

	// Nothing answered is lost.
	for _, id := range ids {
		l := readLog(t, c, id)
		l.settled(t, id)
		for _, a := range answers {
			if a.sandbox == id {
				l.has(t, a)
			}
		}
	}
	for _, id := range ids {
		if err := c.DeleteSandbox(ctxT(t, 60*time.Second), id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	for _, what := range [][]string{{"containers", "ls", "-q"}, {"tasks", "ls", "-q"}} {
		out, err := exec.Command("ctr", append([]string{"--address", cd.sock, "-n", e2eNamespace}, what...)...).Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("ctr %s in the private containerd: %q %v", what[0], out, err)
		}
	}
	c.CloseIdle()
	leaks.check()
}

// fillUp writes zeros to path until its file system is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
	// What the last page cache of partial writes left: nothing more
	// fits, not even a byte.
	for _, n := range []int{4096, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

// wantFull checks that err is the daemon's structured answer to a full
// disk: 503 unavailable when the state directory cannot take the daemon's
// own records, or 429 resource_exhausted when a sandbox's workspace (in
// the state directory for process sandboxes) cannot take a file.
func wantFull(t *testing.T, what string, err error) {
	t.Helper()
	var cerr *client.Error
	if !errors.As(err, &cerr) {
		t.Errorf("%s with the disk full: %v, want a structured error", what, err)
		return
	}
	switch {
	case cerr.Code == api.CodeUnavailable && cerr.Status == 503 && strings.Contains(cerr.Message, "the state directory is full") && strings.Contains(cerr.Message, "no space left on device"):
	case cerr.Code == api.CodeResourceExhausted && cerr.Status == 429 && strings.Contains(cerr.Message, "no space left"):
	default:
		t.Errorf("%s with the disk full: %d %s %q, want 503 unavailable saying the state directory is full (or 429 resource_exhausted for a file)", what, cerr.Status, cerr.Code, cerr.Message)
	}
}

// TestStateDirFull fills the daemon's state directory, from outside and
// from inside a process sandbox (its workspace is in it): new sandboxes
// and actions are refused with a clear error, the daemon keeps serving
// (health, list, events, delete), an action whose result the log could
// not take is answered once it can, everything works again once space is
// freed, and after a kill -9 and a restart the event logs open whole with
// every answered observation.
func TestStateDirFull(t *testing.T) {
	mnt, err := os.MkdirTemp("", "sbd-full-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m,mode=0711", "tmpfs", mnt).CombinedOutput(); err != nil {
		os.Remove(mnt)
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	// Registered before the daemon starts, so it runs after it stopped.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			return
		}
		os.Remove(mnt)
	})
	d := startDaemonAt(t, filepath.Join(mnt, "state"))
	c := d.unixClient()
	defer c.Close()
	leaks := newLeakCheck(t, d)

	var answers []answer
	act := func(id string, a *api.Action) (*api.Observation, error) {
		t.Helper()
		if a.ID == "" {
			a.ID = "full-" + randomHex(6)
		}
		o, err := c.Act(ctxT(t, 2*time.Minute), id, a)
		if err == nil {
			answers = append(answers, answer{id, a.ID, o})
		}
		return o, err
	}
	filler, other, victim := newSandbox(t, c), newSandbox(t, c), newSandbox(t, c)
	for _, id := range []string{filler, other, victim} {
		if o, err := act(id, api.Run("echo before")); err != nil || o.Output != "before\n" {
			t.Fatalf("before: %+v %v", o, err)
		}
	}
	fillerSB, err := c.GetSandbox(ctxT(t, 10*time.Second), filler)
	if err != nil {
		t.Fatal(err)
	}

	// While full, the daemon refuses new work clearly and serves the
	// rest. An action may still be answered when its records fit in what
	// the log file has left of its last page.
	whileFull := func(how string, sandboxes int) {
		t.Helper()
		_, err := c.CreateSandbox(ctxT(t, 60*time.Second), api.CreateSandboxRequest{})
		wantFull(t, how+": create", err)
		content := "during"
		for _, a := range []*api.Action{api.Run("echo during"), api.Exec("echo", "during"), {Kind: api.KindFileWrite, Path: "during.txt", Content: &content}} {
			if _, err := act(other, a); err != nil {
				wantFull(t, how+": "+a.Kind, err)
			}
		}
		if err := c.Health(ctxT(t, 10*time.Second)); err != nil {
			t.Errorf("%s: health: %v", how, err)
		}
		if sbs, err := c.ListSandboxes(ctxT(t, 10*time.Second)); err != nil || len(sbs) != sandboxes {
			t.Errorf("%s: list: %d sandboxes, %v", how, len(sbs), err)
		}
		readLog(t, c, other)
	}

	// Full from outside.
	fill := filepath.Join(mnt, "fill")
	fillUp(t, fill)
	whileFull("filled from outside", 3)
	if err := c.DeleteSandbox(ctxT(t, 60*time.Second), victim); err != nil {
		t.Errorf("delete while full: %v", err)
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if o, err := act(other, api.Run("echo freed")); err != nil || o.Output != "freed\n" {
		t.Fatalf("once space is freed: %+v %v", o, err)
	}

	// Full from inside a sandbox, by an action whose own result (8000
	// bytes of output) the log cannot take any more: it is answered 503,
	// and once space is freed its retry gets the observation; it ran
	// once.
	big := &api.Action{Kind: api.KindExec, TimeoutS: api.Seconds(120), ID: "fill-" + randomHex(4),
		Argv: []string{"sh", "-c", "echo ran >> count; head -c 100M /dev/zero > big; head -c 8000 /dev/zero | tr '\\0' x"}}
	_, err = act(filler, big)
	wantFull(t, "the action that fills it", err)
	if !strings.Contains(fmt.Sprint(err), "its result could not be recorded") {
		t.Errorf("the action that fills it: %v, want its result not recorded", err)
	}
	_, err = c.Act(ctxT(t, 60*time.Second), filler, big)
	wantFull(t, "a retry while full", err)
	whileFull("filled from inside", 2)
	// The operator frees the space.
	if err := os.Remove(filepath.Join(fillerSB.Workdir, "big")); err != nil {
		t.Fatal(err)
	}
	o, err := act(filler, big)
	if err != nil || o.Stdout != strings.Repeat("x", 8000) || exitCode(o) != "0" {
		t.Fatalf("the retry once space is freed: %+v %v", o, err)
	}
	if o := mustRun(t, c, filler, api.Exec("cat", "count")); o.Stdout != "ran\n" {
		t.Errorf("the action that filled the disk ran %q times", o.Stdout)
	}

	// Everything works again.
	sb, err := c.CreateSandbox(ctxT(t, 60*time.Second), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create once space is freed: %v", err)
	}
	ids := []string{filler, other, sb.ID}
	for _, id := range ids {
		if o, err := act(id, api.Run("echo again")); err != nil || o.Output != "again\n" {
			t.Errorf("once space is freed: %+v %v", o, err)
		}
	}

	// After a kill -9 and a restart the logs open whole, with every
	// answered observation.
	c.Close()
	d.kill9()
	d.restart()
	c = d.unixClient()
	for _, id := range ids {
		l := readLog(t, c, id)
		l.settled(t, id)
		for _, a := range answers {
			if a.sandbox == id {
				l.has(t, a)
			}
		}
		if o := run(t, c, id, "echo restarted"); o.Output != "restarted\n" {
			t.Errorf("after the restart: %+v", o)
		}
	}
	deleteAll(t, c, ids)
	leaks.check()
}

// bystander keeps a second sandbox busy with a client of its own until
// stop is closed: every answer must be right, whatever else happens.
func bystander(t *testing.T, d *daemon, id string, stop <-chan struct{}) (done func() int) {
	t.Helper()
	bc := d.unixClient()
	var n atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer bc.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			want := fmt.Sprintf("bystander %d\n", i)
			o, err := bc.Act(ctxT(t, 60*time.Second), id, api.Run("echo bystander "+fmt.Sprint(i)))
			if err != nil || o.Output != want {
				t.Errorf("the other sandbox: %+v %v", o, err)
				return
			}
			n.Add(1)
		}
	}()
	return func() int { <-finished; return int(n.Load()) }
}

// resultOf waits for the result of the action with client id aid in a
// sandbox's log.
func resultOf(t *testing.T, c *client.Client, id, aid string, within time.Duration) api.Event {
	t.Helper()
	var res api.Event
	eventually(t, within, "the result of "+aid+" in the log", func() bool {
		l := readLog(t, c, id)
		seq, ok := l.byID[aid]
		if ok {
			res, ok = l.results[seq]
		}
		return ok
	})
	return res
}

// TestClientDisconnectMidStream: a client that drops its connection in
// the middle of a streamed action, or of following the events, loses
// nothing: the action completes and its observation, with the whole
// output, is in the log; the daemon's goroutines and fds come back to
// their baseline; another client works throughout.
func TestClientDisconnectMidStream(t *testing.T) {
	d := startDaemon(t)
	c := d.unixClient()
	defer c.Close()
	leaks := newLeakCheck(t, d)
	id, other := newSandbox(t, c), newSandbox(t, c)
	stop := make(chan struct{})
	bystanderDone := bystander(t, d, other, stop)

	// A follower drops its connection mid-follow.
	fc := d.unixClient()
	fctx, fcancel := context.WithCancel(context.Background())
	got := make(chan api.Event, 100)
	followed := make(chan error, 1)
	go func() {
		followed <- fc.Events(fctx, id, 0, true, func(ev api.Event) error { got <- ev; return nil })
	}()
	run(t, c, id, "echo followed")
	for range 2 {
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the follower got nothing")
		}
	}
	fcancel()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Errorf("the dropped follow ended with %v", err)
	}
	fc.Close()

	// A streamed action is dropped halfway through its output.
	const lines = 30
	a := &api.Action{Kind: api.KindRun, ID: "stream-" + randomHex(4), TimeoutS: api.Seconds(120),
		Command: fmt.Sprintf("for i in $(seq 1 %d); do echo line$i; sleep 0.1; done", lines)}
	sc := d.unixClient()
	sctx, scancel := context.WithCancel(context.Background())
	var seen strings.Builder
	_, err := sc.ActStream(sctx, id, a, func(o client.Output) {
		seen.Write(o.Data)
		if strings.Count(seen.String(), "line") >= lines/3 {
			scancel()
		}
	})
	if err == nil {
		t.Fatal("the stream answered although its client went away")
	}
	scancel()
	sc.Close()
	if n := strings.Count(seen.String(), "line"); n >= lines {
		t.Fatalf("the client saw all %d lines before it dropped: the command was too quick for the test", n)
	}

	// The action completes; the log has its observation with the whole
	// output.
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	res := resultOf(t, c, id, a.ID, 60*time.Second)
	if res.Observation == nil || res.Observation.Output != want.String() || exitCode(res.Observation) != "0" {
		t.Fatalf("the dropped action's result: %+v", res)
	}
	var full strings.Builder
	if _, err := c.Output(ctxT(t, 10*time.Second), id, res.Cause, "", &full); err != nil || strings.Count(full.String(), "line") != lines {
		t.Errorf("its recorded output: %q %v", full.String(), err)
	}
	if o := mustRun(t, c, id, a); obsJSON(t, o) != obsJSON(t, res.Observation) {
		t.Errorf("its retry: %+v, want %+v", o, res.Observation)
	}

	close(stop)
	t.Logf("the other sandbox answered %d actions meanwhile", bystanderDone())
	for _, sb := range []string{id, other} {
		if err := c.DeleteSandbox(ctxT(t, 60*time.Second), sb); err != nil {
			t.Errorf("delete %s: %v", sb, err)
		}
	}
	c.CloseIdle()
	leaks.check()
}

// rawRequestConn sends a request on a connection of its own (TCP, with a
// small receive buffer) and returns the connection, the answer unread.
func rawRequestConn(t *testing.T, d *daemon, method, path string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", d.tcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: sandboxd\r\nAuthorization: Bearer %s\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, d.token, len(body))
	if _, err := conn.Write(append([]byte(head), body...)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowReader: a client that reads a streamed action's answer at a byte
// a second, then not at all, does not hold the command up: it finishes
// and its observation is in the log; the daemon's memory does not grow
// with the output it cannot send; other clients and sandboxes work
// meanwhile, and so does an events follower that never reads. Once the
// connections close, the daemon's goroutines and fds are back to their
// baseline.
func TestSlowReader(t *testing.T) {
	// Observations keep 64 KiB of stdout: what the test weighs is the
	// stream, not the copies of a large observation.
	d := startDaemon(t, "--set", "exec.max_stream_bytes=65536")
	c := d.unixClient()
	defer c.Close()
	leaks := newLeakCheck(t, d)
	// The slow reader's action prints 200 MB: far more than what the
	// daemon may hold for a stream (a bounded queue) plus its fixed costs
	// (buffers, several times more under -race). The log keeps 8 MiB.
	const size, kept = 200 << 20, 8 << 20
	sb, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{Limits: &api.Limits{OutputBytes: kept}})
	if err != nil {
		t.Fatal(err)
	}
	id, other := sb.ID, newSandbox(t, c)
	rss := func() int64 {
		m, err := c.Metrics(ctxT(t, 10*time.Second))
		if err != nil || m["sandboxd_resident_bytes"] == 0 {
			t.Errorf("metrics: %v %v", m, err)
		}
		return int64(m["sandboxd_resident_bytes"])
	}
	before := rss()

	// A follower of the sandbox's events that never reads.
	follower := rawRequestConn(t, d, "GET", "/v1/sandboxes/"+id+"/events?after=0&follow=1", nil)

	a := &api.Action{Kind: api.KindExec, ID: "slow-" + randomHex(4), TimeoutS: api.Seconds(120),
		Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo; echo done", size)}}
	body, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	slow := rawRequestConn(t, d, "POST", "/v1/sandboxes/"+id+"/actions", body)
	stop := make(chan struct{})
	bystanderDone := bystander(t, d, other, stop)
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for range 10 {
			// A byte a second for ten seconds, then nothing, the
			// connection still open; the daemon's memory meanwhile.
			_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [1]byte
			_, _ = slow.Read(b[:])
			for range 4 {
				if r := rss(); r > peak.Load() {
					peak.Store(r)
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
	}()

	// The command is not held up by the unread stream.
	res := resultOf(t, c, id, a.ID, 90*time.Second)
	o := res.Observation
	if o == nil || exitCode(o) != "0" || !o.Truncated || !strings.HasSuffix(o.Stdout, "x\ndone\n") {
		t.Fatalf("the slow reader's action: %+v", res)
	}
	var n countingWriter
	if _, err := c.Output(ctxT(t, 60*time.Second), id, res.Cause, api.StreamStdout, &n); err != nil || n != kept {
		t.Errorf("its recorded output: %d bytes %v, want the first %d", n, err, kept)
	}
	// More events for the follower that does not read them (64 KiB of
	// output each): the sandbox's log and actions do not wait for it.
	for i := range 8 {
		o := mustRun(t, c, id, api.Exec("sh", "-c", fmt.Sprintf("head -c 1000000 /dev/zero | tr '\\0' y; echo %d", i)))
		if !strings.HasSuffix(o.Stdout, fmt.Sprintf("y%d\n", i)) {
			t.Errorf("an action while the follower does not read: %+v", o)
		}
	}
	// Other clients, and new sandboxes, work meanwhile.
	if o := run(t, c, newSandbox(t, c), "echo new"); o.Output != "new\n" {
		t.Errorf("a new sandbox: %+v", o)
	}
	<-sampled
	growth := peak.Load() - before
	t.Logf("daemon RSS %.1f MB before, peak %.1f MB: growth %.1f MB for %d MB of output", float64(before)/(1<<20), float64(peak.Load())/(1<<20), float64(growth)/(1<<20), size>>20)
	if growth > size/2 {
		t.Errorf("the daemon's memory grew by %d bytes while a client read %d bytes of output slowly", growth, size)
	}
	close(stop)
	t.Logf("the other sandbox answered %d actions meanwhile", bystanderDone())

	// The slow connection, closed at last, and the follower.
	slow.Close()
	follower.Close()
	sbs, err := c.ListSandboxes(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if err := c.DeleteSandbox(ctxT(t, 60*time.Second), sb.ID); err != nil {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	}
	c.CloseIdle()
	leaks.check()
}

// countingWriter counts what is written to it.
type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
