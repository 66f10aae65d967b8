package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// waitTimeout bounds every wait in these tests so that a hang fails the test
// instead of stalling the whole run.
const waitTimeout = 10 * time.Second

func logPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "events.log")
}

// mustOpen opens the log at path and closes it when the test ends (Close is
// idempotent, so tests may close it earlier themselves).
func mustOpen(t testing.TB, path string) *Log {
	t.Helper()
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustSync(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func mustAppend(t testing.TB, l *Log, ev *api.Event) int64 {
	t.Helper()
	seq, err := l.Append(ev)
	if err != nil {
		t.Fatalf("Append(%s event): %v", ev.Type, err)
	}
	return seq
}

func mustOutput(t testing.TB, l *Log, cause int64, stream string, p []byte) {
	t.Helper()
	if err := l.AppendOutput(cause, stream, p); err != nil {
		t.Fatalf("AppendOutput(%d, %s, %d bytes): %v", cause, stream, len(p), err)
	}
}

func actionEv(id, command string) *api.Event {
	return &api.Event{
		Type:   api.EventAction,
		Action: &api.Action{ID: id, Kind: api.KindRun, Command: command},
	}
}

func observationEv(cause int64, output string) *api.Event {
	return &api.Event{
		Type:  api.EventObservation,
		Cause: cause,
		Observation: &api.Observation{
			Kind: api.KindRun, Cause: cause, Output: output,
			ExitCode: api.ExitCode(0), Cwd: "/work", Session: api.DefaultSession,
		},
	}
}

func errorEv(cause int64, msg string) *api.Event {
	return &api.Event{
		Type:  api.EventError,
		Cause: cause,
		Error: &api.ErrorInfo{Code: api.CodeConflict, Message: msg},
	}
}

func marshal(t testing.TB, ev *api.Event) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("json.Marshal(event): %v", err)
	}
	return b
}

type record struct {
	seq  int64
	data []byte
}

// readAll returns every event after `after` via Each and checks that the
// seqs handed to fn are contiguous and that Each reports the last one.
func readAll(t testing.TB, l *Log, after int64) []record {
	t.Helper()
	var out []record
	last, err := l.Each(after, func(seq int64, ev []byte) error {
		out = append(out, record{seq, bytes.Clone(ev)})
		return nil
	})
	if err != nil {
		t.Fatalf("Each(%d): %v", after, err)
	}
	for i, r := range out {
		if want := after + int64(i) + 1; r.seq != want {
			t.Fatalf("Each(%d): record #%d has seq %d, want %d", after, i, r.seq, want)
		}
	}
	if want := after + int64(len(out)); last != want {
		t.Fatalf("Each(%d) returned last=%d after %d events, want %d", after, last, len(out), want)
	}
	return out
}

func sameRecords(t testing.TB, what string, got, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].seq != want[i].seq || !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("%s: event #%d:\n got seq %d %s\nwant seq %d %s", what, i, got[i].seq, got[i].data, want[i].seq, want[i].data)
		}
	}
}

func outputOf(t testing.TB, l *Log, cause int64, stream string) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := l.Output(cause, stream, &b)
	if err != nil {
		t.Fatalf("Output(%d, %s): %v", cause, stream, err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("Output(%d, %s) reported %d bytes but wrote %d", cause, stream, n, b.Len())
	}
	return b.Bytes()
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func eventSeq(t testing.TB, data []byte) int64 {
	t.Helper()
	var h struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatalf("event %s is not JSON: %v", data, err)
	}
	return h.Seq
}

// frame builds one record exactly as the package documentation describes
// it, independently of the package's own encoder:
// [u32 len][u32 crc32c(type+payload)][u8 type][payload], little endian.
func frame(typ byte, payload []byte) []byte {
	tab := crc32.MakeTable(crc32.Castagnoli)
	sum := crc32.Checksum(append([]byte{typ}, payload...), tab)
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, sum)
	b = append(b, typ)
	return append(b, payload...)
}

// outputPayload is the payload of an output record.
func outputPayload(cause int64, code byte, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(cause))
	b = append(b, code)
	return append(b, data...)
}

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		panic("unreachable")
	}
}

// ---------------------------------------------------------------------------
// 1. Append / Each round trip
// ---------------------------------------------------------------------------

func TestAppendEachRoundTrip(t *testing.T) {
	fixed := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600))
	content := "hello <world> & \"friends\"\n"
	tests := []struct {
		name string
		ev   *api.Event
	}{
		{"action with client id", &api.Event{Type: api.EventAction, Action: &api.Action{ID: "client-id-1", Kind: api.KindRun, Command: "echo hi", Session: "s1", TimeoutS: api.Seconds(2.5)}}},
		{"run observation", &api.Event{Type: api.EventObservation, Cause: 1, Observation: &api.Observation{Kind: api.KindRun, Cause: 1, Output: "hi\n<&>", ExitCode: api.ExitCode(0), Cwd: "/w", Session: "s1"}}},
		{"exec action without id", &api.Event{Type: api.EventAction, Action: &api.Action{Kind: api.KindExec, Argv: []string{"ls", "-l", "/"}, Env: map[string]string{"A": "1"}}}},
		{"exec observation failing", &api.Event{Type: api.EventObservation, Cause: 3, Observation: &api.Observation{Kind: api.KindExec, Cause: 3, ExitCode: api.ExitCode(2), Stderr: "ls: nope\n", DurationMS: 12}}},
		{"action refused", &api.Event{Type: api.EventAction, Action: &api.Action{ID: "busy-1", Kind: api.KindRun, Command: "sleep 1"}}},
		{"error result", &api.Event{Type: api.EventError, Cause: 5, Error: &api.ErrorInfo{Code: api.CodeConflict, Message: "session s1 is busy"}}},
		{"preset time is kept", &api.Event{Time: fixed, Type: api.EventAction, Action: &api.Action{ID: "w", Kind: api.KindFileWrite, Path: "/tmp/x", Content: &content}}},
		{"unicode and control characters", &api.Event{Type: api.EventAction, Action: &api.Action{ID: "ü-\u2028-id", Kind: api.KindRun, Command: "printf '\x00\x1b[0m\u00e9\U0001F600'"}}},
		{"lost observation with note", &api.Event{Type: api.EventObservation, Cause: 8, Observation: &api.Observation{Kind: api.KindRun, Cause: 8, Lost: true, Note: "the daemon restarted"}}},
	}

	path := logPath(t)
	l := mustOpen(t, path)
	if got := l.LastSeq(); got != 0 {
		t.Fatalf("LastSeq of an empty log = %d, want 0", got)
	}
	if got := readAll(t, l, 0); len(got) != 0 {
		t.Fatalf("Each on an empty log returned %d events", len(got))
	}

	var want []record
	for i, tc := range tests {
		preset := tc.ev.Time
		before := time.Now()
		seq, err := l.Append(tc.ev)
		after := time.Now()
		if err != nil {
			t.Fatalf("%s: Append: %v", tc.name, err)
		}
		if wantSeq := int64(i + 1); seq != wantSeq || tc.ev.Seq != wantSeq {
			t.Fatalf("%s: Append returned seq %d (event.Seq %d), want %d", tc.name, seq, tc.ev.Seq, wantSeq)
		}
		if got := l.LastSeq(); got != seq {
			t.Fatalf("%s: LastSeq = %d, want %d", tc.name, got, seq)
		}
		switch {
		case !preset.IsZero():
			if !tc.ev.Time.Equal(preset) || tc.ev.Time.Location() != preset.Location() {
				t.Fatalf("%s: Append changed a preset time %v to %v", tc.name, preset, tc.ev.Time)
			}
		case tc.ev.Time.IsZero():
			t.Fatalf("%s: Append did not set a time", tc.name)
		case tc.ev.Time.Location() != time.UTC:
			t.Fatalf("%s: Append set a non-UTC time %v", tc.name, tc.ev.Time)
		case tc.ev.Time.Before(before.Add(-time.Second)) || tc.ev.Time.After(after.Add(time.Second)):
			t.Fatalf("%s: Append set time %v, not within [%v, %v]", tc.name, tc.ev.Time, before, after)
		}
		want = append(want, record{seq, marshal(t, tc.ev)})
	}

	got := readAll(t, l, 0)
	sameRecords(t, "Each(0)", got, want)

	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dec api.Event
			if err := json.Unmarshal(got[i].data, &dec); err != nil {
				t.Fatalf("stored event is not JSON: %v\n%s", err, got[i].data)
			}
			if dec.Seq != int64(i+1) || dec.Type != tc.ev.Type || dec.Cause != tc.ev.Cause || !dec.Time.Equal(tc.ev.Time) {
				t.Fatalf("decoded head (seq %d, type %q, cause %d, time %v) != appended (seq %d, type %q, cause %d, time %v)",
					dec.Seq, dec.Type, dec.Cause, dec.Time, i+1, tc.ev.Type, tc.ev.Cause, tc.ev.Time)
			}
			if !reflect.DeepEqual(dec.Action, tc.ev.Action) {
				t.Fatalf("action: got %+v, want %+v", dec.Action, tc.ev.Action)
			}
			if tc.ev.Action != nil && dec.Action.ID != tc.ev.Action.ID {
				t.Fatalf("client id: got %q, want %q", dec.Action.ID, tc.ev.Action.ID)
			}
			if !reflect.DeepEqual(dec.Observation, tc.ev.Observation) {
				t.Fatalf("observation: got %+v, want %+v", dec.Observation, tc.ev.Observation)
			}
			if !reflect.DeepEqual(dec.Error, tc.ev.Error) {
				t.Fatalf("error: got %+v, want %+v", dec.Error, tc.ev.Error)
			}
			// Event(seq) serves the same bytes.
			b, err := l.Event(int64(i + 1))
			if err != nil || !bytes.Equal(b, want[i].data) {
				t.Fatalf("Event(%d) = %s, %v; want %s", i+1, b, err, want[i].data)
			}
		})
	}

	t.Run("Each from every offset", func(t *testing.T) {
		n := int64(len(want))
		for after := int64(0); after <= n+2; after++ {
			got := readAll(t, l, after)
			var w []record
			if after < n {
				w = want[after:]
			}
			sameRecords(t, fmt.Sprintf("Each(%d)", after), got, w)
		}
	})

	t.Run("Event out of range", func(t *testing.T) {
		for _, seq := range []int64{-1, 0, int64(len(want)) + 1, 1 << 40} {
			if _, err := l.Event(seq); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("Event(%d): err = %v, want ErrNotFound", seq, err)
			}
		}
	})

	t.Run("Each stops at fn error", func(t *testing.T) {
		stop := errors.New("stop here")
		var seen []int64
		last, err := l.Each(0, func(seq int64, _ []byte) error {
			if seq == 3 {
				return stop
			}
			seen = append(seen, seq)
			return nil
		})
		if !errors.Is(err, stop) || last != 2 || !slices.Equal(seen, []int64{1, 2}) {
			t.Fatalf("Each = (%d, %v) after %v; want (2, %v) after [1 2]", last, err, seen, stop)
		}
	})
}

