package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/daemon/eventlog"
	"github.com/sandboxd/sandboxd/docs"
	filex "github.com/sandboxd/sandboxd/executors/file"
	"github.com/sandboxd/sandboxd/internal/tarfs"
	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

func umask(m int) int { return unix.Umask(m) }

// newServer returns a fasthttp server for one kind of listener.
func (d *Daemon) newServer(auth bool) *fasthttp.Server {
	h := d.handle
	if auth {
		h = d.authenticate(h)
	}
	return &fasthttp.Server{
		Name:               "sandboxd",
		Handler:            d.recoverPanics(h),
		ErrorHandler:       d.requestError,
		MaxRequestBodySize: int(d.cfg.MaxBodyBytes),
		// Bodies reach handlers as streams, so an oversized one can be
		// answered 413 (see readBody) instead of a reset connection.
		StreamRequestBody: true,
		// Image uploads the daemon would refuse are refused before their
		// body is sent, when the client waits for 100 Continue.
		ExpectHandler: d.expectContinue(auth),
		// Request headers beyond the read buffer get 431.
		ReadBufferSize: 16 << 10,
		// Streamed output goes out in large writes, not a syscall per 4 KiB.
		WriteBufferSize: 64 << 10,
		// Slow clients: the whole request must arrive in ReadTimeout; an
		// idle keep-alive connection is closed after IdleTimeout. Writes
		// of streamed answers have per-write deadlines instead of one
		// WriteTimeout, which would cut long streams.
		ReadTimeout:          d.cfg.HTTPReadTimeout.D(),
		IdleTimeout:          d.cfg.HTTPIdleTimeout.D(),
		CloseOnShutdown:      true,
		NoDefaultDate:        true,
		NoDefaultContentType: true,
		Logger:               fasthttpLogger{d},
	}
}

// fasthttpLogger sends fasthttp's own messages (broken connections and the
// like) to the daemon's log at debug level.
type fasthttpLogger struct{ d *Daemon }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.d.log.Debug(fmt.Sprintf(format, args...), "component", "http")
}

// requestError answers requests fasthttp could not read.
func (d *Daemon) requestError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, api.Errorf(api.ErrTooLarge, "the request body is larger than %d bytes", d.cfg.MaxBodyBytes))
	case errors.As(err, &small):
		// The one status outside the code table: RFC 6585's answer for
		// oversized headers, with the too_large code.
		writeJSON(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, api.ErrorBody{Error: api.ErrorInfo{Code: api.CodeTooLarge, Message: "the request headers are too large"}})
	case errors.As(err, &ne) && ne.Timeout():
		writeJSON(ctx, fasthttp.StatusRequestTimeout, api.ErrorBody{Error: api.ErrorInfo{Code: api.CodeDeadlineExceeded, Message: "the request did not arrive in time"}})
	default:
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, "malformed HTTP request: %v", err))
	}
}

// recoverPanics turns a panic in a handler into a 500 for that request; the
// daemon keeps serving. (fasthttp does not recover.)
func (d *Daemon) recoverPanics(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer func() {
			if r := recover(); r != nil {
				d.log.Error("panic in handler", "path", string(ctx.Path()), "panic", r, "stack", string(debug.Stack()))
				ctx.Response.Reset()
				writeError(ctx, api.Errorf(api.ErrInternal, "internal error while handling the request"))
			}
		}()
		h(ctx)
		d.metrics.request(ctx.Response.StatusCode())
	}
}

