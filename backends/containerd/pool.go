package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// labelPool marks a container of the warm pool, with the pool's nonce:
// one of another (earlier) backend instance is a leftover.
const labelPool = "sandboxd.pool"

// pool keeps host-image containers created and started ahead of need, so
// that a create is a rename of directories and a metadata update instead
// of runc's create and start (about 100 ms here). Only creates that match
// what the pool makes take from it: the host image, no network, the
// default workdir; limits other than the pool's are applied to the taken
// container's cgroup (runc update), the sandbox's environment to its
// execs.
type pool struct {
	b      *Backend
	size   int
	limits api.Limits
	dir    string // where pooled containers' directories live
	nonce  string

	mu      sync.Mutex
	ready   []*sandbox
	filling bool
	started bool
	closed  bool
	wg      sync.WaitGroup
}

// refillDelay is how long after handing out a container the pool starts
// making its replacement.
const refillDelay = 300 * time.Millisecond

func newPool(b *Backend, size int, limits api.Limits, dir string) *pool {
	n := make([]byte, 4)
	_, _ = rand.Read(n)
	return &pool{b: b, size: size, limits: limits, dir: dir, nonce: hex.EncodeToString(n)}
}

// matches reports whether spec can be served from the pool.
func (p *pool) matches(spec backends.Spec) bool {
	return (spec.Image == "" || spec.Image == HostImage) &&
		(spec.Network == "" || spec.Network == api.NetworkNone) &&
		(spec.Workdir == "" || spec.Workdir == defaultWD) &&
		spec.Limits.DiskMB == 0
}

// kick starts filling the pool (the first time: after clearing what
// earlier instances left).
func (p *pool) kick() {
	if p == nil || p.size <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.filling || len(p.ready) >= p.size {
		return
	}
	p.filling = true
	first := !p.started
	p.started = true
	p.wg.Add(1)
	go p.fill(first)
}

func (p *pool) fill(first bool) {
	defer p.wg.Done()
	if first {
		p.clearLeftovers()
	}
	for {
		p.mu.Lock()
		if p.closed || len(p.ready) >= p.size {
			p.filling = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		sb, err := p.makeOne()
		p.mu.Lock()
		if err != nil || p.closed {
			p.filling = false
			p.mu.Unlock()
			if err != nil {
				p.b.log.Warn("containerd: warm pool: make a container", "err", err)
			} else {
				p.destroy(sb)
			}
			return
		}
		p.ready = append(p.ready, sb)
		p.mu.Unlock()
	}
}

func (p *pool) makeOne() (*sandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := make([]byte, 6)
	_, _ = rand.Read(n)
	id := "pool-" + p.nonce + "-" + hex.EncodeToString(n)
	dir := filepath.Join(p.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sb, err := p.b.make(ctx, backends.Spec{ID: id, Dir: dir, Limits: p.limits, Network: api.NetworkNone},
		map[string]string{labelOwner: p.b.cfg.Owner, labelPool: p.nonce, labelDir: dir, labelLayout: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return sb, nil
}

// take hands out a pooled container for spec, re-labelled and with the
// sandbox's directories, environment and limits; nil if there is none to
// take (the caller makes one). It starts making a replacement.
func (p *pool) take(ctx context.Context, spec backends.Spec) *sandbox {
	if p == nil || p.size <= 0 || !p.matches(spec) {
		return nil
	}
	// Refill a little later: a new sandbox's first action usually comes
	// at once, and runc making the next container would slow it down.
	defer time.AfterFunc(refillDelay, p.kick)
	for {
		p.mu.Lock()
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return nil
		}
		sb := p.ready[0]
		p.ready = p.ready[1:]
		p.mu.Unlock()
		if err := p.adopt(ctx, sb, spec); err != nil {
			p.b.log.Warn("containerd: warm pool: hand out a container", "container", sb.ctr.ID(), "err", err)
			p.destroy(sb)
			continue
		}
		return sb
	}
}

// adopt turns pooled container sb into the sandbox of spec.
func (p *pool) adopt(ctx context.Context, sb *sandbox, spec backends.Spec) error {
	if !sb.initAlive() {
		return errors.New("its init is gone")
	}
	// Its directories stay where they are (runc keeps its root's path and
	// works from it): the sandbox's layout is the pooled one.
	s, err := sb.ctr.Spec(ctx)
	if err != nil {
		return err
	}
	env := map[string]string{}
	for _, kv := range s.Process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	s.Process.Env = envList(env)
	if cgroupLimits(spec.Limits) != cgroupLimits(p.limits) {
		want, err := p.b.buildSpec(ctx, spec, true, defaultWD, nil)
		if err != nil {
			return err
		}
		r := want.Linux.Resources
		update := &specs.LinuxResources{Memory: r.Memory, Pids: r.Pids, CPU: r.CPU}
		if update.CPU == nil {
			// No cpus limit: lift the pool's, if it had one.
			update.CPU = &specs.LinuxCPU{Quota: ptr(int64(-1))}
		}
		if err := sb.task.Update(ctx, client.WithResources(update)); err != nil {
			return fmt.Errorf("apply its limits: %w", err)
		}
		s.Linux.Resources = r
	}
	anySpec, err := typeurl.MarshalAny(s)
	if err != nil {
		return err
	}
	err = sb.ctr.Update(ctx, func(_ context.Context, _ *client.Client, c *containers.Container) error {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		delete(c.Labels, labelPool)
		c.Labels[labelID], c.Labels[labelOwner], c.Labels[labelDir] = spec.ID, p.b.cfg.Owner, spec.Dir
		c.Spec = anySpec
		return nil
	})
	if err != nil {
		return fmt.Errorf("re-label it: %w", err)
	}
	sb.id, sb.proc, sb.ownDir = spec.ID, *s.Process, true
	return nil
}

// cgroupLimits are the limits that shape a container's cgroup, defaults
// applied.
func cgroupLimits(l api.Limits) [3]float64 {
	mem, pids := l.MemoryMB, l.Pids
	if mem <= 0 {
		mem = defaultMemoryMB
	}
	if pids <= 0 {
		pids = defaultPids
	}
	return [3]float64{float64(mem), float64(pids), max(l.CPUs, 0)}
}

func (p *pool) destroy(sb *sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = removeContainer(ctx, sb.ctr)
	os.RemoveAll(sb.l.dir)
}

// clearLeftovers removes pooled containers of earlier backend instances
// (a daemon killed before it could) and the pool directories no container
// uses any more. A pooled container handed out to a sandbox keeps its
// directory in the pool's: those stay.
func (p *pool) clearLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := p.b.client.Containers(ctx, fmt.Sprintf("labels.%q==%q", labelOwner, p.b.cfg.Owner))
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			// Unknown: keep every directory.
			return
		}
		if n, ok := labels[labelPool]; ok && n != p.nonce {
			_ = removeContainer(ctx, c)
			continue
		}
		used[filepath.Base(labels[labelLayout])] = true
	}
	ents, _ := os.ReadDir(p.dir)
	for _, e := range ents {
		if !used[e.Name()] && !strings.HasPrefix(e.Name(), "pool-"+p.nonce+"-") {
			os.RemoveAll(filepath.Join(p.dir, e.Name()))
		}
	}
}

// close destroys the pooled containers.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.wg.Wait()
	for _, sb := range ready {
		p.destroy(sb)
	}
}
