package daemon

import (
	"bufio"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/daemon/eventlog"
	"github.com/sandboxd/sandboxd/executors"
)

const (
	// liveBudget bounds the output queued for one streaming client. When it
	// is full, output waits for room only while the client keeps reading
	// (a short stall, like any pipe); once the client has taken nothing for
	// liveStall, chunks are dropped from the live stream (and counted)
	// rather than hold the workload. The event log keeps everything.
	liveBudget = 4 << 20
	liveStall  = 100 * time.Millisecond
	// streamWriteTimeout closes a streaming connection whose client has not
	// taken a write for this long.
	streamWriteTimeout = 60 * time.Second
	// heartbeatEvery keeps followed event streams provably alive, so a
	// client that went away is noticed even when nothing happens.
	heartbeatEvery = 15 * time.Second
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, 128<<10); return &b }}

type liveChunk struct {
	stream  string
	data    *[]byte
	dropped int64
}

// liveStream carries one action's output to the client streaming its
// answer, then the final line.
type liveStream struct {
	mu       sync.Mutex
	wake     chan struct{} // capacity 1: "something changed"
	room     *sync.Cond    // signalled when the writer takes the queue
	lastTake time.Time     // when the writer last took the queue
	queue    []liveChunk
	queued   int
	dropped  map[string]int64
	carry    map[string][]byte // an incomplete UTF-8 sequence per stream
	final    []byte
	done     bool
	gone     bool // the client went away: stop queueing

	startedOnce sync.Once
	started     chan struct{} // closed at the first output or the end
}

func newLiveStream() *liveStream {
	l := &liveStream{
		wake:     make(chan struct{}, 1),
		dropped:  map[string]int64{},
		carry:    map[string][]byte{},
		started:  make(chan struct{}),
		lastTake: time.Now(),
	}
	l.room = sync.NewCond(&l.mu)
	return l
}

func (l *liveStream) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.startedOnce.Do(func() { close(l.started) })
}

// push queues a copy of p. It never blocks.
func (l *liveStream) push(stream string, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone || l.done {
		return
	}
	if c := l.carry[stream]; len(c) > 0 {
		p = append(c, p...)
		l.carry[stream] = nil
	}
	p, rest := executors.SplitUTF8(p)
	if len(rest) > 0 {
		l.carry[stream] = append([]byte(nil), rest...)
	}
	if len(p) == 0 {
		return
	}
	for l.queued+len(p) > liveBudget && !l.gone && !l.done {
		if time.Since(l.lastTake) >= liveStall {
			l.dropped[stream] += int64(len(p))
			return
		}
		// The client is reading: wait for the writer to take the queue
		// (it signals on every take; a stalled client is caught by the
		// check above on the next wake, at the latest after liveStall).
		l.waitRoom()
	}
	if l.gone || l.done {
		return
	}
	l.queued += len(p)
	// Small reads (a pipe often gives a few KiB) go into the last chunk
	// while it has room: a chunk per read would pin a pooled buffer each
	// and send a line each.
	if n := len(l.queue); n > 0 {
		last := &l.queue[n-1]
		if last.stream == stream && last.data != nil && l.dropped[stream] == 0 && cap(*last.data)-len(*last.data) >= len(p) {
			*last.data = append(*last.data, p...)
			l.signal()
			return
		}
	}
	bp := chunkPool.Get().(*[]byte)
	*bp = append((*bp)[:0], p...)
	ch := liveChunk{stream: stream, data: bp}
	if d := l.dropped[stream]; d > 0 {
		ch.dropped, l.dropped[stream] = d, 0
	}
	l.queue = append(l.queue, ch)
	l.signal()
}

// waitRoom waits, with l.mu held, until the writer takes the queue or
// liveStall passes.
func (l *liveStream) waitRoom() {
	t := time.AfterFunc(liveStall, func() {
		l.mu.Lock()
		l.room.Broadcast()
		l.mu.Unlock()
	})
	l.room.Wait()
	t.Stop()
}

