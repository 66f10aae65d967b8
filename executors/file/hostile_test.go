package file_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
	"github.com/sandboxd/sandboxd/executors/file"
)

// snapshot describes every entry of a host tree: type, mode, owner, size,
// modification time and content hash. Any change outside the workspace
// shows as a difference.
func snapshot(t *testing.T, root string, skip string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		uid, gid := owner(t, p)
		desc := fmt.Sprintf("%v %d:%d size=%d mtime=%d", st.Mode(), uid, gid, st.Size(), st.ModTime().UnixNano())
		switch {
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha=%x", sha256.Sum256(b))
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileSnap(t *testing.T, p string) string {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := owner(t, p)
	return fmt.Sprintf("%v %d:%d mtime=%d sha=%x", st.Mode(), uid, gid, st.ModTime().UnixNano(), sha256.Sum256(b))
}

func diffSnap(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for p, d := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s was removed", what, p)
		} else if a != d {
			t.Errorf("%s: %s changed: %s -> %s", what, p, d, a)
		}
	}
	for p, d := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared (%s)", what, p, d)
		}
	}
}

// hostileWorld is a workspace with an "outside" directory beside it, and
// links and a FIFO planted in the workspace by a hostile sandbox.
type hostileWorld struct {
	parent, ws, outside string
}

