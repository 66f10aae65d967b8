package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/openapispec"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// This file keeps docs/openapi.yaml honest: the paths and methods it
// documents are exactly the routes (*Daemon).handle serves, checked against
// the real handler; each route's answer in a real exchange has a status the
// document lists; the document's error codes are exactly api's Code
// constants; and its observation schemas have exactly the fields
// api.Observation's JSON has, for exactly the kinds the daemon executes.
//
// internal/openapispec reads the document (there is no YAML library in
// go.mod); its package comment says how the document must be written.

const openapiPath = "../docs/openapi.yaml"

// openapiRoute is one route of the router: a method, a path template as the
// document writes it, and what a real request to it carries.
type openapiRoute struct {
	method, path string
	query, body  string
	// contentType is the body's; "" is application/json.
	contentType string
	// want, when set, is the status the request must get once a sandbox
	// was made (any status the document lists otherwise).
	want int
	// check, when set, checks an answer with status want.
	check func(a openapiAnswer) error
}

// openapiRoutes is every (method, path template) (*Daemon).handle serves,
// in an order that makes a real exchange: the sandbox made by the POST is
// used by the routes after it and deleted last. A route may appear more
// than once.
var openapiRoutes = []openapiRoute{
	{method: "GET", path: "/v1/health"},
	{method: "GET", path: "/v1/info"},
	{method: "GET", path: "/metrics"},
	{method: "GET", path: "/v1/sandboxes"},
	{method: "GET", path: "/v1/openapi.yaml", want: 200, check: openapiServed},
	// The images routes answer 503 where containerd is not available, so
	// they come before a sandbox exists (no status is wanted of them). The
	// requests change nothing: the archive is no image, the image to pull
	// is on a host that never resolves (RFC 2606), the image to remove
	// does not exist.
	{method: "GET", path: "/v1/images"},
	{method: "POST", path: "/v1/images", query: "name=sandboxd-openapi:0", body: "not an image archive", contentType: "application/x-tar"},
	{method: "POST", path: "/v1/images/pull", body: `{"ref":"registry.invalid/sandboxd/openapi:0"}`},
	{method: "DELETE", path: "/v1/images/{name}"},
	{method: "POST", path: "/v1/sandboxes", body: `{"labels":{"test":"openapi"}}`},
	{method: "GET", path: "/v1/sandboxes/{id}", want: 200},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"id":"openapi-1","kind":"exec","argv":["true"]}`, want: 200},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", query: "path=a.txt", body: "hello\n", contentType: "application/octet-stream", want: 200,
		check: openapiTransfer("/a.txt", 1, 6)},
	{method: "GET", path: "/v1/sandboxes/{id}/files", query: "path=a.txt", want: 200,
		check: openapiFileBody("hello\n")},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", query: "path=dir", body: openapiTar(map[string]string{"b.txt": "bbb"}), contentType: "application/x-tar", want: 200,
		check: openapiTransfer("/dir", 1, 3)},
	{method: "GET", path: "/v1/sandboxes/{id}/files", query: "path=.", want: 200,
		check: openapiTarBody(map[string]string{"a.txt": "hello\n", "dir/": "", "dir/b.txt": "bbb"})},
	{method: "GET", path: "/v1/sandboxes/{id}/files", query: "path=missing", want: 404},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", query: "path=../out", body: "x", want: 403},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", query: "path=.", body: openapiTar(map[string]string{"a.txt/": ""}), contentType: "application/x-tar", want: 409},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"kind":"file.write","path":"c.txt","content":"one\n"}`, want: 200},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"kind":"file.read","path":"c.txt"}`, want: 200,
		check: openapiObservation("content", "one\n")},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"kind":"file.edit","command":"str_replace","path":"c.txt","old_str":"one","new_str":"two"}`, want: 200},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"kind":"file.edit","command":"str_replace","path":"c.txt","old_str":"one","new_str":"two"}`, want: 400},
	{method: "GET", path: "/v1/sandboxes/{id}/files", query: "path=c.txt", want: 200,
		check: openapiFileBody("two\n")},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"kind":"file.read","path":"/etc/passwd"}`, want: 403},
	{method: "GET", path: "/v1/sandboxes/{id}/events", query: "after=0", want: 200},
	{method: "GET", path: "/v1/sandboxes/{id}/events/{seq}/output", query: "stream=stdout", want: 200},
	{method: "POST", path: "/mcp", want: 200,
		body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"openapi","version":"0"}}}`},
	{method: "POST", path: "/mcp", want: 202, body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
	{method: "DELETE", path: "/mcp", want: 404},
	{method: "GET", path: "/openhands/{ohid}/alive", want: 200},
	{method: "GET", path: "/openhands/{ohid}/server_info", want: 200},
	{method: "POST", path: "/openhands/{ohid}/execute_action", want: 200,
		body: `{"action":{"id":1,"action":"read","args":{"path":"c.txt"}}}`},
	{method: "POST", path: "/openhands/{ohid}/list_files", body: `{"path":"."}`, want: 200},
	{method: "POST", path: "/openhands/{ohid}/upload_file", want: 200, contentType: "multipart/form-data; boundary=XyZ",
		body: "--XyZ\r\nContent-Disposition: form-data; name=\"destination\"\r\n\r\nup\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"u.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nhi\r\n--XyZ--\r\n"},
	{method: "GET", path: "/openhands/{ohid}/download_files", query: "path=up", want: 200},
	{method: "DELETE", path: "/v1/sandboxes/{id}", want: 204},
}

// openapiNotServed are requests the router must answer "no such endpoint":
// they show that the check for a served route can fail, and they name
// endpoints of the contract this version does not have. If one of them
// becomes served, add it to openapiRoutes and to docs/openapi.yaml.
var openapiNotServed = []openapiRoute{
	{method: "GET", path: "/v1/nope"},
	{method: "GET", path: "/v1/sandboxes/{id}/files/a"},
	{method: "PUT", path: "/v1/sandboxes/{id}/files/"},
	{method: "GET", path: "/v1/sandboxes/{id}/events/{seq}"},
	{method: "GET", path: "/v1/sandboxes/{id}/"},
	{method: "DELETE", path: "/v1/images/"},
}

// openapiSpec is the document as internal/openapispec reads it.
type openapiSpec = openapispec.Spec

func openapiParse(data string) (*openapiSpec, error) { return openapispec.Parse(data) }

func openapiLoad(t *testing.T) *openapiSpec {
	t.Helper()
	data, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := openapiParse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestOpenAPIExtractor checks the extractor on a document written the
// ways it accepts.
func TestOpenAPIExtractor(t *testing.T) {
	doc := `openapi: 3.1.0
