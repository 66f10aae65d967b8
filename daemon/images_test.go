package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/daemon"
	"github.com/sandboxd/sandboxd/internal/imagetest"
)

// imagesNamespace is the containerd namespace of these tests' daemons
// (the containerd backend's own tests use it too, and clean up after
// themselves).
const imagesNamespace = "sandboxd-test"

// imagesDaemon runs a daemon in this process with edit applied to its
// configuration, and returns a TCP client of it (with the token) and its
// address.
func imagesDaemon(t *testing.T, edit func(*daemon.Config)) (*client.Client, string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd-img-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := daemon.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Listen = []string{"tcp://" + addr}
	// No sandboxes are made here: no user isolation, no cgroups.
	off := false
	cfg.Process.UserIsolation = &off
	cfg.Process.Cgroups = false
	cfg.Containerd.Namespace = imagesNamespace
	if edit != nil {
		edit(&cfg)
	}
	d, err := daemon.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, func([]string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	c, _ := client.New("http://"+addr, client.WithToken(d.Token()))
	t.Cleanup(func() {
		c.Close()
		cancel()
		<-done
	})
	return c, addr, d.Token()
}

// requireImages skips (fails in CI) when the daemon's containerd backend
// is not available.
func requireImages(t *testing.T, c *client.Client) {
	t.Helper()
	in, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range in.Backends {
		if b.Name == api.BackendContainerd && !b.Available {
			if os.Getenv("CI") != "" {
				t.Fatalf("containerd is required in CI: %s", b.Reason)
			}
			t.Skipf("skipping: containerd is not available here: %s", b.Reason)
		}
	}
}

func busyboxArchive(t *testing.T, tags ...string) []byte {
	t.Helper()
	img, err := imagetest.Busybox("/bin/busybox")
	if err != nil {
		t.Skipf("skipping: a static /bin/busybox is needed: %v", err)
	}
	b, err := imagetest.DockerSave(imagetest.Tagged{Image: img, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImagesEndpoints(t *testing.T) {
	c, addr, token := imagesDaemon(t, nil)
	requireImages(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "sandboxd-daemon-test-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ":1"
	t.Cleanup(func() { _ = c.RemoveImage(context.Background(), name) })
	archive := busyboxArchive(t, name)

	// Streamed with no length known (a pipe), over TCP with the token.
	pr, pw := io.Pipe()
	go func() {
		for b := archive; len(b) > 0; {
			n := min(len(b), 100_000)
			if _, err := pw.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
		pw.Close()
	}()
	imgs, err := c.ImportImage(ctx, pr, "")
	if err != nil || len(imgs) != 1 || imgs[0].Name != name || imgs[0].Digest == "" {
		t.Fatalf("import: %+v %v", imgs, err)
	}
	list, err := c.Images(ctx)
	if err != nil || len(list) < 2 || list[0].Name != api.HostImage || !list[0].Builtin {
		t.Fatalf("list: %+v %v", list, err)
	}
	found := false
	for _, img := range list {
		found = found || img == imgs[0]
	}
	if !found {
		t.Fatalf("%+v is not in the list %+v", imgs[0], list)
	}

	// Refusals keep their class across the wire, and the connection keeps
	// serving.
	for what, tc := range map[string]struct {
		err  error
		want error
	}{
		"garbage":        {errOf(c.ImportImage(ctx, bytes.NewReader(bytes.Repeat([]byte("x"), 100_000)), "")), client.ErrInvalidArgument},
		"empty":          {errOf(c.ImportImage(ctx, bytes.NewReader(nil), "")), client.ErrInvalidArgument},
		"host name":      {errOf(c.ImportImage(ctx, bytes.NewReader(archive), "host")), client.ErrInvalidArgument},
		"remove host":    {c.RemoveImage(ctx, "host"), client.ErrInvalidArgument},
		"remove missing": {c.RemoveImage(ctx, "sandboxd-daemon-test/missing:1"), client.ErrNotFound},
		"pull invalid":   {errOf(c.PullImage(ctx, "registry.invalid/x:1")), client.ErrUnavailable},
		"pull no ref":    {errOf(c.PullImage(ctx, "")), client.ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", what, tc.err, tc.want)
		}
	}

	// Any Content-Type but a tar stream's is refused.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/images", bytes.NewReader(archive))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a JSON Content-Type: %d, want 400", resp.StatusCode)
	}

	// Removal by the long name, path-escaped by the client.
	if err := c.RemoveImage(ctx, "docker.io/library/"+name); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveImage(ctx, name); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}

	// A pull from a registry on this host.
	img, _ := imagetest.Busybox("/bin/busybox")
	reg := imagetest.Registry(map[string]imagetest.Image{"daemon-test/pull:1": img})
	defer reg.Close()
	u, _ := url.Parse(reg.URL)
	ref := u.Host + "/daemon-test/pull:1"
	t.Cleanup(func() { _ = c.RemoveImage(context.Background(), ref) })
	pulled, err := c.PullImage(ctx, ref)
	if err != nil || len(pulled) != 1 || pulled[0].Name != ref || pulled[0].Digest != imagetest.Digest(img.Manifest()) {
		t.Fatalf("pull: %+v %v", pulled, err)
	}
	if err := c.RemoveImage(ctx, ref); err != nil {
		t.Fatal(err)
	}
}

func TestImagesTooLarge(t *testing.T) {
	c, _, _ := imagesDaemon(t, func(cfg *daemon.Config) { cfg.Containerd.MaxImageBytes = 64 << 10 })
	requireImages(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "sandboxd-daemon-test-too-large:1"
	archive := busyboxArchive(t, name)
	_, err := c.ImportImage(ctx, bytes.NewReader(archive), "")
	if !errors.Is(err, client.ErrTooLarge) || !strings.Contains(err.Error(), "max_image_bytes") {
		t.Fatalf("import over the limit: %v", err)
	}
	if err := c.RemoveImage(ctx, name); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the refused image is there: %v", err)
	}
}

func TestImagesUnavailable(t *testing.T) {
	for what, edit := range map[string]func(*daemon.Config){
		"turned off":    func(cfg *daemon.Config) { cfg.Containerd.Enabled = false },
		"no containerd": func(cfg *daemon.Config) { cfg.Containerd.Socket = "/nonexistent/containerd.sock" },
	} {
		t.Run(what, func(t *testing.T) {
			c, _, _ := imagesDaemon(t, edit)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// A large upload is refused before it is sent.
			huge := &countReader{r: io.LimitReader(zeros{}, 1<<30)}
			if _, err := c.ImportImage(ctx, huge, ""); !errors.Is(err, client.ErrUnavailable) || huge.n > 1<<20 {
				t.Errorf("import of 1 GiB: %v after %d bytes were read", err, huge.n)
			}
			for op, err := range map[string]error{
				"list":   errOf(c.Images(ctx)),
				"import": errOf(c.ImportImage(ctx, bytes.NewReader(busyboxArchive(t, "x:1")), "")),
				"pull":   errOf(c.PullImage(ctx, "alpine")),
				"remove": c.RemoveImage(ctx, "alpine"),
			} {
				if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "containerd backend") {
					t.Errorf("%s: %v, want unavailable naming the containerd backend", op, err)
				} else {
					t.Logf("%s: %v", op, err)
				}
			}
		})
	}
}

// zeros reads zeros forever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countReader counts what was read of r.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestImagesUploadWithoutToken checks that an upload without the token is
// refused before its body is sent.
func TestImagesUploadWithoutToken(t *testing.T) {
	_, addr, _ := imagesDaemon(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, token := range []string{"", "not-the-token-not-the-token"} {
		c, err := client.New("http://"+addr, client.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		huge := &countReader{r: io.LimitReader(zeros{}, 1<<30)}
		if _, err := c.ImportImage(ctx, huge, ""); !errors.Is(err, client.ErrUnauthenticated) || huge.n > 1<<20 {
			t.Errorf("import with token %q: %v after %d bytes were read", token, err, huge.n)
		}
		c.Close()
	}
}
