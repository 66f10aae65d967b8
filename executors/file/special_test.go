package file_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// Special files the sandbox can make in its workspace (a unix socket, a
// device node when it may mknod) are refused as "not a regular file", an
// invalid_argument: the sandbox's doing, not the daemon's failure.
func TestSpecialFiles(t *testing.T) {
	kinds := map[string]func(t *testing.T, p string){
		"socket": func(t *testing.T, p string) {
			// A socket's path is limited to ~108 bytes: bind in the
			// directory, by a relative name.
			t.Chdir(filepath.Dir(p))
			l, err := net.Listen("unix", filepath.Base(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		},
		"device": func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("mknod needs root")
			}
			// A copy of /dev/null (char 1:3).
			if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Skipf("mknod: %v", err)
			}
		},
	}
	for kind, make := range kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			p := e.host("special")
			make(t, p)
			e.symlink("special", "link")
			var internal []string
			for _, path := range []string{"special", "link"} {
				for _, a := range []*api.Action{
					read(path), viewA(path), replace(path, sp("a"), sp("b")), insert(path, ip(0), sp("b")),
					write(path, sp("x"), ""),
				} {
					name := path + "/" + a.Kind + " " + a.Command
					_, err := runBounded(t, e.ex, a)
					if err == nil {
						t.Errorf("%s: succeeded", name)
						continue
					}
					if c := api.CodeOf(err); c != api.CodeInvalidArgument {
						if kind == "socket" && c == api.CodeInternal {
							internal = append(internal, name+": "+err.Error())
							continue
						}
						t.Errorf("%s: %q has code %s, want invalid_argument", name, err, c)
					} else if !strings.Contains(err.Error(), "not a regular file") {
						t.Errorf("%s: %q", name, err)
					}
				}
			}
			st, err := os.Lstat(p)
			if err != nil || st.Mode().IsRegular() {
				t.Errorf("the %s was replaced: %v %v", kind, st.Mode(), err)
			}
			if len(internal) > 0 {
				t.Fatalf("BUG (regression): actions on a unix socket in the workspace fail as internal errors, not invalid_argument:\n%s", strings.Join(internal, "\n"))
			}
		})
	}
}
