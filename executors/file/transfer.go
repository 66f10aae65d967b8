package file

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/internal/tarfs"
)

// Transfer is the result of an upload.
type Transfer struct {
	Path  string // the path written, as the sandbox sees it
	Files int
	Bytes int64
}

// Upload writes the bytes of r to the file at p, atomically (a temporary
// file renamed into place once all arrived), creating its parents. More
// than max bytes is api.ErrTooLarge, and nothing is written.
func (e *Executor) Upload(p string, r io.Reader, max int64) (Transfer, error) {
	root, rel, err := e.rootFor(p)
	if err != nil {
		return Transfer{}, err
	}
	defer root.Close()
	name := e.fs.Path(rel)
	target, err := resolve(root, rel)
	if err != nil {
		return Transfer{}, backends.FSError(name, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := root.Lstat(target); err == nil {
		if !st.IsDir() && !st.Mode().IsRegular() {
			return Transfer{}, api.Errorf(api.ErrInvalidArgument, "%s is not a regular file (%s)", name, kindOf(st.Mode()))
		}
		if st.IsDir() {
			return Transfer{}, api.Errorf(api.ErrInvalidArgument, "%s is a directory: upload a tar (Content-Type: application/x-tar) to fill it", name)
		}
		if st.Mode().IsRegular() {
			mode = st.Mode().Perm()
		}
	}
	if err := e.mkdirs(root, target); err != nil {
		return Transfer{}, backends.FSError(name, err)
	}
	tmp, f, err := e.tempFile(root, target, mode)
	if err != nil {
		return Transfer{}, backends.FSError(name, err)
	}
	// The network is read without the executor's lock: a slow upload must
	// not hold up the sandbox's other file actions. Only the rename is an
	// edit.
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(onlyWriter{f}, io.LimitReader(r, max+1), *buf)
	copyBufs.Put(buf)
	cerr := f.Close()
	if err == nil && n > max {
		err = api.Errorf(api.ErrTooLarge, "the upload is larger than %d bytes", max)
	}
	if err == nil {
		err = cerr
	}
	if err == nil {
		e.mu.Lock()
		err = root.Rename(tmp, target)
		if err == nil {
			// The file changed outside the editor: its edit history no
			// longer describes it.
			e.forgetAll(target)
		}
		e.mu.Unlock()
	}
	if err != nil {
		root.Remove(tmp)
		return Transfer{}, backends.FSError(name, err)
	}
	return Transfer{Path: e.fs.Path(target), Files: 1, Bytes: n}, nil
}

func (e *Executor) forgetAll(rel string) {
	for _, v := range e.history[rel] {
		e.histSize -= versionCost(v)
	}
	delete(e.history, rel)
}

// copyBufs are the buffers uploads copy through: large, so a gigabyte is
// not thousands of small reads and writes.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// onlyWriter hides *os.File's ReadFrom, which would copy through a small
// buffer of its own instead of ours.
type onlyWriter struct{ io.Writer }

// ExtractTar extracts a tar stream into the directory at p, all or
// nothing (see tarfs.Extract).
func (e *Executor) ExtractTar(p string, r io.Reader, lim tarfs.Limits) (Transfer, error) {
	root, rel, err := e.rootFor(p)
	if err != nil {
		return Transfer{}, err
	}
	defer root.Close()
	uid, gid := e.fs.Owner()
	// Extraction is staged and moved into place at the end; like an
	// upload it does not hold the executor's lock while it reads.
	res, err := tarfs.Extract(root, rel, r, lim, uid, gid)
	if err != nil {
		return Transfer{}, backends.FSError(e.fs.Path(rel), err)
	}
	// Files the archive replaced have a history that no longer fits.
	e.mu.Lock()
	clear(e.history)
	e.histSize = 0
	e.mu.Unlock()
	return Transfer{Path: e.fs.Path(rel), Files: res.Files, Bytes: res.Bytes}, nil
}

// Download is a file or a directory (as a tar stream) ready to be sent.
type Download struct {
	// Path is the path as the sandbox sees it.
	Path string
	// Dir is set for a directory, sent as a tar stream; otherwise Size is
	// the file's size.
	Dir  bool
	Size int64

	root    *os.Root
	rel     string
	f       *os.File
	onClose func()
}

// OnClose makes Close call f once.
func (d *Download) OnClose(f func()) { d.onClose = f }

// Open prepares the download of p: a regular file, or a directory. The
// caller must call WriteTo or Close.
func (e *Executor) Open(p string) (*Download, error) {
	root, rel, err := e.rootFor(p)
	if err != nil {
		return nil, err
	}
	name := e.fs.Path(rel)
	// Follow links inside the sandbox, as a read does, so a link to a
	// directory downloads the directory (Archive itself never follows).
	if rel, err = resolve(root, rel); err != nil {
		root.Close()
		return nil, backends.FSError(name, err)
	}
	st, err := root.Stat(rel)
	if err != nil {
		root.Close()
		return nil, backends.FSError(name, err)
	}
	if st.IsDir() {
		return &Download{Path: name, Dir: true, root: root, rel: rel}, nil
	}
	f, st, err := e.open(root, rel, name)
	if err != nil {
		root.Close()
		return nil, err
	}
	return &Download{Path: name, Size: st.Size(), root: root, f: f}, nil
}

// WriteTo sends the download to w and closes it. A file is sent as exactly
// Size bytes (a file that shrank meanwhile ends the stream short, which the
// receiver sees as an error).
func (d *Download) WriteTo(w io.Writer) (int64, error) {
	defer d.Close()
	if d.Dir {
		res, err := tarfs.Archive(d.root, d.rel, w)
		return res.Bytes, err
	}
	// Hand the file itself to the writer's ReadFrom, so a socket can use
	// sendfile: io.Copy would prefer *os.File's WriteTo, which only knows
	// bare sockets and falls back to a copy. A file that grew meanwhile is
	// sent as it is then, which the receiver sees as more than
	// Content-Length and refuses.
	var n int64
	var err error
	if rf, ok := w.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(d.f)
	} else {
		n, err = io.Copy(w, d.f)
	}
	if err == nil && n != d.Size {
		err = fmt.Errorf("the file changed size while it was sent (%d bytes, not %d)", n, d.Size)
	}
	return n, err
}

// Close releases the download.
func (d *Download) Close() error {
	if d.onClose != nil {
		d.onClose()
		d.onClose = nil
	}
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	if d.root != nil {
		d.root.Close()
		d.root = nil
	}
	return nil
}

// List returns the names in the directory at p, directories first and
// marked with a trailing slash, each group sorted. Links are listed as
// what they are, not followed.
func (e *Executor) List(p string) ([]string, error) {
	root, rel, err := e.rootFor(p)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	name := e.fs.Path(rel)
	if rel, err = resolve(root, rel); err != nil {
		return nil, backends.FSError(name, err)
	}
	d, err := root.Open(rel)
	if err != nil {
		return nil, backends.FSError(name, err)
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, backends.FSError(name, err)
	}
	var dirs, files []string
	for _, ent := range ents {
		if ent.IsDir() {
			dirs = append(dirs, ent.Name()+"/")
		} else {
			files = append(files, ent.Name())
		}
	}
	slices.Sort(dirs)
	slices.Sort(files)
	return append(dirs, files...), nil
}
