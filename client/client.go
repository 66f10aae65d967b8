// Package client is the Go client of sandboxd. One *Client type serves
// every way of reaching a daemon:
//
//	c, err := client.New("http://127.0.0.1:7070", client.WithToken(tok)) // Remote
//	c, err := client.New("unix:///run/sandboxd/sandboxd.sock")          // Remote, local socket
//	c, err := client.StartLocal(ctx, client.LocalOptions{})             // Local: starts a daemon
//
// so switching how an agent reaches its sandboxes changes one line. Errors
// from the daemon keep their class: errors.Is(err, client.ErrNotFound).
//
// It depends on the standard library and the api package only.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// The error classes of the API; every error the daemon answers wraps one.
var (
	ErrInvalidArgument   = api.ErrInvalidArgument
	ErrUnauthenticated   = api.ErrUnauthenticated
	ErrPermissionDenied  = api.ErrPermissionDenied
	ErrNotFound          = api.ErrNotFound
	ErrConflict          = api.ErrConflict
	ErrTooLarge          = api.ErrTooLarge
	ErrResourceExhausted = api.ErrResourceExhausted
	ErrUnsupported       = api.ErrUnsupported
	ErrUnavailable       = api.ErrUnavailable
	ErrDeadlineExceeded  = api.ErrDeadlineExceeded
	ErrInternal          = api.ErrInternal
)

// Error is an error answered by the daemon.
type Error struct {
	Status  int // HTTP status
	Code    api.Code
	Message string
	// RetryAfter is how long the daemon asked to wait before trying
	// again (its Retry-After header, sent with an admission refusal); 0
	// when it did not say.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("sandboxd: %s (%s)", e.Message, e.Code) }

// Unwrap returns the sentinel of the error's code, so errors.Is works.
func (e *Error) Unwrap() error { return api.ErrorOf(e.Code) }

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host, no trailing slash
	token string
	hc    *http.Client
	close func() error
}

// Option configures New.
type Option func(*Client)

// WithToken sets the bearer token (needed over TCP, not on a unix socket).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient replaces the HTTP client (for custom TLS, proxies, ...).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the daemon at addr: http://HOST:PORT,
// https://HOST:PORT, tcp://HOST:PORT (plain HTTP) or unix:///PATH.
func New(addr string, opts ...Option) (*Client, error) {
	c := &Client{}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.DisableCompression = true
	// Streamed output arrives in large lines; read it in large pieces.
	tr.ReadBufferSize = 64 << 10
	tr.WriteBufferSize = 64 << 10
	switch {
	case strings.HasPrefix(addr, "unix://"):
		path := strings.TrimPrefix(addr, "unix://")
		if path == "" {
			return nil, fmt.Errorf("client: %q names no socket", addr)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		tr.Proxy = nil
		c.base = "http://sandboxd"
	case strings.HasPrefix(addr, "tcp://"):
		c.base = "http://" + strings.TrimPrefix(addr, "tcp://")
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.base = u.Scheme + "://" + u.Host
	default:
		return nil, fmt.Errorf("client: address %q must start with http://, https://, tcp:// or unix://", addr)
	}
	c.hc = &http.Client{Transport: tr}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// CloseIdle closes the connections the client keeps open for reuse; the
// next request opens a new one.
func (c *Client) CloseIdle() {
	if tr, ok := c.hc.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// Close releases the client; for a client made by StartLocal it also stops
// the daemon.
func (c *Client) Close() error {
	c.CloseIdle()
	if c.close != nil {
		f := c.close
		c.close = nil
		return f()
	}
	return nil
}

// do sends a request and returns the response of a 2xx answer; any other
// answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("client: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	retry := retryAfter(resp.Header.Get("Retry-After"), time.Now())
	var eb api.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: strings.TrimSpace(string(b)), RetryAfter: retry}
	}
	return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, RetryAfter: retry}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110, 10.2.3). Anything else, or a time already past, is 0.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseUint(h, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// codeForStatus classifies an answer that carried no error body (a proxy,
// or something that is not sandboxd).
func codeForStatus(status int) api.Code {
	switch status {
	case 400:
		return api.CodeInvalidArgument
	case 401:
		return api.CodeUnauthenticated
	case 403:
		return api.CodePermissionDenied
	case 404:
		return api.CodeNotFound
	case 409:
		return api.CodeConflict
	case 413, 431:
		return api.CodeTooLarge
	case 429:
		return api.CodeResourceExhausted
	case 501:
		return api.CodeUnsupported
	case 503:
		return api.CodeUnavailable
	case 504:
		return api.CodeDeadlineExceeded
	}
	return api.CodeInternal
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, "GET", path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBody(resp, v)
}

func decodeBody(resp *http.Response, v any) error {
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("client: decode answer: %w", err)
	}
	return nil
}

