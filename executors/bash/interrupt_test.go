package bash

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors"
)

// An interrupt sent as soon as a command is typed, before the shell has
// read all of it, must not wedge the session: a ^C then would make the
// terminal discard the rest of the typed text, marker request included.
// Each time the command and the interrupt agree on one final status, and
// the session goes on working.
func TestInterruptBeforeTheShellReadsTheCommand(t *testing.T) {
	e := processExecutor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// Several typed lines (lineMax each) for the shell to read.
	filler := ": " + strings.Repeat("x", 4*lineMax) + "; "
	for i := range 20 {
		cmd := &api.Action{Kind: api.KindRun, Command: fmt.Sprintf("%ssleep 0.2; echo ran-%d; (exit 7)", filler, i), TimeoutS: api.Seconds(60)}
		answer := make(chan api.Observation, 1)
		go func() {
			obs, err := e.Execute(ctx, cmd, executors.Discard)
			if err != nil {
				t.Errorf("run: %v", err)
			}
			answer <- obs
		}()
		// The moment the command is typed.
		for {
			s, _ := e.existing(api.DefaultSession)
			if s != nil {
				s.mu.Lock()
				running := s.running
				s.mu.Unlock()
				if running {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
		intr, err := e.Execute(ctx, &api.Action{Kind: api.KindInterrupt, TimeoutS: api.Seconds(30)}, executors.Discard)
		if err != nil {
			t.Fatal(err)
		}
		obs := <-answer
		if obs.Running || obs.ExitCode == nil || intr.Running || intr.ExitCode == nil || *obs.ExitCode != *intr.ExitCode {
			t.Fatalf("round %d: the run answered %+v, the interrupt %+v", i, obs, intr)
		}
		obs, err = e.Execute(ctx, api.Run("echo next"), executors.Discard)
		if err != nil || obs.Output != "next\n" || obs.ExitCode == nil || *obs.ExitCode != 0 {
			t.Fatalf("round %d: the session after the race: %+v %v", i, obs, err)
		}
	}
}