func TestEachSeesEventsAppendedWhileRunning(t *testing.T) {
	l := mustOpen(t, logPath(t))
	mustAppend(t, l, actionEv("a", "true"))
	var seen []int64
	last, err := l.Each(0, func(seq int64, ev []byte) error {
		seen = append(seen, seq)
		if got := eventSeq(t, ev); got != seq {
			t.Errorf("fn got seq %d with event of seq %d", seq, got)
		}
		if seq < 3 {
			// Appending from inside fn must not deadlock, and Each must
			// hand the new event over before returning.
			mustAppend(t, l, observationEv(seq, "x"))
		}
		return nil
	})
	if err != nil || last != 3 || !slices.Equal(seen, []int64{1, 2, 3}) {
		t.Fatalf("Each = (%d, %v), saw %v; want (3, nil), saw [1 2 3]", last, err, seen)
	}
}

// TestRecordFormat pins the on-disk framing described in the package
// documentation, so a change of format cannot go unnoticed.
func TestRecordFormat(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)
	ev := actionEv("fmt", "echo format")
	ev.Time = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	seq := mustAppend(t, l, ev)
	want := frame(recEvent, marshal(t, ev))
	for _, s := range []struct {
		stream string
		code   byte
	}{{api.StreamStdout, 1}, {api.StreamStderr, 2}, {api.StreamPTY, 3}} {
		data := []byte("data on " + s.stream)
		mustOutput(t, l, seq, s.stream, data)
		want = append(want, frame(recOutput, outputPayload(seq, s.code, data))...)
	}
	mustOutput(t, l, seq, api.StreamStdout, nil) // an empty chunk is a 9-byte payload
	want = append(want, frame(recOutput, outputPayload(seq, 1, nil))...)
	mustSync(t, l)

	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file bytes:\n got %q\nwant %q", got, want)
	}
	if l.Size() != int64(len(want)) {
		t.Fatalf("Size = %d, want %d", l.Size(), len(want))
	}
}

// ---------------------------------------------------------------------------
// 2. Reopen after Close
// ---------------------------------------------------------------------------

func TestReopen(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)

	a1 := mustAppend(t, l, actionEv("id-1", "echo one"))
	mustOutput(t, l, a1, api.StreamStdout, []byte("one\n"))
	o1 := mustAppend(t, l, observationEv(a1, "one\n"))
	a2 := mustAppend(t, l, actionEv("id-2", "echo two"))
	e2 := mustAppend(t, l, errorEv(a2, "busy"))
	a3 := mustAppend(t, l, actionEv("id-3", "sleep 100"))
	a4 := mustAppend(t, l, actionEv("", "no id"))

	type lookup struct {
		id             string
		action, result int64
		ok             bool
	}
	lookups := []lookup{
		{"id-1", a1, o1, true},
		{"id-2", a2, e2, true},
		{"id-3", a3, 0, true},
		{"", 0, 0, false}, // actions without an id are not indexed
		{"unknown", 0, 0, false},
	}
	results := map[int64]int64{a1: o1, a2: e2, a3: 0, a4: 0, o1: 0, 999: 0}
	check := func(t *testing.T, l *Log) {
		t.Helper()
		for _, c := range lookups {
			action, result, ok := l.Lookup(c.id)
			if action != c.action || result != c.result || ok != c.ok {
				t.Errorf("Lookup(%q) = (%d, %d, %v), want (%d, %d, %v)", c.id, action, result, ok, c.action, c.result, c.ok)
			}
		}
		for action, want := range results {
			if got := l.Result(action); got != want {
				t.Errorf("Result(%d) = %d, want %d", action, got, want)
			}
		}
		if got := outputOf(t, l, a1, api.StreamStdout); string(got) != "one\n" {
			t.Errorf("Output(a1) = %q, want %q", got, "one\n")
		}
	}

	t.Run("live", func(t *testing.T) { check(t, l) })
	want := readAll(t, l, 0)
	size := l.Size()
	if len(want) != int(a4) {
		t.Fatalf("got %d events before close, want %d", len(want), a4)
	}
	mustClose(t, l)
	if got := fileSize(t, path); got != size {
		t.Fatalf("file is %d bytes after Close, Size said %d", got, size)
	}

	l = mustOpen(t, path)
	t.Run("reopened", func(t *testing.T) {
		sameRecords(t, "Each after reopen", readAll(t, l, 0), want)
		if got := l.LastSeq(); got != a4 {
			t.Errorf("LastSeq = %d, want %d", got, a4)
		}
		if got := l.Size(); got != size {
			t.Errorf("Size = %d, want %d", got, size)
		}
		check(t, l)
	})

	// The next seq continues, and results appended now are indexed live.
	o3 := mustAppend(t, l, observationEv(a3, "late"))
	if o3 != a4+1 {
		t.Fatalf("first Append after reopen got seq %d, want %d", o3, a4+1)
	}
	lookups[2].result = o3
	results[a3] = o3
	t.Run("after append", func(t *testing.T) { check(t, l) })
	want = readAll(t, l, 0)
	mustClose(t, l)

	l = mustOpen(t, path)
	t.Run("reopened twice", func(t *testing.T) {
		sameRecords(t, "Each after second reopen", readAll(t, l, 0), want)
		check(t, l)
		if got := mustAppend(t, l, actionEv("id-5", "x")); got != o3+1 {
			t.Errorf("Append after second reopen got seq %d, want %d", got, o3+1)
		}
	})
}

