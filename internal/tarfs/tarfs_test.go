package tarfs

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// ent is an entry of a test archive.
type ent struct {
	name string
	typ  byte // tar.TypeReg when zero
	body string
	mode int64 // 0644 (files) or 0755 (directories) when zero
	link string
}

func file(name, body string) ent { return ent{name: name, body: body} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target}
}
func hardlink(name, target string) ent { return ent{name: name, typ: tar.TypeLink, link: target} }

// mkTar builds an archive; format forces PAX or GNU when not zero.
func mkTar(t testing.TB, format tar.Format, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Format: format, ModTime: time.Unix(1e9, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeHeader is an archive of one header claiming size bytes and nothing
// after it.
func hugeHeader(t testing.TB, size int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: size, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes() // no Close: the content never comes
}

// env is a test layout: base/root is what the sandbox may see (the
// os.Root), base/root/dest the destination, base/root/sibling a directory
// of the sandbox outside dest, base/outside a directory outside the root.
type env struct {
	base, rootDir, dest, sibling, outside string
	root                                  *os.Root
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{
		base:    base,
		rootDir: filepath.Join(base, "root"),
		dest:    filepath.Join(base, "root", "dest"),
		sibling: filepath.Join(base, "root", "sibling"),
		outside: filepath.Join(base, "outside"),
	}
	for _, d := range []string{e.rootDir, e.dest, e.sibling, e.outside} {
		mustMkdir(t, d, 0o755)
	}
	mustWrite(t, filepath.Join(e.outside, "secret"), "outside", 0o600)
	mustWrite(t, filepath.Join(e.sibling, "mine"), "sibling", 0o644)
	r, err := os.OpenRoot(e.rootDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	e.root = r
	return e
}

// populate gives dest some content to be kept intact.
func (e *env) populate(t *testing.T) {
	mustWrite(t, filepath.Join(e.dest, "keep.txt"), "keep", 0o644)
	mustMkdir(t, filepath.Join(e.dest, "sub"), 0o750)
	mustWrite(t, filepath.Join(e.dest, "sub", "inner.txt"), "inner", 0o600)
	if err := os.Symlink("keep.txt", filepath.Join(e.dest, "oldlink")); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t testing.TB, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t testing.TB, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshot describes every entry under dir (dir itself included): type,
// permission bits, content hash, link target. Not times: creating and
// removing the staging directory touches dest's.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch fi.Mode().Type() {
		case 0:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			m[rel] = fmt.Sprintf("file %o %d %s", fi.Mode().Perm(), len(b), hex.EncodeToString(sum[:8]))
		case fs.ModeDir:
			m[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		case fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "link -> " + target
		default:
			m[rel] = fmt.Sprintf("other %v", fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diffSnapshots(before, after map[string]string) string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, fmt.Sprintf("- %s: %s", k, v))
		} else if v != w {
			d = append(d, fmt.Sprintf("~ %s: %s -> %s", k, v, w))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			d = append(d, fmt.Sprintf("+ %s: %s", k, v))
		}
	}
	slices.Sort(d)
	return strings.Join(d, "\n")
}

func assertSame(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if d := diffSnapshots(before, after); d != "" {
		t.Errorf("%s changed:\n%s", what, d)
	}
}

// assertNoStaging fails if a staging directory is left anywhere under dir.
func assertNoStaging(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), stagingPrefix) {
			t.Errorf("staging directory left: %s", p)
		}
		return nil
	})
}

var noLimits = Limits{MaxBytes: -1, MaxEntries: -1}

func extractBytes(root *os.Root, dir string, data []byte, lim Limits) (Result, error) {
	return Extract(root, dir, bytes.NewReader(data), lim, -1, -1)
}

