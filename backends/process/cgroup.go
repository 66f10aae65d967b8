package process

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"golang.org/x/sys/unix"
)

// cgroups places sandbox processes in cgroups of their own, for two jobs:
//
//   - tracking: every process a sandbox starts (and all it forks, setsid and
//     double forks included) stays in the sandbox's cgroup2 subtree, so a
//     timeout or Destroy can kill all of it with cgroup.kill;
//   - limits: memory, pids and cpu, enforced by cgroup2 controllers when they
//     can be enabled for our subtree, otherwise by the cgroup v1 controllers
//     of a hybrid host.
//
// Processes are born in their cgroups, never moved after they start: cgroup2
// with CLONE_INTO_CGROUP, cgroup v1 by forking from an OS thread that was
// moved into the v1 cgroups just for that fork (v1 places threads
// individually and a child inherits its forking thread's cgroups).
//
// Every part degrades: with no writable cgroup2 there is no tracking (the
// backend falls back to process groups and per-sandbox users); with no
// controllers there are no cgroup limits. Features reports what works.
type cgroups struct {
	v2       string            // our cgroup2 parent, "" if none
	v2Limits bool              // memory, pids and cpu controllers are enabled below v2
	v1       map[string]string // v1 controller -> our parent dir in it (only when !v2Limits)
	v1Mounts map[string]mount  // v1 controller -> its hierarchy
}

var v1Controllers = []string{"memory", "pids", "cpu"}

// newCgroups finds or makes our parent cgroups. parent is the cgroup2 path
// (relative to the cgroup2 mount) to create sandboxes under; "" picks one:
// a "sandboxd" child of the daemon's own cgroup.
func newCgroups(parent string) (*cgroups, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	c := &cgroups{v1: map[string]string{}, v1Mounts: map[string]mount{}}
	if m, ok := mounts[""]; ok && unix.Access(m.dir, unix.W_OK) == nil {
		rel := parent
		if rel == "" {
			rel = filepath.Join(m.rel(own[""]), "sandboxd")
		}
		dir := filepath.Join(m.dir, rel)
		if err := os.MkdirAll(dir, 0o755); err == nil {
			c.v2 = dir
			c.v2Limits = enableControllers(m.dir, dir, []string{"memory", "pids", "cpu"})
		}
	}
	if !c.v2Limits {
		for _, ctl := range v1Controllers {
			m, ok := mounts[ctl]
			if !ok {
				continue
			}
			dir := filepath.Join(m.dir, m.rel(own[ctl]), "sandboxd")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				continue
			}
			c.v1[ctl] = dir
			c.v1Mounts[ctl] = m
		}
	}
	return c, nil
}

// enableControllers turns ctls on in the subtree_control of every cgroup
// from root down to dir, as cgroup2 requires, and reports whether dir's
// children (the sandboxes) get all of them.
func enableControllers(root, dir string, ctls []string) bool {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return false
	}
	cur := root
	parts := append([]string{""}, strings.Split(rel, string(filepath.Separator))...)
	for _, p := range parts {
		cur = filepath.Join(cur, p)
		have, err := os.ReadFile(filepath.Join(cur, "cgroup.controllers"))
		if err != nil {
			return false
		}
		var add []string
		for _, ctl := range ctls {
			if !strings.Contains(" "+strings.TrimSpace(string(have))+" ", " "+ctl+" ") {
				return false
			}
			add = append(add, "+"+ctl)
		}
		// Fails with EBUSY when cur holds processes itself (the no
		// internal processes rule); then the controllers are unusable.
		if err := os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0); err != nil {
			return false
		}
	}
	return true
}

// features describes what the cgroups enforce.
func (c *cgroups) features() []string {
	var f []string
	if c.v2 != "" {
		f = append(f, "cgroup-tracking")
	}
	for _, ctl := range v1Controllers {
		if c.v2Limits || c.v1[ctl] != "" {
			f = append(f, "cgroup-"+ctl)
		}
	}
	return f
}

