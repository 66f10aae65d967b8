package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/valyala/fasthttp"
)

// This file keeps docs/openapi.yaml honest: the paths and methods it
// documents are exactly the routes (*Daemon).handle serves, checked against
// the real handler; each route's answer in a real exchange has a status the
// document lists; and the document's error codes are exactly api's Code
// constants.
//
// There is no YAML library in go.mod, so openapiParse is a small extractor
// that relies on how docs/openapi.yaml is written (and fails loudly when a
// line does not fit, instead of guessing):
//   - block style with two-space indentation, no tabs, no flow mappings or
//     multi-line plain/quoted scalars in the parts it reads;
//   - block scalars (`key: |`, `key: >-`, `- |`) are skipped whole: every
//     following line indented deeper than the line that opened them;
//   - `paths:` is a top-level key; each path is a key indented exactly 2
//     spaces ("  /v1/x/{id}:"), each operation a key indented exactly 4
//     spaces named after an HTTP method ("    get:"), and the statuses are
//     the keys indented exactly 8 spaces under the operation's
//     "      responses:" ("        \"200\":", "        '404':",
//     "        200:" or "default:");
//   - the error codes are the block list (or flow list) under `enum:`
//     below `code:` in components/schemas/Error.

const openapiPath = "../docs/openapi.yaml"

// openapiRoute is one route of the router: a method, a path template as the
// document writes it, and what a real request to it carries.
type openapiRoute struct {
	method, path string
	query, body  string
}

// openapiRoutes is every (method, path template) (*Daemon).handle serves,
// in an order that makes a real exchange: the sandbox made by the POST is
// used by the routes after it and deleted last.
var openapiRoutes = []openapiRoute{
	{method: "GET", path: "/v1/health"},
	{method: "GET", path: "/v1/info"},
	{method: "GET", path: "/metrics"},
	{method: "GET", path: "/v1/sandboxes"},
	{method: "POST", path: "/v1/sandboxes", body: `{"labels":{"test":"openapi"}}`},
	{method: "GET", path: "/v1/sandboxes/{id}"},
	{method: "POST", path: "/v1/sandboxes/{id}/actions", body: `{"id":"openapi-1","kind":"exec","argv":["true"]}`},
	{method: "GET", path: "/v1/sandboxes/{id}/events", query: "after=0"},
	{method: "GET", path: "/v1/sandboxes/{id}/events/{seq}/output", query: "stream=stdout"},
	{method: "DELETE", path: "/v1/sandboxes/{id}"},
}

// openapiNotServed are requests the router must answer "no such endpoint":
// they show that the check for a served route can fail, and they name
// endpoints of the contract this version does not have. If one of them
// becomes served, add it to openapiRoutes and to docs/openapi.yaml.
var openapiNotServed = []openapiRoute{
	{method: "GET", path: "/v1/nope"},
	{method: "GET", path: "/v1/sandboxes/{id}/files", query: "path=a"},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", query: "path=a"},
	{method: "GET", path: "/v1/sandboxes/{id}/events/{seq}"},
	{method: "GET", path: "/v1/sandboxes/{id}/"},
}

// openapiSpec is what the test reads of the document.
type openapiSpec struct {
	// ops maps "METHOD /path/{template}" to the response statuses listed.
	ops        map[string][]string
	errorCodes []string
}

type openapiLine struct {
	n, indent int
	text      string // without the indentation and trailing blanks
}

var (
	openapiBlockScalar = regexp.MustCompile(`(?:^-|:)\s+[|>][-+1-9]*$`)
	openapiPathKey     = regexp.MustCompile(`^(/[^\s:'"]*):$`)
	openapiStatusKey   = regexp.MustCompile(`^(?:"([1-5][0-9][0-9]|default)"|'([1-5][0-9][0-9]|default)'|([1-5][0-9][0-9]|default)):$`)
	openapiMethods     = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
)

