package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"io"
	"mime"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/valyala/fasthttp"
)

// The images endpoints: GET and POST /v1/images, POST /v1/images/pull,
// DELETE /v1/images/{name}. Images belong to the backend that keeps them
// (containerd's, through backends.ImageStore); when it is not available
// they answer 503 with the reason.

// How long image operations may take, whatever the client does; an import
// is also bounded by its upload's progress (see deadlineReader).
const (
	importTimeout = 6 * time.Hour
	pullTimeout   = time.Hour
	imageTimeout  = 2 * time.Minute
)

// imageStore returns the image store, or why images cannot be handled.
func (d *Daemon) imageStore(ctx context.Context) (backends.ImageStore, error) {
	b, ok := d.backends[api.BackendContainerd]
	if !ok {
		return nil, api.Errorf(api.ErrUnavailable, "images live in the containerd backend, which this daemon does not have")
	}
	err := b.Available(ctx)
	is, ok := b.(backends.ImageStore)
	switch {
	case err != nil:
		return nil, api.Errorf(api.ErrUnavailable, "images live in the containerd backend, which is not available: %v", err)
	case !ok:
		return nil, api.Errorf(api.ErrUnavailable, "images live in the containerd backend, which keeps none in this build")
	}
	return is, nil
}

// opContext is the context of an image operation: it ends after timeout,
// or when the daemon's shutdown grace period is over.
func (d *Daemon) opContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-d.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// listImages serves GET /v1/images.
func (d *Daemon) listImages(ctx *fasthttp.RequestCtx) {
	opctx, cancel := d.opContext(imageTimeout)
	defer cancel()
	store, err := d.imageStore(opctx)
	if err == nil {
		var imgs []api.ImageInfo
		if imgs, err = store.Images(opctx); err == nil {
			writeJSON(ctx, 200, api.ImageList{Images: imgs})
			return
		}
	}
	writeError(ctx, err)
}

// expectContinue answers requests that wait for "100 Continue" before
// they send their body (the Go client's image uploads do): an image upload
// the daemon would refuse before reading it (not a tar stream, or no image
// store, no token) is refused at once, with its error, instead of after
// the client sent gigabytes into a closed connection. Anything else
// continues.
func (d *Daemon) expectContinue(auth bool) func(ctx *fasthttp.RequestCtx) int {
	want := []byte("Bearer " + d.token)
	return func(ctx *fasthttp.RequestCtx) int {
		if !ctx.IsPost() || string(ctx.Path()) != "/v1/images" {
			return fasthttp.StatusContinue
		}
		var err error
		if got := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization); auth && len(got) == 0 {
			err = api.Errorf(api.ErrUnauthenticated, "missing Authorization: Bearer <token> header")
		} else if auth && subtle.ConstantTimeCompare(got, want) != 1 {
			err = api.Errorf(api.ErrUnauthenticated, "wrong token")
		} else {
			err = checkImageContentType(ctx)
		}
		if err == nil {
			opctx, cancel := d.opContext(imageTimeout)
			_, err = d.imageStore(opctx)
			cancel()
		}
		if err == nil {
			return fasthttp.StatusContinue
		}
		writeError(ctx, err)
		d.metrics.request(ctx.Response.StatusCode())
		return ctx.Response.StatusCode()
	}
}

// checkImageContentType refuses bodies that are not tar streams.
func checkImageContentType(ctx *fasthttp.RequestCtx) error {
	ct := string(ctx.Request.Header.ContentType())
	if ct == "" {
		return nil
	}
	switch mt, _, _ := mime.ParseMediaType(ct); mt {
	case "application/x-tar", "application/octet-stream", "application/gzip", "application/x-gzip":
		return nil
	}
	return api.Errorf(api.ErrInvalidArgument, "Content-Type %q: an image archive is sent as a tar stream (application/x-tar)", ct)
}

