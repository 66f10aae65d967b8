package file_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors"
	"github.com/sandboxd/sandboxd/executors/file"
)

func TestCreate(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *env)
		path  string
		text  *string
		err   error
		// on success: the file that must now hold text
		file string
		// on failure: files that must be unchanged (rel -> content), and
		// files that must not exist
		same    map[string]string
		missing []string
	}{
		{name: "new file", path: "new.txt", text: sp("hello\n"), file: "new.txt"},
		{name: "with parents", path: "a/b/c/new.txt", text: sp("x\ny\n"), file: "a/b/c/new.txt"},
		{name: "absolute path", path: "/workspace/d/new.txt", text: sp("x"), file: "d/new.txt"},
		{name: "empty text", path: "empty.txt", text: sp(""), file: "empty.txt"},
		{name: "crlf text kept", path: "crlf.txt", text: sp("a\r\nb\r\n"), file: "crlf.txt"},
		{name: "binary text kept", path: "bin", text: sp("\x00\xff"), file: "bin"},
		{
			name:  "existing file",
			setup: func(e *env) { e.put("f.txt", "original\n") },
			path:  "f.txt", text: sp("new\n"), err: api.ErrInvalidArgument,
			same: map[string]string{"f.txt": "original\n"},
		},
		{
			name:  "existing empty file",
			setup: func(e *env) { e.put("f.txt", "") },
			path:  "f.txt", text: sp("new\n"), err: api.ErrInvalidArgument,
			same: map[string]string{"f.txt": ""},
		},
		{
			name: "existing symlink to a file",
			setup: func(e *env) {
				e.put("real.txt", "real\n")
				e.symlink("real.txt", "link")
			},
			path: "link", text: sp("new\n"), err: api.ErrInvalidArgument,
			same: map[string]string{"real.txt": "real\n"},
		},
		{
			name:  "existing directory",
			setup: func(e *env) { e.put("dir/x", "x") },
			path:  "dir", text: sp("new\n"), err: api.ErrInvalidArgument,
			same: map[string]string{"dir/x": "x"},
		},
		{
			name:  "parent is a file",
			setup: func(e *env) { e.put("file", "f") },
			path:  "file/new.txt", text: sp("new\n"), err: api.ErrInvalidArgument,
			same: map[string]string{"file": "f"},
		},
		{
			name: "missing file_text", path: "new.txt", text: nil, err: api.ErrInvalidArgument,
			missing: []string{"new.txt"},
		},
		{
			name: "missing file_text with parents", path: "p/q/new.txt", text: nil, err: api.ErrInvalidArgument,
			missing: []string{"p"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.setup != nil {
				tc.setup(e)
			}
			obs, err := e.do(create(tc.path, tc.text))
			if tc.err != nil {
				wantErr(t, err, tc.err)
				for rel, want := range tc.same {
					sameBytes(t, rel, e.get(rel), want)
				}
				for _, rel := range tc.missing {
					if e.exists(rel) {
						t.Errorf("%s was created", rel)
					}
				}
				noTemps(t, e.dir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := "File created successfully at: /workspace/" + tc.file
			if obs.Output != want {
				t.Errorf("output %q, want %q", obs.Output, want)
			}
			if obs.Path != "/workspace/"+tc.file || obs.Kind != api.KindFileEdit {
				t.Errorf("kind %q path %q", obs.Kind, obs.Path)
			}
			sameBytes(t, "file", e.get(tc.file), *tc.text)
			if got := perm(t, e.host(tc.file)); got != 0o644 {
				t.Errorf("mode %v, want 0644", got)
			}
			noTemps(t, e.dir)
			// A second create of the same file is refused, and changes nothing.
			_, err = e.do(create(tc.path, sp("again")))
			wantErr(t, err, api.ErrInvalidArgument, "exists")
			sameBytes(t, "file after a second create", e.get(tc.file), *tc.text)
		})
	}
}

// A dangling link inside the workspace: create makes the file it names,
// and the link stays a link.
func TestCreateThroughDanglingLink(t *testing.T) {
	e := newEnv(t)
	e.symlink("target.txt", "link")
	if _, err := e.do(create("link", sp("made\n"))); err != nil {
		t.Fatal(err)
	}
	isLink(t, e.host("link"), "target.txt")
	sameBytes(t, "target", e.get("target.txt"), "made\n")
	noTemps(t, e.dir)
}

func TestStrReplace(t *testing.T) {
	cases := []struct {
		name     string
		content  string
		old, new *string
		want     string   // file after; on an error, must equal content
		err      error    // nil: success
		subs     []string // in the error, or in the output
	}{
		{name: "one match", content: "a\nfoo\nb\n", old: sp("foo"), new: sp("bar"), want: "a\nbar\nb\n",
			subs: []string{"The file /workspace/f.txt has been edited.", "     1\ta\n     2\tbar\n     3\tb\n"}},
		{name: "within a line", content: "x = 1 + 2\n", old: sp("1 + 2"), new: sp("3"), want: "x = 3\n"},
		{name: "multi-line old", content: "def f():\n    return 1\n\ndef g():\n    return 1\n", old: sp("def g():\n    return 1"), new: sp("def g():\n    return 2"),
			want: "def f():\n    return 1\n\ndef g():\n    return 2\n"},
		{name: "multi-line new", content: "a\nb\n", old: sp("a"), new: sp("a1\na2\na3"), want: "a1\na2\na3\nb\n",
			subs: []string{"     1\ta1\n     2\ta2\n     3\ta3\n     4\tb\n"}},
		{name: "whole file", content: "abc", old: sp("abc"), new: sp("xyz\n"), want: "xyz\n"},
		{name: "new contains old", content: "foo\n", old: sp("foo"), new: sp("foofoo"), want: "foofoo\n"},
		{name: "new missing deletes", content: "keep\ndrop me\nkeep\n", old: sp("drop me\n"), new: nil, want: "keep\nkeep\n"},
		{name: "new empty deletes", content: "a-b", old: sp("-"), new: sp(""), want: "ab"},
		{name: "zero matches", content: "a\nb\n", old: sp("zzz"), new: sp("y"), want: "a\nb\n", err: api.ErrInvalidArgument,
			subs: []string{"0 times", "/workspace/f.txt"}},
		{name: "whitespace matters", content: "foo\n", old: sp("foo "), new: sp("y"), want: "foo\n", err: api.ErrInvalidArgument, subs: []string{"0 times"}},
		{name: "case matters", content: "Foo\n", old: sp("foo"), new: sp("y"), want: "Foo\n", err: api.ErrInvalidArgument, subs: []string{"0 times"}},
		{name: "two matches", content: "x\nfoo\ny\nfoo\n", old: sp("foo"), new: sp("bar"), want: "x\nfoo\ny\nfoo\n", err: api.ErrInvalidArgument,
			subs: []string{"2 times", "lines 2, 4"}},
		{name: "three matches on two lines", content: "foo foo\n\nfoo\n", old: sp("foo"), new: sp("bar"), want: "foo foo\n\nfoo\n", err: api.ErrInvalidArgument,
			subs: []string{"3 times", "lines 1, 1, 3"}},
		{name: "multi-line old twice", content: "a\nb\na\nb\n", old: sp("a\nb"), new: sp("c"), want: "a\nb\na\nb\n", err: api.ErrInvalidArgument,
			subs: []string{"2 times", "lines 1, 3"}},
		{name: "empty old", content: "abc\n", old: sp(""), new: sp("x"), want: "abc\n", err: api.ErrInvalidArgument, subs: []string{"old_str"}},
		{name: "missing old", content: "abc\n", old: nil, new: sp("x"), want: "abc\n", err: api.ErrInvalidArgument, subs: []string{"old_str"}},
		{name: "crlf file lf strings", content: "a\r\nfoo\r\nb\r\n", old: sp("foo\nb"), new: sp("X\nY\nZ"), want: "a\r\nX\r\nY\r\nZ\r\n"},
		{name: "crlf file lf new only", content: "a\r\nfoo\r\nb\r\n", old: sp("foo"), new: sp("1\n2"), want: "a\r\n1\r\n2\r\nb\r\n"},
		{name: "crlf file crlf strings", content: "a\r\nfoo\r\nb\r\n", old: sp("foo\r\nb"), new: sp("c\r\nd"), want: "a\r\nc\r\nd\r\n"},
		{name: "crlf file single line", content: "a\r\nfoo\r\n", old: sp("foo"), new: sp("bar"), want: "a\r\nbar\r\n",
			subs: []string{"     2\tbar\n"}},
		{name: "crlf file lf old no match", content: "a\r\nb\r\n", old: sp("a\nc"), new: sp("x"), want: "a\r\nb\r\n", err: api.ErrInvalidArgument, subs: []string{"0 times"}},
		{name: "no final newline kept", content: "a\nfoo", old: sp("foo"), new: sp("bar"), want: "a\nbar"},
		{name: "no final newline multi-line", content: "a\nb\nc", old: sp("b\nc"), new: sp("B\nC"), want: "a\nB\nC"},
		{name: "crlf no final newline", content: "a\r\nb", old: sp("a\nb"), new: sp("x\ny"), want: "x\r\ny"},
		{name: "latin-1 elsewhere preserved", content: "caf\xe9\nfoo\n\xff\xfe\xfd\n", old: sp("foo"), new: sp("bar"), want: "caf\xe9\nbar\n\xff\xfe\xfd\n"},
		{name: "latin-1 around match", content: "\xe9foo\xe9\n", old: sp("foo"), new: sp("ü"), want: "\xe9ü\xe9\n"},
		{name: "utf8", content: "héllo wörld\n", old: sp("wörld"), new: sp("世界"), want: "héllo 世界\n"},
		{name: "bom kept", content: "\ufeffa\nb\n", old: sp("b"), new: sp("c"), want: "\ufeffa\nc\n"},
		// Occurrences are counted without overlap, as Python's str.count does.
		{name: "overlapping counts once", content: "aaa\n", old: sp("aa"), new: sp("X"), want: "Xa\n"},
		{name: "non-overlapping twice", content: "aaaa\n", old: sp("aa"), new: sp("X"), want: "aaaa\n", err: api.ErrInvalidArgument, subs: []string{"2 times"}},
		{name: "empty file", content: "", old: sp("a"), new: sp("b"), want: "", err: api.ErrInvalidArgument, subs: []string{"0 times"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", tc.content)
			if err := os.Chmod(e.host("f.txt"), 0o750); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Stat(e.host("f.txt"))
			obs, err := e.do(replace("f.txt", tc.old, tc.new))
			if tc.err != nil {
				wantErr(t, err, tc.err, tc.subs...)
				sameBytes(t, "file after a failed replace", e.get("f.txt"), tc.content)
				after, _ := os.Stat(e.host("f.txt"))
				if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
					t.Error("a failed replace rewrote the file")
				}
				noTemps(t, e.dir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "file", e.get("f.txt"), tc.want)
			for _, s := range tc.subs {
				if !strings.Contains(obs.Output, s) {
					t.Errorf("output %q does not hold %q", obs.Output, s)
				}
			}
			if !strings.HasPrefix(obs.Output, "The file /workspace/f.txt has been edited.") {
				t.Errorf("output %q", obs.Output)
			}
			if strings.Contains(obs.Output, "\r") {
				t.Errorf("output holds a carriage return: %q", obs.Output)
			}
			if got := perm(t, e.host("f.txt")); got != 0o750 {
				t.Errorf("mode %v, want 0750 kept", got)
			}
			if obs.Path != "/workspace/f.txt" {
				t.Errorf("path %q", obs.Path)
			}
			noTemps(t, e.dir)
		})
	}
}

// The snippet shows four lines of context around the change, no more.
func TestStrReplaceSnippet(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	e := newEnv(t)
	e.put("f.txt", b.String())
	obs := e.mustDo(replace("f.txt", sp("line 15\n"), sp("new A\nnew B\n")))
	want := "The file /workspace/f.txt has been edited. Here's the result of running `cat -n` on a snippet of /workspace/f.txt:\n" +
		"    11\tline 11\n    12\tline 12\n    13\tline 13\n    14\tline 14\n" +
		"    15\tnew A\n    16\tnew B\n" +
		"    17\tline 16\n    18\tline 17\n    19\tline 18\n    20\tline 19\n    21\tline 20\n" +
		"Review the changes and make sure they are as expected. Edit the file again if necessary."
	sameBytes(t, "output", obs.Output, want)

	// At the top of the file the snippet starts at line 1.
	obs = e.mustDo(replace("f.txt", sp("line 1\n"), sp("first\n")))
	if !strings.Contains(obs.Output, ":\n     1\tfirst\n     2\tline 2\n") || strings.Contains(obs.Output, "line 7\n") {
		t.Errorf("output %q", obs.Output)
	}
	// At the bottom it stops at the last line.
	obs = e.mustDo(replace("f.txt", sp("line 30\n"), sp("last\n")))
	if !strings.Contains(obs.Output, "    31\tlast\nReview") || strings.Contains(obs.Output, "    26\t") {
		t.Errorf("output %q", obs.Output)
	}
}

func TestInsert(t *testing.T) {
	const three = "l1\nl2\nl3\n"
	cases := []struct {
		name    string
		content string
		line    *int
		text    *string
		want    string // on error: must equal content
		err     error
		subs    []string
	}{
		{name: "top", content: three, line: ip(0), text: sp("new"), want: "new\nl1\nl2\nl3\n"},
		{name: "after line 1", content: three, line: ip(1), text: sp("new"), want: "l1\nnew\nl2\nl3\n"},
		{name: "middle", content: three, line: ip(2), text: sp("new"), want: "l1\nl2\nnew\nl3\n"},
		{name: "end", content: three, line: ip(3), text: sp("new"), want: "l1\nl2\nl3\nnew\n"},
		{name: "text with its newline", content: three, line: ip(1), text: sp("new\n"), want: "l1\nnew\nl2\nl3\n"},
		{name: "multi-line", content: three, line: ip(2), text: sp("x\ny\nz"), want: "l1\nl2\nx\ny\nz\nl3\n"},
		{name: "multi-line at end", content: three, line: ip(3), text: sp("x\ny\n"), want: "l1\nl2\nl3\nx\ny\n"},
		{name: "blank line", content: three, line: ip(1), text: sp("\n"), want: "l1\n\nl2\nl3\n"},
		{name: "past the end", content: three, line: ip(4), text: sp("x"), want: three, err: api.ErrInvalidArgument, subs: []string{"4", "0", "3"}},
		{name: "far past the end", content: three, line: ip(1000), text: sp("x"), want: three, err: api.ErrInvalidArgument},
		{name: "negative", content: three, line: ip(-1), text: sp("x"), want: three, err: api.ErrInvalidArgument},
		{name: "missing insert_line", content: three, line: nil, text: sp("x"), want: three, err: api.ErrInvalidArgument, subs: []string{"insert_line"}},
		{name: "missing new_str", content: three, line: ip(1), text: nil, want: three, err: api.ErrInvalidArgument, subs: []string{"new_str"}},
		{name: "crlf middle", content: "a\r\nb\r\n", line: ip(1), text: sp("x\ny"), want: "a\r\nx\r\ny\r\nb\r\n"},
		{name: "crlf top", content: "a\r\nb\r\n", line: ip(0), text: sp("x"), want: "x\r\na\r\nb\r\n"},
		{name: "crlf end", content: "a\r\nb\r\n", line: ip(2), text: sp("x\n"), want: "a\r\nb\r\nx\r\n"},
		{name: "crlf text crlf", content: "a\r\nb\r\n", line: ip(1), text: sp("x\r\n"), want: "a\r\nx\r\nb\r\n"},
		{name: "no final newline after last", content: "a\nb", line: ip(2), text: sp("c"), want: "a\nb\nc"},
		{name: "no final newline after last, text with newline", content: "a\nb", line: ip(2), text: sp("c\n"), want: "a\nb\nc"},
		{name: "no final newline after last, multi-line", content: "a\nb", line: ip(2), text: sp("c\nd\n"), want: "a\nb\nc\nd"},
		{name: "no final newline middle", content: "a\nb", line: ip(1), text: sp("c"), want: "a\nc\nb"},
		{name: "no final newline top", content: "a", line: ip(0), text: sp("c"), want: "c\na"},
		{name: "crlf no final newline after last", content: "a\r\nb", line: ip(2), text: sp("c\nd"), want: "a\r\nb\r\nc\r\nd"},
		{name: "empty file top", content: "", line: ip(0), text: sp("x"), want: "x\n"},
		{name: "empty file line 1", content: "", line: ip(1), text: sp("x"), want: "", err: api.ErrInvalidArgument},
		{name: "latin-1 preserved", content: "caf\xe9\n\xff\n", line: ip(1), text: sp("ü"), want: "caf\xe9\nü\n\xff\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", tc.content)
			if err := os.Chmod(e.host("f.txt"), 0o751); err != nil {
				t.Fatal(err)
			}
			obs, err := e.do(insert("f.txt", tc.line, tc.text))
			if tc.err != nil {
				wantErr(t, err, tc.err, tc.subs...)
				sameBytes(t, "file after a failed insert", e.get("f.txt"), tc.content)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "file", e.get("f.txt"), tc.want)
			if !strings.HasPrefix(obs.Output, "The file /workspace/f.txt has been edited.") || strings.Contains(obs.Output, "\r") {
				t.Errorf("output %q", obs.Output)
			}
			if got := perm(t, e.host("f.txt")); got != 0o751 {
				t.Errorf("mode %v, want 0751 kept", got)
			}
			noTemps(t, e.dir)
		})
	}
}

