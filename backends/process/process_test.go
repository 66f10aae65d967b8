package process

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/backendtest"
	"golang.org/x/sys/unix"
)

// testUIDBase is the first uid the tests give sandboxes.
const testUIDBase = 2_100_000_000

// knownBugs returns the conformance subtests the process backend fails
// (with or without user isolation); each reason says why. None today.
func knownBugs(userIsolation bool) map[string]string {
	return map[string]string{}
}

func TestConformance(t *testing.T) {
	type config struct {
		name                   string
		userIsolation, cgroups bool
	}
	var configs []config
	if os.Geteuid() == 0 {
		configs = append(configs,
			config{"isolated", true, true},
			config{"cgroups-only", false, true},
			config{"isolated-no-cgroups", true, false})
	} else {
		configs = append(configs, config{"unprivileged", false, true})
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			h := newTestHost(t, c.userIsolation, c.cgroups)
			features := h.backend(t).Features()
			t.Logf("features: %v", features)
			skip := map[string]string{}
			for k, v := range knownBugs(c.userIsolation) {
				skip[k] = v
			}
			if !slices.Contains(features, "cgroup-tracking") {
				skip["KillKillsTree"] = "no cgroup2 to track process trees here: Kill reaches the process group only, as documented"
				if !c.userIsolation {
					why := "neither a cgroup nor a user of its own here: processes that leave their session cannot be found"
					skip["DestroyKillsEverything"] = why
					skip["DestroyCancelledContext"] = why
					skip["CloseThenRecover"] = why
					skip["CloseThenRecoverOnNewBackend"] = why
				}
			}
			backendtest.Run(t, func(t *testing.T) backends.Backend { return h.backend(t) }, backendtest.Options{
				Network:       api.NetworkHost,
				UserIsolation: c.userIsolation,
				Processes:     sandboxPids,
				Workdir: func(t *testing.T, spec backends.Spec, workdir string) {
					if want := filepath.Join(h.cfg.WorkspaceRoot, spec.ID); workdir != want {
						t.Errorf("Workdir() = %q, want %q", workdir, want)
					}
				},
				Skip: skip,
			})
		})
	}
}

// ----------------------------------------------------------------------
// test host: one backend configuration and its cleanup

// testHost is one configuration of the backend on this host. Every backend
// a test makes from it shares the roots, the uid lock directory and the
// cgroup parent, like a daemon restarted with the same configuration.
type testHost struct {
	cfg Config

	mu   sync.Mutex
	ids  map[string]bool // sandbox ids created or recovered
	uids map[int]bool    // uids they ran as
	cg   *cgroups        // of the first backend, for cleanup
}

// newTestHost makes a configuration under a fresh temporary directory and
// registers the check that nothing of it is left when t ends: no process,
// no cgroup (the cgroup2 parent is removed; the v1 parents are shared with
// every other backend on the host, so only the sandboxes' own directories
// are checked and removed there).
func newTestHost(t *testing.T, userIsolation, cgroups bool) *testHost {
	t.Helper()
	root := t.TempDir()
	// Sandboxes run as other users and must pass through the directories
	// above their workspace.
	tmp := filepath.Clean(os.TempDir())
	for d := root; strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	h := &testHost{
		cfg: Config{
			WorkspaceRoot: filepath.Join(root, "workspaces"),
			TmpRoot:       filepath.Join(root, "tmp"),
			UserIsolation: userIsolation,
			Cgroups:       cgroups,
			CgroupParent:  "sandboxd-test-" + randomHex(6),
		},
		ids:  map[string]bool{},
		uids: map[int]bool{},
	}
	if userIsolation {
		h.cfg.UIDBase = testUIDBase
		h.cfg.UIDLockDir = filepath.Join(root, "uids")
	}
	v1Parents := v1ParentDirs(t, filepath.Base(h.cfg.CgroupParent))
	existed := map[string]bool{}
	for _, d := range v1Parents {
		if _, err := os.Stat(d); err == nil {
			existed[d] = true
		}
	}
	t.Cleanup(func() { h.cleanup(t, v1Parents, existed) })
	return h
}

