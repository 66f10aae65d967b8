package file_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors/file"
)

func TestReadLines(t *testing.T) {
	const abc = "a\nb\nc\n"
	long := strings.Repeat("x", 100<<10) // longer than the 64 KiB reader buffer
	huge := strings.Repeat("y", 200<<10) // several buffers
	cases := []struct {
		name       string
		content    string
		start, end int
		want       string
		err        error
		errSubs    []string
	}{
		{name: "whole file", content: abc, want: abc},
		{name: "explicit whole", content: abc, start: 1, end: -1, want: abc},
		{name: "start 0 means 1", content: abc, start: 0, end: 2, want: "a\nb\n"},
		{name: "first line", content: abc, start: 1, end: 1, want: "a\n"},
		{name: "middle line", content: abc, start: 2, end: 2, want: "b\n"},
		{name: "last line", content: abc, start: 3, end: 3, want: "c\n"},
		{name: "from 2 to end", content: abc, start: 2, end: -1, want: "b\nc\n"},
		{name: "from 2 no end", content: abc, start: 2, want: "b\nc\n"},
		{name: "end past the last line", content: abc, start: 2, end: 10, want: "b\nc\n"},
		{name: "start past the end", content: abc, start: 4, err: api.ErrInvalidArgument, errSubs: []string{"4", "3 lines"}},
		{name: "start far past the end", content: abc, start: 100, end: 200, err: api.ErrInvalidArgument},
		{name: "end before start", content: abc, start: 3, end: 2, err: api.ErrInvalidArgument},
		{name: "negative start", content: abc, start: -1, err: api.ErrInvalidArgument},
		{name: "end -2", content: abc, start: 1, end: -2, err: api.ErrInvalidArgument},
		{name: "no final newline", content: "a\nb", want: "a\nb"},
		{name: "no final newline last line", content: "a\nb", start: 2, end: -1, want: "b"},
		{name: "no final newline past end", content: "a\nb", start: 3, err: api.ErrInvalidArgument},
		{name: "crlf byte exact", content: "a\r\nb\r\nc\r\n", want: "a\r\nb\r\nc\r\n"},
		{name: "crlf range", content: "a\r\nb\r\nc\r\n", start: 2, end: 2, want: "b\r\n"},
		{name: "lone cr kept", content: "a\rb\n", want: "a\rb\n"},
		{name: "empty file", content: "", want: ""},
		{name: "empty file explicit range", content: "", start: 1, end: -1, want: ""},
		{name: "empty file start 2", content: "", start: 2, err: api.ErrInvalidArgument},
		{name: "single newline", content: "\n", want: "\n"},
		{name: "single newline start 2", content: "\n", start: 2, err: api.ErrInvalidArgument},
		{name: "blank lines", content: "\n\n\n", start: 2, end: 3, want: "\n\n"},
		{name: "utf8 text", content: "héllo\n日本語\n", start: 2, want: "日本語\n"},
		{name: "long line whole", content: long + "\nsecond\n", want: long + "\nsecond\n"},
		{name: "long line only", content: long + "\nsecond\n", start: 1, end: 1, want: long + "\n"},
		{name: "after a long line", content: long + "\nsecond\n", start: 2, end: -1, want: "second\n"},
		{name: "after a huge line", content: "1\n" + huge + "\n3\n", start: 3, want: "3\n"},
		{name: "huge line in range", content: "1\n" + huge + "\n3\n", start: 2, end: 2, want: huge + "\n"},
		{name: "huge line no newline", content: huge, want: huge},
		{name: "past the end after a huge last line", content: huge, start: 2, err: api.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", tc.content)
			obs, err := e.do(readRange("f.txt", tc.start, tc.end))
			if tc.err != nil {
				wantErr(t, err, tc.err, tc.errSubs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "content", obs.Content, tc.want)
			if obs.Truncated {
				t.Error("truncated, want not")
			}
			if obs.Kind != api.KindFileRead || obs.Path != "/workspace/f.txt" {
				t.Errorf("kind %q path %q", obs.Kind, obs.Path)
			}
			if obs.Note != "" {
				t.Errorf("unexpected note %q", obs.Note)
			}
		})
	}
}

