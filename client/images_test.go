package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestImagesRequests checks what the image methods send: paths, escaping,
// bodies and their lengths (the daemon's side is tested in daemon/ and
// tests/).
func TestImagesRequests(t *testing.T) {
	type seen struct {
		method, uri, contentType string
		length                   int64
		chunked                  bool
		body                     string
	}
	var got seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = seen{r.Method, r.RequestURI, r.Header.Get("Content-Type"), r.ContentLength, len(r.TransferEncoding) > 0, string(b)}
		if r.Method == "DELETE" {
			if strings.Contains(r.RequestURI, "missing") {
				w.WriteHeader(404)
				w.Write([]byte(`{"error":{"code":"not_found","message":"no such image"}}`))
				return
			}
			w.WriteHeader(204)
			return
		}
		json.NewEncoder(w).Encode(api.ImageList{Images: []api.ImageInfo{{Name: "x:1", Size: 3}}})
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	if err := c.RemoveImage(ctx, "ghcr.io/org/tool:v2"); err != nil || got.method != "DELETE" || got.uri != "/v1/images/ghcr.io%2Forg%2Ftool:v2" {
		t.Errorf("remove: %v %+v", err, got)
	}
	if err := c.RemoveImage(ctx, "missing:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("remove missing: %v", err)
	}
	if err := c.RemoveImage(ctx, " "); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("remove no name: %v", err)
	}

	imgs, err := c.ImportImage(ctx, bytes.NewReader([]byte("abc")), "my tool:1")
	if err != nil || len(imgs) != 1 || imgs[0].Name != "x:1" {
		t.Fatalf("import: %+v %v", imgs, err)
	}
	if got.method != "POST" || got.uri != "/v1/images?name=my+tool%3A1" || got.contentType != "application/x-tar" || got.length != 3 || got.body != "abc" {
		t.Errorf("import of a bytes.Reader sent %+v", got)
	}
	f := filepath.Join(t.TempDir(), "img.tar")
	os.WriteFile(f, []byte("0123456789"), 0o644)
	fh, _ := os.Open(f)
	defer fh.Close()
	fh.Seek(4, io.SeekStart)
	if _, err := c.ImportImage(ctx, fh, ""); err != nil || got.uri != "/v1/images" || got.length != 6 || got.body != "456789" {
		t.Errorf("import of a file from offset 4: %v %+v", err, got)
	}
	// The caller's file is not closed by the request.
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		t.Errorf("the file was closed: %v", err)
	}
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("streamed")); pw.Close() }()
	if _, err := c.ImportImage(ctx, pr, ""); err != nil || !got.chunked || got.body != "streamed" {
		t.Errorf("import of a pipe: %v %+v", err, got)
	}

	if _, err := c.PullImage(ctx, "alpine:3.20"); err != nil || got.uri != "/v1/images/pull" || got.body != `{"ref":"alpine:3.20"}` {
		t.Errorf("pull: %v %+v", err, got)
	}
	if imgs, err := c.Images(ctx); err != nil || got.method != "GET" || got.uri != "/v1/images" || len(imgs) != 1 {
		t.Errorf("list: %+v %v %+v", imgs, err, got)
	}
}
