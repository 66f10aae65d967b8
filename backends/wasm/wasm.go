// Package wasm is the wasm backend: sandboxes are a workspace directory in
// which WASI (preview 1) command modules run under wazero, in the daemon's
// own process. There is no kernel surface, no network and no other host
// access: a module sees its arguments, the environment it is given, stdin,
// stdout and stderr, clocks and randomness, and the workspace, preopened as
// /workspace (and ".") through an os.Root, so no path or symlink leads out.
//
// A memory cap (limits.memory_mb, in 64 KiB pages) bounds each instance; a
// deadline closes it (wazero's WithCloseOnContextDone stops even a loop
// that never calls the host). Compiled code is cached on disk, shared by
// every sandbox and keyed by module content, so the second start of a
// module costs a fraction of the first; concurrent runs of one module share
// the compiled code in memory too.
//
// This is the only package that imports wazero.
package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

var memAllocator = allocator()

// Guest is the path the workspace has inside a module.
const Guest = "/workspace"

// Config configures the wasm backend.
type Config struct {
	// WorkspaceRoot holds one workspace directory per sandbox.
	WorkspaceRoot string
	// CacheDir keeps compiled code between runs and daemon restarts.
	CacheDir string
	// MaxModuleBytes bounds the size of a module file.
	MaxModuleBytes int64
	// MaxCompiled bounds the compiled modules kept in memory per memory
	// cap (the disk cache keeps them all).
	MaxCompiled int
	Logger      *slog.Logger
}

// Backend is the wasm backend.
type Backend struct {
	cfg   Config
	cache wazero.CompilationCache

	mu       sync.Mutex
	runtimes map[uint32]*engine // by memory cap in pages
}

// engine is a wazero runtime for one memory cap and the modules compiled
// in it.
type engine struct {
	rt wazero.Runtime

	mu   sync.Mutex
	mods []*compiled // least recently used first
}

// compiled is a module compiled (or being compiled) once for all its runs.
type compiled struct {
	code  []byte
	ready chan struct{}
	mod   wazero.CompiledModule
	err   error
	runs  sync.WaitGroup // instances using it: eviction waits for them
}

// New returns a wasm backend.
func New(cfg Config) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxModuleBytes <= 0 {
		cfg.MaxModuleBytes = 256 << 20
	}
	if cfg.MaxCompiled <= 0 {
		cfg.MaxCompiled = 32
	}
	if err := os.MkdirAll(cfg.WorkspaceRoot, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("wasm compile cache: %w", err)
	}
	return &Backend{cfg: cfg, cache: cache, runtimes: map[uint32]*engine{}}, nil
}

// Name implements backends.Backend.
func (b *Backend) Name() string { return api.BackendWasm }

// Available implements backends.Backend: wazero is pure Go.
func (b *Backend) Available(context.Context) error { return nil }

// Features implements backends.Backend.
func (b *Backend) Features() []string {
	// wazero compiles to machine code on these platforms, and
	// interprets elsewhere.
	engine := "interpreter"
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		engine = "compiler"
	}
	return []string{"wasi-preview1", engine, "compile-cache", "memory-cap", "deadline"}
}

// Unsupported implements backends.KindLimiter: a module runs with exec, and
// files work; there is no shell, kernel or browser.
func (b *Backend) Unsupported(kind string) error {
	switch kind {
	case api.KindRun, api.KindInterrupt, api.KindIPython, api.KindBrowser:
		return api.Errorf(api.ErrUnsupported, "the wasm backend runs WASI modules, not %s: use exec with argv[0] a .wasm file in the sandbox (upload it with PUT /v1/sandboxes/{id}/files), and file actions; for a shell use the process or containerd backend", kind)
	}
	return nil
}

// pages turns a memory limit into wasm pages (64 KiB), within wasm32's 4 GiB.
func pages(mb int64) uint32 {
	if mb <= 0 {
		mb = 2048
	}
	return uint32(min(mb*16, 65536))
}

// engineFor returns the runtime of a memory cap, making it on first use.
func (b *Backend) engineFor(ctx context.Context, p uint32) (*engine, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.runtimes[p]; e != nil {
		return e, nil
	}
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(b.cache).
		WithMemoryLimitPages(p).
		WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	e := &engine{rt: rt}
	b.runtimes[p] = e
	return e, nil
}

