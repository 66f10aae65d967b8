package executors_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/executors"
)

// splitter cuts a stream into the writes a Capture receives.
type splitter struct {
	name string
	// runeSafe splitters never cut a UTF-8 character.
	runeSafe bool
	split    func(p []byte) [][]byte
}

func chunksOf(p []byte, n int) [][]byte {
	var out [][]byte
	for len(p) > 0 {
		k := min(n, len(p))
		out = append(out, p[:k])
		p = p[k:]
	}
	return out
}

func randomChunks(seed int64, max int) func([]byte) [][]byte {
	return func(p []byte) [][]byte {
		r := rand.New(rand.NewSource(seed))
		var out [][]byte
		for len(p) > 0 {
			k := min(1+r.Intn(max), len(p))
			out = append(out, p[:k])
			p = p[k:]
			if r.Intn(5) == 0 {
				out = append(out, nil) // empty writes are harmless
			}
		}
		return out
	}
}

// runeChunks cuts at character boundaries only, n characters at a time (or a
// random number when n is 0).
func runeChunks(seed int64, n int) func([]byte) [][]byte {
	return func(p []byte) [][]byte {
		r := rand.New(rand.NewSource(seed))
		var out [][]byte
		for len(p) > 0 {
			k := n
			if k == 0 {
				k = 1 + r.Intn(13)
			}
			i := 0
			for ; k > 0 && i < len(p); k-- {
				_, size := utf8.DecodeRune(p[i:])
				i += size
			}
			out = append(out, p[:i])
			p = p[i:]
		}
		return out
	}
}

var byteSplitters = []splitter{
	{"one write", true, func(p []byte) [][]byte { return [][]byte{p} }},
	{"byte at a time", false, func(p []byte) [][]byte { return chunksOf(p, 1) }},
	{"chunks of 2", false, func(p []byte) [][]byte { return chunksOf(p, 2) }},
	{"chunks of 7", false, func(p []byte) [][]byte { return chunksOf(p, 7) }},
	{"chunks of 64", false, func(p []byte) [][]byte { return chunksOf(p, 64) }},
	{"random up to 5", false, randomChunks(1, 5)},
	{"random up to 50", false, randomChunks(2, 50)},
	{"random up to 500", false, randomChunks(3, 500)},
}

var runeSplitters = []splitter{
	{"one write", true, func(p []byte) [][]byte { return [][]byte{p} }},
	{"char at a time", true, runeChunks(0, 1)},
	{"chars 3 at a time", true, runeChunks(0, 3)},
	{"random char chunks", true, runeChunks(4, 0)},
	{"random char chunks 2", true, runeChunks(5, 0)},
}

var markerRE = regexp.MustCompile(`^\n\[\.\.\. (\d+) (bytes|characters) omitted[^\n]*\]\n$`)

// checkCapture checks c against the stream in that it received.
func checkCapture(t *testing.T, c *executors.Capture, in []byte) {
	t.Helper()
	var units [][]byte // the stream cut into units
	if c.Runes {
		for p := in; len(p) > 0; {
			_, size := utf8.DecodeRune(p)
			units = append(units, p[:size])
			p = p[size:]
		}
	} else {
		for i := range in {
			units = append(units, in[i:i+1])
		}
	}
	n, L := len(units), c.Limit
	if got := c.Total(); got != int64(n) {
		t.Errorf("Total() = %d, want %d", got, n)
	}
	got := c.Bytes()
	if s := c.String(); s != string(got) {
		t.Errorf("String() %q != Bytes() %q", s, got)
	}
	if n <= 2*L {
		if c.Truncated() {
			t.Errorf("Truncated() with %d units and Limit %d", n, L)
		}
		if !bytes.Equal(got, in) {
			t.Errorf("Bytes() = %q, want the input %q", short(got), short(in))
		}
		return
	}
	if !c.Truncated() {
		t.Errorf("not Truncated() with %d units and Limit %d", n, L)
	}
	head := bytes.Join(units[:L], nil)
	tail := bytes.Join(units[n-L:], nil)
	if !bytes.HasPrefix(got, head) {
		t.Fatalf("Bytes() = %q does not start with the first %d units %q", short(got), L, short(head))
	}
	if !bytes.HasSuffix(got, tail) || len(got) < len(head)+len(tail) {
		t.Fatalf("Bytes() = %q does not end with the last %d units %q", short(got), L, short(tail))
	}
	marker := got[len(head) : len(got)-len(tail)]
	m := markerRE.FindSubmatch(marker)
	if m == nil {
		t.Fatalf("between head and tail: %q, want a marker line", marker)
	}
	omitted, _ := strconv.Atoi(string(m[1]))
	if omitted != n-2*L {
		t.Errorf("marker says %d omitted, want %d", omitted, n-2*L)
	}
	wantUnit := "bytes"
	if c.Runes {
		wantUnit = "characters"
	}
	if string(m[2]) != wantUnit {
		t.Errorf("marker unit %q, want %q", m[2], wantUnit)
	}
	if c.Runes && !utf8.Valid(got) {
		t.Errorf("Bytes() of valid input is invalid UTF-8: %q", short(got))
	}
}

