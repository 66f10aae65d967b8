package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

func act(t *testing.T, c *client.Client, id string, a *api.Action) (*api.Observation, error) {
	t.Helper()
	return c.Act(ctxT(t, 30*time.Second), id, a)
}

// onBackends runs test on a process and on a containerd sandbox of one
// daemon.
func onBackends(t *testing.T, test func(t *testing.T, c *client.Client, id string)) {
	d := startDaemon(t)
	c := d.client()
	for _, backend := range []string{api.BackendProcess, api.BackendContainerd} {
		t.Run(backend, func(t *testing.T) {
			if backend == api.BackendContainerd {
				requireContainerd(t, c)
				test(t, c, newContainerd(t, d, api.CreateSandboxRequest{}))
				return
			}
			test(t, c, newSandbox(t, c))
		})
	}
}

// TestFileActions runs on the process and containerd backends: the file
// actions mean the same whatever the sandbox's files are.
func TestFileActions(t *testing.T) { onBackends(t, testFileActions) }

func testFileActions(t *testing.T, c *client.Client, id string) {

	if o, err := act(t, c, id, api.WriteFile("src/app.py", "def f():\n    return 1\n")); err != nil || o.Bytes != 22 || !strings.HasSuffix(o.Path, "/src/app.py") {
		t.Fatalf("write: %+v %v", o, err)
	}
	// The sandbox's user owns what the daemon wrote, and sees it.
	wantRun(t, run(t, c, id, "cat src/app.py && stat -c %u src/app.py src | sort -u | wc -l"), 0, "def f():\n    return 1\n1\n")
	o, err := act(t, c, id, &api.Action{Kind: api.KindFileRead, Path: "src/app.py", StartLine: 2})
	if err != nil || o.Content != "    return 1\n" {
		t.Fatalf("read range: %+v %v", o, err)
	}
	o, err = act(t, c, id, api.StrReplace("src/app.py", "return 1", "return 2"))
	if err != nil || !strings.Contains(o.Output, "     2\t    return 2") {
		t.Fatalf("str_replace: %+v %v", o, err)
	}
	if _, err := act(t, c, id, api.StrReplace("src/app.py", "return 9", "x")); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "0 times") {
		t.Fatalf("str_replace without a match: %v", err)
	}
	if _, err := act(t, c, id, api.Insert("src/app.py", 0, "import os")); err != nil {
		t.Fatal(err)
	}
	o, err = act(t, c, id, api.View("src/app.py"))
	if err != nil || !strings.Contains(o.Output, "     1\timport os\n     2\tdef f():\n     3\t    return 2\n") {
		t.Fatalf("view: %q %v", o.Output, err)
	}
	for _, want := range []string{"def f():\n    return 2\n", "def f():\n    return 1\n"} {
		if _, err := act(t, c, id, api.UndoEdit("src/app.py")); err != nil {
			t.Fatal(err)
		}
		if o, _ := act(t, c, id, api.ReadFile("src/app.py")); o.Content != want {
			t.Fatalf("after undo: %q, want %q", o.Content, want)
		}
	}
	if _, err := act(t, c, id, api.Create("src/app.py", "x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("create over an existing file: %v", err)
	}
	o, err = act(t, c, id, api.View("."))
	if err != nil || !strings.Contains(o.Output, "/src/app.py") {
		t.Fatalf("view dir: %+v %v", o, err)
	}
	// A 10 GB sparse file: answered at once, not read.
	run(t, c, id, "truncate -s 10G big.bin")
	start := time.Now()
	o, err = act(t, c, id, api.ReadFile("big.bin"))
	if err != nil || o.Content != "" || !strings.Contains(o.Note, "binary") || !strings.Contains(o.Note, "10.0 GiB") || time.Since(start) > 5*time.Second {
		t.Fatalf("sparse read: %+v %v after %v", o, err, time.Since(start))
	}
	// Actions are in the event log like any other.
	evs := allEvents(t, c, id)
	if n := len(evs); n < 20 || evs[0].Action.Kind != api.KindFileWrite {
		t.Fatalf("events: %d, first %+v", n, evs[0].Action)
	}
}

