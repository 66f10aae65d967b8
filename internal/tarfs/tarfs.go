// Package tarfs moves directory trees between a sandbox and a tar stream:
// Extract unpacks an upload into a sandbox's directory, Archive packs one
// up for download.
//
// The sandbox is hostile and keeps running while the daemon works: it may
// plant symbolic links, swap a file for a link or a FIFO between two
// system calls, or send an archive built to escape. So every operation
// goes through an *os.Root, no link in the tree being extracted into or
// archived (planted there, or brought by the archive) is followed, and an
// upload is staged out of the sandbox's reach and only moved into place
// once all of it is known to be valid. Only the parents of the directory
// named by the caller are resolved the ordinary os.Root way: links
// followed, but never out of the root.
package tarfs

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// Limits bound an extraction. A negative field means no limit; zero
// allows nothing, so that a limit someone forgot to set fails loudly
// instead of letting an upload fill the disk.
type Limits struct {
	MaxBytes   int64 // total bytes of file content; more -> api.ErrTooLarge
	MaxEntries int   // entries of any type; more -> api.ErrTooLarge
}

// Result counts what was extracted or archived.
type Result struct {
	Files int   // regular files, hard links included
	Bytes int64 // bytes of file content
}

const (
	// stagingPrefix starts the name of the directory an upload is staged
	// in. Archive leaves such directories out: they are the daemon's,
	// and a concurrent upload's half-written one is no part of the tree.
	stagingPrefix = ".sandboxd-upload-"
	stagingRandom = 16 // bytes of randomness, so the sandbox cannot guess the name in advance

	// maxName bounds entry names and link targets. Linux takes no longer
	// path in one call, and it bounds what one entry costs the daemon.
	maxName = 4096

	bufSize = 32 << 10
)

// Extract reads a tar stream from r and extracts it into dir (a path
// relative to root, "." for the root; created with parents if missing,
// owned by uid/gid), all or nothing.
//
// The archive is staged in a fresh directory inside dir that only the
// daemon may enter, then moved into dir entry by entry: a directory that
// exists in dir (as a real directory, never through a symlink) is merged,
// a file or symlink replaces any non-directory of the same name. Before
// anything is moved, the whole staged tree is checked against dir, and a
// file where dir has a directory, or a directory where dir has anything
// else (a symlink included), fails with api.ErrConflict. On any error
// nothing is moved, the staging directory is removed, and the directories
// Extract created for dir are removed again.
//
// Refused with api.ErrPermissionDenied: entry names that are absolute or
// have a ".." component; symlinks whose target is absolute, has ".." after
// a name (the name may itself be a link, so ".." there cannot be resolved
// without following it) or, resolved lexically from the link's directory,
// leads outside dir; hard links whose target is absolute, has "..", or is
// not a regular file that appeared earlier in the archive; entries beneath
// a symlink of the archive. Refused with api.ErrInvalidArgument: devices,
// FIFOs and other types than files, directories, symlinks and hard links;
// malformed or truncated archives; a name that is both a directory and a
// non-directory in the archive. Exceeding lim is api.ErrTooLarge.
//
// Entries keep their permission bits (0777 only), directories at least
// 0700 for the owner. When uid >= 0, every created file, directory and
// symlink is owned by uid/gid. Files keep their modification time. Entries
// naming dir itself ("." or "./") are skipped; when a name repeats, the
// later file, symlink or hard link wins.
//
// dir itself must not be a symlink (api.ErrPermissionDenied). On error
// the Result is zero. The sandbox can still race the final moves against
// its own changes to dir; that can leave part of the upload moved, never
// anything outside dir.
func Extract(root *os.Root, dir string, r io.Reader, lim Limits, uid, gid int) (Result, error) {
	dir, err := cleanDir(dir)
	if err != nil {
		return Result{}, err
	}
	created, err := makeDir(root, dir, uid, gid)
	if err != nil {
		removeDirs(root, created)
		return Result{}, err
	}
	res, err := extract(root, dir, r, lim, uid, gid)
	if err != nil {
		removeDirs(root, created)
		return Result{}, err
	}
	return res, nil
}