func TestOpenEmptyAndCreate(t *testing.T) {
	t.Run("creates missing file", func(t *testing.T) {
		path := logPath(t)
		l := mustOpen(t, path)
		if fileSize(t, path) != 0 || l.Size() != 0 || l.LastSeq() != 0 || len(l.Pending()) != 0 {
			t.Fatalf("fresh log: size %d/%d, last %d, pending %v", fileSize(t, path), l.Size(), l.LastSeq(), l.Pending())
		}
	})
	t.Run("existing empty file", func(t *testing.T) {
		path := logPath(t)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, path)
		if got := mustAppend(t, l, actionEv("a", "b")); got != 1 {
			t.Fatalf("first seq = %d, want 1", got)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		if l, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir", "log")); err == nil {
			l.Close()
			t.Fatal("Open in a missing directory succeeded")
		}
	})
}

// ---------------------------------------------------------------------------
// 3. Torn tail
// ---------------------------------------------------------------------------

func TestTornTail(t *testing.T) {
	hdr := func(n uint32, typ byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, n)
		b = binary.LittleEndian.AppendUint32(b, 0xdeadbeef)
		return append(b, typ)
	}
	// Each case turns the file (whose last record spans [start, end)) into
	// what a crash could leave behind.
	tests := []struct {
		name     string
		mutate   func(data []byte, start, end int64) []byte
		keepLast bool // whether the last record survives
	}{
		// (a) the crash cut the header of the last record
		{"cut after 1 header byte", func(d []byte, s, e int64) []byte { return d[:s+1] }, false},
		{"cut inside header", func(d []byte, s, e int64) []byte { return d[:s+4] }, false},
		{"cut one byte short of header", func(d []byte, s, e int64) []byte { return d[:s+headerSize-1] }, false},
		// (b) the crash cut the payload of the last record
		{"cut right after header", func(d []byte, s, e int64) []byte { return d[:s+headerSize] }, false},
		{"cut mid payload", func(d []byte, s, e int64) []byte { return d[:s+headerSize+(e-s-headerSize)/2] }, false},
		{"cut one byte short", func(d []byte, s, e int64) []byte { return d[:e-1] }, false},
		// (c) the last record is whole in length but its bytes are wrong
		{"flipped first payload byte", func(d []byte, s, e int64) []byte { d[s+headerSize] ^= 0x01; return d }, false},
		{"flipped last payload byte", func(d []byte, s, e int64) []byte { d[e-1] ^= 0x40; return d }, false},
		{"flipped checksum byte", func(d []byte, s, e int64) []byte { d[s+4] ^= 0x80; return d }, false},
		{"unknown record type", func(d []byte, s, e int64) []byte { d[s+8] = 'Z'; return d }, false},
		{"payload zeroed (size grew, data lost)", func(d []byte, s, e int64) []byte { clear(d[s+headerSize : e]); return d }, false},
		{"whole record zeroed", func(d []byte, s, e int64) []byte { clear(d[s:e]); return d }, false},
		{"length one too long", func(d []byte, s, e int64) []byte {
			binary.LittleEndian.PutUint32(d[s:], uint32(e-s-headerSize+1))
			return d
		}, false},
		// (d) junk after the last whole record
		{"garbage appended", func(d []byte, s, e int64) []byte {
			return append(d, []byte("\x00this is not a record at all \xff\xfe")...)
		}, true},
		{"fewer bytes than a header appended", func(d []byte, s, e int64) []byte { return append(d, 1, 2, 3, 4, 5, 6, 7, 8) }, true},
		{"zeros appended", func(d []byte, s, e int64) []byte { return append(d, make([]byte, 4096)...) }, true},
		{"header claiming 4 GiB", func(d []byte, s, e int64) []byte { return append(append(d, hdr(0xffffffff, recEvent)...), "{}"...) }, true},
		{"header claiming MaxRecord+1", func(d []byte, s, e int64) []byte {
			return append(append(d, hdr(MaxRecord+1, recOutput)...), make([]byte, 64)...)
		}, true},
		{"header claiming 1 MiB past EOF", func(d []byte, s, e int64) []byte {
			return append(append(d, hdr(1<<20, recOutput)...), make([]byte, 100)...)
		}, true},
		{"next event with bad checksum", func(d []byte, s, e int64) []byte {
			f := frame(recEvent, []byte(`{"seq":99,"type":"action"}`))
			f[4] ^= 1
			return append(d, f...)
		}, true},
		{"next event torn", func(d []byte, s, e int64) []byte {
			f := frame(recEvent, []byte(`{"seq":99,"type":"action","action":{"id":"zz","kind":"run"}}`))
			return append(d, f[:len(f)-7]...)
		}, true},
	}

	for _, lastKind := range []string{"event", "output"} {
		for _, tc := range tests {
			t.Run(lastKind+"/"+tc.name, func(t *testing.T) {
				path := logPath(t)
				l := mustOpen(t, path)
				a1 := mustAppend(t, l, actionEv("a1", "echo one"))
				mustOutput(t, l, a1, api.StreamStdout, []byte("one\n"))
				o1 := mustAppend(t, l, observationEv(a1, "one\n"))
				a2 := mustAppend(t, l, actionEv("a2", "echo two"))
				mustOutput(t, l, a2, api.StreamStdout, []byte("two\n"))
				good := readAll(t, l, 0)

				start := l.Size()
				var o2 int64
				lastChunk := []byte("the last chunk of stderr, torn by the crash")
				switch lastKind {
				case "event":
					o2 = mustAppend(t, l, observationEv(a2, "two\n"))
				case "output":
					mustOutput(t, l, a2, api.StreamStderr, lastChunk)
				}
				all := readAll(t, l, 0)
				end := l.Size()
				mustClose(t, l)

				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(data)) != end {
					t.Fatalf("file is %d bytes, Size said %d", len(data), end)
				}
				if err := os.WriteFile(path, tc.mutate(data, start, end), 0o600); err != nil {
					t.Fatal(err)
				}

				l = mustOpen(t, path)
				wantSize, wantEvents := start, good
				if tc.keepLast {
					wantSize, wantEvents = end, all
				}
				if got := fileSize(t, path); got != wantSize {
					t.Fatalf("file is %d bytes after Open, want %d (whole records only)", got, wantSize)
				}
				if got := l.Size(); got != wantSize {
					t.Fatalf("Size = %d, want %d", got, wantSize)
				}
				sameRecords(t, "Each after Open", readAll(t, l, 0), wantEvents)

				obsKept := lastKind == "event" && tc.keepLast
				wantPending := []int64{a2}
				wantResult := int64(0)
				if obsKept {
					wantPending, wantResult = nil, o2
				}
				if got := l.Pending(); !slices.Equal(got, wantPending) {
					t.Errorf("Pending = %v, want %v", got, wantPending)
				}
				if action, result, ok := l.Lookup("a2"); !ok || action != a2 || result != wantResult {
					t.Errorf("Lookup(a2) = (%d, %d, %v), want (%d, %d, true)", action, result, ok, a2, wantResult)
				}
				if action, result, ok := l.Lookup("a1"); !ok || action != a1 || result != o1 {
					t.Errorf("Lookup(a1) = (%d, %d, %v), want (%d, %d, true)", action, result, ok, a1, o1)
				}
				wantStderr := ""
				if lastKind == "output" && tc.keepLast {
					wantStderr = string(lastChunk)
				}
				for _, c := range []struct {
					cause  int64
					stream string
					want   string
				}{{a1, api.StreamStdout, "one\n"}, {a2, api.StreamStdout, "two\n"}, {a2, api.StreamStderr, wantStderr}} {
					if got := outputOf(t, l, c.cause, c.stream); string(got) != c.want {
						t.Errorf("Output(%d, %s) = %q, want %q", c.cause, c.stream, got, c.want)
					}
				}

				// Appends after the repair land on a record boundary and
				// survive another reopen.
				next := int64(len(wantEvents)) + 1
				a3 := mustAppend(t, l, actionEv("a3", "echo three"))
				if a3 != next {
					t.Fatalf("Append after repair got seq %d, want %d", a3, next)
				}
				mustOutput(t, l, a3, api.StreamStdout, []byte("three\n"))
				o3 := mustAppend(t, l, observationEv(a3, "three\n"))
				mustSync(t, l)
				wantAfter := readAll(t, l, 0)
				sizeAfter := l.Size()
				mustClose(t, l)

				l = mustOpen(t, path)
				if got := fileSize(t, path); got != sizeAfter {
					t.Fatalf("second reopen: file is %d bytes, want %d (nothing should be cut)", got, sizeAfter)
				}
				sameRecords(t, "Each after second reopen", readAll(t, l, 0), wantAfter)
				if action, result, ok := l.Lookup("a3"); !ok || action != a3 || result != o3 {
					t.Errorf("second reopen: Lookup(a3) = (%d, %d, %v), want (%d, %d, true)", action, result, ok, a3, o3)
				}
				if got := outputOf(t, l, a3, api.StreamStdout); string(got) != "three\n" {
					t.Errorf("second reopen: Output(a3) = %q", got)
				}
				if got := l.Pending(); !slices.Equal(got, wantPending) {
					t.Errorf("second reopen: Pending = %v, want %v", got, wantPending)
				}
			})
		}
	}
}

