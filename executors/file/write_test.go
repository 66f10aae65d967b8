package file_test

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors/file"
)

func TestWrite(t *testing.T) {
	cases := []struct {
		name     string
		existing *string // content of the file before, nil: none
		exMode   fs.FileMode
		path     string
		content  *string
		mode     string
		want     string
		wantMode fs.FileMode
	}{
		{name: "new file", path: "f.txt", content: sp("hello\n"), want: "hello\n", wantMode: 0o644},
		{name: "nested parents", path: "a/b/c/d/f.txt", content: sp("x"), want: "x", wantMode: 0o644},
		{name: "absolute view path", path: "/workspace/abs/f.txt", content: sp("x\n"), want: "x\n", wantMode: 0o644},
		{name: "nil content", path: "empty.txt", content: nil, want: "", wantMode: 0o644},
		{name: "empty content", path: "empty.txt", content: sp(""), want: "", wantMode: 0o644},
		{name: "replace keeps mode", existing: sp("old\n"), exMode: 0o640, path: "f.txt", content: sp("new\n"), want: "new\n", wantMode: 0o640},
		{name: "replace keeps exec bit", existing: sp("#!/bin/sh\n"), exMode: 0o755, path: "f.sh", content: sp("#!/bin/sh\necho\n"), want: "#!/bin/sh\necho\n", wantMode: 0o755},
		{name: "replace keeps 0600", existing: sp("k"), exMode: 0o600, path: "key", content: sp("k2"), want: "k2", wantMode: 0o600},
		{name: "mode 0600", path: "f.txt", content: sp("s"), mode: "0600", want: "s", wantMode: 0o600},
		{name: "mode 755", path: "f.txt", content: sp("s"), mode: "755", want: "s", wantMode: 0o755},
		{name: "mode 0o700", path: "f.txt", content: sp("s"), mode: "0o700", want: "s", wantMode: 0o700},
		{name: "mode 0777 beats umask", path: "f.txt", content: sp("s"), mode: "0777", want: "s", wantMode: 0o777},
		{name: "mode 00644", path: "f.txt", content: sp("s"), mode: "00644", want: "s", wantMode: 0o644},
		{name: "mode changes existing", existing: sp("o"), exMode: 0o644, path: "f.txt", content: sp("n"), mode: "0600", want: "n", wantMode: 0o600},
		{name: "mode 0400", path: "ro.txt", content: sp("r"), mode: "0400", want: "r", wantMode: 0o400},
		{name: "binary content", path: "b.bin", content: sp("\x00\x01\xff\xfe"), want: "\x00\x01\xff\xfe", wantMode: 0o644},
		{name: "crlf content kept", path: "w.txt", content: sp("a\r\nb\r\n"), want: "a\r\nb\r\n", wantMode: 0o644},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rel := filepath.ToSlash(tc.path)
			if r, err := e.fs.Rel(tc.path); err == nil {
				rel = r
			}
			if tc.existing != nil {
				e.put(rel, *tc.existing)
				if err := os.Chmod(e.host(rel), tc.exMode); err != nil {
					t.Fatal(err)
				}
			}
			obs, err := e.do(write(tc.path, tc.content, tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "file", e.get(rel), tc.want)
			if obs.Bytes != int64(len(tc.want)) {
				t.Errorf("bytes %d, want %d", obs.Bytes, len(tc.want))
			}
			if obs.Kind != api.KindFileWrite || obs.Path != "/workspace/"+rel {
				t.Errorf("kind %q path %q", obs.Kind, obs.Path)
			}
			if got := perm(t, e.host(rel)); got != tc.wantMode {
				t.Errorf("mode %v, want %v", got, tc.wantMode)
			}
			noTemps(t, filepath.Dir(e.host(rel)))
			for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
				if got := perm(t, e.host(d)); got != 0o755 {
					t.Errorf("parent %s mode %v, want 0755", d, got)
				}
			}
		})
	}
}