// cleanDir checks a directory argument of the API: the caller maps
// sandbox paths with backends.FS.Rel, so anything non-local is a bug or
// an attack either way.
func cleanDir(dir string) (string, error) {
	if dir == "" {
		dir = "."
	}
	if strings.IndexByte(dir, 0) >= 0 {
		return "", api.Errorf(api.ErrInvalidArgument, "directory name %q contains a NUL character", dir)
	}
	c := path.Clean(dir)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", api.Errorf(api.ErrPermissionDenied, "directory %q is outside the root", dir)
	}
	return c, nil
}

// makeDir creates dir and its missing parents, owned by uid/gid, and
// returns the ones it created, parents first. A symlink as dir itself is
// refused, as Archive refuses it; links in the parents are followed, which
// os.Root keeps inside root, where the caller could have named the target
// directly.
func makeDir(root *os.Root, dir string, uid, gid int) ([]string, error) {
	if dir == "." {
		return nil, nil
	}
	var created []string
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			err = root.Mkdir(p, 0o700)
			if err == nil {
				created = append(created, p)
				err = chmodDir(root, p, 0o755, uid, gid)
			}
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return created, backends.FSError(p, err)
			}
			fi, err = root.Lstat(p)
		}
		switch {
		case err != nil:
			return created, backends.FSError(p, err)
		case fi.Mode()&fs.ModeSymlink != 0 && i == len(parts)-1:
			return created, api.Errorf(api.ErrPermissionDenied, "%s is a symbolic link, which is not followed", p)
		case fi.Mode()&fs.ModeSymlink != 0:
			// os.Root resolves it, inside root.
		case !fi.IsDir():
			return created, api.Errorf(api.ErrInvalidArgument, "%s exists and is not a directory", p)
		}
	}
	return created, nil
}

// removeDirs undoes makeDir after a failure. Remove takes only empty
// directories, so whatever appeared in them meanwhile stays.
func removeDirs(root *os.Root, dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		if fi, err := root.Lstat(dirs[i]); err == nil && fi.IsDir() {
			root.Remove(dirs[i])
		}
	}
}

// mkdirOwned creates directory name in parent with mode perm, owned by
// uid/gid when uid >= 0.
func mkdirOwned(parent *os.Root, name string, perm os.FileMode, uid, gid int) error {
	if err := parent.Mkdir(name, 0o700); err != nil {
		return err
	}
	return chmodDir(parent, name, perm, uid, gid)
}

// chmodDir sets the mode and owner of directory name through an open
// descriptor, after checking that what was opened is what Lstat saw: a
// real directory, not one reached through a link. os.Root follows a
// final symlink even with O_NOFOLLOW, and a sandbox that swapped a fresh
// directory for a link to one of root's (say etc) would otherwise be
// handed that directory.
func chmodDir(parent *os.Root, name string, perm os.FileMode, uid, gid int) error {
	fi, err := parent.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return api.Errorf(api.ErrConflict, "%s was replaced while it was being created", name)
	}
	f, err := parent.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if ofi, err := f.Stat(); err != nil || !os.SameFile(fi, ofi) {
		return api.Errorf(api.ErrConflict, "%s was replaced while it was being created", name)
	}
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
	}
	return f.Chmod(perm)
}

func extract(root *os.Root, dir string, r io.Reader, lim Limits, uid, gid int) (Result, error) {
	fi, err := root.Lstat(dir)
	if err != nil {
		return Result{}, backends.FSError(dir, err)
	}
	d, err := root.OpenRoot(dir)
	if err != nil {
		return Result{}, backends.FSError(dir, err)
	}
	defer d.Close()
	if dfi, err := d.Stat("."); err != nil || !os.SameFile(fi, dfi) {
		return Result{}, api.Errorf(api.ErrConflict, "%s changed while the upload was starting", dir)
	}

	stName, st, err := makeStaging(d)
	if err != nil {
		return Result{}, backends.FSError(dir, err)
	}
	x := &extractor{dir: dir, d: d, stName: stName, st: st, lim: lim, uid: uid, gid: gid, buf: make([]byte, bufSize)}
	defer x.cleanup()

	if err := x.readAll(r); err != nil {
		return Result{}, err
	}
	x.dropCache()
	if err := x.merge(".", false); err != nil {
		return Result{}, err
	}
	if err := x.merge(".", true); err != nil {
		return Result{}, err
	}
	return x.res, nil
}

