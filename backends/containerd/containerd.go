// Package containerd is the strong-isolation backend: one runc container
// per sandbox, through the host's containerd (1.6 or newer), in a
// containerd namespace of sandboxd's own.
//
// A sandbox is a container whose init is sandboxd's own small init (the
// daemon binary bind-mounted read-only at /.sandboxd/sandboxd; see
// package sbinit) and whose processes are task execs, each started through
// the exec wrapper, which makes it a child subreaper: everything it starts
// stays in its tree, so Kill can stop and kill the whole tree from the host
// (see proctree.go). Output goes through FIFOs in the sandbox's private
// directory; a terminal's stdin FIFO is held open by a keeper process on
// the host, so that bash sessions survive a daemon restart and are
// re-attached to.
//
// Root filesystems are either the built-in "host" image (the host's /usr
// and its links mounted read-only, a generated /etc, writable /workspace,
// /tmp and /root) or an image from containerd's image store, unpacked
// into a snapshot. The spec is hardened (see spec.go). The daemon reaches
// a sandbox's files through /proc/<init pid>/root, the container's own
// mount view, with os.Root confinement.
//
// Containers carry labels naming their sandbox and the daemon's state
// directory, so that Recover re-adopts exactly this daemon's containers
// and removes its leftovers, whatever other daemons keep in the namespace.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// Config configures the containerd backend.
type Config struct {
	// Socket is containerd's gRPC socket.
	Socket string
	// Namespace is the containerd namespace sandboxd's objects live in.
	Namespace string
	// Runtime is the containerd runtime (shim) of the containers.
	Runtime string
	// Snapshotter unpacks images ("" = containerd's default, overlayfs).
	Snapshotter string
	// Helper is the program bind-mounted into every container as its init
	// and exec wrapper: a sandboxd binary ("" = this executable). Images
	// other than "host" need it statically linked.
	Helper string
	// Owner tells this daemon's containers from other daemons' in the same
	// namespace (the daemon's state directory).
	Owner string
	// PoolSize is how many host-image containers are kept created and
	// started ahead of need (0: none); PoolLimits are their limits, those
	// most sandboxes get (the daemon's defaults).
	PoolSize   int
	PoolLimits api.Limits
	Logger     *slog.Logger
	// MaxImportBytes caps the decompressed size of an imported image
	// archive (see ImportImage); 0 is no cap.
	MaxImportBytes int64
}

// Labels on every container of this backend.
const (
	labelID    = "sandboxd.id"
	labelOwner = "sandboxd.owner"
	labelDir   = "sandboxd.dir" // the sandbox's Spec.Dir
	// labelLayout is the directory holding the container's root, /etc,
	// /workspace, /tmp, /root and FIFOs: Spec.Dir, or the warm pool's
	// directory for the container, for a container made by the pool.
	labelLayout = "sandboxd.layout"
)

// poolDirName is the warm pool's directory in the owner (state) directory.
const poolDirName = "containerd-pool"

// HostImage is the built-in image: the host's system, read-only.
const HostImage = "host"

// Backend is the containerd backend.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	client *client.Client
	helper helperInfo
	pool   *pool

	mu        sync.Mutex
	checkedAt time.Time
	availErr  error
}

// New returns the backend. It does not need containerd to be up: the
// connection is made lazily and re-made when containerd comes back.
func New(cfg Config) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Socket == "" {
		cfg.Socket = "/run/containerd/containerd.sock"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "sandboxd"
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "io.containerd.runc.v2"
	}
	if cfg.Owner == "" {
		return nil, errors.New("containerd backend: an owner (the state directory) is needed")
	}
	h, err := findHelper(cfg.Helper)
	if err != nil {
		return nil, err
	}
	// A short backoff: Available is asked often and must answer quickly
	// when containerd is down, and notice quickly when it is back.
	c, err := client.New(cfg.Socket, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd backend: %w", err)
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, client: c, helper: h}
	if cfg.PoolSize > 0 {
		b.pool = newPool(b, cfg.PoolSize, cfg.PoolLimits, filepath.Join(cfg.Owner, poolDirName))
	}
	return b, nil
}

// Close destroys the warm pool and closes the connection to containerd.
func (b *Backend) Close() error {
	b.pool.close()
	return b.client.Close()
}

// Name implements backends.Backend.
func (b *Backend) Name() string { return api.BackendContainerd }

// Features implements backends.Backend.
func (b *Backend) Features() []string {
	f := []string{"seccomp", "no-new-privileges", "network-none", "cgroup-memory", "cgroup-pids", "cgroup-cpu", "reattach"}
	if b.helper.static {
		f = append(f, "images")
	}
	return f
}

// availCache is how long a successful or failed probe of containerd is
// trusted.
const availCache = time.Second

// Available implements backends.Backend: containerd answers, in time.
func (b *Backend) Available(ctx context.Context) error {
	b.mu.Lock()
	if time.Since(b.checkedAt) < availCache {
		err := b.availErr
		b.mu.Unlock()
		return err
	}
	b.mu.Unlock()
	err := b.probe(ctx)
	b.mu.Lock()
	b.checkedAt, b.availErr = time.Now(), err
	b.mu.Unlock()
	if err == nil {
		b.pool.kick()
	}
	return err
}