func TestReadTruncated(t *testing.T) {
	cases := []struct {
		name       string
		max        int
		content    string
		start, end int
		want       string
		truncated  bool
	}{
		{name: "cut in a line", max: 10, content: "0123456789abcdef\n", want: "0123456789", truncated: true},
		{name: "cut at a line end", max: 4, content: "abc\ndef\n", want: "abc\n", truncated: true},
		{name: "exactly the cap", max: 8, content: "abc\ndef\n", want: "abc\ndef\n"},
		{name: "exactly the cap no newline", max: 7, content: "abc\ndef", want: "abc\ndef"},
		{name: "one byte over", max: 7, content: "abc\ndef\n", want: "abc\ndef", truncated: true},
		{name: "cap counts from start_line", max: 6, content: "aaaa\nbbbb\ncccc\n", start: 2, want: "bbbb\nc", truncated: true},
		{name: "range within the cap", max: 6, content: "aaaa\nbbbb\ncccc\n", start: 2, end: 2, want: "bbbb\n"},
		{name: "long line capped", max: 70 << 10, content: strings.Repeat("z", 100<<10) + "\n", want: strings.Repeat("z", 70<<10), truncated: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := file.DefaultConfig()
			cfg.MaxReadBytes = tc.max
			e := newEnvCfg(t, cfg, -1, -1)
			e.put("f.txt", tc.content)
			obs, err := e.do(readRange("f.txt", tc.start, tc.end))
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "content", obs.Content, tc.want)
			if obs.Truncated != tc.truncated {
				t.Errorf("truncated %v, want %v", obs.Truncated, tc.truncated)
			}
			if tc.truncated && (!strings.Contains(obs.Note, "cut") || !strings.Contains(obs.Note, itoa(tc.max))) {
				t.Errorf("note %q should say the content was cut at %d bytes", obs.Note, tc.max)
			}
			if !tc.truncated && obs.Note != "" {
				t.Errorf("unexpected note %q", obs.Note)
			}
		})
	}
}

// A cap that falls inside a multi-byte character must not hand the client
// half a character (it would reach it as U+FFFD after JSON encoding).
func TestReadTruncatedUTF8(t *testing.T) {
	cfg := file.DefaultConfig()
	cfg.MaxReadBytes = 5
	e := newEnvCfg(t, cfg, -1, -1)
	e.put("f.txt", "ééééé\n") // 2 bytes each: the cap cuts the third
	obs, err := e.do(read("f.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !obs.Truncated {
		t.Fatal("not truncated")
	}
	if !utf8.ValidString(obs.Content) {
		t.Fatal("BUG (regression): file.read cuts Content at MaxReadBytes inside a UTF-8 character: got " + strconv.Quote(obs.Content))
	}
	if obs.Content != "éé" {
		t.Errorf("content %q, want %q", obs.Content, "éé")
	}
}

func TestReadBinary(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
	cases := []struct {
		name    string
		content string
		subs    []string // in the note
	}{
		{name: "png header", content: png, subs: []string{"binary", "16 bytes", "image/png"}},
		{name: "png larger", content: png + strings.Repeat("\x00", 3000), subs: []string{"binary", "2.9 KiB", "image/png"}},
		{name: "nul bytes", content: "abc\x00def\n", subs: []string{"binary", "8 bytes", "application/octet-stream"}},
		{name: "nul late in the sniffed head", content: strings.Repeat("a", 8000) + "\x00", subs: []string{"binary", "7.8 KiB"}},
		{name: "gzip", content: "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", subs: []string{"binary", "10 bytes", "application/x-gzip"}},
		// Not UTF-8: the code counts it as binary, whatever the sniffed type.
		{name: "latin-1 text", content: "caf\xe9 cr\xe8me br\xfbl\xe9e\n", subs: []string{"binary", "18 bytes"}},
		{name: "lone continuation byte", content: "abc\x80def\n", subs: []string{"binary"}},
		{name: "big binary", content: strings.Repeat("\x00\x01", 3<<20), subs: []string{"binary", "6.0 MiB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("bin/f.dat", tc.content)
			obs, err := e.do(read("bin/f.dat"))
			if err != nil {
				t.Fatal(err)
			}
			if obs.Content != "" {
				t.Errorf("content of a binary file shown: %q", trunc(obs.Content))
			}
			if obs.Path != "/workspace/bin/f.dat" {
				t.Errorf("path %q", obs.Path)
			}
			for _, s := range tc.subs {
				if !strings.Contains(obs.Note, s) {
					t.Errorf("note %q does not mention %q", obs.Note, s)
				}
			}
			if !strings.Contains(obs.Note, "/workspace/bin/f.dat") {
				t.Errorf("note %q does not name the file", obs.Note)
			}
			// A range does not change the verdict.
			obs, err = e.do(readRange("bin/f.dat", 1, 1))
			if err != nil || obs.Content != "" || !strings.Contains(obs.Note, "binary") {
				t.Errorf("ranged read of a binary file: %q %q %v", trunc(obs.Content), obs.Note, err)
			}
		})
	}
}

// Only the first 8 KiB decide: a character cut by that boundary is text,
// and what follows is not examined.
func TestReadSniffBoundary(t *testing.T) {
	cases := []struct {
		name    string
		content string
	}{
		{name: "multibyte across 8 KiB", content: strings.Repeat("a", 8191) + "é\nmore\n"},
		{name: "3-byte char across 8 KiB", content: strings.Repeat("a", 8190) + "日\n"},
		{name: "short file cut mid character", content: "abc\xe6\x97"},
		{name: "latin-1 after 8 KiB", content: strings.Repeat("a\n", 4097) + "caf\xe9\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", tc.content)
			obs, err := e.do(read("f.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if obs.Note != "" {
				t.Errorf("note %q: counted as binary", obs.Note)
			}
			sameBytes(t, "content", trunc(obs.Content), trunc(tc.content))
		})
	}
}