// makeStaging creates the staging directory in d. It stays the daemon's
// and 0700: the sandbox owns d and could rename it, but cannot reach
// inside to swap a staged directory for a link while entries are written
// into it; and all writes go through st, the directory itself, not its
// name.
func makeStaging(d *os.Root) (string, *os.Root, error) {
	var name string
	for range 5 {
		name = stagingPrefix + hex.EncodeToString(randomBytes(stagingRandom))
		err := d.Mkdir(name, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", nil, err
		}
		name = ""
	}
	if name == "" {
		return "", nil, fmt.Errorf("cannot create a staging directory: names taken")
	}
	fi, err := d.Lstat(name)
	if err != nil {
		return "", nil, err
	}
	st, err := d.OpenRoot(name)
	if err != nil {
		return "", nil, err
	}
	sfi, err := st.Stat(".")
	if err != nil || !fi.IsDir() || !os.SameFile(fi, sfi) || !ownedByDaemon(sfi) {
		// Swapped before we opened it; whatever it is now is not ours to
		// remove.
		st.Close()
		return "", nil, api.Errorf(api.ErrConflict, "the staging directory was replaced while it was being created")
	}
	return name, st, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

func ownedByDaemon(fi fs.FileInfo) bool {
	s, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.IsDir() && int(s.Uid) == os.Geteuid()
}

func isStagingName(name string) bool {
	h, ok := strings.CutPrefix(name, stagingPrefix)
	if !ok || len(h) != 2*stagingRandom {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// extractor is one extraction: everything below is relative to the
// staging directory st unless said otherwise.
type extractor struct {
	dir    string   // dir as the caller named it, for messages
	d      *os.Root // dir
	stName string   // name of the staging directory in d
	st     *os.Root // the staging directory
	lim    Limits
	uid    int
	gid    int
	buf    []byte

	res     Result
	entries int

	// The parent directory of the last entry, kept open because archives
	// list a directory's entries together; walking to it component by
	// component for each entry would cost a system call per component.
	cacheName string
	cache     *os.Root
}

// cleanup removes the staging directory: emptied through its own
// descriptor, so that a sandbox that renamed it and put something else
// in its place cannot make the daemon delete that; then its name, which
// Remove only takes if it is (again) an empty directory or a non-directory.
func (x *extractor) cleanup() {
	x.dropCache()
	if f, err := x.st.Open("."); err == nil {
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, n := range names {
			x.st.RemoveAll(n)
		}
	}
	x.st.Close()
	x.d.Remove(x.stName)
}

func (x *extractor) readAll(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, nextErr := tr.Next()
		if nextErr == io.EOF {
			return nil
		}
		if nextErr != nil && !(errors.Is(nextErr, tar.ErrInsecurePath) && hdr != nil) {
			return readError(nextErr)
		}
		x.entries++
		if x.lim.MaxEntries >= 0 && x.entries > x.lim.MaxEntries {
			return api.Errorf(api.ErrTooLarge, "the archive has more than %d entries, the limit", x.lim.MaxEntries)
		}
		if err := x.entry(tr, hdr); err != nil {
			return err
		}
		if nextErr != nil {
			// GODEBUG=tarinsecurepath=0 and a name our checks let pass;
			// the reader's error is sticky, so the archive ends here.
			return api.Errorf(api.ErrPermissionDenied, "entry %q: %v", hdr.Name, nextErr)
		}
	}
}

// readError classifies an error of the tar reader: the archive's fault
// when it is malformed, the reader's (and kept as is) otherwise.
func readError(err error) error {
	switch {
	case isClassified(err):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(api.ErrInvalidArgument, "the archive ends in the middle of an entry")
	case errors.Is(err, tar.ErrHeader):
		return api.Errorf(api.ErrInvalidArgument, "the archive is not a valid tar stream: %v", err)
	}
	return fmt.Errorf("reading the archive: %w", err)
}

func isClassified(err error) bool {
	return api.CodeOf(err) != api.CodeInternal || errors.Is(err, api.ErrInternal)
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // metadata, as `git archive` writes first
	}
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return api.Errorf(api.ErrInvalidArgument, "entry %q names the destination directory itself but is not a directory", hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return x.file(tr, hdr, name)
	case tar.TypeDir:
		return x.mkdir(hdr, name)
	case tar.TypeSymlink:
		return x.symlink(hdr, name)
	case tar.TypeLink:
		return x.hardlink(hdr, name)
	}
	return api.Errorf(api.ErrInvalidArgument, "entry %q is %s, which cannot be uploaded", hdr.Name, typeName(hdr.Typeflag))
}

func typeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeFifo:
		return "a FIFO"
	}
	return fmt.Sprintf("of type %q", t)
}

