package backends

import (
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
)

// FS gives the daemon confined access to a sandbox's files. Every file
// operation of the daemon on a sandbox goes through Root, so that no path,
// "..", or symlink the sandbox planted (or swaps in while the daemon
// works) resolves outside what the sandbox may see.
type FS interface {
	// Root opens the top of what the sandbox may see: a process sandbox's
	// workspace, a container's root filesystem. The caller closes it.
	Root() (*os.Root, error)
	// Rel maps a path as the sandbox names it (relative to its workdir, or
	// absolute in its view) to a path relative to Root. It is lexical; the
	// Root enforces the rest. A path outside the view is an error wrapping
	// api.ErrPermissionDenied.
	Rel(p string) (string, error)
	// Path maps a Root-relative path back to the sandbox's view, for
	// answers ("/workspace/src/a.py").
	Path(rel string) string
	// Owner is the uid and gid files the daemon creates get, so the
	// sandbox owns them; -1 keeps the daemon's.
	Owner() (uid, gid int)
}

// DirFS is an FS over one host directory that the sandbox sees as view
// (its workdir): a process sandbox's workspace, or a wasm guest's
// /workspace.
type DirFS struct {
	Dir  string // host directory
	View string // the same directory as the sandbox names it
	UID  int    // owner of new files, -1 for the daemon's
	GID  int
}

// Root implements FS.
func (f DirFS) Root() (*os.Root, error) { return os.OpenRoot(f.Dir) }

// Rel implements FS.
func (f DirFS) Rel(p string) (string, error) {
	if p == "" {
		p = "."
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", api.Errorf(api.ErrInvalidArgument, "path contains a NUL character")
	}
	if path.IsAbs(p) {
		view := path.Clean(f.View)
		c := path.Clean(p)
		switch {
		case c == view:
			return ".", nil
		case strings.HasPrefix(c, view+"/"):
			p = strings.TrimPrefix(c, view+"/")
		default:
			return "", api.Errorf(api.ErrPermissionDenied, "%s is outside what the sandbox may see (%s)", p, f.View)
		}
	}
	rel := path.Clean(p)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", api.Errorf(api.ErrPermissionDenied, "%s is outside what the sandbox may see (%s)", p, f.View)
	}
	return rel, nil
}

// Path implements FS.
func (f DirFS) Path(rel string) string {
	if rel == "." || rel == "" {
		return f.View
	}
	return path.Join(f.View, rel)
}

// Owner implements FS.
func (f DirFS) Owner() (int, int) { return f.UID, f.GID }

// FSError classifies an error of an operation on a sandbox's files: a path
// that escapes the root (os.Root's unexported "path escapes from parent",
// or EXDEV from openat2's RESOLVE_BENEATH) or a symlink loop is
// permission_denied, a missing file not_found, a refused access
// permission_denied. name is the path as the sandbox named it.
func FSError(name string, err error) error {
	var errno syscall.Errno
	switch {
	case err == nil:
		return nil
	case errors.Is(err, api.ErrPermissionDenied), errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrInvalidArgument):
		return err
	case strings.Contains(err.Error(), "path escapes from parent"), errors.Is(err, syscall.EXDEV):
		return api.Errorf(api.ErrPermissionDenied, "%s resolves outside what the sandbox may see (a symlink or .. leads out)", name)
	case errors.Is(err, syscall.ELOOP):
		return api.Errorf(api.ErrPermissionDenied, "%s is a symbolic link (or a loop of them), which is not followed here", name)
	case errors.Is(err, os.ErrNotExist):
		return api.Errorf(api.ErrNotFound, "%s does not exist", name)
	case errors.Is(err, os.ErrPermission):
		return api.Errorf(api.ErrPermissionDenied, "%s: permission denied", name)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return api.Errorf(api.ErrInvalidArgument, "%s: a name in the path is too long", name)
	case errors.Is(err, syscall.ENXIO):
		return api.Errorf(api.ErrInvalidArgument, "%s is not a regular file (a socket or a device with nothing behind it)", name)
	case errors.Is(err, syscall.ENOTDIR):
		return api.Errorf(api.ErrInvalidArgument, "%s: a part of the path is not a directory", name)
	case errors.Is(err, syscall.EISDIR):
		return api.Errorf(api.ErrInvalidArgument, "%s is a directory", name)
	case errors.Is(err, syscall.EROFS):
		return api.Errorf(api.ErrPermissionDenied, "%s is on a read-only file system", name)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return api.Errorf(api.ErrResourceExhausted, "%s: no space left", name)
	case errors.As(err, &errno):
		return api.Errorf(api.ErrInternal, "%s: %v", name, err)
	}
	return err
}
