package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/daemon/eventlog"
	"github.com/valyala/fasthttp"
)

// apiCodes finds every constant of type api.Code declared in the api
// package's source, so a code added later without a status fails here.
func apiCodes(t *testing.T) []api.Code {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "api", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var codes []api.Code
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: api.Code constant with a non-literal value", fset.Position(v.Pos()))
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, api.Code(s))
				}
			}
		}
	}
	if len(codes) < 11 {
		t.Fatalf("found only %d api.Code constants: %v", len(codes), codes)
	}
	return codes
}

var contractStatus = map[api.Code]int{
	"invalid_argument":   400,
	"unauthenticated":    401,
	"permission_denied":  403,
	"not_found":          404,
	"conflict":           409,
	"too_large":          413,
	"resource_exhausted": 429,
	"unsupported":        501,
	"unavailable":        503,
	"deadline_exceeded":  504,
	"internal":           500,
}

func TestStatusOfEveryCode(t *testing.T) {
	codes := apiCodes(t)
	for _, c := range codes {
		got, ok := statusOf[c]
		if !ok {
			t.Errorf("statusOf has no entry for api code %q", c)
			continue
		}
		want, ok := contractStatus[c]
		if !ok {
			t.Errorf("api code %q is not in the contract table of this test", c)
			continue
		}
		if got != want {
			t.Errorf("statusOf[%q] = %d, want %d", c, got, want)
		}
		if api.ErrorOf(c).Error() != string(c) {
			t.Errorf("api.ErrorOf(%q) = %v: the code has no sentinel", c, api.ErrorOf(c))
		}
	}
	if len(statusOf) != len(codes) {
		t.Errorf("statusOf has %d entries for %d codes", len(statusOf), len(codes))
	}
	for c := range contractStatus {
		if _, ok := statusOf[c]; !ok {
			t.Errorf("contract code %q missing from statusOf", c)
		}
	}
	// Statuses are distinct, so the client can map a bare status back.
	seen := map[int]api.Code{}
	for c, s := range statusOf {
		if prev, dup := seen[s]; dup {
			t.Errorf("status %d used by %q and %q", s, prev, c)
		}
		seen[s] = c
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func TestErrorInfo(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code api.Code
	}{
		{"deadline", context.DeadlineExceeded, api.CodeDeadlineExceeded},
		{"wrapped deadline", fmt.Errorf("run: %w", context.DeadlineExceeded), api.CodeDeadlineExceeded},
		{"custom wrapped deadline", wrapped{context.DeadlineExceeded}, api.CodeDeadlineExceeded},
		{"canceled", context.Canceled, api.CodeUnavailable},
		{"wrapped canceled", fmt.Errorf("run: %w", context.Canceled), api.CodeUnavailable},
		{"event log closed", eventlog.ErrClosed, api.CodeUnavailable},
		{"wrapped event log closed", fmt.Errorf("append: %w", eventlog.ErrClosed), api.CodeUnavailable},
		{"plain", errors.New("disk on fire"), api.CodeInternal},
		{"io", io.ErrUnexpectedEOF, api.CodeInternal},
		{"class wins over a context cause", api.Errorf(api.ErrNotFound, "gone: %w", context.Canceled), api.CodeNotFound},
	}
	for _, c := range apiCodes(t) {
		if c == api.CodeInternal {
			continue
		}
		tests = append(tests,
			struct {
				name string
				err  error
				code api.Code
			}{"class " + string(c), api.Errorf(api.ErrorOf(c), "thing %s", c), c},
			struct {
				name string
				err  error
				code api.Code
			}{"wrapped class " + string(c), fmt.Errorf("outer: %w", api.Errorf(api.ErrorOf(c), "thing")), c},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := errorInfo(tt.err)
			if info.Code != tt.code {
				t.Errorf("errorInfo(%v).Code = %q, want %q", tt.err, info.Code, tt.code)
			}
			if info.Message != tt.err.Error() {
				t.Errorf("Message = %q, want %q", info.Message, tt.err.Error())
			}
		})
	}
}

// TestErrorInfoDiskFull: a full disk under the daemon's own writes (a
// sandbox's metadata at create, say) is unavailable and says so, whatever
// else the error says.
func TestErrorInfoDiskFull(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		err := fmt.Errorf("create sandbox: %w", &fs.PathError{Op: "write", Path: "/state/sandboxes/sb-x/process.json.tmp", Err: errno})
		info := errorInfo(err)
		want := "the state directory is full: " + err.Error()
		if info.Code != api.CodeUnavailable || info.Message != want {
			t.Errorf("errorInfo(%v) = %+v, want unavailable %q", err, info, want)
		}
		// A class given on the way wins (a sandbox's own full workspace
		// is its resource_exhausted).
		classified := api.Errorf(api.ErrResourceExhausted, "a.txt: no space left: %w", errno)
		if info := errorInfo(classified); info.Code != api.CodeResourceExhausted || info.Message != classified.Error() {
			t.Errorf("errorInfo(%v) = %+v", classified, info)
		}
	}
}

func TestWriteError(t *testing.T) {
	for _, c := range apiCodes(t) {
		t.Run(string(c), func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			msg := "bad <thing> & co \"q\""
			writeError(&ctx, api.Errorf(api.ErrorOf(c), "%s", msg))
			if got := ctx.Response.StatusCode(); got != contractStatus[c] {
				t.Errorf("status %d, want %d", got, contractStatus[c])
			}
			if ct := string(ctx.Response.Header.ContentType()); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content type %q", ct)
			}
			body := ctx.Response.Body()
			if !strings.HasSuffix(string(body), "}\n") || strings.Count(string(body), "\n") != 1 {
				t.Errorf("body is not one JSON line: %q", body)
			}
			if strings.Contains(string(body), `\u003c`) || strings.Contains(string(body), `\u0026`) {
				t.Errorf("body is HTML-escaped: %s", body)
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if eb.Error.Code != c || eb.Error.Message != msg {
				t.Errorf("body %+v", eb)
			}
			ra := string(ctx.Response.Header.Peek("Retry-After"))
			if (c == api.CodeResourceExhausted) != (ra != "") {
				t.Errorf("Retry-After = %q", ra)
			}
			wa := string(ctx.Response.Header.Peek("WWW-Authenticate"))
			if (c == api.CodeUnauthenticated) != strings.HasPrefix(wa, "Bearer") {
				t.Errorf("WWW-Authenticate = %q", wa)
			}
		})
	}
}

func TestJSONMarshalNoHTMLEscape(t *testing.T) {
	b, err := jsonMarshal(map[string]string{"a": "<x> & y"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"a":"<x> & y"}` {
		t.Errorf("jsonMarshal = %s", b)
	}
	// An observation keeps its own (unescaped) bytes.
	o := api.Observation{Kind: api.KindRun, Output: "a<b>&c"}
	b, err = jsonMarshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := o.MarshalJSON()
	if string(b) != string(want) {
		t.Errorf("jsonMarshal(obs) = %s, want %s", b, want)
	}
	if _, err := jsonMarshal(func() {}); err == nil {
		t.Error("jsonMarshal of a func did not fail")
	}
}