// finish queues the final line (an observation or an error) after any
// output still waiting.
func (l *liveStream) finish(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	for stream, c := range l.carry {
		if len(c) > 0 {
			bp := chunkPool.Get().(*[]byte)
			*bp = append((*bp)[:0], c...)
			l.queue = append(l.queue, liveChunk{stream: stream, data: bp})
		}
	}
	l.final, l.done = line, true
	l.room.Broadcast()
	l.signal()
}

// take returns what is queued, and whether the stream is over.
func (l *liveStream) take(into []liveChunk) ([]liveChunk, []byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	into = append(into[:0], l.queue...)
	clear(l.queue)
	l.queue = l.queue[:0]
	l.queued = 0
	l.lastTake = time.Now()
	l.room.Broadcast()
	if l.done {
		var tail []liveChunk
		for stream, d := range l.dropped {
			if d > 0 {
				tail = append(tail, liveChunk{stream: stream, dropped: d})
			}
		}
		into = append(into, tail...)
		clear(l.dropped)
	}
	return into, l.final, l.done
}

// abandon stops queueing after the client went away and frees the queue.
func (l *liveStream) abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = true
	l.room.Broadcast()
	for _, c := range l.queue {
		if c.data != nil {
			chunkPool.Put(c.data)
		}
	}
	l.queue = nil
	l.queued = 0
}

// writeTo is the body of a streaming answer: it runs after the handler has
// returned, so it touches only w and conn, never the request.
func (l *liveStream) writeTo(w *bufio.Writer, conn net.Conn) {
	var batch []liveChunk
	for {
		var final []byte
		var done bool
		batch, final, done = l.take(batch)
		if len(batch) > 0 || done {
			deadline(conn)
		}
		for _, c := range batch {
			if c.data != nil {
				writeOutputLine(w, c.stream, *c.data)
				chunkPool.Put(c.data)
			}
			if c.dropped > 0 {
				writeDroppedLine(w, c.stream, c.dropped)
			}
		}
		if done {
			w.Write(final)
			w.Flush()
			return
		}
		if len(batch) > 0 {
			if err := w.Flush(); err != nil {
				l.abandon()
				return
			}
		}
		<-l.wake
	}
}

func writeDroppedLine(w *bufio.Writer, stream string, n int64) {
	var b []byte
	b = append(b, `{"type":"output","stream":"`...)
	b = append(b, stream...)
	b = append(b, `","dropped":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, "}\n"...)
	w.Write(b)
}

// deadline gives the next write on conn streamWriteTimeout to complete.
func deadline(conn net.Conn) {
	if conn != nil {
		_ = conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	}
}

// actionSink is the executors.OutputSink of one action: it records output
// in the event log up to the sandbox's output cap and forwards it to the
// streaming client while the action's answer is open.
type actionSink struct {
	log   *eventlog.Log
	cause int64
	limit int64
	live  atomic.Pointer[liveStream]

	mu       sync.Mutex
	recorded int64
	capped   int64 // bytes left out of the log by the cap
	failed   error
}

func (s *actionSink) Live(stream string, p []byte) {
	if l := s.live.Load(); l != nil {
		l.push(stream, p)
	}
}

func (s *actionSink) Record(stream string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return
	}
	if room := s.limit - s.recorded; int64(len(p)) > room {
		s.capped += int64(len(p)) - max(room, 0)
		if room <= 0 {
			return
		}
		p = p[:room]
	}
	if err := s.log.AppendOutput(s.cause, stream, p); err != nil {
		s.failed = err
		return
	}
	s.recorded += int64(len(p))
}

// detach ends live forwarding; later output is only recorded.
func (s *actionSink) detach() { s.live.Store(nil) }

// note describes what the log could not keep, for the observation.
func (s *actionSink) note() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.failed != nil:
		return "output could not be recorded in the event log: " + s.failed.Error()
	case s.capped > 0:
		return "output beyond limits.output_bytes was not recorded in the event log"
	}
	return ""
}