// entryName checks an entry's name and returns it cleaned, "." for the
// destination directory itself.
func entryName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", api.Errorf(api.ErrInvalidArgument, "an entry of the archive has an empty name")
	case len(raw) > maxName:
		return "", api.Errorf(api.ErrInvalidArgument, "entry %.64q... has a name longer than %d bytes", raw, maxName)
	case strings.IndexByte(raw, 0) >= 0:
		return "", api.Errorf(api.ErrInvalidArgument, "entry %q has a NUL character in its name", raw)
	case path.IsAbs(raw):
		return "", api.Errorf(api.ErrPermissionDenied, "entry %q has an absolute name", raw)
	}
	name := path.Clean(raw)
	if hasDotDot(raw) || hasDotDot(name) {
		return "", api.Errorf(api.ErrPermissionDenied, "entry %q has a \"..\" component", raw)
	}
	return name, nil
}

func hasDotDot(p string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// perm keeps the permission bits of an entry's mode. Never setuid or
// setgid: with uid < 0 the files are the daemon's, and a setuid-root
// program handed to the sandbox would be root inside it.
func perm(hdr *tar.Header) os.FileMode { return os.FileMode(hdr.Mode) & 0o777 }

func (x *extractor) file(tr *tar.Reader, hdr *tar.Header, name string) error {
	if hdr.Size < 0 {
		return api.Errorf(api.ErrInvalidArgument, "entry %q has a negative size", hdr.Name)
	}
	if x.lim.MaxBytes >= 0 && hdr.Size > x.lim.MaxBytes-x.res.Bytes {
		return api.Errorf(api.ErrTooLarge, "entry %q has %d bytes, more than the %d left of the limit of %d bytes per upload",
			hdr.Name, hdr.Size, x.lim.MaxBytes-x.res.Bytes, x.lim.MaxBytes)
	}
	parent, base, err := x.parentOf(hdr.Name, name)
	if err != nil {
		return err
	}
	var f *os.File
	for try := 0; ; try++ {
		f, err = parent.OpenFile(base, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			break
		}
		if try > 0 || !errors.Is(err, fs.ErrExist) {
			return x.fsError(hdr.Name, err)
		}
		if err := x.clear(parent, base, hdr.Name); err != nil {
			return err
		}
	}
	n, err := x.copy(f, tr)
	x.res.Bytes += n
	if err == nil && x.uid >= 0 {
		err = f.Chown(x.uid, x.gid)
	}
	if err == nil {
		err = f.Chmod(perm(hdr))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return x.fsError(hdr.Name, err)
	}
	if !hdr.ModTime.IsZero() {
		atime := hdr.AccessTime
		if atime.IsZero() {
			atime = hdr.ModTime
		}
		parent.Chtimes(base, atime, hdr.ModTime) // a nicety: no reason to fail an upload
	}
	x.res.Files++
	return nil
}

// copy copies an entry's content through the one buffer of the
// extraction; the reader stops at the header's size.
func (x *extractor) copy(f *os.File, tr *tar.Reader) (int64, error) {
	var n int64
	for {
		m, rerr := tr.Read(x.buf)
		if m > 0 {
			if _, err := f.Write(x.buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, readError(rerr)
		}
	}
}

// clear makes room for a later entry of the archive with the same name as
// an earlier one. Replacing a directory would drop what the archive put
// in it, so that is refused.
func (x *extractor) clear(parent *os.Root, base, entry string) error {
	fi, err := parent.Lstat(base)
	if err != nil {
		return x.fsError(entry, err)
	}
	if fi.IsDir() {
		return api.Errorf(api.ErrInvalidArgument, "entry %q is both a directory and a non-directory in the archive", entry)
	}
	if err := parent.Remove(base); err != nil {
		return x.fsError(entry, err)
	}
	return nil
}

func (x *extractor) mkdir(hdr *tar.Header, name string) error {
	parent, base, err := x.parentOf(hdr.Name, name)
	if err != nil {
		return err
	}
	mode := perm(hdr) | 0o700
	fi, err := parent.Lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = mkdirOwned(parent, base, mode, x.uid, x.gid)
	case err != nil:
	case fi.IsDir(): // repeated, or created earlier as a parent
		err = chmodDir(parent, base, mode, x.uid, x.gid)
	default:
		return api.Errorf(api.ErrInvalidArgument, "entry %q is both a directory and a non-directory in the archive", hdr.Name)
	}
	return x.fsError(hdr.Name, err)
}

func (x *extractor) symlink(hdr *tar.Header, name string) error {
	if err := checkSymlink(hdr.Name, name, hdr.Linkname); err != nil {
		return err
	}
	parent, base, err := x.parentOf(hdr.Name, name)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		err = parent.Symlink(hdr.Linkname, base)
		if err == nil {
			break
		}
		if try > 0 || !errors.Is(err, fs.ErrExist) {
			return x.fsError(hdr.Name, err)
		}
		if err := x.clear(parent, base, hdr.Name); err != nil {
			return err
		}
	}
	if x.uid >= 0 {
		if err := parent.Lchown(base, x.uid, x.gid); err != nil {
			return x.fsError(hdr.Name, err)
		}
	}
	return nil
}