// sandboxCgroup is one sandbox's cgroups.
type sandboxCgroup struct {
	v2     string            // sandbox dir in cgroup2, "" if none
	v1     map[string]string // controller -> sandbox dir
	mounts map[string]mount  // controller -> its v1 hierarchy
	leaves atomic.Int64
}

// create makes the cgroups of sandbox id with limits. It is idempotent, so
// re-adoption can call it again.
func (c *cgroups) create(id string, l api.Limits) (*sandboxCgroup, error) {
	sc := &sandboxCgroup{v1: map[string]string{}, mounts: c.v1Mounts}
	var err error
	if c.v2 != "" {
		sc.v2 = filepath.Join(c.v2, id)
		if e := os.Mkdir(sc.v2, 0o755); e != nil && !errors.Is(e, os.ErrExist) {
			return nil, fmt.Errorf("create cgroup: %w", e)
		}
		if c.v2Limits {
			err = errors.Join(
				writeLimit(sc.v2, "memory.max", l.MemoryMB<<20),
				writeLimit(sc.v2, "memory.swap.max", zeroIf(l.MemoryMB)),
				writeLimit(sc.v2, "pids.max", l.Pids),
				writeCPU(sc.v2, "cpu.max", l.CPUs),
			)
		}
	}
	for ctl, parent := range c.v1 {
		dir := filepath.Join(parent, id)
		if e := os.Mkdir(dir, 0o755); e != nil && !errors.Is(e, os.ErrExist) {
			err = errors.Join(err, e)
			continue
		}
		sc.v1[ctl] = dir
		switch ctl {
		case "memory":
			err = errors.Join(err, writeLimit(dir, "memory.limit_in_bytes", l.MemoryMB<<20))
			if l.MemoryMB > 0 {
				// Only present with swap accounting; no swap then anyway.
				_ = writeLimit(dir, "memory.memsw.limit_in_bytes", l.MemoryMB<<20)
			}
		case "pids":
			err = errors.Join(err, writeLimit(dir, "pids.max", l.Pids))
		case "cpu":
			if l.CPUs > 0 {
				err = errors.Join(err,
					os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000"), 0),
					os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(int(math.Ceil(l.CPUs*100000)))), 0))
			}
		}
	}
	if err != nil {
		sc.remove()
		return nil, fmt.Errorf("set cgroup limits: %w", err)
	}
	return sc, nil
}

func zeroIf(mb int64) int64 {
	if mb > 0 {
		return 0
	}
	return -1
}

// writeLimit writes v to file, or "max" (v1: -1) when v <= 0 (v < 0 for
// a value where 0 is meaningful).
func writeLimit(dir, file string, v int64) error {
	s := strconv.FormatInt(v, 10)
	if v < 0 || (v == 0 && file != "memory.swap.max") {
		if strings.HasSuffix(file, "_in_bytes") {
			s = "-1"
		} else {
			s = "max"
		}
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(s), 0); err != nil && !(errors.Is(err, os.ErrNotExist) && file == "memory.swap.max") {
		return err
	}
	return nil
}

func writeCPU(dir, file string, cpus float64) error {
	s := "max 100000"
	if cpus > 0 {
		s = fmt.Sprintf("%d 100000", int(math.Ceil(cpus*100000)))
	}
	return os.WriteFile(filepath.Join(dir, file), []byte(s), 0)
}

