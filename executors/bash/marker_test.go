package bash

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const testNonce = "0123456789abcdef01234567"

// mk is a marker as the shell prints it.
func mk(nonce string, code int, cwd string) string {
	return oscPrefix + nonce + ";" + strconv.Itoa(code) + ";" + strconv.Itoa(len(cwd)) + ";" + cwd + "\a"
}

// mkStart is a start marker as the shell prints it.
func mkStart(nonce string) string { return oscPrefix + nonce + ";S\a" }

// ev is one thing the parser reported: text, a marker or a start marker.
type ev struct {
	Text   string
	Marker bool
	Start  bool
	Code   int
	Cwd    string
}

func txt(s string) ev              { return ev{Text: s} }
func mark(code int, cwd string) ev { return ev{Marker: true, Code: code, Cwd: cwd} }
func begun() ev                    { return ev{Marker: true, Start: true} }
func (e ev) String() string {
	if e.Start {
		return "start"
	}
	if e.Marker {
		return fmt.Sprintf("marker(%d,%q)", e.Code, e.Cwd)
	}
	return fmt.Sprintf("text(%q)", e.Text)
}

// feedAll feeds the chunks and returns the events, adjacent texts joined,
// and what the parser still holds.
func feedAll(nonce string, chunks [][]byte) (events []ev, held string) {
	m := newMarkerParser(nonce)
	for _, c := range chunks {
		m.Feed(c, func(p []byte) {
			if n := len(events); n > 0 && !events[n-1].Marker {
				events[n-1].Text += string(p)
				return
			}
			events = append(events, txt(string(p)))
		}, func(code int, cwd string) {
			events = append(events, mark(code, cwd))
		}, func() {
			events = append(events, begun())
		})
	}
	// Empty text pieces are harmless; drop them so comparisons are exact.
	out := events[:0]
	for _, e := range events {
		if e.Marker || e.Text != "" {
			out = append(out, e)
		}
	}
	return out, string(m.pend)
}

// feedReused is feedAll with every chunk passed in one buffer that is
// overwritten after each Feed, as a read loop does: the parser must not
// keep references to the caller's buffer.
func feedReused(nonce string, chunks [][]byte) (events []ev, held string) {
	m := newMarkerParser(nonce)
	buf := make([]byte, 0, 64)
	for _, c := range chunks {
		buf = append(buf[:0], c...)
		m.Feed(buf, func(p []byte) {
			if n := len(events); n > 0 && !events[n-1].Marker {
				events[n-1].Text += string(p)
				return
			}
			events = append(events, txt(string(p)))
		}, func(code int, cwd string) {
			events = append(events, mark(code, cwd))
		}, func() {
			events = append(events, begun())
		})
		for i := range buf {
			buf[i] = 'Z'
		}
	}
	out := events[:0]
	for _, e := range events {
		if e.Marker || e.Text != "" {
			out = append(out, e)
		}
	}
	return out, string(m.pend)
}

type markerCase struct {
	name   string
	stream string
	want   []ev
	held   string // bytes still held at the end (a possible marker start)
}