// checkSymlink checks the target of symlink entry raw (cleaned: name).
// The target is resolved lexically from the link's directory, which is a
// real directory (entries beneath links are refused, and the move merges
// only into real directories), so leading ".." are exact. A ".." after a
// name is refused: the name may be a link itself ("l/../.." where l ->
// "a/b/c" is not ".."), and chains of such links walk out of any lexical
// check.
func checkSymlink(raw, name, target string) error {
	switch {
	case target == "":
		return api.Errorf(api.ErrInvalidArgument, "symbolic link %q has an empty target", raw)
	case len(target) > maxName:
		return api.Errorf(api.ErrInvalidArgument, "symbolic link %q has a target longer than %d bytes", raw, maxName)
	case strings.IndexByte(target, 0) >= 0:
		return api.Errorf(api.ErrInvalidArgument, "symbolic link %q has a NUL character in its target", raw)
	case path.IsAbs(target):
		return api.Errorf(api.ErrPermissionDenied, "symbolic link %q points to the absolute path %q", raw, target)
	}
	named := false
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return api.Errorf(api.ErrPermissionDenied, "symbolic link %q has a target %q with \"..\" after a name, which cannot be checked without following links", raw, target)
			}
		default:
			named = true
		}
	}
	if t := path.Join(path.Dir(name), target); t == ".." || strings.HasPrefix(t, "../") {
		return api.Errorf(api.ErrPermissionDenied, "symbolic link %q points to %q, outside the directory", raw, target)
	}
	return nil
}