// compile returns the compiled module of code, compiling it once however
// many runs ask at the same time. The caller must call c.runs.Done().
//
// Modules are matched by content, byte for byte: nothing crafted to collide
// with another sandbox's module can run as it, and comparing (which stops at
// the first difference, and is rarely asked for two modules of one size)
// costs less than hashing would.
//
// code belongs to compile: when a compiled module already matches it, it
// goes back to the read buffers.
func (e *engine) compile(ctx context.Context, code []byte, max int) (*compiled, error) {
	e.mu.Lock()
	var c *compiled
	for i, m := range e.mods {
		if bytes.Equal(m.code, code) {
			c = m
			// Most recently used last: eviction takes the front.
			copy(e.mods[i:], e.mods[i+1:])
			e.mods[len(e.mods)-1] = m
			break
		}
	}
	if c == nil {
		c = &compiled{code: code, ready: make(chan struct{})}
		e.mods = append(e.mods, c)
		var evict []*compiled
		if n := len(e.mods) - max; n > 0 {
			evict = slices.Clone(e.mods[:n])
			e.mods = slices.Delete(e.mods, 0, n)
		}
		c.runs.Add(1)
		e.mu.Unlock()
		c.mod, c.err = e.rt.CompileModule(ctx, mergeData(code))
		close(c.ready)
		for _, old := range evict {
			go func() {
				<-old.ready
				old.runs.Wait()
				if old.mod != nil {
					old.mod.Close(context.Background())
				}
			}()
		}
	} else {
		c.runs.Add(1)
		e.mu.Unlock()
		putBuffer(code)
		<-c.ready
	}
	if c.err != nil {
		c.runs.Done()
		e.mu.Lock()
		if i := slices.Index(e.mods, c); i >= 0 {
			e.mods = slices.Delete(e.mods, i, i+1)
		}
		e.mu.Unlock()
		return nil, api.Errorf(api.ErrInvalidArgument, "not a valid WebAssembly module: %v", c.err)
	}
	return c, nil
}

// Create implements backends.Backend.
func (b *Backend) Create(ctx context.Context, spec backends.Spec) (backends.Sandbox, error) {
	if spec.Image != "" {
		return nil, api.Errorf(api.ErrUnsupported, "the wasm backend takes no image (got %q): modules come from the sandbox's files", spec.Image)
	}
	if spec.Network == api.NetworkHost {
		return nil, api.Errorf(api.ErrUnsupported, "the wasm backend has no network (WASI preview 1 has no sockets): network must be \"none\"")
	}
	if spec.Limits.DiskMB > 0 {
		return nil, api.Errorf(api.ErrUnsupported, "the wasm backend cannot enforce limits.disk_mb; leave it 0")
	}
	if spec.Limits.CPUs > 0 {
		return nil, api.Errorf(api.ErrUnsupported, "the wasm backend cannot enforce limits.cpus (each running module uses one thread); leave it 0")
	}
	if spec.Workdir != "" && path.Clean(spec.Workdir) != Guest {
		return nil, api.Errorf(api.ErrUnsupported, "a wasm sandbox's workdir is always %s (got %q)", Guest, spec.Workdir)
	}
	dir := filepath.Join(b.cfg.WorkspaceRoot, spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	return b.sandbox(spec, dir), nil
}

func (b *Backend) sandbox(spec backends.Spec, dir string) *sandbox {
	return &sandbox{b: b, id: spec.ID, dir: dir, env: spec.Env, pages: pages(spec.Limits.MemoryMB), maxRuns: int(spec.Limits.Pids), running: map[*proc]struct{}{}}
}

// Recover implements backends.Backend: a wasm sandbox is its workspace;
// nothing of it runs while the daemon is down.
func (b *Backend) Recover(ctx context.Context, specs []backends.Spec) []backends.Recovered {
	out := make([]backends.Recovered, 0, len(specs))
	for _, spec := range specs {
		r := backends.Recovered{ID: spec.ID}
		dir := filepath.Join(b.cfg.WorkspaceRoot, spec.ID)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			r.Err = fmt.Errorf("workspace %s is gone", dir)
		} else {
			r.Sandbox = b.sandbox(spec, dir)
			r.Note = "re-adopted after a daemon restart: files are kept; modules that were running were stopped"
		}
		out = append(out, r)
	}
	return out
}

// Close releases the runtimes and the cache at shutdown.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx := context.Background()
	for p, e := range b.runtimes {
		e.rt.Close(ctx)
		delete(b.runtimes, p)
	}
	return b.cache.Close(ctx)
}

