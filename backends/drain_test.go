package backends

import (
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	tests := []struct {
		name     string
		late     time.Duration // the output ends this long after the exit
		wantStop bool          // Drain had to stop the readers
	}{
		{"output already over", 0, false},
		// Nothing was read before the exit: the quiet period counts from
		// the exit, not from the epoch, so late output is still awaited.
		{"output ends late but within the idle period", DrainIdle / 2, false},
		{"a child holds the output open", time.Hour, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drained := make(chan struct{})
			stopped := make(chan struct{})
			var clock OutputClock
			exited := time.Now()
			go func() {
				select {
				case <-time.After(tc.late):
					close(drained)
				case <-stopped:
					close(drained)
				}
			}()
			var didStop bool
			Drain(drained, &clock, exited, func() { didStop = true; close(stopped) })
			if didStop != tc.wantStop {
				t.Fatalf("stop called: %v, want %v", didStop, tc.wantStop)
			}
			if tc.wantStop {
				if took := time.Since(exited); took < DrainIdle {
					t.Fatalf("stopped after %v, before the idle period %v", took, DrainIdle)
				}
			}
		})
	}
}

func TestDrainChattyChild(t *testing.T) {
	if testing.Short() {
		t.Skip("takes DrainMax")
	}
	drained := make(chan struct{})
	var clock OutputClock
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(DrainIdle / 10):
				clock.Tick()
			}
		}
	}()
	exited := time.Now()
	Drain(drained, &clock, exited, func() { close(done); close(drained) })
	if took := time.Since(exited); took < DrainMax {
		t.Fatalf("stopped a chatty child after %v, before DrainMax %v", took, DrainMax)
	}
}
