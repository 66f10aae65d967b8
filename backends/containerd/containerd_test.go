package containerd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "the containerd backend needs root")
	}
	b, err := New(Config{Socket: os.Getenv("SANDBOXD_TEST_CONTAINERD"), Namespace: "sandboxd-test", Owner: owner})
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
	owner := t.TempDir()
	testBackend(t, owner)
	backendtest.Run(t, func(t *testing.T) backends.Backend { return testBackend(t, owner) }, backendtest.Options{
		Network:   api.NetworkNone,
		Processes: sandboxPids,
		Workdir: func(t *testing.T, spec backends.Spec, workdir string) {
			if workdir != "/workspace" {
				t.Errorf("Workdir() = %q, want /workspace", workdir)
			}
		},
	})
}
