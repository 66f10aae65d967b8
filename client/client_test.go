package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
)

// dataValues are chunks of output of every shape.
func dataValues() []string {
	vals := []string{
		"a",
		"hello world\n",
		"\r\n\t",
		`"`,
		`\`,
		`\"`,
		`"\`,
		`\\`,
		`\n`,
		`\u0000`,
		`"}`,
		`\"}`,
		`","data":"`,
		"x\"}",
		"<html> & </html>",
		"/slash/",
		"é 日本 🎉",
		"\u2028\u2029",
		"\ufeff\ufffd",
		"\x7f",
		"\x1b[31mred\x1b[0m",
		"\x00\x01\x1f",
		"\b\f",
		strings.Repeat("x\"\\\n", 1000),
		"invalid \xff utf-8",
		"\xc3",
	}
	for c := 0; c < 0x20; c++ {
		vals = append(vals, string(rune(c)), "a"+string(rune(c))+"b")
	}
	var all strings.Builder
	for c := 1; c < 0x80; c++ {
		all.WriteByte(byte(c))
	}
	vals = append(vals, all.String())
	r := rand.New(rand.NewSource(5))
	alphabet := []rune("ab\"\\/\n\r\t\x00\x01\x1f\x7f<>&é日🎉\u2028")
	for i := 0; i < 500; i++ {
		var sb strings.Builder
		for k := 1 + r.Intn(20); k > 0; k-- {
			sb.WriteRune(alphabet[r.Intn(len(alphabet))])
		}
		vals = append(vals, sb.String())
	}
	return vals
}

// daemonLine writes an output line the way the daemon's writeOutputLine
// does (only control characters, '"' and '\' escaped; no HTML escaping).
func daemonLine(stream string, p []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"output","stream":"` + stream)
	if !utf8.Valid(p) {
		b.WriteString(`","data_b64":"` + base64.StdEncoding.EncodeToString(p) + `"}`)
		return b.Bytes()
	}
	b.WriteString(`","data":"`)
	for _, c := range p {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`"}`)
	return b.Bytes()
}

// parseSafe calls parseOutputLine, turning a panic into a test failure.
func parseSafe(t *testing.T, line []byte) (out Output, ok bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("parseOutputLine(%q) panicked: %v", line, r)
			ok = false
		}
	}()
	return parseOutputLine(line)
}

// agree checks that when parseOutputLine recognises line, it says what
// encoding/json says.
func agree(t *testing.T, line []byte) (Output, bool) {
	t.Helper()
	out, ok := parseSafe(t, line)
	if !ok {
		return out, false
	}
	var sl api.StreamLine
	if err := json.Unmarshal(line, &sl); err != nil {
		t.Errorf("parseOutputLine accepted %q, which encoding/json refuses: %v", line, err)
		return out, ok
	}
	want := []byte(sl.Data)
	if sl.DataB64 != nil {
		want = sl.DataB64
	}
	if sl.Type != api.LineOutput || out.Stream != sl.Stream || !bytes.Equal(out.Data, want) || sl.Dropped != 0 || out.Dropped != 0 {
		t.Errorf("parseOutputLine(%q) = %q %q, encoding/json says %+v", line, out.Stream, out.Data, sl)
	}
	return out, ok
}

func TestParseOutputLineAgreesWithEncodingJSON(t *testing.T) {
	for _, stream := range []string{api.StreamStdout, api.StreamStderr, api.StreamPTY} {
		for _, d := range dataValues() {
			line, err := json.Marshal(api.StreamLine{Type: api.LineOutput, Stream: stream, Data: d})
			if err != nil {
				t.Fatal(err)
			}
			out, ok := agree(t, line)
			// Plain text without characters encoding/json writes as
			// \u escapes above 0x7f is recognised.
			if utf8.ValidString(d) && !strings.ContainsAny(d, "\u2028\u2029") && ok != true {
				t.Errorf("parseOutputLine(%q) did not recognise an encoding/json line", line)
			}
			if ok && string(out.Data) != strings.ToValidUTF8(d, "\ufffd") {
				t.Errorf("parseOutputLine(%q) = %q, want %q", line, out.Data, d)
			}
		}
	}
}

