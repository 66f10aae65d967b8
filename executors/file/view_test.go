package file_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors/file"
)

// catN renders lines first..last of ls the way the editor does.
func catN(ls []string, first, last int) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i, ls[i-1])
	}
	return b.String()
}

func TestViewFile(t *testing.T) {
	four := []string{"one", "two", "three", "four"}
	const fourText = "one\ntwo\nthree\nfour\n"
	const head = "Here's the result of running `cat -n` on /workspace/f.txt:\n"
	cases := []struct {
		name    string
		content string
		vr      []int
		want    string // after the header
		err     error
	}{
		{name: "whole", content: fourText, want: catN(four, 1, 4)},
		{name: "range 2 3", content: fourText, vr: []int{2, 3}, want: catN(four, 2, 3)},
		{name: "range 2 -1", content: fourText, vr: []int{2, -1}, want: catN(four, 2, 4)},
		{name: "range 1 4", content: fourText, vr: []int{1, 4}, want: catN(four, 1, 4)},
		{name: "range 4 4", content: fourText, vr: []int{4, 4}, want: catN(four, 4, 4)},
		{name: "range 4 -1", content: fourText, vr: []int{4, -1}, want: catN(four, 4, 4)},
		{name: "range 1 1", content: fourText, vr: []int{1, 1}, want: catN(four, 1, 1)},
		{name: "range 0 1", content: fourText, vr: []int{0, 1}, err: api.ErrInvalidArgument},
		{name: "range 3 2", content: fourText, vr: []int{3, 2}, err: api.ErrInvalidArgument},
		{name: "range 1 999", content: fourText, vr: []int{1, 999}, err: api.ErrInvalidArgument},
		{name: "range 1 5", content: fourText, vr: []int{1, 5}, err: api.ErrInvalidArgument},
		{name: "range 5 5", content: fourText, vr: []int{5, 5}, err: api.ErrInvalidArgument},
		{name: "range 5 -1", content: fourText, vr: []int{5, -1}, err: api.ErrInvalidArgument},
		{name: "range -1 2", content: fourText, vr: []int{-1, 2}, err: api.ErrInvalidArgument},
		{name: "range 2 -2", content: fourText, vr: []int{2, -2}, err: api.ErrInvalidArgument},
		{name: "range one number", content: fourText, vr: []int{1}, err: api.ErrInvalidArgument},
		{name: "range three numbers", content: fourText, vr: []int{1, 2, 3}, err: api.ErrInvalidArgument},
		{name: "no final newline", content: "one\ntwo", want: catN(four, 1, 2)},
		{name: "no final newline last line", content: "one\ntwo", vr: []int{2, -1}, want: catN(four, 2, 2)},
		{name: "crlf shown without cr", content: "one\r\ntwo\r\nthree\r\n", want: catN(four, 1, 3)},
		{name: "crlf range", content: "one\r\ntwo\r\nthree\r\n", vr: []int{2, 2}, want: catN(four, 2, 2)},
		{name: "crlf no final newline", content: "one\r\ntwo", want: catN(four, 1, 2)},
		{name: "tabs and blank lines", content: "\tx\n\n  y\n", want: "     1\t\tx\n     2\t\n     3\t  y\n"},
		{name: "empty file", content: "", want: ""},
		{name: "single blank line", content: "\n", want: "     1\t\n"},
		{name: "utf8", content: "héllo\n日本\n", want: "     1\théllo\n     2\t日本\n"},
		{name: "latin-1 is still text to the editor", content: "caf\xe9\n", want: "     1\tcaf\xe9\n"},
		{name: "line number width", content: strings.Repeat("l\n", 1000001), vr: []int{1000000, 1000001}, want: "1000000\tl\n1000001\tl\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", tc.content)
			obs, err := e.do(viewA("f.txt", tc.vr...))
			if tc.err != nil {
				wantErr(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "output", obs.Output, head+tc.want)
			if strings.Contains(obs.Output, "\r") {
				t.Error("output holds a carriage return")
			}
			if obs.Kind != api.KindFileEdit || obs.Path != "/workspace/f.txt" {
				t.Errorf("kind %q path %q", obs.Kind, obs.Path)
			}
			sameBytes(t, "file after view", e.get("f.txt"), tc.content)
		})
	}
}

// The editor's answer is capped at MaxOutputChars, first and last half.
func TestViewOutputCap(t *testing.T) {
	cfg := file.DefaultConfig()
	cfg.MaxOutputChars = 200
	e := newEnvCfg(t, cfg, -1, -1)
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	e.put("big.txt", b.String())
	obs := e.mustDo(viewA("big.txt"))
	if n := len([]rune(obs.Output)); n > 400 {
		t.Errorf("output of %d characters, cap 200", n)
	}
	if !strings.Contains(obs.Output, "     1\tline 1\n") || !strings.Contains(obs.Output, "  1000\tline 1000\n") {
		t.Errorf("head or tail missing: %q", obs.Output)
	}
}

