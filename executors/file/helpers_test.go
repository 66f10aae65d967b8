package file_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
	"github.com/sandboxd/sandboxd/executors/file"
)

const view = "/workspace"

// env is one sandbox's workspace (a host directory seen as /workspace) and
// the file executor over it.
type env struct {
	t   *testing.T
	dir string // host directory of the workspace
	fs  backends.DirFS
	ex  *file.Executor
}

// newEnv makes a workspace in a fresh temporary directory, owned by the
// daemon (UID/GID -1).
func newEnv(t *testing.T) *env { return newEnvCfg(t, file.DefaultConfig(), -1, -1) }

func newEnvCfg(t *testing.T, cfg file.Config, uid, gid int) *env {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return newEnvAt(t, dir, cfg, uid, gid)
}

func newEnvAt(t *testing.T, dir string, cfg file.Config, uid, gid int) *env {
	fsys := backends.DirFS{Dir: dir, View: view, UID: uid, GID: gid}
	return &env{t: t, dir: dir, fs: fsys, ex: file.New(fsys, cfg)}
}

func (e *env) do(a *api.Action) (api.Observation, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.ex.Execute(ctx, a, executors.Discard)
}

// mustDo runs a and fails the test on an error.
func (e *env) mustDo(a *api.Action) api.Observation {
	e.t.Helper()
	obs, err := e.do(a)
	if err != nil {
		e.t.Fatalf("%s %s %q: unexpected error: %v", a.Kind, a.Command, a.Path, err)
	}
	return obs
}

// host is the host path of a workspace-relative path.
func (e *env) host(rel string) string { return filepath.Join(e.dir, filepath.FromSlash(rel)) }

// put writes a file into the workspace (as the sandbox would), creating
// its parents.
func (e *env) put(rel string, content string) {
	e.t.Helper()
	p := e.host(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// get reads a workspace file; a missing one fails the test.
func (e *env) get(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.host(rel))
	if err != nil {
		e.t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

func (e *env) exists(rel string) bool {
	_, err := os.Lstat(e.host(rel))
	return err == nil
}

func (e *env) symlink(target, rel string) {
	e.t.Helper()
	if err := os.Symlink(target, e.host(rel)); err != nil {
		e.t.Fatal(err)
	}
}

// names lists a host directory, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ent := range ents {
		out = append(out, ent.Name())
	}
	slices.Sort(out)
	return out
}

// noTemps fails if a temporary file of the executor is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	for _, n := range names(t, dir) {
		if strings.Contains(n, ".sandboxd-") {
			t.Errorf("temporary file %s left behind in %s (entries %q)", n, dir, names(t, dir))
		}
	}
}

func sp(s string) *string { return &s }
func ip(i int) *int       { return &i }

func read(p string) *api.Action { return &api.Action{Kind: api.KindFileRead, Path: p} }

func readRange(p string, start, end int) *api.Action {
	return &api.Action{Kind: api.KindFileRead, Path: p, StartLine: start, EndLine: end}
}

func write(p string, content *string, mode string) *api.Action {
	return &api.Action{Kind: api.KindFileWrite, Path: p, Content: content, Mode: mode}
}

func viewA(p string, vr ...int) *api.Action {
	return &api.Action{Kind: api.KindFileEdit, Command: "view", Path: p, ViewRange: vr}
}

func create(p string, text *string) *api.Action {
	return &api.Action{Kind: api.KindFileEdit, Command: "create", Path: p, FileText: text}
}

func replace(p string, old, new *string) *api.Action {
	return &api.Action{Kind: api.KindFileEdit, Command: "str_replace", Path: p, OldStr: old, NewStr: new}
}

func insert(p string, line *int, text *string) *api.Action {
	return &api.Action{Kind: api.KindFileEdit, Command: "insert", Path: p, InsertLine: line, NewStr: text}
}

func undo(p string) *api.Action {
	return &api.Action{Kind: api.KindFileEdit, Command: "undo_edit", Path: p}
}

// wantErr checks err is of class want (api.ErrInvalidArgument, ...), both
// by errors.Is and by the code the API would answer, and that its message
// holds each of subs.
func wantErr(t *testing.T, err error, want error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q (code %s) is not %v", err, api.CodeOf(err), want)
	}
	if got, exp := api.CodeOf(err), api.CodeOf(want); got != exp {
		t.Fatalf("error %q has code %s, want %s", err, got, exp)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// perm is the permission bits of a host file (not following links).
func perm(t *testing.T, p string) fs.FileMode {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// owner is the uid and gid of a host file (not following links).
func owner(t *testing.T, p string) (int, int) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}

// isLink reports whether p is a symlink to target.
func isLink(t *testing.T, p, target string) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symlink (mode %v)", p, st.Mode())
	}
	got, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	if got != target {
		t.Fatalf("%s now points to %q, want %q", p, got, target)
	}
}

// sameBytes compares two strings byte for byte with a readable diff.
func sameBytes(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// hasNUL reports whether b holds a NUL byte in its first n bytes.
func hasNUL(b []byte, n int) bool { return bytes.IndexByte(b[:min(len(b), n)], 0) >= 0 }

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