func TestRoundTrip(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.rootDir, "src")
	mustMkdir(t, filepath.Join(src, "a", "b", "c"), 0o755)
	mustMkdir(t, filepath.Join(src, "empty"), 0o700)
	mustMkdir(t, filepath.Join(src, "restricted"), 0o750)
	mustWrite(t, filepath.Join(src, "a", "b", "c", "deep.txt"), "deep", 0o644)
	mustWrite(t, filepath.Join(src, "exec.sh"), "#!/bin/sh\necho hi\n", 0o755)
	mustWrite(t, filepath.Join(src, "private"), "private", 0o600)
	mustWrite(t, filepath.Join(src, "readonly"), "ro", 0o444)
	mustWrite(t, filepath.Join(src, "restricted", "grp"), "grp", 0o640)
	mustWrite(t, filepath.Join(src, "emptyfile"), "", 0o644)
	if err := os.Symlink("b/c/deep.txt", filepath.Join(src, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../exec.sh", filepath.Join(src, "a", "b", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "exec.sh"), filepath.Join(src, "a", "hard")); err != nil {
		t.Fatal(err)
	}
	longDir := strings.Repeat("long-directory-name-", 5)
	longName := filepath.Join(longDir, strings.Repeat("f", 150)+".txt")
	mustMkdir(t, filepath.Join(src, longDir), 0o755)
	mustWrite(t, filepath.Join(src, longName), "long", 0o644)
	big := make([]byte, 5<<20)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(big)
	mustWrite(t, filepath.Join(src, "big.bin"), string(big), 0o644)
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "private"), mtime, mtime); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	ares, err := Archive(e.root, "src", &buf)
	if err != nil {
		t.Fatalf("Archive: %v", err)
	}
	// exec.sh and a/hard, deep, private, readonly, grp, emptyfile, long, big
	if ares.Files != 9 {
		t.Errorf("Archive counted %d files, want 9", ares.Files)
	}
	wantBytes := int64(len("#!/bin/sh\necho hi\n") + len("deep") + len("private") + len("ro") + len("grp") + len("long") + len(big))
	if ares.Bytes != wantBytes {
		t.Errorf("Archive counted %d bytes, want %d", ares.Bytes, wantBytes)
	}
	types := map[string]byte{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types[h.Name] = h.Typeflag
	}
	if types["empty/"] != tar.TypeDir || types["a/link"] != tar.TypeSymlink || types[longName] != tar.TypeReg {
		t.Errorf("unexpected entry types: %v", types)
	}
	if types["a/hard"] != tar.TypeLink && types["exec.sh"] != tar.TypeLink {
		t.Errorf("the hard link was not archived as one: %v", types)
	}

	xres, err := Extract(e.root, "dst", bytes.NewReader(buf.Bytes()), Limits{MaxBytes: 6 << 20, MaxEntries: 100}, -1, -1)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if xres != ares {
		t.Errorf("Extract counted %+v, Archive %+v", xres, ares)
	}
	dst := filepath.Join(e.rootDir, "dst")
	assertSame(t, "the tree after a round trip", snapshot(t, src), snapshot(t, dst))
	assertNoStaging(t, dst)
	fa, err1 := os.Stat(filepath.Join(dst, "exec.sh"))
	fb, err2 := os.Stat(filepath.Join(dst, "a", "hard"))
	if err1 != nil || err2 != nil || !os.SameFile(fa, fb) {
		t.Errorf("exec.sh and a/hard are not one file after the round trip (%v, %v)", err1, err2)
	}
	if fi, err := os.Stat(filepath.Join(dst, "private")); err != nil || !fi.ModTime().Equal(mtime) {
		t.Errorf("mtime of private not kept: %v, %v", fi.ModTime(), err)
	}
}