func TestReadErrors(t *testing.T) {
	e := newEnv(t)
	e.put("dir/f.txt", "x\n")
	e.put("file.txt", "x\n")
	e.symlink("nowhere.txt", "dangling")
	e.symlink("loop2", "loop1")
	e.symlink("loop1", "loop2")
	cases := []struct {
		path string
		err  error
	}{
		{"dir", api.ErrInvalidArgument},
		{"dir/", api.ErrInvalidArgument},
		{".", api.ErrInvalidArgument},
		{"/workspace", api.ErrInvalidArgument},
		{"missing.txt", api.ErrNotFound},
		{"dir/missing.txt", api.ErrNotFound},
		{"nodir/missing.txt", api.ErrNotFound},
		{"/workspace/missing.txt", api.ErrNotFound},
		{"dangling", api.ErrNotFound},
		{"file.txt/x", api.ErrInvalidArgument},
		{"loop1", api.ErrPermissionDenied},
		{"", api.ErrInvalidArgument},
		{"f\x00.txt", api.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, err := e.do(read(tc.path))
			wantErr(t, err, tc.err)
		})
	}
}

func TestReadPaths(t *testing.T) {
	e := newEnv(t)
	e.put("src/a.py", "print(1)\n")
	for _, p := range []string{"src/a.py", "./src/a.py", "/workspace/src/a.py", "/workspace/./src/../src/a.py", "src//a.py", "other/../src/a.py"} {
		t.Run(p, func(t *testing.T) {
			obs, err := e.do(read(p))
			if err != nil {
				t.Fatal(err)
			}
			if obs.Path != "/workspace/src/a.py" {
				t.Errorf("path %q, want /workspace/src/a.py", obs.Path)
			}
			if obs.Content != "print(1)\n" {
				t.Errorf("content %q", obs.Content)
			}
		})
	}
	// A symlink inside the workspace is followed.
	e.symlink("src/a.py", "link.py")
	obs, err := e.do(read("link.py"))
	if err != nil || obs.Content != "print(1)\n" {
		t.Errorf("read through a link: %q %v", obs.Content, err)
	}
}

func TestUnsupported(t *testing.T) {
	e := newEnv(t)
	e.put("f.txt", "x\n")
	_, err := e.do(&api.Action{Kind: api.KindRun, Path: "f.txt"})
	wantErr(t, err, api.ErrUnsupported)
	_, err = e.do(&api.Action{Kind: api.KindFileEdit, Command: "delete", Path: "f.txt"})
	wantErr(t, err, api.ErrInvalidArgument, "delete")
	_, err = e.do(&api.Action{Kind: api.KindFileEdit, Path: "f.txt"})
	wantErr(t, err, api.ErrInvalidArgument)
	if got := e.get("f.txt"); got != "x\n" {
		t.Errorf("file changed: %q", got)
	}
	if err := e.ex.Close(t.Context()); err != nil {
		t.Error(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func trunc(s string) string {
	if len(s) > 200 {
		return s[:100] + "..." + s[len(s)-100:]
	}
	return s
}