// importImage serves POST /v1/images?name=NAME: the body is an image
// archive, read as it arrives (never whole in memory) and bounded by
// containerd.max_image_bytes.
func (d *Daemon) importImage(ctx *fasthttp.RequestCtx) {
	// Never PostBody on a streamed request: it reads the whole body into
	// memory.
	var body io.Reader
	if r := ctx.RequestBodyStream(); r != nil {
		body = deadlineReader{r, ctx.Conn()}
	} else {
		body = bytes.NewReader(ctx.PostBody())
	}
	refuse := func(err error) {
		// Read (a bounded part of) what the client is still sending, so
		// it gets to read this answer rather than a reset connection;
		// then close, as the rest is not read.
		_, _ = io.CopyN(io.Discard, body, drainLimit)
		ctx.SetConnectionClose()
		writeError(ctx, err)
	}
	if err := checkImageContentType(ctx); err != nil {
		refuse(err)
		return
	}
	name := string(ctx.QueryArgs().Peek("name"))
	opctx, cancel := d.opContext(importTimeout)
	defer cancel()
	store, err := d.imageStore(opctx)
	if err != nil {
		refuse(err)
		return
	}
	max := d.cfg.Containerd.MaxImageBytes
	imgs, err := store.ImportImage(opctx, &capReader{r: body, left: max, max: max}, name)
	if err != nil {
		d.log.Info("image import refused", "err", err)
		refuse(err)
		return
	}
	// An archive may end before the body does (padding after its end
	// marker): read the rest so the connection can serve another request.
	if n, _ := io.CopyN(io.Discard, body, drainLimit); n == drainLimit {
		ctx.SetConnectionClose()
	}
	d.log.Info("images imported", "images", imageNames(imgs))
	writeJSON(ctx, 200, api.ImageList{Images: imgs})
}

// pullImage serves POST /v1/images/pull.
func (d *Daemon) pullImage(ctx *fasthttp.RequestCtx) {
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	req, err := api.DecodePullImage(body)
	if err != nil {
		writeError(ctx, err)
		return
	}
	opctx, cancel := d.opContext(pullTimeout)
	defer cancel()
	store, err := d.imageStore(opctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	imgs, err := store.PullImage(opctx, req.Ref)
	if err != nil {
		d.log.Info("image pull failed", "ref", req.Ref, "err", err)
		writeError(ctx, err)
		return
	}
	d.log.Info("image pulled", "images", imageNames(imgs))
	writeJSON(ctx, 200, api.ImageList{Images: imgs})
}

// image serves /v1/images/{name}: DELETE removes the image. The name is
// path-escaped by clients (names hold "/" and ":"), so it is read from the
// request's path as sent.
func (d *Daemon) image(ctx *fasthttp.RequestCtx, method string) {
	name, ok := imageNameArg(ctx)
	if !ok {
		writeError(ctx, api.Errorf(api.ErrNotFound, "no such endpoint: %s", ctx.Path()))
		return
	}
	if !onlyMethod(ctx, method, "DELETE") {
		return
	}
	opctx, cancel := d.opContext(imageTimeout)
	defer cancel()
	store, err := d.imageStore(opctx)
	if err == nil {
		err = store.RemoveImage(opctx, name)
	}
	if err != nil {
		writeError(ctx, err)
		return
	}
	d.log.Info("image removed", "image", name)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// imageNameArg is the {name} of /v1/images/{name}, unescaped once.
func imageNameArg(ctx *fasthttp.RequestCtx) (string, bool) {
	const prefix = "/v1/images/"
	raw, ok := strings.CutPrefix(string(ctx.Request.URI().PathOriginal()), prefix)
	if !ok {
		// Not as sent: the path as the router saw it.
		raw, _ = strings.CutPrefix(string(ctx.Path()), prefix)
		return raw, raw != ""
	}
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	name, err := url.PathUnescape(raw)
	if err != nil || name == "" {
		return "", false
	}
	return name, true
}

func imageNames(imgs []api.ImageInfo) []string {
	out := make([]string, len(imgs))
	for i, img := range imgs {
		out[i] = img.Name
	}
	return out
}

// capReader reads at most max bytes of r; one byte more is too_large.
type capReader struct {
	r         io.Reader
	left, max int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.r.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, api.Errorf(api.ErrTooLarge, "the image archive is larger than %d bytes (containerd.max_image_bytes)", c.max)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