// leaf makes a cgroup2 leaf for one process tree and opens it for
// CLONE_INTO_CGROUP. It returns "" and -1 when there is no cgroup2.
func (sc *sandboxCgroup) leaf() (string, int, error) {
	if sc == nil || sc.v2 == "" {
		return "", -1, nil
	}
	dir := filepath.Join(sc.v2, "p"+strconv.FormatInt(sc.leaves.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", -1, fmt.Errorf("create process cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return "", -1, fmt.Errorf("open process cgroup: %w", err)
	}
	return dir, fd, nil
}

// forkIn runs start (which must fork on the calling thread) with that thread
// placed in the sandbox's v1 cgroups, so the child is born in them.
func (sc *sandboxCgroup) forkIn(start func() error) error {
	if sc == nil || len(sc.v1) == 0 {
		return start()
	}
	runtime.LockOSThread()
	tid := strconv.Itoa(unix.Gettid())
	orig, err := threadCgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	restore := func() error {
		var errs error
		for ctl := range sc.v1 {
			m := sc.mounts[ctl]
			back := filepath.Join(m.dir, m.rel(orig[ctl]), "tasks")
			errs = errors.Join(errs, os.WriteFile(back, []byte(tid), 0))
		}
		return errs
	}
	for _, dir := range sc.v1 {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(tid), 0); err != nil {
			if restore() == nil {
				runtime.UnlockOSThread()
			}
			return fmt.Errorf("enter sandbox cgroup: %w", err)
		}
	}
	serr := start()
	if err := restore(); err != nil {
		// Leave the thread locked: it ends with this goroutine rather than
		// serve other goroutines from inside a sandbox's cgroup.
		return errors.Join(serr, fmt.Errorf("leave sandbox cgroup: %w", err))
	}
	runtime.UnlockOSThread()
	return serr
}

// killCgroup kills every process in the sandbox's cgroup2 subtree (or one leaf of
// it) and waits, briefly, for them to be gone.
func killCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cgroup.kill: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for populated(dir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after kill", dir)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "populated 1")
}

// oomKills returns how many processes the OOM killer has killed in the
// sandbox so far.
func (sc *sandboxCgroup) oomKills() int64 {
	if sc == nil {
		return 0
	}
	if sc.v2 != "" {
		if n, ok := readKey(filepath.Join(sc.v2, "memory.events"), "oom_kill"); ok {
			return n
		}
	}
	if dir := sc.v1["memory"]; dir != "" {
		n, _ := readKey(filepath.Join(dir, "memory.oom_control"), "oom_kill")
		return n
	}
	return 0
}

func readKey(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// removeLeaf removes a process leaf once it is empty; a leaf whose
// processes outlived their leader stays until the sandbox goes.
func removeLeaf(dir string) {
	if dir != "" {
		_ = unix.Rmdir(dir)
	}
}

// remove kills what is left and removes the sandbox's cgroups.
func (sc *sandboxCgroup) remove() error {
	if sc == nil {
		return nil
	}
	var errs error
	if sc.v2 != "" {
		errs = errors.Join(errs, killCgroup(sc.v2))
		ents, _ := os.ReadDir(sc.v2)
		for _, e := range ents {
			if e.IsDir() {
				_ = unix.Rmdir(filepath.Join(sc.v2, e.Name()))
			}
		}
		if err := unix.Rmdir(sc.v2); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = errors.Join(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	for _, dir := range sc.v1 {
		// The processes are gone (killed above, or by the caller), but the
		// kernel may take a moment to release the last of them.
		var err error
		for i := 0; i < 100; i++ {
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		errs = errors.Join(errs, err)
	}
	return errs
}

// mount is a mounted cgroup hierarchy.
type mount struct {
	dir  string // mount point
	root string // the cgroup path mounted there
}

// rel turns an absolute cgroup path into one below the mount point.
func (m mount) rel(p string) string {
	if r, err := filepath.Rel(m.root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return "."
}

// cgroupMounts maps "" to the cgroup2 mount and each v1 controller to its
// mount, from /proc/self/mountinfo.
func cgroupMounts() (map[string]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := mount{dir: a[4], root: a[3]}
		switch b[0] {
		case "cgroup2":
			if _, dup := out[""]; !dup {
				out[""] = m
			}
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				for _, ctl := range v1Controllers {
					if o == ctl {
						out[ctl] = m
					}
				}
			}
		}
	}
	return out, sc.Err()
}

// ownCgroups maps "" to our cgroup2 path and v1 controllers to our paths.
func ownCgroups() (map[string]string, error) { return parseCgroupFile("/proc/self/cgroup") }

// threadCgroups is ownCgroups for the calling thread.
func threadCgroups() (map[string]string, error) {
	return parseCgroupFile("/proc/thread-self/cgroup")
}

func parseCgroupFile(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	return out, nil
}