// openapiLines splits the document into its significant lines: no blanks,
// no comments, no block scalar content.
func openapiLines(data string) ([]openapiLine, error) {
	var out []openapiLine
	block := -1 // indentation of the line that opened a block scalar
	for i, raw := range strings.Split(data, "\n") {
		raw = strings.TrimRight(raw, " \r")
		text := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(text)
		if block >= 0 {
			if text == "" || indent > block {
				continue
			}
			block = -1
		}
		if text == "" || text[0] == '#' {
			continue
		}
		if text[0] == '\t' {
			return nil, lineError(i+1, "a tab in the indentation")
		}
		out = append(out, openapiLine{n: i + 1, indent: indent, text: text})
		if openapiBlockScalar.MatchString(text) {
			block = indent
		}
	}
	return out, nil
}

// lineError reports a line of the document (0: the document as a whole)
// the extractor cannot read.
func lineError(n int, format string, args ...any) error {
	if n == 0 {
		return fmt.Errorf("%s: %s", openapiPath, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s:%d: %s", openapiPath, n, fmt.Sprintf(format, args...))
}

// openapiSection returns the lines below the key text at indent within ls,
// up to the next line indented as much or less.
func openapiSection(ls []openapiLine, indent int, text string) ([]openapiLine, int, bool) {
	for i, l := range ls {
		if l.indent != indent || l.text != text {
			continue
		}
		end := i + 1
		for end < len(ls) && ls[end].indent > indent {
			end++
		}
		return ls[i+1 : end], l.n, true
	}
	return nil, 0, false
}

// openapiParse extracts the operations and error codes of the document.
func openapiParse(data string) (*openapiSpec, error) {
	ls, err := openapiLines(data)
	if err != nil {
		return nil, err
	}
	spec := &openapiSpec{ops: map[string][]string{}}

	paths, n, ok := openapiSection(ls, 0, "paths:")
	if !ok {
		return nil, lineError(0, "no top-level paths: block")
	}
	if len(paths) == 0 {
		return nil, lineError(n, "the paths: block is empty")
	}
	seenPath := map[string]bool{}
	var path, op string
	inResponses := false
	for _, l := range paths {
		if l.indent%2 != 0 {
			return nil, lineError(l.n, "odd indentation %d", l.indent)
		}
		switch {
		case l.indent == 2:
			m := openapiPathKey.FindStringSubmatch(l.text)
			if m == nil {
				return nil, lineError(l.n, "expected a path key like \"  /v1/x:\", got %q", l.text)
			}
			path, op, inResponses = m[1], "", false
			if seenPath[path] {
				return nil, lineError(l.n, "path %s twice", path)
			}
			seenPath[path] = true
		case l.indent == 4:
			op, inResponses = "", false
			key, rest, _ := strings.Cut(l.text, ":")
			if !slices.Contains(openapiMethods, key) {
				continue // parameters, summary, ...
			}
			if rest != "" {
				return nil, lineError(l.n, "operation %s of %s is not a block mapping", key, path)
			}
			op = strings.ToUpper(key) + " " + path
			if _, dup := spec.ops[op]; dup {
				return nil, lineError(l.n, "operation %s twice", op)
			}
			spec.ops[op] = nil
		case l.indent == 6 && op != "":
			inResponses = l.text == "responses:"
		case l.indent == 8 && inResponses:
			m := openapiStatusKey.FindStringSubmatch(l.text)
			if m == nil {
				return nil, lineError(l.n, "expected a status key under responses of %s, got %q", op, l.text)
			}
			status := m[1] + m[2] + m[3]
			if slices.Contains(spec.ops[op], status) {
				return nil, lineError(l.n, "status %s of %s twice", status, op)
			}
			spec.ops[op] = append(spec.ops[op], status)
		}
	}
	for op, statuses := range spec.ops {
		if len(statuses) == 0 {
			return nil, lineError(0, "operation %s lists no responses", op)
		}
	}

	comps, _, ok := openapiSection(ls, 0, "components:")
	if !ok {
		return nil, lineError(0, "no top-level components: block")
	}
	schemas, n, ok := openapiSection(comps, 2, "schemas:")
	if !ok {
		return nil, lineError(n, "no schemas: in components")
	}
	errSchema, n, ok := openapiSection(schemas, 4, "Error:")
	if !ok {
		return nil, lineError(n, "no Error schema in components/schemas")
	}
	ci := slices.IndexFunc(errSchema, func(l openapiLine) bool { return l.text == "code:" })
	if ci < 0 {
		return nil, lineError(n, "the Error schema has no code: property")
	}
	code := errSchema[ci]
	for i := ci + 1; i < len(errSchema) && errSchema[i].indent > code.indent; i++ {
		l := errSchema[i]
		rest, ok := strings.CutPrefix(l.text, "enum:")
		if !ok {
			continue
		}
		if rest = strings.TrimSpace(rest); rest != "" {
			flow, ok := strings.CutPrefix(rest, "[")
			if flow, ok2 := strings.CutSuffix(flow, "]"); ok && ok2 {
				for _, v := range strings.Split(flow, ",") {
					spec.errorCodes = append(spec.errorCodes, openapiUnquote(v))
				}
				return spec, nil
			}
			return nil, lineError(l.n, "enum of code is neither a block nor a flow list: %q", rest)
		}
		for _, item := range errSchema[i+1:] {
			v, ok := strings.CutPrefix(item.text, "- ")
			if !ok || item.indent < l.indent {
				break
			}
			spec.errorCodes = append(spec.errorCodes, openapiUnquote(v))
		}
		return spec, nil
	}
	return nil, lineError(code.n, "the code property of the Error schema has no enum")
}

func openapiUnquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

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
      properties:
        code:
          enum: [nope]
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
	if len(spec.ops) != len(want) {
		t.Errorf("ops = %v, want %v", spec.ops, want)
	}
	for op, statuses := range want {
		if !slices.Equal(spec.ops[op], statuses) {
			t.Errorf("%s: statuses %v, want %v", op, spec.ops[op], statuses)
		}
	}
	if !slices.Equal(spec.errorCodes, []string{"a_code", "b_code"}) {
		t.Errorf("error codes %v", spec.errorCodes)
	}

	for name, bad := range map[string]string{
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
		}
	}
}