func TestParseOutputLineDaemonFormat(t *testing.T) {
	for _, d := range dataValues() {
		line := daemonLine(api.StreamPTY, []byte(d))
		out, ok := agree(t, line)
		if !utf8.ValidString(d) {
			if ok {
				t.Errorf("data_b64 line %q taken by the fast path", line)
			}
			continue
		}
		if !ok {
			t.Errorf("daemon line %q not recognised", line)
			continue
		}
		if string(out.Data) != d || out.Stream != api.StreamPTY {
			t.Errorf("daemon line %q = %q %q, want %q", line, out.Stream, out.Data, d)
		}
	}
	// The empty chunk.
	out, ok := agree(t, []byte(`{"type":"output","stream":"stdout","data":""}`))
	if !ok || len(out.Data) != 0 || out.Stream != "stdout" {
		t.Errorf("empty data: %+v %v", out, ok)
	}
}

func TestParseOutputLineUnrecognised(t *testing.T) {
	lines := []string{
		``,
		`{}`,
		`{"type":"output"}`,
		`{"type":"output","stream":"stdout"}`,
		`{"type":"output","stream":"stdout"`,
		`{"type":"output","stream":"stdout","data_b64":"aGk="}`,
		`{"type":"output","stream":"stdout","dropped":12}`,
		`{"type":"output","stream":"stdout","data":"a","dropped":12}`,
		`{"type":"output","stream":"stdout","data":"a","x":"b"}`,
		`{"type":"output","stream":"stdout","data":"a\n","x":"b"}`,
		`{"type":"output","stream":"stdout","data":"a\\","x":"b"}`,
		`{"type":"output","stream":"stdout","data":"a" }`,
		`{"type":"output","stream":"stdout","data":"a"} `,
		"{\"type\":\"output\",\"stream\":\"stdout\",\"data\":\"a\"}\r",
		`{"type":"output", "stream":"stdout","data":"a"}`,
		`{"stream":"stdout","type":"output","data":"a"}`,
		`{"type":"observation","observation":{"kind":"run"}}`,
		`{"type":"error","error":{"code":"internal","message":"x"}}`,
		`{"type":"output","stream":"stdout","data":"\u2028"}`,
		`{"type":"output","stream":"stdout","data":"\u00e9"}`,
		`{"type":"output","stream":"stdout","data":"\ud83c\udf89"}`,
		`{"type":"output","stream":"stdout","data":"\u00"}`,
		`{"type":"output","stream":"stdout","data":"\u00zz"}`,
		`{"type":"output","stream":"stdout","data":"\u+041"}`,
		`{"type":"output","stream":"stdout","data":"\x41"}`,
		`{"type":"output","stream":"stdout","data":"\a"}`,
		`{"type":"output","stream":"stdout","data":"\"}`,
		`{"type":"output","stream":"stdout","data":"\\\"}`,
		`{"type":"output","stream":"stdout","data":"a"b"}`,
		`{"type":"output","stream":"stdout","data":"a\"b"c"}`,
		`{"type":"output","stream":"stdout","data":a}`,
		`{"type":"output","stream":"stdout","data":1}`,
		`{"type":"output","stream":"stdout","data":null}`,
		`{"type":"output","stream":"std\"out","data":"a"}`,
		`{"type":"output","stream":"stdout","data":"a"}{"type":"output","stream":"stdout","data":"b"}`,
		`{"type":"output","stream":"stdout","data":"a"}}`,
	}
	for _, l := range lines {
		out, ok := agree(t, []byte(l))
		if ok {
			t.Logf("recognised %q as %q %q", l, out.Stream, out.Data)
		}
	}
	// These must fall back: they are not the daemon's output lines.
	for _, l := range []string{
		`{"type":"output","stream":"stdout","data_b64":"aGk="}`,
		`{"type":"output","stream":"stdout","data":"a","dropped":12}`,
		`{"type":"output","stream":"stdout","data":"a","x":"b"}`,
		`{"type":"output","stream":"stdout","data":"\u00e9"}`,
		`{"type":"output","stream":"stdout","data":"\ud83c\udf89"}`,
		`{"type":"output","stream":"stdout","data":"\"}`,
		`{"type":"observation","observation":{"kind":"run"}}`,
	} {
		if out, ok := parseSafe(t, []byte(l)); ok {
			t.Errorf("parseOutputLine(%q) = %+v, want a fallback", l, out)
		}
	}
}

