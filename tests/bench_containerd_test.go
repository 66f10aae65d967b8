package tests

// Benchmarks of the containerd backend against a raw containerd client
// doing the same work, measured in the same run, interleaved:
//
//	go test -run '^$' -bench 'Containerd(CreateFirstExec|ExecTrue)' -benchtime 50x ./tests/
//	go test -run '^$' -bench 'ContainerdIdleRSS' -benchtime 1x ./tests/
//
// The floor is a Go program on containerd's client (what sandboxd itself
// is built on): the same kind of container (an empty root directory with
// the host's /usr bind-mounted read-only, a generated /etc, the same
// namespaces, mounts, limits and containerd's default seccomp profile,
// sandboxd's static helper as a waiting init), its task started, and
// `true` run as a task exec with its output through cio FIFOs. It lives in
// a containerd namespace of its own, emptied and removed at the end.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// floorNamespace is the containerd namespace of the raw-client floor.
const floorNamespace = "sandboxd-bench-floor"

func millis(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// floor is a raw containerd client and the directories of its containers.
type floor struct {
	b   *testing.B
	c   *ctrd.Client
	ctx context.Context // in floorNamespace
	dir string
	seq int
}

// newFloor connects to containerd (skipping, or failing in CI, when there
// is none) and empties floorNamespace before and after the benchmark.
func newFloor(b *testing.B) *floor {
	b.Helper()
	if os.Geteuid() != 0 {
		require(b, "root (for containerd)", errors.New("not root"))
	}
	c, err := ctrd.New("/run/containerd/containerd.sock", ctrd.WithDefaultNamespace(floorNamespace), ctrd.WithTimeout(2*time.Second))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = c.Version(ctx)
		cancel()
		if err != nil {
			c.Close()
		}
	}
	require(b, "containerd", err)
	dir, err := os.MkdirTemp("", "sbd-floor-")
	if err != nil {
		b.Fatal(err)
	}
	f := &floor{b: b, c: c, ctx: namespaces.WithNamespace(context.Background(), floorNamespace), dir: dir}
	f.sweep()
	b.Cleanup(func() {
		f.sweep()
		// Only an empty namespace can go; a leftover makes this fail,
		// and the sweep above has logged it.
		if err := c.NamespaceService().Delete(context.Background(), floorNamespace); err != nil && !errdefs.IsNotFound(err) {
			b.Errorf("remove containerd namespace %s: %v", floorNamespace, err)
		}
		c.Close()
		os.RemoveAll(dir)
		// runc leaves the namespace's parent cgroups behind.
		for _, pattern := range []string{"/sys/fs/cgroup/" + floorNamespace, "/sys/fs/cgroup/*/" + floorNamespace} {
			matches, _ := filepath.Glob(pattern)
			for _, m := range matches {
				if err := os.Remove(m); err != nil {
					b.Errorf("remove the floor's cgroup: %v", err)
				}
			}
		}
	})
	return f
}

// sweep removes every container (task, snapshot) of floorNamespace.
func (f *floor) sweep() {
	cs, err := f.c.Containers(f.ctx)
	if err != nil {
		f.b.Errorf("list floor containers: %v", err)
		return
	}
	for _, c := range cs {
		if err := removeFloorContainer(f.ctx, c); err != nil {
			f.b.Errorf("remove floor container %s: %v", c.ID(), err)
		}
	}
}

// removeFloorContainer kills c's task, deletes it, then the container and
// its snapshot (none with a root directory; asked anyway).
func removeFloorContainer(ctx context.Context, c ctrd.Container) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if task, err := c.Task(ctx, nil); err == nil {
		waitCh, werr := task.Wait(ctx)
		if err := task.Kill(ctx, syscall.SIGKILL, ctrd.WithKillAll); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) {
			return err
		}
		if werr == nil {
			<-waitCh
		}
		if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	if err := c.Delete(ctx, ctrd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// floorBox is one floor container with its running task.
type floorBox struct {
	dir  string
	ctr  ctrd.Container
	task ctrd.Task
	proc specs.Process
}

// Host entries taken as they are, and /etc files bind-mounted from the
// host: what sandboxd's host image mounts (backends/containerd/spec.go).
var (
	floorHostLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}
	floorHostEtc   = []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "mime.types", "localtime"}
)

