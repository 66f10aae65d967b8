package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// rfsEnv is a workspace (the directory under test) next to an "outside"
// directory that no operation may touch.
type rfsEnv struct {
	r       *rootFS
	base    string // parent of both
	ws      string // the workspace, what r serves
	outside string // base/outside
}

const rfsSentinel = "sentinel: must never be read, written or moved\n"

// rfsOld is the mtime given to everything outside, so any change shows.
var rfsOld = time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)

func rfsSetup(t *testing.T) *rfsEnv {
	t.Helper()
	base := t.TempDir()
	e := &rfsEnv{base: base, ws: filepath.Join(base, "workspace"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.ws, e.outside, filepath.Join(e.outside, "emptydir"), filepath.Join(e.outside, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"sentinel": rfsSentinel, "sub/file": "sub file\n"} {
		p := filepath.Join(e.outside, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"sentinel", "sub/file", "emptydir", "sub", "."} {
		if err := os.Chtimes(filepath.Join(e.outside, p), rfsOld, rfsOld); err != nil {
			t.Fatal(err)
		}
	}
	r, err := newRootFS(e.ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	e.r = r
	return e
}

// rfsSnapshot describes every entry under dir (not following links): type,
// mode, size, mtime, content hash, link target. skip names a subtree to
// leave out.
func rfsSnapshot(t *testing.T, dir, skip string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		snap[p] = rfsDescribe(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func rfsDescribe(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		return "error: " + err.Error()
	}
	s := fmt.Sprintf("mode=%v size=%d mtime=%d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
	switch {
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
	case fi.Mode()&fs.ModeSymlink != 0:
		l, _ := os.Readlink(p)
		s += " -> " + l
	}
	return s
}

func rfsCompare(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s disappeared (was %s)", what, p, b)
		} else if a != b {
			t.Errorf("%s: %s changed:\n  before %s\n  after  %s", what, p, b, a)
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared: %s", what, p, a)
		}
	}
}

func (e *rfsEnv) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.ws, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *rfsEnv) mkdir(t *testing.T, name string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(e.ws, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (e *rfsEnv) symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(e.ws, name)); err != nil {
		t.Fatal(err)
	}
}

// read returns a workspace file's content, or "<missing>".
func (e *rfsEnv) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.ws, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "<missing>"
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (e *rfsEnv) lstat(t *testing.T, name string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(e.ws, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func (e *rfsEnv) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(e.ws, name))
	return err == nil
}

func (e *rfsEnv) open(t *testing.T, name string, flag experimentalsys.Oflag) *rootFile {
	t.Helper()
	f, errno := e.r.OpenFile(name, flag, 0o644)
	if errno != 0 {
		t.Fatalf("OpenFile(%q, %#x): %v", name, flag, errno)
	}
	t.Cleanup(func() { f.Close() })
	return f.(*rootFile)
}

func rfsErrno(t *testing.T, what string, got, want experimentalsys.Errno) {
	t.Helper()
	if got != want {
		t.Errorf("%s: errno %v (%d), want %v (%d)", what, got, got, want, want)
	}
}

func rfsOK(t *testing.T, what string, got experimentalsys.Errno) {
	t.Helper()
	if got != 0 {
		t.Fatalf("%s: %v", what, got)
	}
}

func rfsEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// rfsReadAll reads f to its end through the File interface.
func rfsReadAll(t *testing.T, f experimentalsys.File) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 3) // small, to loop
	for {
		n, errno := f.Read(buf)
		rfsOK(t, "Read", errno)
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

func rfsNames(t *testing.T, f experimentalsys.File, n int) []string {
	t.Helper()
	var names []string
	for {
		ds, errno := f.Readdir(n)
		rfsOK(t, "Readdir", errno)
		for _, d := range ds {
			names = append(names, d.Name)
		}
		if n <= 0 || len(ds) < n {
			sort.Strings(names)
			return names
		}
	}
}

func rfsStatusFlags(t *testing.T, f *rootFile) int {
	t.Helper()
	var fl int
	if err := control(f.f, func(fd int) (err error) {
		fl, err = unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return fl
}

func TestRootFS_Operations(t *testing.T) {
	const (
		rd    = experimentalsys.O_RDONLY
		wr    = experimentalsys.O_WRONLY
		rdwr  = experimentalsys.O_RDWR
		creat = experimentalsys.O_CREAT
		excl  = experimentalsys.O_EXCL
		trunc = experimentalsys.O_TRUNC
		apnd  = experimentalsys.O_APPEND
		odir  = experimentalsys.O_DIRECTORY
		nofol = experimentalsys.O_NOFOLLOW
	)
	tests := []struct {
		name string
		run  func(t *testing.T, e *rfsEnv)
	}{
		{"create write read back", func(t *testing.T, e *rfsEnv) {
			f := e.open(t, "new.txt", rdwr|creat)
			n, errno := f.Write([]byte("hello world"))
			rfsOK(t, "Write", errno)
			rfsEq(t, "written", n, 11)
			buf := make([]byte, 5)
			n, errno = f.Pread(buf, 6)
			rfsOK(t, "Pread", errno)
			rfsEq(t, "Pread", string(buf[:n]), "world")
			off, errno := f.Seek(0, io.SeekStart)
			rfsOK(t, "Seek", errno)
			rfsEq(t, "offset", off, int64(0))
			rfsEq(t, "Read", rfsReadAll(t, f), "hello world")
			n, errno = f.Pwrite([]byte("W"), 6)
			rfsOK(t, "Pwrite", errno)
			rfsEq(t, "pwritten", n, 1)
			off, errno = f.Seek(-5, io.SeekEnd)
			rfsOK(t, "Seek end", errno)
			rfsEq(t, "offset", off, int64(6))
			off, errno = f.Seek(1, io.SeekCurrent)
			rfsOK(t, "Seek current", errno)
			rfsEq(t, "offset", off, int64(7))
			_, errno = f.Seek(0, 7)
			rfsErrno(t, "Seek bad whence", errno, experimentalsys.EINVAL)
			rfsOK(t, "Sync", f.Sync())
			rfsOK(t, "Datasync", f.Datasync())
			rfsEq(t, "host content", e.read(t, "new.txt"), "hello World")
			rfsEq(t, "mode", e.lstat(t, "new.txt").Mode().Perm()&^0o022, fs.FileMode(0o644))
			st, errno := f.Stat()
			rfsOK(t, "Stat", errno)
			rfsEq(t, "size", st.Size, int64(11))
			dev, _ := f.Dev()
			ino, _ := f.Ino()
			rfsEq(t, "Dev", dev, st.Dev)
			rfsEq(t, "Ino", ino, st.Ino)
			isDir, _ := f.IsDir()
			rfsEq(t, "IsDir", isDir, false)
			rfsOK(t, "Truncate", f.Truncate(5))
			rfsEq(t, "truncated", e.read(t, "new.txt"), "hello")
			rfsErrno(t, "Truncate negative", f.Truncate(-1), experimentalsys.EINVAL)
			_, errno = f.Pread(buf, -1)
			rfsErrno(t, "Pread negative", errno, experimentalsys.EINVAL)
			_, errno = f.Pwrite(buf, -1)
			rfsErrno(t, "Pwrite negative", errno, experimentalsys.EINVAL)
			ready, errno := f.Poll(experimentalsys.POLLIN, 0)
			rfsOK(t, "Poll", errno)
			rfsEq(t, "ready", ready, true)
		}},
		{"access modes are enforced", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "data")
			ro := e.open(t, "f", rd)
			_, errno := ro.Write([]byte("x"))
			rfsErrno(t, "Write on O_RDONLY", errno, experimentalsys.EBADF)
			_, errno = ro.Pwrite([]byte("x"), 0)
			rfsErrno(t, "Pwrite on O_RDONLY", errno, experimentalsys.EBADF)
			wo := e.open(t, "f", wr)
			_, errno = wo.Read(make([]byte, 1))
			rfsErrno(t, "Read on O_WRONLY", errno, experimentalsys.EBADF)
			_, errno = e.r.OpenFile("f", rdwr|wr, 0)
			rfsErrno(t, "O_RDWR|O_WRONLY", errno, experimentalsys.EINVAL)
			rfsEq(t, "content", e.read(t, "f"), "data")
		}},
		{"O_EXCL", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "keep")
			_, errno := e.r.OpenFile("f", wr|creat|excl, 0o644)
			rfsErrno(t, "O_CREAT|O_EXCL existing", errno, experimentalsys.EEXIST)
			e.symlink(t, "dangling-target", "dangling")
			_, errno = e.r.OpenFile("dangling", wr|creat|excl, 0o644)
			rfsErrno(t, "O_CREAT|O_EXCL on a dangling link", errno, experimentalsys.EEXIST)
			rfsEq(t, "link target not created", e.exists("dangling-target"), false)
			e.open(t, "g", wr|creat|excl)
			rfsEq(t, "created", e.read(t, "g"), "")
			rfsEq(t, "kept", e.read(t, "f"), "keep")
		}},
		{"O_TRUNC", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "abcdef")
			e.open(t, "f", wr|trunc)
			rfsEq(t, "content", e.read(t, "f"), "")
		}},
		{"O_APPEND and SetAppend", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "abc")
			f := e.open(t, "f", wr|apnd)
			rfsEq(t, "IsAppend", f.IsAppend(), true)
			_, errno := f.Write([]byte("def"))
			rfsOK(t, "Write", errno)
			rfsEq(t, "appended", e.read(t, "f"), "abcdef")
			rfsOK(t, "SetAppend(false)", f.SetAppend(false))
			rfsEq(t, "IsAppend", f.IsAppend(), false)
			_, errno = f.Seek(0, io.SeekStart)
			rfsOK(t, "Seek", errno)
			_, errno = f.Write([]byte("X"))
			rfsOK(t, "Write", errno)
			rfsEq(t, "overwritten", e.read(t, "f"), "Xbcdef")
			_, errno = f.Pwrite([]byte("Y"), 1)
			rfsOK(t, "Pwrite", errno)
			rfsEq(t, "pwritten", e.read(t, "f"), "XYcdef")
			rfsOK(t, "SetAppend(true)", f.SetAppend(true))
			_, errno = f.Seek(0, io.SeekStart)
			rfsOK(t, "Seek", errno)
			_, errno = f.Write([]byte("!"))
			rfsOK(t, "Write", errno)
			rfsEq(t, "appended again", e.read(t, "f"), "XYcdef!")
			rfsEq(t, "O_APPEND on the descriptor", rfsStatusFlags(t, f)&unix.O_APPEND != 0, true)
		}},
		{"O_NONBLOCK only when asked", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			f := e.open(t, "f", rd)
			rfsEq(t, "IsNonblock", f.IsNonblock(), false)
			rfsEq(t, "O_NONBLOCK on the descriptor", rfsStatusFlags(t, f)&unix.O_NONBLOCK != 0, false)
			rfsOK(t, "SetNonblock", f.SetNonblock(true))
			rfsEq(t, "IsNonblock", f.IsNonblock(), true)
			rfsEq(t, "O_NONBLOCK on the descriptor", rfsStatusFlags(t, f)&unix.O_NONBLOCK != 0, true)
			g := e.open(t, "f", rd|experimentalsys.O_NONBLOCK)
			rfsEq(t, "IsNonblock", g.IsNonblock(), true)
			rfsEq(t, "read", rfsReadAll(t, g), "x")
		}},
		{"ENOENT EISDIR ENOTDIR on open", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			e.mkdir(t, "d")
			for _, c := range []struct {
				path string
				flag experimentalsys.Oflag
				want experimentalsys.Errno
			}{
				{"missing", rd, experimentalsys.ENOENT},
				{"missing/x", rdwr | creat, experimentalsys.ENOENT},
				{"d", wr, experimentalsys.EISDIR},
				{"d", rdwr, experimentalsys.EISDIR},
				{"d", rd | odir | rdwr, experimentalsys.EISDIR},
				{"f", rd | odir, experimentalsys.ENOTDIR},
				{"f/", rd, experimentalsys.ENOTDIR},
				{"f/x", rd, experimentalsys.ENOTDIR},
			} {
				_, errno := e.r.OpenFile(c.path, c.flag, 0o644)
				rfsErrno(t, fmt.Sprintf("OpenFile(%q, %#x)", c.path, c.flag), errno, c.want)
			}
		}},
		{"O_DIRECTORY and Readdir with rewind", func(t *testing.T, e *rfsEnv) {
			e.write(t, "a.txt", "a")
			e.mkdir(t, "sub")
			e.symlink(t, "a.txt", "link")
			d := e.open(t, ".", rd|odir)
			isDir, _ := d.IsDir()
			rfsEq(t, "IsDir", isDir, true)
			ds, errno := d.Readdir(-1)
			rfsOK(t, "Readdir", errno)
			got := map[string]experimentalsys.Dirent{}
			for _, de := range ds {
				got[de.Name] = de
			}
			if len(got) != 3 || len(ds) != 3 {
				t.Fatalf("Readdir = %v, want a.txt, sub, link (no . or ..)", ds)
			}
			for name, typ := range map[string]fs.FileMode{"a.txt": 0, "sub": fs.ModeDir, "link": fs.ModeSymlink} {
				de, ok := got[name]
				if !ok {
					t.Fatalf("Readdir lacks %s: %v", name, ds)
				}
				rfsEq(t, name+" type", de.Type, typ)
				st, errno := e.r.Lstat(name)
				rfsOK(t, "Lstat", errno)
				rfsEq(t, name+" ino", de.Ino, st.Ino)
			}
			ds, errno = d.Readdir(-1)
			rfsOK(t, "Readdir at end", errno)
			rfsEq(t, "entries at end", len(ds), 0)

			e.write(t, "late.txt", "created after the first listing")
			_, errno = d.Seek(0, io.SeekStart)
			rfsOK(t, "rewind", errno)
			rfsEq(t, "after rewind", strings.Join(rfsNames(t, d, 1), ","), "a.txt,late.txt,link,sub")
			_, errno = d.Seek(0, io.SeekStart)
			rfsOK(t, "rewind", errno)
			rfsEq(t, "after rewind, all at once", strings.Join(rfsNames(t, d, 0), ","), "a.txt,late.txt,link,sub")

			_, errno = d.Seek(1, io.SeekStart)
			rfsErrno(t, "Seek(1) on a directory", errno, experimentalsys.EISDIR)
			_, errno = d.Read(make([]byte, 1))
			rfsErrno(t, "Read on a directory", errno, experimentalsys.EISDIR)
			_, errno = d.Pread(make([]byte, 1), 0)
			rfsErrno(t, "Pread on a directory", errno, experimentalsys.EISDIR)
			_, errno = d.Write([]byte("x"))
			rfsErrno(t, "Write on a directory", errno, experimentalsys.EBADF)
			_, errno = d.Pwrite([]byte("x"), 0)
			rfsErrno(t, "Pwrite on a directory", errno, experimentalsys.EISDIR)
			rfsErrno(t, "Truncate on a directory", d.Truncate(0), experimentalsys.EISDIR)
			rfsErrno(t, "SetAppend on a directory", d.SetAppend(true), experimentalsys.EISDIR)

			sub := e.open(t, "sub", rd|odir)
			rfsEq(t, "empty dir", len(rfsNames(t, sub, 0)), 0)
			viaLink := e.open(t, "link", rd)
			rfsEq(t, "O_DIRECTORY-less open follows a link", rfsReadAll(t, viaLink), "a")
			f := e.open(t, "a.txt", rd)
			_, errno = f.Readdir(-1)
			rfsErrno(t, "Readdir on a file", errno, experimentalsys.EBADF)
		}},
		{"O_NOFOLLOW", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			e.mkdir(t, "d")
			e.symlink(t, "f", "lf")
			e.symlink(t, "d", "ld")
			e.symlink(t, "missing", "dangling")
			for _, c := range []struct {
				path string
				flag experimentalsys.Oflag
			}{
				{"lf", rd | nofol},
				{"lf", wr | nofol},
				{"lf", wr | trunc | nofol},
				{"ld", rd | odir | nofol},
				{"dangling", wr | creat | nofol},
			} {
				_, errno := e.r.OpenFile(c.path, c.flag, 0o644)
				rfsErrno(t, fmt.Sprintf("OpenFile(%q, %#x)", c.path, c.flag), errno, experimentalsys.ELOOP)
			}
			rfsEq(t, "not truncated through the link", e.read(t, "f"), "x")
			rfsEq(t, "not created through the link", e.exists("missing"), false)
			rfsEq(t, "regular file", rfsReadAll(t, e.open(t, "f", rd|nofol)), "x")
			e.open(t, "d", rd|odir|nofol)
			e.open(t, "ld/inner", wr|creat|nofol) // only the last component is not followed
			rfsEq(t, "created through a link in the middle", e.read(t, "d/inner"), "")
			e.open(t, "new", wr|creat|nofol)
			rfsEq(t, "created", e.read(t, "new"), "")
		}},
		{"paths: root and leading slashes", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "slash")
			for _, p := range []string{"", ".", "/"} {
				st, errno := e.r.Stat(p)
				rfsOK(t, fmt.Sprintf("Stat(%q)", p), errno)
				rfsEq(t, fmt.Sprintf("Stat(%q) is a directory", p), st.Mode.IsDir(), true)
				rfsEq(t, fmt.Sprintf("Stat(%q) ino", p), st.Ino, e.lstat(t, ".").Sys().(*syscall.Stat_t).Ino)
			}
			rfsEq(t, "/f", rfsReadAll(t, e.open(t, "/f", rd)), "slash")
			rfsEq(t, "./f", rfsReadAll(t, e.open(t, "./f", rd)), "slash")
			d := e.open(t, "/", rd|odir)
			rfsEq(t, "listing /", strings.Join(rfsNames(t, d, 0), ","), "f")
		}},
		{"Stat and Lstat", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "12345")
			e.mkdir(t, "d")
			e.symlink(t, "f", "lf")
			e.symlink(t, "d", "ld")
			e.symlink(t, "missing", "dangling")
			st, errno := e.r.Stat("lf")
			rfsOK(t, "Stat lf", errno)
			rfsEq(t, "Stat lf is the file", st.Mode.IsRegular(), true)
			rfsEq(t, "Stat lf size", st.Size, int64(5))
			st, errno = e.r.Lstat("lf")
			rfsOK(t, "Lstat lf", errno)
			rfsEq(t, "Lstat lf is the link", st.Mode.Type(), fs.ModeSymlink)
			st, errno = e.r.Stat("ld")
			rfsOK(t, "Stat ld", errno)
			rfsEq(t, "Stat ld is a directory", st.Mode.IsDir(), true)
			st, errno = e.r.Stat("ld/")
			rfsOK(t, "Stat ld/", errno)
			rfsEq(t, "Stat ld/ is a directory", st.Mode.IsDir(), true)
			_, errno = e.r.Stat("dangling")
			rfsErrno(t, "Stat dangling", errno, experimentalsys.ENOENT)
			_, errno = e.r.Lstat("dangling")
			rfsOK(t, "Lstat dangling", errno)
			_, errno = e.r.Stat("missing")
			rfsErrno(t, "Stat missing", errno, experimentalsys.ENOENT)
			_, errno = e.r.Lstat("missing")
			rfsErrno(t, "Lstat missing", errno, experimentalsys.ENOENT)
			_, errno = e.r.Stat("f/x")
			rfsErrno(t, "Stat f/x", errno, experimentalsys.ENOTDIR)
			e.symlink(t, "loop2", "loop1")
			e.symlink(t, "loop1", "loop2")
			_, errno = e.r.Stat("loop1")
			rfsErrno(t, "Stat loop", errno, experimentalsys.ELOOP)
			_, errno = e.r.OpenFile("loop1", rd, 0)
			rfsErrno(t, "OpenFile loop", errno, experimentalsys.ELOOP)
		}},
		{"Mkdir and Rmdir", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			rfsOK(t, "Mkdir", e.r.Mkdir("d", 0o750))
			rfsEq(t, "made", e.lstat(t, "d").Mode(), fs.ModeDir|0o750)
			rfsErrno(t, "Mkdir existing dir", e.r.Mkdir("d", 0o755), experimentalsys.EEXIST)
			rfsErrno(t, "Mkdir existing file", e.r.Mkdir("f", 0o755), experimentalsys.EEXIST)
			rfsErrno(t, "Mkdir under a file", e.r.Mkdir("f/x", 0o755), experimentalsys.ENOENT)
			rfsErrno(t, "Mkdir under missing", e.r.Mkdir("missing/x", 0o755), experimentalsys.ENOENT)
			rfsOK(t, "Mkdir nested", e.r.Mkdir("d/e", 0o755))
			rfsOK(t, "Mkdir setuid is dropped", e.r.Mkdir("s", 0o755|fs.ModeSetgid))
			rfsEq(t, "no setgid", e.lstat(t, "s").Mode()&fs.ModeSetgid, fs.FileMode(0))

			rfsErrno(t, "Rmdir non-empty", e.r.Rmdir("d"), experimentalsys.ENOTEMPTY)
			rfsErrno(t, "Rmdir file", e.r.Rmdir("f"), experimentalsys.ENOTDIR)
			rfsEq(t, "file kept", e.read(t, "f"), "x")
			rfsErrno(t, "Rmdir missing", e.r.Rmdir("missing"), experimentalsys.ENOENT)
			e.symlink(t, "d/e", "le")
			rfsErrno(t, "Rmdir a link to a directory", e.r.Rmdir("le"), experimentalsys.ENOTDIR)
			rfsEq(t, "link kept", e.exists("le"), true)
			rfsEq(t, "target kept", e.exists("d/e"), true)
			rfsErrno(t, "Rmdir .", e.r.Rmdir("."), experimentalsys.EINVAL)
			rfsErrno(t, "Rmdir ..", e.r.Rmdir(".."), experimentalsys.EPERM)
			rfsErrno(t, "Rmdir d/e/..", e.r.Rmdir("d/e/.."), experimentalsys.EPERM)
			e.symlink(t, "d", "ld")
			rfsOK(t, "Mkdir through a linked parent", e.r.Mkdir("ld/viaLink", 0o755))
			rfsOK(t, "Rmdir through a linked parent", e.r.Rmdir("ld/viaLink"))
			rfsEq(t, "removed through the link", e.exists("d/viaLink"), false)
			rfsOK(t, "Rmdir nested", e.r.Rmdir("d/e/"))
			rfsOK(t, "Rmdir", e.r.Rmdir("d"))
			rfsEq(t, "removed", e.exists("d"), false)
		}},
		{"Unlink", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			e.write(t, "g", "y")
			e.mkdir(t, "d")
			e.symlink(t, "g", "lg")
			e.symlink(t, "d", "ld")
			rfsOK(t, "Unlink", e.r.Unlink("f"))
			rfsEq(t, "removed", e.exists("f"), false)
			rfsErrno(t, "Unlink missing", e.r.Unlink("f"), experimentalsys.ENOENT)
			rfsErrno(t, "Unlink dir", e.r.Unlink("d"), experimentalsys.EISDIR)
			rfsEq(t, "dir kept", e.exists("d"), true)
			rfsErrno(t, "Unlink g/", e.r.Unlink("g/"), experimentalsys.ENOTDIR)
			rfsOK(t, "Unlink link", e.r.Unlink("lg"))
			rfsEq(t, "link removed", e.exists("lg"), false)
			rfsEq(t, "target kept", e.read(t, "g"), "y")
			e.write(t, "d/inner", "i")
			rfsOK(t, "Unlink through a linked parent", e.r.Unlink("ld/inner"))
			rfsEq(t, "removed through the link", e.exists("d/inner"), false)
			rfsErrno(t, "Unlink ..", e.r.Unlink(".."), experimentalsys.EPERM)
			rfsOK(t, "Unlink link to dir", e.r.Unlink("ld"))
			rfsEq(t, "dir kept", e.exists("d"), true)
		}},
		{"Rename", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "f")
			e.write(t, "g", "g")
			e.mkdir(t, "d")
			e.write(t, "d/inner", "inner")
			e.mkdir(t, "empty")
			e.mkdir(t, "full")
			e.write(t, "full/x", "x")
			rfsOK(t, "rename file", e.r.Rename("f", "f2"))
			rfsEq(t, "moved", e.read(t, "f2")+e.read(t, "f"), "f<missing>")
			rfsOK(t, "rename over a file", e.r.Rename("f2", "g"))
			rfsEq(t, "replaced", e.read(t, "g")+e.read(t, "f2"), "f<missing>")
			rfsOK(t, "rename dir", e.r.Rename("d", "d2"))
			rfsEq(t, "dir moved", e.read(t, "d2/inner")+e.read(t, "d/inner"), "inner<missing>")
			rfsOK(t, "rename file into dir", e.r.Rename("g", "d2/g"))
			rfsEq(t, "in dir", e.read(t, "d2/g"), "f")
			rfsErrno(t, "dir over non-empty dir", e.r.Rename("d2", "full"), experimentalsys.ENOTEMPTY)
			rfsErrno(t, "file over dir", e.r.Rename("d2/g", "empty"), experimentalsys.EISDIR)
			e.write(t, "h", "h")
			rfsErrno(t, "dir over file", e.r.Rename("d2", "h"), experimentalsys.ENOTDIR)
			rfsErrno(t, "missing", e.r.Rename("missing", "x"), experimentalsys.ENOENT)
			rfsErrno(t, "into missing dir", e.r.Rename("h", "missing/h"), experimentalsys.ENOENT)
			rfsOK(t, "same name", e.r.Rename("h", "h"))
			rfsEq(t, "still there", e.read(t, "h"), "h")
			rfsOK(t, "dir over empty dir", e.r.Rename("d2", "empty"))
			rfsEq(t, "replaced dir", e.read(t, "empty/inner"), "inner")
			e.symlink(t, "empty", "lempty")
			rfsOK(t, "rename into a linked directory", e.r.Rename("h", "lempty/h"))
			rfsEq(t, "moved through the link", e.read(t, "empty/h"), "h")
			rfsOK(t, "rename out of a linked directory", e.r.Rename("lempty/h", "h"))
			rfsEq(t, "moved back", e.read(t, "h")+e.read(t, "empty/h"), "h<missing>")
			rfsErrno(t, "rename ..", e.r.Rename("..", "x"), experimentalsys.EPERM)
			e.symlink(t, "h", "lh")
			rfsOK(t, "rename a link", e.r.Rename("lh", "lh2"))
			l, err := os.Readlink(filepath.Join(e.ws, "lh2"))
			rfsEq(t, "link moved, not its target", fmt.Sprintf("%s %v", l, err), "h <nil>")
			rfsEq(t, "target stays", e.read(t, "h"), "h")
		}},
		{"Link", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "f")
			e.mkdir(t, "d")
			rfsOK(t, "Link", e.r.Link("f", "d/hard"))
			a, b := e.lstat(t, "f"), e.lstat(t, "d/hard")
			rfsEq(t, "same file", os.SameFile(a, b), true)
			st, _ := e.r.Stat("f")
			rfsEq(t, "nlink", st.Nlink, uint64(2))
			rfsErrno(t, "Link missing", e.r.Link("missing", "x"), experimentalsys.ENOENT)
			rfsErrno(t, "Link onto existing", e.r.Link("f", "d/hard"), experimentalsys.EEXIST)
			rfsErrno(t, "Link a directory", e.r.Link("d", "d3"), experimentalsys.EPERM)
		}},
		{"Symlink and Readlink", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "content")
			rfsOK(t, "Symlink", e.r.Symlink("f", "l"))
			dst, errno := e.r.Readlink("l")
			rfsOK(t, "Readlink", errno)
			rfsEq(t, "Readlink", dst, "f")
			rfsEq(t, "read through", rfsReadAll(t, e.open(t, "l", rd)), "content")
			rfsErrno(t, "Symlink onto existing", e.r.Symlink("x", "l"), experimentalsys.EEXIST)
			rfsErrno(t, "Symlink onto existing file", e.r.Symlink("x", "f"), experimentalsys.EEXIST)
			_, errno = e.r.Readlink("f")
			rfsErrno(t, "Readlink on a file", errno, experimentalsys.EINVAL)
			_, errno = e.r.Readlink("missing")
			rfsErrno(t, "Readlink missing", errno, experimentalsys.ENOENT)
			// Any target text is stored; following it is what is confined.
			for _, target := range []string{"/", "../..", "/etc/passwd", "dangling"} {
				name := "t" + hex.EncodeToString([]byte(target))
				rfsOK(t, "Symlink "+target, e.r.Symlink(target, name))
				dst, errno := e.r.Readlink(name)
				rfsOK(t, "Readlink", errno)
				rfsEq(t, "Readlink", dst, target)
			}
		}},
		{"Chmod", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			e.write(t, "g", "y")
			e.symlink(t, "g", "lg")
			rfsOK(t, "Chmod", e.r.Chmod("f", 0o600))
			rfsEq(t, "mode", e.lstat(t, "f").Mode(), fs.FileMode(0o600))
			rfsOK(t, "Chmod through a link", e.r.Chmod("lg", 0o640))
			rfsEq(t, "target mode", e.lstat(t, "g").Mode(), fs.FileMode(0o640))
			rfsEq(t, "still a link", e.lstat(t, "lg").Mode().Type(), fs.ModeSymlink)
			rfsOK(t, "Chmod setuid", e.r.Chmod("f", 0o755|fs.ModeSetuid|fs.ModeSticky))
			rfsEq(t, "setuid and sticky dropped", e.lstat(t, "f").Mode(), fs.FileMode(0o755))
			rfsErrno(t, "Chmod missing", e.r.Chmod("missing", 0o600), experimentalsys.ENOENT)
		}},
		{"Utimens", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			e.write(t, "g", "y")
			e.symlink(t, "g", "lg")
			at, mt := int64(1_000_000_123), int64(2_000_000_456)
			rfsOK(t, "Utimens", e.r.Utimens("f", at, mt))
			st, _ := e.r.Stat("f")
			rfsEq(t, "atim", st.Atim, at)
			rfsEq(t, "mtim", st.Mtim, mt)
			rfsOK(t, "Utimens omit atim", e.r.Utimens("f", experimentalsys.UTIME_OMIT, 3_000_000_000))
			st, _ = e.r.Stat("f")
			rfsEq(t, "atim kept", st.Atim, at)
			rfsEq(t, "mtim set", st.Mtim, int64(3_000_000_000))
			rfsOK(t, "Utimens omit mtim", e.r.Utimens("f", 4_000_000_000, experimentalsys.UTIME_OMIT))
			st, _ = e.r.Stat("f")
			rfsEq(t, "atim set", st.Atim, int64(4_000_000_000))
			rfsEq(t, "mtim kept", st.Mtim, int64(3_000_000_000))
			rfsOK(t, "Utimens omit both", e.r.Utimens("f", experimentalsys.UTIME_OMIT, experimentalsys.UTIME_OMIT))
			st, _ = e.r.Stat("f")
			rfsEq(t, "atim kept", st.Atim, int64(4_000_000_000))
			rfsEq(t, "mtim kept", st.Mtim, int64(3_000_000_000))
			linkBefore, _ := e.r.Lstat("lg")
			rfsOK(t, "Utimens through a link", e.r.Utimens("lg", at, mt))
			st, _ = e.r.Stat("g")
			rfsEq(t, "target mtim", st.Mtim, mt)
			linkAfter, _ := e.r.Lstat("lg")
			rfsEq(t, "link mtim unchanged", linkAfter.Mtim, linkBefore.Mtim)
			rfsErrno(t, "Utimens missing", e.r.Utimens("missing", at, mt), experimentalsys.ENOENT)

			f := e.open(t, "g", rd)
			rfsOK(t, "File.Utimens", f.Utimens(5_000_000_000, experimentalsys.UTIME_OMIT))
			st, _ = f.Stat()
			rfsEq(t, "atim set", st.Atim, int64(5_000_000_000))
			rfsEq(t, "mtim kept", st.Mtim, mt)
			rfsOK(t, "File.Utimens", f.Utimens(experimentalsys.UTIME_OMIT, 6_000_000_000))
			st, _ = f.Stat()
			rfsEq(t, "atim kept", st.Atim, int64(5_000_000_000))
			rfsEq(t, "mtim set", st.Mtim, int64(6_000_000_000))
		}},
		{"Close is idempotent then EBADF", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			f, errno := e.r.OpenFile("f", rdwr, 0)
			rfsOK(t, "OpenFile", errno)
			d, errno := e.r.OpenFile(".", rd|odir, 0)
			rfsOK(t, "OpenFile", errno)
			for _, f := range []experimentalsys.File{f, d} {
				rfsOK(t, "Close", f.Close())
				rfsOK(t, "Close again", f.Close())
				_, errno = f.Read(make([]byte, 1))
				rfsErrno(t, "Read", errno, experimentalsys.EBADF)
				_, errno = f.Write([]byte("x"))
				rfsErrno(t, "Write", errno, experimentalsys.EBADF)
				_, errno = f.Pread(make([]byte, 1), 0)
				rfsErrno(t, "Pread", errno, experimentalsys.EBADF)
				_, errno = f.Pwrite([]byte("x"), 0)
				rfsErrno(t, "Pwrite", errno, experimentalsys.EBADF)
				_, errno = f.Seek(0, io.SeekStart)
				rfsErrno(t, "Seek", errno, experimentalsys.EBADF)
				_, errno = f.Stat()
				rfsErrno(t, "Stat", errno, experimentalsys.EBADF)
				_, errno = f.Readdir(-1)
				rfsErrno(t, "Readdir", errno, experimentalsys.EBADF)
				rfsErrno(t, "Truncate", f.Truncate(0), experimentalsys.EBADF)
				rfsErrno(t, "Sync", f.Sync(), experimentalsys.EBADF)
				rfsErrno(t, "Datasync", f.Datasync(), experimentalsys.EBADF)
				rfsErrno(t, "Utimens", f.Utimens(0, 0), experimentalsys.EBADF)
				rfsErrno(t, "SetAppend", f.SetAppend(true), experimentalsys.EBADF)
				pf := f.(experimentalsys.PollableFile)
				rfsErrno(t, "SetNonblock", pf.SetNonblock(true), experimentalsys.EBADF)
				_, errno = pf.Poll(experimentalsys.POLLIN, 0)
				rfsErrno(t, "Poll", errno, experimentalsys.EBADF)
			}
			rfsEq(t, "content", e.read(t, "f"), "x")
		}},
		{"closed FS", func(t *testing.T, e *rfsEnv) {
			e.write(t, "f", "x")
			f := e.open(t, "f", rd)
			if err := e.r.Close(); err != nil {
				t.Fatal(err)
			}
			_, errno := e.r.Stat("f")
			rfsErrno(t, "Stat after Close", errno, experimentalsys.EBADF)
			_, errno = e.r.OpenFile("f", rd, 0)
			rfsErrno(t, "OpenFile after Close", errno, experimentalsys.EBADF)
			rfsEq(t, "open file still reads", rfsReadAll(t, f), "x")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := rfsSetup(t)
			before := rfsSnapshot(t, e.base, e.ws)
			tc.run(t, e)
			rfsCompare(t, "outside the workspace", before, rfsSnapshot(t, e.base, e.ws))
		})
	}
}

