package file_test

import (
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

// FuzzPathConfinement: whatever path a sandbox names, with links it
// planted in its workspace pointing out (absolute and relative), a read
// never returns what lies outside the workspace, and a write or an edit
// never changes or creates anything outside it.
func FuzzPathConfinement(f *testing.F) {
	for _, p := range []string{
		"a.txt", "abs/etc/passwd", "../secret", "/etc/passwd", "out/secret", "rel/secret", "up/../../secret",
		"dir/../../secret", "./out", "%2e%2e/secret", "..", "/", "/workspace/../secret",
		"/workspace/out/secret", "loop/x", "dir/./../out/secret", "out/../secret", "\x00",
		"a/b/c/../../../../secret", "selfdir/selfdir/selfdir/out/secret",
	} {
		f.Add(p, uint8(0))
		f.Add(p, uint8(1))
		f.Add(p, uint8(2))
	}
	base := f.TempDir()
	outside := filepath.Join(base, "outside")
	ws := filepath.Join(base, "ws")
	for _, d := range []string{outside, ws, filepath.Join(ws, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	const secret = "the secret outside"
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte(secret), 0o644); err != nil {
		f.Fatal(err)
	}
	for link, target := range map[string]string{
		"out":     outside,                          // absolute, out
		"rel":     "../outside",                     // relative, out
		"up":      "..",                             // the workspace's parent
		"loop":    "loop",                           // itself
		"selfdir": ".",                              // a cycle that stays in
		"abs":     "/",                              // the host's root (reads are checked)
		"a.txt":   filepath.Join(outside, "secret"), // a file, out
	} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			f.Fatal(err)
		}
	}
	snapshot := func() string {
		var b strings.Builder
		filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if err != nil || strings.HasPrefix(p, ws) {
				return nil
			}
			b.WriteString(p + "\n")
			if d.Type().IsRegular() {
				c, _ := os.ReadFile(p)
				b.Write(c)
			}
			return nil
		})
		return b.String()
	}
	before := snapshot()
	fsys := backends.DirFS{Dir: ws, View: "/workspace", UID: -1, GID: -1}
	f.Fuzz(func(t *testing.T, p string, op uint8) {
		ex := file.New(fsys, file.DefaultConfig())
		content := "written"
		var a *api.Action
		switch op % 3 {
		case 0:
			a = &api.Action{Kind: api.KindFileRead, Path: p}
		case 1:
			a = &api.Action{Kind: api.KindFileWrite, Path: p, Content: &content}
		default:
			a = &api.Action{Kind: api.KindFileEdit, Command: "view", Path: p}
		}
		obs, err := ex.Execute(context.Background(), a, executors.Discard)
		// /etc/passwd's first line, through the link to the host's root.
		const hostFile = "root:x:0:0:"
		if err == nil && (strings.Contains(obs.Content, secret) || strings.Contains(obs.Output, secret) ||
			strings.Contains(obs.Content, hostFile) || strings.Contains(obs.Output, hostFile)) {
			t.Fatalf("%s %q read outside the workspace: %+v", a.Kind, p, obs)
		}
		if after := snapshot(); after != before {
			t.Fatalf("%s %q changed what is outside the workspace:\n%s\nwas\n%s", a.Kind, p, after, before)
		}
	})
}