// Lines cut or altered at random must never decode to data encoding/json
// would not give.
func TestParseOutputLineMangled(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	bits := []string{`"`, `\`, `\"`, `\\`, `\u`, `\u00`, `\u001f`, `\n`, `}`, `"}`, `a`, `é`, `\u0041`, `\/`, `\b`}
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		sb.WriteString(`{"type":"output","stream":"stdout","data":"`)
		for k := r.Intn(8); k > 0; k-- {
			sb.WriteString(bits[r.Intn(len(bits))])
		}
		if r.Intn(4) != 0 {
			sb.WriteString(`"}`)
		}
		line := []byte(sb.String())
		if bytes.HasSuffix(line, []byte(`","data":"}`)) {
			continue // the panic of TestParseOutputLineShortBody
		}
		if json.Valid(line) {
			agree(t, line)
		} else {
			parseSafe(t, line)
		}
	}
}

func TestParseOutputLineShortBody(t *testing.T) {
	for _, l := range []string{
		`{"type":"output","stream":"stdout","data":"}`,
		`{"type":"output","stream":"","data":"}`,
	} {
		if out, ok := parseSafe(t, []byte(l)); ok {
			t.Errorf("parseOutputLine(%q) = %+v, want a fallback", l, out)
		}
	}
}

func TestUnescape(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{``, ``, true},
		{`abc`, `abc`, true},
		{`\"\\\/`, `"\/`, true},
		{`\n\r\t\b\f`, "\n\r\t\b\f", true},
		{`\u0000\u001f\u007f\u0041\u007F`, "\x00\x1f\x7fA\x7f", true},
		{`\u0080`, ``, false},
		{`\u00e9`, ``, false},
		{`\u2028`, ``, false},
		{`\ud83c\udf89`, ``, false},
		{`\u`, ``, false},
		{`\u00`, ``, false},
		{`\u004`, ``, false},
		{`\u004g`, ``, false},
		{`\u+041`, ``, false},
		{`\u-041`, ``, false},
		{`\u_041`, ``, false},
		{`\x41`, ``, false},
		{`\a`, ``, false},
		{`\`, ``, false},
		{`a\`, ``, false},
		{`a"b`, ``, false},
		{`é\n日`, "é\n日", true},
	}
	for _, tt := range tests {
		got, ok := unescape(nil, []byte(tt.in))
		if ok != tt.ok || (ok && string(got) != tt.want) {
			t.Errorf("unescape(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok {
			var s string
			if err := json.Unmarshal([]byte(`"`+tt.in+`"`), &s); err != nil || s != string(got) {
				t.Errorf("unescape(%q) = %q but encoding/json says %q (%v)", tt.in, got, s, err)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Errors

var contractStatus = map[api.Code]int{
	api.CodeInvalidArgument:   400,
	api.CodeUnauthenticated:   401,
	api.CodePermissionDenied:  403,
	api.CodeNotFound:          404,
	api.CodeConflict:          409,
	api.CodeTooLarge:          413,
	api.CodeResourceExhausted: 429,
	api.CodeUnsupported:       501,
	api.CodeUnavailable:       503,
	api.CodeDeadlineExceeded:  504,
	api.CodeInternal:          500,
}

var sentinelOf = map[api.Code]error{
	api.CodeInvalidArgument:   ErrInvalidArgument,
	api.CodeUnauthenticated:   ErrUnauthenticated,
	api.CodePermissionDenied:  ErrPermissionDenied,
	api.CodeNotFound:          ErrNotFound,
	api.CodeConflict:          ErrConflict,
	api.CodeTooLarge:          ErrTooLarge,
	api.CodeResourceExhausted: ErrResourceExhausted,
	api.CodeUnsupported:       ErrUnsupported,
	api.CodeUnavailable:       ErrUnavailable,
	api.CodeDeadlineExceeded:  ErrDeadlineExceeded,
	api.CodeInternal:          ErrInternal,
}

func response(status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}}
}

func TestDecodeErrorJSON(t *testing.T) {
	for code, status := range contractStatus {
		t.Run(string(code), func(t *testing.T) {
			body, _ := json.Marshal(api.ErrorBody{Error: api.ErrorInfo{Code: code, Message: "it <failed> & \"why\""}})
			for _, st := range []int{status, 500, 200} { // the body's code wins over the status
				err := decodeError(response(st, string(body)+"\n"))
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("decodeError = %T %v, want *Error", err, err)
				}
				if e.Status != st || e.Code != code || e.Message != "it <failed> & \"why\"" {
					t.Errorf("decodeError = %+v", e)
				}
				if !errors.Is(err, sentinelOf[code]) {
					t.Errorf("errors.Is(err, sentinel of %q) = false", code)
				}
				if api.CodeOf(err) != code {
					t.Errorf("api.CodeOf = %q", api.CodeOf(err))
				}
				for other, s := range sentinelOf {
					if other != code && errors.Is(err, s) {
						t.Errorf("error of code %q is also %q", code, other)
					}
				}
				if want := fmt.Sprintf("sandboxd: %s (%s)", e.Message, code); err.Error() != want {
					t.Errorf("Error() = %q, want %q", err.Error(), want)
				}
			}
		})
	}
}

func TestDecodeErrorNotJSON(t *testing.T) {
	tests := []struct {
		status int
		body   string
		code   api.Code
		msg    string
	}{
		{400, "bad request\n", api.CodeInvalidArgument, "bad request"},
		{401, "", api.CodeUnauthenticated, ""},
		{403, "forbidden", api.CodePermissionDenied, "forbidden"},
		{404, "<html>404 page not found</html>", api.CodeNotFound, "<html>404 page not found</html>"},
		{409, "  conflict  ", api.CodeConflict, "conflict"},
		{413, "Request Entity Too Large", api.CodeTooLarge, "Request Entity Too Large"},
		{431, "Request Header Fields Too Large", api.CodeTooLarge, "Request Header Fields Too Large"},
		{429, "slow down", api.CodeResourceExhausted, "slow down"},
		{501, "nope", api.CodeUnsupported, "nope"},
		{503, "down", api.CodeUnavailable, "down"},
		{504, "gateway timeout", api.CodeDeadlineExceeded, "gateway timeout"},
		{500, "oops", api.CodeInternal, "oops"},
		{502, "bad gateway", api.CodeInternal, "bad gateway"},
		{418, "teapot", api.CodeInternal, "teapot"},
		{302, "moved", api.CodeInternal, "moved"},
		// JSON, but not an error body.
		{404, `{"error":{}}`, api.CodeNotFound, `{"error":{}}`},
		{404, `{"error":{"message":"no code"}}`, api.CodeNotFound, `{"error":{"message":"no code"}}`},
		{503, `{"message":"x"}`, api.CodeUnavailable, `{"message":"x"}`},
		{409, `[]`, api.CodeConflict, `[]`},
		{409, `{"error":"string"}`, api.CodeConflict, `{"error":"string"}`},
		{429, `{"error":{"code":"not_found"`, api.CodeResourceExhausted, `{"error":{"code":"not_found"`},
	}
	for _, tt := range tests {
		err := decodeError(response(tt.status, tt.body))
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("decodeError = %T", err)
		}
		if e.Status != tt.status || e.Code != tt.code || e.Message != tt.msg {
			t.Errorf("decodeError(%d, %q) = %+v, want code %q message %q", tt.status, tt.body, e, tt.code, tt.msg)
		}
		if !errors.Is(err, sentinelOf[tt.code]) {
			t.Errorf("decodeError(%d, %q): errors.Is(sentinel of %q) = false", tt.status, tt.body, tt.code)
		}
	}
}

func TestDecodeErrorUnknownCode(t *testing.T) {
	err := decodeError(response(418, `{"error":{"code":"teapot","message":"short and stout"}}`))
	var e *Error
	if !errors.As(err, &e) || e.Code != "teapot" || e.Message != "short and stout" {
		t.Fatalf("decodeError = %v", err)
	}
	if !errors.Is(err, ErrInternal) {
		t.Errorf("an unknown code must be internal")
	}
}

func TestDecodeErrorRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 30 ", 30 * time.Second},
		{"0", 0},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{"99999999999", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tt.header, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
	resp := response(429, `{"error":{"code":"resource_exhausted","message":"full"}}`)
	resp.Header.Set("Retry-After", "2")
	var e *Error
	if err := decodeError(resp); !errors.As(err, &e) || e.RetryAfter != 2*time.Second || e.Code != api.CodeResourceExhausted {
		t.Fatalf("decodeError = %+v", err)
	}
}

func TestDecodeErrorLargeBody(t *testing.T) {
	body := strings.Repeat("x", 3<<20)
	err := decodeError(response(500, body))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
	if len(e.Message) > 1<<20 {
		t.Errorf("message of %d bytes: the body read is not bounded", len(e.Message))
	}
}

func TestCodeForStatusInvertsTheContract(t *testing.T) {
	for code, status := range contractStatus {
		if got := codeForStatus(status); got != code {
			t.Errorf("codeForStatus(%d) = %q, want %q", status, got, code)
		}
	}
	for _, s := range []int{0, 100, 200, 204, 301, 402, 405, 410, 422, 499, 502, 505, 599, 999} {
		if got := codeForStatus(s); got != api.CodeInternal {
			t.Errorf("codeForStatus(%d) = %q, want internal", s, got)
		}
	}
}

// ---------------------------------------------------------------------------
// readLine

func TestReadLine(t *testing.T) {
	lengths := []int{0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 4095, 4096, 4097, 100000}
	var lines []string
	r := rand.New(rand.NewSource(2))
	for _, n := range lengths {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abc\r\x00é{}\""[r.Intn(10)]
		}
		lines = append(lines, string(b))
	}
	stream := strings.Join(lines, "\n") + "\n"
	readers := map[string]func(io.Reader) io.Reader{
		"plain":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for rname, wrap := range readers {
		for _, size := range []int{16, 64, 4096} {
			for _, trailingNewline := range []bool{true, false} {
				s := stream
				want := lines
				if !trailingNewline {
					s = strings.TrimSuffix(s, "\n") + "\nlast line without newline " + strings.Repeat("z", 3*size)
					want = append(cloneStrings(lines), "last line without newline "+strings.Repeat("z", 3*size))
				}
				br := bufio.NewReaderSize(wrap(strings.NewReader(s)), size)
				var got []string
				for {
					line, err := readLine(br)
					if err != nil {
						if !errors.Is(err, io.EOF) {
							t.Fatalf("%s/%d: %v", rname, size, err)
						}
						break
					}
					got = append(got, string(line)) // copy: valid until the next read
					if len(got) > len(want)+1 {
						break
					}
				}
				if len(got) != len(want) {
					t.Errorf("%s/size %d/newline %v: %d lines, want %d", rname, size, trailingNewline, len(got), len(want))
					continue
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("%s/size %d/newline %v: line %d is %d bytes %.40q, want %d bytes %.40q", rname, size, trailingNewline, i, len(got[i]), got[i], len(want[i]), want[i])
					}
				}
			}
		}
	}
}

