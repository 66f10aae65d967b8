package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
)

// ndjsonInputs are chunks of output of every interesting shape.
func ndjsonInputs() [][]byte {
	in := [][]byte{
		nil,
		[]byte(""),
		[]byte("hello world"),
		[]byte("line\n"),
		[]byte("\r\n\t"),
		[]byte(`"quoted"`),
		[]byte(`back\slash\`),
		[]byte(`\"`),
		[]byte(`\u0000`),
		[]byte("\\\\\"\"\\"),
		[]byte("<html>&amp;</html>"),
		[]byte("/ slash"),
		[]byte("é 日本 🎉 \u2028 \u2029 \ufeff"),
		[]byte("\x1b[31mred\x1b[0m"),
		[]byte("\x7f"),
		[]byte("\ufffd"),
		[]byte("tab\there"),
		{0},
		{0, 0, 0},
		// Invalid UTF-8.
		{0xff},
		{0xc3},
		[]byte("abc\xe6\x97"),
		[]byte("\xed\xa0\x80"),
		[]byte("\xc0\xaf"),
		[]byte("ok \x80 not ok"),
		[]byte("\xf4\x90\x80\x80"),
	}
	// Every control character alone and among text.
	var all []byte
	for c := 0; c < 0x20; c++ {
		in = append(in, []byte{byte(c)}, []byte("a"+string(rune(c))+"b"))
		all = append(all, byte(c))
	}
	in = append(in, all)
	// Every byte value.
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	in = append(in, every)
	// Every ASCII byte (valid UTF-8).
	in = append(in, every[:128])
	// Long and random.
	in = append(in, bytes.Repeat([]byte("x\"\\\n"), 10000))
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		b := make([]byte, r.Intn(64))
		for j := range b {
			switch r.Intn(4) {
			case 0:
				b[j] = byte(r.Intn(0x20))
			case 1:
				b[j] = `"\/`[r.Intn(3)]
			default:
				b[j] = byte(r.Intn(256))
			}
		}
		in = append(in, b)
	}
	for i := 0; i < 200; i++ {
		var sb strings.Builder
		for j := r.Intn(32); j > 0; j-- {
			rs := []rune("aé日🎉\n\"\\\x00\x1f\u2028")
			sb.WriteRune(rs[r.Intn(len(rs))])
		}
		in = append(in, []byte(sb.String()))
	}
	return in
}

func TestWriteJSONString(t *testing.T) {
	for _, p := range ndjsonInputs() {
		if !utf8.Valid(p) {
			continue
		}
		var buf bytes.Buffer
		w := bufio.NewWriterSize(&buf, 16) // small: exercise the writer's flushes
		writeJSONString(w, p)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		out := buf.Bytes()
		if !json.Valid(out) {
			t.Errorf("writeJSONString(%q) = %q: not valid JSON", p, out)
			continue
		}
		var s string
		if err := json.Unmarshal(out, &s); err != nil {
			t.Errorf("writeJSONString(%q) = %q: %v", p, out, err)
			continue
		}
		if s != string(p) {
			t.Errorf("writeJSONString(%q) decodes to %q", p, s)
		}
		for _, c := range out {
			if c < 0x20 {
				t.Errorf("writeJSONString(%q) = %q holds a raw control byte %#x", p, out, c)
				break
			}
		}
		// Same decoding as encoding/json's own output.
		std, _ := json.Marshal(string(p))
		var s2 string
		if err := json.Unmarshal(std, &s2); err != nil || s2 != s {
			t.Errorf("encoding/json disagrees for %q: %q vs %q", p, s2, s)
		}
	}
}

func TestWriteJSONStringEscapes(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"a", `"a"`},
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"\n", `"\n"`},
		{"\r", `"\r"`},
		{"\t", `"\t"`},
		{"\x00", `"\u0000"`},
		{"\x01", `"\u0001"`},
		{"\x08", `"\u0008"`},
		{"\x0c", `"\u000c"`},
		{"\x1b", `"\u001b"`},
		{"\x1f", `"\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"<>&/", `"<>&/"`},
		{"é", `"é"`},
		{"a\"b\\c\nd", `"a\"b\\c\nd"`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		writeJSONString(w, []byte(tt.in))
		w.Flush()
		if buf.String() != tt.want {
			t.Errorf("writeJSONString(%q) = %s, want %s", tt.in, buf.String(), tt.want)
		}
	}
}

func TestWriteOutputLine(t *testing.T) {
	for _, stream := range []string{api.StreamStdout, api.StreamStderr, api.StreamPTY} {
		for _, p := range ndjsonInputs() {
			var buf bytes.Buffer
			w := bufio.NewWriterSize(&buf, 16)
			writeOutputLine(w, stream, p)
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			line := buf.Bytes()
			if !bytes.HasSuffix(line, []byte("}\n")) || bytes.Count(line, []byte("\n")) != 1 {
				t.Errorf("writeOutputLine(%q) = %q: not one line", p, line)
				continue
			}
			var sl api.StreamLine
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&sl); err != nil {
				t.Errorf("writeOutputLine(%q) = %q: %v", p, line, err)
				continue
			}
			if sl.Type != api.LineOutput || sl.Stream != stream || sl.Dropped != 0 || sl.Observation != nil || sl.Error != nil {
				t.Errorf("writeOutputLine(%q) = %+v", p, sl)
			}
			var got []byte
			if utf8.Valid(p) {
				if sl.DataB64 != nil {
					t.Errorf("valid UTF-8 %q sent as data_b64", p)
				}
				got = []byte(sl.Data)
				if !bytes.Contains(line, []byte(`"data":"`)) {
					t.Errorf("valid UTF-8 %q has no data field: %q", p, line)
				}
			} else {
				if sl.Data != "" {
					t.Errorf("invalid UTF-8 %q sent as data %q", p, sl.Data)
				}
				got = sl.DataB64
			}
			if !bytes.Equal(got, p) {
				t.Errorf("writeOutputLine(%q) gives back %q (line %q)", p, got, line)
			}
		}
	}
}

func TestWriteDroppedLine(t *testing.T) {
	for _, n := range []int64{1, 4096, 1 << 40} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		writeDroppedLine(w, api.StreamStderr, n)
		w.Flush()
		var sl api.StreamLine
		if err := json.Unmarshal(buf.Bytes(), &sl); err != nil {
			t.Fatalf("%q: %v", buf.Bytes(), err)
		}
		if sl.Type != api.LineOutput || sl.Stream != api.StreamStderr || sl.Dropped != n || sl.Data != "" || sl.DataB64 != nil {
			t.Errorf("dropped line %q = %+v", buf.Bytes(), sl)
		}
	}
}