// TestOpenCutsAtFirstBadRecord checks that Open stops trusting the file at
// the first record that does not verify, even when whole records follow it.
func TestOpenCutsAtFirstBadRecord(t *testing.T) {
	// base: E1 action, O(1) output, E2 observation.
	build := func(t *testing.T) (path string, data []byte, offs []int64) {
		path = logPath(t)
		l := mustOpen(t, path)
		offs = append(offs, l.Size())
		a := mustAppend(t, l, actionEv("a", "echo"))
		offs = append(offs, l.Size())
		mustOutput(t, l, a, api.StreamStdout, []byte("out"))
		offs = append(offs, l.Size())
		mustAppend(t, l, observationEv(a, "out"))
		offs = append(offs, l.Size())
		mustClose(t, l)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return path, data, offs
	}
	// A whole, valid third event that must be dropped with what precedes it.
	validNext := frame(recEvent, []byte(`{"seq":3,"time":"2025-01-01T00:00:00Z","type":"action","action":{"id":"n","kind":"run"}}`))

	tests := []struct {
		name       string
		mutate     func(d []byte, offs []int64) []byte
		wantCut    func(offs []int64) int64
		wantEvents int
	}{
		{"bad checksum in first event", func(d []byte, o []int64) []byte { d[o[0]+headerSize+2] ^= 1; return d },
			func(o []int64) int64 { return 0 }, 0},
		{"bad checksum in middle event", func(d []byte, o []int64) []byte { d[o[2]+headerSize+2] ^= 1; return append(d, validNext...) },
			func(o []int64) int64 { return o[2] }, 1},
		{"event out of order (valid checksum)", func(d []byte, o []int64) []byte {
			d = append(d, frame(recEvent, []byte(`{"seq":7,"type":"action"}`))...)
			return append(d, validNext...)
		}, func(o []int64) int64 { return o[3] }, 2},
		{"event repeating a seq (valid checksum)", func(d []byte, o []int64) []byte {
			d = append(d, frame(recEvent, []byte(`{"seq":2,"type":"action"}`))...)
			return append(d, validNext...)
		}, func(o []int64) int64 { return o[3] }, 2},
		{"event that is not JSON (valid checksum)", func(d []byte, o []int64) []byte {
			d = append(d, frame(recEvent, []byte(`not json`))...)
			return append(d, validNext...)
		}, func(o []int64) int64 { return o[3] }, 2},
		{"output shorter than its prefix (valid checksum)", func(d []byte, o []int64) []byte {
			d = append(d, frame(recOutput, []byte{1, 0, 0, 0, 0})...)
			return append(d, validNext...)
		}, func(o []int64) int64 { return o[3] }, 2},
		{"unknown type (valid checksum)", func(d []byte, o []int64) []byte {
			d = append(d, frame('X', []byte(`{"seq":3}`))...)
			return append(d, validNext...)
		}, func(o []int64) int64 { return o[3] }, 2},
		{"control: valid next event is kept", func(d []byte, o []int64) []byte { return append(d, validNext...) },
			func(o []int64) int64 { return o[3] + int64(len(validNext)) }, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, data, offs := build(t)
			if err := os.WriteFile(path, tc.mutate(data, offs), 0o600); err != nil {
				t.Fatal(err)
			}
			l := mustOpen(t, path)
			want := tc.wantCut(offs)
			if got := fileSize(t, path); got != want || l.Size() != want {
				t.Fatalf("after Open: file %d bytes, Size %d; want %d", got, l.Size(), want)
			}
			if got := readAll(t, l, 0); len(got) != tc.wantEvents {
				t.Fatalf("got %d events, want %d", len(got), tc.wantEvents)
			}
			if got := mustAppend(t, l, actionEv("after", "x")); got != int64(tc.wantEvents)+1 {
				t.Fatalf("Append after repair got seq %d, want %d", got, tc.wantEvents+1)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 4. Pending
// ---------------------------------------------------------------------------

func TestPending(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)
	if got := l.Pending(); len(got) != 0 {
		t.Fatalf("Pending of a fresh log = %v", got)
	}
	unanswered1 := mustAppend(t, l, actionEv("u1", "sleep 1000"))
	observed := mustAppend(t, l, actionEv("o", "true"))
	mustAppend(t, l, observationEv(observed, ""))
	refused := mustAppend(t, l, actionEv("r", "true"))
	mustAppend(t, l, errorEv(refused, "busy"))
	unanswered2 := mustAppend(t, l, actionEv("", "no id, no result"))
	mustOutput(t, l, unanswered2, api.StreamStdout, []byte("partial output")) // output is not a result
	lateAnswer := mustAppend(t, l, actionEv("late", "x"))
	interleaved := mustAppend(t, l, actionEv("i", "y"))
	mustAppend(t, l, observationEv(lateAnswer, "")) // answered out of order
	if got := l.Pending(); len(got) != 0 {
		t.Fatalf("Pending lists actions of the current run: %v (it must only report those found at Open)", got)
	}
	mustClose(t, l)

	want := []int64{unanswered1, unanswered2, interleaved}
	l = mustOpen(t, path)
	if got := l.Pending(); !slices.Equal(got, want) {
		t.Fatalf("Pending after reopen = %v, want %v", got, want)
	}
	for _, seq := range want {
		if r := l.Result(seq); r != 0 {
			t.Errorf("pending action %d has result %d", seq, r)
		}
	}

	// Answering one (as the daemon does for a lost action) removes it from
	// the next Open's list, but not from this one's.
	lost := observationEv(unanswered1, "")
	lost.Observation.Lost = true
	mustAppend(t, l, lost)
	mustAppend(t, l, errorEv(interleaved, "lost"))
	if got := l.Pending(); !slices.Equal(got, want) {
		t.Fatalf("Pending changed while the log is open: %v, want %v", got, want)
	}
	mustClose(t, l)

	l = mustOpen(t, path)
	if got := l.Pending(); !slices.Equal(got, []int64{unanswered2}) {
		t.Fatalf("Pending after second reopen = %v, want [%d]", got, unanswered2)
	}
}

// ---------------------------------------------------------------------------
// 5. Output
// ---------------------------------------------------------------------------

type errWriter struct {
	n   int // bytes accepted before failing
	err error
}

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) <= w.n {
		w.n -= len(p)
		return len(p), nil
	}
	n := w.n
	w.n = 0
	return n, w.err
}

func TestOutput(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)
	c1 := mustAppend(t, l, actionEv("c1", "one"))
	c2 := mustAppend(t, l, actionEv("c2", "two"))
	binaryChunk := make([]byte, 256)
	for i := range binaryChunk {
		binaryChunk[i] = byte(i)
	}

	chunks := []struct {
		cause  int64
		stream string
		data   string
	}{
		{c1, api.StreamStdout, "c1 out 1\n"},
		{c2, api.StreamStdout, "c2 out 1\n"},
		{c1, api.StreamStderr, "c1 err 1\n"},
		{c1, api.StreamStdout, "c1 out 2\n"},
		{c2, api.StreamPTY, "\x1b[31mred\x1b[0m\r\n"},
		{c2, api.StreamStdout, ""},
		{c1, api.StreamPTY, string(binaryChunk)},
		{c2, api.StreamStderr, "c2 err 1\n"},
		{c1, api.StreamStdout, "c1 out 3 (no newline)"},
		{c2, api.StreamStdout, "c2 out 2\n"},
		{c2, api.StreamPTY, "$ "},
		{c1, api.StreamStderr, "c1 err 2\n"},
	}
	// want[cause][stream]; stream "" is every stream in arrival order.
	want := map[int64]map[string]string{}
	lastSeq := l.LastSeq()
	for i, c := range chunks {
		mustOutput(t, l, c.cause, c.stream, []byte(c.data))
		if want[c.cause] == nil {
			want[c.cause] = map[string]string{}
		}
		want[c.cause][c.stream] += c.data
		want[c.cause][""] += c.data
		if i == 5 {
			// An event between chunks does not disturb either index.
			lastSeq = mustAppend(t, l, actionEv("between", "x"))
		}
	}
	if got := l.LastSeq(); got != lastSeq {
		t.Fatalf("output records changed LastSeq to %d, want %d", got, lastSeq)
	}

	check := func(t *testing.T, l *Log) {
		t.Helper()
		for _, cause := range []int64{c1, c2, lastSeq, 0, 12345} {
			for _, stream := range []string{api.StreamStdout, api.StreamStderr, api.StreamPTY, ""} {
				got := outputOf(t, l, cause, stream)
				if w := want[cause][stream]; string(got) != w {
					t.Errorf("Output(%d, %s) = %q, want %q", cause, stream, got, w)
				}
			}
		}
	}
	t.Run("live", func(t *testing.T) { check(t, l) })

	t.Run("unknown stream", func(t *testing.T) {
		before := l.Size()
		if err := l.AppendOutput(c1, "", []byte("x")); err == nil {
			t.Errorf("AppendOutput(stream \"\") succeeded; \"\" only means all streams when reading")
		}
		for _, stream := range []string{"stdin", "STDOUT", "both", "all"} {
			if err := l.AppendOutput(c1, stream, []byte("x")); err == nil {
				t.Errorf("AppendOutput(stream %q) succeeded", stream)
			}
			if n, err := l.Output(c1, stream, &bytes.Buffer{}); !errors.Is(err, api.ErrInvalidArgument) || n != 0 {
				t.Errorf("Output(stream %q) = (%d, %v), want (0, ErrInvalidArgument)", stream, n, err)
			}
		}
		if l.Size() != before {
			t.Errorf("a rejected AppendOutput grew the log from %d to %d bytes", before, l.Size())
		}
	})

	t.Run("writer error", func(t *testing.T) {
		boom := errors.New("client went away")
		w := &errWriter{n: len("c1 out 1\n") + 3, err: boom}
		n, err := l.Output(c1, api.StreamStdout, w)
		if !errors.Is(err, boom) || n != int64(len("c1 out 1\n")+3) {
			t.Fatalf("Output to a failing writer = (%d, %v), want (%d, %v)", n, err, len("c1 out 1\n")+3, boom)
		}
	})

	mustClose(t, l)
	l = mustOpen(t, path)
	t.Run("reopened", func(t *testing.T) { check(t, l) })

	// More output for an old cause after reopen is appended to what is there.
	mustOutput(t, l, c1, api.StreamStdout, []byte("+more"))
	want[c1][api.StreamStdout] += "+more"
	want[c1][""] += "+more"
	t.Run("appended after reopen", func(t *testing.T) { check(t, l) })
}