// prepare lays out a container's host side: an empty root directory with
// mount points, the host's /usr links, a generated /etc, and writable
// workspace, /tmp and /root directories.
func floorPrepare(dir, id string) error {
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"workspace", "tmp", "home", "etc",
		"rootfs/usr", "rootfs/etc", "rootfs/proc", "rootfs/dev", "rootfs/sys", "rootfs/tmp", "rootfs/root",
		"rootfs/run", "rootfs/var", "rootfs/workspace", "rootfs/.sandboxd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, name := range floorHostLinks {
		fi, err := os.Lstat("/" + name)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink("/" + name)
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, ".sandboxd/sandboxd"), nil, 0o755); err != nil {
		return err
	}
	etc := filepath.Join(dir, "etc")
	for name, content := range map[string]string{
		"passwd":   "root:x:0:0:root:/root:/bin/bash\n",
		"group":    "root:x:0:\n",
		"hosts":    "127.0.0.1\tlocalhost " + id + "\n",
		"hostname": id + "\n",
	} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, name := range floorHostEtc {
		fi, err := os.Stat("/etc/" + name)
		switch {
		case err != nil:
		case fi.IsDir():
			err = os.MkdirAll(filepath.Join(etc, name), 0o755)
		default:
			err = os.WriteFile(filepath.Join(etc, name), nil, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// floorSpec is the container's spec: containerd's defaults plus what the
// host image needs, as sandboxd builds it.
func (f *floor) spec(id, dir string) (*specs.Spec, error) {
	s, err := oci.GenerateSpec(f.ctx, nil, &containers.Container{ID: id})
	if err != nil {
		return nil, err
	}
	ro := func(src, dst string) specs.Mount {
		return specs.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
	}
	rw := func(src, dst string) specs.Mount {
		return specs.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", "rw", "nosuid", "nodev"}}
	}
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID"}
	s.Hostname = id
	s.Process.Args = []string{"/.sandboxd/sandboxd", "__sandboxd-helper", "init"}
	s.Process.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	s.Process.Cwd = "/"
	s.Process.NoNewPrivileges = true
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Permitted: caps, Effective: caps}
	s.Root = &specs.Root{Path: filepath.Join(dir, "rootfs"), Readonly: true}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	s.Linux.Seccomp = seccomp.DefaultProfile(s)
	s.Mounts = append(s.Mounts, ro(staticHelper, "/.sandboxd/sandboxd"), ro("/usr", "/usr"))
	for _, name := range floorHostLinks {
		if fi, err := os.Lstat("/" + name); err == nil && fi.IsDir() && fi.Mode()&os.ModeSymlink == 0 {
			s.Mounts = append(s.Mounts, ro("/"+name, "/"+name))
		}
	}
	s.Mounts = append(s.Mounts, ro(filepath.Join(dir, "etc"), "/etc"))
	for _, name := range floorHostEtc {
		if _, err := os.Stat("/etc/" + name); err == nil {
			s.Mounts = append(s.Mounts, ro("/etc/"+name, "/etc/"+name))
		}
	}
	s.Mounts = append(s.Mounts,
		specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/run", Options: []string{"nosuid", "nodev", "mode=755", "size=64m"}},
		specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/var", Options: []string{"nosuid", "nodev", "mode=755", "size=256m"}},
		rw(filepath.Join(dir, "tmp"), "/tmp"),
		rw(filepath.Join(dir, "home"), "/root"),
		rw(filepath.Join(dir, "workspace"), "/workspace"),
	)
	mem, pids := int64(2048<<20), int64(1024)
	s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &mem}
	s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &pids}
	return s, nil
}

