package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// events returns the raw events of a sandbox.
func allEvents(t *testing.T, c *client.Client, id string) []api.Event {
	t.Helper()
	var evs []api.Event
	if err := c.Events(ctxT(t, 30*time.Second), id, 0, false, func(ev api.Event) error {
		evs = append(evs, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

func eventJSON(t *testing.T, evs []api.Event) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func TestIdempotentRetry(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	a := api.Run("echo ran >> count; wc -l < count")
	a.ID = "step-1"
	first := mustRun(t, c, id, a)
	again := mustRun(t, c, id, a)
	if first.Cause != again.Cause || first.Output != again.Output || first.Output != "1\n" {
		t.Fatalf("retry: %+v vs %+v", first, again)
	}
	// The same id for something else is refused.
	other := api.Run("echo other")
	other.ID = "step-1"
	if _, err := c.Act(ctxT(t, 10*time.Second), id, other); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("reused id: %v", err)
	}
	// A retry that arrives while the first is still running waits for it
	// and gets the same answer; the command runs once.
	slow := api.Run("sleep 1; echo ran >> count; wc -l < count")
	slow.ID = "step-2"
	var wg sync.WaitGroup
	results := make([]*api.Observation, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			o, err := c.Act(ctxT(t, 30*time.Second), id, slow)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = o
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r == nil || r.Output != "2\n" || r.Cause != results[0].Cause {
			t.Fatalf("concurrent retries: %+v", results)
		}
	}
	// A refused action's retry is refused the same way, from the log.
	busy := api.Run("sleep 3")
	busy.TimeoutS = api.Seconds(0.1)
	mustRun(t, c, id, busy)
	refused := api.Run("echo ran >> count")
	refused.ID = "step-3"
	_, err1 := c.Act(ctxT(t, 10*time.Second), id, refused)
	mustRun(t, c, id, &api.Action{Kind: api.KindInterrupt})
	_, err2 := c.Act(ctxT(t, 10*time.Second), id, refused)
	if !errors.Is(err1, client.ErrConflict) || !errors.Is(err2, client.ErrConflict) {
		t.Fatalf("refused then retried: %v / %v", err1, err2)
	}
	wantRun(t, run(t, c, id, "wc -l < count"), 0, "2\n")
}

func TestEventsReplayAfterRestart(t *testing.T) {
	for _, hard := range []bool{false, true} {
		name := "graceful"
		if hard {
			name = "kill -9"
		}
		t.Run(name, func(t *testing.T) {
			d := startDaemon(t)
			c := d.unixClient()
			id := newSandbox(t, c)
			run(t, c, id, "cd /tmp && export X=1")
			mustRun(t, c, id, api.Exec("sh", "-c", "echo out; echo err >&2"))
			a := api.Run("echo kept")
			a.ID = "before-restart"
			mustRun(t, c, id, a)
			before := eventJSON(t, allEvents(t, c, id))
			if len(before) != 6 {
				t.Fatalf("%d events before restart", len(before))
			}
			c.Close()
			if hard {
				d.kill9()
			} else {
				d.stop()
			}
			d.restart()
			c = d.client()

			sbs, err := c.ListSandboxes(ctxT(t, 10*time.Second))
			if err != nil || len(sbs) != 1 || sbs[0].ID != id || sbs[0].State != api.StateRunning {
				t.Fatalf("after restart: %+v %v", sbs, err)
			}
			after := eventJSON(t, allEvents(t, c, id))
			if strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("log changed across the restart:\nbefore %v\nafter  %v", before, after)
			}
			// The retried action is answered from the log, not run again.
			o := mustRun(t, c, id, a)
			if o.Cause != 5 || o.Output != "kept\n" {
				t.Fatalf("retry after restart: %+v", o)
			}
			// The shell is new, and says so once.
			o = run(t, c, id, "echo ${X:-unset}")
			if o.Output != "unset\n" || !strings.Contains(o.Note, "restarted") {
				t.Fatalf("first command after restart: %q note %q", o.Output, o.Note)
			}
			if o := run(t, c, id, "true"); o.Note != "" {
				t.Fatalf("second command still has a note: %q", o.Note)
			}
			// Seqs go on where they stopped.
			if o.Cause != int64(len(before))+1 {
				t.Fatalf("seq after restart: cause %d", o.Cause)
			}
		})
	}
}

func TestActionInFlightDuringCrashRunsAtMostOnce(t *testing.T) {
	d := startDaemon(t)
	c := d.unixClient()
	id := newSandbox(t, c)
	a := api.Run("echo ran >> count; sleep 30")
	a.ID = "in-flight"
	a.TimeoutS = api.Seconds(60)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Act(context.Background(), id, a)
		errc <- err
	}()
	eventually(t, 10*time.Second, "the action to start", func() bool {
		o := mustRun(t, c, id, api.Exec("cat", "count"))
		return o.Stdout == "ran\n"
	})
	d.kill9()
	if err := <-errc; err == nil {
		t.Fatal("the action answered although the daemon was killed")
	}
	c.Close()
	d.restart()
	c = d.client()
	o := mustRun(t, c, id, a)
	if !o.Lost || o.Kind != api.KindRun || o.Note == "" {
		t.Fatalf("retry of the in-flight action: %+v", o)
	}
	o = mustRun(t, c, id, api.Exec("cat", "count"))
	if o.Stdout != "ran\n" {
		t.Fatalf("the action ran again: count %q", o.Stdout)
	}
	// Its observation is in the log, right after it.
	evs := allEvents(t, c, id)
	var found bool
	for _, ev := range evs {
		if ev.Type == api.EventObservation && ev.Observation.Lost {
			found = true
		}
	}
	if !found {
		t.Fatal("no lost observation in the log")
	}
}

func TestFollowEventsAndGracefulShutdown(t *testing.T) {
	d := startDaemon(t)
	c := d.unixClient()
	defer c.Close()
	id := newSandbox(t, c)

	got := make(chan api.Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- c.Events(context.Background(), id, 0, true, func(ev api.Event) error {
			got <- ev
			return nil
		})
	}()
	run(t, c, id, "echo one")
	for _, want := range []string{api.EventAction, api.EventObservation} {
		select {
		case ev := <-got:
			if ev.Type != want {
				t.Fatalf("got %s, want %s", ev.Type, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event on the followed stream", want)
		}
	}
	// A command that outlives the grace period is stopped by the
	// shutdown, and its answer still comes back.
	long := api.Run("sleep 60")
	long.TimeoutS = api.Seconds(120)
	answer := make(chan *api.Observation, 1)
	go func() {
		o, err := c.Act(context.Background(), id, long)
		if err != nil {
			t.Error(err)
		}
		answer <- o
	}()
	// A streamed action is running too; and a raw follower sees the
	// stream's last line itself.
	streamed := make(chan string, 1)
	go func() {
		var out strings.Builder
		o, err := c.ActStream(context.Background(), id, &api.Action{Kind: api.KindExec, Argv: []string{"sh", "-c", "echo started; exec sleep 60"}, TimeoutS: api.Seconds(120)}, func(o client.Output) { out.Write(o.Data) })
		if err != nil || o == nil {
			streamed <- fmt.Sprintf("streamed action: %v %+v", err, o)
			return
		}
		streamed <- fmt.Sprintf("exit %s signal %q output %q", exitCode(o), o.Signal, out.String())
	}()
	lastLine := make(chan string, 1)
	go func() {
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
		}}}
		resp, err := hc.Get("http://sandboxd/v1/sandboxes/" + id + "/events?after=0&follow=1")
		if err != nil {
			lastLine <- err.Error()
			return
		}
		defer resp.Body.Close()
		var last string
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			last = sc.Text()
		}
		lastLine <- last
	}()
	eventually(t, 5*time.Second, "the long actions to be logged", func() bool { return len(got) > 1 })
	start := time.Now()
	d.stop()
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("shutdown took %v", el)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow ended with %v, want a clean end", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the followed stream did not end at shutdown")
	}
	if o := <-answer; o == nil || !o.Running {
		t.Fatalf("the action running at shutdown: %+v", o)
	}
	// The streamed exec was stopped by the shutdown, and its stream ended
	// with its observation, its output in it.
	if s := <-streamed; !strings.Contains(s, `output "started\n"`) || strings.Contains(s, "exit 0 ") {
		t.Fatalf("the streamed action at shutdown: %s", s)
	}
	var end struct{ Type, Reason string }
	if l := <-lastLine; json.Unmarshal([]byte(l), &end) != nil || end.Type != "end" || !strings.Contains(end.Reason, "shutting down") {
		t.Fatalf("the followed stream's last line %q, want an end event saying the daemon is shutting down", l)
	}
}