func short(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%s...(%d bytes)...%s", b[:80], len(b), b[len(b)-80:])
	}
	return string(b)
}

func byteInputs() [][]byte {
	r := rand.New(rand.NewSource(9))
	random := make([]byte, 3000)
	r.Read(random)
	var counting strings.Builder
	for i := 0; counting.Len() < 5000; i++ {
		fmt.Fprintf(&counting, "%d\n", i)
	}
	return [][]byte{
		nil,
		[]byte("a"),
		[]byte("hello"),
		[]byte("0123456789"),
		[]byte("0123456789a"),
		[]byte("é日本🎉"),
		[]byte(counting.String()),
		random,
		bytes.Repeat([]byte("ab"), 10000),
	}
}

func TestCaptureBytes(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 5, 10, 64, 100, 1000, 4999, 5000} {
		for i, in := range byteInputs() {
			for _, sp := range byteSplitters {
				t.Run(fmt.Sprintf("L%d/in%d/%s", limit, i, sp.name), func(t *testing.T) {
					c := &executors.Capture{Limit: limit}
					for _, p := range sp.split(in) {
						n, err := c.Write(p)
						if n != len(p) || err != nil {
							t.Fatalf("Write = %d, %v", n, err)
						}
					}
					checkCapture(t, c, in)
				})
			}
		}
	}
}

// Lengths around the boundaries: exactly 2*Limit, 2*Limit+1, ...
func TestCaptureBoundaries(t *testing.T) {
	for _, runes := range []bool{false, true} {
		for _, limit := range []int{1, 2, 4, 10} {
			for n := 0; n <= 2*limit+3; n++ {
				var in []byte
				for i := 0; i < n; i++ {
					if runes {
						in = append(in, []string{"a", "é", "日", "🎉"}[i%4]...)
					} else {
						in = append(in, byte('a'+i%26))
					}
				}
				splitters := byteSplitters
				if runes {
					splitters = runeSplitters
				}
				for _, sp := range splitters {
					c := &executors.Capture{Limit: limit, Runes: runes}
					for _, p := range sp.split(in) {
						c.Write(p)
					}
					t.Run(fmt.Sprintf("runes=%v/L%d/n%d/%s", runes, limit, n, sp.name), func(t *testing.T) {
						checkCapture(t, c, in)
						if want := n > 2*limit; c.Truncated() != want {
							t.Errorf("Truncated() = %v, want %v", c.Truncated(), want)
						}
					})
				}
			}
		}
	}
}

func runeInputs() [][]byte {
	r := rand.New(rand.NewSource(11))
	alphabet := []rune("aé日本🎉\n\tz€𝄞ß")
	var random strings.Builder
	for i := 0; i < 3000; i++ {
		random.WriteRune(alphabet[r.Intn(len(alphabet))])
	}
	return [][]byte{
		nil,
		[]byte("é"),
		[]byte("日本"),
		[]byte("🎉🎉🎉"),
		[]byte("aé日🎉aé日🎉aé日🎉"),
		[]byte(strings.Repeat("é", 1000)),
		[]byte(strings.Repeat("🎉", 1000)),
		[]byte(strings.Repeat("日本語", 700)),
		[]byte(strings.Repeat("ascii only ", 300)),
		[]byte(random.String()),
	}
}

func TestCaptureRunes(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 7, 10, 100, 999, 1000} {
		for i, in := range runeInputs() {
			for _, sp := range runeSplitters {
				t.Run(fmt.Sprintf("L%d/in%d/%s", limit, i, sp.name), func(t *testing.T) {
					c := &executors.Capture{Limit: limit, Runes: true}
					for _, p := range sp.split(in) {
						c.Write(p)
					}
					checkCapture(t, c, in)
				})
			}
		}
	}
}

// Terminal output is read in chunks that may end in the middle of a
// character; the capture must still count characters and keep them whole.
func TestCaptureRunesSplitCharacters(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 10, 100} {
		for i, in := range runeInputs() {
			for _, sp := range byteSplitters {
				if sp.runeSafe {
					continue
				}
				t.Run(fmt.Sprintf("L%d/in%d/%s", limit, i, sp.name), func(t *testing.T) {
					c := &executors.Capture{Limit: limit, Runes: true}
					for _, p := range sp.split(in) {
						c.Write(p)
					}
					checkCapture(t, c, in)
				})
			}
		}
	}
}

// The simplest reproduction of the bug above, kept separate so it reads
// on its own.
func TestCaptureRunesSplitCharacterMinimal(t *testing.T) {
	c := &executors.Capture{Limit: 2, Runes: true}
	for _, b := range []byte("日本") {
		c.Write([]byte{b})
	}
	if c.Total() != 2 || c.Truncated() || c.String() != "日本" {
		t.Errorf("Total %d, Truncated %v, String %q; want 2, false, %q", c.Total(), c.Truncated(), c.String(), "日本")
	}
}