func (x *extractor) hardlink(hdr *tar.Header, name string) error {
	target := hdr.Linkname
	switch {
	case target == "" || len(target) > maxName || strings.IndexByte(target, 0) >= 0:
		return api.Errorf(api.ErrInvalidArgument, "hard link %q has an invalid target", hdr.Name)
	case path.IsAbs(target):
		return api.Errorf(api.ErrPermissionDenied, "hard link %q points to the absolute path %q", hdr.Name, target)
	case hasDotDot(target):
		return api.Errorf(api.ErrPermissionDenied, "hard link %q has a target %q with a \"..\" component", hdr.Name, target)
	}
	tname := path.Clean(target)
	notEarlier := api.Errorf(api.ErrPermissionDenied, "hard link %q points to %q, which is not a regular file that appeared earlier in the archive", hdr.Name, target)
	if tname == "." {
		return notEarlier
	}
	// The staging directory holds nothing but the archive's entries (and
	// directories made for them), so a regular file there is an entry.
	tparent, err := x.openDir(path.Dir(tname), false, hdr.Name)
	if err != nil {
		// Missing, or beneath a file or a symlink.
		if isClassified(err) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return notEarlier
		}
		return x.fsError(hdr.Name, err)
	}
	fi, err := tparent.Lstat(path.Base(tname))
	if err != nil || !fi.Mode().IsRegular() {
		return notEarlier
	}
	if tname == name {
		x.res.Files++
		return nil // a link to itself: it already is
	}
	parent, base, err := x.parentOf(hdr.Name, name)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		// Both parents were just walked without following links.
		err = x.st.Link(tname, name)
		if err == nil {
			break
		}
		if try > 0 || !errors.Is(err, fs.ErrExist) {
			return x.fsError(hdr.Name, err)
		}
		if err := x.clear(parent, base, hdr.Name); err != nil {
			return err
		}
	}
	x.res.Files++
	return nil
}

// parentOf opens the directory that holds entry name, creating the
// missing ones, and returns it with the name's last element.
func (x *extractor) parentOf(raw, name string) (*os.Root, string, error) {
	parent, err := x.openDir(path.Dir(name), true, raw)
	if err != nil {
		return nil, "", x.fsError(raw, err)
	}
	return parent, path.Base(name), nil
}