func markerCases() []markerCase {
	N := testNonce
	long := "/" + strings.Repeat("d", maxCwd-1)
	return []markerCase{
		{"empty", "", nil, ""},
		{"text only", "hello\nworld\r\n", []ev{txt("hello\nworld\r\n")}, ""},
		{"marker only", mk(N, 0, "/"), []ev{mark(0, "/")}, ""},
		{"text marker text", "out\n" + mk(N, 1, "/tmp") + "more", []ev{txt("out\n"), mark(1, "/tmp"), txt("more")}, ""},
		{"two markers back to back", mk(N, 0, "/a") + mk(N, 2, "/b"), []ev{mark(0, "/a"), mark(2, "/b")}, ""},
		{"markers with text between", "a" + mk(N, 0, "/") + "b\n" + mk(N, 127, "/x") + "c", []ev{txt("a"), mark(0, "/"), txt("b\n"), mark(127, "/x"), txt("c")}, ""},
		{"exit code 255", mk(N, 255, "/"), []ev{mark(255, "/")}, ""},
		{"exit code 130", "^C" + mk(N, 130, "/"), []ev{txt("^C"), mark(130, "/")}, ""},
		{"exit code with leading zeros", oscPrefix + N + ";007;1;/\a", []ev{mark(7, "/")}, ""},
		{"empty cwd", mk(N, 0, ""), []ev{mark(0, "")}, ""},
		{"cwd with semicolons", mk(N, 0, "/a;b;;c;"), []ev{mark(0, "/a;b;;c;")}, ""},
		{"cwd with BEL", mk(N, 0, "/a\ab\a"), []ev{mark(0, "/a\ab\a")}, ""},
		{"cwd with newline and spaces", mk(N, 0, "/my dir/\nnext line/ "), []ev{mark(0, "/my dir/\nnext line/ ")}, ""},
		{"cwd with UTF-8", mk(N, 0, "/home/é/日本/🎉"), []ev{mark(0, "/home/é/日本/🎉")}, ""},
		{"cwd with ESC and a fake marker", mk(N, 0, "/x"+mk(N, 9, "/y")), []ev{mark(0, "/x"+mk(N, 9, "/y"))}, ""},
		{"cwd of maxCwd bytes", "t" + mk(N, 0, long) + "u", []ev{txt("t"), mark(0, long), txt("u")}, ""},
		{"ANSI colors", "\x1b[31mred\x1b[0m\x1b[1;32m", []ev{txt("\x1b[31mred\x1b[0m\x1b[1;32m")}, ""},
		{"ANSI then marker", "\x1b[0m" + mk(N, 0, "/") + "\x1b[K", []ev{txt("\x1b[0m"), mark(0, "/"), txt("\x1b[K")}, ""},
		{"other OSC", "\x1b]0;title\a\x1b]697x", []ev{txt("\x1b]0;title\a\x1b]697x")}, ""},
		{"other OSC 697", "\x1b]6970;" + N + ";0;1;/\a", []ev{txt("\x1b]6970;" + N + ";0;1;/\a")}, ""},
		{"double ESC before marker", "\x1b\x1b" + mk(N, 3, "/"), []ev{txt("\x1b\x1b"), mark(3, "/")}, ""},
		{"many ESCs", strings.Repeat("\x1b", 10) + "x", []ev{txt(strings.Repeat("\x1b", 10) + "x")}, ""},
		{"start marker", mkStart(N), []ev{begun()}, ""},
		{"start, output, marker", mkStart(N) + "out\n" + mk(N, 0, "/"), []ev{begun(), txt("out\n"), mark(0, "/")}, ""},
		{"start marker of another nonce", mkStart("deadbeef") + "x", []ev{txt(mkStart("deadbeef") + "x")}, ""},
		{"start without BEL", oscPrefix + N + ";Sx" + mk(N, 0, "/"), []ev{txt(oscPrefix + N + ";Sx"), mark(0, "/")}, ""},
		{"start at end", "x" + oscPrefix + N + ";S", []ev{txt("x")}, oscPrefix + N + ";S"},

		// Wrong nonces are text.
		{"wrong nonce", mk("deadbeef", 0, "/") + "x", []ev{txt(mk("deadbeef", 0, "/") + "x")}, ""},
		{"nonce prefix", mk(N[:10], 0, "/"), []ev{txt(mk(N[:10], 0, "/"))}, ""},
		{"nonce extended", mk(N+"0", 0, "/"), []ev{txt(mk(N+"0", 0, "/"))}, ""},
		{"empty nonce", mk("", 0, "/"), []ev{txt(mk("", 0, "/"))}, ""},
		{"wrong nonce then right", mk("bad", 1, "/b") + mk(N, 2, "/g"), []ev{txt(mk("bad", 1, "/b")), mark(2, "/g")}, ""},

		// Malformed markers are text, and parsing recovers.
		{"non-digit code", oscPrefix + N + ";x;1;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";x;1;/\a"), mark(0, "/ok")}, ""},
		{"negative code", oscPrefix + N + ";-1;1;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";-1;1;/\a"), mark(0, "/ok")}, ""},
		{"empty code", oscPrefix + N + ";;1;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";;1;/\a"), mark(0, "/ok")}, ""},
		{"code too long", oscPrefix + N + ";1234;1;/\a" + mk(N, 5, "/ok"), []ev{txt(oscPrefix + N + ";1234;1;/\a"), mark(5, "/ok")}, ""},
		{"code much too long", oscPrefix + N + ";" + strings.Repeat("9", 40) + ";1;/\a" + mk(N, 5, "/ok"), []ev{txt(oscPrefix + N + ";" + strings.Repeat("9", 40) + ";1;/\a"), mark(5, "/ok")}, ""},
		{"non-digit length", oscPrefix + N + ";0;a;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";0;a;/\a"), mark(0, "/ok")}, ""},
		{"empty length", oscPrefix + N + ";0;;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";0;;/\a"), mark(0, "/ok")}, ""},
		{"length over maxCwd", oscPrefix + N + ";0;4097;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";0;4097;/\a"), mark(0, "/ok")}, ""},
		{"length too many digits", oscPrefix + N + ";0;00001;/\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";0;00001;/\a"), mark(0, "/ok")}, ""},
		{"missing BEL", oscPrefix + N + ";0;1;/X" + mk(N, 4, "/ok") + "end", []ev{txt(oscPrefix + N + ";0;1;/X"), mark(4, "/ok"), txt("end")}, ""},
		{"cwd shorter than claimed", oscPrefix + N + ";0;5;/\a" + mk(N, 0, "/ok") + "end", []ev{txt(oscPrefix + N + ";0;5;/\a"), mark(0, "/ok"), txt("end")}, ""},
		{"cwd longer than claimed", oscPrefix + N + ";0;1;/ab\a" + mk(N, 0, "/ok"), []ev{txt(oscPrefix + N + ";0;1;/ab\a"), mark(0, "/ok")}, ""},
		{"claimed maxCwd but no BEL", oscPrefix + N + ";0;4096;" + strings.Repeat("x", 5000) + mk(N, 1, "/ok"), []ev{txt(oscPrefix + N + ";0;4096;" + strings.Repeat("x", 5000)), mark(1, "/ok")}, ""},

		// Incomplete markers at the end are held.
		{"lone ESC at end", "abc\x1b", []ev{txt("abc")}, "\x1b"},
		{"partial prefix at end", "abc\x1b]69", []ev{txt("abc")}, "\x1b]69"},
		{"prefix and part of nonce at end", "abc" + oscPrefix + N[:5], []ev{txt("abc")}, oscPrefix + N[:5]},
		{"partial code at end", "x" + oscPrefix + N + ";12", []ev{txt("x")}, oscPrefix + N + ";12"},
		{"partial length at end", "x" + oscPrefix + N + ";1;40", []ev{txt("x")}, oscPrefix + N + ";1;40"},
		{"partial cwd at end", "x" + oscPrefix + N + ";1;4;/ab", []ev{txt("x")}, oscPrefix + N + ";1;4;/ab"},
		{"marker without BEL yet", mk(N, 0, "/") + oscPrefix + N + ";1;1;/", []ev{mark(0, "/")}, oscPrefix + N + ";1;1;/"},
		{"partial prefix mismatch", "\x1b]69x", []ev{txt("\x1b]69x")}, ""},
	}
}

// splits returns ways to cut s into chunks.
func splits(s string) map[string][][]byte {
	b := []byte(s)
	out := map[string][][]byte{
		"whole":          {b},
		"byte at a time": nil,
	}
	for i := range b {
		out["byte at a time"] = append(out["byte at a time"], b[i:i+1])
	}
	for i := 0; i <= len(b); i++ {
		out[fmt.Sprintf("cut at %d", i)] = [][]byte{b[:i], b[i:]}
	}
	if len(b) <= 80 {
		for i := 0; i <= len(b); i++ {
			for j := i; j <= len(b); j++ {
				out[fmt.Sprintf("cut at %d,%d", i, j)] = [][]byte{b[:i], b[i:j], b[j:]}
			}
		}
	}
	r := rand.New(rand.NewSource(int64(len(b))))
	for k := 0; k < 5; k++ {
		var chunks [][]byte
		for p := b; len(p) > 0; {
			n := min(1+r.Intn(17), len(p))
			chunks = append(chunks, p[:n])
			p = p[n:]
		}
		out[fmt.Sprintf("random %d", k)] = chunks
	}
	return out
}

func TestMarkerParser(t *testing.T) {
	for _, tc := range markerCases() {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for name, chunks := range splits(tc.stream) {
				got, held := feedReused(testNonce, chunks)
				if !reflect.DeepEqual(got, tc.want) || held != tc.held {
					t.Errorf("%s:\n got %v, held %q\nwant %v, held %q", name, got, held, tc.want, tc.held)
					if n++; n > 5 {
						t.FailNow()
					}
				}
			}
		})
	}
}

// A lone ESC at the end of a chunk is decided by the next chunk.
func TestMarkerParserHeldESC(t *testing.T) {
	tests := []struct {
		chunks []string
		want   []ev
	}{
		{[]string{"abc\x1b", "[0m"}, []ev{txt("abc"), txt("\x1b[0m")}},
		{[]string{"abc\x1b", "]697;" + testNonce + ";0;1;/\a"}, []ev{txt("abc"), mark(0, "/")}},
		{[]string{"\x1b", "\x1b", mk(testNonce, 0, "/")[1:]}, []ev{txt("\x1b"), mark(0, "/")}},
		{[]string{"\x1b", "", "", "x"}, []ev{txt("\x1bx")}},
	}
	for _, tt := range tests {
		m := newMarkerParser(testNonce)
		var got []ev
		for i, c := range tt.chunks {
			m.Feed([]byte(c), func(p []byte) { got = append(got, txt(string(p))) }, func(code int, cwd string) { got = append(got, mark(code, cwd)) }, nil)
			if i == 0 && len(m.pend) == 0 && strings.HasSuffix(c, "\x1b") {
				t.Errorf("%q: the trailing ESC was not held", c)
			}
		}
		// Join adjacent texts.
		var joined []ev
		for _, e := range got {
			if n := len(joined); n > 0 && !e.Marker && !joined[n-1].Marker {
				joined[n-1].Text += e.Text
				continue
			}
			joined = append(joined, e)
		}
		var want []ev
		for _, e := range tt.want {
			if n := len(want); n > 0 && !e.Marker && !want[n-1].Marker {
				want[n-1].Text += e.Text
				continue
			}
			want = append(want, e)
		}
		if !reflect.DeepEqual(joined, want) {
			t.Errorf("%q: got %v, want %v", tt.chunks, joined, want)
		}
	}
}

// The parser holds at most one possible marker.
func TestMarkerParserPendingBounded(t *testing.T) {
	m := newMarkerParser(testNonce)
	var text int
	noop := func(code int, cwd string) { t.Errorf("unexpected marker %d %q", code, cwd) }
	m.Feed([]byte(oscPrefix+testNonce+";0;4096;"), func(p []byte) { text += len(p) }, noop, nil)
	bound := len(oscPrefix) + len(testNonce) + 1 + 4 + 5 + maxCwd + 1
	for i := 0; i < 10000; i++ {
		m.Feed([]byte("x"), func(p []byte) { text += len(p) }, noop, nil)
		if len(m.pend) > bound {
			t.Fatalf("after %d bytes the parser holds %d bytes (bound %d)", i, len(m.pend), bound)
		}
	}
	if len(m.pend) != 0 {
		t.Errorf("still holding %d bytes", len(m.pend))
	}
	if want := len(oscPrefix+testNonce+";0;4096;") + 10000; text != want {
		t.Errorf("text %d bytes, want %d", text, want)
	}
}

// Every byte of output is either text or part of a marker: the texts and
// the markers (re-encoded) rebuild the stream, for any chunking.
func TestMarkerParserRebuildsStream(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	pieces := []string{"a", "\n", "\x1b", "\x1b[0m", "\x1b]697;", testNonce, ";", "0", "12", "é", "日",
		mk(testNonce, 0, "/"), mk(testNonce, 1, "/a;b\a"), mk("other", 0, "/"), "\a", mkStart(testNonce), "S"}
	for trial := 0; trial < 2000; trial++ {
		var sb strings.Builder
		for k := r.Intn(20); k > 0; k-- {
			sb.WriteString(pieces[r.Intn(len(pieces))])
		}
		stream := sb.String()
		whole, heldW := feedAll(testNonce, [][]byte{[]byte(stream)})
		var rebuilt strings.Builder
		for _, e := range whole {
			switch {
			case e.Start:
				rebuilt.WriteString(mkStart(testNonce))
			case e.Marker:
				rebuilt.WriteString(mk(testNonce, e.Code, e.Cwd))
			default:
				rebuilt.WriteString(e.Text)
			}
		}
		rebuilt.WriteString(heldW)
		if rebuilt.String() != stream {
			t.Fatalf("stream %q rebuilt as %q", stream, rebuilt.String())
		}
		var chunks [][]byte
		for p := []byte(stream); len(p) > 0; {
			n := min(1+r.Intn(6), len(p))
			chunks = append(chunks, p[:n])
			p = p[n:]
		}
		split, heldS := feedAll(testNonce, chunks)
		if !reflect.DeepEqual(split, whole) || heldS != heldW {
			t.Fatalf("stream %q: whole %v held %q; split %v held %q", stream, whole, heldW, split, heldS)
		}
	}
}

var leadingZero = regexp.MustCompile(`;0[0-9]`)

func FuzzMarkerParser(f *testing.F) {
	for _, tc := range markerCases() {
		f.Add([]byte(tc.stream), uint(len(tc.stream)/2))
	}
	f.Add([]byte(mk(testNonce, 0, "/")), uint(3))
	f.Add([]byte(mkStart(testNonce)+"out\n"+mk(testNonce, 0, "/")), uint(30))
	f.Fuzz(func(t *testing.T, data []byte, cut uint) {
		at := int(cut % uint(len(data)+1))
		whole, heldW := feedAll(testNonce, [][]byte{data})
		split, heldS := feedAll(testNonce, [][]byte{data[:at], data[at:]})
		if !reflect.DeepEqual(whole, split) || heldW != heldS {
			t.Fatalf("cut at %d of %q:\nwhole %v held %q\nsplit %v held %q", at, data, whole, heldW, split, heldS)
		}
		bytewise := make([][]byte, len(data))
		for i := range data {
			bytewise[i] = data[i : i+1]
		}
		if len(data) <= 1<<12 {
			one, heldO := feedAll(testNonce, bytewise)
			if !reflect.DeepEqual(whole, one) || heldW != heldO {
				t.Fatalf("byte at a time of %q:\nwhole %v held %q\nbytes %v held %q", data, whole, heldW, one, heldO)
			}
		}
		// Without ESC everything is text.
		if bytes.IndexByte(data, 0x1b) < 0 {
			if len(data) == 0 && len(whole) != 0 || len(data) > 0 && (len(whole) != 1 || whole[0].Text != string(data)) {
				t.Fatalf("%q without ESC gave %v", data, whole)
			}
		}
		// Texts and markers rebuild the input (codes are re-encoded
		// without leading zeros, so compare only when none were used).
		var rebuilt strings.Builder
		total := len(heldW)
		for _, e := range whole {
			if e.Start {
				rebuilt.WriteString(mkStart(testNonce))
				continue
			}
			if e.Marker {
				if e.Code < 0 || e.Code > 999 || len(e.Cwd) > maxCwd {
					t.Fatalf("marker out of range: %v", e)
				}
				rebuilt.WriteString(mk(testNonce, e.Code, e.Cwd))
				continue
			}
			total += len(e.Text)
			rebuilt.WriteString(e.Text)
		}
		rebuilt.WriteString(heldW)
		if total > len(data) {
			t.Fatalf("more text than input: %d > %d", total, len(data))
		}
		if !leadingZero.Match(data) && rebuilt.String() != string(data) {
			t.Fatalf("%q rebuilt as %q", data, rebuilt.String())
		}
	})
}

// ---------------------------------------------------------------------------
// typeCommand and initScript

func typeCommandInputs() map[string]string {
	var all strings.Builder
	for c := 1; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	var kb20 strings.Builder
	for i := 0; kb20.Len() < 20<<10; i++ {
		fmt.Fprintf(&kb20, "echo 'line %d' \"$HOME\" \\\\ é;\n", i)
	}
	return map[string]string{
		"empty":                 "",
		"simple":                "ls -la /tmp",
		"single quotes":         `echo 'it''s' 'a b'`,
		"lone single quote":     `'`,
		"double quotes":         `echo "a \"b\" c"`,
		"backslashes":           `printf '%s\n' a\\b \\ \\\\ '\'`,
		"trailing backslash":    `echo \`,
		"dollar vars":           `echo $HOME ${PATH} $'x' $"y" $(pwd) ` + "`date`" + ` $((1+2)) $1 $@ $$`,
		"history chars":         `echo !! !$ ^a^b !-1`,
		"newlines":              "echo a\necho b\n\n",
		"crlf":                  "echo a\r\necho b\r\n",
		"tabs":                  "echo\ta\tb",
		"control chars":         "echo \x01\x02\x03\x04 \x7f \x1b[31m \x15\x17\x16\x1a\x1c",
		"ctrl-c and ctrl-d":     "\x03\x04",
		"hex-looking escapes":   "a\x01ab\x1fff\\x41\\x",
		"heredoc":               "cat <<'EOF'\n$HOME `x` 'q' \"d\" \\\nEOF\ncat <<EOF\n$HOME\nEOF",
		"utf-8":                 "echo é 日本語 🎉 \u2028 \ufeff",
		"invalid utf-8":         "echo \xff\xfe \xc3 \xe6\x97",
		"percent":               "printf '%s %d %%\\n' a 1",
		"all bytes":             all.String(),
		"20 KB command":         kb20.String(),
		"long line no breaks":   strings.Repeat("a", 9000),
		"long utf-8":            strings.Repeat("日本🎉é", 2000),
		"long quotes":           strings.Repeat(`'\`, 5000),
		"long control":          strings.Repeat("\x01", 5000),
		"utf-8 across a line":   strings.Repeat("a", lineMax-1) + strings.Repeat("🎉", 10),
		"utf-8 across a line 2": strings.Repeat("a", lineMax) + strings.Repeat("日", 10),
		"utf-8 across a line 3": strings.Repeat("a", lineMax+1) + strings.Repeat("é", 10),
	}
}

func TestTypeCommandPrintable(t *testing.T) {
	for name, cmd := range typeCommandInputs() {
		out := typeCommand(cmd)
		for i, c := range out {
			if !(c >= 0x20 && c <= 0x7e || c == '\n' || c >= 0x80) {
				t.Errorf("%s: byte %d of the typed text is %#x", name, i, c)
				break
			}
		}
		for i, line := range bytes.Split(out, []byte("\n")) {
			if len(line) > 4000 {
				t.Errorf("%s: line %d is %d bytes long", name, i, len(line))
			}
		}
		if !bytes.HasSuffix(out, []byte("\n")) {
			t.Errorf("%s: the typed text does not end with a newline", name)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, `eval "$__sbx_c"`) || !strings.Contains(last, "__sbx_p") || !strings.Contains(last, "__sbx_m=1") {
			t.Errorf("%s: last line %q does not run the command and the marker", name, last)
		}
	}
}

func requireBash(t *testing.T) string {
	t.Helper()
	const path = "/bin/bash"
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("bash is required in CI: %v", err)
		}
		t.Skipf("no bash: %v", err)
	}
	return path
}

// locales are the locales the shell may run in; the typed text must mean
// the same in each.
func locales(t *testing.T) []string {
	out := []string{"C"}
	if b, err := exec.Command("locale", "-a").Output(); err == nil {
		for _, l := range strings.Fields(string(b)) {
			if strings.EqualFold(l, "C.utf8") || strings.EqualFold(l, "C.UTF-8") || strings.EqualFold(l, "en_US.utf8") {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func TestTypeCommandRoundTripsThroughBash(t *testing.T) {
	bash := requireBash(t)
	for _, loc := range locales(t) {
		for name, cmd := range typeCommandInputs() {
			t.Run(loc+"/"+name, func(t *testing.T) {
				typed := strings.TrimSuffix(string(typeCommand(cmd)), "\n")
				i := strings.LastIndexByte(typed, '\n')
				if i < 0 || !strings.Contains(typed[i+1:], `eval "$__sbx_c"`) {
					t.Fatalf("no eval line in %q", typed)
				}
				script := typed[:i+1] + `printf %s "$__sbx_c"` + "\n"
				c := exec.Command(bash, "--norc", "--noprofile", "-c", script)
				c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=" + loc, "HOME=/nonexistent"}
				var stderr bytes.Buffer
				c.Stderr = &stderr
				out, err := c.Output()
				if err != nil {
					t.Fatalf("bash: %v: %s", err, stderr.Bytes())
				}
				if stderr.Len() > 0 {
					t.Errorf("bash wrote to stderr: %s", stderr.Bytes())
				}
				if string(out) != cmd {
					t.Errorf("bash assigned %d bytes %q, want %d bytes %q", len(out), trunc(out), len(cmd), trunc([]byte(cmd)))
				}
			})
		}
	}
}

func trunc(b []byte) string {
	if len(b) > 120 {
		return fmt.Sprintf("%q...%q", b[:60], b[len(b)-60:])
	}
	return string(b)
}

// The init script's marker function reports the exit code and the cwd (in
// bytes, whatever the locale), and never fails.
func TestInitScriptMarker(t *testing.T) {
	bash := requireBash(t)
	base := t.TempDir()
	dirs := []string{
		"plain",
		"with space",
		"semi;colon;",
		"bel\abel",
		"new\nline",
		"é日本🎉",
		"esc\x1b]697;x",
	}
	nonce := newNonce()
	for _, loc := range locales(t) {
		for _, d := range dirs {
			dir := filepath.Join(base, d)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"", "set -eu; "} {
				name := fmt.Sprintf("%s/%q/%q", loc, d, mode)
				// Quote the dir for the shell with printf %q's cousin:
				// pass it in the environment instead.
				script := mode + initScript(nonce) + `cd "$TARGET"; __sbx_m=1; (exit 37) || __sbx_p; __sbx_p; echo after` + "\n"
				c := exec.Command(bash, "--norc", "--noprofile", "-c", script)
				c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=" + loc, "LANG=" + loc, "TARGET=" + dir}
				var stderr bytes.Buffer
				c.Stderr = &stderr
				out, err := c.Output()
				if err != nil {
					t.Errorf("%s: bash: %v: %s", name, err, stderr.Bytes())
					continue
				}
				got, held := feedAll(nonce, [][]byte{out})
				// The first __sbx_p prints the marker; the second has
				// nothing to report.
				want := []ev{mark(37, dir), txt("after\n")}
				if !reflect.DeepEqual(got, want) || held != "" {
					t.Errorf("%s: output %q parsed as %v held %q, want %v", name, out, got, held, want)
				}
			}
		}
	}
}

// newNonce makes unpredictable markers.
func TestNewNonce(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n := newNonce()
		if len(n) != 24 || strings.Trim(n, "0123456789abcdef") != "" {
			t.Fatalf("nonce %q", n)
		}
		if seen[n] {
			t.Fatalf("nonce %q repeated", n)
		}
		seen[n] = true
	}
	// The nonce is safe to put unquoted in the init script.
	if s := initScript("abc"); !strings.Contains(s, "__sbx_n=abc;") || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		t.Errorf("initScript = %q", s)
	}
}

// The whole path through an interactive bash (without a terminal): the
// init script, then commands typed with typeCommand; each command's output
// is followed by its marker.
func TestTypedCommandsInInteractiveBash(t *testing.T) {
	bash := requireBash(t)
	dir := filepath.Join(t.TempDir(), "d ;\nx é")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nonce := newNonce()
	type step struct {
		cmd  string
		out  string
		code int
		cwd  string // "" means unchanged
	}
	steps := []step{
		{"echo hello", "hello\n", 0, ""},
		{"false", "", 1, ""},
		{"(exit 42)", "", 42, ""},
		{"x='a b'; y=$'c\\td'", "", 0, ""},
		{`printf '%s|%s\n' "$x" "$y"`, "a b|c\td\n", 0, ""},
		{"cd \"$TARGET\"", "", 0, dir},
		{"pwd", dir + "\n", 0, ""},
		{"for i in 1 2 3; do\n  echo $i\ndone", "1\n2\n3\n", 0, ""},
		{"cat <<'EOF'\n$HOME 'q' \"d\" \\ !!\nEOF", "$HOME 'q' \"d\" \\ !!\n", 0, ""},
		{"echo it\\'s !! \"!!\" '!!'", "it's !! !! !!\n", 0, ""},
		{"printf '\\033]697;deadbeef;0;1;/\\007'", "\x1b]697;deadbeef;0;1;/\a", 0, ""},
		{"if then fi", "", 2, ""},
		{"f() { echo in f; return 3; }", "", 0, ""},
		{"f", "in f\n", 3, ""},
		{"echo " + strings.Repeat("z", 20000), strings.Repeat("z", 20000) + "\n", 0, ""},
		{"echo é日本🎉", "é日本🎉\n", 0, ""},
		{"echo \x01\x7f|od -An -c | tr -s ' '", " 001 177 \\n\n", 0, ""},
		{"cd /", "", 0, "/"},
	}
	var in bytes.Buffer
	in.WriteString(initScript(nonce))
	for _, s := range steps {
		in.Write(typeCommand(s.cmd))
	}
	c := exec.Command(bash, "--noprofile", "--norc", "--noediting", "-i")
	c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TARGET=" + dir, "HOME=/root"}
	c.Dir = "/tmp"
	c.Stdin = &in
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, _ := c.Output() // exits with the last status at EOF
	got, held := feedAll(nonce, [][]byte{out})
	if held != "" {
		t.Errorf("held %q", held)
	}
	want := []ev{mark(0, "/tmp")} // the first prompt
	cwd := "/tmp"
	for _, s := range steps {
		want = append(want, begun())
		if s.out != "" {
			want = append(want, txt(s.out))
		}
		if s.cwd != "" {
			cwd = s.cwd
		}
		want = append(want, mark(s.code, cwd))
	}
	if !reflect.DeepEqual(got, want) {
		for i := 0; i < max(len(got), len(want)); i++ {
			var g, w ev
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("event %d: got %.200v, want %.200v", i, g, w)
			}
		}
		t.Logf("stderr: %.2000s", stderr.Bytes())
	}
	if !utf8.Valid(out) {
		t.Logf("note: output is not valid UTF-8")
	}
}