func (b *Backend) probe(ctx context.Context) error {
	if _, err := os.Stat(b.cfg.Socket); err != nil {
		return fmt.Errorf("containerd's socket %s is not there (is containerd installed and running?)", b.cfg.Socket)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := b.client.Version(ctx); err != nil {
		return fmt.Errorf("containerd at %s does not answer: %v", b.cfg.Socket, errText(err))
	}
	return nil
}

// forget drops the cached availability, after an error that says
// containerd may be gone.
func (b *Backend) forget() {
	b.mu.Lock()
	b.checkedAt = time.Time{}
	b.mu.Unlock()
}

// classify maps a containerd error to the API's classification.
func (b *Backend) classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrInvalidArgument),
		errors.Is(err, api.ErrPermissionDenied), errors.Is(err, api.ErrUnavailable),
		errors.Is(err, api.ErrUnsupported), errors.Is(err, api.ErrResourceExhausted):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errdefs.IsNotFound(err):
		return api.Errorf(api.ErrNotFound, "%s: %v", what, errText(err))
	case errdefs.IsUnavailable(err):
		b.forget()
		return api.Errorf(api.ErrUnavailable, "%s: containerd is not available: %v", what, errText(err))
	}
	if b.probe(context.Background()) != nil {
		b.forget()
		return api.Errorf(api.ErrUnavailable, "%s: containerd is not available: %v", what, errText(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// errText shortens gRPC errors to their message.
func errText(err error) string {
	s := err.Error()
	const pfx = "rpc error: code = "
	if len(s) > len(pfx) && s[:len(pfx)] == pfx {
		for i := len(pfx); i < len(s)-len(" desc = "); i++ {
			if s[i:i+len(" desc = ")] == " desc = " {
				return s[i+len(" desc = "):]
			}
		}
	}
	return s
}

// Create implements backends.Backend.
func (b *Backend) Create(ctx context.Context, spec backends.Spec) (backends.Sandbox, error) {
	if err := b.Available(ctx); err != nil {
		return nil, api.Errorf(api.ErrUnavailable, "the containerd backend is not available: %v", err)
	}
	if spec.Network != "" && spec.Network != api.NetworkNone && spec.Network != api.NetworkHost {
		return nil, api.Errorf(api.ErrInvalidArgument, "network %q: want none or host", spec.Network)
	}
	if spec.Limits.DiskMB > 0 {
		return nil, api.Errorf(api.ErrUnsupported, "the containerd backend does not enforce disk_mb yet; leave it 0")
	}
	sb, err := b.create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// Recover implements backends.Backend: every container of this daemon
// that a spec names and that still runs is re-adopted with its bash
// sessions; the rest, and containers no spec names, are removed.
func (b *Backend) Recover(ctx context.Context, specs []backends.Spec) []backends.Recovered {
	out := make([]backends.Recovered, 0, len(specs))
	known := map[string]bool{}
	for _, spec := range specs {
		known[spec.ID] = true
		sb, note, err := b.adopt(ctx, spec)
		r := backends.Recovered{ID: spec.ID, Note: note, Err: err}
		if err == nil {
			r.Sandbox = sb
		}
		out = append(out, r)
	}
	b.sweep(ctx, known)
	return out
}

// sweep removes containers of this daemon that no sandbox names (a crash
// between creating the container and recording the sandbox).
func (b *Backend) sweep(ctx context.Context, known map[string]bool) {
	cs, err := b.client.Containers(ctx, fmt.Sprintf("labels.%q==%q", labelOwner, b.cfg.Owner))
	if err != nil {
		b.log.Warn("containerd: list containers for clean-up", "err", err)
		return
	}
	for _, c := range cs {
		if known[c.ID()] {
			continue
		}
		labels, err := c.Labels(ctx)
		if err != nil {
			continue
		}
		if n, ok := labels[labelPool]; ok {
			// A warm container: this instance's, or a leftover.
			if b.pool == nil || n != b.pool.nonce {
				b.removeLeftover(ctx, c, labels)
			}
			continue
		}
		// A sandbox Recover was not asked about (re-adopted later, or
		// created since) still has its directory; a deleted one, or one
		// the daemon never recorded, does not.
		if dir := labels[labelDir]; dir != "" {
			if _, err := os.Stat(dir); err == nil {
				continue
			}
		}
		b.removeLeftover(ctx, c, labels)
	}
}

// removeLeftover removes a container of this daemon that no sandbox
// needs, and its directory if it is the warm pool's.
func (b *Backend) removeLeftover(ctx context.Context, c client.Container, labels map[string]string) {
	b.log.Info("containerd: removing a container no sandbox names", "container", c.ID())
	if err := removeContainer(context.WithoutCancel(ctx), c); err != nil {
		b.log.Warn("containerd: remove leftover container", "container", c.ID(), "err", err)
		return
	}
	if l, own, err := b.layoutOf(backends.Spec{}, labels); err == nil && own {
		os.RemoveAll(l.dir)
	}
}
