// Package executors defines what an action means, independent of where it
// runs: an Executor turns one action into one observation, working on a
// backends.Sandbox. Each action family lives in a package below (bash,
// exec, ...). This package holds the seam and the output plumbing they
// share.
package executors

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
)

// Executor runs actions on one sandbox. An executor may keep state between
// actions (a bash session, a kernel); it is created for one sandbox and
// closed with it.
type Executor interface {
	// Execute runs a and answers its observation. A command that ran and
	// failed is an observation, not an error; an error means the action
	// could not run at all, classified with the api.Err* sentinels (a 409
	// for a busy session, ...). Output is passed to out as it arrives.
	// When ctx ends, Execute returns promptly with what it has.
	Execute(ctx context.Context, a *api.Action, out OutputSink) (api.Observation, error)
	// Close stops everything the executor runs in the sandbox.
	Close(ctx context.Context) error
}

// OutputSink receives an action's output as it arrives. Both methods must
// be quick and never block on a slow client; they may be called after
// Execute has returned (output of a command that outlives its action).
type OutputSink interface {
	// Live forwards a chunk to the client streaming the action, if any.
	Live(stream string, p []byte)
	// Record keeps a chunk in the event log under the action, up to the
	// action's output cap.
	Record(stream string, p []byte)
}

// JoinNotes joins two observation notes with "; ", skipping empty ones.
func JoinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Discard is an OutputSink that drops everything.
var Discard OutputSink = discard{}

type discard struct{}

func (discard) Live(string, []byte)   {}
func (discard) Record(string, []byte) {}

// Capture keeps the first and the last Limit units (bytes, or characters
// when Runes is set) of a stream, and counts the rest, so an observation
// can carry a bounded head and tail of any amount of output.
type Capture struct {
	Limit int
	Runes bool
	// Hint ends the marker line between head and tail: where to find what
	// was left out. Default: the event log.
	Hint string

	head      []byte
	headUnits int
	carry     []byte // rune mode: the start of a character cut by a write
	ring      []byte // tail bytes, ring[start:] + ring[:start] in order
	start     int
	full      bool
	total     int64 // units seen
}

func (c *Capture) units(p []byte) int {
	if c.Runes {
		return utf8.RuneCount(p)
	}
	return len(p)
}

// Write adds p. It never fails.
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	if c.Runes {
		// A character cut between two writes counts once, when whole.
		if len(c.carry) > 0 {
			p = append(c.carry, p...)
			c.carry = nil
		}
		var rest []byte
		p, rest = SplitUTF8(p)
		if len(rest) > 0 {
			c.carry = append([]byte(nil), rest...)
		}
	}
	c.total += int64(c.units(p))
	if c.headUnits < c.Limit {
		take := len(p)
		if c.Runes {
			// Take whole characters until the head holds Limit of them.
			left, i := c.Limit-c.headUnits, 0
			for i < len(p) && left > 0 {
				_, size := utf8.DecodeRune(p[i:])
				i += size
				left--
			}
			take = i
		} else if take > c.Limit-c.headUnits {
			take = c.Limit - c.headUnits
		}
		c.head = append(c.head, p[:take]...)
		c.headUnits += c.units(p[:take])
		p = p[take:]
	}
	if len(p) > 0 {
		c.appendTail(p)
	}
	return n, nil
}

// tailBytes is the ring's capacity: enough bytes for Limit characters.
func (c *Capture) tailBytes() int {
	if c.Runes {
		return c.Limit * utf8.UTFMax
	}
	return c.Limit
}

func (c *Capture) appendTail(p []byte) {
	size := c.tailBytes()
	if c.ring == nil {
		c.ring = make([]byte, 0, min(size, 64<<10))
	}
	if len(p) >= size {
		c.ring = append(c.ring[:0], p[len(p)-size:]...)
		c.start, c.full = 0, true
		return
	}
	if !c.full {
		if len(c.ring)+len(p) <= size {
			c.ring = append(c.ring, p...)
			return
		}
		// Grow to the full ring, then wrap.
		grown := make([]byte, size)
		copy(grown, c.ring)
		fill := copy(grown[len(c.ring):], p)
		c.ring, c.full, c.start = grown, true, 0
		p = p[fill:]
	}
	for len(p) > 0 {
		n := copy(c.ring[c.start:], p)
		c.start = (c.start + n) % size
		p = p[n:]
	}
}

// tail returns the tail bytes in order.
func (c *Capture) tail() []byte {
	if !c.full {
		return c.ring
	}
	out := make([]byte, 0, len(c.ring))
	out = append(out, c.ring[c.start:]...)
	return append(out, c.ring[:c.start]...)
}

// Total returns how many units were written.
func (c *Capture) Total() int64 { return c.total }

// Truncated reports whether units were left out.
func (c *Capture) Truncated() bool { return c.total > int64(2*c.Limit) }

// Bytes returns the head and tail, joined by a marker line when units were
// left out between them. (In rune mode, the start of a character that has
// not been completed yet ends the tail as it is.)
func (c *Capture) Bytes() []byte {
	t := append(c.tail(), c.carry...)
	if !c.Truncated() {
		return append(append([]byte(nil), c.head...), t...)
	}
	// Keep exactly the last Limit units of the tail.
	if c.Runes {
		for n := utf8.RuneCount(t); n > c.Limit; n-- {
			_, size := utf8.DecodeRune(t)
			t = t[size:]
		}
	} else if len(t) > c.Limit {
		t = t[len(t)-c.Limit:]
	}
	unit := "bytes"
	if c.Runes {
		unit = "characters"
	}
	omitted := c.total - int64(c.headUnits) - int64(c.units(t))
	hint := c.Hint
	if hint == "" {
		hint = "the full output is in the event log"
	}
	marker := fmt.Sprintf("\n[... %d %s omitted; %s ...]\n", omitted, unit, hint)
	out := make([]byte, 0, len(c.head)+len(marker)+len(t))
	out = append(out, c.head...)
	out = append(out, marker...)
	return append(out, t...)
}

// String is Bytes as a string.
func (c *Capture) String() string { return string(c.Bytes()) }

// Reset empties the capture.
func (c *Capture) Reset() {
	c.head, c.headUnits, c.total, c.carry = c.head[:0], 0, 0, nil
	c.ring, c.start, c.full = c.ring[:0], 0, false
}

// SplitUTF8 splits p before an incomplete UTF-8 sequence at its end, so a
// character cut by a read boundary can be kept whole with the next chunk.
func SplitUTF8(p []byte) (whole, rest []byte) {
	// A sequence is at most 4 bytes: look at the last 3 for its start.
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		c := p[i]
		if c < 0x80 {
			return p, nil
		}
		if c >= 0xC0 {
			need := 2
			switch {
			case c >= 0xF0:
				need = 4
			case c >= 0xE0:
				need = 3
			}
			if len(p)-i < need {
				return p[:i], p[i:]
			}
			return p, nil
		}
	}
	return p, nil
}
