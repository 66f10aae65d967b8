// Package eventlog is the durable, append-only log of one sandbox: every
// action and every observation in order, plus the full output of each action.
//
// A log is a single file of records. Each record is framed as
//
//	[u32 payload length][u32 CRC-32C of type and payload][u8 type][payload]
//
// (little endian). Event records hold the exact JSON line that the events
// endpoint serves, so reading the log never re-encodes. Output records hold
// [u64 cause][u8 stream][bytes]. Appends are single write calls at the end of
// the file; Sync makes everything appended so far durable with one
// fdatasync shared by every caller waiting at that moment (group commit).
//
// A crash can only tear the last record. Open verifies the framing and the
// checksums, and cuts the file before the first record that is not whole, so
// after a restart a record is either whole or absent.
package eventlog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"golang.org/x/sys/unix"
)

const (
	headerSize = 9
	// MaxRecord bounds one record; an action body is at most this big (the
	// daemon's body limit is far below it), and a header claiming more is
	// treated as torn.
	MaxRecord = 256 << 20

	recEvent  byte = 'E'
	recOutput byte = 'O'

	// writebackEvery starts asynchronous writeback of output after this many
	// bytes, so the fdatasync that precedes an observation has little left
	// to flush even after a large output.
	writebackEvery = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stream codes stored in output records.
var streamCodes = map[string]byte{api.StreamStdout: 1, api.StreamStderr: 2, api.StreamPTY: 3}

// ErrClosed is returned by operations on a closed log.
var ErrClosed = errors.New("event log closed")

// Log is one sandbox's event log. It is safe for concurrent use.
type Log struct {
	path string

	mu        sync.Mutex
	f         *os.File
	size      int64 // end of the last whole record
	next      int64 // seq of the next event
	offsets   []int64
	ids       map[string]int64  // action id -> seq
	results   map[int64]int64   // action seq -> seq of its observation or error
	outputs   map[int64][]int64 // action seq -> offsets of its output records
	inflight  map[int64]bool    // actions without a result
	pending   []int64           // actions without a result when the log was opened
	changed   chan struct{}     // closed and replaced on every event append
	closed    bool
	unwritten int64 // output bytes since the last writeback was started
	wbFrom    int64 // where the bytes not yet handed to writeback begin

	syncMu sync.Mutex
	synced int64
}

// Open opens or creates the log at path, verifying it and cutting a torn
// tail. Actions that have no result in the log are reported by Pending.
func Open(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	l := &Log{
		path:     path,
		f:        f,
		next:     1,
		ids:      map[string]int64{},
		results:  map[int64]int64{},
		outputs:  map[int64][]int64{},
		inflight: map[int64]bool{},
		changed:  make(chan struct{}),
	}
	if err := l.scan(); err != nil {
		f.Close()
		return nil, fmt.Errorf("event log %s: %w", path, err)
	}
	l.synced = l.size
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	for seq := range l.inflight {
		l.pending = append(l.pending, seq)
	}
	slices.Sort(l.pending)
	return l, nil
}

// eventHead is what the log needs to know of an event to index it.
type eventHead struct {
	Seq    int64  `json:"seq"`
	Type   string `json:"type"`
	Cause  int64  `json:"cause"`
	Action *struct {
		ID string `json:"id"`
	} `json:"action"`
}

// scan reads the whole file, building the indexes and truncating at the
// first record that is not whole.
func (l *Log) scan() error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	end := st.Size()
	var off int64
	hdr := make([]byte, headerSize)
	var payload []byte
loop:
	for off < end {
		if end-off < headerSize {
			break
		}
		if _, err := l.f.ReadAt(hdr, off); err != nil {
			return err
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:4]))
		sum := binary.LittleEndian.Uint32(hdr[4:8])
		typ := hdr[8]
		if n > MaxRecord || off+headerSize+n > end || (typ != recEvent && typ != recOutput) {
			break
		}
		last := off+headerSize+n == end
		// Events are read in full to index them; output payloads are only
		// read when they end the file, the one place a crash can tear them.
		if typ == recEvent || last {
			if int64(cap(payload)) < n {
				payload = make([]byte, n)
			}
			payload = payload[:n]
			if _, err := l.f.ReadAt(payload, off+headerSize); err != nil {
				return err
			}
			if checksum(typ, payload) != sum {
				break
			}
		}
		switch typ {
		case recEvent:
			var h eventHead
			if err := json.Unmarshal(payload, &h); err != nil || h.Seq != l.next {
				// A checksummed record that does not parse or is out of
				// order was not written by us: stop trusting the file here.
				break loop
			}
			l.index(off, &h)
		case recOutput:
			if n < 9 {
				break loop
			}
			var cb [8]byte
			if _, err := l.f.ReadAt(cb[:], off+headerSize); err != nil {
				return err
			}
			cause := int64(binary.LittleEndian.Uint64(cb[:]))
			l.outputs[cause] = append(l.outputs[cause], off)
		}
		off += headerSize + n
	}
	if off < end {
		// Cut the torn tail so the next append starts on a record boundary.
		if err := l.f.Truncate(off); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			return err
		}
	}
	l.size = off
	return nil
}

