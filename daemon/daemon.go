// Package daemon is the sandboxd server: the REST API of docs/openapi.yaml
// on fasthttp, bearer-token auth, the sandbox manager with its durable event
// logs, metrics, and the daemon's lifecycle (readiness notification,
// recovery after a restart, graceful shutdown).
//
// It is the only package that imports fasthttp.
package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/containerd"
	"github.com/sandboxd/sandboxd/backends/process"
	"github.com/sandboxd/sandboxd/backends/wasm"
	"github.com/sandboxd/sandboxd/executors/bash"
	"github.com/sandboxd/sandboxd/executors/browser"
	execx "github.com/sandboxd/sandboxd/executors/exec"
	filex "github.com/sandboxd/sandboxd/executors/file"
	"github.com/sandboxd/sandboxd/executors/ipython"
	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

// Version is the daemon's version, set at build time with
// -ldflags "-X github.com/sandboxd/sandboxd/daemon.Version=...".
var Version = ""

// version returns Version, or what the build knows of itself.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "dev-" + rev
		}
	}
	return "dev"
}

// Daemon is one sandboxd server.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	token    string
	backends map[string]backends.Backend
	order    []string // backend names in /v1/info order
	mgr      *manager
	// mcpSessions are the sessions of the MCP endpoint.
	mcpSessions mcpSessions
	// oh is the OpenHands endpoint's state.
	oh      openhandsState
	metrics *metrics
	lock    *os.File // flock on the state dir

	stopping atomic.Bool
	stop     chan struct{} // closed when shutdown begins: streams end
	abort    chan struct{} // closed when the grace period is over: actions stop
	stopOnce sync.Once

	servers []*fasthttp.Server
	sockets []string // unix socket paths to remove at exit
}

// New prepares a daemon: state directory, token, backends, and the
// sandboxes of a previous run. It does not listen yet.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Daemon, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:      cfg,
		log:      log,
		backends: map[string]backends.Backend{},
		metrics:  newMetrics(),
		stop:     make(chan struct{}),
		abort:    make(chan struct{}),
	}
	userIsolation := os.Geteuid() == 0
	if cfg.Process.UserIsolation != nil {
		userIsolation = *cfg.Process.UserIsolation
	}
	// Sandboxes of other users must pass through the state dir to reach
	// their workspaces (0711: search only, no listing).
	mode := os.FileMode(0o700)
	if userIsolation {
		mode = 0o711
	}
	if err := os.MkdirAll(cfg.StateDir, mode); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, mode); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d.lock = lock
	fail := func(err error) (*Daemon, error) {
		lock.Close()
		return nil, err
	}
	if d.token, err = loadToken(cfg, log); err != nil {
		return fail(err)
	}
	cgParent := cfg.Process.CgroupParent
	if cgParent == "" {
		sum := sha256.Sum256([]byte(cfg.StateDir))
		cgParent = "sandboxd-" + hex.EncodeToString(sum[:4])
	}
	pb, err := process.New(process.Config{
		WorkspaceRoot: filepath.Join(cfg.StateDir, "workspaces"),
		TmpRoot:       filepath.Join(cfg.StateDir, "tmp"),
		UserIsolation: userIsolation,
		UIDBase:       cfg.Process.UIDBase,
		UIDLockDir:    cfg.Process.UIDLockDir,
		MaxSandboxes:  cfg.Sandbox.MaxSandboxes,
		Cgroups:       cfg.Process.Cgroups,
		CgroupParent:  cgParent,
		Logger:        log.With("backend", "process"),
	})
	if err != nil {
		return fail(err)
	}
	d.addBackend(pb)
	if !cfg.Containerd.Enabled {
		d.addBackend(missing{api.BackendContainerd, "the containerd backend is turned off in the configuration (containerd.enabled)"})
	} else {
		cb, err := containerd.New(containerd.Config{
			Socket:      cfg.Containerd.Socket,
			Namespace:   cfg.Containerd.Namespace,
			Runtime:     cfg.Containerd.Runtime,
			Snapshotter: cfg.Containerd.Snapshotter,
			Helper:      cfg.Containerd.Helper,
			Owner:       cfg.StateDir,
			PoolSize:    cfg.Containerd.PoolSize,
			PoolLimits:  cfg.Limits.Default.api(),
			Logger:      log.With("backend", "containerd"),
			// A compressed archive may not unfold into more than an
			// uncompressed one may be.
			MaxImportBytes: cfg.Containerd.MaxImageBytes,
		})
		if err != nil {
			return fail(err)
		}
		d.addBackend(cb)
	}
	wb, err := wasm.New(wasm.Config{
		WorkspaceRoot:  filepath.Join(cfg.StateDir, "wasm"),
		CacheDir:       filepath.Join(cfg.StateDir, "cache", "wasm"),
		MaxModuleBytes: cfg.Wasm.MaxModuleBytes,
		MaxCompiled:    cfg.Wasm.MaxCompiled,
		Logger:         log.With("backend", "wasm"),
	})
	if err != nil {
		return fail(err)
	}
	d.addBackend(wb)
	if d.mgr, err = newManager(d); err != nil {
		return fail(err)
	}
	if err := d.mgr.recover(ctx); err != nil {
		return fail(fmt.Errorf("recover sandboxes: %w", err))
	}
	return d, nil
}