info:
  description: |
    paths:
      /not/a/path:
        get:
paths:
  # a comment
  /a:
    parameters:
      - name: x
        description: >-
          get:
    get:
      description: |
        responses:
          "999":
      responses:
        "200":
          description: ok
        '404':
          $ref: x
        default:
          description: other
    post:
      tags: [x]
      responses:
        201:
          description: made

  /b/{id}:
    delete:
      responses:
        "204":
          description: gone
components:
  schemas:
    Other:
      required: [code, "n"]
      properties:
        code:
          enum: [nope]
        "n":
          description: |
            properties:
              fake:
    Observation:
      oneOf:
        - $ref: "#/components/schemas/Other"
      discriminator:
        propertyName: kind
        mapping:
          k.x: "#/components/schemas/Other"
          y: '#/components/schemas/Error'
    Error:
      properties:
        error:
          properties:
            code:
              type: string
              enum:
                - a_code
                - "b_code"
            message:
              type: string
`
	spec, err := openapiParse(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"GET /a":         {"200", "404", "default"},
		"POST /a":        {"201"},
		"DELETE /b/{id}": {"204"},
	}
	if len(spec.Ops) != len(want) {
		t.Errorf("ops = %v, want %v", spec.Ops, want)
	}
	for op, statuses := range want {
		if !slices.Equal(spec.Ops[op], statuses) {
			t.Errorf("%s: statuses %v, want %v", op, spec.Ops[op], statuses)
		}
	}
	if !slices.Equal(spec.ErrorCodes, []string{"a_code", "b_code"}) {
		t.Errorf("error codes %v", spec.ErrorCodes)
	}
	if o := spec.Schemas["Other"]; o == nil || !slices.Equal(o.Required, []string{"code", "n"}) || !slices.Equal(o.Properties, []string{"code", "n"}) {
		t.Errorf("schema Other: %+v", o)
	}
	if e := spec.Schemas["Error"]; e == nil || len(e.Required) != 0 || !slices.Equal(e.Properties, []string{"error"}) {
		t.Errorf("schema Error: %+v", e)
	}
	if !maps.Equal(spec.Observations, map[string]string{"k.x": "Other", "y": "Error"}) {
		t.Errorf("observation kinds %v", spec.Observations)
	}

	const head = "paths:\n  /x:\n    get:\n      responses:\n        \"200\":\ncomponents:\n  schemas:\n"
	const errorSchema = "    Error:\n      properties:\n        code:\n          enum: [a]\n"
	for name, bad := range map[string]string{
		"no Observation":     head + errorSchema,
		"no mapping":         head + errorSchema + "    Observation:\n      oneOf: []\n",
		"bad mapping entry":  head + errorSchema + "    Observation:\n      discriminator:\n        mapping:\n          k: Error\n",
		"block required":     head + errorSchema + "    X:\n      required:\n        - a\n",
		"flow schema":        head + errorSchema + "    X: {type: object}\n",
		"no paths":           "openapi: 3.1.0\n",
		"bad path key":       "paths:\n  v1/x:\n    get:\n      responses:\n        \"200\":\n",
		"bad status":         "paths:\n  /x:\n    get:\n      responses:\n        \"2000\":\n",
		"no responses":       "paths:\n  /x:\n    get:\n      summary: x\n",
		"flow operation":     "paths:\n  /x:\n    get: {}\n",
		"duplicate method":   "paths:\n  /x:\n    get:\n      responses:\n        \"200\":\n    get:\n      responses:\n        \"200\":\n",
		"odd indentation":    "paths:\n  /x:\n     get:\n",
		"tab":                "paths:\n\t/x:\n",
		"no Error schema":    "paths:\n  /x:\n    get:\n      responses:\n        \"200\":\ncomponents:\n  schemas:\n    X:\n      type: object\n",
		"Error without enum": "paths:\n  /x:\n    get:\n      responses:\n        \"200\":\ncomponents:\n  schemas:\n    Error:\n      properties:\n        code:\n          type: string\n",
	} {
		if _, err := openapiParse(bad); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// newOpenAPIDaemon returns a daemon on a private state directory. It does
// not listen on its configured listeners; requests go straight to
// d.handle, or through openapiWire.
func newOpenAPIDaemon(t *testing.T) *Daemon {
	t.Helper()
	base := t.TempDir()
	// As root, sandboxes run as uids of their own and must pass through
	// the state directory's parents to reach their workspaces.
	for _, dir := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	// Socket paths must stay short (sun_path), so not under t.TempDir().
	sockDir, err := os.MkdirTemp("", "sbd-oa-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	tokenFile := filepath.Join(base, "token")
	if err := os.WriteFile(tokenFile, []byte("openapi-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.StateDir = filepath.Join(base, "state")
	cfg.Listen = []string{"unix://" + filepath.Join(sockDir, "s.sock")}
	cfg.TokenFile = tokenFile
	cfg.Process.UIDLockDir = filepath.Join(base, "uids")
	// A private lock dir coordinates with no other daemon on this host, so
	// take uids no other daemon or test uses (the default base is
	// 2,000,000,000; the process backend's tests start at 2,100,000,000),
	// a few per test process.
	cfg.Sandbox.MaxSandboxes = 8
	cfg.Process.UIDBase = 2_050_000_000 + 8*(os.Getpid()%1_000_000)
	// A cgroup parent named after a temporary state directory would
	// outlive the test.
	cfg.Process.Cgroups = false
	d, err := New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openapiAnswer is what d.handle answered.
type openapiAnswer struct {
	status int
	code   api.Code
	msg    string
	allow  string
	body   []byte
	// header is set for answers that came over a connection.
	header http.Header
}

func (a *openapiAnswer) decodeError() {
	if a.status >= 400 {
		var eb api.ErrorBody
		if err := json.Unmarshal(a.body, &eb); err == nil {
			a.code, a.msg = eb.Error.Code, eb.Error.Message
		}
	}
}

// openapiServe passes one request through the router, in memory.
func openapiServe(d *Daemon, method, uri, body string) openapiAnswer {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	if body != "" {
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	d.handle(&ctx)
	a := openapiAnswer{
		status: ctx.Response.StatusCode(),
		allow:  string(ctx.Response.Header.Peek("Allow")),
		body:   append([]byte(nil), ctx.Response.Body()...),
	}
	a.decodeError()
	return a
}

// openapiWire serves d as its listeners do (without the token check), on
// an in-memory listener, and returns a client of it. Over a connection,
// the answers that take the connection over (downloads, event streams) are
// sent for real; passed to d.handle in memory, they would never be.
func openapiWire(t *testing.T, d *Daemon) *http.Client {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := d.newServer(false)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tr := &http.Transport{
		DialContext:        func(context.Context, string, string) (net.Conn, error) { return ln.Dial() },
		DisableCompression: true,
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.ShutdownWithContext(ctx); err != nil {
			t.Errorf("shut the server down: %v", err)
		}
		<-served
	})
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// openapiSend makes one request over the client's connection.
func openapiSend(c *http.Client, r openapiRoute, uri string) (openapiAnswer, error) {
	req, err := http.NewRequest(r.method, "http://sandboxd"+uri, strings.NewReader(r.body))
	if err != nil {
		return openapiAnswer{}, err
	}
	if r.body != "" {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.Do(req)
	if err != nil {
		return openapiAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return openapiAnswer{}, fmt.Errorf("read the answer (%d): %w", resp.StatusCode, err)
	}
	a := openapiAnswer{status: resp.StatusCode, allow: resp.Header.Get("Allow"), body: body, header: resp.Header}
	a.decodeError()
	return a, nil
}

// openapiTar is a tar stream of files (a name ending in "/" is a
// directory).
func openapiTar(files map[string]string) string {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			hdr.Mode, hdr.Size, hdr.Typeflag = 0o755, 0, tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			panic(err)
		}
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return b.String()
}

// openapiTransfer checks a TransferResult.
func openapiTransfer(pathSuffix string, files int, n int64) func(openapiAnswer) error {
	return func(a openapiAnswer) error {
		var res api.TransferResult
		if err := openapiStrict(a.body, &res); err != nil {
			return err
		}
		if !strings.HasSuffix(res.Path, pathSuffix) || !strings.HasPrefix(res.Path, "/") || res.Files != files || res.Bytes != n {
			return fmt.Errorf("answered %+v, want an absolute path ending in %s, %d files, %d bytes", res, pathSuffix, files, n)
		}
		return nil
	}
}

// openapiStrict decodes JSON into v, refusing fields v does not have.
func openapiStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", b, err)
	}
	return nil
}

// openapiFileBody checks the download of a file.
func openapiFileBody(want string) func(openapiAnswer) error {
	return func(a openapiAnswer) error {
		if ct := a.header.Get("Content-Type"); ct != "application/octet-stream" {
			return fmt.Errorf("Content-Type %q, want application/octet-stream", ct)
		}
		if cl := a.header.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
			return fmt.Errorf("Content-Length %q, want %d", cl, len(want))
		}
		if string(a.body) != want {
			return fmt.Errorf("body %q, want %q", a.body, want)
		}
		return nil
	}
}

// openapiTarBody checks the download of a directory: a complete tar stream
// that has (at least) these entries, with this content.
func openapiTarBody(want map[string]string) func(openapiAnswer) error {
	return func(a openapiAnswer) error {
		if ct := a.header.Get("Content-Type"); ct != "application/x-tar" {
			return fmt.Errorf("Content-Type %q, want application/x-tar", ct)
		}
		got := map[string]string{}
		tr := tar.NewReader(bytes.NewReader(a.body))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("read the tar stream: %w", err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("read %s from the tar stream: %w", hdr.Name, err)
			}
			got[hdr.Name] = string(b)
		}
		// A stream cut short after a whole entry reads as complete: it
		// must end with the two zero blocks of the end of the archive.
		if len(a.body) < 1024 || !bytes.Equal(a.body[len(a.body)-1024:], make([]byte, 1024)) {
			return fmt.Errorf("the tar stream (%d bytes) does not end with an end-of-archive marker", len(a.body))
		}
		for name, content := range want {
			if c, ok := got[name]; !ok || c != content {
				return fmt.Errorf("the tar stream has %q as %q (present: %v), want %q; entries: %v", name, c, ok, content, slices.Sorted(maps.Keys(got)))
			}
		}
		return nil
	}
}

// openapiObservation checks a field of an observation.
func openapiObservation(field, want string) func(openapiAnswer) error {
	return func(a openapiAnswer) error {
		var obs map[string]any
		if err := json.Unmarshal(a.body, &obs); err != nil {
			return err
		}
		if obs[field] != want {
			return fmt.Errorf("%s is %#v, want %q", field, obs[field], want)
		}
		return nil
	}
}

func (a openapiAnswer) noSuchEndpoint() bool {
	return a.status == fasthttp.StatusNotFound && strings.HasPrefix(a.msg, "no such endpoint")
}

func (a openapiAnswer) methodRefused() bool {
	// The MCP transport wants 405 for a GET it does not serve.
	return (a.status == fasthttp.StatusBadRequest || a.status == fasthttp.StatusMethodNotAllowed) && strings.HasPrefix(a.msg, "method ") && a.allow != ""
}

func openapiURI(r openapiRoute, id string) string {
	p := strings.NewReplacer("{id}", id, "{ohid}", id, "{seq}", "1", "{name}", url.PathEscape("sandboxd-openapi/missing:0")).Replace(r.path)
	if r.query != "" {
		p += "?" + r.query
	}
	return p
}

// TestOpenAPIRoutes checks the route table against the router and against
// docs/openapi.yaml, both ways.
func TestOpenAPIRoutes(t *testing.T) {
	spec := openapiLoad(t)
	d := newOpenAPIDaemon(t)
	const fakeID = "sb-aaaaaaaaaaaa"

	// Per path, the table names every method the router serves: any other
	// method is refused, and the Allow header lists exactly the table's.
	byPath := map[string][]string{}
	var pathOrder []string
	for _, r := range openapiRoutes {
		if byPath[r.path] == nil {
			pathOrder = append(pathOrder, r.path)
		}
		if !slices.Contains(byPath[r.path], r.method) {
			byPath[r.path] = append(byPath[r.path], r.method)
		}
	}
	for _, path := range pathOrder {
		want := slices.Sorted(slices.Values(byPath[path]))
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if slices.Contains(want, m) {
				continue
			}
			a := openapiServe(d, m, openapiURI(openapiRoute{path: path}, fakeID), "")
			if !a.methodRefused() {
				t.Errorf("%s %s: the router answered %d %q; a method the table does not list for this path must be refused with 400 and Allow (if the router serves it now, add it to openapiRoutes and docs/openapi.yaml)", m, path, a.status, a.msg)
				continue
			}
			allow := strings.Split(a.allow, ", ")
			slices.Sort(allow)
			if !slices.Equal(allow, want) {
				t.Errorf("%s %s: Allow: %s, but the table lists %v for this path", m, path, a.allow, want)
			}
		}
	}
	for _, r := range openapiNotServed {
		if a := openapiServe(d, r.method, openapiURI(r, fakeID), ""); !a.noSuchEndpoint() {
			t.Errorf("%s %s: answered %d %q, not \"no such endpoint\"; if it is served now, add it to openapiRoutes and docs/openapi.yaml", r.method, r.path, a.status, a.msg)
		}
	}

	// Every route of the table, for real, over a connection, in order:
	// each is served and answers a status the document lists for it (once
	// a sandbox exists, the status the table wants, and what its check
	// wants); an observation has the fields its schema lists.
	client := openapiWire(t, d)
	id := fakeID
	for _, r := range openapiRoutes {
		op := r.method + " " + r.path
		uri := openapiURI(r, id)
		a, err := openapiSend(client, r, uri)
		if err != nil {
			t.Errorf("%s %s: %v", r.method, uri, err)
			continue
		}
		t.Logf("%s %s -> %d %s", r.method, uri, a.status, a.msg)
		switch {
		case a.noSuchEndpoint():
			t.Errorf("%s: the router answers \"no such endpoint\" (%s)", op, a.msg)
			continue
		case a.methodRefused():
			t.Errorf("%s: the router refuses the method: %s", op, a.msg)
			continue
		}
		if statuses, ok := spec.Ops[op]; ok && !slices.Contains(statuses, strconv.Itoa(a.status)) && !slices.Contains(statuses, "default") {
			t.Errorf("%s answered %d (%s %q), which docs/openapi.yaml does not list for it (it lists %v)", op, a.status, a.code, a.msg, statuses)
		}
		if id != fakeID && r.want != 0 {
			switch {
			case a.status != r.want:
				t.Errorf("%s %s answered %d (%s %q), want %d", r.method, uri, a.status, a.code, a.msg, r.want)
			case r.check != nil:
				if err := r.check(a); err != nil {
					t.Errorf("%s %s: %v", r.method, uri, err)
				}
			}
		}
		if r.path == "/v1/sandboxes/{id}/actions" && a.status == 200 {
			if err := spec.CheckObservation(a.body); err != nil {
				t.Errorf("%s %s: %v", r.method, uri, err)
			}
		}
		if r.method == "POST" && r.path == "/v1/sandboxes" {
			var sb api.Sandbox
			if a.status != fasthttp.StatusCreated || json.Unmarshal(a.body, &sb) != nil || sb.ID == "" {
				// The routes are still checked, on an id that does not
				// exist; this host may not be able to make sandboxes.
				t.Logf("could not create a sandbox (%d %s %q); checking the routes with id %s", a.status, a.code, a.msg, fakeID)
				continue
			}
			id = sb.ID
		}
	}

	// The table and the document name the same operations.
	table := map[string]bool{}
	for _, r := range openapiRoutes {
		table[r.method+" "+r.path] = true
	}
	var notDocumented, notServed []string
	for op := range table {
		if _, ok := spec.Ops[op]; !ok {
			notDocumented = append(notDocumented, op)
		}
	}
	for op := range spec.Ops {
		if !table[op] {
			notServed = append(notServed, op)
		}
	}
	slices.Sort(notDocumented)
	slices.Sort(notServed)
	if len(notDocumented) > 0 {
		t.Errorf("served by the router (openapiRoutes) but missing from docs/openapi.yaml:\n\t%s", strings.Join(notDocumented, "\n\t"))
	}
	if len(notServed) > 0 {
		t.Errorf("documented in docs/openapi.yaml but not in the router's table openapiRoutes:\n\t%s", strings.Join(notServed, "\n\t"))
	}
}

// openapiAPICodes returns the values of every constant of type Code declared
// in the api package's source.
func openapiAPICodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "api", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a Code constant that is not a string literal", fset.Position(v.Pos()))
					}
					c, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, c)
				}
			}
		}
	}
	if !slices.Contains(codes, string(api.CodeInternal)) || !slices.Contains(codes, string(api.CodeInvalidArgument)) {
		t.Fatalf("found the api codes %v: the source scan missed some", codes)
	}
	return codes
}

// TestOpenAPIErrorCodes checks that the Error schema's code enum is exactly
// the api package's codes.
func TestOpenAPIErrorCodes(t *testing.T) {
	spec := openapiLoad(t)
	codes := openapiAPICodes(t)
	for _, c := range codes {
		if !slices.Contains(spec.ErrorCodes, c) {
			t.Errorf("api code %q is missing from the code enum of the Error schema in docs/openapi.yaml", c)
		}
	}
	for _, c := range spec.ErrorCodes {
		if !slices.Contains(codes, c) {
			t.Errorf("docs/openapi.yaml lists error code %q, which the api package does not have", c)
		}
	}
}

// TestOpenAPIObservations checks that the Observation schema maps exactly
// the kinds the daemon executes, each to a schema whose required fields
// are exactly those api.Observation's JSON always has for the kind, and
// whose properties also have the extras it may have.
func TestOpenAPIObservations(t *testing.T) {
	spec := openapiLoad(t)
	var executed []string
	for _, kind := range api.Kinds() {
		// Which kinds have an executor, asked of an empty sandbox (the
		// executors themselves are nil there).
		if _, err := (&sandbox{}).executor(kind); err == nil {
			executed = append(executed, kind)
		}
	}
	mapped := slices.Sorted(maps.Keys(spec.Observations))
	if !slices.Equal(mapped, executed) {
		t.Errorf("the Observation schema's discriminator maps the kinds %v; the daemon executes %v", mapped, executed)
	}
	keys := func(o api.Observation) []string {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(m))
	}
	for _, kind := range mapped {
		name := spec.Observations[kind]
		schema := spec.Schemas[name]
		if schema == nil {
			t.Errorf("the Observation schema maps %s to %s, which is not in components/schemas", kind, name)
			continue
		}
		always := keys(api.Observation{Kind: kind})
		if required := slices.Sorted(slices.Values(schema.Required)); !slices.Equal(required, always) {
			t.Errorf("%s (for %s) requires %v; a %s observation always has %v", name, kind, required, kind, always)
		}
		for _, f := range keys(api.Observation{Kind: kind, Note: "n", Lost: true, SessionEnded: true}) {
			if !slices.Contains(schema.Properties, f) {
				t.Errorf("%s (for %s) does not list %q, which a %s observation may have", name, kind, f, kind)
			}
		}
	}
}

// openapiServed checks that GET /v1/openapi.yaml is the document itself.
func openapiServed(a openapiAnswer) error {
	want, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		return err
	}
	if !bytes.Equal(a.body, want) {
		return fmt.Errorf("GET /v1/openapi.yaml served %d bytes that are not docs/openapi.yaml (%d bytes)", len(a.body), len(want))
	}
	return nil
}