// Health checks that the daemon answers.
func (c *Client) Health(ctx context.Context) error {
	var h api.Health
	return c.getJSON(ctx, "/v1/health", &h)
}

// Info returns the daemon's version and backends.
func (c *Client) Info(ctx context.Context) (*api.Info, error) {
	var in api.Info
	return &in, c.getJSON(ctx, "/v1/info", &in)
}

// CreateSandbox creates a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	resp, err := c.do(ctx, "POST", "/v1/sandboxes", req, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sb api.Sandbox
	return &sb, decodeBody(resp, &sb)
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	return &sb, c.getJSON(ctx, "/v1/sandboxes/"+url.PathEscape(id), &sb)
}

// ListSandboxes returns every sandbox of the daemon.
func (c *Client) ListSandboxes(ctx context.Context) ([]api.Sandbox, error) {
	var l api.SandboxList
	return l.Sandboxes, c.getJSON(ctx, "/v1/sandboxes", &l)
}

// DeleteSandbox destroys a sandbox and everything in it.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	resp, err := c.do(ctx, "DELETE", "/v1/sandboxes/"+url.PathEscape(id), nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Act runs one action and returns its observation. A command that failed
// is an observation with its exit code, not an error.
func (c *Client) Act(ctx context.Context, id string, a *api.Action) (*api.Observation, error) {
	resp, err := c.do(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/actions", a, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var obs api.Observation
	return &obs, decodeBody(resp, &obs)
}

// Output is a chunk of output streamed while an action runs.
type Output struct {
	Stream string // stdout, stderr or pty
	Data   []byte
	// Dropped counts bytes the daemon left out of the stream because this
	// client read slower than the command wrote (the event log has them).
	Dropped int64
}

// ActStream runs one action, calling fn with its output as it arrives, and
// returns its observation. fn's Data is only valid during the call.
func (c *Client) ActStream(ctx context.Context, id string, a *api.Action, fn func(Output)) (*api.Observation, error) {
	resp, err := c.do(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/actions", a, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 256<<10)
	var scratch []byte
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("client: the stream ended without an observation: %w", io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("client: read stream: %w", err)
		}
		if len(line) == 0 {
			continue
		}
		if out, ok := parseOutputLineInto(line, &scratch); ok {
			if fn != nil {
				fn(out)
			}
			continue
		}
		var sl api.StreamLine
		if err := json.Unmarshal(line, &sl); err != nil {
			return nil, fmt.Errorf("client: bad stream line: %w", err)
		}
		switch sl.Type {
		case api.LineOutput:
			if fn != nil {
				data := []byte(sl.Data)
				if sl.DataB64 != nil {
					data = sl.DataB64
				}
				fn(Output{Stream: sl.Stream, Data: data, Dropped: sl.Dropped})
			}
		case api.LineObservation:
			if sl.Observation == nil {
				return nil, errors.New("client: observation line without an observation")
			}
			return sl.Observation, nil
		case api.LineError:
			if sl.Error == nil {
				return nil, errors.New("client: error line without an error")
			}
			return nil, &Error{Status: 200, Code: sl.Error.Code, Message: sl.Error.Message}
		}
	}
}

// readLine reads one line of any length (without its newline). The slice is
// valid until the next read.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return line, nil
		}
		return nil, err
	}
	buf := append([]byte(nil), line...)
	for {
		more, err := r.ReadSlice('\n')
		buf = append(buf, more...)
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				return buf, nil
			}
			return nil, err
		}
	}
}

// parseOutputLine decodes the output lines the daemon writes without going
// through encoding/json: streaming output is the client's hot path. Any
// line it does not recognise exactly is left to the general decoder.
func parseOutputLine(line []byte) (Output, bool) {
	var scratch []byte
	return parseOutputLineInto(line, &scratch)
}