// authenticate requires the bearer token on every path but /v1/health.
func (d *Daemon) authenticate(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	want := []byte("Bearer " + d.token)
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/v1/health" {
			got := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
			if key := ctx.Request.Header.Peek("X-Session-API-Key"); len(got) == 0 && len(key) > 0 && bytes.HasPrefix(ctx.Path(), []byte("/openhands/")) {
				// OpenHands' runtime client sends the key in its own
				// header.
				got = append([]byte("Bearer "), key...)
			}
			if len(got) == 0 {
				writeError(ctx, api.Errorf(api.ErrUnauthenticated, "missing Authorization: Bearer <token> header"))
				return
			}
			if subtle.ConstantTimeCompare(got, want) != 1 {
				writeError(ctx, api.Errorf(api.ErrUnauthenticated, "wrong token"))
				return
			}
		}
		h(ctx)
	}
}

// handle routes a request.
func (d *Daemon) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	method := string(ctx.Method())
	switch path {
	case "/v1/health":
		if onlyMethod(ctx, method, "GET") {
			writeJSON(ctx, 200, api.Health{Status: "ok"})
		}
		return
	case "/v1/info":
		if onlyMethod(ctx, method, "GET") {
			writeJSON(ctx, 200, d.info(ctx))
		}
		return
	case "/metrics":
		if onlyMethod(ctx, method, "GET") {
			d.serveMetrics(ctx)
		}
		return
	case "/v1/sandboxes":
		switch method {
		case "GET":
			writeJSON(ctx, 200, api.SandboxList{Sandboxes: d.mgr.list()})
		case "POST":
			d.createSandbox(ctx)
		default:
			onlyMethod(ctx, method, "GET", "POST")
		}
		return
	case "/v1/images":
		switch method {
		case "GET":
			d.listImages(ctx)
		case "POST":
			d.importImage(ctx)
		default:
			onlyMethod(ctx, method, "GET", "POST")
		}
		return
	case "/mcp":
		d.mcp(ctx)
		return
	case "/v1/openapi.yaml":
		if onlyMethod(ctx, method, "GET") {
			ctx.SetContentType("application/yaml")
			ctx.SetBody(docs.OpenAPI)
		}
		return
	case "/v1/images/pull":
		if onlyMethod(ctx, method, "POST") {
			d.pullImage(ctx)
		}
		return
	}
	if strings.HasPrefix(path, "/v1/images/") {
		d.image(ctx, method)
		return
	}
	if rest, ok := strings.CutPrefix(path, "/openhands/"); ok {
		d.openhands(ctx, rest)
		return
	}
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		writeError(ctx, api.Errorf(api.ErrNotFound, "no such endpoint: %s", path))
		return
	}
	parts := strings.Split(rest, "/")
	id := parts[0]
	if !idRE.MatchString(id) {
		writeError(ctx, api.Errorf(api.ErrNotFound, "sandbox %q does not exist", id))
		return
	}
	switch {
	case len(parts) == 1:
		switch method {
		case "GET":
			s, err := d.mgr.get(id)
			if err != nil {
				writeError(ctx, err)
				return
			}
			writeJSON(ctx, 200, s.view())
		case "DELETE":
			if err := d.mgr.delete(ctx, id, "deleted by a client"); err != nil {
				writeError(ctx, err)
				return
			}
			ctx.SetStatusCode(fasthttp.StatusNoContent)
		default:
			onlyMethod(ctx, method, "GET", "DELETE")
		}
	case len(parts) == 2 && parts[1] == "actions":
		if onlyMethod(ctx, method, "POST") {
			d.action(ctx, id)
		}
	case len(parts) == 2 && parts[1] == "files":
		switch method {
		case "GET":
			d.download(ctx, id)
		case "PUT":
			d.upload(ctx, id)
		default:
			onlyMethod(ctx, method, "GET", "PUT")
		}
	case len(parts) == 2 && parts[1] == "events":
		if onlyMethod(ctx, method, "GET") {
			d.events(ctx, id)
		}
	case len(parts) == 4 && parts[1] == "events" && parts[3] == "output":
		if onlyMethod(ctx, method, "GET") {
			d.output(ctx, id, parts[2])
		}
	default:
		writeError(ctx, api.Errorf(api.ErrNotFound, "no such endpoint: %s", path))
	}
}