// create makes a container and starts its task (the floor of a sandbox's
// creation).
func (f *floor) create() (*floorBox, error) {
	f.seq++
	id := fmt.Sprintf("floor-%d-%s", f.seq, randomHex(4))
	dir := filepath.Join(f.dir, id)
	if err := floorPrepare(dir, id); err != nil {
		return nil, err
	}
	s, err := f.spec(id, dir)
	if err != nil {
		return nil, err
	}
	ctr, err := f.c.NewContainer(f.ctx, id, ctrd.WithRuntime("io.containerd.runc.v2", nil), ctrd.WithSpec(s))
	if err != nil {
		return nil, err
	}
	fb := &floorBox{dir: dir, ctr: ctr, proc: *s.Process}
	task, err := ctr.NewTask(f.ctx, cio.NullIO)
	if err == nil {
		fb.task = task
		err = task.Start(f.ctx)
	}
	if err != nil {
		f.remove(fb)
		return nil, err
	}
	return fb, nil
}

// exec runs `true` as a task exec, its output through FIFOs, waits for it
// and deletes the exec.
func (f *floor) exec(fb *floorBox) error {
	f.seq++
	ps := fb.proc
	ps.Args = []string{"true"}
	ps.Cwd = "/workspace"
	var out bytes.Buffer
	p, err := fb.task.Exec(f.ctx, fmt.Sprintf("x%d", f.seq), &ps, cio.NewCreator(cio.WithStreams(nil, &out, &out)))
	if err != nil {
		return err
	}
	exitCh, err := p.Wait(f.ctx)
	if err == nil {
		err = p.Start(f.ctx)
	}
	if err != nil {
		p.Delete(f.ctx, ctrd.WithProcessKill)
		return err
	}
	st := <-exitCh
	if _, err := p.Delete(f.ctx); err != nil {
		return err
	}
	if st.Error() != nil || st.ExitCode() != 0 {
		return fmt.Errorf("floor exec true: exit %d %v: %s", st.ExitCode(), st.Error(), out.String())
	}
	return nil
}

// remove deletes a floor container and its directory.
func (f *floor) remove(fb *floorBox) error {
	err := removeFloorContainer(f.ctx, fb.ctr)
	os.RemoveAll(fb.dir)
	return err
}

// containerdDaemon starts a daemon for a containerd benchmark and checks
// that its containerd backend is up.
func containerdDaemon(b *testing.B, extra ...string) (*daemon, *client.Client) {
	b.Helper()
	d, c := benchDaemon(b, extra...)
	in, err := c.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, be := range in.Backends {
		if be.Name == api.BackendContainerd && !be.Available {
			require(b, "the containerd backend", errors.New(be.Reason))
		}
	}
	return d, c
}

// newContainerdSandbox creates a containerd sandbox with the host image.
func newContainerdSandbox(c *client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: api.BackendContainerd})
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// execTrue runs `exec true` in sandbox id and checks its exit.
func execTrue(c *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o, err := c.Act(ctx, id, api.Exec("true"))
	if err == nil && (o.ExitCode == nil || *o.ExitCode != 0) {
		err = fmt.Errorf("exec true: %+v", o)
	}
	return err
}

// sandboxReaper deletes, at the end of the benchmark, the sandboxes it is
// given that were not deleted along the way.
type sandboxReaper struct {
	c   *client.Client
	ids map[string]bool
}

func newReaper(b *testing.B, c *client.Client) *sandboxReaper {
	r := &sandboxReaper{c: c, ids: map[string]bool{}}
	b.Cleanup(func() {
		for id := range r.ids {
			if err := c.DeleteSandbox(context.Background(), id); err != nil {
				b.Errorf("delete sandbox %s: %v", id, err)
			}
		}
	})
	return r
}

func (r *sandboxReaper) add(id string) { r.ids[id] = true }

func (r *sandboxReaper) delete(id string) error {
	err := r.c.DeleteSandbox(context.Background(), id)
	if err == nil {
		delete(r.ids, id)
	}
	return err
}

// BenchmarkContainerdCreateFirstExec: creating a containerd sandbox (host
// image) and its first `exec true`, against a raw containerd client
// creating a container of the same spec, starting its task and running
// `true` as a task exec. Deletion is timed apart.
func BenchmarkContainerdCreateFirstExec(b *testing.B) { benchCreateFirstExec(b, 0) }