// parseOutputLineInto is parseOutputLine decoding escapes into *scratch,
// which it reuses, rather than into a new slice per line.
func parseOutputLineInto(line []byte, scratch *[]byte) (Output, bool) {
	const head = `{"type":"output","stream":"`
	if !bytes.HasPrefix(line, []byte(head)) {
		return Output{}, false
	}
	rest := line[len(head):]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return Output{}, false
	}
	if bytes.IndexByte(rest[:q], '\\') >= 0 {
		return Output{}, false // an escaped name: leave it to encoding/json
	}
	stream := string(rest[:q])
	rest = rest[q:]
	const data = `","data":"`
	if len(rest) < len(data)+2 || !bytes.HasPrefix(rest, []byte(data)) || !bytes.HasSuffix(rest, []byte(`"}`)) {
		return Output{}, false
	}
	body := rest[len(data) : len(rest)-2]
	if bytes.IndexByte(body, '\\') < 0 {
		if bytes.IndexByte(body, '"') >= 0 {
			return Output{}, false
		}
		return Output{Stream: stream, Data: body}, true
	}
	out, ok := unescape((*scratch)[:0], body)
	if !ok {
		return Output{}, false
	}
	*scratch = out
	return Output{Stream: stream, Data: out}, true
}

// unescape appends to out the body of a JSON string (no surrounding quotes)
// with the escapes the daemon writes decoded; ok is false for anything else.
func unescape(out, b []byte) ([]byte, bool) {
	for i := 0; i < len(b); i++ {
		// Copy the run up to the next escape in one go.
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			j = len(b) - i
		}
		if bytes.IndexByte(b[i:i+j], '"') >= 0 {
			return nil, false
		}
		out = append(out, b[i:i+j]...)
		i += j
		if i >= len(b) {
			break
		}
		if i+1 >= len(b) {
			return nil, false
		}
		i++
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'u':
			if i+4 >= len(b) {
				return nil, false
			}
			v, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 16)
			if err != nil || v >= 0x80 {
				// Only control characters are \u-escaped by the daemon.
				return nil, false
			}
			out = append(out, byte(v))
			i += 4
		default:
			return nil, false
		}
	}
	return out, true
}

// Run runs a shell command in the sandbox's default bash session.
func (c *Client) Run(ctx context.Context, id, command string) (*api.Observation, error) {
	return c.Act(ctx, id, api.Run(command))
}

// Exec runs one process (no shell) in the sandbox.
func (c *Client) Exec(ctx context.Context, id string, argv ...string) (*api.Observation, error) {
	return c.Act(ctx, id, api.Exec(argv...))
}

// Events calls fn with each event of the sandbox's log after seq after. With
// follow it keeps waiting for new events until ctx ends, fn fails, or the
// daemon ends the stream (the sandbox was deleted or the daemon is stopping:
// then it returns nil).
func (c *Client) Events(ctx context.Context, id string, after int64, follow bool, fn func(api.Event) error) error {
	path := "/v1/sandboxes/" + url.PathEscape(id) + "/events?after=" + strconv.FormatInt(after, 10)
	if follow {
		path += "&follow=1"
	}
	resp, err := c.do(ctx, "GET", path, nil, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("client: read events: %w", err)
		}
		if len(line) == 0 {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("client: bad event line: %w", err)
		}
		switch ev.Type {
		case "heartbeat":
			continue
		case "end":
			return nil
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// Output copies the full recorded output of the action at seq (stream ""
// for all streams in arrival order) to w.
func (c *Client) Output(ctx context.Context, id string, seq int64, stream string, w io.Writer) (int64, error) {
	path := "/v1/sandboxes/" + url.PathEscape(id) + "/events/" + strconv.FormatInt(seq, 10) + "/output"
	if stream != "" {
		path += "?stream=" + url.QueryEscape(stream)
	}
	resp, err := c.do(ctx, "GET", path, nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(w, resp.Body)
}

// WaitHealthy polls /v1/health until it answers or ctx ends.
func (c *Client) WaitHealthy(ctx context.Context) error {
	for {
		if err := c.Health(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Metrics returns the daemon's unlabelled gauges and counters from
// /metrics (sandboxd_goroutines, sandboxd_resident_bytes,
// sandboxd_open_fds, sandboxd_actions_in_flight, ...), by name.
func (c *Client) Metrics(ctx context.Context) (map[string]float64, error) {
	resp, err := c.do(ctx, "GET", "/metrics", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