// onlyMethod answers a wrong method and reports whether method is allowed.
func onlyMethod(ctx *fasthttp.RequestCtx, method string, allowed ...string) bool {
	for _, m := range allowed {
		if method == m {
			return true
		}
	}
	ctx.Response.Header.Set("Allow", strings.Join(allowed, ", "))
	writeError(ctx, api.Errorf(api.ErrInvalidArgument, "method %s is not allowed on %s (use %s)", method, ctx.Path(), strings.Join(allowed, " or ")))
	return false
}

// drainLimit bounds how much of an oversized body is read and dropped so
// that its sender gets to read the 413.
const drainLimit = 64 << 20

// readBody reads the request body, up to the configured limit. An oversized
// body is drained (up to drainLimit) before the 413, because closing a
// connection with unread data makes the kernel reset it, and the client
// would see a broken connection instead of the answer.
func (d *Daemon) readBody(ctx *fasthttp.RequestCtx) ([]byte, error) {
	r := ctx.RequestBodyStream()
	if r == nil {
		return ctx.PostBody(), nil
	}
	max := d.cfg.MaxBodyBytes
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, api.Errorf(api.ErrInvalidArgument, "read request body: %v", err)
	}
	if int64(len(b)) > max {
		_, _ = io.CopyN(io.Discard, r, drainLimit)
		ctx.SetConnectionClose()
		return nil, api.Errorf(api.ErrTooLarge, "the request body is larger than %d bytes", max)
	}
	return b, nil
}

func (d *Daemon) createSandbox(ctx *fasthttp.RequestCtx) {
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	req, err := api.DecodeCreateSandbox(body)
	if err != nil {
		writeError(ctx, err)
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.mgr.create(cctx, req)
	if err != nil {
		writeError(ctx, err)
		return
	}
	ctx.Response.Header.Set("Location", "/v1/sandboxes/"+sb.ID)
	writeJSON(ctx, fasthttp.StatusCreated, sb)
}

// commitAfter is how long a streamed action may run quietly before its
// answer is committed as 200; refusals (409, ...) come well before.
const commitAfter = 100 * time.Millisecond

// action runs POST /v1/sandboxes/{id}/actions.
func (d *Daemon) action(ctx *fasthttp.RequestCtx, id string) {
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	a, err := api.DecodeAction(body)
	if err != nil {
		writeError(ctx, err)
		return
	}
	s, err := d.mgr.get(id)
	if err != nil {
		writeError(ctx, err)
		return
	}
	if !acceptsNDJSON(ctx) {
		obs, err := s.act(a, nil)
		if err != nil {
			writeError(ctx, err)
			return
		}
		writeJSON(ctx, 200, obs)
		return
	}
	live := newLiveStream()
	type result struct {
		obs api.Observation
		err error
	}
	done := make(chan result, 1)
	go func() {
		obs, err := s.act(a, live)
		done <- result{obs, err}
	}()
	finish := func(r result) {
		if r.err != nil {
			info := errorInfo(r.err)
			live.finish(mustLine(api.StreamLine{Type: api.LineError, Error: &info}))
			return
		}
		live.finish(observationLine(&r.obs))
	}
	timer := time.NewTimer(commitAfter)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			// Nothing was streamed yet: a plain error answer.
			writeError(ctx, r.err)
			return
		}
		finish(r)
	case <-live.started:
		go func() { finish(<-done) }()
	case <-timer.C:
		go func() { finish(<-done) }()
	}
	d.stream(ctx, "application/x-ndjson", live.writeTo)
}

// stream answers 200 with a body written by body straight onto the
// connection. The connection is hijacked: fasthttp's own body streaming
// goes through an in-memory pipe, an extra copy and goroutine hop per chunk
// that a stream of gigabytes feels. The answer ends the connection
// (Connection: close), which also marks the end of the body. body runs
// after the handler returned, so it must not touch the request; a panic in
// it ends that stream only.
func (d *Daemon) stream(ctx *fasthttp.RequestCtx, contentType string, body func(w *bufio.Writer, conn net.Conn)) {
	d.streamWith(ctx, contentType, "", body)
}

