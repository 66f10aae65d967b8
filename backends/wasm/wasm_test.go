package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/backendtest"
)

// module returns a minimal module whose _start has the given body (the
// bytes between the local count and the final end).
func module(body ...byte) []byte {
	code := append([]byte{0x00}, body...) // no locals
	code = append(code, 0x0b)             // end
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	m = append(m, 0x01, 0x04, 0x01, 0x60, 0x00, 0x00)                               // type () -> ()
	m = append(m, 0x03, 0x02, 0x01, 0x00)                                           // one function of type 0
	m = append(m, 0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00) // export "_start"
	m = append(m, 0x0a, byte(len(code)+2), 0x01, byte(len(code)))                   // code section
	return append(m, code...)
}

var (
	modReturn = module()                             // returns at once
	modTrap   = module(0x00)                         // unreachable
	modLoop   = module(0x03, 0x40, 0x0c, 0x00, 0x0b) // loop br 0 end
)

func newBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	dir := t.TempDir()
	if cfg.WorkspaceRoot == "" {
		cfg.WorkspaceRoot = filepath.Join(dir, "ws")
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(dir, "cache")
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newSandbox(t *testing.T, b *Backend, id string, mods map[string][]byte) backends.Sandbox {
	t.Helper()
	sb, err := b.Create(context.Background(), backends.Spec{ID: id, Limits: api.Limits{MemoryMB: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	for name, code := range mods {
		if err := os.WriteFile(filepath.Join(b.cfg.WorkspaceRoot, id, name), code, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sb
}

func TestStartAndStatus(t *testing.T) {
	b := newBackend(t, Config{MaxModuleBytes: 1 << 20})
	sb := newSandbox(t, b, "sb-wasmunit0001", map[string][]byte{"ret.wasm": modReturn, "trap.wasm": modTrap, "loop.wasm": modLoop, "bad.wasm": []byte("\x00asm junk"), "big.wasm": make([]byte, 2<<20), "text.txt": []byte("x")})
	ctx := context.Background()

	cases := []struct {
		name   string
		argv0  string
		code   int
		signal syscall.Signal
		stderr string
	}{
		{"returns", "ret.wasm", 0, 0, ""},
		{"absolute path", "/workspace/ret.wasm", 0, 0, ""},
		{"trap", "trap.wasm", 134, syscall.SIGABRT, "unreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var errb backendtest.Buffer
			p, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{tc.argv0}, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Wait(ctx)
			if err != nil || st.Code != tc.code || st.Signal != tc.signal || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("status %+v %v, stderr %q", st, err, errb.String())
			}
		})
	}
	for argv0, want := range map[string]error{
		"bad.wasm":     api.ErrInvalidArgument,
		"big.wasm":     api.ErrInvalidArgument,
		"text.txt":     api.ErrInvalidArgument,
		"missing.wasm": api.ErrNotFound,
		"../x.wasm":    api.ErrPermissionDenied,
		"/etc/x.wasm":  api.ErrPermissionDenied,
	} {
		if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{argv0}}); !errors.Is(err, want) {
			t.Errorf("Start %s: %v, want %v", argv0, err, want)
		}
	}
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"ret.wasm"}, Dir: "/tmp"}); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("another working directory: %v", err)
	}
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"ret.wasm"}, TTY: true}); !errors.Is(err, api.ErrUnsupported) {
		t.Errorf("TTY: %v", err)
	}
}

func TestKillStopsALoop(t *testing.T) {
	b := newBackend(t, Config{})
	sb := newSandbox(t, b, "sb-wasmunit0002", map[string][]byte{"loop.wasm": modLoop})
	ctx := context.Background()
	p, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the loop ended on its own: %v", err)
	}
	p.Kill()
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := p.Wait(wctx)
	if err != nil || st.Code != 137 || st.Signal != syscall.SIGKILL {
		t.Fatalf("after Kill: %+v %v", st, err)
	}
	// Destroy stops running modules and removes the workspace.
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sb.Destroy(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Destroy did not stop a looping module")
	}
	if _, err := os.Stat(filepath.Join(b.cfg.WorkspaceRoot, "sb-wasmunit0002")); !os.IsNotExist(err) {
		t.Fatal("the workspace remains")
	}
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}}); err == nil {
		t.Fatal("Start after Destroy")
	}
}

