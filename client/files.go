package client

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// ReadFile reads a text file of the sandbox (file.read). A binary file
// answers no content and a Note; Download reads any file byte-exact.
func (c *Client) ReadFile(ctx context.Context, id, path string) (*api.Observation, error) {
	return c.Act(ctx, id, api.ReadFile(path))
}

// WriteFile writes content to a file of the sandbox (file.write), creating
// its parents.
func (c *Client) WriteFile(ctx context.Context, id, path, content string) (*api.Observation, error) {
	return c.Act(ctx, id, api.WriteFile(path, content))
}

// Edit runs a str_replace_editor verb (file.edit); build the action with
// api.View, api.Create, api.StrReplace, api.Insert or api.UndoEdit.
func (c *Client) Edit(ctx context.Context, id string, a *api.Action) (*api.Observation, error) {
	if a.Kind != api.KindFileEdit {
		return nil, fmt.Errorf("client: Edit takes a file.edit action, not %q", a.Kind)
	}
	return c.Act(ctx, id, a)
}

func filesPath(id, path string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + "/files?path=" + url.QueryEscape(path)
}

// Upload streams r to the sandbox: to the file at path, or, when tar is
// set, as a tar archive extracted into the directory at path (all or
// nothing). size is the length of r, or -1 if unknown.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader, size int64, tar bool) (*api.TransferResult, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", c.base+filesPath(id, path), r)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	if tar {
		req.Header.Set("Content-Type", "application/x-tar")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: PUT files: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp)
	}
	var res api.TransferResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("client: decode answer: %w", err)
	}
	return &res, nil
}

// Download copies the file at path to w, or, for a directory, a tar
// stream of it (isTar reports which).
func (c *Client) Download(ctx context.Context, id, path string, w io.Writer) (isTar bool, n int64, err error) {
	rc, isTar, _, err := c.OpenDownload(ctx, id, path)
	if err != nil {
		return false, 0, err
	}
	defer rc.Close()
	// A large buffer, and w's own ReadFrom hidden (an *os.File's would
	// fall back to 32 KiB pieces for a network body).
	n, err = io.CopyBuffer(struct{ io.Writer }{w}, rc, make([]byte, 1<<20))
	return isTar, n, err
}

// OpenDownload starts a download: the body, whether it is a tar stream of a
// directory, and its size (-1 for a tar). Reading a file's body past its
// end fails if it arrived short. The caller closes it.
func (c *Client) OpenDownload(ctx context.Context, id, path string) (body io.ReadCloser, isTar bool, size int64, err error) {
	resp, err := c.do(ctx, "GET", filesPath(id, path), nil, "")
	if err != nil {
		return nil, false, 0, err
	}
	isTar = strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-tar")
	if isTar {
		return resp.Body, true, -1, nil
	}
	return &exactBody{ReadCloser: resp.Body, left: resp.ContentLength}, false, resp.ContentLength, nil
}

// exactBody turns a body that ends before its Content-Length into an error
// (the daemon ends the connection when a file shrank while it was sent).
type exactBody struct {
	io.ReadCloser
	left int64
}

func (b *exactBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// UploadPath uploads a local file, or a local directory's contents (as a
// tar stream built on the fly; symlinks are sent as links, other special
// files skipped), to path in the sandbox.
func (c *Client) UploadPath(ctx context.Context, id, local, path string) (*api.TransferResult, error) {
	st, err := os.Stat(local)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if !st.IsDir() {
		f, err := os.Open(local)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		defer f.Close()
		return c.Upload(ctx, id, path, f, st.Size(), false)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(local, pw)) }()
	res, err := c.Upload(ctx, id, path, pr, -1, true)
	pr.CloseWithError(io.ErrClosedPipe)
	return res, err
}

// tarDir writes the tree below dir to w as a tar stream.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !info.Mode().IsRegular() && !info.IsDir():
			return nil // FIFOs, sockets, devices
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
