// Package file executes file.read, file.write and file.edit actions (the
// str_replace_editor verbs: view, create, str_replace, insert, undo_edit)
// on a sandbox's files.
//
// Every operation goes through the sandbox's backends.FS: an os.Root over
// what the sandbox may see, so no path, "..", or symlink the sandbox
// planted (or swaps in meanwhile) makes the daemon touch anything outside.
// Writes are atomic (a temporary file renamed into place), keep the file's
// mode, and give new files to the sandbox's user.
package file

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
)

// Config bounds what the file actions read and keep.
type Config struct {
	// MaxReadBytes caps a file.read's content.
	MaxReadBytes int
	// MaxOutputChars caps what file.edit answers (first and last half).
	MaxOutputChars int
	// MaxEditBytes is the largest file the editor loads to change it.
	MaxEditBytes int64
	// HistoryDepth is how many edits of one file undo_edit can revert, and
	// HistoryBytes bounds the memory all of a sandbox's history may take.
	HistoryDepth int
	HistoryBytes int64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxReadBytes:   256 << 10,
		MaxOutputChars: 30000,
		MaxEditBytes:   32 << 20,
		HistoryDepth:   10,
		HistoryBytes:   64 << 20,
	}
}

// Executor runs the file actions of one sandbox.
type Executor struct {
	fs  backends.FS
	cfg Config

	// mu serializes changes, so two edits of one file never interleave
	// their read-modify-write.
	mu       sync.Mutex
	history  map[string][]version // by root-relative path, oldest first
	histSize int64
}

// version is a file as it was before an edit.
type version struct {
	content []byte
	mode    fs.FileMode
	existed bool // false: the edit created the file; undo removes it
}

// New returns the file executor of a sandbox.
func New(fsys backends.FS, cfg Config) *Executor {
	return &Executor{fs: fsys, cfg: cfg, history: map[string][]version{}}
}

// Close implements executors.Executor.
func (e *Executor) Close(context.Context) error { return nil }

// Execute implements executors.Executor.
func (e *Executor) Execute(ctx context.Context, a *api.Action, _ executors.OutputSink) (api.Observation, error) {
	if a.Path == "" {
		return api.Observation{}, api.Errorf(api.ErrInvalidArgument, "field \"path\" is required")
	}
	root, rel, err := e.rootFor(a.Path)
	if err != nil {
		return api.Observation{}, err
	}
	defer root.Close()
	switch a.Kind {
	case api.KindFileRead:
		return e.read(root, rel, a)
	case api.KindFileWrite:
		return e.write(root, rel, a)
	case api.KindFileEdit:
		return e.edit(root, rel, a)
	}
	return api.Observation{}, api.Errorf(api.ErrUnsupported, "the file executor does not run %q actions", a.Kind)
}

// rootFor maps p to a root-relative path and opens the sandbox's root. The
// caller closes the root.
func (e *Executor) rootFor(p string) (*os.Root, string, error) {
	rel, err := e.fs.Rel(p)
	if err != nil {
		return nil, "", err
	}
	root, err := e.fs.Root()
	if err != nil {
		return nil, "", fmt.Errorf("open the sandbox's files: %w", err)
	}
	return root, rel, nil
}