// v1ParentDirs returns where newCgroups puts its v1 parents, named name.
func v1ParentDirs(t *testing.T, name string) []string {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil
	}
	own, err := ownCgroups()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, ctl := range v1Controllers {
		if m, ok := mounts[ctl]; ok {
			dirs = append(dirs, filepath.Join(m.dir, m.rel(own[ctl]), name))
		}
	}
	return dirs
}

// hostBackend is a backend of a testHost: it records what it creates.
type hostBackend struct {
	*Backend
	h *testHost
}

func (h *testHost) backend(t *testing.T) *hostBackend {
	t.Helper()
	b, err := New(h.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.mu.Lock()
	if h.cg == nil {
		h.cg = b.cg
	}
	h.mu.Unlock()
	return &hostBackend{Backend: b, h: h}
}

func (h *testHost) note(id string, sb backends.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id] = true
	if s, ok := sb.(*sandbox); ok && s.st.UID >= 0 {
		h.uids[s.st.UID] = true
	}
}

func (b *hostBackend) Create(ctx context.Context, spec backends.Spec) (backends.Sandbox, error) {
	b.h.note(spec.ID, nil)
	sb, err := b.Backend.Create(ctx, spec)
	if err == nil {
		b.h.note(spec.ID, sb)
	}
	return sb, err
}

func (b *hostBackend) Recover(ctx context.Context, specs []backends.Spec) []backends.Recovered {
	rs := b.Backend.Recover(ctx, specs)
	for _, r := range rs {
		b.h.note(r.ID, r.Sandbox)
	}
	return rs
}

func (h *testHost) cleanup(t *testing.T, v1Parents []string, existed map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Processes.
	for uid := range h.uids {
		if pids := liveUserPids(uid); len(pids) > 0 {
			t.Errorf("processes of sandbox uid %d outlived the test: %v", uid, pids)
			_ = killUser(uid)
		}
	}
	// cgroup2: the parent is ours alone.
	if mounts, err := cgroupMounts(); err == nil {
		if m, ok := mounts[""]; ok {
			dir := filepath.Join(m.dir, h.cfg.CgroupParent)
			if left := cgroupChildren(dir); len(left) > 0 {
				t.Errorf("cgroups outlived their sandboxes: %v", left)
			}
			if err := removeCgroupTree(dir); err != nil {
				t.Errorf("remove test cgroup parent: %v", err)
			}
		}
	}
	// cgroup v1: the parents are shared; the sandboxes' dirs are ours.
	for _, parent := range v1Parents {
		for id := range h.ids {
			dir := filepath.Join(parent, id)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			t.Errorf("v1 cgroup %s outlived its sandbox", dir)
			if err := removeCgroupTree(dir); err != nil {
				t.Errorf("remove %s: %v", dir, err)
			}
		}
		if !existed[parent] {
			_ = unix.Rmdir(parent) // fails harmlessly if someone else uses it now
		}
	}
}

// cgroupChildren lists the cgroups below dir.
func cgroupChildren(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			sub := filepath.Join(dir, e.Name())
			out = append(out, sub)
			out = append(out, cgroupChildren(sub)...)
		}
	}
	return out
}