func TestCaptureInvalidUTF8Runes(t *testing.T) {
	// Invalid bytes count as one unit each and come back unchanged.
	in := []byte("a\xffb\xc3c\x80")
	c := &executors.Capture{Limit: 10, Runes: true}
	c.Write(in)
	if c.Total() != 6 || c.Truncated() || !bytes.Equal(c.Bytes(), in) {
		t.Errorf("Total %d Truncated %v Bytes %q", c.Total(), c.Truncated(), c.Bytes())
	}
}

func TestCaptureLimitZero(t *testing.T) {
	for _, runes := range []bool{false, true} {
		c := &executors.Capture{Runes: runes}
		if c.Truncated() || len(c.Bytes()) != 0 {
			t.Errorf("empty capture: %q", c.Bytes())
		}
		c.Write([]byte("abc"))
		if !c.Truncated() || c.Total() != 3 {
			t.Errorf("runes=%v: Truncated %v Total %d", runes, c.Truncated(), c.Total())
		}
		if m := markerRE.FindSubmatch(c.Bytes()); m == nil || string(m[1]) != "3" {
			t.Errorf("runes=%v: Bytes() = %q, want only a marker of 3", runes, c.Bytes())
		}
	}
}

func TestCaptureReset(t *testing.T) {
	for _, runes := range []bool{false, true} {
		for _, limit := range []int{1, 5, 100} {
			c := &executors.Capture{Limit: limit, Runes: runes}
			inputs := [][]byte{
				[]byte(strings.Repeat("é日x", 500)), // truncated
				[]byte("short"),
				nil,
				[]byte(strings.Repeat("y", 2*limit)), // exactly at the limit
				[]byte(strings.Repeat("🎉", 3*limit)), // truncated again
				[]byte(strings.Repeat("z", limit+1)),
			}
			for round, in := range inputs {
				c.Reset()
				if c.Total() != 0 || c.Truncated() || len(c.Bytes()) != 0 {
					t.Fatalf("runes=%v L%d round %d: after Reset: Total %d Truncated %v Bytes %q", runes, limit, round, c.Total(), c.Truncated(), c.Bytes())
				}
				for _, p := range runeChunks(int64(round), 0)(in) {
					c.Write(p)
				}
				t.Run(fmt.Sprintf("runes=%v/L%d/round%d", runes, limit, round), func(t *testing.T) {
					checkCapture(t, c, in)
				})
			}
		}
	}
}

// Bytes must not expose or disturb the internal buffers.
func TestCaptureBytesIsACopy(t *testing.T) {
	c := &executors.Capture{Limit: 4}
	c.Write([]byte("abcdefgh"))
	b := c.Bytes()
	for i := range b {
		b[i] = 'X'
	}
	if got := c.String(); got != "abcdefgh" {
		t.Errorf("modifying Bytes() changed the capture: %q", got)
	}
	c.Write([]byte("ijkl"))
	b = c.Bytes()
	for i := range b {
		b[i] = 'X'
	}
	c.Write([]byte("m"))
	checkCapture(t, c, []byte("abcdefghijklm"))
}

func TestCaptureMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200 MB")
	}
	for _, runes := range []bool{false, true} {
		t.Run(fmt.Sprintf("runes=%v", runes), func(t *testing.T) {
			const limit = 1000
			chunk := make([]byte, 64<<10)
			if runes {
				// 64 KiB of whole 4-byte characters.
				copy(chunk, bytes.Repeat([]byte("🎉"), len(chunk)/4))
			} else {
				for i := range chunk {
					chunk[i] = byte('a' + i%26)
				}
			}
			perChunk := int64(len(chunk))
			if runes {
				perChunk /= 4
			}
			c := &executors.Capture{Limit: limit, Runes: runes}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			const total = 100 << 20
			n := 0
			for written := 0; written < total; written += len(chunk) {
				c.Write(chunk)
				n++
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
				t.Errorf("the heap grew by %d bytes while writing %d bytes into a Capture of Limit %d", grown, total, limit)
			}
			// Steady state in byte mode: a Write allocates nothing. (In
			// rune mode utf8.RuneCount copies non-ASCII input to a string,
			// which is garbage, not retained memory.)
			if allocs := testing.AllocsPerRun(50, func() { c.Write(chunk); n++ }); !runes && allocs != 0 {
				t.Errorf("Write allocates %v times per call in steady state", allocs)
			}
			runtime.KeepAlive(c)
			if got, want := c.Total(), int64(n)*perChunk; got != want {
				t.Errorf("Total() = %d, want %d", got, want)
			}
			if !c.Truncated() {
				t.Error("not truncated")
			}
			out := c.Bytes()
			maxLen := 2*limit + 200
			if runes {
				maxLen = 2*limit*4 + 200
			}
			if len(out) > maxLen {
				t.Errorf("len(Bytes()) = %d, want <= %d", len(out), maxLen)
			}
			m := regexp.MustCompile(markerRE.String()[1 : len(markerRE.String())-1]).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no marker in %q", short(out))
			}
			if want := strconv.FormatInt(c.Total()-2*limit, 10); string(m[1]) != want {
				t.Errorf("marker says %s omitted, want %s", m[1], want)
			}
		})
	}
}