// ---------------------------------------------------------------------------
// 6. Follow and Changed
// ---------------------------------------------------------------------------

type followed struct {
	rec  record
	done bool
	err  error
}

// startFollow runs Follow in a goroutine, forwarding each event and finally
// its return value.
func startFollow(ctx context.Context, l *Log, after int64, fn func(seq int64) error) <-chan followed {
	ch := make(chan followed, 1024)
	go func() {
		err := l.Follow(ctx, after, func(seq int64, ev []byte) error {
			if fn != nil {
				if err := fn(seq); err != nil {
					return err
				}
			}
			ch <- followed{rec: record{seq, bytes.Clone(ev)}}
			return nil
		})
		ch <- followed{done: true, err: err}
	}()
	return ch
}

func expectEvents(t *testing.T, ch <-chan followed, want []record) {
	t.Helper()
	for _, w := range want {
		got := recv(t, ch, fmt.Sprintf("event %d from Follow", w.seq))
		if got.done {
			t.Fatalf("Follow ended with %v while waiting for event %d", got.err, w.seq)
		}
		if got.rec.seq != w.seq || !bytes.Equal(got.rec.data, w.data) {
			t.Fatalf("Follow delivered seq %d %s, want seq %d %s", got.rec.seq, got.rec.data, w.seq, w.data)
		}
	}
}

func expectDone(t *testing.T, ch <-chan followed, ok func(error) bool, what string) {
	t.Helper()
	got := recv(t, ch, "Follow to return")
	if !got.done {
		t.Fatalf("Follow delivered an unexpected event %d %s", got.rec.seq, got.rec.data)
	}
	if !ok(got.err) {
		t.Fatalf("Follow returned %v, want %s", got.err, what)
	}
}

func expectQuiet(t *testing.T, ch <-chan followed) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("Follow sent %+v, want nothing", got)
	case <-time.After(50 * time.Millisecond):
	}
}

func appendRecord(t *testing.T, l *Log, ev *api.Event) record {
	t.Helper()
	seq := mustAppend(t, l, ev)
	return record{seq, marshal(t, ev)}
}

