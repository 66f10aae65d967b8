package containerd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/backendtest"
	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

func TestMain(m *testing.M) {
	// The test binary is the containers' init and exec wrapper.
	sbinit.Main(os.Args)
	os.Exit(m.Run())
}

// testBackend returns a backend on the host's containerd, or skips (fails
// in CI) when there is none.
func testBackend(t *testing.T, owner string) *Backend {
	return testBackendPool(t, owner, 0)
}

// testBackendPool is testBackend with a warm pool of poolSize containers
// made with backendtest.DefaultLimits.
func testBackendPool(t *testing.T, owner string, poolSize int) *Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "the containerd backend needs root")
	}
	b, err := New(Config{
		Socket: os.Getenv("SANDBOXD_TEST_CONTAINERD"), Namespace: "sandboxd-test", Owner: owner,
		PoolSize: poolSize, PoolLimits: backendtest.DefaultLimits,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Not closed when t ends: sandboxes the suite re-adopts on a new
	// backend are destroyed after that backend's test ends.
	if err := b.Available(context.Background()); err != nil {
		skipOrFail(t, "containerd is not available: "+err.Error())
	}
	return b
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (CI must install and start containerd)")
	}
	t.Skip(why)
}

// sandboxPids lists a sandbox's processes but its init, from its cgroup.
func sandboxPids(sb backends.Sandbox) ([]int, error) {
	s := sb.(*sandbox)
	var procs []byte
	var err error
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup/pids", s.cgroup), filepath.Join("/sys/fs/cgroup", s.cgroup)} {
		procs, err = os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err == nil {
			break
		}
	}
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(procs)) {
		pid, _ := strconv.Atoi(f)
		if pid == s.initPid || pid == 0 {
			continue
		}
		if st, err := os.ReadFile("/proc/" + f + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
				continue
			}
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool int
	}{{"direct", 0}, {"pooled", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			owner := t.TempDir()
			testBackend(t, owner)
			// One pooled backend for the whole run, as in the daemon;
			// closed (its pool destroyed) when the run ends.
			var pooled *Backend
			if tc.pool > 0 {
				pooled = testBackendPool(t, owner, tc.pool)
				t.Cleanup(func() { pooled.pool.close() })
			}
			backendtest.Run(t, func(t *testing.T) backends.Backend {
				if pooled != nil {
					return pooled
				}
				return testBackend(t, owner)
			}, backendtest.Options{
				Network:   api.NetworkNone,
				Processes: sandboxPids,
				Workdir: func(t *testing.T, spec backends.Spec, workdir string) {
					if workdir != "/workspace" {
						t.Errorf("Workdir() = %q, want /workspace", workdir)
					}
				},
			})
		})
	}
}

// TestPool: a create takes a started container from the warm pool, with
// the sandbox's environment, limits and directories, and is a sandbox like
// any other: re-adopted by a new backend, destroyed without a trace.
func TestPool(t *testing.T) {
	owner := t.TempDir()
	b := testBackendPool(t, owner, 1)
	t.Cleanup(func() { b.pool.close() })
	waitReady := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			// The Recover of a subtest runs a second backend of the
			// same owner, which a daemon never does: its sweep takes
			// the pool's warm container for a leftover and removes it.
			// Forget those here, as take would, so the next subtest
			// gets a container from the pool and not a cold one.
			b.pool.mu.Lock()
			live := b.pool.ready[:0]
			for _, sb := range b.pool.ready {
				if sb.initAlive() {
					live = append(live, sb)
				}
			}
			b.pool.ready = live
			n := len(live)
			b.pool.mu.Unlock()
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the pool made no container in 30s")
			}
			b.Available(context.Background())
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name   string
		limits api.Limits
		pids   string
	}{
		{"pool-limits", backendtest.DefaultLimits, strconv.Itoa(int(backendtest.DefaultLimits.Pids))},
		{"other-limits", api.Limits{MemoryMB: 200, Pids: 77, CPUs: 0.5}, "77"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitReady()
			spec := backendtest.NewSpec(t, api.NetworkNone, tc.limits)
			spec.Env = map[string]string{"FROM_SPEC": "yes"}
			sb := backendtest.CreateSandbox(t, b, spec)
			s := sb.(*sandbox)
			if !strings.HasPrefix(s.ctr.ID(), "pool-") {
				t.Fatalf("container %s is not from the pool", s.ctr.ID())
			}
			out := backendtest.MustExec(t, sb, "sh", "-c", "echo $FROM_SPEC; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; echo hi > /workspace/f; hostname")
			if want := "yes\n" + tc.pids + "\nsandbox\n"; out != want {
				t.Errorf("in the pooled sandbox: %q, want %q", out, want)
			}
			// Its directories stay in the pool's directory (runc works
			// from its root's path), and go with it.
			if !s.ownDir || filepath.Dir(s.l.dir) != b.pool.dir {
				t.Errorf("layout %q (own %v), want a directory of the pool's", s.l.dir, s.ownDir)
			}
			if b, err := os.ReadFile(filepath.Join(s.l.workspace(), "f")); err != nil || string(b) != "hi\n" {
				t.Errorf("the workspace is not where the layout says: %q %v", b, err)
			}
			// A new backend (a daemon restart) finds it by its labels.
			if err := sb.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			rs := testBackend(t, owner).Recover(context.Background(), []backends.Spec{spec})
			if rs[0].Err != nil {
				t.Fatalf("Recover: %v", rs[0].Err)
			}
			out = backendtest.MustExec(t, rs[0].Sandbox, "sh", "-c", "cat /workspace/f; echo $FROM_SPEC")
			if out != "hi\nyes\n" {
				t.Errorf("after Recover: %q", out)
			}
			backendtest.Destroy(t, rs[0].Sandbox)
			if _, err := os.Stat(s.l.dir); !os.IsNotExist(err) {
				t.Errorf("its directory %s is still there after Destroy: %v", s.l.dir, err)
			}
			ids, _ := exec.Command("ctr", "-n", "sandboxd-test", "containers", "ls", "-q").Output()
			if strings.Contains(string(ids), s.ctr.ID()) {
				t.Errorf("container %s is still there after Destroy", s.ctr.ID())
			}
		})
	}
	// Close destroys what the pool holds.
	waitReady()
	b.pool.mu.Lock()
	id := b.pool.ready[0].ctr.ID()
	b.pool.mu.Unlock()
	b.pool.close()
	ids, _ := exec.Command("ctr", "-n", "sandboxd-test", "containers", "ls", "-q").Output()
	if strings.Contains(string(ids), id) {
		t.Errorf("pooled container %s is still there after close", id)
	}
}