// rfsNoHang runs fn, failing the test if it takes more than 5 s (a FIFO
// open that blocks, say) instead of hanging.
func rfsNoHang(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked after 5s", what)
	}
}

func TestRootFS_Escapes(t *testing.T) {
	e := rfsSetup(t)
	ws, outside := e.ws, e.outside
	e.write(t, "inside.txt", "inside")
	e.mkdir(t, "a")
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	passwd := "/etc/passwd"
	passwdFI, err := os.Stat(passwd)
	if err != nil {
		t.Fatal(err)
	}

	// Links to make, once by the host and once by the guest (rootFS.Symlink).
	links := []struct{ name, target string }{
		{"root", "/"},
		{"etc", "/etc"},
		{"out", "../outside"},
		{"abs", outside},
		{"chain1", "@chain2"}, // @: the same prefix
		{"chain2", "../outside"},
		{"up", ".."},
		{"zero", "/dev/zero"},
		{"tofifo", "fifo"},
	}
	for _, prefix := range []string{"h_", "g_"} {
		for _, l := range links {
			target := strings.Replace(l.target, "@", prefix, 1)
			if prefix == "h_" {
				e.symlink(t, target, prefix+l.name)
			} else {
				rfsOK(t, "guest Symlink "+target, e.r.Symlink(target, prefix+l.name))
			}
		}
	}
	e.mkdir(t, "a/b")
	e.symlink(t, "../../../outside", "a/b/nested")
	rfsOK(t, "guest Symlink in a subdirectory", e.r.Symlink("../../../outside", "a/b/gnested"))

	// Should a name be created in the real /etc after all, remove it.
	const planted = "/etc/sandboxd-planted"
	if _, err := os.Lstat(planted); err == nil {
		t.Fatalf("%s exists before the test", planted)
	}
	t.Cleanup(func() {
		if _, err := os.Lstat(planted); err == nil {
			t.Errorf("%s was created; removing it", planted)
			_ = os.RemoveAll(planted)
		}
	})

	outsideSnap := rfsSnapshot(t, e.base, ws)
	etcSnap := map[string]string{passwd: rfsDescribe(t, passwd), "/etc": rfsDescribe(t, "/etc")}

	// A target is a way to name things outside: a file there, an empty
	// directory there, a name not there yet. "destructive" is false when
	// the target is the real /etc: only operations that change nothing if
	// they wrongly succeeded are tried there.
	type target struct {
		name, file, dir, fresh string
		destructive            bool
	}
	var targets []target
	add := func(name, prefix string, destructive bool) {
		targets = append(targets, target{name, prefix + "/sentinel", prefix + "/emptydir", prefix + "/planted", destructive})
	}
	add("../", "../outside", true)
	add("a/../../", "a/../../outside", true)
	add("/../", "/../outside", true)
	add("a/b/../../../", "a/b/../../../outside", true)
	for _, p := range []string{"h_", "g_"} {
		add(p+"root", p+"root"+outside, true)
		add(p+"out", p+"out", true)
		add(p+"abs", p+"abs", true)
		add(p+"chain", p+"chain1", true)
		add(p+"up", p+"up/outside", true)
		add(p+"nested", "a/b/"+map[string]string{"h_": "nested", "g_": "gnested"}[p], true)
		targets = append(targets, target{name: p + "etc", file: p + "etc/passwd", fresh: p + "etc/sandboxd-planted"})
		targets = append(targets, target{name: p + "root/etc", file: p + "root/etc/passwd", fresh: p + "root/etc/sandboxd-planted"})
	}

	const (
		rd    = experimentalsys.O_RDONLY
		wr    = experimentalsys.O_WRONLY
		rdwr  = experimentalsys.O_RDWR
		creat = experimentalsys.O_CREAT
	)
	// Every failure must be one of these; success is always wrong.
	refused := []experimentalsys.Errno{experimentalsys.EPERM, experimentalsys.ENOENT, experimentalsys.ELOOP, experimentalsys.EACCES}
	check := func(t *testing.T, what string, errno experimentalsys.Errno, f experimentalsys.File) {
		t.Helper()
		if f != nil {
			f.Close()
		}
		if errno == 0 {
			t.Errorf("%s: succeeded", what)
		} else if !slices.Contains(refused, errno) {
			t.Errorf("%s: errno %v, want one of %v", what, errno, refused)
		}
	}
	open := func(t *testing.T, p string, flag experimentalsys.Oflag) {
		t.Helper()
		rfsNoHang(t, fmt.Sprintf("OpenFile(%q, %#x)", p, flag), func() {
			f, errno := e.r.OpenFile(p, flag, 0o666)
			check(t, fmt.Sprintf("OpenFile(%q, %#x)", p, flag), errno, f)
		})
	}
	op := func(t *testing.T, what string, fn func() experimentalsys.Errno) {
		t.Helper()
		rfsNoHang(t, what, func() { check(t, what, fn(), nil) })
	}

	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			f := tg.file
			open(t, f, rd)
			open(t, f, rd|experimentalsys.O_NOFOLLOW)
			open(t, f, wr|creat)
			open(t, f, rdwr|experimentalsys.O_APPEND)
			open(t, filepath.Dir(f), rd|experimentalsys.O_DIRECTORY)
			open(t, tg.fresh, wr|creat)
			open(t, tg.fresh, wr|creat|experimentalsys.O_EXCL)
			op(t, "Stat "+f, func() experimentalsys.Errno { _, errno := e.r.Stat(f); return errno })
			op(t, "Lstat "+f, func() experimentalsys.Errno { _, errno := e.r.Lstat(f); return errno })
			op(t, "Readlink "+f, func() experimentalsys.Errno { _, errno := e.r.Readlink(f); return errno })
			op(t, "Mkdir "+tg.fresh, func() experimentalsys.Errno { return e.r.Mkdir(tg.fresh, 0o777) })
			op(t, "Symlink "+tg.fresh, func() experimentalsys.Errno { return e.r.Symlink("x", tg.fresh) })
			op(t, "Link into "+tg.fresh, func() experimentalsys.Errno { return e.r.Link("inside.txt", tg.fresh) })
			op(t, "Rename into "+tg.fresh, func() experimentalsys.Errno { return e.r.Rename("inside.txt", tg.fresh) })
			if tg.destructive {
				open(t, f, wr|creat|experimentalsys.O_TRUNC)
				op(t, "Chmod "+f, func() experimentalsys.Errno { return e.r.Chmod(f, 0o777) })
				op(t, "Utimens "+f, func() experimentalsys.Errno { return e.r.Utimens(f, 0, 0) })
				op(t, "Utimens omit "+f, func() experimentalsys.Errno {
					return e.r.Utimens(f, experimentalsys.UTIME_OMIT, 0)
				})
				op(t, "Unlink "+f, func() experimentalsys.Errno { return e.r.Unlink(f) })
				op(t, "Rename out of "+f, func() experimentalsys.Errno { return e.r.Rename(f, "stolen") })
				op(t, "Link out of "+f, func() experimentalsys.Errno { return e.r.Link(f, "stolen") })
				op(t, "Rmdir "+tg.dir, func() experimentalsys.Errno { return e.r.Rmdir(tg.dir) })
				op(t, "Rename dir out of "+tg.dir, func() experimentalsys.Errno { return e.r.Rename(tg.dir, "stolendir") })
			} else {
				// Would change nothing if they succeeded: same mode, no times.
				op(t, "Chmod "+f, func() experimentalsys.Errno { return e.r.Chmod(f, passwdFI.Mode().Perm()) })
				op(t, "Utimens "+f, func() experimentalsys.Errno {
					return e.r.Utimens(f, experimentalsys.UTIME_OMIT, experimentalsys.UTIME_OMIT)
				})
			}
			rfsEq(t, "inside.txt", e.read(t, "inside.txt"), "inside")
			rfsEq(t, "stolen", e.exists("stolen") || e.exists("stolendir"), false)
		})
	}

	// The escaping links themselves: following them is refused.
	for _, p := range []string{"h_", "g_"} {
		for _, l := range []string{"root", "etc", "out", "abs", "chain1", "up", "zero"} {
			name := p + l
			t.Run("link "+name, func(t *testing.T) {
				open(t, name, rd)
				open(t, name, rd|experimentalsys.O_DIRECTORY)
				open(t, name+"/", rd)
				op(t, "Stat "+name, func() experimentalsys.Errno { _, errno := e.r.Stat(name); return errno })
				if l != "root" && l != "etc" && l != "up" && l != "zero" {
					op(t, "Chmod "+name, func() experimentalsys.Errno { return e.r.Chmod(name, 0o777) })
					op(t, "Utimens "+name, func() experimentalsys.Errno { return e.r.Utimens(name, 0, 0) })
				}
				op(t, "Rmdir "+name+"/", func() experimentalsys.Errno { return e.r.Rmdir(name + "/emptydir") })
				// The link itself is inside: it can be looked at.
				st, errno := e.r.Lstat(name)
				rfsOK(t, "Lstat "+name, errno)
				rfsEq(t, "Lstat "+name, st.Mode.Type(), fs.ModeSymlink)
			})
		}
	}
	// Following an escaping link is refused with EPERM specifically.
	for _, p := range []string{"h_root/etc/passwd", "g_root/etc/passwd", "h_out/sentinel", "g_abs/sentinel", "h_chain1/sentinel", "g_up", "h_zero", "g_zero", "../outside/sentinel", "a/../../outside"} {
		_, errno := e.r.OpenFile(p, rd, 0)
		rfsErrno(t, "OpenFile "+p, errno, experimentalsys.EPERM)
		_, errno = e.r.Stat(p)
		rfsErrno(t, "Stat "+p, errno, experimentalsys.EPERM)
	}

	// A FIFO in the workspace: refused, and opening never blocks, whatever
	// the flags and whichever way it is reached.
	t.Run("fifo", func(t *testing.T) {
		for _, p := range []string{"fifo", "h_tofifo", "g_tofifo", "a/../fifo"} {
			for _, flag := range []experimentalsys.Oflag{rd, wr, rdwr, rd | experimentalsys.O_NONBLOCK, wr | creat, rd | experimentalsys.O_NOFOLLOW} {
				if flag&experimentalsys.O_NOFOLLOW != 0 && p != "fifo" {
					continue // ELOOP, tested elsewhere
				}
				rfsNoHang(t, fmt.Sprintf("OpenFile(%q, %#x)", p, flag), func() {
					f, errno := e.r.OpenFile(p, flag, 0o666)
					if f != nil {
						f.Close()
					}
					rfsErrno(t, fmt.Sprintf("OpenFile(%q, %#x)", p, flag), errno, experimentalsys.EACCES)
				})
			}
		}
		st, errno := e.r.Stat("h_tofifo")
		rfsOK(t, "Stat of a FIFO", errno)
		rfsEq(t, "FIFO type", st.Mode.Type(), fs.ModeNamedPipe)
	})

	// Nothing outside changed, nothing appeared next to the workspace.
	rfsCompare(t, "outside the workspace", outsideSnap, rfsSnapshot(t, e.base, ws))
	rfsCompare(t, "/etc", etcSnap, map[string]string{passwd: rfsDescribe(t, passwd), "/etc": rfsDescribe(t, "/etc")})
	b, err := os.ReadFile(filepath.Join(outside, "sentinel"))
	if err != nil || string(b) != rfsSentinel {
		t.Errorf("sentinel: %q, %v", b, err)
	}
}