func TestFollow(t *testing.T) {
	t.Run("delivers old and new events in order, ends on cancel", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		want := []record{appendRecord(t, l, actionEv("a", "1")), appendRecord(t, l, observationEv(1, "x"))}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := startFollow(ctx, l, 0, nil)
		expectEvents(t, ch, want)
		expectQuiet(t, ch)

		var later []record
		for i := 0; i < 20; i++ {
			later = append(later, appendRecord(t, l, actionEv(fmt.Sprintf("later-%d", i), "y")))
			if i%5 == 0 {
				mustOutput(t, l, 1, api.StreamStdout, []byte("noise")) // output wakes nobody up wrongly
				time.Sleep(time.Millisecond)
			}
		}
		expectEvents(t, ch, later)
		expectQuiet(t, ch)

		cancel()
		expectDone(t, ch, func(err error) bool { return errors.Is(err, context.Canceled) }, "context.Canceled")
	})

	t.Run("starts after the given seq", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		var all []record
		for i := 0; i < 5; i++ {
			all = append(all, appendRecord(t, l, actionEv(fmt.Sprint(i), "z")))
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := startFollow(ctx, l, 3, nil)
		expectEvents(t, ch, all[3:])
		next := appendRecord(t, l, actionEv("6", "z"))
		expectEvents(t, ch, []record{next})
		cancel()
		expectDone(t, ch, func(err error) bool { return errors.Is(err, context.Canceled) }, "context.Canceled")
	})

	t.Run("after beyond the end waits", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		appendRecord(t, l, actionEv("1", "z"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := startFollow(ctx, l, 2, nil)
		expectQuiet(t, ch)
		appendRecord(t, l, actionEv("2", "z")) // seq 2, still not after 2
		expectQuiet(t, ch)
		three := appendRecord(t, l, actionEv("3", "z"))
		expectEvents(t, ch, []record{three})
		cancel()
		expectDone(t, ch, func(err error) bool { return errors.Is(err, context.Canceled) }, "context.Canceled")
	})

	t.Run("Close ends every follower", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		first := appendRecord(t, l, actionEv("a", "1"))
		var chans []<-chan followed
		for i := 0; i < 8; i++ {
			ch := startFollow(context.Background(), l, 0, nil)
			expectEvents(t, ch, []record{first})
			chans = append(chans, ch)
		}
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		if err := recv(t, closed, "Close"); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, ch := range chans {
			expectDone(t, ch, func(err error) bool { return err == nil || errors.Is(err, ErrClosed) }, "nil or ErrClosed")
		}
	})

	t.Run("on a closed log", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		appendRecord(t, l, actionEv("a", "1"))
		mustClose(t, l)
		ch := startFollow(context.Background(), l, 0, nil)
		expectDone(t, ch, func(err error) bool { return err == nil || errors.Is(err, ErrClosed) }, "nil or ErrClosed")
	})

	t.Run("fn error ends follow", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		one := appendRecord(t, l, actionEv("a", "1"))
		stop := errors.New("client is gone")
		ch := startFollow(context.Background(), l, 0, func(seq int64) error {
			if seq == 2 {
				return stop
			}
			return nil
		})
		expectEvents(t, ch, []record{one})
		appendRecord(t, l, actionEv("b", "2"))
		expectDone(t, ch, func(err error) bool { return errors.Is(err, stop) }, "the error of fn")
	})

	t.Run("already cancelled context", func(t *testing.T) {
		l := mustOpen(t, logPath(t))
		one := appendRecord(t, l, actionEv("a", "1"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ch := startFollow(ctx, l, 0, nil)
		// What is there may still be delivered, but Follow must end.
		got := recv(t, ch, "Follow")
		if !got.done {
			if got.rec.seq != one.seq {
				t.Fatalf("Follow delivered %d", got.rec.seq)
			}
			got = recv(t, ch, "Follow to return")
		}
		if !got.done || !errors.Is(got.err, context.Canceled) {
			t.Fatalf("Follow with a cancelled context: %+v, want context.Canceled", got)
		}
	})
}

func TestChanged(t *testing.T) {
	l := mustOpen(t, logPath(t))
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := l.Changed()
	if isClosed(ch) {
		t.Fatal("Changed is closed on a fresh log")
	}
	if l.Changed() != ch {
		t.Fatal("Changed returned a new channel without an append")
	}
	mustOutput(t, l, 1, api.StreamStdout, []byte("x"))
	if isClosed(ch) {
		t.Fatal("AppendOutput closed Changed (it signals events only)")
	}
	if err := l.AppendOutput(1, "nope", nil); err == nil || isClosed(ch) {
		t.Fatal("a failed AppendOutput closed Changed or did not fail")
	}
	mustAppend(t, l, actionEv("a", "b"))
	if !isClosed(ch) {
		t.Fatal("Append did not close Changed")
	}
	ch2 := l.Changed()
	if ch2 == ch || isClosed(ch2) {
		t.Fatal("Changed after an append is not a fresh open channel")
	}
	mustSync(t, l)
	if isClosed(ch2) {
		t.Fatal("Sync closed Changed")
	}
	mustClose(t, l)
	if !isClosed(ch2) {
		t.Fatal("Close did not close Changed")
	}
	if !isClosed(l.Changed()) {
		t.Fatal("Changed on a closed log is not closed")
	}
}

// ---------------------------------------------------------------------------
// 7. Concurrency
// ---------------------------------------------------------------------------

func TestConcurrentAppendSync(t *testing.T) {
	const workers, pairs = 8, 200
	path := logPath(t)
	l := mustOpen(t, path)

	// Readers run alongside the writers to give the race detector
	// something to look at.
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	readerErr := make(chan error, 4)
	for r := 0; r < 3; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var after int64
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				last, err := l.Each(after, func(seq int64, ev []byte) error {
					if !json.Valid(ev) {
						return fmt.Errorf("event %d is not JSON", seq)
					}
					return nil
				})
				if err != nil {
					readerErr <- err
					return
				}
				after = last
				l.Lookup(fmt.Sprintf("w%d-%d", r, after%pairs))
				l.Result(after)
				var b bytes.Buffer
				if _, err := l.Output(after, api.StreamStdout, &b); err != nil {
					readerErr <- err
					return
				}
				l.LastSeq()
				l.Size()
			}
		}()
	}
	followCtx, cancelFollow := context.WithCancel(context.Background())
	defer cancelFollow()
	followCount := make(chan int64, 1)
	go func() {
		var n int64
		err := l.Follow(followCtx, 0, func(seq int64, _ []byte) error {
			n++
			if seq != n {
				return fmt.Errorf("follower got seq %d, want %d", seq, n)
			}
			if n == workers*pairs*2 {
				return errDone
			}
			return nil
		})
		if !errors.Is(err, errDone) {
			n = -n
			t.Errorf("follower: %v", err)
		}
		followCount <- n
	}()

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev int64
			for i := 0; i < pairs; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				a, err := l.Append(actionEv(id, "echo "+id))
				if err != nil {
					errs <- err
					return
				}
				if a <= prev {
					errs <- fmt.Errorf("worker %d: seq went from %d to %d", w, prev, a)
					return
				}
				if err := l.AppendOutput(a, api.StreamStdout, []byte("out-"+id)); err != nil {
					errs <- err
					return
				}
				o, err := l.Append(observationEv(a, id))
				if err != nil {
					errs <- err
					return
				}
				if o <= a {
					errs <- fmt.Errorf("worker %d: observation seq %d not after action %d", w, o, a)
					return
				}
				prev = o
				if err := l.Sync(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopReaders)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	close(readerErr)
	for err := range readerErr {
		t.Fatalf("reader: %v", err)
	}
	if n := recv(t, followCount, "the follower to see every event"); n != workers*pairs*2 {
		t.Fatalf("follower saw %d events, want %d", n, workers*pairs*2)
	}

	verify := func(t *testing.T, l *Log) {
		t.Helper()
		events := readAll(t, l, 0) // checks 1..N contiguous
		if len(events) != workers*pairs*2 {
			t.Fatalf("got %d events, want %d", len(events), workers*pairs*2)
		}
		actions := map[int64]string{} // seq -> id
		answered := map[int64]int64{} // action seq -> observation seq
		for _, r := range events {
			var ev api.Event
			if err := json.Unmarshal(r.data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Seq != r.seq {
				t.Fatalf("event %d holds seq %d", r.seq, ev.Seq)
			}
			switch ev.Type {
			case api.EventAction:
				actions[ev.Seq] = ev.Action.ID
			case api.EventObservation:
				id, ok := actions[ev.Cause]
				if !ok {
					t.Fatalf("observation %d has cause %d, which is not an earlier action", ev.Seq, ev.Cause)
				}
				if ev.Observation.Output != id {
					t.Fatalf("observation %d answers %q but its cause %d is %q", ev.Seq, ev.Observation.Output, ev.Cause, id)
				}
				if prev, dup := answered[ev.Cause]; dup {
					t.Fatalf("action %d answered twice (%d and %d)", ev.Cause, prev, ev.Seq)
				}
				answered[ev.Cause] = ev.Seq
			default:
				t.Fatalf("unexpected event type %q", ev.Type)
			}
		}
		if len(actions) != workers*pairs || len(answered) != workers*pairs {
			t.Fatalf("%d actions, %d answered; want %d each", len(actions), len(answered), workers*pairs)
		}
		for seq, id := range actions {
			a, o, ok := l.Lookup(id)
			if !ok || a != seq || o != answered[seq] {
				t.Fatalf("Lookup(%q) = (%d, %d, %v), want (%d, %d, true)", id, a, o, ok, seq, answered[seq])
			}
			if got := outputOf(t, l, seq, api.StreamStdout); string(got) != "out-"+id {
				t.Fatalf("Output(%d) = %q, want %q", seq, got, "out-"+id)
			}
		}
	}
	t.Run("live", func(t *testing.T) { verify(t, l) })
	mustClose(t, l)
	l = mustOpen(t, path)
	t.Run("reopened", func(t *testing.T) {
		verify(t, l)
		if p := l.Pending(); len(p) != 0 {
			t.Fatalf("Pending = %v after every action was answered", p)
		}
	})
}

