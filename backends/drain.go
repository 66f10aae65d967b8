package backends

import (
	"sync/atomic"
	"time"
)

// After a process exits, its output may still be on the way (a pipe not yet
// read, a containerd shim still copying into a FIFO), or a child it started
// may hold the output open for ever. Drain tells the two apart by silence:
// it waits until the output ends, or until nothing has arrived for
// DrainIdle since the exit or the last byte, or DrainMax after the exit for
// a child that never stops talking.
const (
	DrainIdle = 200 * time.Millisecond
	DrainMax  = 5 * time.Second
)

// OutputClock records when output last arrived. The zero value is ready.
type OutputClock struct{ last atomic.Int64 }

// Tick records that output arrived now.
func (c *OutputClock) Tick() { c.last.Store(time.Now().UnixNano()) }

// Drain waits, after a process exited at exited, until drained is closed
// or the output has gone quiet (see DrainIdle); in the latter case it calls
// stop, which must make the readers end, and then waits for drained.
func Drain(drained <-chan struct{}, clock *OutputClock, exited time.Time, stop func()) {
	tick := time.NewTicker(DrainIdle / 4)
	defer tick.Stop()
	for {
		select {
		case <-drained:
			return
		case now := <-tick.C:
			// Idle counts from the exit at the earliest: a quick process
			// may exit before a byte of its output has been read.
			last := time.Unix(0, clock.last.Load())
			if last.Before(exited) {
				last = exited
			}
			if now.Sub(last) >= DrainIdle || now.Sub(exited) >= DrainMax {
				stop()
				<-drained
				return
			}
		}
	}
}