func TestExtractHostile(t *testing.T) {
	many := make([]ent, 2000)
	for i := range many {
		many[i] = file(fmt.Sprintf("f%04d", i), "")
	}
	var good []ent
	for i := range 10 {
		good = append(good, file(fmt.Sprintf("good%d", i), "fine"), dir(fmt.Sprintf("gooddir%d/", i)))
	}
	truncated := mkTar(t, 0, file("a", strings.Repeat("x", 3000)))
	tests := []struct {
		name  string
		data  []byte
		lim   Limits
		class error
	}{
		{"absolute name", mkTar(t, 0, file("/etc/x", "pwned")), noLimits, api.ErrPermissionDenied},
		{"dotdot", mkTar(t, 0, file("../x", "pwned")), noLimits, api.ErrPermissionDenied},
		{"dotdot after a name", mkTar(t, 0, file("a/../../x", "pwned")), noLimits, api.ErrPermissionDenied},
		{"dotdot deep", mkTar(t, 0, file("a/b/../../../x", "pwned")), noLimits, api.ErrPermissionDenied},
		{"dotdot staying inside", mkTar(t, 0, file("a/../b", "x")), noLimits, api.ErrPermissionDenied},
		{"dotdot dir", mkTar(t, 0, dir("../sibling/")), noLimits, api.ErrPermissionDenied},
		{"symlink to /etc", mkTar(t, 0, symlink("etc", "/etc")), noLimits, api.ErrPermissionDenied},
		{"symlink out of dir", mkTar(t, 0, symlink("x", "../../outside")), noLimits, api.ErrPermissionDenied},
		{"symlink to sibling", mkTar(t, 0, symlink("x", "../sibling")), noLimits, api.ErrPermissionDenied},
		{"nested symlink out", mkTar(t, 0, dir("sub2/"), symlink("sub2/x", "../../sibling")), noLimits, api.ErrPermissionDenied},
		{"chained symlinks", mkTar(t, 0, symlink("l1", "d/l2"), symlink("d/l2", "../../sibling")), noLimits, api.ErrPermissionDenied},
		{"chained symlinks, each inside lexically",
			mkTar(t, 0, symlink("deep/a/b/s", "../../.."), symlink("t", "deep/a/b/s/../../../../sibling")),
			noLimits, api.ErrPermissionDenied},
		{"file through a symlink of the archive", mkTar(t, 0, dir("real/"), symlink("l", "real"), file("l/f", "x")), noLimits, api.ErrPermissionDenied},
		{"file through a symlink to .", mkTar(t, 0, symlink("l", "."), file("l/f", "x")), noLimits, api.ErrPermissionDenied},
		{"dir through a symlink of the archive", mkTar(t, 0, symlink("l", "."), dir("l/d/")), noLimits, api.ErrPermissionDenied},
		{"hard link to /etc/passwd", mkTar(t, 0, hardlink("p", "/etc/passwd")), noLimits, api.ErrPermissionDenied},
		{"hard link out", mkTar(t, 0, hardlink("p", "../outside/secret")), noLimits, api.ErrPermissionDenied},
		{"hard link to sibling", mkTar(t, 0, hardlink("p", "../sibling/mine")), noLimits, api.ErrPermissionDenied},
		{"hard link to a name not in the archive", mkTar(t, 0, hardlink("p", "keep.txt")), noLimits, api.ErrPermissionDenied},
		{"hard link to a later file", mkTar(t, 0, hardlink("p", "later"), file("later", "x")), noLimits, api.ErrPermissionDenied},
		{"hard link to a directory", mkTar(t, 0, dir("d/"), hardlink("p", "d")), noLimits, api.ErrPermissionDenied},
		{"hard link to a symlink", mkTar(t, 0, file("f", "x"), symlink("s", "f"), hardlink("p", "s")), noLimits, api.ErrPermissionDenied},
		{"hard link beneath a symlink", mkTar(t, 0, file("d/f", "x"), symlink("s", "d"), hardlink("p", "s/f")), noLimits, api.ErrPermissionDenied},
		{"FIFO", mkTar(t, 0, ent{name: "fifo", typ: tar.TypeFifo}), noLimits, api.ErrInvalidArgument},
		{"char device", mkTar(t, 0, ent{name: "null", typ: tar.TypeChar}), noLimits, api.ErrInvalidArgument},
		{"block device", mkTar(t, 0, ent{name: "sda", typ: tar.TypeBlock}), noLimits, api.ErrInvalidArgument},
		{"bad entry last", mkTar(t, 0, append(slices.Clone(good), file("/etc/x", "pwned"))...), noLimits, api.ErrPermissionDenied},
		{"FIFO last", mkTar(t, 0, append(slices.Clone(good), ent{name: "fifo", typ: tar.TypeFifo})...), noLimits, api.ErrInvalidArgument},
		{"too many entries", mkTar(t, 0, many...), Limits{MaxBytes: -1, MaxEntries: 1000}, api.ErrTooLarge},
		{"zero entries allowed", mkTar(t, 0, dir("d/")), Limits{MaxBytes: -1}, api.ErrTooLarge},
		{"file too large", mkTar(t, 0, file("a", strings.Repeat("x", 2048))), Limits{MaxBytes: 1024, MaxEntries: -1}, api.ErrTooLarge},
		{"files too large together", mkTar(t, 0, file("a", strings.Repeat("x", 400)), file("b", strings.Repeat("x", 400)), file("c", strings.Repeat("x", 400))), Limits{MaxBytes: 1000, MaxEntries: -1}, api.ErrTooLarge},
		{"header claiming 1 TB", hugeHeader(t, 1<<40), Limits{MaxBytes: 1 << 30, MaxEntries: -1}, api.ErrTooLarge},
		{"truncated", truncated[:1500], noLimits, api.ErrInvalidArgument},
		{"garbage", bytes.Repeat([]byte("garbage!"), 128), noLimits, api.ErrInvalidArgument},
		{"file then directory", mkTar(t, 0, file("x", "1"), dir("x/")), noLimits, api.ErrInvalidArgument},
		{"directory then file", mkTar(t, 0, dir("x/"), file("x", "1")), noLimits, api.ErrInvalidArgument},
		{"file beneath a file", mkTar(t, 0, file("x", "1"), file("x/y", "2")), noLimits, api.ErrInvalidArgument},
		{"dot as a file", mkTar(t, 0, file(".", "1")), noLimits, api.ErrInvalidArgument},
		{"name too long", mkTar(t, tar.FormatPAX, file(strings.Repeat("a/", 2100)+"x", "1")), noLimits, api.ErrInvalidArgument},
		{"empty symlink target", mkTar(t, 0, symlink("s", "")), noLimits, api.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.populate(t)
			before, outBefore, sibBefore := snapshot(t, e.dest), snapshot(t, e.outside), snapshot(t, e.sibling)
			res, err := extractBytes(e.root, "dest", tc.data, tc.lim)
			if !errors.Is(err, tc.class) {
				t.Fatalf("Extract: %v (%s), want class %v", err, api.CodeOf(err), tc.class)
			}
			t.Logf("refused: %v", err)
			if res != (Result{}) {
				t.Errorf("Result %+v on error, want zero", res)
			}
			assertSame(t, "dest", before, snapshot(t, e.dest))
			assertSame(t, "outside", outBefore, snapshot(t, e.outside))
			assertSame(t, "sibling", sibBefore, snapshot(t, e.sibling))
			assertNoStaging(t, e.rootDir)
		})
	}
}

// pastHeader is a reader of an archive's first bytes that records any
// read past them.
type pastHeader struct {
	r    *bytes.Reader
	past bool
}

func (p *pastHeader) Read(b []byte) (int, error) {
	if p.r.Len() == 0 {
		p.past = true
		return 0, errors.New("read past the header")
	}
	return p.r.Read(b)
}

func TestExtractHugeHeaderFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	r := &pastHeader{r: bytes.NewReader(hugeHeader(t, 1<<40))}
	_, err := Extract(e.root, "dest", r, Limits{MaxBytes: 1 << 30, MaxEntries: 10}, -1, -1)
	if !errors.Is(err, api.ErrTooLarge) {
		t.Fatalf("Extract: %v, want too large", err)
	}
	if r.past {
		t.Errorf("Extract read past the header before refusing it")
	}
	if !strings.Contains(err.Error(), "huge") {
		t.Errorf("error %q does not name the entry", err)
	}
}

func TestExtractPlantedSymlink(t *testing.T) {
	for _, target := range []string{"outside-abs", "../../outside", "../sibling"} {
		t.Run(target, func(t *testing.T) {
			e := newEnv(t)
			e.populate(t)
			if target == "outside-abs" {
				target = e.outside
			}
			link := filepath.Join(e.dest, "link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			outBefore, sibBefore := snapshot(t, e.outside), snapshot(t, e.sibling)
			for _, tc := range []struct {
				name string
				ents []ent
			}{
				{"file beneath", []ent{file("ok", "x"), file("link/passwd", "pwned")}},
				{"dir entry", []ent{dir("link/"), file("link/passwd", "pwned")}},
				{"deep", []ent{file("link/a/b/passwd", "pwned")}},
			} {
				before := snapshot(t, e.dest)
				_, err := extractBytes(e.root, "dest", mkTar(t, 0, tc.ents...), noLimits)
				if !errors.Is(err, api.ErrConflict) && !errors.Is(err, api.ErrPermissionDenied) {
					t.Errorf("%s: Extract: %v, want conflict or permission denied", tc.name, err)
				}
				assertSame(t, tc.name+": dest", before, snapshot(t, e.dest))
				assertSame(t, tc.name+": outside", outBefore, snapshot(t, e.outside))
				assertSame(t, tc.name+": sibling", sibBefore, snapshot(t, e.sibling))
			}

			// A file of that name replaces the link itself.
			if _, err := extractBytes(e.root, "dest", mkTar(t, 0, file("link", "now a file")), noLimits); err != nil {
				t.Fatalf("Extract of a file over the link: %v", err)
			}
			fi, err := os.Lstat(link)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("dest/link is not a regular file after the upload: %v %v", fi, err)
			}
			if b, _ := os.ReadFile(link); string(b) != "now a file" {
				t.Errorf("dest/link has %q", b)
			}
			assertSame(t, "outside", outBefore, snapshot(t, e.outside))
			assertSame(t, "sibling", sibBefore, snapshot(t, e.sibling))
			assertNoStaging(t, e.rootDir)
		})
	}
}

func TestExtractDirIsSymlink(t *testing.T) {
	e := newEnv(t)
	if err := os.Symlink("sibling", filepath.Join(e.rootDir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, e.sibling)
	_, err := extractBytes(e.root, "linkdir", mkTar(t, 0, file("x", "x")), noLimits)
	if !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("Extract into a symlink: %v, want permission denied", err)
	}
	assertSame(t, "sibling", before, snapshot(t, e.sibling))
	for _, d := range []string{"../x", "/abs", "a/../../x"} {
		if _, err := extractBytes(e.root, d, mkTar(t, 0, file("x", "x")), noLimits); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("Extract into %q: %v, want permission denied", d, err)
		}
	}
	mustWrite(t, filepath.Join(e.rootDir, "afile"), "x", 0o644)
	if _, err := extractBytes(e.root, "afile", mkTar(t, 0, file("x", "x")), noLimits); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("Extract into a file: %v, want invalid argument", err)
	}
}

func TestExtractTypeConflict(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dest string)
		ents  []ent
		want  error // default api.ErrConflict
	}{
		{"file where a directory is", func(t *testing.T, dest string) { mustMkdir(t, filepath.Join(dest, "a"), 0o755) },
			[]ent{file("first", "1"), file("a", "file"), file("zlast", "1")}, nil},
		{"directory where a file is", func(t *testing.T, dest string) { mustWrite(t, filepath.Join(dest, "a"), "f", 0o644) },
			[]ent{file("first", "1"), file("a/x", "x")}, nil},
		{"deep, after a merge", func(t *testing.T, dest string) { mustMkdir(t, filepath.Join(dest, "sub", "b"), 0o755) },
			[]ent{file("sub/new", "1"), file("sub/b", "file")}, nil},
		{"symlink where a directory is", func(t *testing.T, dest string) { mustMkdir(t, filepath.Join(dest, "a"), 0o755) },
			[]ent{file("first", "1"), symlink("a", "keep.txt")}, nil},
		// Merging there would extract through the link: refused like "..".
		{"directory where a symlink to a directory is", func(t *testing.T, dest string) {
			if err := os.Symlink("sub", filepath.Join(dest, "a")); err != nil {
				t.Fatal(err)
			}
		}, []ent{file("first", "1"), dir("a/")}, api.ErrPermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.populate(t)
			tc.setup(t, e.dest)
			before := snapshot(t, e.dest)
			_, err := extractBytes(e.root, "dest", mkTar(t, 0, tc.ents...), noLimits)
			want := tc.want
			if want == nil {
				want = api.ErrConflict
			}
			if !errors.Is(err, want) {
				t.Fatalf("Extract: %v, want %v", err, want)
			}
			if !strings.Contains(err.Error(), "dest/") {
				t.Errorf("error %q does not name the path", err)
			}
			assertSame(t, "dest", before, snapshot(t, e.dest))
			assertNoStaging(t, e.rootDir)
		})
	}
}