// openDir opens directory p of the staging tree, one component at a time
// without following a symlink: an entry beneath a symlink of the archive
// would be written wherever the link points. With create, missing
// directories are made, mode 0755 as tar does. The result stays cached;
// the caller does not close it.
func (x *extractor) openDir(p string, create bool, entry string) (*os.Root, error) {
	if p == "." {
		return x.st, nil
	}
	if x.cache != nil && p == x.cacheName {
		return x.cache, nil
	}
	cur, walked, rest := x.st, "", p
	if x.cache != nil && strings.HasPrefix(p, x.cacheName+"/") {
		cur, walked, rest = x.cache, x.cacheName, p[len(x.cacheName)+1:]
		x.cache = nil // now cur, closed below once walked past
	}
	x.dropCache()
	for c := range strings.SplitSeq(rest, "/") {
		walked = path.Join(walked, c)
		next, err := x.step(cur, c, walked, create, entry)
		if cur != x.st {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
	x.cache, x.cacheName = cur, p
	return cur, nil
}

func (x *extractor) step(cur *os.Root, c, walked string, create bool, entry string) (*os.Root, error) {
	fi, err := cur.Lstat(c)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err = mkdirOwned(cur, c, 0o755, x.uid, x.gid); err == nil {
			fi, err = cur.Lstat(c)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, api.Errorf(api.ErrPermissionDenied, "entry %q lies beneath %q, a symbolic link of the archive, which is not followed", entry, walked)
	case !fi.IsDir():
		return nil, api.Errorf(api.ErrInvalidArgument, "entry %q lies beneath %q, which is not a directory in the archive", entry, walked)
	}
	return cur.OpenRoot(c)
}

func (x *extractor) dropCache() {
	if x.cache != nil {
		x.cache.Close()
		x.cache, x.cacheName = nil, ""
	}
}

func (x *extractor) fsError(entry string, err error) error {
	if isClassified(err) {
		return err
	}
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return api.Errorf(api.ErrInvalidArgument, "entry %q has a name too long for the file system", entry)
	}
	return backends.FSError(entry, err)
}

// merge moves staged directory p into dir, or with move false only checks
// that it can be: a staged directory merges into a real directory of dir
// (never one reached through a symlink), a staged non-directory replaces
// a non-directory. The check pass runs over the whole tree first, so a
// conflict moves nothing.
func (x *extractor) merge(p string, move bool) error {
	f, err := x.st.Open(p)
	if err != nil {
		return backends.FSError(path.Join(x.dir, p), err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return backends.FSError(path.Join(x.dir, p), err)
	}
	for _, n := range names {
		sp := path.Join(p, n)
		show := path.Join(x.dir, sp)
		sfi, err := x.st.Lstat(sp)
		if err != nil {
			return backends.FSError(show, err)
		}
		dfi, err := x.d.Lstat(sp)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if move {
				err = x.d.Rename(path.Join(x.stName, sp), sp)
			} else {
				err = nil
			}
		case err != nil:
		case sfi.IsDir() && dfi.IsDir():
			err = x.merge(sp, move)
		case sfi.IsDir() && dfi.Mode()&fs.ModeSymlink != 0:
			// Extracting there would go through the link: that is an entry
			// landing outside where it belongs, like "..".
			return api.Errorf(api.ErrPermissionDenied, "%s is a symbolic link where the archive has a directory; entries are never extracted through a link", show)
		case sfi.IsDir():
			return api.Errorf(api.ErrConflict, "%s exists and is not a directory, but the archive has a directory there", show)
		case dfi.IsDir():
			return api.Errorf(api.ErrConflict, "%s is a directory, but the archive has a file there", show)
		case move:
			err = x.d.Rename(path.Join(x.stName, sp), sp)
		}
		if err != nil {
			if isClassified(err) {
				return err
			}
			return backends.FSError(show, err)
		}
	}
	return nil
}

// Archive writes the tree at dir (relative to root) to w as a tar stream,
// names relative to dir, directories with a trailing "/".
//
// Symlinks are archived as links (their target), never followed; files
// that share an inode become hard links to the first name archived.
// FIFOs, sockets and devices are left out, and so is an entry that stops
// being what the walk saw (a file swapped for a link or a FIFO, a
// directory for a link) before it is opened. A file's size is taken once
// it is open: if it then shrinks, the entry is padded with zeros; if it
// grows, the rest is left out. Owners are not recorded (the sandbox's
// uids mean nothing to whoever downloads), permission bits are (0777).
//
// dir itself must be a directory, not a symlink (api.ErrPermissionDenied);
// missing, it is api.ErrNotFound. On error the stream is incomplete and
// Result counts what was written.
func Archive(root *os.Root, dir string, w io.Writer) (Result, error) {
	dir, err := cleanDir(dir)
	if err != nil {
		return Result{}, err
	}
	fi, err := root.Lstat(dir)
	switch {
	case err != nil:
		return Result{}, backends.FSError(dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return Result{}, api.Errorf(api.ErrPermissionDenied, "%s is a symbolic link, which is not followed", dir)
	case !fi.IsDir():
		return Result{}, api.Errorf(api.ErrInvalidArgument, "%s is not a directory", dir)
	}
	d, err := root.OpenRoot(dir)
	if err != nil {
		return Result{}, backends.FSError(dir, err)
	}
	defer d.Close()
	if dfi, err := d.Stat("."); err != nil || !os.SameFile(fi, dfi) {
		return Result{}, api.Errorf(api.ErrConflict, "%s changed while it was being opened", dir)
	}
	a := &archiver{dir: dir, tw: tar.NewWriter(w), buf: make([]byte, bufSize), links: map[fileID]string{}}
	if err := a.walk(d, ""); err != nil {
		return a.res, err
	}
	if err := a.tw.Close(); err != nil {
		return a.res, fmt.Errorf("writing the archive: %w", err)
	}
	return a.res, nil
}

type fileID struct{ dev, ino uint64 }

type archiver struct {
	dir   string
	tw    *tar.Writer
	buf   []byte
	res   Result
	links map[fileID]string // files with more than one name, by the first name archived
}

// walk archives the entries of directory cur, named prefix in the archive.
// Each level holds its directory open, so no name is resolved again below
// it: a directory the sandbox swaps for a link after the walk entered it
// changes nothing.
func (a *archiver) walk(cur *os.Root, prefix string) error {
	f, err := cur.Open(".")
	if err != nil {
		return a.fsError(prefix, err)
	}
	defer f.Close()
	for {
		// A few names at a time: a directory may have millions.
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if err := a.entry(cur, prefix, n); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return a.fsError(prefix, err)
		}
	}
}

func (a *archiver) fsError(rel string, err error) error {
	if isClassified(err) {
		return err
	}
	return backends.FSError(path.Join(a.dir, rel), err)
}

func (a *archiver) entry(cur *os.Root, prefix, n string) error {
	rel := prefix + n
	fi, err := cur.Lstat(n)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since it was listed
	}
	if err != nil {
		return a.fsError(rel, err)
	}
	switch fi.Mode().Type() {
	case 0:
		return a.file(cur, n, rel, fi)
	case fs.ModeDir:
		if isStagingName(n) {
			return nil
		}
		sub, err := cur.OpenRoot(n)
		if err != nil {
			if gone(cur, n, fi) {
				return nil
			}
			return a.fsError(rel, err)
		}
		defer sub.Close()
		if sfi, err := sub.Stat("."); err != nil || !os.SameFile(fi, sfi) {
			return nil // swapped (for a link) since the Lstat
		}
		if err := a.header(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}); err != nil {
			return err
		}
		return a.walk(sub, rel+"/")
	case fs.ModeSymlink:
		target, err := cur.Readlink(n)
		if err != nil {
			if gone(cur, n, fi) {
				return nil
			}
			return a.fsError(rel, err)
		}
		return a.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: rel, Linkname: target, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()})
	}
	return nil // FIFO, socket, device: no content to give
}