func TestViewDirectory(t *testing.T) {
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "outside")
	for _, d := range []string{ws, outside, filepath.Join(outside, "inner")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvAt(t, ws, file.DefaultConfig(), -1, -1)
	for _, f := range []string{"a.txt", "b/c.txt", "b/d/e.txt", "b/d/f/g.txt", "src/main.go", "src/.hidden", "src/pkg/x.go", "src/pkg/deeper/y.go",
		".env", ".git/config", ".git/objects/ab/cd", ".hiddendir/visible.txt", "emptydir/.keep", "z/z.txt"} {
		e.put(f, "x\n")
	}
	if err := os.Mkdir(e.host("empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.symlink("src", "srclink")
	e.symlink(outside, "outlink")
	e.symlink("../outside", "outrel")
	e.symlink("nowhere", "dangling")
	e.symlink("a.txt", "b/alink")
	e.symlink("..", "b/up")
	e.symlink(".", "self")
	if err := mkfifo(e.host("b/fifo")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path   string
		header string
		want   []string
	}{
		{path: ".", header: "/workspace", want: []string{
			"/workspace/",
			"/workspace/a.txt",
			"/workspace/b/",
			"/workspace/b/alink",
			"/workspace/b/c.txt",
			"/workspace/b/d/",
			"/workspace/b/fifo",
			"/workspace/b/up",
			"/workspace/dangling",
			"/workspace/empty/",
			"/workspace/emptydir/",
			"/workspace/outlink",
			"/workspace/outrel",
			"/workspace/self",
			"/workspace/src/",
			"/workspace/src/main.go",
			"/workspace/src/pkg/",
			"/workspace/srclink",
			"/workspace/z/",
			"/workspace/z/z.txt",
		}},
		{path: "/workspace", header: "/workspace"},
		{path: "/workspace/", header: "/workspace"},
		{path: "b", header: "/workspace/b", want: []string{
			"/workspace/b/",
			"/workspace/b/alink",
			"/workspace/b/c.txt",
			"/workspace/b/d/",
			"/workspace/b/d/e.txt",
			"/workspace/b/d/f/",
			"/workspace/b/fifo",
			"/workspace/b/up",
		}},
		{path: "src/pkg", header: "/workspace/src/pkg", want: []string{
			"/workspace/src/pkg/",
			"/workspace/src/pkg/deeper/",
			"/workspace/src/pkg/deeper/y.go",
			"/workspace/src/pkg/x.go",
		}},
		{path: "empty", header: "/workspace/empty", want: []string{"/workspace/empty/"}},
		{path: ".hiddendir", header: "/workspace/.hiddendir", want: []string{"/workspace/.hiddendir/", "/workspace/.hiddendir/visible.txt"}},
		// A link to a directory inside is viewed under its own name.
		{path: "srclink", header: "/workspace/srclink", want: []string{
			"/workspace/srclink/",
			"/workspace/srclink/main.go",
			"/workspace/srclink/pkg/",
			"/workspace/srclink/pkg/x.go",
			"/workspace/srclink/pkg/deeper/",
		}},
	}
	cases[1].want, cases[2].want = cases[0].want, cases[0].want
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			obs, err := e.do(viewA(tc.path))
			if err != nil {
				t.Fatal(err)
			}
			head := "Here's the files and directories up to 2 levels deep in " + tc.header + ", excluding hidden items:\n"
			if !strings.HasPrefix(obs.Output, head) {
				t.Fatalf("output does not start with %q:\n%s", head, obs.Output)
			}
			got := strings.Split(strings.TrimSuffix(strings.TrimPrefix(obs.Output, head), "\n"), "\n")
			want := append([]string(nil), tc.want...)
			if strings.Join(sortedCopy(got), "\n") != strings.Join(sortedCopy(want), "\n") {
				t.Errorf("listing:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
	// A view_range on a directory is refused.
	_, err := e.do(viewA(".", 1, 2))
	wantErr(t, err, api.ErrInvalidArgument)
}

func TestViewErrors(t *testing.T) {
	e := newEnv(t)
	e.put("f.txt", "x\n")
	e.symlink("nowhere", "dangling")
	e.symlink("l2", "l1")
	e.symlink("l1", "l2")
	if err := mkfifo(e.host("fifo")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		err  error
	}{
		{"missing.txt", api.ErrNotFound},
		{"no/such/dir/", api.ErrNotFound},
		{"dangling", api.ErrNotFound},
		{"f.txt/x", api.ErrInvalidArgument},
		{"l1", api.ErrPermissionDenied},
		{"fifo", api.ErrInvalidArgument},
		{"../ws2", api.ErrPermissionDenied},
		{"/tmp", api.ErrPermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, err := e.do(viewA(tc.path))
			wantErr(t, err, tc.err)
		})
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