// streamWith is stream with extra header lines ("Name: value\r\n" each).
func (d *Daemon) streamWith(ctx *fasthttp.RequestCtx, contentType, headers string, body func(w *bufio.Writer, conn net.Conn)) {
	ctx.SetStatusCode(200)
	ctx.HijackSetNoResponse(true)
	// The hijacked connection fasthttp hands over wraps the real one for
	// reading; writes may go to the real one, whose ReadFrom (sendfile,
	// splice) the wrapper hides. The request is fully read by then.
	raw := ctx.Conn()
	ctx.Hijack(func(hj net.Conn) {
		c := raw
		if c == nil {
			c = hj
		}
		defer func() {
			if r := recover(); r != nil {
				d.log.Error("panic in stream writer", "panic", r, "stack", string(debug.Stack()))
			}
		}()
		w := bufio.NewWriterSize(c, 64<<10)
		deadline(c)
		w.WriteString("HTTP/1.1 200 OK\r\nServer: sandboxd\r\nContent-Type: " + contentType + "\r\n" + headers + "Cache-Control: no-store\r\nConnection: close\r\n\r\n")
		body(w, c)
		deadline(c)
		w.Flush()
	})
}

func acceptsNDJSON(ctx *fasthttp.RequestCtx) bool {
	return bytes.Contains(ctx.Request.Header.Peek(fasthttp.HeaderAccept), []byte("application/x-ndjson"))
}

// observationLine renders the final line of a streamed answer. The
// observation may carry megabytes of output: it is encoded once, not
// re-validated and copied by encoding/json around its MarshalJSON.
func observationLine(o *api.Observation) []byte {
	b, err := o.MarshalJSON()
	if err != nil {
		return mustLine(api.StreamLine{Type: api.LineObservation, Observation: o})
	}
	const head = `{"type":"observation","observation":`
	line := make([]byte, 0, len(head)+len(b)+2)
	line = append(line, head...)
	line = append(line, b...)
	return append(line, "}\n"...)
}

func mustLine(l api.StreamLine) []byte {
	b, err := jsonMarshal(l)
	if err != nil {
		info := api.ErrorInfo{Code: api.CodeInternal, Message: "encode answer: " + err.Error()}
		b, _ = jsonMarshal(api.StreamLine{Type: api.LineError, Error: &info})
	}
	return append(b, '\n')
}

// events serves GET /v1/sandboxes/{id}/events?after=SEQ&follow=1.
func (d *Daemon) events(ctx *fasthttp.RequestCtx, id string) {
	args := ctx.QueryArgs()
	var after int64
	if v := args.Peek("after"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			writeError(ctx, api.Errorf(api.ErrInvalidArgument, "query parameter \"after\" must be a seq number >= 0, not %q", v))
			return
		}
		after = n
	}
	follow := false
	if v := string(args.Peek("follow")); v != "" {
		switch v {
		case "1", "true":
			follow = true
		case "0", "false":
		default:
			writeError(ctx, api.Errorf(api.ErrInvalidArgument, "query parameter \"follow\" must be 1 or 0, not %q", v))
			return
		}
	}
	s, err := d.mgr.get(id)
	if err != nil {
		writeError(ctx, err)
		return
	}
	d.stream(ctx, "application/x-ndjson", func(w *bufio.Writer, conn net.Conn) {
		write := func(_ int64, ev []byte) error {
			deadline(conn)
			if _, err := w.Write(ev); err != nil {
				return err
			}
			return w.WriteByte('\n')
		}
		last, err := s.log.Each(after, write)
		if err != nil || !follow {
			w.Flush()
			return
		}
		heartbeat := time.NewTicker(heartbeatEvery)
		defer heartbeat.Stop()
		for {
			ch := s.log.Changed()
			if last, err = s.log.Each(last, write); err != nil {
				if errors.Is(err, eventlog.ErrClosed) {
					w.WriteString(endLine(d.stopping.Load()))
				}
				w.Flush()
				return
			}
			deadline(conn)
			if err := w.Flush(); err != nil {
				return
			}
			select {
			case <-ch:
			case <-heartbeat.C:
				deadline(conn)
				w.WriteString(`{"type":"heartbeat"}` + "\n")
				if err := w.Flush(); err != nil {
					return
				}
			case <-s.gone:
				// Deleted, or the daemon is stopping: any last events were
				// appended before gone closed only if they raced; read them.
				s.log.Each(last, write)
				w.WriteString(endLine(d.stopping.Load()))
				w.Flush()
				return
			case <-d.stop:
				w.WriteString(endLine(true))
				w.Flush()
				return
			}
		}
	})
}