// gone tells whether name is no longer what fi described: then an error
// on it is the sandbox changing its tree, and the entry is left out.
func gone(cur *os.Root, name string, fi fs.FileInfo) bool {
	now, err := cur.Lstat(name)
	return err != nil || now.Mode().Type() != fi.Mode().Type() || !os.SameFile(fi, now)
}

func (a *archiver) header(hdr *tar.Header) error {
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	return nil
}

// file archives regular file n. It is opened without blocking (a FIFO
// swapped in would block a read-only open), then checked through the open
// descriptor to be the regular file the walk saw, so what is read is what
// was checked.
func (a *archiver) file(cur *os.Root, n, rel string, fi fs.FileInfo) error {
	f, err := cur.OpenFile(n, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if gone(cur, n, fi) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENXIO) {
			return nil
		}
		return a.fsError(rel, err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return a.fsError(rel, err)
	}
	if !ofi.Mode().IsRegular() || !os.SameFile(fi, ofi) {
		// Swapped since the walk saw it: os.Root follows a final link
		// even with O_NOFOLLOW (inside cur), so what was opened may be
		// another file, a FIFO or a device.
		return nil
	}
	var id fileID
	st, _ := ofi.Sys().(*syscall.Stat_t)
	if st != nil && st.Nlink > 1 {
		id = fileID{uint64(st.Dev), st.Ino}
		if first, ok := a.links[id]; ok {
			a.res.Files++
			return a.header(&tar.Header{Typeflag: tar.TypeLink, Name: rel, Linkname: first, Mode: int64(ofi.Mode().Perm()), ModTime: ofi.ModTime()})
		}
	}
	size := ofi.Size()
	if err := a.header(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: size, Mode: int64(ofi.Mode().Perm()), ModTime: ofi.ModTime()}); err != nil {
		return err
	}
	if err := a.copy(f, size, rel); err != nil {
		return err
	}
	a.res.Files++
	a.res.Bytes += size
	if st != nil && st.Nlink > 1 {
		a.links[id] = rel
	}
	return nil
}

// copy writes exactly size bytes of f: the header is written, so the
// stream stays valid only with that many.
func (a *archiver) copy(f *os.File, size int64, rel string) error {
	left := size
	for left > 0 {
		b := a.buf[:min(int64(len(a.buf)), left)]
		m, rerr := f.Read(b)
		if rerr != nil && rerr != io.EOF {
			return a.fsError(rel, rerr)
		}
		if m == 0 && rerr == io.EOF {
			clear(b) // shrank: pad
			m = len(b)
		}
		if _, err := a.tw.Write(b[:m]); err != nil {
			return fmt.Errorf("writing the archive: %w", err)
		}
		left -= int64(m)
	}
	return nil
}