// plant makes the sandbox itself create hostile things in its workspace
// (a wasm sandbox has no shell: they are made in its directory on the
// host, as an upload or a module could) and returns a sentinel directory
// outside it (beside the daemon's state) that must never change.
func plant(t *testing.T, r *rig, id string) (outside string) {
	t.Helper()
	outside = filepath.Join(r.d.dir, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o644)
	if r.backend != api.BackendWasm {
		wantRun(t, run(t, r.c, id, fmt.Sprintf(`ln -s %[1]s abs && ln -s ../../../outside rel && ln -s abs chain && ln -s /etc/passwd passwd && ln -s /dev/zero zero && ln -s %[1]s/secret secret && mkfifo fifo && echo ok`, outside)), 0, "ok\n")
		return outside
	}
	ws := r.workspaceOnHost(id)
	for link, target := range map[string]string{"abs": outside, "rel": "../../../outside", "chain": "abs", "passwd": "/etc/passwd", "zero": "/dev/zero", "secret": outside + "/secret"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return outside
}

// workspaceOnHost is where a sandbox's workspace is on the host.
func (r *rig) workspaceOnHost(id string) string {
	switch r.backend {
	case api.BackendContainerd:
		return filepath.Join(r.d.stateDir, "sandboxes", id, "workspace")
	case api.BackendWasm:
		return filepath.Join(r.d.stateDir, "wasm", id)
	}
	return filepath.Join(r.d.stateDir, "workspaces", id)
}

func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		// A directory's mtime moves when anything is created and removed
		// in it (a staging directory): compare what is there instead.
		mtime := fi.ModTime().UnixNano()
		if fi.IsDir() {
			mtime = 0
		}
		fmt.Fprintf(h, "%s %v %d %v\n", p, fi.Mode(), fi.Size(), mtime)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestFilesConfinement plants links out of a sandbox's workspace (absolute,
// relative, chained), a FIFO and a link to /dev/zero, then tries every
// file action, download and upload through them and through `..` and
// absolute paths, on every backend: none reads or changes anything
// outside what the sandbox may see (for a container, its own root), none
// blocks, and the refusals are permission_denied.
func TestFilesConfinement(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd, api.BackendWasm}, testFilesConfinement)
}

