package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// A panic in a handler answers 500 internal for that request, is logged,
// and the server goes on serving the next request on the same connection
// and on others (fasthttp does not recover by itself).
func TestPanicInHandlerIs500(t *testing.T) {
	var logged bytes.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logged, nil)), metrics: newMetrics()}
	h := d.recoverPanics(func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/panic":
			ctx.SetBodyString("half an answer")
			panic("boom")
		case "/nil":
			var m map[string]int
			m["x"] = 1
		default:
			ctx.SetBodyString("fine")
		}
	})
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	for _, tc := range []struct {
		path   string
		status int
	}{{"/panic", 500}, {"/ok", 200}, {"/nil", 500}, {"/ok", 200}} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://sandboxd" + tc.path)
		if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if resp.StatusCode() != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.path, resp.StatusCode(), tc.status)
		}
		if tc.status == 500 {
			var eb api.ErrorBody
			if err := json.Unmarshal(resp.Body(), &eb); err != nil || eb.Error.Code != api.CodeInternal || eb.Error.Message == "" {
				t.Fatalf("%s: body %q, want an internal error body and nothing of the half answer", tc.path, resp.Body())
			}
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if !bytes.Contains(logged.Bytes(), []byte("panic in handler")) || !bytes.Contains(logged.Bytes(), []byte("boom")) {
		t.Errorf("the panic was not logged: %s", logged.String())
	}
}