func TestCompiledOnceAndCachedOnDisk(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{WorkspaceRoot: filepath.Join(dir, "ws"), CacheDir: filepath.Join(dir, "cache")}
	b := newBackend(t, cfg)
	sb := newSandbox(t, b, "sb-wasmunit0003", map[string][]byte{"ret.wasm": modReturn})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"ret.wasm"}})
			if err != nil {
				t.Error(err)
				return
			}
			if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
				t.Errorf("run: %+v %v", st, err)
			}
		}()
	}
	wg.Wait()
	e, _ := b.engineFor(ctx, pages(16))
	e.mu.Lock()
	n := len(e.mods)
	e.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d compiled modules for one module run 20 times", n)
	}
	found := false
	filepath.Walk(cfg.CacheDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			found = true
		}
		return nil
	})
	if !found {
		t.Fatal("nothing was cached on disk")
	}
}

func TestRecoverAndUnsupported(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{WorkspaceRoot: filepath.Join(dir, "ws"), CacheDir: filepath.Join(dir, "cache")}
	b := newBackend(t, cfg)
	ctx := context.Background()
	if _, err := b.Create(ctx, backends.Spec{ID: "sb-wasmunit0004"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfg.WorkspaceRoot, "sb-wasmunit0004", "ret.wasm"), modReturn, 0o644)
	b2 := newBackend(t, cfg)
	rs := b2.Recover(ctx, []backends.Spec{{ID: "sb-wasmunit0004"}, {ID: "sb-wasmgone0000"}})
	if rs[0].Err != nil || rs[1].Err == nil {
		t.Fatalf("recover: %+v", rs)
	}
	p, err := rs[0].Sandbox.Start(ctx, backends.ProcessSpec{Argv: []string{"ret.wasm"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("after recover: %+v %v", st, err)
	}
	rs[0].Sandbox.Destroy(ctx)
	for _, kind := range []string{api.KindRun, api.KindInterrupt, api.KindIPython, api.KindBrowser} {
		if err := b.Unsupported(kind); !errors.Is(err, api.ErrUnsupported) {
			t.Errorf("%s: %v", kind, err)
		}
	}
	for _, kind := range []string{api.KindExec, api.KindFileRead, api.KindFileWrite, api.KindFileEdit} {
		if err := b.Unsupported(kind); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	for name, spec := range map[string]backends.Spec{
		"image":   {ID: "sb-wasmunit0005", Image: "x"},
		"network": {ID: "sb-wasmunit0006", Network: api.NetworkHost},
		"disk":    {ID: "sb-wasmunit0007", Limits: api.Limits{DiskMB: 1}},
		"cpus":    {ID: "sb-wasmunit0008", Limits: api.Limits{CPUs: 0.5}},
		"workdir": {ID: "sb-wasmunit0009", Workdir: "/tmp"},
	} {
		if _, err := b.Create(ctx, spec); !errors.Is(err, api.ErrUnsupported) {
			t.Errorf("create with %s: %v", name, err)
		}
	}
}

// TestPidsBoundsRuns: limits.pids bounds the modules a sandbox runs at
// once; a destroyed sandbox runs none.
func TestPidsBoundsRuns(t *testing.T) {
	b := newBackend(t, Config{})
	ctx := context.Background()
	sb, err := b.Create(ctx, backends.Spec{ID: "sb-wasmunit0010", Limits: api.Limits{MemoryMB: 16, Pids: 2}})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(b.cfg.WorkspaceRoot, "sb-wasmunit0010", "loop.wasm"), modLoop, 0o644)
	var procs []backends.Process
	for range 2 {
		p, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}}); !errors.Is(err, api.ErrResourceExhausted) {
		t.Fatalf("a third run with pids 2: %v", err)
	}
	procs[0].Kill()
	procs[0].Wait(ctx)
	p, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}})
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	p.Kill()
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, backends.ProcessSpec{Argv: []string{"loop.wasm"}}); err == nil {
		t.Fatal("ran in a destroyed sandbox")
	}
}