func TestExtractMerge(t *testing.T) {
	e := newEnv(t)
	e.populate(t)
	mustWrite(t, filepath.Join(e.dest, "sub", "replace.txt"), "old", 0o644)
	if err := syscall.Mkfifo(filepath.Join(e.dest, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := mkTar(t, 0,
		dir("sub/"),
		file("sub/new.txt", "new"),
		ent{name: "sub/replace.txt", body: "replaced", mode: 0o600},
		file("sub/deeper/x", "x"),
		file("oldlink", "no longer a link"),
		file("fifo", "no longer a fifo"),
		file("top", "top"),
	)
	res, err := extractBytes(e.root, "dest", data, noLimits)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 6 || res.Bytes != int64(len("new"+"replaced"+"x"+"no longer a link"+"no longer a fifo"+"top")) {
		t.Errorf("Result %+v", res)
	}
	want := map[string]string{
		".":               "dir 755",
		"keep.txt":        "file 644 4",
		"sub":             "dir 750", // kept: an existing directory is merged, not changed
		"sub/inner.txt":   "file 600 5",
		"sub/new.txt":     "file 644 3",
		"sub/replace.txt": "file 600 8",
		"sub/deeper":      "dir 755",
		"sub/deeper/x":    "file 644 1",
		"oldlink":         "file 644 16",
		"fifo":            "file 644 16",
		"top":             "file 644 3",
	}
	got := snapshot(t, e.dest)
	for k := range got {
		if strings.HasPrefix(got[k], "file") { // drop the hash
			got[k] = got[k][:strings.LastIndexByte(got[k], ' ')]
		}
	}
	assertSame(t, "dest (want -> got)", want, got)
	if b, _ := os.ReadFile(filepath.Join(e.dest, "sub", "replace.txt")); string(b) != "replaced" {
		t.Errorf("sub/replace.txt has %q", b)
	}
	assertNoStaging(t, e.rootDir)
}

func TestExtractEntries(t *testing.T) {
	longDir := strings.Repeat("long-name-", 12)
	long := longDir + "/" + strings.Repeat("x", 130)
	tests := []struct {
		name string
		data []byte
		want map[string]string // path -> "file <perm> <body>", "dir <perm>", "link -> target"
	}{
		{"tar -C dir . style", mkTar(t, 0, dir("./"), dir("./d/"), file("./d/f", "f"), file("./g", "g")),
			map[string]string{"d": "dir 755", "d/f": "file 644 f", "g": "file 644 g"}},
		{"dot without slash", mkTar(t, 0, dir("."), file("a", "a")), map[string]string{"a": "file 644 a"}},
		{"modes", mkTar(t, 0,
			ent{name: "suid", body: "s", mode: 0o4755},
			ent{name: "sgid-sticky", body: "s", mode: 0o3640},
			ent{name: "none", body: "n", mode: 0o100000}, // type bits only
			ent{name: "ro-dir/", typ: tar.TypeDir, mode: 0o500},
			ent{name: "sticky-dir/", typ: tar.TypeDir, mode: 0o1777},
			ent{name: "s", typ: tar.TypeSymlink, link: "suid", mode: 0o644}),
			map[string]string{"suid": "file 755 s", "sgid-sticky": "file 640 s", "none": "file 0 n",
				"ro-dir": "dir 700", "sticky-dir": "dir 777", "s": "link -> suid"}},
		{"implicit parents", mkTar(t, 0, file("a/b/c", "c")), map[string]string{"a": "dir 755", "a/b": "dir 755", "a/b/c": "file 644 c"}},
		{"directory after its content", mkTar(t, 0, file("a/f", "f"), ent{name: "a/", typ: tar.TypeDir, mode: 0o750}),
			map[string]string{"a": "dir 750", "a/f": "file 644 f"}},
		{"duplicates: later wins", mkTar(t, 0, file("f", "first"), file("f", "second"), dir("d/"), dir("d/"),
			symlink("s", "f"), file("s", "now a file"), file("t", "t"), symlink("t", "f")),
			map[string]string{"f": "file 644 second", "d": "dir 755", "s": "file 644 now a file", "t": "link -> f"}},
		{"symlinks inside", mkTar(t, 0, dir("a/b/"), symlink("a/b/up", "../../top"), symlink("a/dot", "."), symlink("a/par", ".."),
			symlink("dangling", "nowhere")),
			map[string]string{"a": "dir 755", "a/b": "dir 755", "a/b/up": "link -> ../../top", "a/dot": "link -> .",
				"a/par": "link -> ..", "dangling": "link -> nowhere"}},
		{"hard links", mkTar(t, 0, file("d/f", "f"), hardlink("h", "d/f"), hardlink("./h2", "./d/f"), hardlink("d/f", "d/f")),
			map[string]string{"d": "dir 755", "d/f": "file 644 f", "h": "file 644 f", "h2": "file 644 f"}},
		{"PAX long names", mkTar(t, tar.FormatPAX, file(long, "pax"), symlink("l", long)),
			map[string]string{longDir: "dir 755", long: "file 644 pax", "l": "link -> " + long}},
		{"GNU long names", mkTar(t, tar.FormatGNU, file(long, "gnu"), hardlink("h", long)),
			map[string]string{longDir: "dir 755", long: "file 644 gnu", "h": "file 644 gnu"}},
		{"global header", globalHeaderTar(t), map[string]string{"a": "file 644 a"}},
		{"empty archive", mkTar(t, 0), map[string]string{}},
		{"empty stream", nil, map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if _, err := extractBytes(e.root, "dest", tc.data, Limits{MaxBytes: 1 << 20, MaxEntries: 100}); err != nil {
				t.Fatalf("Extract: %v", err)
			}
			got := map[string]string{}
			filepath.WalkDir(e.dest, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				rel, _ := filepath.Rel(e.dest, p)
				if rel == "." {
					return nil
				}
				fi, _ := os.Lstat(p)
				switch fi.Mode().Type() {
				case 0:
					b, _ := os.ReadFile(p)
					got[rel] = fmt.Sprintf("file %o %s", fi.Mode()&^fs.ModeType, b)
				case fs.ModeDir:
					got[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm()|fi.Mode()&(fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid))
				case fs.ModeSymlink:
					l, _ := os.Readlink(p)
					got[rel] = "link -> " + l
				default:
					got[rel] = fi.Mode().String()
				}
				return nil
			})
			assertSame(t, "dest (want -> got)", tc.want, got)
			assertNoStaging(t, e.rootDir)
		})
	}
}

func globalHeaderTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}); err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: "a", Size: 1, Mode: 0o644})
	tw.Write([]byte("a"))
	tw.Close()
	return buf.Bytes()
}

func TestExtractCreatesDir(t *testing.T) {
	e := newEnv(t)
	if _, err := extractBytes(e.root, "made/deep/dir", mkTar(t, 0, file("x", "x"), symlink("bad", "/etc")), noLimits); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("Extract: %v, want permission denied", err)
	}
	if _, err := os.Lstat(filepath.Join(e.rootDir, "made")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directories Extract made are left after a failure: %v", err)
	}
	res, err := extractBytes(e.root, "made/deep/dir", mkTar(t, 0, file("x", "x")), noLimits)
	if err != nil || res.Files != 1 {
		t.Fatalf("Extract: %+v %v", res, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.rootDir, "made/deep/dir/x")); err != nil || string(b) != "x" {
		t.Errorf("made/deep/dir/x: %q %v", b, err)
	}
	if res, err := extractBytes(e.root, ".", mkTar(t, 0, file("attop", "x")), noLimits); err != nil || res.Files != 1 {
		t.Errorf("Extract into .: %+v %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(e.rootDir, "attop")); err != nil {
		t.Error(err)
	}
	assertNoStaging(t, e.rootDir)
}

// midway runs fn once, after n bytes of r were read.
type midway struct {
	r    io.Reader
	n    int
	read int
	fn   func()
	once sync.Once
}

func (m *midway) Read(b []byte) (int, error) {
	if m.read >= m.n {
		m.once.Do(m.fn)
	}
	n, err := m.r.Read(b)
	m.read += n
	return n, err
}

func TestExtractOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	const id = 12345
	e := newEnv(t)
	data := mkTar(t, 0, dir("d/"), file("d/f", "f"), file("implicit/parents/g", "g"), symlink("s", "d/f"),
		hardlink("h", "d/f"), file("zz-last", strings.Repeat("z", 64<<10)))
	sawStaging := false
	r := &midway{r: bytes.NewReader(data), n: 8 << 10, fn: func() {
		// Midway: staged entries are out of the sandbox's reach and not
		// yet in dest.
		ents, err := os.ReadDir(filepath.Join(e.rootDir, "made", "dest"))
		if err != nil {
			t.Errorf("midway: %v", err)
			return
		}
		for _, de := range ents {
			if !strings.HasPrefix(de.Name(), stagingPrefix) {
				t.Errorf("midway: %s already in dest", de.Name())
				continue
			}
			sawStaging = true
			fi, _ := os.Lstat(filepath.Join(e.rootDir, "made", "dest", de.Name()))
			if fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("midway: staging directory is %v uid %d, want 0700 owned by the daemon", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
			}
		}
	}}
	if _, err := Extract(e.root, "made/dest", r, noLimits, id, id); err != nil {
		t.Fatal(err)
	}
	if !sawStaging {
		t.Error("no staging directory seen midway")
	}
	n := 0
	filepath.WalkDir(filepath.Join(e.rootDir, "made"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Lstat(p)
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != id || st.Gid != id {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, id, id)
		}
		n++
		return nil
	})
	// made, made/dest, d, d/f, implicit, implicit/parents, implicit/parents/g, s, h, zz-last
	if n != 10 {
		t.Errorf("checked %d entries, want 10", n)
	}
	// The root and the sibling were not handed over.
	for _, p := range []string{e.rootDir, e.sibling} {
		fi, _ := os.Lstat(p)
		if fi.Sys().(*syscall.Stat_t).Uid == id {
			t.Errorf("%s was chowned", p)
		}
	}
}

