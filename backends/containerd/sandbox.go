package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// sandbox is one container and its task.
type sandbox struct {
	b       *Backend
	id      string
	l       layout
	workdir string
	ctr     client.Container
	task    client.Task
	initPid int
	proc    specs.Process // template of every exec (env, caps, rlimits)
	cgroup  string        // the container's cgroups path
	ownDir  bool          // l.dir is the backend's (the pool's), not Spec.Dir: Destroy removes it

	execSeq atomic.Int64
	mu      sync.Mutex
	procs   map[*proc]bool
	gone    bool // destroyed or closed
}

// timeouts of containerd calls made on the daemon's behalf, whatever the
// caller's context says: cleanup must finish.
const cleanupTimeout = 30 * time.Second

func (b *Backend) create(ctx context.Context, spec backends.Spec) (_ *sandbox, err error) {
	image := spec.Image
	if image == "" {
		image = HostImage
	}
	host := image == HostImage
	if _, err := checkWorkdir(spec.Workdir); err != nil {
		return nil, err
	}
	if !host && !b.helper.static {
		return nil, api.Errorf(api.ErrUnsupported, "image %q needs sandboxd's helper to be statically linked, and %s is not: build sandboxd with CGO_ENABLED=0 or set containerd.helper to a static build", image, b.helper.path)
	}
	if sb := b.pool.take(ctx, spec); sb != nil {
		return sb, nil
	}
	return b.make(ctx, spec, map[string]string{labelID: spec.ID, labelOwner: b.cfg.Owner, labelDir: spec.Dir, labelLayout: spec.Dir})
}

// make creates and starts a container for spec (whose ID is the
// container's) with labels.
func (b *Backend) make(ctx context.Context, spec backends.Spec, labels map[string]string) (_ *sandbox, err error) {
	image := spec.Image
	if image == "" {
		image = HostImage
	}
	host := image == HostImage
	workdir, err := checkWorkdir(spec.Workdir)
	if err != nil {
		return nil, err
	}
	l := layout{spec.Dir}
	if err := l.prepare(host, containerHostname); err != nil {
		return nil, fmt.Errorf("prepare sandbox directories: %w", err)
	}
	env := backends.AgentEnv()
	env["HOME"] = "/root"
	env["HOSTNAME"] = containerHostname
	var opts []client.NewContainerOpts
	if !host {
		img, err := b.lookupImage(ctx, image)
		if err != nil {
			if errdefs.IsNotFound(err) {
				return nil, api.Errorf(api.ErrNotFound, "image %q is not in containerd's store (namespace %s); import it with `sandboxd image import FILE`", image, b.cfg.Namespace)
			}
			return nil, b.classify("look up image "+image, err)
		}
		if ok, err := img.IsUnpacked(ctx, b.cfg.Snapshotter); err != nil || !ok {
			if err := img.Unpack(ctx, b.cfg.Snapshotter); err != nil {
				return nil, b.classify("unpack image "+image, err)
			}
		}
		cfg, err := img.Spec(ctx)
		if err == nil {
			for _, kv := range cfg.Config.Env {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
		}
		opts = append(opts, client.WithImage(img), client.WithSnapshotter(b.cfg.Snapshotter), client.WithNewSnapshot(spec.ID, img))
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	s, err := b.buildSpec(ctx, spec, host, workdir, envList(env))
	if err != nil {
		return nil, fmt.Errorf("build container spec: %w", err)
	}
	opts = append(opts,
		client.WithContainerLabels(labels),
		client.WithRuntime(b.cfg.Runtime, nil),
		client.WithSpec(s),
	)
	ctr, err := b.client.NewContainer(ctx, spec.ID, opts...)
	if err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil, api.Errorf(api.ErrConflict, "a container called %s already exists in containerd namespace %s", spec.ID, b.cfg.Namespace)
		}
		return nil, b.classify("create container", err)
	}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			_ = removeContainer(ctx, ctr)
		}
	}()
	task, err := ctr.NewTask(ctx, cio.NullIO)
	if err != nil {
		return nil, b.classify("create the container's task", err)
	}
	if err := task.Start(ctx); err != nil {
		return nil, b.classify("start the container", err)
	}
	return b.newSandbox(spec, workdir, ctr, task, s), nil
}

func (b *Backend) newSandbox(spec backends.Spec, workdir string, ctr client.Container, task client.Task, s *specs.Spec) *sandbox {
	return &sandbox{
		b: b, id: spec.ID, l: layout{spec.Dir}, workdir: workdir,
		ctr: ctr, task: task, initPid: int(task.Pid()), proc: *s.Process,
		cgroup: s.Linux.CgroupsPath, procs: map[*proc]bool{},
	}
}

// checkWorkdir validates a requested container workdir.
func checkWorkdir(wd string) (string, error) {
	if wd == "" {
		return defaultWD, nil
	}
	c := path.Clean(wd)
	if !path.IsAbs(wd) || c == "/" || strings.ContainsAny(wd, "\x00:,") {
		return "", api.Errorf(api.ErrInvalidArgument, "workdir %q: want an absolute path below /", wd)
	}
	for _, reserved := range []string{"/proc", "/sys", "/dev", "/usr", "/etc", "/tmp", "/root", "/run", "/var", helperDir} {
		if c == reserved || strings.HasPrefix(c, reserved+"/") {
			return "", api.Errorf(api.ErrInvalidArgument, "workdir %q: %s is reserved", wd, reserved)
		}
	}
	return c, nil
}