func (d *Daemon) addBackend(b backends.Backend) {
	d.backends[b.Name()] = b
	d.order = append(d.order, b.Name())
}

// missing stands for a backend this build does not have: it is listed as
// unavailable, with the reason, and creates nothing.
type missing struct{ name, reason string }

func (m missing) Name() string                    { return m.name }
func (m missing) Available(context.Context) error { return errors.New(m.reason) }
func (m missing) Features() []string              { return nil }
func (m missing) Recover(_ context.Context, specs []backends.Spec) []backends.Recovered {
	out := make([]backends.Recovered, len(specs))
	for i, s := range specs {
		out[i] = backends.Recovered{ID: s.ID, Err: errors.New(m.reason)}
	}
	return out
}
func (m missing) Create(context.Context, backends.Spec) (backends.Sandbox, error) {
	return nil, api.Errorf(api.ErrUnavailable, "%s", m.reason)
}

func (d *Daemon) bashConfig() bash.Config {
	c := bash.DefaultConfig()
	c.DefaultTimeout = d.cfg.Bash.DefaultTimeout.D()
	c.MaxOutputChars = d.cfg.Bash.MaxOutputChars
	c.Logger = d.log.With("executor", "bash")
	return c
}

func (d *Daemon) fileConfig() filex.Config {
	c := filex.DefaultConfig()
	c.MaxReadBytes = d.cfg.Files.MaxReadBytes
	c.MaxEditBytes = d.cfg.Files.MaxEditBytes
	c.MaxOutputChars = d.cfg.Bash.MaxOutputChars
	return c
}

func (d *Daemon) ipythonConfig() ipython.Config {
	c := ipython.DefaultConfig()
	c.Python = d.cfg.IPython.Python
	c.StartTimeout = d.cfg.IPython.StartTimeout.D()
	c.DefaultTimeout = d.cfg.IPython.DefaultTimeout.D()
	c.MaxOutputChars = d.cfg.Bash.MaxOutputChars
	c.Logger = d.log.With("executor", "ipython")
	return c
}

func (d *Daemon) browserConfig() browser.Config {
	c := browser.DefaultConfig()
	c.Chromium = d.cfg.Browser.Chromium
	c.StartTimeout = d.cfg.Browser.StartTimeout.D()
	c.DefaultTimeout = d.cfg.Browser.DefaultTimeout.D()
	c.MaxTextChars = d.cfg.Browser.MaxTextChars
	c.MaxDownloadBytes = d.cfg.Browser.MaxDownloadBytes
	c.Logger = d.log.With("executor", "browser")
	return c
}

func (d *Daemon) execConfig() execx.Config {
	c := execx.DefaultConfig()
	c.DefaultTimeout = d.cfg.Exec.DefaultTimeout.D()
	c.MaxStreamBytes = d.cfg.Exec.MaxStreamBytes
	return c
}

// lockStateDir takes an exclusive lock on the state directory, so a second
// daemon on the same directory fails at once instead of corrupting it.
func lockStateDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by another sandboxd", dir)
		}
		return nil, fmt.Errorf("lock state directory: %w", err)
	}
	return f, nil
}

// Token returns the API token (for the local client; never logged).
func (d *Daemon) Token() string { return d.token }