func cloneStrings(s []string) []string { return append([]string(nil), s...) }

func TestReadLineErrors(t *testing.T) {
	boom := errors.New("boom")
	// An error in the middle of a long line is reported, not a short line.
	br := bufio.NewReaderSize(io.MultiReader(strings.NewReader(strings.Repeat("a", 100)), iotest.ErrReader(boom)), 16)
	if line, err := readLine(br); !errors.Is(err, boom) {
		t.Errorf("readLine = %q, %v; want the read error", line, err)
	}
	// An error after a short partial line.
	br = bufio.NewReaderSize(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), 16)
	if line, err := readLine(br); !errors.Is(err, boom) {
		t.Errorf("readLine = %q, %v; want the read error", line, err)
	}
	// Complete lines before the error are delivered first.
	br = bufio.NewReaderSize(io.MultiReader(strings.NewReader("one\n"), iotest.ErrReader(boom)), 16)
	if line, err := readLine(br); err != nil || string(line) != "one" {
		t.Errorf("readLine = %q, %v; want one", line, err)
	}
	if _, err := readLine(br); !errors.Is(err, boom) {
		t.Errorf("second readLine: %v, want boom", err)
	}
	// Empty input.
	if line, err := readLine(bufio.NewReader(strings.NewReader(""))); !errors.Is(err, io.EOF) || line != nil {
		t.Errorf("readLine of empty input = %q, %v", line, err)
	}
	// Empty lines are returned as empty.
	br = bufio.NewReader(strings.NewReader("\n\nx"))
	for _, want := range []string{"", "", "x"} {
		line, err := readLine(br)
		if err != nil || string(line) != want {
			t.Errorf("readLine = %q, %v; want %q", line, err, want)
		}
	}
	if _, err := readLine(br); !errors.Is(err, io.EOF) {
		t.Errorf("after the last line: %v, want EOF", err)
	}
}

