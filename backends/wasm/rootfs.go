package wasm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// rootFS is the workspace as wazero sees it: an experimentalsys.FS over a
// host directory in which every path is resolved by an *os.Root. That is
// what wazero's own DirFS does not do: it joins host paths and lets the
// kernel follow symlinks, so a link the guest makes (path_symlink) to "/"
// or "../.." leads out. Through an os.Root no guest path, "..", or symlink,
// existing or made by the guest, resolves outside the directory.
//
// Decisions beyond the doc comments of experimentalsys.FS:
//
//   - Symlink stores any target text, absolute or with "..": the link is
//     confined when it is followed, not when it is made. Following a link
//     that points out fails with EPERM. (wazero's DirFS refuses absolute
//     targets instead.) Host code other than this FS that walks the
//     workspace must not follow the links a guest left there without an
//     os.Root of its own.
//   - Errors: os.Root's "path escapes from parent" and EXDEV become EPERM;
//     ELOOP stays ELOOP; everything else goes through UnwrapOSError.
//   - Only regular files and directories can be opened. A FIFO or a device
//     node (only the host can put one in a workspace: WASI has no mknod, and
//     links that lead out are not followed) is refused with EACCES, so
//     opening one never blocks the daemon nor reaches a device. Every open
//     adds O_NONBLOCK|O_NOCTTY and checks the opened file with fstat, which
//     closes the race against a file swapped for a FIFO after the check by
//     name; O_NONBLOCK is cleared again unless the guest asked for it.
//   - O_NOFOLLOW: os.Root.OpenFile follows a symlink in the last component
//     (inside the root) whatever the flags, so the last component is checked
//     with Lstat first (a symlink is ELOOP) and again after opening, with
//     os.SameFile against the opened file (a mismatch is ELOOP). In that race
//     O_CREAT or O_TRUNC may already have acted on the file the new link
//     points to, which is still inside the root.
//   - Rmdir, Unlink and Rename resolve the parent directory through the root
//     and then call unlinkat/renameat on the last path component, which the
//     kernel never follows. That gives their POSIX semantics without a race:
//     os.Root.Remove would remove an empty directory for Unlink and a file
//     for Rmdir, and os.Root.Rename refuses to replace a directory.
//   - Chmod keeps only the permission bits (0o777): a guest cannot set
//     setuid, setgid or sticky bits in the workspace.
//   - Mkdir maps ENOTDIR (a parent is a file) to ENOENT, as wazero's DirFS.
//   - Paths are relative to the mount. "", "." and "/" are the root; leading
//     slashes are dropped (wazero passes "/name" for a path relative to a
//     directory descriptor opened on "." or "/").
//
// A rootFS is safe for concurrent use; a rootFile, like wazero's own files,
// is not.
type rootFS struct {
	experimentalsys.UnimplementedFS

	dir  string
	root *os.Root
}

var (
	_ experimentalsys.FS           = (*rootFS)(nil)
	_ experimentalsys.PollableFile = (*rootFile)(nil)
)

// newRootFS returns a wazero experimental/sys.FS over the host directory
// dir, confined to it with an *os.Root: no guest path, "..", or symlink
// (existing or created by the guest) resolves outside dir.
func newRootFS(dir string) (*rootFS, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &rootFS{dir: dir, root: root}, nil
}

// Close closes the os.Root. Files opened before stay usable until closed.
func (r *rootFS) Close() error { return r.root.Close() }

// String returns the host directory, like wazero's DirFS.
func (r *rootFS) String() string { return r.dir }

// rootPath turns a path relative to the mount into a name for the os.Root.
func rootPath(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// errPathEscapesText is the text of os.Root's unexported errPathEscapes.
const errPathEscapesText = "path escapes from parent"

// rootErrno maps an error from os.Root or os.File to an Errno.
func rootErrno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == errPathEscapesText {
			return experimentalsys.EPERM
		}
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		switch se {
		case syscall.EXDEV:
			return experimentalsys.EPERM
		case syscall.ELOOP:
			return experimentalsys.ELOOP
		}
		return experimentalsys.UnwrapOSError(se)
	}
	return experimentalsys.UnwrapOSError(err)
}