// readTar lists an archive: name -> typeflag, link target, content.
func readTar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		m[h.Name] = fmt.Sprintf("%c %s %q", h.Typeflag, h.Linkname, b)
	}
}

func archiveWithTimeout(t *testing.T, root *os.Root, dir string) ([]byte, Result, error) {
	t.Helper()
	type out struct {
		data []byte
		res  Result
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		var buf bytes.Buffer
		res, err := Archive(root, dir, &buf)
		ch <- out{buf.Bytes(), res, err}
	}()
	select {
	case o := <-ch:
		return o.data, o.res, o.err
	case <-time.After(20 * time.Second):
		t.Fatal("Archive hangs")
	}
	return nil, Result{}, nil
}

func TestArchiveSpecialFiles(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.rootDir, "src")
	mustMkdir(t, src, 0o755)
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"zero": "/dev/zero", "passwd": "/etc/passwd", "tofifo": "fifo", "out": "../../outside/secret"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(src, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if os.Geteuid() == 0 {
		if err := syscall.Mknod(filepath.Join(src, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Logf("no device node: %v", err)
		}
	}
	mustWrite(t, filepath.Join(src, "file.txt"), "content", 0o644)
	data, res, err := archiveWithTimeout(t, e.root, "src")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"zero":     `2 /dev/zero ""`,
		"passwd":   `2 /etc/passwd ""`,
		"tofifo":   `2 fifo ""`,
		"out":      `2 ../../outside/secret ""`,
		"file.txt": `0  "content"`,
	}
	assertSame(t, "archive (want -> got)", want, readTar(t, data))
	if res != (Result{Files: 1, Bytes: 7}) {
		t.Errorf("Result %+v", res)
	}
}

func TestArchiveSwapped(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.rootDir, "src")
	mustMkdir(t, src, 0o755)
	mustWrite(t, filepath.Join(src, "other"), "other content", 0o644)
	r, err := e.root.OpenRoot("src")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Each case: the walk saw a regular file f; by the time it is opened f
	// is something else.
	for name, swap := range map[string]func(p string) error{
		"fifo":                 func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"symlink to /dev/zero": func(p string) error { return os.Symlink("/dev/zero", p) },
		"symlink to a file":    func(p string) error { return os.Symlink("other", p) },
		"symlink to a fifo": func(p string) error {
			if err := syscall.Mkfifo(filepath.Join(src, "fifo2"), 0o644); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return os.Symlink("fifo2", p)
		},
		"another file": func(p string) error { return os.WriteFile(p, []byte("new inode"), 0o644) },
		"gone":         func(p string) error { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(src, "f")
			mustWrite(t, p, "original", 0o644)
			fi, err := r.Lstat("f")
			if err != nil {
				t.Fatal(err)
			}
			// Moved aside, not removed: a new file could get the freed inode
			// number, and be the same file as far as anyone can tell.
			if err := os.Rename(p, p+".old"); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p + ".old")
			if err := swap(p); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p)
			var buf bytes.Buffer
			a := &archiver{dir: "src", tw: tar.NewWriter(&buf), buf: make([]byte, bufSize), links: map[fileID]string{}}
			done := make(chan error, 1)
			go func() { done <- a.file(r, "f", "f", fi) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("file: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("file blocks")
			}
			a.tw.Close()
			if got := readTar(t, buf.Bytes()); len(got) != 0 || a.res != (Result{}) {
				t.Errorf("archived %v (%+v), want nothing", got, a.res)
			}
		})
	}
}

func TestArchiveSizeChanges(t *testing.T) {
	e := newEnv(t)
	mustWrite(t, filepath.Join(e.rootDir, "f"), strings.Repeat("a", 200), 0o644)
	f, err := e.root.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name string
		size int64 // the header's
		want string
	}{
		{"shrank", 250, strings.Repeat("a", 200) + strings.Repeat("\x00", 50)},
		{"grew", 120, strings.Repeat("a", 120)},
		{"shrank, several buffers", 100 << 10, strings.Repeat("a", 200) + strings.Repeat("\x00", 100<<10-200)},
	} {
		f.Seek(0, io.SeekStart)
		var buf bytes.Buffer
		a := &archiver{tw: tar.NewWriter(&buf), buf: make([]byte, bufSize)}
		a.tw.WriteHeader(&tar.Header{Name: "f", Size: tc.size, Mode: 0o644})
		if err := a.copy(f, tc.size, "f"); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := a.tw.Close(); err != nil {
			t.Fatalf("%s: the stream is not valid: %v", tc.name, err)
		}
		if got := readTar(t, buf.Bytes())["f"]; got != fmt.Sprintf("0  %q", tc.want) {
			t.Errorf("%s: got %.80s", tc.name, got)
		}
	}
}