// sandbox is one wasm sandbox.
type sandbox struct {
	b     *Backend
	id    string
	dir   string
	env   map[string]string
	pages uint32
	// maxRuns bounds the modules running at once (limits.pids: a module
	// is the wasm backend's process), so a sandbox holds at most
	// maxRuns × its memory cap.
	maxRuns int

	mu      sync.Mutex
	running map[*proc]struct{}
	closed  bool
}

func (s *sandbox) ID() string      { return s.id }
func (s *sandbox) Workdir() string { return Guest }

// FS implements backends.Sandbox.
func (s *sandbox) FS() backends.FS {
	return backends.DirFS{Dir: s.dir, View: Guest, UID: -1, GID: -1}
}

// Start implements backends.Sandbox: argv[0] names a module in the
// sandbox; it runs as a WASI command with the workspace as /workspace.
func (s *sandbox) Start(ctx context.Context, ps backends.ProcessSpec) (backends.Process, error) {
	if len(ps.Argv) == 0 || ps.Argv[0] == "" {
		return nil, api.Errorf(api.ErrInvalidArgument, "no module to run")
	}
	if ps.TTY {
		return nil, api.Errorf(api.ErrUnsupported, "the wasm backend has no terminals")
	}
	if d := ps.Dir; d != "" && d != "." && path.Clean(d) != Guest {
		return nil, api.Errorf(api.ErrInvalidArgument, "a module's working directory is always %s (got %q)", Guest, d)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, api.Errorf(api.ErrNotFound, "sandbox %s is destroyed", s.id)
	}
	s.mu.Unlock()

	code, err := s.readModule(ps.Argv[0])
	if err != nil {
		return nil, err
	}
	e, err := s.b.engineFor(ctx, s.pages)
	if err != nil {
		return nil, err
	}
	c, err := e.compile(ctx, code, s.b.cfg.MaxCompiled)
	if err != nil {
		return nil, err
	}
	fsys, err := newRootFS(s.dir)
	if err != nil {
		c.runs.Done()
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	runCtx, cancel := context.WithCancel(experimental.WithMemoryAllocator(context.Background(), memAllocator))
	// The module config: what the guest sees, and nothing else.
	fscfg := wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, Guest)
	fscfg = fscfg.(sysfs.FSConfig).WithSysFSMount(fsys, ".")
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(ps.Argv...).
		WithFSConfig(fscfg).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(func(ns int64) { sleep(runCtx, ns) }).
		WithRandSource(rand.Reader)
	for k, v := range s.env {
		if _, override := ps.Env[k]; !override {
			mc = mc.WithEnv(k, v)
		}
	}
	for k, v := range ps.Env {
		mc = mc.WithEnv(k, v)
	}
	// WASI has no working directory: wasi-libc resolves relative paths
	// against the "." preopen, Go's wasip1 runtime against $PWD.
	if _, ok := s.env["PWD"]; !ok {
		if _, ok := ps.Env["PWD"]; !ok {
			mc = mc.WithEnv("PWD", Guest)
		}
	}
	if ps.Stdin != nil {
		mc = mc.WithStdin(ps.Stdin)
	}
	stderr := ps.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	if ps.Stdout != nil {
		mc = mc.WithStdout(ps.Stdout)
	}
	mc = mc.WithStderr(stderr)

	p := &proc{sb: s, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	var refuse error
	switch {
	case s.closed: // destroyed while the module was read and compiled
		refuse = api.Errorf(api.ErrNotFound, "sandbox %s is destroyed", s.id)
	case s.maxRuns > 0 && len(s.running) >= s.maxRuns:
		refuse = api.Errorf(api.ErrResourceExhausted, "sandbox %s already runs %d modules, its limits.pids", s.id, len(s.running))
	default:
		s.running[p] = struct{}{}
	}
	s.mu.Unlock()
	if refuse != nil {
		cancel()
		fsys.Close()
		c.runs.Done()
		return nil, refuse
	}
	go func() {
		defer c.runs.Done()
		defer fsys.Close()
		mod, err := e.rt.InstantiateModule(runCtx, c.mod, mc)
		if mod != nil {
			mod.Close(context.Background())
		}
		p.status = status(err, stderr, runCtx)
		cancel()
		s.mu.Lock()
		delete(s.running, p)
		s.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// sleep is the guest's clock sleep (poll_oneoff on a clock): it ends early
// when the run is stopped. wazero closes an instance at its next call or
// loop iteration, which a guest sleeping for an hour in one host call would
// otherwise reach only an hour later.
func sleep(ctx context.Context, ns int64) {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// buffers keeps module read buffers between runs.
var buffers sync.Pool

func getBuffer(n int) []byte {
	if b, ok := buffers.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func putBuffer(b []byte) {
	if cap(b) <= 64<<20 {
		buffers.Put(&b)
	}
}

// readModule reads a module from the sandbox's files, through its root.
func (s *sandbox) readModule(name string) ([]byte, error) {
	fsys := s.FS()
	rel, err := fsys.Rel(name)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(rel, ".wasm") {
		return nil, api.Errorf(api.ErrInvalidArgument, "the wasm backend runs WebAssembly modules: argv[0] must name a .wasm file in the sandbox, not %q", name)
	}
	root, err := fsys.Root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, backends.FSError(name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, backends.FSError(name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, api.Errorf(api.ErrInvalidArgument, "%s is not a regular file", name)
	}
	if st.Size() > s.b.cfg.MaxModuleBytes {
		return nil, api.Errorf(api.ErrInvalidArgument, "%s is %d bytes, more than the largest module the daemon runs (%d)", name, st.Size(), s.b.cfg.MaxModuleBytes)
	}
	// One read of the size the file has, into a buffer a run of a module
	// already compiled gave back: a module is megabytes, and growing or
	// faulting in a fresh buffer for it costs more than comparing it.
	code := getBuffer(int(st.Size()))
	_, err = io.ReadFull(f, code)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		err = api.Errorf(api.ErrConflict, "%s shrank while being read; run it again", name)
	case err != nil:
		err = backends.FSError(name, err)
	default:
		if n, _ := f.Read(make([]byte, 1)); n > 0 {
			err = api.Errorf(api.ErrConflict, "%s grew while being read; run it again", name)
		}
	}
	if err != nil {
		putBuffer(code)
		return nil, err
	}
	return code, nil
}

// status turns how an instance ended into an exit status. A module closed
// because its context ended (a timeout, a kill) ends like a killed process:
// 137 and SIGKILL. A trap is a failed run, reported on stderr.
func status(err error, stderr io.Writer, ctx context.Context) backends.ExitStatus {
	var exit *sys.ExitError
	switch {
	case err == nil:
		return backends.ExitStatus{}
	case errors.As(err, &exit):
		switch exit.ExitCode() {
		case sys.ExitCodeContextCanceled, sys.ExitCodeDeadlineExceeded:
			return backends.ExitStatus{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL}
		}
		return backends.ExitStatus{Code: int(exit.ExitCode())}
	case ctx.Err() != nil:
		return backends.ExitStatus{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL}
	}
	fmt.Fprintf(stderr, "sandboxd: the module trapped: %v\n", err)
	return backends.ExitStatus{Code: 128 + int(syscall.SIGABRT), Signal: syscall.SIGABRT}
}

// Close implements backends.Sandbox: running modules are stopped; the
// workspace stays.
func (s *sandbox) Close(ctx context.Context) error {
	s.stop(ctx)
	return nil
}

// Destroy implements backends.Sandbox.
func (s *sandbox) Destroy(ctx context.Context) error {
	s.stop(ctx)
	return os.RemoveAll(s.dir)
}

// stop refuses new modules and stops the running ones.
func (s *sandbox) stop(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	procs := make([]*proc, 0, len(s.running))
	for p := range s.running {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.Kill()
		<-p.done
	}
}

// proc is one running module instance.
type proc struct {
	sb     *sandbox
	cancel context.CancelFunc
	done   chan struct{}
	status backends.ExitStatus
}

// Stdin implements backends.Process: modules get ProcessSpec.Stdin.
func (p *proc) Stdin() io.Writer { return nil }

// Wait implements backends.Process.
func (p *proc) Wait(ctx context.Context) (backends.ExitStatus, error) {
	select {
	case <-p.done:
		return p.status, nil
	case <-ctx.Done():
		return backends.ExitStatus{}, ctx.Err()
	}
}

// Signal implements backends.Process: a module has no signal handlers;
// the terminating signals close it, the others do nothing.
func (p *proc) Signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		p.cancel()
	}
	return nil
}

// Kill implements backends.Process: closing the instance's context stops
// it, wherever it is (WithCloseOnContextDone).
func (p *proc) Kill() error {
	p.cancel()
	return nil
}