// newOpenAPIDaemon returns a daemon on a private state directory. It does
// not listen; requests go straight to d.handle.
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
	if a.status >= 400 {
		var eb api.ErrorBody
		if err := json.Unmarshal(a.body, &eb); err == nil {
			a.code, a.msg = eb.Error.Code, eb.Error.Message
		}
	}
	return a
}

func (a openapiAnswer) noSuchEndpoint() bool {
	return a.status == fasthttp.StatusNotFound && strings.HasPrefix(a.msg, "no such endpoint")
}

func (a openapiAnswer) methodRefused() bool {
	return a.status == fasthttp.StatusBadRequest && strings.HasPrefix(a.msg, "method ") && a.allow != ""
}

func openapiURI(r openapiRoute, id string) string {
	p := strings.NewReplacer("{id}", id, "{seq}", "1").Replace(r.path)
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
		byPath[r.path] = append(byPath[r.path], r.method)
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

	// Every route of the table, for real, in order: each is served and
	// answers a status the document lists for it.
	id := fakeID
	for _, r := range openapiRoutes {
		a := openapiServe(d, r.method, openapiURI(r, id), r.body)
		op := r.method + " " + r.path
		t.Logf("%s -> %d %s", openapiURI(r, id), a.status, a.msg)
		switch {
		case a.noSuchEndpoint():
			t.Errorf("%s: the router answers \"no such endpoint\" (%s)", op, a.msg)
			continue
		case a.methodRefused():
			t.Errorf("%s: the router refuses the method: %s", op, a.msg)
			continue
		}
		if statuses, ok := spec.ops[op]; ok && !slices.Contains(statuses, strconv.Itoa(a.status)) && !slices.Contains(statuses, "default") {
			t.Errorf("%s answered %d (%s %q), which docs/openapi.yaml does not list for it (it lists %v)", op, a.status, a.code, a.msg, statuses)
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
		if _, ok := spec.ops[op]; !ok {
			notDocumented = append(notDocumented, op)
		}
	}
	for op := range spec.ops {
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
		if !slices.Contains(spec.errorCodes, c) {
			t.Errorf("api code %q is missing from the code enum of the Error schema in docs/openapi.yaml", c)
		}
	}
	for _, c := range spec.errorCodes {
		if !slices.Contains(codes, c) {
			t.Errorf("docs/openapi.yaml lists error code %q, which the api package does not have", c)
		}
	}
}