// rfsGuestSrc is a WASI program that tries to leave /workspace.
const rfsGuestSrc = `package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

func report(name string, err error) {
	if err != nil {
		fmt.Printf("%s: error: %v\n", name, err)
	} else {
		fmt.Printf("%s: ok\n", name)
	}
}

func read(name, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Printf("%s: error: %v\n", name, err)
	} else {
		fmt.Printf("%s: read %q\n", name, b)
	}
}

func main() {
	outside := os.Args[1] // the host path of the outside directory
	read("dotdot", "/workspace/../outside/sentinel")
	read("hello", "/workspace/hello.txt")
	report("symlink-root", os.Symlink("/", "/workspace/root"))
	read("via-root", "/workspace/root/etc/passwd")
	read("via-root-outside", "/workspace/root"+outside+"/sentinel")
	report("symlink-out", os.Symlink("../outside", "/workspace/out"))
	read("via-out", "/workspace/out/sentinel")
	report("write-via-out", os.WriteFile("/workspace/out/planted", []byte("x"), 0o644))
	report("symlink-abs", os.Symlink(outside, "/workspace/abs"))
	read("via-abs", "/workspace/abs/sentinel")
	report("mkdir-via-abs", os.Mkdir("/workspace/abs/planted-dir", 0o755))
	report("rename-via-out", os.Rename("/workspace/out/sentinel", "/workspace/stolen"))
	report("remove-via-out", os.Remove("/workspace/out/sentinel"))
	target, err := os.Readlink("/workspace/root")
	fmt.Printf("readlink-root: %q %v\n", target, err)
	report("write-ok", os.WriteFile("/workspace/ok.txt", []byte("written by the guest\n"), 0o644))
	entries, err := os.ReadDir("/workspace")
	var names []string
	for _, e := range entries {
		n := e.Name()
		switch {
		case e.Type()&os.ModeSymlink != 0:
			n += "@"
		case e.IsDir():
			n += "/"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("list: %s %v\n", strings.Join(names, ","), err)
}
`

