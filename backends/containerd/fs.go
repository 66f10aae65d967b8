package containerd

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// containerFS is a container's file system as the container itself sees
// it (its mount namespace, through /proc/<init>/root): the whole root is
// the view, relative paths are relative to the workdir. No host path is
// ever derived from what the sandbox controls: os.Root resolves
// everything below the container's root.
type containerFS struct{ s *sandbox }

// Root implements backends.FS.
func (f containerFS) Root() (*os.Root, error) {
	r, err := os.OpenRoot(f.s.rootDir())
	if err != nil {
		return nil, api.Errorf(api.ErrUnavailable, "the sandbox's container is not running: %v", err)
	}
	return r, nil
}

// Rel implements backends.FS.
func (f containerFS) Rel(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", api.Errorf(api.ErrInvalidArgument, "path contains a NUL character")
	}
	if !path.IsAbs(p) {
		p = path.Join(f.s.workdir, p)
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

// Path implements backends.FS.
func (f containerFS) Path(rel string) string {
	if rel == "." || rel == "" {
		return "/"
	}
	return "/" + rel
}

// Owner implements backends.FS: files the daemon writes belong to the
// container's root, which is the user processes run as.
func (f containerFS) Owner() (int, int) { return -1, -1 }

// statIn stats p (absolute, in the container) below root, following
// symlinks the way the container would, absolute ones from the
// container's root.
func statIn(root *os.Root, p string) (fs.FileInfo, error) {
	cur := "/"
	rest := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		next := path.Join(cur, name)
		rel := strings.TrimPrefix(next, "/")
		if rel == "" {
			rel = "."
		}
		fi, err := root.Lstat(rel)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if len(rest) == 0 {
				return fi, nil
			}
			cur = next
			continue
		}
		if links++; links > 40 {
			return nil, errors.New("too many levels of symbolic links")
		}
		target, err := root.Readlink(rel)
		if err != nil {
			return nil, err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	rel := strings.TrimPrefix(cur, "/")
	if rel == "" {
		rel = "."
	}
	return root.Stat(rel)
}

// checkStart checks, from the host, that the program and the working
// directory exist in the container, so that Start can answer not_found or
// permission_denied as the contract says instead of a process that exits
// 127 (the exec wrapper's answer when this check was raced).
func (s *sandbox) checkStart(prog, pathEnv, cwd string) error {
	root, err := containerFS{s}.Root()
	if err != nil {
		return err
	}
	defer root.Close()
	if fi, err := statIn(root, cwd); err != nil || !fi.IsDir() {
		return api.Errorf(api.ErrNotFound, "working directory %s does not exist in the sandbox", cwd)
	}
	exe := func(p string) (bool, error) {
		fi, err := statIn(root, p)
		if err != nil {
			return false, err
		}
		return !fi.IsDir() && fi.Mode()&0o111 != 0, nil
	}
	if strings.Contains(prog, "/") {
		p := prog
		if !path.IsAbs(p) {
			p = path.Join(cwd, p)
		}
		ok, err := exe(p)
		switch {
		case err != nil:
			return api.Errorf(api.ErrNotFound, "%s: no such file in the sandbox", prog)
		case !ok:
			return api.Errorf(api.ErrPermissionDenied, "%s: not an executable file", prog)
		}
		return nil
	}
	denied := false
	for _, d := range strings.Split(pathEnv, ":") {
		if !path.IsAbs(d) {
			continue
		}
		ok, err := exe(path.Join(d, prog))
		if ok {
			return nil
		}
		if err == nil {
			denied = true
		}
	}
	if denied {
		return api.Errorf(api.ErrPermissionDenied, "%s: found in PATH but not executable", prog)
	}
	return api.Errorf(api.ErrNotFound, "%s: command not found in the sandbox's PATH", prog)
}

var _ backends.FS = containerFS{}