func endLine(shutdown bool) string {
	reason := "the sandbox was deleted"
	if shutdown {
		reason = "the daemon is shutting down"
	}
	return `{"type":"end","reason":"` + reason + `"}` + "\n"
}

// output serves GET /v1/sandboxes/{id}/events/{seq}/output?stream=: the
// full recorded output of an action.
func (d *Daemon) output(ctx *fasthttp.RequestCtx, id, seqs string) {
	seq, err := strconv.ParseInt(seqs, 10, 64)
	if err != nil || seq < 1 {
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, "%q is not an event seq", seqs))
		return
	}
	stream := string(ctx.QueryArgs().Peek("stream"))
	switch stream {
	case "", api.StreamStdout, api.StreamStderr, api.StreamPTY:
	default:
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, "query parameter \"stream\" must be stdout, stderr or pty, not %q", stream))
		return
	}
	s, err := d.mgr.get(id)
	if err != nil {
		writeError(ctx, err)
		return
	}
	if _, err := s.log.Event(seq); err != nil {
		writeError(ctx, err)
		return
	}
	d.stream(ctx, "application/octet-stream", func(w *bufio.Writer, conn net.Conn) {
		_, _ = s.log.Output(seq, stream, deadlineWriter{w, conn})
	})
}

// download serves GET /v1/sandboxes/{id}/files?path=P: a file's bytes, or
// a directory as a tar stream.
func (d *Daemon) download(ctx *fasthttp.RequestCtx, id string) {
	s, fx, ok := d.filesOf(ctx, id)
	if !ok {
		return
	}
	dl, err := fx.Open(pathArg(ctx))
	if err != nil {
		writeError(ctx, err)
		return
	}
	// The download runs after the handler: it holds the sandbox busy
	// (no idle reaping) until it is sent.
	done := s.busy()
	dl.OnClose(done)
	if dl.Dir {
		d.stream(ctx, "application/x-tar", func(w *bufio.Writer, conn net.Conn) {
			if _, err := dl.WriteTo(deadlineWriter{w, conn}); err != nil {
				d.log.Debug("download", "sandbox", id, "path", dl.Path, "err", err)
			}
		})
		return
	}
	d.streamWith(ctx, "application/octet-stream", "Content-Length: "+strconv.FormatInt(dl.Size, 10)+"\r\n", func(w *bufio.Writer, conn net.Conn) {
		// Send the headers, then let the file go to the socket directly
		// (sendfile) with a deadline renewed as it progresses.
		if err := w.Flush(); err != nil {
			dl.Close()
			return
		}
		if _, err := dl.WriteTo(deadlineConn{conn}); err != nil {
			d.log.Debug("download", "sandbox", id, "path", dl.Path, "err", err)
		}
	})
}

