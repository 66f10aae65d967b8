package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/daemon/eventlog"
	"github.com/valyala/fasthttp"
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[api.Code]int{
	api.CodeInvalidArgument:   fasthttp.StatusBadRequest,
	api.CodeUnauthenticated:   fasthttp.StatusUnauthorized,
	api.CodePermissionDenied:  fasthttp.StatusForbidden,
	api.CodeNotFound:          fasthttp.StatusNotFound,
	api.CodeConflict:          fasthttp.StatusConflict,
	api.CodeTooLarge:          fasthttp.StatusRequestEntityTooLarge,
	api.CodeResourceExhausted: fasthttp.StatusTooManyRequests,
	api.CodeUnsupported:       fasthttp.StatusNotImplemented,
	api.CodeUnavailable:       fasthttp.StatusServiceUnavailable,
	api.CodeDeadlineExceeded:  fasthttp.StatusGatewayTimeout,
	api.CodeInternal:          fasthttp.StatusInternalServerError,
}

// errorInfo classifies err: the code and the message a client sees.
func errorInfo(err error) api.ErrorInfo {
	code, msg := api.CodeOf(err), err.Error()
	var ne net.Error
	if code == api.CodeInternal {
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			code = api.CodeDeadlineExceeded
		case errors.Is(err, context.Canceled), errors.Is(err, eventlog.ErrClosed):
			code = api.CodeUnavailable
		case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
			// What the daemon writes itself (metadata, event logs, the
			// process sandboxes' workspaces) is in its state directory: a
			// full disk there is the host's condition, not a bug, and
			// new work waits until space is freed (as the event log
			// says when it cannot append).
			code, msg = api.CodeUnavailable, "the state directory is full: "+msg
		}
	}
	return api.ErrorInfo{Code: code, Message: msg}
}

// writeError answers err with its status and the error body.
func writeError(ctx *fasthttp.RequestCtx, err error) {
	info := errorInfo(err)
	status := statusOf[info.Code]
	if info.Code == api.CodeResourceExhausted {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	if info.Code == api.CodeUnauthenticated {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
	}
	writeJSON(ctx, status, api.ErrorBody{Error: info})
}

// writeJSON answers v as JSON with status.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := jsonMarshal(v)
	if err != nil {
		status = fasthttp.StatusInternalServerError
		b, _ = jsonMarshal(api.ErrorBody{Error: api.ErrorInfo{Code: api.CodeInternal, Message: "encode answer: " + err.Error()}})
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// jsonMarshal is json.Marshal without HTML escaping: terminal output is full
// of < > & and no reader of this API embeds it in HTML.
func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