// agentTask is a small scripted agent: the same steps through any client.
func agentTask(t *testing.T, c *client.Client) []string {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	var transcript []string
	add := func(o *api.Observation, err error) {
		if err != nil {
			transcript = append(transcript, "error: "+string(api.CodeOf(err)))
			return
		}
		transcript = append(transcript, o.Kind+"|"+exitCode(o)+"|"+o.Output+o.Stdout+o.Stderr)
	}
	add(c.Run(ctx, sb.ID, "printf 'def f():\\n    return 1\\n' > m.py && cat m.py"))
	add(c.Exec(ctx, sb.ID, "python3", "-c", "import m; print(m.f())"))
	add(c.Run(ctx, sb.ID, "sed -i 's/return 1/return 42/' m.py && python3 -c 'import m; print(m.f())'"))
	add(c.Exec(ctx, sb.ID, "sh", "-c", "exit 9"))
	slow := api.Run("sleep 0.5; echo slow")
	slow.TimeoutS = api.Seconds(0.1)
	add(c.Act(ctx, sb.ID, slow))
	add(c.Run(ctx, sb.ID, "echo busy"))
	wait := api.Run("")
	wait.TimeoutS = api.Seconds(10)
	add(c.Act(ctx, sb.ID, wait))
	_, err = c.GetSandbox(ctx, "sb-missing00000")
	add(nil, err)
	return transcript
}

func TestLocalAndRemoteModesAgree(t *testing.T) {
	local, err := client.StartLocal(ctxT(t, 60*time.Second), client.LocalOptions{Binary: binary})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	d := startDaemon(t)
	remote := d.tcpClient(d.token)
	defer remote.Close()

	l, r := agentTask(t, local), agentTask(t, remote)
	if strings.Join(l, "\n") != strings.Join(r, "\n") {
		t.Fatalf("local and remote differ:\nlocal  %q\nremote %q", l, r)
	}
	want := []string{
		"run|0|def f():\n    return 1\n",
		"exec|0|1\n",
		"run|0|42\n",
		"exec|9|",
		"run|null|",
		"error: conflict",
		"run|0|slow\n",
		"error: not_found",
	}
	if strings.Join(l, "\n") != strings.Join(want, "\n") {
		t.Fatalf("transcript %q", l)
	}
	// Close stops the local daemon and removes its files.
	if err := local.Close(); err != nil {
		t.Fatalf("close local: %v", err)
	}
	if err := local.Health(ctxT(t, 5*time.Second)); err == nil {
		t.Fatal("the local daemon still answers after Close")
	}
}