func (l *Log) index(off int64, h *eventHead) {
	l.offsets = append(l.offsets, off)
	switch h.Type {
	case api.EventAction:
		if h.Action != nil && h.Action.ID != "" {
			l.ids[h.Action.ID] = h.Seq
		}
		l.inflight[h.Seq] = true
	case api.EventObservation, api.EventError:
		l.results[h.Cause] = h.Seq
		delete(l.inflight, h.Cause)
	}
	l.next = h.Seq + 1
}

func checksum(typ byte, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, []byte{typ})
	return crc32.Update(c, castagnoli, payload)
}

// Pending returns the actions that had no result when the log was opened:
// actions in flight when the previous daemon stopped.
func (l *Log) Pending() []int64 { return slices.Clone(l.pending) }

// LastSeq returns the seq of the last event, 0 if there is none.
func (l *Log) LastSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Lookup finds the action a client gave id: its seq and, once it has one,
// the seq of its result (0 while it has none).
func (l *Log) Lookup(id string) (action, result int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	action, ok = l.ids[id]
	if ok {
		result = l.results[action]
	}
	return action, result, ok
}

// Result returns the seq of the result of action seq, or 0.
func (l *Log) Result(action int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.results[action]
}

// Append assigns ev the next seq (and a time if it has none), writes it, and
// returns the seq. It does not sync: call Sync before telling anyone the
// event is durable.
func (l *Log) Append(ev *api.Event) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	ev.Seq = l.next
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	if len(payload) > MaxRecord {
		return 0, api.Errorf(api.ErrTooLarge, "event of %d bytes is larger than the log's record limit", len(payload))
	}
	off := l.size
	if err := l.write(recEvent, nil, payload); err != nil {
		return 0, err
	}
	h := eventHead{Seq: ev.Seq, Type: ev.Type, Cause: ev.Cause}
	if ev.Action != nil {
		h.Action = &struct {
			ID string `json:"id"`
		}{ev.Action.ID}
	}
	l.index(off, &h)
	close(l.changed)
	l.changed = make(chan struct{})
	return ev.Seq, nil
}

// AppendOutput records a chunk of the output of action cause. It does not
// sync.
func (l *Log) AppendOutput(cause int64, stream string, p []byte) error {
	code, ok := streamCodes[stream]
	if !ok {
		return api.Errorf(api.ErrInvalidArgument, "unknown stream %q (stdout, stderr or pty)", stream)
	}
	var prefix [9]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(cause))
	prefix[8] = code
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	off := l.size
	if err := l.write(recOutput, prefix[:], p); err != nil {
		return err
	}
	l.outputs[cause] = append(l.outputs[cause], off)
	l.unwritten += int64(headerSize + len(prefix) + len(p))
	if l.unwritten >= writebackEvery {
		// Start writeback without waiting for it (best effort: the
		// fdatasync in Sync is what guarantees durability).
		_ = unix.SyncFileRange(int(l.f.Fd()), l.wbFrom, l.size-l.wbFrom, unix.SYNC_FILE_RANGE_WRITE)
		l.unwritten, l.wbFrom = 0, l.size
	}
	return nil
}

// write appends one record made of prefix and payload with a single
// pwritev, so large outputs are never copied; l.mu is held. On failure the
// file is cut back so that no partial record stays behind.
func (l *Log) write(typ byte, prefix, payload []byte) error {
	n := len(prefix) + len(payload)
	if n > MaxRecord {
		return api.Errorf(api.ErrTooLarge, "record of %d bytes is larger than the log's limit", n)
	}
	var hdr [headerSize]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(n))
	c := crc32.Update(0, castagnoli, []byte{typ})
	c = crc32.Update(c, castagnoli, prefix)
	c = crc32.Update(c, castagnoli, payload)
	binary.LittleEndian.PutUint32(hdr[4:8], c)
	hdr[8] = typ
	iov := [][]byte{hdr[:], prefix, payload}
	want := headerSize + n
	done := 0
	for done < want {
		w, err := unix.Pwritev(int(l.f.Fd()), skip(iov, done), l.size+int64(done))
		if err != nil {
			if done > 0 {
				_ = l.f.Truncate(l.size)
			}
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				return api.Errorf(api.ErrUnavailable, "the state directory is full: %w", err)
			}
			return fmt.Errorf("append to event log: %w", err)
		}
		done += w
	}
	l.size += int64(want)
	return nil
}

// skip returns iov without its first n bytes.
func skip(iov [][]byte, n int) [][]byte {
	out := make([][]byte, 0, len(iov))
	for _, b := range iov {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		out = append(out, b[n:])
		n = 0
	}
	return out
}