func TestArchiveRefuses(t *testing.T) {
	e := newEnv(t)
	if err := os.Symlink("sibling", filepath.Join(e.rootDir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(e.rootDir, "afile"), "x", 0o644)
	for _, tc := range []struct {
		dir   string
		class error
	}{
		{"linkdir", api.ErrPermissionDenied},
		{"missing", api.ErrNotFound},
		{"sibling/missing", api.ErrNotFound},
		{"afile", api.ErrInvalidArgument},
		{"../outside", api.ErrPermissionDenied},
		{"/etc", api.ErrPermissionDenied},
	} {
		var buf bytes.Buffer
		_, err := Archive(e.root, tc.dir, &buf)
		if !errors.Is(err, tc.class) {
			t.Errorf("Archive(%q): %v, want %v", tc.dir, err, tc.class)
		}
		if buf.Len() != 0 {
			t.Errorf("Archive(%q) wrote %d bytes", tc.dir, buf.Len())
		}
	}
}

func TestArchiveSkipsStaging(t *testing.T) {
	e := newEnv(t)
	staging := stagingPrefix + strings.Repeat("ab", stagingRandom)
	mustMkdir(t, filepath.Join(e.dest, "sub", staging), 0o700)
	mustWrite(t, filepath.Join(e.dest, "sub", staging, "half"), "x", 0o644)
	mustMkdir(t, filepath.Join(e.dest, stagingPrefix+"mine"), 0o755)
	data, _, err := archiveWithTimeout(t, e.root, "dest")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"sub/": `5  ""`, stagingPrefix + "mine/": `5  ""`}
	assertSame(t, "archive (want -> got)", want, readTar(t, data))
}

// peakHeap samples the heap while fn runs and returns its growth.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	peak := base
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return peak - base
}

func TestStreamingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400 MiB")
	}
	const size = 200 << 20
	const allowed = 16 << 20
	e := newEnv(t)

	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		err := tw.WriteHeader(&tar.Header{Name: "big", Size: size, Mode: 0o644})
		for left := size; err == nil && left > 0; left -= len(chunk) {
			_, err = tw.Write(chunk[:min(len(chunk), left)])
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	var res Result
	var err error
	grew := peakHeap(func() {
		res, err = Extract(e.root, "dest", pr, Limits{MaxBytes: 1 << 30, MaxEntries: 10}, -1, -1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != size {
		t.Errorf("extracted %d bytes", res.Bytes)
	}
	t.Logf("Extract of %d MiB: heap grew by %d KiB", size>>20, grew>>10)
	if grew > allowed {
		t.Errorf("Extract: heap grew by %d MiB", grew>>20)
	}
	if fi, err := os.Stat(filepath.Join(e.dest, "big")); err != nil || fi.Size() != size {
		t.Errorf("big: %v %v", fi, err)
	}
	os.Remove(filepath.Join(e.dest, "big"))

	// A sparse file: 200 MiB to read, none on disk.
	f, err := os.Create(filepath.Join(e.dest, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	grew = peakHeap(func() {
		res, err = Archive(e.root, "dest", io.Discard)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != size {
		t.Errorf("archived %d bytes", res.Bytes)
	}
	t.Logf("Archive of %d MiB: heap grew by %d KiB", size>>20, grew>>10)
	if grew > allowed {
		t.Errorf("Archive: heap grew by %d MiB", grew>>20)
	}
}

// FuzzExtract feeds arbitrary bytes to Extract into dest, beside an empty
// sentinel directory that the os.Root would let it reach.
func FuzzExtract(f *testing.F) {
	// One directory per worker, emptied after each success: creating and
	// removing one per input would cost more than most inputs.
	base := f.TempDir()
	dest, sentinel := filepath.Join(base, "dest"), filepath.Join(base, "sentinel")
	mustMkdir(f, dest, 0o755)
	mustMkdir(f, sentinel, 0o755)
	root, err := os.OpenRoot(base)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { root.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Extract(root, "dest", bytes.NewReader(data), Limits{MaxBytes: 1 << 20, MaxEntries: 256}, -1, -1)
		if ents, _ := os.ReadDir(sentinel); len(ents) != 0 {
			t.Fatalf("wrote into the sibling: %v", ents)
		}
		if ents, _ := os.ReadDir(base); len(ents) != 2 {
			t.Fatalf("wrote beside dest: %v", ents)
		}
		ents, rerr := os.ReadDir(dest)
		if rerr != nil {
			t.Fatalf("dest: %v", rerr)
		}
		if err != nil {
			if len(ents) != 0 {
				t.Fatalf("Extract failed (%v) but left %v", err, ents)
			}
			if api.CodeOf(err) == api.CodeInternal {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		for _, de := range ents {
			if strings.HasPrefix(de.Name(), stagingPrefix) {
				t.Fatalf("staging directory left: %s", de.Name())
			}
		}
		// Whatever was extracted stays inside dest, links included.
		filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type() != fs.ModeSymlink {
				return err
			}
			target, _ := os.Readlink(p)
			if filepath.IsAbs(target) {
				t.Fatalf("absolute symlink %s -> %s", p, target)
			}
			if rel, _ := filepath.Rel(dest, filepath.Join(filepath.Dir(p), target)); !filepath.IsLocal(rel) && rel != "." {
				t.Fatalf("symlink %s -> %s leads out of dest", p, target)
			}
			return nil
		})
		for _, de := range ents {
			if err := os.RemoveAll(filepath.Join(dest, de.Name())); err != nil {
				t.Fatal(err)
			}
		}
	})
}