var errDone = errors.New("done")

func TestConcurrentSyncAndClose(t *testing.T) {
	// Syncs racing Close (with everything appended before): each must return
	// nil or ErrClosed, and Close must neither fail nor hang.
	for iter := 0; iter < 50; iter++ {
		l := mustOpen(t, logPath(t))
		for i := 0; i < 8; i++ {
			mustAppend(t, l, actionEv("", "x"))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		start := make(chan struct{})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 4; i++ {
					if err := l.Sync(); err != nil && !errors.Is(err, ErrClosed) {
						errs <- err
					}
				}
			}()
		}
		closed := make(chan error, 1)
		close(start)
		go func() { closed <- l.Close() }()
		if err := recv(t, closed, "Close"); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Sync racing Close: %v", err)
		}
	}
}

// ---------------------------------------------------------------------------
// 8. Sync and closed-log semantics
// ---------------------------------------------------------------------------

func TestSyncAndClosed(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync on a fresh log: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("second Sync on a fresh log: %v", err)
	}
	a := mustAppend(t, l, actionEv("a", "b"))
	mustOutput(t, l, a, api.StreamStdout, []byte("x"))
	for i := 0; i < 3; i++ {
		if err := l.Sync(); err != nil {
			t.Fatalf("Sync #%d after appends: %v", i, err)
		}
	}
	size := l.Size()
	mustClose(t, l)
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}

	ops := []struct {
		name string
		op   func() error
	}{
		{"Sync", l.Sync},
		{"Append", func() error {
			ev := actionEv("c", "d")
			_, err := l.Append(ev)
			if ev.Seq != 0 {
				return fmt.Errorf("Append on a closed log set Seq to %d (err %v)", ev.Seq, err)
			}
			return err
		}},
		{"AppendOutput", func() error { return l.AppendOutput(a, api.StreamStdout, []byte("y")) }},
		{"Each", func() error { _, err := l.Each(0, func(int64, []byte) error { return nil }); return err }},
		{"Follow", func() error {
			return l.Follow(context.Background(), 0, func(int64, []byte) error { return nil })
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- op.op() }()
			if err := recv(t, done, op.name+" on a closed log"); !errors.Is(err, ErrClosed) {
				t.Fatalf("%s on a closed log = %v, want ErrClosed", op.name, err)
			}
		})
	}
	if got := fileSize(t, path); got != size {
		t.Fatalf("operations on a closed log changed the file from %d to %d bytes", size, got)
	}
	// What does not touch the file keeps answering.
	if got := l.LastSeq(); got != a {
		t.Fatalf("LastSeq on a closed log = %d, want %d", got, a)
	}
	if action, _, ok := l.Lookup("a"); !ok || action != a {
		t.Fatalf("Lookup on a closed log = (%d, %v)", action, ok)
	}
}

// ---------------------------------------------------------------------------
// 9. Large output
// ---------------------------------------------------------------------------

func TestLargeOutput(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n+8)
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		return b[:n:n]
	}
	path := logPath(t)
	l := mustOpen(t, path)
	a := mustAppend(t, l, actionEv("big", "cat /dev/urandom"))

	big := random(8 << 20)
	// Stderr crosses the writeback threshold in several pieces.
	var stderr []byte
	pieces := [][]byte{random(3 << 20), random(3 << 20), random(1), random(writebackEvery), random(12345)}

	sizeBefore := l.Size()
	mustOutput(t, l, a, api.StreamStdout, big)
	wantSize := sizeBefore + headerSize + 9 + int64(len(big))
	for _, p := range pieces {
		mustOutput(t, l, a, api.StreamStderr, p)
		stderr = append(stderr, p...)
		wantSize += headerSize + 9 + int64(len(p))
	}
	if got := l.Size(); got != wantSize {
		t.Fatalf("Size after the output records = %d, want %d", got, wantSize)
	}
	o := mustAppend(t, l, observationEv(a, "done"))
	mustSync(t, l)
	if got := fileSize(t, path); got != l.Size() {
		t.Fatalf("file is %d bytes, Size says %d", got, l.Size())
	}

	check := func(t *testing.T, l *Log) {
		t.Helper()
		if got := outputOf(t, l, a, api.StreamStdout); !bytes.Equal(got, big) {
			t.Fatalf("stdout: got %d bytes, want %d byte-exact", len(got), len(big))
		}
		if got := outputOf(t, l, a, api.StreamStderr); !bytes.Equal(got, stderr) {
			t.Fatalf("stderr: got %d bytes, want %d byte-exact", len(got), len(stderr))
		}
		if _, r, ok := l.Lookup("big"); !ok || r != o {
			t.Fatalf("Lookup(big) result = %d, want %d", r, o)
		}
	}
	t.Run("live", func(t *testing.T) { check(t, l) })
	mustClose(t, l)
	l = mustOpen(t, path)
	t.Run("reopened", func(t *testing.T) { check(t, l) })
}

func TestRecordTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 256 MiB")
	}
	path := logPath(t)
	l := mustOpen(t, path)
	a := mustAppend(t, l, actionEv("a", "b"))
	size := l.Size()
	huge := make([]byte, MaxRecord-8) // + 9 bytes of prefix = MaxRecord+1
	if err := l.AppendOutput(a, api.StreamStdout, huge); !errors.Is(err, api.ErrTooLarge) {
		t.Fatalf("AppendOutput of a record over MaxRecord = %v, want ErrTooLarge", err)
	}
	if l.Size() != size || fileSize(t, path) != size {
		t.Fatalf("a rejected record changed the log size from %d to %d (file %d)", size, l.Size(), fileSize(t, path))
	}
	if got := mustAppend(t, l, observationEv(a, "")); got != a+1 {
		t.Fatalf("Append after a rejected record got seq %d", got)
	}
}

