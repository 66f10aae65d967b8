package file_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
	"github.com/sandboxd/sandboxd/executors/file"
)

// crlfFile reports whether the editor takes content for a CRLF file: its
// first line ends in "\r\n".
func crlfFile(content []byte) bool {
	i := bytes.IndexByte(content, '\n')
	return i > 0 && content[i-1] == '\r'
}

// FuzzStrReplace checks str_replace against strings.Replace: when it
// succeeds, old_str occurred exactly once (counted without overlap, as the
// editor and Python's str.count do) and the file is the replacement; when
// it fails, the file is byte-identical and the failure is explained by the
// input.
func FuzzStrReplace(f *testing.F) {
	seeds := []struct{ content, old, new string }{
		{"a\nfoo\nb\n", "foo", "bar"},
		{"a\nfoo\nb\nfoo\n", "foo", "bar"},
		{"abc", "", "x"},
		{"aaa", "aa", "b"},
		{"a\r\nfoo\r\nb\r\n", "foo\nb", "x\ny"},
		{"a\r\nfoo\r\n", "foo\r\n", "bar\r\n"},
		{"caf\xe9\nfoo\n", "foo", "\xff"},
		{"x\x00y", "x", "z"},
		{"no newline", "newline", ""},
		{"", "a", "b"},
		{"\n\n\n", "\n", "\r\n"},
		{"a\nb\r\nc\n", "b\r\n", "B\n"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.content), s.old, s.new)
	}
	dir := f.TempDir()
	fsys := backends.DirFS{Dir: dir, View: "/workspace", UID: -1, GID: -1}
	host := filepath.Join(dir, "f.txt")
	f.Fuzz(func(t *testing.T, content []byte, old, new string) {
		if err := os.WriteFile(host, content, 0o644); err != nil {
			t.Fatal(err)
		}
		// A fresh executor each time: no history carried between inputs.
		ex := file.New(fsys, file.DefaultConfig())
		a := &api.Action{Kind: api.KindFileEdit, Command: "str_replace", Path: "f.txt", OldStr: &old, NewStr: &new}
		obs, err := ex.Execute(context.Background(), a, executors.Discard)
		got, rerr := os.ReadFile(host)
		if rerr != nil {
			t.Fatal(rerr)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("the directory holds %d entries, want only f.txt", len(ents))
		}
		if err != nil {
			if !bytes.Equal(got, content) {
				t.Fatalf("failed (%v) but the file changed:\n got %q\nwant %q", err, got, content)
			}
			if c := api.CodeOf(err); c != api.CodeInvalidArgument {
				t.Fatalf("failed with code %s: %v", c, err)
			}
		}
		binary := hasNUL(content, 8<<10)
		if binary {
			if err == nil {
				t.Fatalf("str_replace changed a file with a NUL byte: %q", content)
			}
			return
		}
		if crlfFile(content) && !strings.Contains(old, "\r\n") && strings.ContainsAny(old+new, "\n") {
			t.Skip("the editor converts old_str and new_str to the file's CRLF line endings")
		}
		n := strings.Count(string(content), old)
		if old == "" {
			n = 0
		}
		if err != nil {
			if n == 1 {
				t.Fatalf("old_str %q occurs once in %q, yet str_replace failed: %v", old, content, err)
			}
			return
		}
		if n != 1 {
			t.Fatalf("str_replace succeeded though old_str %q occurs %d times in %q", old, n, content)
		}
		want := strings.Replace(string(content), old, new, 1)
		if string(got) != want {
			t.Fatalf("file after the replace:\n got %q\nwant %q", got, want)
		}
		if !strings.HasPrefix(obs.Output, "The file /workspace/f.txt has been edited.") {
			t.Fatalf("output %q", obs.Output)
		}
		// Undo restores the original byte for byte.
		if _, err := ex.Execute(context.Background(), &api.Action{Kind: api.KindFileEdit, Command: "undo_edit", Path: "f.txt"}, executors.Discard); err != nil {
			t.Fatal(err)
		}
		if back, _ := os.ReadFile(host); !bytes.Equal(back, content) {
			t.Fatalf("undo restored %q, want %q", back, content)
		}
	})
}