// toOpenFlag translates an Oflag to flags for os.Root.OpenFile. O_NOFOLLOW
// is not among them: OpenFile handles it, as os.Root would ignore it.
func toOpenFlag(oflag experimentalsys.Oflag) (int, experimentalsys.Errno) {
	var flag int
	switch oflag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDONLY:
		flag = os.O_RDONLY
	case experimentalsys.O_RDWR:
		flag = os.O_RDWR
	case experimentalsys.O_WRONLY:
		flag = os.O_WRONLY
	default: // O_RDWR|O_WRONLY
		return 0, experimentalsys.EINVAL
	}
	for _, m := range [...]struct {
		o experimentalsys.Oflag
		f int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND},
		{experimentalsys.O_CREAT, os.O_CREATE},
		{experimentalsys.O_EXCL, os.O_EXCL},
		{experimentalsys.O_TRUNC, os.O_TRUNC},
		{experimentalsys.O_SYNC, os.O_SYNC},
		{experimentalsys.O_DSYNC, unix.O_DSYNC},
		{experimentalsys.O_RSYNC, unix.O_RSYNC},
		{experimentalsys.O_DIRECTORY, unix.O_DIRECTORY},
		{experimentalsys.O_NONBLOCK, unix.O_NONBLOCK},
	} {
		if oflag&m.o != 0 {
			flag |= m.f
		}
	}
	return flag, 0
}

// openable reports whether a file of this mode may be opened: only regular
// files and directories are.
func openable(m fs.FileMode) bool { return m.IsRegular() || m.IsDir() }

// OpenFile implements experimentalsys.FS.OpenFile.
func (r *rootFS) OpenFile(p string, oflag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	name := rootPath(p)
	flag, errno := toOpenFlag(oflag)
	if errno != 0 {
		return nil, errno
	}
	if oflag&experimentalsys.O_DIRECTORY != 0 && flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return nil, experimentalsys.EISDIR // a directory cannot be opened writeable
	}
	nofollow := oflag&experimentalsys.O_NOFOLLOW != 0
	createExcl := oflag&(experimentalsys.O_CREAT|experimentalsys.O_EXCL) == experimentalsys.O_CREAT|experimentalsys.O_EXCL

	// Look before opening: a symlink under O_NOFOLLOW is ELOOP, a FIFO or
	// device is EACCES without opening it. Errors are left to the open.
	var before fs.FileInfo
	if nofollow {
		if fi, err := r.root.Lstat(name); err == nil {
			if fi.Mode()&fs.ModeSymlink != 0 {
				if !createExcl { // O_CREAT|O_EXCL never follows: EEXIST below
					return nil, experimentalsys.ELOOP
				}
			} else {
				before = fi
			}
		}
	}
	target := before
	if target == nil {
		target, _ = r.root.Stat(name)
	}
	if target != nil && !openable(target.Mode()) {
		return nil, experimentalsys.EACCES
	}

	f, err := r.root.OpenFile(name, flag|unix.O_NONBLOCK|unix.O_NOCTTY, perm&fs.ModePerm)
	if err != nil {
		return nil, rootErrno(err)
	}
	fail := func(errno experimentalsys.Errno) (experimentalsys.File, experimentalsys.Errno) {
		_ = f.Close()
		return nil, errno
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(rootErrno(err))
	}
	if !openable(fi.Mode()) {
		return fail(experimentalsys.EACCES)
	}
	if nofollow {
		after, err := r.root.Lstat(name)
		if err != nil || after.Mode()&fs.ModeSymlink != 0 || !os.SameFile(after, fi) ||
			(before != nil && !os.SameFile(before, fi)) {
			return fail(experimentalsys.ELOOP)
		}
	}
	rf := &rootFile{f: f, flag: oflag}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		rf.dev, rf.ino = uint64(st.Dev), st.Ino
	}
	rf.isDir = fi.IsDir()
	if oflag&experimentalsys.O_NONBLOCK == 0 {
		if errno := rf.setFlag(unix.O_NONBLOCK, false); errno != 0 {
			return fail(errno)
		}
	}
	return rf, 0
}