func testFilesConfinement(t *testing.T, backend string) {
	r := newRig(t, backend)
	c := r.c
	id := r.sandbox(t, api.CreateSandboxRequest{})
	other := r.sandbox(t, api.CreateSandboxRequest{})
	outside := plant(t, r, id)
	before, passwd := treeHash(t, outside), treeHash(t, "/etc/passwd")
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}

	// Through a planted link: refused everywhere. `..` and absolute
	// paths are refused where the sandbox sees only its workspace; a
	// container sees its own root, where they stay.
	linked := []string{"abs/secret", "rel/secret", "chain/secret", "passwd", "secret", "abs/new", "rel/new"}
	plain := []string{"../outside/secret", "/etc/passwd", "sub/../../x", outside + "/secret"}
	for _, p := range append(linked, plain...) {
		mustRefuse := backend != api.BackendContainerd || slices.Contains(linked, p)
		check := func(what string, body string, err error) {
			t.Helper()
			if strings.Contains(body, "host secret") || body == string(hostPasswd) {
				t.Errorf("%s %q answered content from outside the sandbox", what, p)
			}
			if mustRefuse && !errors.Is(err, client.ErrPermissionDenied) {
				t.Errorf("%s %q: got %v, want permission_denied", what, p, err)
			}
			var cerr *client.Error
			if err != nil && (!errors.As(err, &cerr) || cerr.Message == "") {
				t.Errorf("%s %q: %v is not a structured error", what, p, err)
			}
		}
		for _, a := range []*api.Action{
			api.ReadFile(p), api.WriteFile(p, "pwned\n"), api.View(p), api.Create(p, "pwned\n"),
			api.StrReplace(p, "root", "pwned"), api.Insert(p, 0, "pwned"),
		} {
			type result struct {
				o   *api.Observation
				err error
			}
			done := make(chan result, 1)
			go func() { o, err := c.Act(ctxT(t, 30*time.Second), id, a); done <- result{o, err} }()
			select {
			case res := <-done:
				var body string
				if res.o != nil {
					body = res.o.Content + res.o.Output
				}
				check(a.Kind+" "+a.Command, body, res.err)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %q blocked", a.Kind, p)
			}
		}
		var got bytes.Buffer
		_, _, err := c.Download(ctxT(t, 30*time.Second), id, p, &got)
		check("GET files", got.String(), err)
		_, err = c.Upload(ctxT(t, 30*time.Second), id, p, strings.NewReader("pwned"), 5, false)
		check("PUT files", "", err)
	}
	// A FIFO and /dev/zero never block a read: refused at once.
	for _, p := range []string{"fifo", "zero"} {
		done := make(chan error, 1)
		go func() { _, err := c.Act(ctxT(t, 30*time.Second), id, api.ReadFile(p)); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, client.ErrInvalidArgument) && !errors.Is(err, client.ErrPermissionDenied) {
				t.Errorf("read %s: %v", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("read %s blocked", p)
		}
		go func() { _, _, err := c.Download(ctxT(t, 30*time.Second), id, p, io.Discard); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, client.ErrInvalidArgument) && !errors.Is(err, client.ErrPermissionDenied) {
				t.Errorf("GET files %s: %v", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GET files %s blocked", p)
		}
	}
	// Downloading the whole workspace sends the links as links.
	var buf bytes.Buffer
	isTar, _, err := c.Download(ctxT(t, 30*time.Second), id, ".", &buf)
	if err != nil || !isTar {
		t.Fatalf("download dir: %v %v", isTar, err)
	}
	entries := tarEntries(t, buf.Bytes())
	for _, name := range []string{"abs", "rel", "passwd", "zero"} {
		if e, ok := entries[name]; !ok || e.Typeflag != tar.TypeSymlink {
			t.Errorf("%s in the tar: %+v", name, e)
		}
	}
	if _, ok := entries["fifo"]; ok {
		t.Error("the FIFO is in the tar")
	}
	if bytes.Contains(buf.Bytes(), []byte("host secret")) || bytes.Contains(buf.Bytes(), hostPasswd) {
		t.Error("the tar holds content from outside the sandbox")
	}
	testEncodedTraversal(t, r, id, hostPasswd)
	if treeHash(t, outside) != before || treeHash(t, "/etc/passwd") != passwd {
		t.Fatal("something outside the sandbox changed")
	}
	if _, err := c.WriteFile(ctxT(t, 30*time.Second), other, "ok.txt", "fine"); err != nil {
		t.Errorf("another sandbox's files: %v", err)
	}
	r.done(t)
}

// testEncodedTraversal asks the files endpoint for percent-encoded
// traversals, as raw requests (a client would encode the % itself): the
// daemon decodes the query once, and what it decodes is confined like any
// path. Refusals are structured errors.
func testEncodedTraversal(t *testing.T, r *rig, id string, hostPasswd []byte) {
	t.Helper()
	confined := r.backend != api.BackendContainerd // sees only its workspace
	for _, tc := range []struct {
		target string
		// want is the status where the sandbox sees only its workspace;
		// a container resolves `..` and absolute paths in its own root.
		want, wantContainer int
	}{
		{"/files?path=%2e%2e%2f%2e%2e%2fetc%2fpasswd", 403, 200},
		{"/files?path=%2E%2E/%2e%2E/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd", 403, 200},
		{"/files?path=..%2f..%2f..%2foutside%2fsecret", 403, 404},
		{"/files?path=%2fetc%2fpasswd", 403, 200},
		{"/files?path=sub%2f%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fshadow", 403, 404},
		{"/files?path=%252e%252e%252f%252e%252e%252fetc%252fpasswd", 404, 404},
		{"/files?path=abs%2fsecret", 403, 403},
		{"/files?path=secret%00.txt", 400, 400},
		{"%2f..%2f..%2fetc/files?path=passwd", 404, 404},
	} {
		req, err := http.NewRequest("GET", "http://"+r.d.tcp+"/v1/sandboxes/"+id+tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+r.d.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.target, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := tc.want
		if !confined {
			want = tc.wantContainer
		}
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d %.200s, want %d", tc.target, resp.StatusCode, body, want)
		}
		if bytes.Contains(body, []byte("host secret")) || bytes.Equal(body, hostPasswd) {
			t.Errorf("GET %s answered content from outside the sandbox", tc.target)
		}
		if resp.StatusCode >= 300 {
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Errorf("GET %s: %d with %q, not a structured error", tc.target, resp.StatusCode, body)
			}
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

func tarEntries(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		out[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = h
	}
}

type tarEntry struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

// TestTarUploads extracts good and hostile archives on every backend:
// `..` entries, absolute names, links out and hard links to host files
// refuse the whole upload (permission_denied, nothing extracted), an entry
// through a planted link is refused, and archive bombs are too_large.
func TestTarUploads(t *testing.T) {
	onEachBackend(t, []string{api.BackendProcess, api.BackendContainerd, api.BackendWasm}, testTarUploads)
}

func testTarUploads(t *testing.T, backend string) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("[files]\nmax_transfer_entries = 50\nmax_transfer_bytes = 1048576\n"), 0o644)
	r := newRig(t, backend, "--config", cfg)
	c := r.c
	id := r.sandbox(t, api.CreateSandboxRequest{})
	outside := plant(t, r, id)
	before := treeHash(t, outside)
	ws := r.workspaceOnHost(id)
	put := func(dir string, archive []byte) (*api.TransferResult, error) {
		return c.Upload(ctxT(t, 30*time.Second), id, dir, bytes.NewReader(archive), int64(len(archive)), true)
	}

	res, err := put("proj", makeTar(t,
		tarEntry{name: "proj-dir/", typ: tar.TypeDir},
		tarEntry{name: "proj-dir/a.txt", body: "A"},
		tarEntry{name: "b.txt", body: "BB"},
		tarEntry{name: "link", typ: tar.TypeSymlink, link: "b.txt"},
	))
	if err != nil || res.Files != 2 || res.Bytes != 3 {
		t.Fatalf("good upload: %+v %v", res, err)
	}
	for p, want := range map[string]string{"proj/proj-dir/a.txt": "A", "proj/link": "BB"} {
		if o, err := c.ReadFile(ctxT(t, 30*time.Second), id, p); err != nil || o.Content != want {
			t.Errorf("%s after the upload: %+v %v", p, o, err)
		}
	}

	wsBefore := treeHash(t, ws)
	bad := []struct {
		name string
		tar  []byte
		want error
	}{
		{"dotdot", makeTar(t, tarEntry{name: "ok.txt", body: "x"}, tarEntry{name: "../escape.txt", body: "x"}), client.ErrPermissionDenied},
		{"absolute", makeTar(t, tarEntry{name: "/tmp/escape.txt", body: "x"}), client.ErrPermissionDenied},
		{"symlink out", makeTar(t, tarEntry{name: "l", typ: tar.TypeSymlink, link: "/etc"}), client.ErrPermissionDenied},
		{"relative symlink out", makeTar(t, tarEntry{name: "l", typ: tar.TypeSymlink, link: "../../../x"}), client.ErrPermissionDenied},
		{"hard link to a host file", makeTar(t, tarEntry{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}), client.ErrPermissionDenied},
		{"through a planted link", makeTar(t, tarEntry{name: "abs/pwned", body: "x"}), nil},
		{"bomb: entries", makeTar(t, func() []tarEntry {
			var es []tarEntry
			for i := 0; i < 60; i++ {
				es = append(es, tarEntry{name: fmt.Sprintf("f%d", i), body: "x"})
			}
			return es
		}()...), client.ErrTooLarge},
		{"bomb: bytes", makeTar(t, tarEntry{name: "big", body: strings.Repeat("x", 2<<20)}), client.ErrTooLarge},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			dir := "up"
			if tc.name == "through a planted link" {
				dir = "."
			}
			_, err := put(dir, tc.tar)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if treeHash(t, ws) != wsBefore || treeHash(t, outside) != before {
		out, _ := exec.Command("ls", "-laR", ws).CombinedOutput()
		t.Fatalf("a refused upload changed something:\n%s", out)
	}
	// A file upload that is too large is refused whole.
	if _, err := c.Upload(ctxT(t, 30*time.Second), id, "big.bin", bytes.NewReader(make([]byte, 2<<20)), 2<<20, false); !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("large file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "big.bin")); !os.IsNotExist(err) {
		t.Fatal("a refused upload left a file")
	}
	r.done(t)
}

// TestUploadDownloadRoundTrip runs on the process and containerd backends: the file
// actions mean the same whatever the sandbox's files are.
func TestUploadDownloadRoundTrip(t *testing.T) { onBackends(t, testUploadDownloadRoundTrip) }

func testUploadDownloadRoundTrip(t *testing.T, c *client.Client, id string) {
	ctx := ctxT(t, 60*time.Second)
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	res, err := c.Upload(ctx, id, "deep/dir/blob.bin", bytes.NewReader(data), int64(len(data)), false)
	if err != nil || res.Bytes != int64(len(data)) {
		t.Fatalf("upload: %+v %v", res, err)
	}
	var got bytes.Buffer
	if isTar, n, err := c.Download(ctx, id, "deep/dir/blob.bin", &got); err != nil || isTar || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download: tar=%v n=%d %v equal=%v", isTar, n, err, bytes.Equal(got.Bytes(), data))
	}
	got.Reset()
	isTar, _, err := c.Download(ctx, id, "deep", &got)
	if err != nil || !isTar {
		t.Fatal(err)
	}
	es := tarEntries(t, got.Bytes())
	var names []string
	for n := range es {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "dir,dir/blob.bin" {
		t.Fatalf("tar entries: %v", names)
	}
	if _, _, err := c.Download(ctx, id, "missing", io.Discard); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// A local directory (with a link and a FIFO, which is skipped) and a
	// local file, through UploadPath.
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(local, "a", "b", "c.txt"), []byte("deep\n"), 0o644)
	os.Symlink("b/c.txt", filepath.Join(local, "a", "link"))
	syscall.Mkfifo(filepath.Join(local, "fifo"), 0o644)
	res, err = c.UploadPath(ctx, id, local, "tree")
	if err != nil || res.Files != 1 {
		t.Fatalf("UploadPath dir: %+v %v", res, err)
	}
	if _, err := c.UploadPath(ctx, id, filepath.Join(local, "a", "b", "c.txt"), "one.txt"); err != nil {
		t.Fatal(err)
	}
	wantRun(t, run(t, c, id, "cat tree/a/link one.txt; test -p tree/fifo || echo no-fifo"), 0, "deep\ndeep\nno-fifo\n")
}

func TestCLICopy(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "src", "pkg"), 0o755)
	os.WriteFile(filepath.Join(local, "src", "pkg", "m.go"), []byte("package pkg\n"), 0o644)
	os.WriteFile(filepath.Join(local, "notes.txt"), []byte("hello\n"), 0o600)
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"cp", "--addr", "unix://" + d.sock}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sandboxd cp %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cli(filepath.Join(local, "src"), id+":code")
	cli(filepath.Join(local, "notes.txt"), id+":notes.txt")
	wantRun(t, run(t, c, id, "cat code/pkg/m.go notes.txt"), 0, "package pkg\nhello\n")
	back := t.TempDir()
	cli(id+":code", filepath.Join(back, "code"))
	cli(id+":notes.txt", back)
	for p, want := range map[string]string{"code/pkg/m.go": "package pkg\n", "notes.txt": "hello\n"} {
		if b, err := os.ReadFile(filepath.Join(back, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
}
