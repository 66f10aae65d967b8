package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// Images lists the images containerd sandboxes can be created from: the
// built-in "host" image first, then the imported and pulled ones.
func (c *Client) Images(ctx context.Context) ([]api.ImageInfo, error) {
	var l api.ImageList
	return l.Images, c.getJSON(ctx, "/v1/images", &l)
}

// ImportImage streams an image archive to the daemon: a `docker save` tar
// or an OCI image layout tar, optionally gzip-compressed. name, if not
// empty, names the archive's one image (needed when the archive names
// none). It returns the images stored, unpacked and ready for
// CreateSandbox. An archive that is not an image is ErrInvalidArgument.
//
// r is sent as it is read; when its length is known (an *os.File of a
// regular file, or anything with a Len() int method such as
// *bytes.Reader) the request carries it as Content-Length.
func (c *Client) ImportImage(ctx context.Context, r io.Reader, name string) ([]api.ImageInfo, error) {
	path := "/v1/images"
	if name != "" {
		path += "?name=" + url.QueryEscape(name)
	}
	// A nil body would be sent as no body at all; an empty one is the
	// daemon's to refuse.
	if r == nil {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+path, io.NopCloser(r))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.ContentLength = readerLen(r)
	if req.ContentLength == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/x-tar")
	if req.Body != http.NoBody {
		// The daemon refuses an upload it cannot take (containerd down)
		// before the archive is sent, rather than after.
		req.Header.Set("Expect", "100-continue")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: POST /v1/images: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp)
	}
	var l api.ImageList
	return l.Images, decodeBody(resp, &l)
}

// readerLen is the number of bytes left in r, or -1 if unknown.
func readerLen(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case *os.File:
		st, err := v.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > st.Size() {
			return -1
		}
		return st.Size() - off
	}
	return -1
}

// PullImage has the daemon pull an image from its registry (anonymously)
// and unpack it. A registry the daemon's host cannot reach is
// ErrUnavailable.
func (c *Client) PullImage(ctx context.Context, ref string) ([]api.ImageInfo, error) {
	resp, err := c.do(ctx, "POST", "/v1/images/pull", api.PullImageRequest{Ref: ref}, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l api.ImageList
	return l.Images, decodeBody(resp, &l)
}

// RemoveImage removes an image (named as Images names it, or by the long
// form of its reference) and the content no other image shares. An image
// a sandbox was made from is ErrConflict; a missing one ErrNotFound.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("client: RemoveImage: no image named: %w", ErrInvalidArgument)
	}
	resp, err := c.do(ctx, "DELETE", "/v1/images/"+url.PathEscape(name), nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