// Sync makes every record appended before the call durable. Concurrent
// callers share one fdatasync.
func (l *Log) Sync() error {
	l.mu.Lock()
	target, closed := l.size, l.closed
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced >= target {
		return nil
	}
	// Close takes syncMu before it closes the file, so the descriptor is
	// still ours here; but the log may have been closed (and fully synced)
	// while this caller waited.
	l.mu.Lock()
	end, closed := l.size, l.closed
	l.mu.Unlock()
	if closed {
		if l.synced >= target {
			return nil
		}
		return ErrClosed
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return fmt.Errorf("sync event log: %w", err)
	}
	l.synced = end
	return nil
}

// Event returns the JSON of event seq.
func (l *Log) Event(seq int64) ([]byte, error) {
	l.mu.Lock()
	if seq < 1 || seq >= l.next {
		l.mu.Unlock()
		return nil, api.Errorf(api.ErrNotFound, "event %d does not exist", seq)
	}
	off := l.offsets[seq-1]
	l.mu.Unlock()
	return l.readRecord(off, recEvent)
}

func (l *Log) readRecord(off int64, want byte) ([]byte, error) {
	hdr := make([]byte, headerSize)
	if _, err := l.f.ReadAt(hdr, off); err != nil {
		return nil, closedOr(err)
	}
	n := binary.LittleEndian.Uint32(hdr[0:4])
	if n > MaxRecord {
		return nil, fmt.Errorf("event log %s: record at %d is corrupt: %w", l.path, off, errCorrupt)
	}
	payload := make([]byte, n)
	if _, err := l.f.ReadAt(payload, off+headerSize); err != nil {
		return nil, closedOr(err)
	}
	if hdr[8] != want || checksum(hdr[8], payload) != binary.LittleEndian.Uint32(hdr[4:8]) {
		return nil, fmt.Errorf("event log %s: record at %d is corrupt: %w", l.path, off, errCorrupt)
	}
	return payload, nil
}

var errCorrupt = errors.New("checksum mismatch")

// closedOr maps the error of a read on a file Close shut to ErrClosed.
func closedOr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Changed returns a channel that is closed when the next event is appended
// or the log is closed.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Each calls fn with the JSON of every event after seq after, in order,
// including events appended while it runs. It stops at the end of the log
// (or when fn fails).
func (l *Log) Each(after int64, fn func(seq int64, event []byte) error) (last int64, err error) {
	last = max(after, 0)
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return last, ErrClosed
		}
		if last+1 >= l.next {
			l.mu.Unlock()
			return last, nil
		}
		off := l.offsets[last]
		l.mu.Unlock()
		ev, err := l.readRecord(off, recEvent)
		if err != nil {
			return last, err
		}
		if err := fn(last+1, ev); err != nil {
			return last, err
		}
		last++
	}
}

// Follow is Each that keeps waiting for new events until ctx ends or the
// log is closed.
func (l *Log) Follow(ctx context.Context, after int64, fn func(seq int64, event []byte) error) error {
	for {
		ch := l.Changed()
		last, err := l.Each(after, fn)
		if err != nil {
			return err
		}
		after = last
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Output writes the recorded output of action cause on stream ("" for all
// streams, in the order they arrived) to w and returns how many bytes it
// wrote.
func (l *Log) Output(cause int64, stream string, w io.Writer) (int64, error) {
	code, ok := streamCodes[stream]
	if !ok && stream != "" {
		return 0, api.Errorf(api.ErrInvalidArgument, "unknown stream %q (stdout, stderr or pty)", stream)
	}
	l.mu.Lock()
	offs := append([]int64(nil), l.outputs[cause]...)
	l.mu.Unlock()
	var total int64
	var corrupt int
	for _, off := range offs {
		p, err := l.readRecord(off, recOutput)
		if errors.Is(err, errCorrupt) {
			// Output records are only checksummed when read (Open checks
			// the tail); one lost to a crash must not hide the rest.
			corrupt++
			continue
		}
		if err != nil {
			return total, err
		}
		if len(p) < 9 || (code != 0 && p[8] != code) || int64(binary.LittleEndian.Uint64(p)) != cause {
			continue
		}
		n, err := w.Write(p[9:])
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	if corrupt > 0 {
		return total, fmt.Errorf("event log %s: %d corrupt output records of action %d were skipped: %w", l.path, corrupt, cause, errCorrupt)
	}
	return total, nil
}

// Size returns the size of the log file in bytes.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Close syncs and closes the log. Appends after it (or racing it) fail with
// ErrClosed; followers are woken and end.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	// From here on nothing is appended, so the sync below covers all.
	l.closed = true
	close(l.changed)
	end := l.size
	l.mu.Unlock()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	var serr error
	if l.synced < end {
		if serr = unix.Fdatasync(int(l.f.Fd())); serr == nil {
			l.synced = end
		} else {
			serr = fmt.Errorf("sync event log: %w", serr)
		}
	}
	return errors.Join(serr, l.f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