func TestInsertSnippet(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	e := newEnv(t)
	e.put("f.txt", b.String())
	obs := e.mustDo(insert("f.txt", ip(10), sp("A\nB")))
	want := "The file /workspace/f.txt has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n" +
		"     7\tline 7\n     8\tline 8\n     9\tline 9\n    10\tline 10\n" +
		"    11\tA\n    12\tB\n" +
		"    13\tline 11\n    14\tline 12\n    15\tline 13\n    16\tline 14\n" +
		"Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
	sameBytes(t, "output", obs.Output, want)
}

// Files with NUL bytes are binary to the editor: it refuses to view or
// change them, and leaves them as they are.
func TestEditBinary(t *testing.T) {
	contents := map[string]string{
		"nul":        "abc\x00def\nfoo\n",
		"png":        "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR foo\n",
		"nul at end": strings.Repeat("foo\n", 100) + "\x00",
	}
	for name, content := range contents {
		acts := []*api.Action{
			viewA("f.bin"),
			viewA("f.bin", 1, 1),
			replace("f.bin", sp("foo"), sp("bar")),
			replace("f.bin", sp("abc"), sp("x")),
			insert("f.bin", ip(0), sp("x")),
			insert("f.bin", ip(1), sp("x")),
		}
		for _, a := range acts {
			t.Run(name+"/"+a.Command, func(t *testing.T) {
				e := newEnv(t)
				e.put("f.bin", content)
				_, err := e.do(a)
				wantErr(t, err, api.ErrInvalidArgument, "binary")
				sameBytes(t, "binary file", e.get("f.bin"), content)
				// Nothing was recorded to undo.
				_, err = e.do(undo("f.bin"))
				wantErr(t, err, api.ErrInvalidArgument)
			})
		}
	}
}