// removeCgroupTree kills what runs in the cgroup at dir and removes it,
// leaves first.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err == nil {
		_ = killCgroup(dir)
	} else {
		for _, pid := range cgroupProcs(dir) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	children := cgroupChildren(dir)
	sort.Slice(children, func(i, j int) bool { return len(children[i]) > len(children[j]) })
	var errs error
	for _, d := range append(children, dir) {
		var err error
		for i := 0; i < 200; i++ {
			if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		errs = errors.Join(errs, err)
	}
	return errs
}

// cgroupProcs lists the processes in a cgroup and its descendants.
func cgroupProcs(dir string) []int {
	var pids []int
	for _, d := range append([]string{dir}, cgroupChildren(dir)...) {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// ----------------------------------------------------------------------
// finding a sandbox's processes

// sandboxPids lists the live processes of a process sandbox: those running
// as its uid, in its cgroups, in its workspace or tmp directory, or with
// its HOME. Zombies are dead and not listed.
func sandboxPids(sb backends.Sandbox) ([]int, error) {
	s, ok := sb.(*sandbox)
	if !ok {
		return nil, fmt.Errorf("not a process sandbox: %T", sb)
	}
	var cgPaths []string // as /proc/PID/cgroup shows them
	if s.cg != nil {
		mounts, err := cgroupMounts()
		if err != nil {
			return nil, err
		}
		add := func(m mount, dir string) {
			if rel, err := filepath.Rel(m.dir, dir); err == nil {
				cgPaths = append(cgPaths, filepath.Join(m.root, rel))
			}
		}
		if m, ok := mounts[""]; ok && s.cg.v2 != "" {
			add(m, s.cg.v2)
		}
		for ctl, dir := range s.cg.v1 {
			if m, ok := mounts[ctl]; ok {
				add(m, dir)
			}
		}
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	home := []byte("HOME=" + s.st.Workspace + "\x00")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := "/proc/" + e.Name()
		if !alive(pid) {
			continue
		}
		match := s.st.UID >= 0 && slices.Contains(procUIDs(pid), s.st.UID)
		if !match {
			if cwd, err := os.Readlink(dir + "/cwd"); err == nil {
				cwd = strings.TrimSuffix(cwd, " (deleted)")
				match = under(cwd, s.st.Workspace) || under(cwd, s.st.Tmp)
			}
		}
		if !match {
			if env, err := os.ReadFile(dir + "/environ"); err == nil {
				match = bytes.HasPrefix(env, home) || bytes.Contains(env, append([]byte{0}, home...))
			}
		}
		if !match && len(cgPaths) > 0 {
			if b, err := os.ReadFile(dir + "/cgroup"); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					parts := strings.SplitN(line, ":", 3)
					if len(parts) == 3 && slices.ContainsFunc(cgPaths, func(p string) bool { return under(parts[2], p) }) {
						match = true
					}
				}
			}
		}
		if match && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// procUIDs returns the real, effective, saved and fs uids of pid.
func procUIDs(pid int) []int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			var uids []int
			for _, f := range strings.Fields(v) {
				if n, err := strconv.Atoi(f); err == nil {
					uids = append(uids, n)
				}
			}
			return uids
		}
	}
	return nil
}