// Lstat implements experimentalsys.FS.Lstat.
func (r *rootFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(rootPath(p))
	if err != nil {
		return sys.Stat_t{}, rootErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Stat implements experimentalsys.FS.Stat.
func (r *rootFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(rootPath(p))
	if err != nil {
		return sys.Stat_t{}, rootErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Mkdir implements experimentalsys.FS.Mkdir.
func (r *rootFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	errno := rootErrno(r.root.Mkdir(rootPath(p), perm&fs.ModePerm))
	if errno == experimentalsys.ENOTDIR {
		errno = experimentalsys.ENOENT // as wazero's DirFS
	}
	return errno
}

// Chmod implements experimentalsys.FS.Chmod. Only permission bits are kept.
func (r *rootFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	return rootErrno(r.root.Chmod(rootPath(p), perm&fs.ModePerm))
}

// Rename implements experimentalsys.FS.Rename with renameat(2) semantics.
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	return rootErrno(r.at(rootPath(from), func(oldfd int, oldbase string) error {
		return r.at(rootPath(to), func(newfd int, newbase string) error {
			return unix.Renameat(oldfd, oldbase, newfd, newbase)
		})
	}))
}

// Rmdir implements experimentalsys.FS.Rmdir: directories only.
func (r *rootFS) Rmdir(p string) experimentalsys.Errno {
	return rootErrno(r.at(rootPath(p), func(dirfd int, base string) error {
		return unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
	}))
}

// Unlink implements experimentalsys.FS.Unlink: anything but a directory
// (EISDIR). A symlink is removed, not what it points to.
func (r *rootFS) Unlink(p string) experimentalsys.Errno {
	return rootErrno(r.at(rootPath(p), func(dirfd int, base string) error {
		return unix.Unlinkat(dirfd, base, 0)
	}))
}

// Link implements experimentalsys.FS.Link.
func (r *rootFS) Link(oldPath, newPath string) experimentalsys.Errno {
	return rootErrno(r.root.Link(rootPath(oldPath), rootPath(newPath)))
}

// Symlink implements experimentalsys.FS.Symlink. The target is stored as
// given; following the link is what is confined.
func (r *rootFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	return rootErrno(r.root.Symlink(oldPath, rootPath(linkName)))
}

// Readlink implements experimentalsys.FS.Readlink.
func (r *rootFS) Readlink(p string) (string, experimentalsys.Errno) {
	dst, err := r.root.Readlink(rootPath(p))
	if err != nil {
		return "", rootErrno(err)
	}
	return dst, 0
}

// Utimens implements experimentalsys.FS.Utimens, following a symlink (in
// the root). os.Root.Chtimes leaves a time unchanged when it is zero, which
// is what UTIME_OMIT becomes.
func (r *rootFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	return rootErrno(r.root.Chtimes(rootPath(p), nanosToTime(atim), nanosToTime(mtim)))
}

func nanosToTime(ns int64) time.Time {
	if ns == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// at resolves the directory that holds the last component of name through
// the root and calls fn with its descriptor and that component, with any
// trailing slash kept so that the kernel checks it. fn must use an *at
// system call that does not follow the last component.
func (r *rootFS) at(name string, fn func(dirfd int, base string) error) error {
	trimmed := strings.TrimRight(name, "/")
	if trimmed == "" {
		trimmed = "."
	}
	dir, base := ".", trimmed
	if i := strings.LastIndexByte(trimmed, '/'); i >= 0 {
		dir, base = trimmed[:i], trimmed[i+1:]
	}
	if base == ".." {
		return syscall.EPERM // the parent of something: never ours to change
	}
	if len(trimmed) < len(name) {
		base += "/"
	}
	d, err := r.root.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return control(d, func(fd int) error { return fn(fd, base) })
}

// control runs fn with the descriptor of f, which stays open meanwhile.
// Unlike f.Fd it leaves the file as it is (Fd makes it blocking).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if opErr = fn(int(fd)); opErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return opErr
}

// seekOffset is int64; see rootFile.Seek.
type seekOffset = int64

// rootFile is a file or directory opened through a rootFS.
type rootFile struct {
	experimentalsys.UnimplementedFile

	f      *os.File
	flag   experimentalsys.Oflag // O_APPEND and O_NONBLOCK track the descriptor
	dev    uint64
	ino    sys.Inode
	isDir  bool
	closed bool
}

// Dev implements experimentalsys.File.Dev (cached at open).
func (f *rootFile) Dev() (uint64, experimentalsys.Errno) { return f.dev, 0 }

// Ino implements experimentalsys.File.Ino (cached at open).
func (f *rootFile) Ino() (sys.Inode, experimentalsys.Errno) { return f.ino, 0 }

// IsDir implements experimentalsys.File.IsDir (cached at open).
func (f *rootFile) IsDir() (bool, experimentalsys.Errno) { return f.isDir, 0 }

// IsAppend implements experimentalsys.File.IsAppend.
func (f *rootFile) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

// SetAppend implements experimentalsys.File.SetAppend with fcntl(F_SETFL).
func (f *rootFile) SetAppend(enable bool) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.isDir {
		return experimentalsys.EISDIR
	}
	if errno := f.setFlag(unix.O_APPEND, enable); errno != 0 {
		return errno
	}
	f.flag = setOflag(f.flag, experimentalsys.O_APPEND, enable)
	return 0
}

// IsNonblock implements experimentalsys.PollableFile.IsNonblock.
func (f *rootFile) IsNonblock() bool { return f.flag&experimentalsys.O_NONBLOCK != 0 }

// SetNonblock implements experimentalsys.PollableFile.SetNonblock. Only
// regular files and directories are ever open, for which it changes nothing
// but the flag the guest reads back.
func (f *rootFile) SetNonblock(enable bool) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if errno := f.setFlag(unix.O_NONBLOCK, enable); errno != 0 {
		return errno
	}
	f.flag = setOflag(f.flag, experimentalsys.O_NONBLOCK, enable)
	return 0
}

func setOflag(flag, bit experimentalsys.Oflag, enable bool) experimentalsys.Oflag {
	if enable {
		return flag | bit
	}
	return flag &^ bit
}

// setFlag sets or clears a file status flag of the descriptor.
func (f *rootFile) setFlag(bit int, enable bool) experimentalsys.Errno {
	return rootErrno(control(f.f, func(fd int) error {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return err
		}
		if enable {
			fl |= bit
		} else {
			fl &^= bit
		}
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
		return err
	}))
}