func TestEditTooLarge(t *testing.T) {
	cfg := file.DefaultConfig()
	cfg.MaxEditBytes = 16
	e := newEnvCfg(t, cfg, -1, -1)
	big := strings.Repeat("foo\n", 5) // 20 bytes
	e.put("big.txt", big)
	for _, a := range []*api.Action{viewA("big.txt"), replace("big.txt", sp("foo\nfoo\nfoo\nfoo\nfoo"), sp("x")), insert("big.txt", ip(0), sp("x"))} {
		_, err := e.do(a)
		wantErr(t, err, api.ErrTooLarge)
		sameBytes(t, "big file", e.get("big.txt"), big)
	}
	// file.read is not bound by it.
	if obs := e.mustDo(read("big.txt")); obs.Content != big {
		t.Errorf("read %q", obs.Content)
	}
}

func TestEditErrors(t *testing.T) {
	e := newEnv(t)
	e.put("dir/f.txt", "x\n")
	if err := mkfifo(e.host("fifo")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		a    *api.Action
		err  error
	}{
		{"replace missing", replace("missing.txt", sp("a"), sp("b")), api.ErrNotFound},
		{"insert missing", insert("missing.txt", ip(0), sp("b")), api.ErrNotFound},
		{"replace dir", replace("dir", sp("a"), sp("b")), api.ErrInvalidArgument},
		{"insert dir", insert("dir", ip(0), sp("b")), api.ErrInvalidArgument},
		{"replace fifo", replace("fifo", sp("a"), sp("b")), api.ErrInvalidArgument},
		{"insert fifo", insert("fifo", ip(0), sp("b")), api.ErrInvalidArgument},
		{"undo missing", undo("missing.txt"), api.ErrInvalidArgument},
		{"undo dir", undo("dir"), api.ErrInvalidArgument},
		{"no path", &api.Action{Kind: api.KindFileEdit, Command: "view"}, api.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.do(tc.a)
			wantErr(t, err, tc.err)
			if e.exists("missing.txt") {
				t.Error("missing.txt was created")
			}
			sameBytes(t, "dir/f.txt", e.get("dir/f.txt"), "x\n")
		})
	}
}