// rfsGuestWasm builds rfsGuestSrc for wasip1.
func rfsGuestWasm(t *testing.T) []byte {
	t.Helper()
	return buildGuest(t, "rootfs-guest", rfsGuestSrc)
}

// buildGuest builds src, the main package of a Go program, for wasip1 and
// returns the module. Building takes seconds, so the module is cached
// under os.TempDir() by name and the hash of the source and the Go
// version. Where it cannot be built the test is skipped, unless CI is set.
func buildGuest(t *testing.T, name, src string) []byte {
	t.Helper()
	sum := sha256.Sum256([]byte(src + runtime.Version()))
	prefix := "sandboxd-" + name + "-"
	cached := filepath.Join(os.TempDir(), prefix+hex.EncodeToString(sum[:8])+".wasm")
	if b, err := os.ReadFile(cached); err == nil && len(b) > 0 {
		return b
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		why := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatalf("building the wasip1 guest %s: %s", name, why)
		}
		t.Skipf("skipping: cannot build the wasip1 guest %s (set CI to make this fail): %s", name, why)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	dir := t.TempDir()
	for file, content := range map[string]string{"main.go": src, "go.mod": "module guest\n\ngo 1.21\n"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "guest.wasm")
	cmd := exec.Command(goBin, "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		unavailable("%v: %s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Cache it, atomically; failing to is no error.
	if tmp, err := os.CreateTemp(os.TempDir(), prefix+"*.tmp"); err == nil {
		_, werr := tmp.Write(b)
		if cerr := tmp.Close(); werr == nil && cerr == nil {
			_ = os.Rename(tmp.Name(), cached)
		}
		_ = os.Remove(tmp.Name())
	}
	return b
}

func TestRootFS_Guest(t *testing.T) {
	code := rfsGuestWasm(t)
	e := rfsSetup(t)
	e.write(t, "hello.txt", "hello from the host\n")
	before := rfsSnapshot(t, e.base, e.ws)
	passwdBefore := rfsDescribe(t, "/etc/passwd")

	ctx := context.Background()
	// Compiling the guest takes about 20 s under -race: keep the compiled
	// code between runs too (wazero keys it by module and wazero version).
	rc := wazero.NewRuntimeConfig()
	if cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(os.TempDir(), "sandboxd-rootfs-wazero-cache")); err == nil {
		defer cache.Close(ctx)
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	var stdout, stderr bytes.Buffer
	fscfg := wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(e.r, "/workspace")
	cfg := wazero.NewModuleConfig().
		WithArgs("guest", e.outside).
		WithStdout(&stdout).
		WithStderr(&stderr).
		WithFSConfig(fscfg).
		WithSysWalltime().
		WithSysNanotime()
	done := make(chan error, 1)
	go func() {
		mod, err := rt.InstantiateWithConfig(ctx, code, cfg)
		if mod != nil {
			_ = mod.Close(ctx)
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the guest did not finish in 2 minutes")
	}
	var exit *sys.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
		t.Fatalf("guest: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	t.Logf("guest stdout:\n%s", &stdout)

	results := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("unexpected guest output line %q", line)
		}
		results[k] = v
	}
	for k, want := range map[string]string{
		"hello":         `read "hello from the host\n"`,
		"symlink-root":  "ok",
		"symlink-out":   "ok",
		"symlink-abs":   "ok",
		"write-ok":      "ok",
		"readlink-root": `"/" <nil>`,
		"list":          "abs@,hello.txt,ok.txt,out@,root@ <nil>",
	} {
		rfsEq(t, "guest "+k, results[k], want)
	}
	for _, k := range []string{"dotdot", "via-root", "via-root-outside", "via-out", "write-via-out", "via-abs", "mkdir-via-abs", "rename-via-out", "remove-via-out"} {
		if v, ok := results[k]; !ok || !strings.HasPrefix(v, "error: ") {
			t.Errorf("guest %s: %q, want an error", k, v)
		}
	}
	rfsEq(t, "ok.txt on the host", e.read(t, "ok.txt"), "written by the guest\n")
	l, err := os.Readlink(filepath.Join(e.ws, "root"))
	rfsEq(t, "root link on the host", fmt.Sprintf("%s %v", l, err), "/ <nil>")
	rfsCompare(t, "outside the workspace", before, rfsSnapshot(t, e.base, e.ws))
	rfsEq(t, "/etc/passwd", rfsDescribe(t, "/etc/passwd"), passwdBefore)
}