// Poll implements experimentalsys.Pollable: a regular file or a directory
// is always ready.
func (f *rootFile) Poll(experimentalsys.Pflag, int32) (bool, experimentalsys.Errno) {
	if f.closed {
		return false, experimentalsys.EBADF
	}
	return true, 0
}

// Stat implements experimentalsys.File.Stat (fstat).
func (f *rootFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	if f.closed {
		return sys.Stat_t{}, experimentalsys.EBADF
	}
	fi, err := f.f.Stat()
	if err != nil {
		return sys.Stat_t{}, rootErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Read implements experimentalsys.File.Read.
func (f *rootFile) Read(buf []byte) (int, experimentalsys.Errno) {
	switch {
	case f.closed:
		return 0, experimentalsys.EBADF
	case f.isDir:
		return 0, experimentalsys.EISDIR
	case len(buf) == 0:
		return 0, 0
	}
	n, err := f.f.Read(buf)
	return n, rootErrno(err) // io.EOF is no error
}

// Pread implements experimentalsys.File.Pread.
func (f *rootFile) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	switch {
	case f.closed:
		return 0, experimentalsys.EBADF
	case f.isDir:
		return 0, experimentalsys.EISDIR
	case off < 0:
		return 0, experimentalsys.EINVAL
	case len(buf) == 0:
		return 0, 0
	}
	n, err := f.f.ReadAt(buf, off)
	return n, rootErrno(err)
}

// Seek implements experimentalsys.File.Seek. A directory can only be
// rewound (Seek(0, io.SeekStart)), after which Readdir lists it as it is
// now: os.File drops its directory buffer and the descriptor is rewound,
// which is rewinddir(3). Rewinding the descriptor rather than opening the
// directory again by name keeps it the same directory even if it was
// renamed meanwhile.
//
// The offset's type is spelled seekOffset, an alias of int64, only because
// go vet's stdmethods check takes any Seek(int64, int) for an io.Seeker and
// rejects the Errno result experimentalsys.File requires.
func (f *rootFile) Seek(offset seekOffset, whence int) (int64, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if whence < io.SeekStart || whence > io.SeekEnd {
		return 0, experimentalsys.EINVAL
	}
	if f.isDir && (offset != 0 || whence != io.SeekStart) {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.Seek(offset, whence)
	return n, rootErrno(err)
}

// Readdir implements experimentalsys.File.Readdir. As os.File.Readdir, it
// leaves out "." and "..": wazero's fd_readdir adds them itself.
func (f *rootFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if f.closed || !f.isDir {
		return nil, experimentalsys.EBADF
	}
	// os.File.Readdir lstats each entry with fstatat on this descriptor,
	// never by host path.
	fis, err := f.f.Readdir(n)
	if errno := rootErrno(err); errno != 0 { // io.EOF is no error
		return nil, errno
	}
	dirents := make([]experimentalsys.Dirent, 0, len(fis))
	for _, fi := range fis {
		var ino sys.Inode
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		dirents = append(dirents, experimentalsys.Dirent{Name: fi.Name(), Ino: ino, Type: fi.Mode().Type()})
	}
	return dirents, 0
}

// Write implements experimentalsys.File.Write.
func (f *rootFile) Write(buf []byte) (int, experimentalsys.Errno) {
	switch {
	case f.closed, f.isDir:
		return 0, experimentalsys.EBADF
	case len(buf) == 0:
		return 0, 0
	}
	n, err := f.f.Write(buf)
	return n, rootErrno(err)
}

// Pwrite implements experimentalsys.File.Pwrite with pwrite(2), so that
// SetAppend is honoured (os.File.WriteAt refuses files opened with
// O_APPEND and does not see later changes). On Linux, pwrite on a file in
// append mode appends.
func (f *rootFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	switch {
	case f.closed:
		return 0, experimentalsys.EBADF
	case f.isDir:
		return 0, experimentalsys.EISDIR
	case off < 0:
		return 0, experimentalsys.EINVAL
	case len(buf) == 0:
		return 0, 0
	}
	written := 0
	err := control(f.f, func(fd int) error {
		for written < len(buf) {
			m, err := unix.Pwrite(fd, buf[written:], off+int64(written))
			if err != nil {
				return err
			}
			if m == 0 {
				return io.ErrShortWrite
			}
			written += m
		}
		return nil
	})
	return written, rootErrno(err)
}

// Truncate implements experimentalsys.File.Truncate.
func (f *rootFile) Truncate(size int64) experimentalsys.Errno {
	switch {
	case f.closed:
		return experimentalsys.EBADF
	case f.isDir:
		return experimentalsys.EISDIR
	case size < 0:
		return experimentalsys.EINVAL
	}
	return rootErrno(f.f.Truncate(size))
}

// Sync implements experimentalsys.File.Sync.
func (f *rootFile) Sync() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	return rootErrno(f.f.Sync())
}

// Datasync implements experimentalsys.File.Datasync.
func (f *rootFile) Datasync() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	return rootErrno(control(f.f, unix.Fdatasync))
}

// Utimens implements experimentalsys.File.Utimens: futimens(3), that is
// utimensat(fd, NULL, times, 0), honouring UTIME_OMIT.
func (f *rootFile) Utimens(atim, mtim int64) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	ts := [2]unix.Timespec{toTimespec(atim), toTimespec(mtim)}
	return rootErrno(control(f.f, func(fd int) error {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	}))
}

func toTimespec(ns int64) unix.Timespec {
	if ns == experimentalsys.UTIME_OMIT {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(ns)
}

// Close implements experimentalsys.File.Close. It is idempotent; the file
// answers EBADF afterwards.
func (f *rootFile) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	return rootErrno(f.f.Close())
}