// BenchmarkContainerdCreateFirstExecWarm is BenchmarkContainerdCreateFirstExec
// with the daemon's warm pool (containerd.pool_size = 1): a create takes a
// started container. Between iterations (untimed) the pool is let refill,
// as between an agent's sandboxes.
func BenchmarkContainerdCreateFirstExecWarm(b *testing.B) { benchCreateFirstExec(b, 1) }

func benchCreateFirstExec(b *testing.B, pool int) {
	_, c := containerdDaemon(b, "--set", fmt.Sprintf("containerd.pool_size=%d", pool))
	refilled := func() {
		if pool == 0 {
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, _ := exec.Command("ctr", "-n", e2eNamespace, "tasks", "ls").Output()
			if strings.Count(string(out), "pool-") >= pool && strings.Contains(string(out), "RUNNING") {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.Fatal("the warm pool did not refill in 30s")
	}
	f := newFloor(b)
	r := newReaper(b, c)
	var floorCreate, floorExec, floorBoth, floorDel []time.Duration
	var create, first, both, del []time.Duration
	// Each side's create, first exec and delete, timed; the sides take
	// turns going first, so neither always follows the other's teardown.
	floorSide := func(timed bool) {
		t0 := time.Now()
		fb, err := f.create()
		if err != nil {
			b.Fatalf("floor create: %v", err)
		}
		t1 := time.Now()
		if err := f.exec(fb); err != nil {
			f.remove(fb)
			b.Fatalf("floor exec: %v", err)
		}
		t2 := time.Now()
		if err := f.remove(fb); err != nil {
			b.Fatalf("floor remove: %v", err)
		}
		if timed {
			floorCreate = append(floorCreate, t1.Sub(t0))
			floorExec = append(floorExec, t2.Sub(t1))
			floorBoth = append(floorBoth, t2.Sub(t0))
			floorDel = append(floorDel, time.Since(t2))
		}
	}
	sandboxdSide := func(timed bool) {
		refilled()
		t0 := time.Now()
		id, err := newContainerdSandbox(c)
		if err != nil {
			b.Fatalf("create containerd sandbox: %v", err)
		}
		r.add(id)
		t1 := time.Now()
		if err := execTrue(c, id); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := r.delete(id); err != nil {
			b.Fatalf("delete sandbox: %v", err)
		}
		if timed {
			create = append(create, t1.Sub(t0))
			first = append(first, t2.Sub(t1))
			both = append(both, t2.Sub(t0))
			del = append(del, time.Since(t2))
		}
	}
	for range 2 { // warm up: page cache, shim binary, connections
		floorSide(false)
		sandboxdSide(false)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			floorSide(true)
			sandboxdSide(true)
		} else {
			sandboxdSide(true)
			floorSide(true)
		}
	}
	b.StopTimer()
	g, fl := p50(both), p50(floorBoth)
	b.ReportMetric(millis(fl), "floor-p50-ms")
	b.ReportMetric(millis(g), "p50-ms")
	b.ReportMetric(float64(g)/float64(fl), "ratio")
	under := 0.0
	if g < 100*time.Millisecond {
		under = 1
	}
	b.ReportMetric(under, "under-100ms")
	b.ReportMetric(millis(p50(floorCreate)), "floor-create-ms")
	b.ReportMetric(millis(p50(create)), "create-ms")
	b.ReportMetric(millis(p50(floorExec)), "floor-first-exec-ms")
	b.ReportMetric(millis(p50(first)), "first-exec-ms")
	b.ReportMetric(millis(p50(floorDel)), "floor-delete-ms")
	b.ReportMetric(millis(p50(del)), "delete-ms")
}

// BenchmarkContainerdExecTrue: `exec true` in a running containerd sandbox
// against a raw task exec of `true` in a running container, alternately.
func BenchmarkContainerdExecTrue(b *testing.B) {
	_, c := containerdDaemon(b)
	f := newFloor(b)
	r := newReaper(b, c)
	id, err := newContainerdSandbox(c)
	if err != nil {
		b.Fatal(err)
	}
	r.add(id)
	fb, err := f.create()
	if err != nil {
		b.Fatal(err)
	}
	for range 10 {
		if err := f.exec(fb); err != nil {
			b.Fatal(err)
		}
		if err := execTrue(c, id); err != nil {
			b.Fatal(err)
		}
	}
	var floorT, got []time.Duration
	b.ResetTimer()
	floorSide := func() {
		start := time.Now()
		if err := f.exec(fb); err != nil {
			b.Fatal(err)
		}
		floorT = append(floorT, time.Since(start))
	}
	sandboxdSide := func() {
		start := time.Now()
		if err := execTrue(c, id); err != nil {
			b.Fatal(err)
		}
		got = append(got, time.Since(start))
	}
	for i := range b.N {
		if i%2 == 0 {
			floorSide()
			sandboxdSide()
		} else {
			sandboxdSide()
			floorSide()
		}
	}
	b.StopTimer()
	fl, g := p50(floorT), p50(got)
	b.ReportMetric(micros(fl), "floor-p50-µs")
	b.ReportMetric(micros(g), "p50-µs")
	b.ReportMetric(float64(g)/float64(fl), "ratio")
}

// BenchmarkContainerdIdleRSS: the daemon's resident memory before and
// after creating 50 containerd sandboxes that have each run one command
// and are left idle; reports the growth per sandbox, and what each costs
// outside the daemon (its shim and init, resident and proportional).
// b.N is ignored.
func BenchmarkContainerdIdleRSS(b *testing.B) {
	const n = 50
	d, c := containerdDaemon(b)
	r := newReaper(b, c)
	pid := d.cmd.Process.Pid
	// Warm up: the first sandbox loads code and opens containerd's
	// connection; that is the idle daemon's, not a sandbox's.
	for range 2 {
		id, err := newContainerdSandbox(c)
		if err != nil {
			b.Fatal(err)
		}
		r.add(id)
		if err := execTrue(c, id); err != nil {
			b.Fatal(err)
		}
		if err := r.delete(id); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	before := procStatus(pid, "VmRSS")
	b.ResetTimer()
	var ids []string
	for range n {
		id, err := newContainerdSandbox(c)
		if err != nil {
			b.Fatal(err)
		}
		r.add(id)
		ids = append(ids, id)
		if err := execTrue(c, id); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	after := procStatus(pid, "VmRSS")
	b.StopTimer()
	// Outside the daemon: each sandbox's init and its shim (the init's
	// parent), from containerd's own record of the task.
	cc, err := ctrd.New("/run/containerd/containerd.sock", ctrd.WithDefaultNamespace(e2eNamespace))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	var outsideRSS, outsidePSS int64
	for _, id := range ids {
		ctx := namespaces.WithNamespace(context.Background(), e2eNamespace)
		ctr, err := cc.LoadContainer(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []int{int(task.Pid()), parentPid(int(task.Pid()))} {
			outsideRSS += procStatus(p, "VmRSS")
			outsidePSS += smapsRollup(p, "Pss")
		}
	}
	for _, id := range ids {
		if err := r.delete(id); err != nil {
			b.Errorf("delete sandbox %s: %v", id, err)
		}
	}
	b.ReportMetric(float64(before)/1024, "rss-before-MB")
	b.ReportMetric(float64(after)/1024, "rss-after-MB")
	b.ReportMetric(float64(after-before)/n, "rss-growth-KB/sandbox")
	b.ReportMetric(float64(outsideRSS)/n, "shim+init-rss-KB/sandbox")
	b.ReportMetric(float64(outsidePSS)/n, "shim+init-pss-KB/sandbox")
}

// smapsRollup reads a field (in kB) of /proc/PID/smaps_rollup: Pss counts
// a page shared by k processes as 1/k (the helper's and the shim's code
// are shared by every sandbox).
func smapsRollup(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var n int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &n)
			return n
		}
	}
	return -1
}

// parentPid reads a process's parent from /proc/PID/stat.
func parentPid(pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var ppid int
	if len(f) > 1 {
		fmt.Sscan(f[1], &ppid)
	}
	return ppid
}