// ---------------------------------------------------------------------------
// Regressions: bugs these tests found in eventlog.go, now fixed.
// ---------------------------------------------------------------------------

// Each (and so Follow) with a negative `after` indexes l.offsets[-1] while
// holding l.mu: it panics, and the mutex is never released, so every later
// call on the log (including Close) deadlocks.
func TestRegressionEachNegativeAfter(t *testing.T) {
	l, err := Open(logPath(t))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, actionEv("a", "b"))
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_, err = l.Each(-1, func(int64, []byte) error { return nil })
	}()
	if recovered != nil {
		// Do not touch l again: its mutex is still held.
		t.Fatalf("Each(-1) panicked: %v", recovered)
	}
	defer l.Close()
	if err != nil {
		t.Fatalf("Each(-1): %v", err)
	}
}

// A reader inside Each (or Follow catching up) when Close runs gets the
// *os.File's "file already closed" error instead of ErrClosed.
func TestRegressionEachRacingClose(t *testing.T) {
	for iter := 0; iter < 100; iter++ {
		l, err := Open(logPath(t))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			mustAppend(t, l, actionEv("", "x"))
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[g] = l.Each(0, func(int64, []byte) error { return nil })
			}()
		}
		l.Close()
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("iteration %d: Each racing Close returned %v, want nil or ErrClosed", iter, err)
			}
		}
	}
}

// Close syncs before it marks the log closed. An Append that lands between
// that Sync and the flag succeeds but is never synced by Close, and a Sync
// that then sees it calls fdatasync on the descriptor Close is closing:
// it fails with EBADF (or, if the number was reused, syncs another file and
// reports success for records that were never made durable).
func TestRegressionSyncRacingClose(t *testing.T) {
	for iter := 0; iter < 200; iter++ {
		l, err := Open(logPath(t))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 256)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 8; i++ {
					if _, err := l.Append(actionEv("", "x")); err != nil && !errors.Is(err, ErrClosed) {
						errs <- err
					}
					if err := l.Sync(); err != nil && !errors.Is(err, ErrClosed) {
						errs <- err
					}
				}
			}()
		}
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("iteration %d: Sync racing Close returned %v, want nil or ErrClosed", iter, err)
		}
	}
}

// A torn or corrupted output record that is not the last record of the file
// survives Open (its checksum is only verified when it ends the file), so
// the log keeps a record that is not whole, and Output of that action fails
// for good, including the whole chunks recorded before and after it.
func TestRegressionCorruptOutputBeforeTail(t *testing.T) {
	path := logPath(t)
	l := mustOpen(t, path)
	a := mustAppend(t, l, actionEv("a", "b"))
	mustOutput(t, l, a, api.StreamStdout, []byte("first chunk "))
	start := l.Size()
	mustOutput(t, l, a, api.StreamStdout, []byte("chunk whose pages never reached the disk"))
	end := l.Size()
	mustAppend(t, l, observationEv(a, "")) // a later record that did reach it
	mustClose(t, l)

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(data[start+headerSize+9 : end]) // the payload reads back as zeros
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, path)
	var b bytes.Buffer
	_, err = l.Output(a, api.StreamStdout, &b)
	if !errors.Is(err, errCorrupt) || b.String() != "first chunk " {
		t.Fatalf("Output(%d) = %q, %v; want the whole chunk and an error naming the corrupt one", a, b.String(), err)
	}
}

// ---------------------------------------------------------------------------
// Fuzzing
// ---------------------------------------------------------------------------

// seedLog builds a small valid log and returns its bytes.
func seedLog(tb testing.TB) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "seed.log")
	l, err := Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := []*api.Event{actionEv("s1", "echo hi"), observationEv(1, "hi\n"), actionEv("s2", "sleep 9"), errorEv(3, "busy"), actionEv("", "pending")}
	for i, ev := range evs {
		ev.Time = at
		if _, err := l.Append(ev); err != nil {
			tb.Fatal(err)
		}
		if i == 0 {
			if err := l.AppendOutput(1, api.StreamStdout, []byte("hi\n")); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := l.AppendOutput(5, api.StreamPTY, []byte("\x1b[0m$ ")); err != nil {
		tb.Fatal(err)
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func FuzzOpen(f *testing.F) {
	valid := seedLog(f)
	f.Add([]byte{})
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(bytes.Clone(valid), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 'E'))
	f.Add(frame(recEvent, []byte(`{"seq":1,"type":"observation","cause":1}`)))
	f.Add(frame(recOutput, outputPayload(1, 9, []byte("odd stream code"))))

	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.log")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path)
		if err != nil {
			// Whatever the bytes, Open repairs the file rather than failing.
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()

		size := l.Size()
		onDisk, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(onDisk)) != size || size > int64(len(data)) || !bytes.Equal(onDisk, data[:size]) {
			t.Fatalf("Open left %d bytes (Size %d) of %d; it may only cut a tail", len(onDisk), size, len(data))
		}
		events := readAll(t, l, 0)
		if int64(len(events)) != l.LastSeq() {
			t.Fatalf("Each returned %d events, LastSeq is %d", len(events), l.LastSeq())
		}
		for _, r := range events {
			if got := eventSeq(t, r.data); got != r.seq {
				t.Fatalf("event %d holds seq %d", r.seq, got)
			}
		}
		pending := l.Pending()
		if !slices.IsSorted(pending) {
			t.Fatalf("Pending is not sorted: %v", pending)
		}
		for _, p := range pending {
			if p < 1 || p > l.LastSeq() {
				t.Fatalf("Pending lists %d, outside 1..%d", p, l.LastSeq())
			}
		}
		for _, stream := range []string{api.StreamStdout, api.StreamStderr, api.StreamPTY} {
			for seq := int64(0); seq <= l.LastSeq()+1 && seq < 8; seq++ {
				l.Output(seq, stream, &bytes.Buffer{}) // must not panic; corrupt middle records may error
			}
		}

		// The repaired log takes appends that survive a reopen.
		ev := actionEv("fuzz-new-action", "echo new")
		seq, err := l.Append(ev)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		if seq != int64(len(events))+1 {
			t.Fatalf("Append got seq %d after %d events", seq, len(events))
		}
		if err := l.AppendOutput(seq, api.StreamStdout, []byte("fuzz-out")); err != nil {
			t.Fatalf("AppendOutput: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wantSize := size + headerSize + int64(len(marshal(t, ev))) + headerSize + 9 + int64(len("fuzz-out"))

		l2, err := Open(path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer l2.Close()
		if got := fileSize(t, path); got != wantSize || l2.Size() != wantSize {
			t.Fatalf("reopen: file %d bytes, Size %d; want %d", got, l2.Size(), wantSize)
		}
		want := append(events, record{seq, marshal(t, ev)})
		sameRecords(t, "Each after append and reopen", readAll(t, l2, 0), want)
		if a, _, ok := l2.Lookup("fuzz-new-action"); !ok || a != seq {
			t.Fatalf("Lookup of the new action = (%d, %v), want %d", a, ok, seq)
		}
		if !slices.Contains(l2.Pending(), seq) {
			t.Fatalf("the new action %d is not pending after reopen: %v", seq, l2.Pending())
		}
		var out bytes.Buffer
		if _, err := l2.Output(seq, api.StreamStdout, &out); err == nil && !bytes.HasSuffix(out.Bytes(), []byte("fuzz-out")) {
			t.Fatalf("Output of the new action = %q, want it to end with fuzz-out", out.Bytes())
		}
	})
}