// open opens a regular file for reading. O_NONBLOCK keeps a FIFO the
// sandbox planted from blocking the daemon; it is refused after the stat.
func (e *Executor) open(root *os.Root, rel, name string) (*os.File, fs.FileInfo, error) {
	// Look before opening: opening some devices acts (a watchdog, a tape),
	// and a socket cannot be opened at all.
	if st, err := root.Stat(rel); err != nil {
		return nil, nil, backends.FSError(name, err)
	} else if !st.Mode().IsRegular() && !st.IsDir() {
		return nil, nil, api.Errorf(api.ErrInvalidArgument, "%s is not a regular file (%s)", name, kindOf(st.Mode()))
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, backends.FSError(name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, backends.FSError(name, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, nil, api.Errorf(api.ErrInvalidArgument, "%s is a directory (file.edit with command view lists it)", name)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, api.Errorf(api.ErrInvalidArgument, "%s is not a regular file (%s)", name, kindOf(st.Mode()))
	}
	return f, st, nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return m.Type().String()
}

// sniffSize is how much of a file decides whether it is text.
const sniffSize = 8 << 10

// maxScan bounds how far file.read reads looking for start_line.
const maxScan = 1 << 30

// binary reports whether the start of a file looks like anything but text:
// a NUL byte, or bytes that are not UTF-8 (a character cut at the end of
// the sample does not count).
func binary(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	whole, _ := executors.SplitUTF8(head)
	return !utf8.Valid(whole)
}

func (e *Executor) read(root *os.Root, rel string, a *api.Action) (api.Observation, error) {
	name := e.fs.Path(rel)
	start, end := a.StartLine, a.EndLine
	if start == 0 {
		start = 1
	}
	if end == 0 {
		end = -1
	}
	if start < 1 || (end != -1 && end < start) {
		return api.Observation{}, api.Errorf(api.ErrInvalidArgument, "lines %d to %d are not a range: start_line counts from 1, end_line is -1 (the end) or at least start_line", start, end)
	}
	f, st, err := e.open(root, rel, name)
	if err != nil {
		return api.Observation{}, err
	}
	defer f.Close()
	obs := api.Observation{Kind: a.Kind, Path: name}
	head := make([]byte, sniffSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return api.Observation{}, backends.FSError(name, err)
	}
	head = head[:n]
	if binary(head) {
		obs.Note = fmt.Sprintf("%s is a binary file (%s, %s); its content is not shown: download it with GET /v1/sandboxes/{id}/files?path=...", name, humanSize(st.Size()), http.DetectContentType(head))
		return obs, nil
	}
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(head), f), 64<<10)
	var out bytes.Buffer
	line, truncated := 0, false
	var scanned int64
	for {
		piece, err := br.ReadSlice('\n')
		scanned += int64(len(piece))
		if cur := line + 1; len(piece) > 0 && cur >= start && (end == -1 || cur <= end) {
			if room := e.cfg.MaxReadBytes - out.Len(); len(piece) > room {
				// Cut on a character boundary.
				whole, _ := executors.SplitUTF8(piece[:room])
				out.Write(whole)
				truncated = true
				break
			}
			out.Write(piece)
		}
		if err == nil {
			line++
			if end != -1 && line >= end {
				break
			}
		} else if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: its next piece follows.
		} else if errors.Is(err, io.EOF) {
			if len(piece) > 0 {
				line++
			}
			break
		} else {
			return api.Observation{}, backends.FSError(name, err)
		}
		if out.Len() == 0 && scanned > maxScan {
			return api.Observation{}, api.Errorf(api.ErrTooLarge, "%s: line %d is more than %s into the file; download it with GET /v1/sandboxes/{id}/files?path=... instead", name, start, humanSize(maxScan))
		}
	}
	if out.Len() == 0 && start > 1 && line < start {
		return api.Observation{}, api.Errorf(api.ErrInvalidArgument, "start_line %d is past the end of %s (%d lines)", start, name, line)
	}
	obs.Content, obs.Truncated = out.String(), truncated
	if truncated {
		obs.Note = fmt.Sprintf("the content was cut at %d bytes; read further with start_line", e.cfg.MaxReadBytes)
	}
	return obs, nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseMode reads an octal permission mode ("0644", "644", "0o755").
func parseMode(s string) (fs.FileMode, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil || v > 0o777 {
		return 0, api.Errorf(api.ErrInvalidArgument, "field \"mode\" must be octal permission bits such as \"0644\", not %q", s)
	}
	return fs.FileMode(v), nil
}

func (e *Executor) write(root *os.Root, rel string, a *api.Action) (api.Observation, error) {
	name := e.fs.Path(rel)
	mode := keepMode
	if a.Mode != "" {
		m, err := parseMode(a.Mode)
		if err != nil {
			return api.Observation{}, err
		}
		mode = m
	}
	content := []byte(derefOr(a.Content, ""))
	e.mu.Lock()
	defer e.mu.Unlock()
	target, err := resolve(root, rel)
	if err != nil {
		return api.Observation{}, backends.FSError(name, err)
	}
	if err := e.remember(root, target, name); err != nil {
		return api.Observation{}, err
	}
	if err := e.replace(root, target, content, mode); err != nil {
		e.forgetLast(target)
		return api.Observation{}, backends.FSError(name, err)
	}
	return api.Observation{Kind: a.Kind, Path: name, Bytes: int64(len(content))}, nil
}

func derefOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// resolve walks rel the way the kernel would, inside the root: each symlink
// met (in any component) is replaced by its target, and ".." applies to
// the path resolved so far. It returns a path without symlinks for the
// part that exists (what is missing is kept as named, to be created), so
// that a write goes to the file a read of the same path shows, and an
// atomic rename replaces that file rather than a link to it. A target that
// is absolute or climbs out of the root is an escape; the root refuses
// such paths again whenever they are used.
func resolve(root *os.Root, rel string) (string, error) {
	escape := func() (string, error) { return "", fmt.Errorf("openat %s: %w", rel, syscall.EXDEV) }
	var done []string // resolved components, all real directories (or missing)
	todo := strings.Split(rel, "/")
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return escape()
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(done, c)...)
		st, err := root.Lstat(cur)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			// A real entry, or a missing one (created later): keep it.
			done = append(done, c)
			continue
		}
		if hops++; hops > 40 {
			return "", syscall.ELOOP
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			return escape()
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// mkdirs creates the parents of rel, owned by the sandbox's user.
func (e *Executor) mkdirs(root *os.Root, rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	uid, gid := e.fs.Owner()
	var cur string
	for _, part := range strings.Split(dir, "/") {
		cur = path.Join(cur, part)
		err := root.Mkdir(cur, 0o755)
		if err == nil {
			if uid >= 0 {
				// Lchown: if the sandbox swapped a link in meanwhile,
				// the link is what changes owner, never its target.
				if err := root.Lchown(cur, uid, gid); err != nil {
					return err
				}
			}
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// keepMode asks replace to keep the existing file's mode (0644 for a new
// one); any other value is applied as it is, 0 included.
const keepMode fs.FileMode = 1 << 31

// replace writes content to rel atomically: a temporary file next to it,
// renamed over it.
func (e *Executor) replace(root *os.Root, rel string, content []byte, mode fs.FileMode) error {
	if mode == keepMode {
		mode = 0o644
		if st, err := root.Lstat(rel); err == nil && st.Mode().IsRegular() {
			mode = st.Mode().Perm()
		}
	}
	if err := e.mkdirs(root, rel); err != nil {
		return err
	}
	tmp, err := e.temp(root, rel, content, mode)
	if err != nil {
		return err
	}
	// Caches that trust a file's size and whole-second mtime (Python's
	// __pycache__, for one) would take a same-size edit within the second
	// for the old file: the agent's fix would not run. Move the mtime to
	// the next second then.
	if st, err := root.Lstat(rel); err == nil && st.Mode().IsRegular() && st.Size() == int64(len(content)) {
		if old := st.ModTime().Unix(); time.Now().Unix() <= old {
			next := time.Unix(old+1, 0)
			_ = root.Chtimes(tmp, next, next)
		}
	}
	if err := root.Rename(tmp, rel); err != nil {
		root.Remove(tmp)
		return err
	}
	return nil
}

// temp writes content to a new temporary file beside rel and returns its
// name.
func (e *Executor) temp(root *os.Root, rel string, content []byte, mode fs.FileMode) (string, error) {
	tmp, f, err := e.tempFile(root, rel, mode)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(content)
	if err := errors.Join(werr, f.Close()); err != nil {
		root.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// tempFile creates a new, empty temporary file beside rel, owned by the
// sandbox's user with mode, and returns its name and the open file. The
// file is only ever used through this descriptor: O_EXCL refuses a name
// that exists (a link planted in advance), and reopening by name would
// follow a link swapped in meanwhile (os.Root ignores O_NOFOLLOW on the
// last component).
func (e *Executor) tempFile(root *os.Root, rel string, mode fs.FileMode) (string, *os.File, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+".sandboxd-"+hex.EncodeToString(b))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", nil, err
	}
	var oerr error
	if uid, gid := e.fs.Owner(); uid >= 0 {
		oerr = f.Chown(uid, gid)
	}
	merr := f.Chmod(mode) // the umask may have narrowed it
	if err := errors.Join(oerr, merr); err != nil {
		f.Close()
		root.Remove(tmp)
		return "", nil, err
	}
	return tmp, f, nil
}

// remember saves rel as it is now for undo_edit; e.mu is held.
func (e *Executor) remember(root *os.Root, rel, name string) error {
	st, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.push(rel, version{existed: false})
	case err != nil:
		return backends.FSError(name, err)
	case !st.Mode().IsRegular():
		return api.Errorf(api.ErrInvalidArgument, "%s is not a regular file (%s)", name, kindOf(st.Mode()))
	case st.Size() > e.cfg.MaxEditBytes:
		// Too big to keep a copy of: undo cannot go back past this edit,
		// so older versions must not be offered as the previous one.
		e.forgetAll(rel)
	default:
		content, err := root.ReadFile(rel)
		if err != nil {
			return backends.FSError(name, err)
		}
		e.push(rel, version{content: content, mode: st.Mode().Perm(), existed: true})
	}
	return nil
}

// versionCost is what a version counts against HistoryBytes: its content
// and a little for the entry itself, so empty versions are not free.
func versionCost(v version) int64 { return int64(len(v.content)) + 64 }

// push adds a version to rel's history within HistoryDepth and
// HistoryBytes; e.mu is held.
func (e *Executor) push(rel string, v version) {
	h := append(e.history[rel], v)
	e.histSize += versionCost(v)
	for len(h) > e.cfg.HistoryDepth {
		e.histSize -= versionCost(h[0])
		h = h[1:]
	}
	e.history[rel] = h
	e.trimHistory()
}

// trimHistory drops the oldest versions of the largest histories until the
// sandbox's history fits its budget.
func (e *Executor) trimHistory() {
	for e.histSize > e.cfg.HistoryBytes {
		var big string
		for p, h := range e.history {
			if len(h) > 0 && (big == "" || len(h) > len(e.history[big])) {
				big = p
			}
		}
		if big == "" {
			return
		}
		h := e.history[big]
		e.histSize -= versionCost(h[0])
		if len(h) == 1 {
			delete(e.history, big)
		} else {
			e.history[big] = h[1:]
		}
	}
}

// forgetLast drops the version remembered for an edit that then failed.
func (e *Executor) forgetLast(rel string) {
	h := e.history[rel]
	if len(h) == 0 {
		return
	}
	e.histSize -= versionCost(h[len(h)-1])
	if len(h) == 1 {
		delete(e.history, rel)
	} else {
		e.history[rel] = h[:len(h)-1]
	}
}

func (e *Executor) edit(root *os.Root, rel string, a *api.Action) (api.Observation, error) {
	name := e.fs.Path(rel)
	obs := api.Observation{Kind: a.Kind, Path: name}
	var out string
	var err error
	switch a.Command {
	case "view":
		out, err = e.view(root, rel, name, a.ViewRange)
	case "create", "str_replace", "insert", "undo_edit":
		e.mu.Lock()
		defer e.mu.Unlock()
		var target string
		if target, err = resolve(root, rel); err != nil {
			return api.Observation{}, backends.FSError(name, err)
		}
		switch a.Command {
		case "create":
			out, err = e.create(root, target, name, a)
		case "str_replace":
			out, err = e.strReplace(root, target, name, a)
		case "insert":
			out, err = e.insert(root, target, name, a)
		case "undo_edit":
			out, err = e.undo(root, target, name)
		}
	default:
		return api.Observation{}, api.Errorf(api.ErrInvalidArgument, "field \"command\" must be view, create, str_replace, insert or undo_edit, not %q", a.Command)
	}
	if err != nil {
		return api.Observation{}, err
	}
	c := executors.Capture{Limit: e.cfg.MaxOutputChars / 2, Runes: true, Hint: "view a part of the file with view_range"}
	c.Write([]byte(out))
	obs.Output = c.String()
	return obs, nil
}

// load reads a text file the editor may change.
func (e *Executor) load(root *os.Root, rel, name string) ([]byte, fs.FileMode, error) {
	f, st, err := e.open(root, rel, name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if st.Size() > e.cfg.MaxEditBytes {
		return nil, 0, api.Errorf(api.ErrTooLarge, "%s is %s, more than the editor loads (%s)", name, humanSize(st.Size()), humanSize(e.cfg.MaxEditBytes))
	}
	// Read what fstat says is there in one allocation (a file that grew
	// meanwhile is read to its end all the same).
	content := make([]byte, 0, st.Size()+1)
	for {
		if len(content) == cap(content) {
			content = slices.Grow(content, 4096)
		}
		n, err := f.Read(content[len(content):cap(content)])
		content = content[:len(content)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, backends.FSError(name, err)
		}
		if int64(len(content)) > e.cfg.MaxEditBytes {
			return nil, 0, api.Errorf(api.ErrTooLarge, "%s is more than the editor loads (%s)", name, humanSize(e.cfg.MaxEditBytes))
		}
	}
	if bytes.IndexByte(content[:min(len(content), sniffSize)], 0) >= 0 {
		return nil, 0, api.Errorf(api.ErrInvalidArgument, "%s is a binary file; the editor changes text files only", name)
	}
	return content, st.Mode().Perm(), nil
}

// lines splits content into lines that keep their terminators; the last
// may have none.
func lines(content []byte) [][]byte {
	var out [][]byte
	for len(content) > 0 {
		i := bytes.IndexByte(content, '\n')
		if i < 0 {
			out = append(out, content)
			break
		}
		out = append(out, content[:i+1])
		content = content[i+1:]
	}
	return out
}

// eol is the line ending content uses: CRLF when its first line ends so.
func eol(content []byte) string {
	if i := bytes.IndexByte(content, '\n'); i > 0 && content[i-1] == '\r' {
		return "\r\n"
	}
	return "\n"
}

// numbered renders lines first..last (1-based, inclusive) cat -n style.
func numbered(ls [][]byte, first, last int) string {
	var b strings.Builder
	for i := first; i <= last && i <= len(ls); i++ {
		l := bytes.TrimSuffix(bytes.TrimSuffix(ls[i-1], []byte("\n")), []byte("\r"))
		fmt.Fprintf(&b, "%6d\t%s\n", i, l)
	}
	return b.String()
}

func (e *Executor) view(root *os.Root, rel, name string, vr []int) (string, error) {
	st, err := root.Stat(rel)
	if err != nil {
		return "", backends.FSError(name, err)
	}
	if st.IsDir() {
		if len(vr) > 0 {
			return "", api.Errorf(api.ErrInvalidArgument, "view_range applies to files, and %s is a directory", name)
		}
		return e.listing(root, rel, name)
	}
	content, _, err := e.load(root, rel, name)
	if err != nil {
		return "", err
	}
	ls := lines(content)
	first, last := 1, len(ls)
	if len(vr) > 0 {
		if len(vr) != 2 {
			return "", api.Errorf(api.ErrInvalidArgument, "view_range is [start, end], not %v", vr)
		}
		first, last = vr[0], vr[1]
		if last == -1 {
			last = len(ls)
		}
		if first < 1 || first > max(len(ls), 1) || last < first || last > len(ls) {
			return "", api.Errorf(api.ErrInvalidArgument, "view_range %v is outside %s's %d lines: start counts from 1, end is -1 or at least start and at most %d", vr, name, len(ls), len(ls))
		}
	}
	return fmt.Sprintf("Here's the result of running `cat -n` on %s:\n%s", name, numbered(ls, first, last)), nil
}

// listing shows a directory two levels deep, hidden entries left out;
// symlinks are listed, never followed.
func (e *Executor) listing(root *os.Root, rel, name string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Here's the files and directories up to 2 levels deep in %s, excluding hidden items:\n%s/\n", name, strings.TrimSuffix(name, "/"))
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		d, err := root.Open(dir)
		if err != nil {
			return err
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		slices.SortFunc(ents, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), ".") {
				continue
			}
			p := path.Join(dir, ent.Name())
			if ent.IsDir() {
				fmt.Fprintf(&b, "%s/\n", e.fs.Path(p))
				if depth < 2 {
					if err := walk(p, depth+1); err != nil && !errors.Is(err, fs.ErrPermission) {
						return err
					}
				}
				continue
			}
			fmt.Fprintf(&b, "%s\n", e.fs.Path(p))
		}
		return nil
	}
	if err := walk(rel, 1); err != nil {
		return "", backends.FSError(name, err)
	}
	return b.String(), nil
}

func (e *Executor) create(root *os.Root, rel, name string, a *api.Action) (string, error) {
	if a.FileText == nil {
		return "", api.Errorf(api.ErrInvalidArgument, "create needs field \"file_text\"")
	}
	if _, err := root.Lstat(rel); err == nil {
		return "", api.Errorf(api.ErrInvalidArgument, "%s already exists; create does not overwrite (use str_replace, insert, or file.write)", name)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", backends.FSError(name, err)
	}
	if err := e.mkdirs(root, rel); err != nil {
		return "", backends.FSError(name, err)
	}
	tmp, err := e.temp(root, rel, []byte(*a.FileText), 0o644)
	if err != nil {
		return "", backends.FSError(name, err)
	}
	// A hard link fails if the name exists by now: create stays
	// exclusive even against a sandbox racing it.
	err = root.Link(tmp, rel)
	root.Remove(tmp)
	if errors.Is(err, fs.ErrExist) {
		return "", api.Errorf(api.ErrInvalidArgument, "%s already exists; create does not overwrite", name)
	}
	if err != nil {
		return "", backends.FSError(name, err)
	}
	e.push(rel, version{existed: false})
	return fmt.Sprintf("File created successfully at: %s", name), nil
}

// save remembers the file as it was (old, just loaded), then replaces it.
func (e *Executor) save(root *os.Root, rel, name string, old, content []byte, mode fs.FileMode) error {
	e.push(rel, version{content: old, mode: mode, existed: true})
	if err := e.replace(root, rel, content, mode); err != nil {
		e.forgetLast(rel)
		return backends.FSError(name, err)
	}
	return nil
}

// snippet shows the lines around [from, to] (1-based) of content. It only
// splits the lines it shows: a snippet of a large file stays cheap.
func snippet(content []byte, from, to int) string {
	const context = 4
	first := max(1, from-context)
	// Skip to the start of line first.
	off := 0
	for line := 1; line < first && off < len(content); line++ {
		i := bytes.IndexByte(content[off:], '\n')
		if i < 0 {
			off = len(content)
			break
		}
		off += i + 1
	}
	// Take the lines up to to+context.
	end := off
	for line := first; line <= to+context && end < len(content); line++ {
		i := bytes.IndexByte(content[end:], '\n')
		if i < 0 {
			end = len(content)
			break
		}
		end += i + 1
	}
	ls := lines(content[off:end])
	var b strings.Builder
	for i, l := range ls {
		l = bytes.TrimSuffix(bytes.TrimSuffix(l, []byte("\n")), []byte("\r"))
		fmt.Fprintf(&b, "%6d\t%s\n", first+i, l)
	}
	return b.String()
}

func (e *Executor) strReplace(root *os.Root, rel, name string, a *api.Action) (string, error) {
	if a.OldStr == nil || *a.OldStr == "" {
		return "", api.Errorf(api.ErrInvalidArgument, "str_replace needs a non-empty field \"old_str\"")
	}
	content, mode, err := e.load(root, rel, name)
	if err != nil {
		return "", err
	}
	old, repl := *a.OldStr, derefOr(a.NewStr, "")
	if eol(content) == "\r\n" && !strings.Contains(old, "\r\n") {
		// The file uses CRLF and the caller wrote LF: match and write in
		// the file's own line endings.
		old = strings.ReplaceAll(old, "\n", "\r\n")
		repl = strings.ReplaceAll(repl, "\n", "\r\n")
	}
	// One search finds the occurrence; a second one from after it tells
	// unique from not. Counting them all is only needed for the refusal.
	i := bytes.Index(content, []byte(old))
	if i < 0 {
		return "", api.Errorf(api.ErrInvalidArgument, "no replacement was made: old_str occurs 0 times in %s (it must appear verbatim, whitespace included)", name)
	}
	if bytes.Contains(content[i+len(old):], []byte(old)) {
		n := bytes.Count(content, []byte(old))
		var at []string
		for k, off := 0, 0; k < n; k++ {
			j := bytes.Index(content[off:], []byte(old))
			at = append(at, strconv.Itoa(bytes.Count(content[:off+j], []byte("\n"))+1))
			off += j + len(old)
		}
		return "", api.Errorf(api.ErrInvalidArgument, "no replacement was made: old_str occurs %d times in %s (at lines %s); include more context to make it unique", n, name, strings.Join(at, ", "))
	}
	updated := make([]byte, 0, len(content)-len(old)+len(repl))
	updated = append(append(append(updated, content[:i]...), repl...), content[i+len(old):]...)
	if err := e.save(root, rel, name, content, updated, mode); err != nil {
		return "", err
	}
	from := bytes.Count(content[:i], []byte("\n")) + 1
	to := from + strings.Count(repl, "\n")
	return fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of %s:\n%sReview the changes and make sure they are as expected. Edit the file again if necessary.", name, name, snippet(updated, from, to)), nil
}

func (e *Executor) insert(root *os.Root, rel, name string, a *api.Action) (string, error) {
	if a.InsertLine == nil {
		return "", api.Errorf(api.ErrInvalidArgument, "insert needs field \"insert_line\" (0 inserts at the top)")
	}
	if a.NewStr == nil {
		return "", api.Errorf(api.ErrInvalidArgument, "insert needs field \"new_str\"")
	}
	content, mode, err := e.load(root, rel, name)
	if err != nil {
		return "", err
	}
	ls := lines(content)
	at := *a.InsertLine
	if at < 0 || at > len(ls) {
		return "", api.Errorf(api.ErrInvalidArgument, "insert_line %d is outside %s: it must be from 0 (the top) to %d (after the last line)", at, name, len(ls))
	}
	nl := eol(content)
	text := *a.NewStr
	if nl == "\r\n" && !strings.Contains(text, "\r\n") {
		text = strings.ReplaceAll(text, "\n", "\r\n")
	}
	var b bytes.Buffer
	for _, l := range ls[:at] {
		b.Write(l)
	}
	lastNoEOL := at > 0 && at == len(ls) && !bytes.HasSuffix(ls[at-1], []byte("\n"))
	if lastNoEOL {
		// After a last line without a terminator: the inserted text
		// starts on a line of its own, and the file still ends without one.
		b.WriteString(nl)
		b.WriteString(strings.TrimSuffix(text, nl))
	} else {
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString(nl)
		}
	}
	for _, l := range ls[at:] {
		b.Write(l)
	}
	updated := b.Bytes()
	if err := e.save(root, rel, name, content, updated, mode); err != nil {
		return "", err
	}
	added := strings.Count(strings.TrimSuffix(text, "\n"), "\n") + 1
	return fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n%sReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.", name, snippet(updated, at+1, at+added)), nil
}

func (e *Executor) undo(root *os.Root, rel, name string) (string, error) {
	h := e.history[rel]
	if len(h) == 0 {
		return "", api.Errorf(api.ErrInvalidArgument, "no edit of %s to undo (the history holds the last %d edits made through this daemon since it started)", name, e.cfg.HistoryDepth)
	}
	v := h[len(h)-1]
	if !v.existed {
		if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", backends.FSError(name, err)
		}
		e.forgetLast(rel)
		return fmt.Sprintf("Last edit to %s undone successfully: the file it created is removed.", name), nil
	}
	if err := e.replace(root, rel, v.content, v.mode); err != nil {
		return "", backends.FSError(name, err)
	}
	e.forgetLast(rel)
	ls := lines(v.content)
	return fmt.Sprintf("Last edit to %s undone successfully. Here's the result of running `cat -n` on %s:\n%s", name, name, numbered(ls, 1, len(ls))), nil
}