// Run listens and serves until ctx ends, then shuts down gracefully. ready
// is called once every listener is bound (nil is fine).
func (d *Daemon) Run(ctx context.Context, ready func(addrs []string)) error {
	lns, addrs, err := d.listen()
	if err != nil {
		d.Close()
		return err
	}
	errc := make(chan error, len(lns))
	for _, l := range lns {
		srv := d.newServer(l.auth)
		d.servers = append(d.servers, srv)
		go func() {
			var err error
			if l.tls {
				err = srv.ServeTLS(l.ln, d.cfg.TLSCert, d.cfg.TLSKey)
			} else {
				err = srv.Serve(l.ln)
			}
			errc <- err
		}()
	}
	reaper := time.NewTicker(5 * time.Second)
	defer reaper.Stop()
	for _, a := range addrs {
		d.log.Info("listening", "addr", a)
	}
	if ready != nil {
		ready(addrs)
	}
	notify("READY=1\nSTATUS=serving")
	// The service manager's watchdog: kept alive from this loop, so a
	// daemon whose loop is stuck stops answering it.
	var watchdog <-chan time.Time
	if every := watchdogInterval(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		watchdog = t.C
	}
	for {
		select {
		case <-watchdog:
			notify("WATCHDOG=1")
		case <-ctx.Done():
			return d.shutdown()
		case err := <-errc:
			d.log.Error("listener failed", "err", err)
			_ = d.shutdown()
			return err
		case now := <-reaper.C:
			d.mgr.reapIdle(now)
		}
	}
}

// shutdown stops the daemon: no new work, running actions get the grace
// period, then are stopped with their observations recorded; streams end
// with a final line; sandboxes are let go (files and re-adoptable state
// kept); logs are synced.
func (d *Daemon) shutdown() error {
	d.stopOnce.Do(func() {
		notify("STOPPING=1")
		d.log.Info("shutting down")
		d.stopping.Store(true)
		close(d.stop)
		deadline := time.Now().Add(d.cfg.ShutdownGrace.D())
		for d.mgr.active.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		close(d.abort)
		deadline = time.Now().Add(5 * time.Second)
		for d.mgr.active.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range d.servers {
			if err := srv.ShutdownWithContext(ctx); err != nil {
				d.log.Warn("http shutdown", "err", err)
			}
		}
		d.mgr.closeAll(context.Background())
		d.closeBackends()
		for _, s := range d.sockets {
			os.Remove(s)
		}
		d.lock.Close()
		d.log.Info("stopped")
	})
	return nil
}

// Close releases a daemon that was never Run.
func (d *Daemon) Close() error {
	d.stopOnce.Do(func() {
		d.stopping.Store(true)
		close(d.stop)
		close(d.abort)
		d.mgr.closeAll(context.Background())
		d.closeBackends()
		d.lock.Close()
	})
	return nil
}

// closeBackends lets the backends release what they hold themselves, once
// every sandbox is closed.
func (d *Daemon) closeBackends() {
	for _, name := range d.order {
		if c, ok := d.backends[name].(interface{ Close() error }); ok {
			if err := c.Close(); err != nil {
				d.log.Warn("close backend", "backend", name, "err", err)
			}
		}
	}
}

// info answers GET /v1/info.
func (d *Daemon) info(ctx context.Context) api.Info {
	in := api.Info{
		Version:       version(),
		Sandboxes:     d.mgr.count(),
		MaxBodyBytes:  d.cfg.MaxBodyBytes,
		DefaultLimits: d.mgr.effectiveLimits(nil),
		MaxLimits:     d.cfg.Limits.Max.api(),
	}
	for _, name := range d.order {
		b := d.backends[name]
		bi := api.BackendInfo{Name: name, Available: true, Features: b.Features()}
		if err := b.Available(ctx); err != nil {
			bi.Available, bi.Reason = false, err.Error()
		}
		in.Backends = append(in.Backends, bi)
	}
	return in
}

// watchdogInterval is how often to tell the service manager the daemon is
// alive: half its WATCHDOG_USEC, if that is set for this process.
func watchdogInterval() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}

// notify sends a state to the service manager (sd_notify protocol), if
// NOTIFY_SOCKET names one. Failures are ignored: readiness is a courtesy
// to whoever started us.
func notify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = conn.Write([]byte(state))
}