// upload serves PUT /v1/sandboxes/{id}/files?path=P: the body is the file's
// bytes, or with Content-Type application/x-tar an archive extracted into
// directory P, all or nothing.
func (d *Daemon) upload(ctx *fasthttp.RequestCtx, id string) {
	s, fx, ok := d.filesOf(ctx, id)
	if !ok {
		return
	}
	p := pathArg(ctx)
	var err error
	// Never PostBody on a streamed request: it reads the whole body into
	// memory.
	var body io.Reader
	if r := ctx.RequestBodyStream(); r != nil {
		body = deadlineReader{r, ctx.Conn()}
	} else {
		body = bytes.NewReader(ctx.PostBody())
	}
	done := s.busy()
	defer done()
	var res filex.Transfer
	if mt, _, _ := mime.ParseMediaType(string(ctx.Request.Header.ContentType())); mt == "application/x-tar" {
		res, err = fx.ExtractTar(p, body, tarfs.Limits{MaxBytes: d.cfg.Files.MaxTransferBytes, MaxEntries: d.cfg.Files.MaxTransferEntries})
	} else {
		res, err = fx.Upload(p, body, d.cfg.Files.MaxTransferBytes)
	}
	if err != nil {
		// Read (a bounded part of) what the client is still sending, so
		// it gets to read this answer rather than a reset connection; then
		// close, as the rest is not read.
		_, _ = io.CopyN(io.Discard, body, drainLimit)
		ctx.SetConnectionClose()
		writeError(ctx, err)
		return
	}
	writeJSON(ctx, 200, api.TransferResult{Path: res.Path, Files: res.Files, Bytes: res.Bytes})
}

// filesOf finds the sandbox and its file executor for a files endpoint, or
// answers the error.
func (d *Daemon) filesOf(ctx *fasthttp.RequestCtx, id string) (*sandbox, *filex.Executor, bool) {
	s, err := d.mgr.get(id)
	if err == nil {
		var fx *filex.Executor
		if fx, err = s.files(); err == nil {
			return s, fx, true
		}
	}
	writeError(ctx, err)
	return nil, nil, false
}

// pathArg is the path query parameter ("" is the workdir).
func pathArg(ctx *fasthttp.RequestCtx) string {
	return string(ctx.QueryArgs().Peek("path"))
}

// deadlineReader renews the connection's read deadline before each read of
// a request body, so a long upload is bounded by its progress, not by the
// server's ReadTimeout for a whole request.
type deadlineReader struct {
	r    io.Reader
	conn net.Conn
}

func (d deadlineReader) Read(p []byte) (int, error) {
	_ = d.conn.SetReadDeadline(time.Now().Add(streamWriteTimeout))
	return d.r.Read(p)
}

// deadlineConn renews the write deadline before each write and keeps the
// connection's ReadFrom (sendfile) visible to io.Copy.
type deadlineConn struct{ net.Conn }

func (d deadlineConn) Write(p []byte) (int, error) {
	deadline(d.Conn)
	return d.Conn.Write(p)
}

func (d deadlineConn) ReadFrom(r io.Reader) (int64, error) {
	// One deadline for the whole copy would cut a slow client off; renew
	// it per 16 MiB. Each piece is a *io.LimitedReader over the file, the
	// shape net's ReadFrom turns into sendfile.
	f, ok := r.(*os.File)
	if !ok {
		return io.Copy(writerOnly{d.Conn}, r)
	}
	var total int64
	for {
		deadline(d.Conn)
		n, err := io.Copy(d.Conn, &io.LimitedReader{R: f, N: 16 << 20})
		total += n
		if err != nil || n < 16<<20 {
			return total, err
		}
	}
}

// writerOnly hides a writer's ReadFrom, so io.Copy does not come back to it.
type writerOnly struct{ io.Writer }

// deadlineWriter renews the write deadline before each write.
type deadlineWriter struct {
	w    *bufio.Writer
	conn net.Conn
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	deadline(d.conn)
	return d.w.Write(p)
}