func newHostileWorld(t *testing.T) hostileWorld {
	t.Helper()
	parent := t.TempDir()
	w := hostileWorld{parent: parent, ws: filepath.Join(parent, "ws"), outside: filepath.Join(parent, "outside")}
	for _, d := range []string{w.ws, w.outside, filepath.Join(w.outside, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"secret": "TOP SECRET\nfoo\n", "sub/deep": "deep secret\nfoo\n"} {
		p := filepath.Join(w.outside, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	links := [][2]string{ // target, link name
		{w.outside, "abs_dir"},
		{"../outside", "rel_dir"},
		{filepath.Join(w.outside, "secret"), "abs_secret"},
		{"../outside/secret", "rel_secret"},
		{"chain2", "chain1"},
		{filepath.Join(w.outside, "secret"), "chain2"},
		{"rchain2", "rchain1"},
		{"../outside/secret", "rchain2"},
		{"/dev/zero", "dev_zero"},
		{"/etc/passwd", "passwd"},
		{"/etc", "etc"},
		{"/", "slash"},
		{"../outside/new.txt", "dangle_out"},
		{filepath.Join(w.outside, "new.txt"), "dangle_abs"},
		{"rel_dir/new.txt", "dangle_via_dir"},
		{"../../outside/secret", "sub/deep_rel"},
		{"..", "sub/up"},
		{"../..", "sub/upup"},
	}
	if err := os.Mkdir(filepath.Join(w.ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.ws, "inside.txt"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(w.ws, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := mkfifo(filepath.Join(w.ws, "fifo")); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(filepath.Join(w.ws, "sub", "fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(w.ws, "fifo_link")); err != nil {
		t.Fatal(err)
	}
	return w
}

// The paths a hostile agent names to reach outside the workspace.
var escapingPaths = []string{
	"abs_dir/secret", "rel_dir/secret", "abs_dir/sub/deep", "rel_dir/sub/deep",
	"abs_dir/new.txt", "rel_dir/new.txt", "rel_dir/sub/new.txt", "abs_dir/newdir/new.txt",
	"abs_dir", "rel_dir", "abs_dir/sub",
	"abs_secret", "rel_secret", "chain1", "chain2", "rchain1", "rchain2",
	"dev_zero", "passwd", "etc/passwd", "etc", "slash/etc/passwd",
	"dangle_out", "dangle_abs", "dangle_via_dir",
	"sub/deep_rel", "sub/upup/outside/secret", "sub/upup/outside/new.txt",
	"../outside/secret", "../outside/new.txt", "../outside", "..", "../ws/../outside/secret",
	"/etc/passwd", "/etc", "/", "/workspace/../outside/secret", "/workspace/../etc/passwd",
	"a/../../outside/secret", "/workspace/abs_dir/secret", "/workspace/rel_dir/secret", "/workspaceX/secret",
}

// The actions tried on every path. str_replace's old_str occurs once in
// each outside file, so a followed link would change it.
func hostileActions(p string) []*api.Action {
	return []*api.Action{
		read(p),
		readRange(p, 1, 1),
		write(p, sp("pwned\n"), ""),
		write(p, sp("pwned\n"), "0777"),
		viewA(p),
		viewA(p, 1, 1),
		create(p, sp("pwned\n")),
		replace(p, sp("foo"), sp("pwned")),
		replace(p, sp("root"), sp("pwned")),
		insert(p, ip(0), sp("pwned")),
		insert(p, ip(1), sp("pwned")),
		undo(p),
	}
}

// run executes a with a deadline of 5 s: a call that blocks (on a FIFO, on
// /dev/zero) fails the test instead of hanging it.
func runBounded(t *testing.T, ex *file.Executor, a *api.Action) (api.Observation, error) {
	t.Helper()
	type result struct {
		obs api.Observation
		err error
	}
	done := make(chan result, 1)
	go func() {
		obs, err := ex.Execute(context.Background(), a, executors.Discard)
		done <- result{obs, err}
	}()
	select {
	case r := <-done:
		return r.obs, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s %s %q blocked for 5 s", a.Kind, a.Command, a.Path)
		return api.Observation{}, nil
	}
}

func TestHostilePaths(t *testing.T) {
	owners := [][2]int{{-1, -1}}
	if os.Geteuid() == 0 {
		owners = append(owners, [2]int{12345, 12345})
	}
	for _, o := range owners {
		t.Run(fmt.Sprintf("owner=%d", o[0]), func(t *testing.T) {
			w := newHostileWorld(t)
			ex := file.New(backends.DirFS{Dir: w.ws, View: "/workspace", UID: o[0], GID: o[1]}, file.DefaultConfig())
			outside := snapshot(t, w.outside, "")
			parent := snapshot(t, w.parent, w.ws)
			wsBefore := snapshot(t, w.ws, "")
			passwd := fileSnap(t, "/etc/passwd")
			for _, p := range escapingPaths {
				for _, a := range hostileActions(p) {
					name := fmt.Sprintf("%s/%s%v", p, strings.TrimPrefix(a.Kind+"."+a.Command, "file."), a.ViewRange)
					obs, err := runBounded(t, ex, a)
					if err == nil {
						t.Errorf("%s: succeeded: %+v", name, obs)
					} else if a.Command == "undo_edit" {
						// Nothing was ever edited: "no edit to undo" is as good
						// as a refusal, as long as nothing is touched.
						if c := api.CodeOf(err); c != api.CodePermissionDenied && c != api.CodeInvalidArgument {
							t.Errorf("%s: %v (code %s)", name, err, c)
						}
					} else if api.CodeOf(err) != api.CodePermissionDenied || !strings.Contains(err.Error(), "/") {
						t.Errorf("%s: %q has code %s, want permission_denied", name, err, api.CodeOf(err))
					}
					if strings.Contains(obs.Content+obs.Output, "SECRET") || strings.Contains(obs.Content+obs.Output, "root:") {
						t.Errorf("%s: leaked %q", name, obs.Content+obs.Output)
					}
				}
			}
			diffSnap(t, "outside", outside, snapshot(t, w.outside, ""))
			diffSnap(t, "next to the workspace", parent, snapshot(t, w.parent, w.ws))
			diffSnap(t, "workspace", wsBefore, snapshot(t, w.ws, ""))
			if got := fileSnap(t, "/etc/passwd"); got != passwd {
				t.Errorf("/etc/passwd changed: %s -> %s", passwd, got)
			}
		})
	}
}

// A FIFO is not a regular file: every action refuses it at once, without
// blocking on it (nobody writes to it), and leaves it a FIFO.
func TestHostileFIFO(t *testing.T) {
	w := newHostileWorld(t)
	ex := file.New(backends.DirFS{Dir: w.ws, View: "/workspace", UID: -1, GID: -1}, file.DefaultConfig())
	before := snapshot(t, w.ws, "")
	outside := snapshot(t, w.outside, "")
	for _, p := range []string{"fifo", "/workspace/fifo", "sub/fifo", "fifo_link", "sub/up/fifo"} {
		for _, a := range hostileActions(p) {
			name := fmt.Sprintf("%s/%s%v", p, strings.TrimPrefix(a.Kind+"."+a.Command, "file."), a.ViewRange)
			_, err := runBounded(t, ex, a)
			if err == nil {
				t.Errorf("%s: succeeded", name)
				continue
			}
			if c := api.CodeOf(err); c != api.CodeInvalidArgument {
				t.Errorf("%s: %q has code %s, want invalid_argument", name, err, c)
			}
			switch a.Command {
			case "create":
				if !strings.Contains(err.Error(), "exists") {
					t.Errorf("%s: %q", name, err)
				}
			case "undo_edit":
			default:
				if !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("%s: %q does not say %q", name, err, "not a regular file")
				}
			}
		}
	}
	diffSnap(t, "workspace", before, snapshot(t, w.ws, ""))
	diffSnap(t, "outside", outside, snapshot(t, w.outside, ""))
	for _, p := range []string{"fifo", "sub/fifo"} {
		st, err := os.Lstat(filepath.Join(w.ws, p))
		if err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("%s is no longer a FIFO: %v %v", p, st.Mode(), err)
		}
	}
}

// Links that stay inside the workspace keep working next to the hostile
// ones; a listing shows the hostile links without following them.
func TestHostileListing(t *testing.T) {
	w := newHostileWorld(t)
	ex := file.New(backends.DirFS{Dir: w.ws, View: "/workspace", UID: -1, GID: -1}, file.DefaultConfig())
	for _, p := range []string{".", "/workspace", "sub"} {
		obs, err := runBounded(t, ex, viewA(p))
		if err != nil {
			t.Fatalf("view %s: %v", p, err)
		}
		for _, bad := range []string{"/secret\n", "/deep\n", "etc/passwd", "new.txt", "/sub/up/", "/sub/upup/", "/abs_dir/", "/rel_dir/"} {
			if strings.Contains(obs.Output, bad) {
				t.Errorf("view %s shows %q:\n%s", p, bad, obs.Output)
			}
		}
		for _, good := range []string{"/workspace/sub/deep_rel\n", "/workspace/sub/up\n"} {
			if !strings.Contains(obs.Output, good) {
				t.Errorf("view %s does not list %q:\n%s", p, good, obs.Output)
			}
		}
	}
	obs, err := runBounded(t, ex, read("sub/up/inside.txt"))
	if err != nil || obs.Content != "inside\n" {
		t.Errorf("read through a link that stays inside: %q %v", obs.Content, err)
	}
	if _, err := runBounded(t, ex, replace("sub/up/inside.txt", sp("inside"), sp("edited"))); err != nil {
		t.Errorf("edit through a link that stays inside: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(w.ws, "inside.txt")); string(b) != "edited\n" {
		t.Errorf("inside.txt holds %q", b)
	}
}

// A link the sandbox swaps in after an edit: undo must not follow it out.
func TestHostileUndoAfterSwap(t *testing.T) {
	w := newHostileWorld(t)
	ex := file.New(backends.DirFS{Dir: w.ws, View: "/workspace", UID: -1, GID: -1}, file.DefaultConfig())
	outside := snapshot(t, w.outside, "")
	for _, edit := range []*api.Action{
		replace("inside.txt", sp("inside"), sp("edited")),
		write("inside.txt", sp("written\n"), ""),
	} {
		if _, err := runBounded(t, ex, edit); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(w.ws, "inside.txt")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(w.outside, "secret"), p); err != nil {
			t.Fatal(err)
		}
		_, err := runBounded(t, ex, undo("inside.txt"))
		wantErr(t, err, api.ErrPermissionDenied)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../outside/secret", p); err != nil {
			t.Fatal(err)
		}
		_, err = runBounded(t, ex, undo("inside.txt"))
		wantErr(t, err, api.ErrPermissionDenied)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("inside\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	diffSnap(t, "outside", outside, snapshot(t, w.outside, ""))
}

// The sandbox swaps files and directories for links leading out while the
// daemon works on them: nothing outside changes, whatever wins each race.
func TestHostileSwapRace(t *testing.T) {
	w := newHostileWorld(t)
	ex := file.New(backends.DirFS{Dir: w.ws, View: "/workspace", UID: -1, GID: -1}, file.DefaultConfig())
	outside := snapshot(t, w.outside, "")
	parent := snapshot(t, w.parent, w.ws)
	passwd := fileSnap(t, "/etc/passwd")
	f := filepath.Join(w.ws, "race.txt")
	d := filepath.Join(w.ws, "racedir")
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		targets := []string{filepath.Join(w.outside, "secret"), "../outside/secret", "/etc/passwd"}
		dirTargets := []string{w.outside, "../outside", "/etc"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := f + ".swap"
			if i%2 == 0 {
				os.WriteFile(tmp, []byte("foo\nrace\n"), 0o644)
			} else {
				os.Symlink(targets[i/2%len(targets)], tmp)
			}
			os.Rename(tmp, f)
			dtmp := d + ".swap"
			os.RemoveAll(dtmp)
			if i%2 == 0 {
				os.Mkdir(dtmp, 0o755)
				os.WriteFile(filepath.Join(dtmp, "secret"), []byte("foo\n"), 0o644)
			} else {
				os.Symlink(dirTargets[i/2%len(dirTargets)], dtmp)
			}
			// rename(2) does not replace a directory with a link: move
			// the old one away first.
			os.Rename(d, d+".old")
			os.Rename(dtmp, d)
			os.RemoveAll(d + ".old")
		}
	}()
	deadline := time.Now().Add(1500 * time.Millisecond)
	var ok, refused int
	for time.Now().Before(deadline) {
		for _, p := range []string{"race.txt", "racedir/secret", "racedir/new.txt"} {
			for _, a := range hostileActions(p) {
				if _, err := runBounded(t, ex, a); err != nil {
					refused++
				} else {
					ok++
				}
			}
		}
	}
	close(stop)
	<-swapped
	t.Logf("%d actions succeeded, %d were refused", ok, refused)
	diffSnap(t, "outside", outside, snapshot(t, w.outside, ""))
	after := snapshot(t, w.parent, w.ws)
	diffSnap(t, "next to the workspace", parent, after)
	if got := fileSnap(t, "/etc/passwd"); got != passwd {
		t.Errorf("/etc/passwd changed: %s -> %s", passwd, got)
	}
}