// adopt re-adopts the container of spec after a daemon restart.
func (b *Backend) adopt(ctx context.Context, spec backends.Spec) (*sandbox, string, error) {
	// By label: a container from the warm pool has an id of its own.
	cs, err := b.client.Containers(ctx, fmt.Sprintf("labels.%q==%q,labels.%q==%q", labelID, spec.ID, labelOwner, b.cfg.Owner))
	if err != nil {
		return nil, "", b.classify("find the sandbox's container", err)
	}
	if len(cs) != 1 {
		return nil, "", fmt.Errorf("its container is gone (%d containers carry its labels)", len(cs))
	}
	ctr := cs[0]
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return nil, "", b.classify("read the container's labels", err)
	}
	l, ownDir, err := b.layoutOf(spec, labels)
	if err != nil {
		return nil, "", err
	}
	s, err := ctr.Spec(ctx)
	if err != nil {
		return nil, "", b.classify("read the container's spec", err)
	}
	fail := func(why string) (*sandbox, string, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = removeContainer(ctx, ctr)
		return nil, "", errors.New(why)
	}
	// A previous daemon killed while it started a process left the shim
	// blocked on that process's FIFOs (see leftovers.go): until they are
	// opened, the task answers no status and the container not even a
	// kill.
	held := holdFIFOs(l.fifos())
	defer held.close()
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return fail("its container had no running task (the host may have rebooted)")
	}
	st, err := settledStatus(ctx, task)
	if err != nil || st.Status != client.Running {
		return fail(fmt.Sprintf("its container is not running (%s)", st.Status))
	}
	workdir := defaultWD
	for _, m := range s.Mounts {
		if m.Source == l.workspace() {
			workdir = m.Destination
		}
	}
	sb := b.newSandbox(spec, workdir, ctr, task, s)
	sb.l, sb.ownDir = l, ownDir
	sb.stopLeftovers(ctx, held.execs)
	return sb, "", nil
}

// layoutOf is where the directories of spec's container are: Spec.Dir, or
// a directory of the warm pool's (never anywhere else, whatever a label
// says).
func (b *Backend) layoutOf(spec backends.Spec, labels map[string]string) (layout, bool, error) {
	dir := labels[labelLayout]
	switch {
	case dir == "" || dir == spec.Dir:
		return layout{spec.Dir}, false, nil
	case b.pool != nil && filepath.Dir(dir) == b.pool.dir:
		return layout{dir}, true, nil
	case filepath.Dir(dir) == filepath.Join(b.cfg.Owner, poolDirName):
		return layout{dir}, true, nil
	}
	return layout{}, false, fmt.Errorf("its container's directory %q is not this daemon's", dir)
}

// ID implements backends.Sandbox.
func (s *sandbox) ID() string { return s.id }

// Workdir implements backends.Sandbox.
func (s *sandbox) Workdir() string { return s.workdir }

// FS implements backends.Sandbox.
func (s *sandbox) FS() backends.FS { return containerFS{s} }

// Close implements backends.Sandbox: the container keeps running, to be
// re-adopted by the next daemon; the daemon lets go of its processes'
// output. Non-terminal processes cannot be re-attached to, so they are
// killed; terminals (bash sessions) live on.
func (s *sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	s.gone = true
	ps := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		if p.tty {
			p.detach()
			continue
		}
		_ = p.Kill()
		_, _ = p.Wait(ctx)
	}
	return nil
}

// Destroy implements backends.Sandbox.
func (s *sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	s.gone = true
	ps := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := removeContainer(ctx, s.ctr)
	for _, p := range ps {
		p.stop()
	}
	if err == nil && s.ownDir {
		if rerr := os.RemoveAll(s.l.dir); rerr != nil {
			err = rerr
		}
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return s.b.classify("remove the container", err)
	}
	return nil
}

// removeContainer kills every process of c, deletes its task, the container
// and its snapshot. It is idempotent.
func removeContainer(ctx context.Context, c client.Container) error {
	task, err := c.Task(ctx, nil)
	if err == nil {
		// Kill everything (runc kill --all walks the cgroup), wait for
		// the init to be gone, then delete the task.
		waitCh, werr := task.Wait(ctx)
		if kerr := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); kerr != nil && !errdefs.IsNotFound(kerr) && !errdefs.IsFailedPrecondition(kerr) {
			err = kerr
		}
		if werr == nil {
			select {
			case <-waitCh:
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		if _, derr := task.Delete(ctx, client.WithProcessKill); derr != nil && !errdefs.IsNotFound(derr) {
			return fmt.Errorf("delete task: %w", derr)
		}
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container: %w", err)
	}
	return nil
}

// env returns the environment of a process: the sandbox's, then extra.
func (s *sandbox) env(extra map[string]string) []string {
	m := map[string]string{}
	for _, kv := range s.proc.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	for k, v := range extra {
		m[k] = v
	}
	return envList(m)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// dir resolves a process's working directory in the container.
func (s *sandbox) dir(d string) string {
	switch {
	case d == "":
		return s.workdir
	case path.IsAbs(d):
		return path.Clean(d)
	}
	return path.Join(s.workdir, d)
}

// rootDir is the container's root as the host reaches it.
func (s *sandbox) rootDir() string { return fmt.Sprintf("/proc/%d/root", s.initPid) }

// errGone is the error of a sandbox that was destroyed or let go of.
var errGone = api.Errorf(api.ErrUnavailable, "the sandbox is being destroyed or the daemon is stopping")

func (s *sandbox) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.gone
}

// initAlive reports whether the container's init is still there to
// reach files through.
func (s *sandbox) initAlive() bool {
	_, err := os.Stat(s.rootDir())
	return err == nil
}