func TestWriteBadMode(t *testing.T) {
	for _, mode := range []string{"999", "rwx", "01777", "4755", "2755", "1777", "0o1777", "7777", "-644", "+644", "0x1ff", " 644", "644 ", "0o", "0O644", "u+x", "8", "0644\x00"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			e.put("f.txt", "old\n")
			if err := os.Chmod(e.host("f.txt"), 0o640); err != nil {
				t.Fatal(err)
			}
			_, err := e.do(write("f.txt", sp("new\n"), mode))
			wantErr(t, err, api.ErrInvalidArgument, "mode")
			sameBytes(t, "file", e.get("f.txt"), "old\n")
			if got := perm(t, e.host("f.txt")); got != 0o640 {
				t.Errorf("mode %v changed", got)
			}
			_, err = e.do(write("new.txt", sp("x"), mode))
			wantErr(t, err, api.ErrInvalidArgument)
			if e.exists("new.txt") {
				t.Error("a write with a bad mode created the file")
			}
			if got := names(t, e.dir); !slices.Equal(got, []string{"f.txt"}) {
				t.Errorf("workspace holds %q", got)
			}
		})
	}
}

// "0000" parses as valid permission bits; it must be applied (or refused),
// not silently taken for "keep the mode".
func TestWriteModeZero(t *testing.T) {
	for _, mode := range []string{"0", "0000", "0o0"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.do(write("f.txt", sp("x"), mode))
			if err != nil {
				wantErr(t, err, api.ErrInvalidArgument)
				return
			}
			if got := perm(t, e.host("f.txt")); got != 0 {
				t.Fatalf("BUG (regression): file.write with mode %q is accepted but ignored: the file gets mode %v instead of 0000", mode, got)
			}
		})
	}
}

// The write is atomic: a new file is renamed over the old one, so a reader
// holding the old file keeps reading the old content, and no temporary
// file is left.
func TestWriteAtomic(t *testing.T) {
	e := newEnv(t)
	e.put("dir/f.txt", "old content\n")
	e.put("dir/other.txt", "o\n")
	old, err := os.Open(e.host("dir/f.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	before, _ := os.Stat(e.host("dir/f.txt"))
	for range 5 {
		e.mustDo(write("dir/f.txt", sp("new content\n"), ""))
		e.mustDo(write("/workspace/dir/f.txt", sp("newer\n"), "0600"))
	}
	got, err := io.ReadAll(old)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "old content\n" {
		t.Errorf("the old file was changed in place: %q", got)
	}
	after, _ := os.Stat(e.host("dir/f.txt"))
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced")
	}
	if want := []string{"f.txt", "other.txt"}; !slices.Equal(names(t, e.host("dir")), want) {
		t.Errorf("dir holds %q, want %q", names(t, e.host("dir")), want)
	}
	if want := []string{"dir"}; !slices.Equal(names(t, e.dir), want) {
		t.Errorf("workspace holds %q, want %q", names(t, e.dir), want)
	}
	sameBytes(t, "file", e.get("dir/f.txt"), "newer\n")
}

func TestWriteThroughSymlink(t *testing.T) {
	cases := []struct {
		name  string
		links [][2]string // target, link (in order)
		path  string      // written
		real  string      // the file that must change
	}{
		{name: "link to file", links: [][2]string{{"real.txt", "link"}}, path: "link", real: "real.txt"},
		{name: "chain of links", links: [][2]string{{"real.txt", "l1"}, {"l1", "l2"}, {"l2", "l3"}}, path: "l3", real: "real.txt"},
		{name: "link in a subdir going up", links: [][2]string{{"../real.txt", "sub/up"}}, path: "sub/up", real: "real.txt"},
		{name: "link to a subdir file", links: [][2]string{{"sub/deep.txt", "down"}}, path: "down", real: "sub/deep.txt"},
		{name: "link to a dir, then a file", links: [][2]string{{"sub", "dirlink"}}, path: "dirlink/deep.txt", real: "sub/deep.txt"},
		{name: "absolute view path to link", links: [][2]string{{"real.txt", "link"}}, path: "/workspace/link", real: "real.txt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.put("real.txt", "real\n")
			e.put("sub/deep.txt", "deep\n")
			if err := os.Chmod(e.host(tc.real), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, l := range tc.links {
				e.symlink(l[0], l[1])
			}
			obs, err := e.do(write(tc.path, sp("changed\n"), ""))
			if err != nil {
				t.Fatal(err)
			}
			if obs.Bytes != 8 {
				t.Errorf("bytes %d", obs.Bytes)
			}
			sameBytes(t, tc.real, e.get(tc.real), "changed\n")
			if got := perm(t, e.host(tc.real)); got != 0o600 {
				t.Errorf("mode of %s %v, want 0600 kept", tc.real, got)
			}
			for _, l := range tc.links {
				isLink(t, e.host(l[1]), l[0])
			}
			for _, d := range []string{e.dir, e.host("sub")} {
				noTemps(t, d)
			}
		})
	}
}

// A link inside a symlinked directory is relative to the directory it
// really is in, as the kernel resolves it, not to the name used.
func TestWriteLinkInLinkedDir(t *testing.T) {
	e := newEnv(t)
	e.put("deep/er/x.txt", "x\n")
	e.put("deep/f.txt", "deep f\n")
	e.put("f.txt", "top f\n")
	e.symlink("deep/er", "dl")
	e.symlink("../f.txt", "deep/er/l") // from deep/er: deep/f.txt
	obs, err := e.do(read("dl/l"))
	if err != nil || obs.Content != "deep f\n" {
		t.Fatalf("read dl/l: %q %v", obs.Content, err)
	}
	_, err = e.do(write("dl/l", sp("written\n"), ""))
	if err != nil {
		t.Fatal(err)
	}
	if e.get("f.txt") != "top f\n" || e.get("deep/f.txt") != "written\n" {
		t.Fatalf("BUG (regression): file.write resolves a link under a symlinked directory lexically: wrote /workspace/f.txt (now %q) instead of deep/f.txt (now %q), the file read(dl/l) shows", e.get("f.txt"), e.get("deep/f.txt"))
	}
	isLink(t, e.host("deep/er/l"), "../f.txt")
}

func TestWriteErrors(t *testing.T) {
	e := newEnv(t)
	e.put("dir/f.txt", "f\n")
	e.put("file.txt", "x\n")
	cases := []struct {
		path string
		err  error
	}{
		{"dir", api.ErrInvalidArgument},
		{".", api.ErrInvalidArgument},
		{"/workspace", api.ErrInvalidArgument},
		{"file.txt/under", api.ErrInvalidArgument},
		{"", api.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, err := e.do(write(tc.path, sp("new\n"), ""))
			wantErr(t, err, tc.err)
			sameBytes(t, "dir/f.txt", e.get("dir/f.txt"), "f\n")
			sameBytes(t, "file.txt", e.get("file.txt"), "x\n")
			noTemps(t, e.dir)
			noTemps(t, e.host("dir"))
		})
	}
}

func TestWriteOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const id = 12345
	e := newEnvCfg(t, file.DefaultConfig(), id, id)
	e.put("existing/old.txt", "old\n") // owned by root
	e.mustDo(write("p1/p2/p3/new.txt", sp("n\n"), "0600"))
	e.mustDo(write("existing/old.txt", sp("o2\n"), ""))
	e.mustDo(write("existing/sub/w.txt", sp("w\n"), ""))
	e.mustDo(create("c1/c2/created.txt", sp("c\n")))
	e.put("edit.txt", "a\n")
	e.mustDo(replace("edit.txt", sp("a"), sp("b")))
	e.put("ins.txt", "a\n")
	e.mustDo(insert("ins.txt", ip(1), sp("b")))
	for _, p := range []string{"p1", "p1/p2", "p1/p2/p3", "p1/p2/p3/new.txt", "existing/old.txt", "existing/sub", "existing/sub/w.txt", "c1", "c1/c2", "c1/c2/created.txt", "edit.txt", "ins.txt"} {
		if uid, gid := owner(t, e.host(p)); uid != id || gid != id {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, uid, gid, id, id)
		}
	}
	// Directories that existed keep their owner.
	for _, p := range []string{"existing", "."} {
		if uid, gid := owner(t, e.host(p)); uid != 0 || gid != 0 {
			t.Errorf("existing %s changed owner to %d:%d", p, uid, gid)
		}
	}
	if got := perm(t, e.host("p1/p2/p3/new.txt")); got != 0o600 {
		t.Errorf("mode %v", got)
	}
	// Undo restores content and gives it to the sandbox's user too.
	e.mustDo(undo("edit.txt"))
	sameBytes(t, "undone", e.get("edit.txt"), "a\n")
	if uid, _ := owner(t, e.host("edit.txt")); uid != id {
		t.Errorf("undone file owned by %d", uid)
	}
}

// Without UID/GID the daemon keeps its own.
func TestWriteOwnerDaemon(t *testing.T) {
	e := newEnv(t)
	e.mustDo(write("a/b.txt", sp("x"), ""))
	for _, p := range []string{"a", "a/b.txt"} {
		if uid, gid := owner(t, e.host(p)); uid != os.Geteuid() || gid != os.Getegid() {
			t.Errorf("%s owned by %d:%d", p, uid, gid)
		}
	}
}