// liveUserPids is userPids without zombies and without the test process
// (see TestKillUserKeepsDaemonCredentials).
func liveUserPids(uid int) []int {
	var out []int
	for _, pid := range userPids(uid) {
		if pid != os.Getpid() && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// ----------------------------------------------------------------------
// process backend specifics

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// requireFeature skips t when b lacks feature, or fails it in CI.
func requireFeature(t *testing.T, b backends.Backend, feature string) {
	t.Helper()
	if slices.Contains(b.Features(), feature) {
		return
	}
	msg := fmt.Sprintf("the backend lacks %q on this host (features %v)", feature, b.Features())
	if os.Getenv("CI") != "" {
		t.Fatalf("%s; it is required in CI", msg)
	}
	t.Skipf("skipping: %s", msg)
}

// isolationModes runs fn once with user isolation (when root) and once
// without, both with cgroups.
func isolationModes(t *testing.T, fn func(t *testing.T, h *testHost)) {
	if os.Geteuid() == 0 {
		t.Run("isolated", func(t *testing.T) { fn(t, newTestHost(t, true, true)) })
	}
	t.Run("cgroups-only", func(t *testing.T) { fn(t, newTestHost(t, false, true)) })
}

func newSpec(t *testing.T, l api.Limits) backends.Spec {
	return backendtest.NewSpec(t, api.NetworkHost, l)
}

func TestUserIsolation(t *testing.T) {
	requireRoot(t)
	h := newTestHost(t, true, true)
	b := h.backend(t)
	if !slices.Contains(b.Features(), "user-isolation") {
		t.Errorf("Features() = %v, lacks user-isolation", b.Features())
	}
	specA, specB := newSpec(t, api.Limits{}), newSpec(t, api.Limits{})
	a := backendtest.CreateSandbox(t, b, specA)
	bb := backendtest.CreateSandbox(t, b, specB)
	uidOf := func(sb backends.Sandbox) int {
		t.Helper()
		out := backendtest.MustExec(t, sb, "sh", "-c", "id -u; id -g; id -G")
		f := strings.Fields(out)
		if len(f) != 3 || f[0] != f[1] || f[1] != f[2] {
			t.Errorf("id -u, -g, -G printed %q: want one uid, the same gid and no other groups", out)
		}
		uid, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("id -u printed %q", out)
		}
		if uid < testUIDBase {
			t.Errorf("sandbox runs as uid %d, below the UID base %d", uid, testUIDBase)
		}
		if want := sb.(*sandbox).st.UID; uid != want {
			t.Errorf("sandbox runs as uid %d, its state says %d", uid, want)
		}
		return uid
	}
	uidA, uidB := uidOf(a), uidOf(bb)
	if uidA == uidB {
		t.Fatalf("two sandboxes share uid %d", uidA)
	}

	// HOME and TMPDIR are the sandbox's and writable.
	out := backendtest.MustExec(t, a, "sh", "-c", `echo "$HOME"; echo "$TMPDIR"; echo "$USER"; touch "$HOME/h" "$TMPDIR/t" && echo ok`)
	if want := fmt.Sprintf("%s\n%s\nsandbox\nok\n", a.Workdir(), a.(*sandbox).st.Tmp); out != want {
		t.Errorf("HOME, TMPDIR, USER: %q, want %q", out, want)
	}
	for _, d := range []string{a.(*sandbox).st.Workspace, a.(*sandbox).st.Tmp} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uidA || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: owner %d mode %v, want %d and 0700", d, st.Uid, fi.Mode().Perm(), uidA)
		}
	}

	// B's workspace is out of A's reach.
	secret := randomHex(16)
	backendtest.MustExec(t, bb, "sh", "-c", "echo "+secret+" > secret.txt && chmod 644 secret.txt")
	for _, argv := range [][]string{
		{"cat", bb.Workdir() + "/secret.txt"},
		{"ls", bb.Workdir()},
		{"touch", bb.Workdir() + "/planted"},
	} {
		st, out, _ := backendtest.Exec(t, a, argv...)
		if st.Code == 0 || strings.Contains(out, secret) {
			t.Errorf("sandbox A ran %q on sandbox B's workspace: exit %+v, output %q", argv, st, out)
		}
	}
	// So is the daemon's state: a 0600 root file in the state dir, and the
	// state dir itself.
	rootSecret := filepath.Join(specA.Dir, "root-secret")
	if err := os.WriteFile(rootSecret, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{rootSecret, filepath.Join(specA.Dir, stateFile)} {
		st, out, _ := backendtest.Exec(t, a, "cat", f)
		if st.Code == 0 || strings.Contains(out, secret) {
			t.Errorf("sandbox read %s: exit %+v, output %q", f, st, out)
		}
	}
	// A cannot signal B's processes.
	p := backendtest.Start(t, bb, backends.ProcessSpec{Argv: []string{"sleep", "100"}})
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0; {
		pids, _ := sandboxPids(bb)
		if len(pids) > 0 {
			pid = pids[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the sleep of sandbox B does not show up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, _, _ := backendtest.Exec(t, a, "kill", "-9", strconv.Itoa(pid)); st.Code == 0 {
		t.Errorf("sandbox A killed sandbox B's process %d", pid)
	}
	if err := p.Kill(); err != nil {
		t.Error(err)
	}
	backendtest.WaitExit(t, p, 5*time.Second)

	// A second backend sharing the uid lock directory (another daemon)
	// never hands out a uid the first holds, and can take it once freed
	// (uids are handed out round robin, so only when it comes round).
	b2 := h.backend(t)
	c := backendtest.CreateSandbox(t, b2, newSpec(t, api.Limits{}))
	uidC := uidOf(c)
	if uidC == uidA || uidC == uidB {
		t.Errorf("the second backend gave uid %d, held by the first (%d, %d)", uidC, uidA, uidB)
	}
	// Another backend whose search starts at the base finds uidA free.
	backendtest.Destroy(t, a)
	b3 := h.backend(t)
	d := backendtest.CreateSandbox(t, b3, newSpec(t, api.Limits{}))
	if uidD := uidOf(d); uidD != uidA {
		t.Errorf("after the first backend freed uid %d, a new backend gave %d (the first free uid from the base is %d)", uidA, uidD, uidA)
	}
}

// TestUIDReuseLeaksFiles: a sandbox's uid is given to a later sandbox once
// it is destroyed; what the first left outside its workspace (in /tmp,
// /dev/shm, ...) must not become the second's.
func TestUIDReuseLeaksFiles(t *testing.T) {
	requireRoot(t)
	h := newTestHost(t, true, false)
	b := h.backend(t)
	a := backendtest.CreateSandbox(t, b, newSpec(t, api.Limits{}))
	secret := randomHex(16)
	name := "/tmp/sandboxd-test-" + randomHex(8)
	t.Cleanup(func() { os.Remove(name) })
	backendtest.MustExec(t, a, "sh", "-c", "umask 077; echo "+secret+" > "+name)
	uidA := a.(*sandbox).st.UID
	backendtest.Destroy(t, a)
	c := backendtest.CreateSandbox(t, b, newSpec(t, api.Limits{}))
	if uidC := c.(*sandbox).st.UID; uidC != uidA {
		t.Skipf("the uid was not reused (%d, then %d)", uidA, uidC)
	}
	if st, out, _ := backendtest.Exec(t, c, "cat", name); st.Code == 0 || strings.Contains(out, secret) {
		t.Errorf("a new sandbox read the private file %s a destroyed sandbox left behind", name)
	}
}

func TestPidsLimit(t *testing.T) {
	isolationModes(t, func(t *testing.T, h *testHost) {
		b := h.backend(t)
		requireFeature(t, b, "cgroup-pids")
		sb := backendtest.CreateSandbox(t, b, newSpec(t, api.Limits{Pids: 20, MemoryMB: 512}))
		s := sb.(*sandbox)
		var pidsCurrent string
		if b.cg.v2Limits {
			pidsCurrent = filepath.Join(s.cg.v2, "pids.current")
		} else if dir := s.cg.v1["pids"]; dir != "" {
			pidsCurrent = filepath.Join(dir, "pids.current")
		}
		var errb backendtest.Buffer
		p := backendtest.Start(t, sb, backends.ProcessSpec{
			Argv:   []string{"sh", "-c", "for i in $(seq 100); do sleep 30 & done; wait"},
			Stderr: &errb,
		})
		maxSeen, maxCurrent := 0, 0
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			pids, err := sandboxPids(sb)
			if err != nil {
				t.Fatal(err)
			}
			maxSeen = max(maxSeen, len(pids))
			if b, err := os.ReadFile(pidsCurrent); err == nil {
				n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				maxCurrent = max(maxCurrent, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("at most %d processes seen, pids.current at most %d", maxSeen, maxCurrent)
		if maxSeen > 20 || maxCurrent > 20 {
			t.Errorf("with a pids limit of 20, the sandbox had %d processes (pids.current %d)", maxSeen, maxCurrent)
		}
		if maxSeen < 10 {
			t.Errorf("only %d processes ran: the test did not reach the limit", maxSeen)
		}
		if !strings.Contains(errb.String(), "fork") {
			t.Logf("stderr (no fork failure reported?): %.300q", errb.String())
		}
		start := time.Now()
		backendtest.Destroy(t, sb)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Destroy took %v", d)
		}
		backendtest.WaitExit(t, p, 5*time.Second)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			pids, _ := sandboxPids(sb)
			if len(pids) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes left after Destroy: %v", pids)
			}
		}
	})
}

func TestMemoryLimitOOM(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("skipping: %s: %v", python, err)
	}
	isolationModes(t, func(t *testing.T, h *testHost) {
		b := h.backend(t)
		requireFeature(t, b, "cgroup-memory")
		sb := backendtest.CreateSandbox(t, b, newSpec(t, api.Limits{MemoryMB: 64, Pids: 64}))
		st, out, errs := backendtest.Exec(t, sb, python, "-c", `b=bytearray(512*1024*1024); b[::4096]=b"x"*(len(b)//4096)`)
		if !st.OOMKilled || st.Signal != syscall.SIGKILL || st.Code != 137 {
			t.Errorf("python allocating 512 MiB in 64 MiB: exit %+v (stdout %q, stderr %.300q), want OOMKilled by SIGKILL", st, out, errs)
		}
		// A process killed otherwise is not OOMKilled.
		p := backendtest.Start(t, sb, backends.ProcessSpec{Argv: []string{"sleep", "100"}})
		time.Sleep(100 * time.Millisecond)
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
		if st := backendtest.WaitExit(t, p, 5*time.Second); st.OOMKilled || st.Signal != syscall.SIGKILL {
			t.Errorf("sleep after Kill: %+v, want SIGKILL and not OOMKilled", st)
		}
		// Within the limit all is well.
		if st, _, errs := backendtest.Exec(t, sb, python, "-c", `b=bytearray(16*1024*1024); b[::4096]=b"x"*(len(b)//4096)`); st.Code != 0 {
			t.Errorf("python allocating 16 MiB in 64 MiB: %+v %s", st, errs)
		}
	})
}

func TestUnsupportedSpecs(t *testing.T) {
	h := newTestHost(t, os.Geteuid() == 0, true)
	b := h.backend(t)
	for _, tc := range []struct {
		name string
		edit func(*backends.Spec)
	}{
		{"disk limit", func(s *backends.Spec) { s.Limits.DiskMB = 100 }},
		{"network none", func(s *backends.Spec) { s.Network = api.NetworkNone }},
		{"image", func(s *backends.Spec) { s.Image = "docker.io/library/alpine:3" }},
	} {
		spec := newSpec(t, api.Limits{})
		tc.edit(&spec)
		sb, err := b.Create(context.Background(), spec)
		if err == nil {
			backendtest.Destroy(t, sb)
			t.Errorf("%s: Create succeeded", tc.name)
			continue
		}
		if !errors.Is(err, api.ErrUnsupported) {
			t.Errorf("%s: %v, want an error wrapping api.ErrUnsupported", tc.name, err)
		}
		checkNothingLeft(t, b.Backend, spec)
	}
	// "host" is the image the process backend has.
	spec := newSpec(t, api.Limits{})
	spec.Image = "host"
	backendtest.CreateSandbox(t, b, spec)
}

// checkNothingLeft checks that sandbox spec holds nothing on b: no
// directories, cgroups or uid.
func checkNothingLeft(t *testing.T, b *Backend, spec backends.Spec) {
	t.Helper()
	paths := []string{filepath.Join(b.cfg.WorkspaceRoot, spec.ID), filepath.Join(b.cfg.TmpRoot, spec.ID)}
	if b.cg != nil {
		if b.cg.v2 != "" {
			paths = append(paths, filepath.Join(b.cg.v2, spec.ID))
		}
		for _, parent := range b.cg.v1 {
			paths = append(paths, filepath.Join(parent, spec.ID))
		}
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left behind by sandbox %s", p, spec.ID)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, l := range b.uids {
		if l.id == spec.ID {
			t.Errorf("uid %d is still held for sandbox %s", uid, spec.ID)
		}
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	isolationModes(t, func(t *testing.T, h *testHost) {
		b := h.backend(t)
		spec := newSpec(t, api.Limits{Pids: 10, MemoryMB: 100})
		spec.Dir = filepath.Join(spec.Dir, "missing") // the state cannot be saved
		if sb, err := b.Create(context.Background(), spec); err == nil {
			backendtest.Destroy(t, sb)
			t.Fatal("Create with a missing Dir succeeded")
		}
		checkNothingLeft(t, b.Backend, spec)
		if n := len(b.uids); n != 0 {
			t.Errorf("%d uids held after a failed Create", n)
		}
	})
}

func TestDestroyFreesEverything(t *testing.T) {
	isolationModes(t, func(t *testing.T, h *testHost) {
		b := h.backend(t)
		spec := newSpec(t, api.Limits{Pids: 50, MemoryMB: 256})
		sb := backendtest.CreateSandbox(t, b, spec)
		s := sb.(*sandbox)
		backendtest.MustExec(t, sb, "sh", "-c", `mkdir -p a/b && echo x > a/b/f && chmod 000 a/b && echo y > "$TMPDIR/t"`)
		p := backendtest.Start(t, sb, backends.ProcessSpec{Argv: []string{"sh", "-c", "sleep 1000 & setsid sleep 1001 & wait"}})
		if s.cg != nil && s.cg.v2 == "" && len(s.cg.v1) == 0 {
			t.Error("sandbox has a cgroup object with no cgroups in it")
		}
		backendtest.Destroy(t, sb)
		backendtest.WaitExit(t, p, 5*time.Second)
		checkNothingLeft(t, b.Backend, spec)
		if uid := s.st.UID; uid >= 0 {
			// Another daemon can take the uid now.
			f, err := os.OpenFile(filepath.Join(h.cfg.UIDLockDir, strconv.Itoa(uid)), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Errorf("the lock of uid %d is still held after Destroy: %v", uid, err)
			}
		}
	})
}

// TestRecoverFailureLeavesNothingRunning: "a sandbox that cannot be
// re-adopted has Err set and leaves nothing running". A daemon that crashed
// with sandboxes running as users of their own and comes back with user
// isolation off cannot re-adopt them; their processes must still go.
func TestRecoverFailureLeavesNothingRunning(t *testing.T) {
	requireRoot(t)
	h := newTestHost(t, true, true)
	b := h.backend(t)
	spec := newSpec(t, api.Limits{})
	sb := backendtest.CreateSandbox(t, b, spec)
	p := backendtest.Start(t, sb, backends.ProcessSpec{Argv: []string{"sh", "-c", "sleep 1000 & setsid sleep 1001 & wait"}})
	t.Cleanup(func() { _ = p.Kill() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if pids, _ := sandboxPids(sb); len(pids) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the processes did not start")
		}
	}
	// The daemon "crashed" (no Close) and restarts without user isolation.
	cfg := h.cfg
	cfg.UserIsolation = false
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := b2.Recover(context.Background(), []backends.Spec{spec})
	if len(rs) != 1 || rs[0].Err == nil {
		t.Fatalf("Recover = %+v, want an Err", rs)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pids, _ := sandboxPids(sb)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Recover failed (%v) and left the sandbox's processes running: %v", rs[0].Err, pids)
		}
	}
}

// TestStartDuringDestroy: the daemon destroys a sandbox without waiting for
// its in-flight actions (manager.delete calls Destroy before waitIdle), so
// a Start may run concurrently with Destroy. Destroy must still kill
// everything, free everything and succeed; Start may fail.
func TestStartDuringDestroy(t *testing.T) {
	isolationModes(t, func(t *testing.T, h *testHost) {
		b := h.backend(t)
		for round := 0; round < 150; round++ {
			spec := newSpec(t, api.Limits{Pids: 100})
			sb, err := b.Create(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			s := sb.(*sandbox)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var started []backends.Process
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						p, err := sb.Start(context.Background(), backends.ProcessSpec{Argv: []string{"sleep", "1000"}})
						if err != nil {
							return
						}
						mu.Lock()
						started = append(started, p)
						mu.Unlock()
					}
				}()
			}
			time.Sleep(time.Duration(round%30) * time.Millisecond)
			start := time.Now()
			derr := sb.Destroy(context.Background())
			took := time.Since(start)
			wg.Wait()
			time.Sleep(200 * time.Millisecond)
			left, _ := sandboxPids(sb)
			var dirs []string
			if s.cg != nil {
				for _, d := range append([]string{s.cg.v2}, slices.Collect(maps.Values(s.cg.v1))...) {
					if _, err := os.Stat(d); d != "" && err == nil {
						dirs = append(dirs, d)
					}
				}
			}
			// Clean up for real before judging.
			_ = sb.Destroy(context.Background())
			for _, p := range started {
				_ = p.Kill()
			}
			if derr != nil || len(left) > 0 || len(dirs) > 0 {
				t.Fatalf("round %d, %d processes started: Destroy took %v and returned %v; processes left %v; cgroups left %v",
					round, len(started), took, derr, left, dirs)
			}
		}
	})
}

// userPids lists the processes whose real uid is uid.
func userPids(uid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	want := []byte(strconv.Itoa(uid))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.HasPrefix(line, []byte("Uid:")) {
				fields := bytes.Fields(line[4:])
				if len(fields) > 0 && bytes.Equal(fields[0], want) {
					pids = append(pids, pid)
				}
				break
			}
		}
		f.Close()
	}
	return pids
}