// ---------------------------------------------------------------------------
// ActStream end to end against a fake daemon.

func TestActStream(t *testing.T) {
	big := strings.Repeat("é日🎉x\"\\\n", 100000) // ~1.4 MB: longer than the reader's buffer
	type out struct {
		stream  string
		data    string
		dropped int64
	}
	var lines [][]byte
	want := []out{}
	add := func(stream, data string) {
		lines = append(lines, daemonLine(stream, []byte(data)))
		want = append(want, out{stream, data, 0})
	}
	add("pty", "hello\n")
	add("stdout", "")
	add("stderr", big)
	add("pty", "\xff\xfe binary")
	add("stdout", `"}`)
	lines = append(lines, []byte(`{"type":"output","stream":"stdout","dropped":77}`))
	want = append(want, out{"stdout", "", 77})
	std, _ := json.Marshal(api.StreamLine{Type: "output", Stream: "stderr", Data: "<encoding/json> \u2028"})
	lines = append(lines, std)
	want = append(want, out{"stderr", "<encoding/json> \u2028", 0})
	obs := api.Observation{Kind: api.KindRun, Cause: 3, Output: "hello", ExitCode: api.ExitCode(0), Session: "default", Cwd: "/"}
	final, _ := json.Marshal(api.StreamLine{Type: api.LineObservation, Observation: &obs})

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" || r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(400)
			return
		}
		switch r.URL.Path {
		case "/v1/sandboxes/ok/actions":
			w.Header().Set("Content-Type", "application/x-ndjson")
			for _, l := range lines {
				w.Write(l)
				w.Write([]byte("\n\n"))
			}
			w.Write(final)
			w.Write([]byte("\n"))
		case "/v1/sandboxes/fail/actions":
			w.Write(daemonLine("pty", []byte("partial")))
			w.Write([]byte("\n" + `{"type":"error","error":{"code":"unavailable","message":"shutting down"}}` + "\n"))
		case "/v1/sandboxes/cut/actions":
			w.Write(daemonLine("pty", []byte("partial")))
			w.Write([]byte("\n"))
		case "/v1/sandboxes/missing/actions":
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no sandbox missing"}}`))
		default:
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var got []out
	o, err := c.ActStream(ctx, "ok", api.Run("x"), func(x Output) {
		got = append(got, out{x.Stream, string(x.Data), x.Dropped})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("output %d = {%s %.60q %d}, want {%s %.60q %d}", i, got[i].stream, got[i].data, got[i].dropped, want[i].stream, want[i].data, want[i].dropped)
		}
	}
	if o == nil || o.Output != "hello" || o.Cause != 3 || o.ExitCode == nil || *o.ExitCode != 0 {
		t.Errorf("observation %+v", o)
	}

	_, err = c.ActStream(ctx, "fail", api.Run("x"), nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != 200 || e.Code != api.CodeUnavailable || !errors.Is(err, ErrUnavailable) {
		t.Errorf("error line: %v", err)
	}
	if _, err := c.ActStream(ctx, "cut", api.Run("x"), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := c.ActStream(ctx, "missing", api.Run("x"), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("404: %v, want ErrNotFound", err)
	}
}

func TestNewAddresses(t *testing.T) {
	tests := []struct {
		addr, base string
		ok         bool
	}{
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", true},
		{"http://127.0.0.1:7070/some/path?q", "http://127.0.0.1:7070", true},
		{"https://example.test", "https://example.test", true},
		{"tcp://10.0.0.1:80", "http://10.0.0.1:80", true},
		{"unix:///run/sandboxd.sock", "http://sandboxd", true},
		{"unix://", "", false},
		{"127.0.0.1:7070", "", false},
		{"ftp://x", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		c, err := New(tt.addr)
		if (err == nil) != tt.ok {
			t.Errorf("New(%q) error %v, want ok=%v", tt.addr, err, tt.ok)
			continue
		}
		if err == nil {
			if c.base != tt.base {
				t.Errorf("New(%q).base = %q, want %q", tt.addr, c.base, tt.base)
			}
			c.Close()
		}
	}
}

func TestParseOutputLineEscapedStream(t *testing.T) {
	for _, l := range []string{
		`{"type":"output","stream":"\u0073tdout","data":"x"}`,
		`{"type":"output","stream":"std\\","data":"x"}`,
		`{"type":"output","stream":"std\/out","data":"x"}`,
	} {
		agree(t, []byte(l))
	}
}