// Edits of one file are serialized: none is lost to another's
// read-modify-write.
func TestConcurrentEdits(t *testing.T) {
	e := newEnv(t)
	const n = 40
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "slot %d\n", i)
	}
	e.put("f.txt", b.String())
	e.put("g.txt", "")
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			_, err := e.ex.Execute(t.Context(), replace("f.txt", sp(fmt.Sprintf("slot %d\n", i)), sp(fmt.Sprintf("done %d\n", i))), executors.Discard)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := e.ex.Execute(t.Context(), insert("g.txt", ip(0), sp(fmt.Sprintf("g %d", i))), executors.Discard)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := e.ex.Execute(t.Context(), viewA("f.txt"), executors.Discard)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	got := e.get("f.txt")
	for i := range n {
		if !strings.Contains(got, fmt.Sprintf("done %d\n", i)) {
			t.Errorf("edit %d lost", i)
		}
	}
	if g := strings.Count(e.get("g.txt"), "\n"); g != n {
		t.Errorf("g.txt has %d lines, want %d", g, n)
	}
	noTemps(t, e.dir)
}

// TestSameSizeEditMovesMtime: an edit that keeps the size, within the
// second of the previous write, still changes the whole-second mtime, so
// caches keyed on (size, mtime) such as Python's __pycache__ see it.
func TestSameSizeEditMovesMtime(t *testing.T) {
	e := newEnv(t)
	e.put("calc.py", "return a - b\n")
	before, err := os.Stat(e.host("calc.py"))
	if err != nil {
		t.Fatal(err)
	}
	e.mustDo(replace("calc.py", sp("a - b"), sp("a + b")))
	after, err := os.Stat(e.host("calc.py"))
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() || after.ModTime().Unix() == before.ModTime().Unix() {
		t.Errorf("same-size edit: size %d -> %d, mtime second %d -> %d", before.Size(), after.Size(), before.ModTime().Unix(), after.ModTime().Unix())
	}
	// An edit that changes the size keeps the real time.
	e.mustDo(replace("calc.py", sp("a + b"), sp("a + b + 0")))
	if st, _ := os.Stat(e.host("calc.py")); st.ModTime().After(time.Now().Add(2 * time.Second)) {
		t.Errorf("mtime moved to %v", st.ModTime())
	}
}
