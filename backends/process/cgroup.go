package process

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
// with CLONE_INTO_CGROUP, cgroup v1 by forking from the sandbox's spawner
// thread, an OS thread that joined the sandbox's v1 cgroups once (v1 places
// threads individually, and a child inherits its forking thread's cgroups).
// Moving a thread costs tens of microseconds per hierarchy, so doing it once
// per sandbox rather than twice per process keeps spawning as fast as a
// plain fork.
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
	// v1 parents are named like the cgroup2 one, so each daemon has its
	// own and removing it at Close touches no other daemon's.
	name := "sandboxd"
	if parent != "" {
		name = filepath.Base(parent)
	}
	if !c.v2Limits {
		for _, ctl := range v1Controllers {
			m, ok := mounts[ctl]
			if !ok {
				continue
			}
			dir := filepath.Join(m.dir, m.rel(own[ctl]), name)
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

// limitsPids reports whether a pids cgroup bounds the sandbox.
func (sc *sandboxCgroup) limitsPids() bool {
	return sc != nil && (sc.v2Pids || sc.v1["pids"] != "")
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
	v2      string            // sandbox dir in cgroup2, "" if none
	v2Pids  bool              // the v2 pids controller limits it
	v1      map[string]string // controller -> sandbox dir
	mounts  map[string]mount  // controller -> its v1 hierarchy
	leaves  atomic.Int64
	spawner *spawner // forks into the v1 cgroups; nil without them

	mu      sync.Mutex
	pool    []*leaf // empty leaves ready for reuse
	closed  bool
	oomSeen int64 // OOM kills already attributed
}

// leaf is a cgroup2 leaf for one process tree, with the descriptors that
// make using it cheap: its directory (for CLONE_INTO_CGROUP) and its
// cgroup.events (to see whether it is empty without opening a file).
type leaf struct {
	dir    string
	fd     int
	events int
	// killed marks a leaf cgroup.kill was used on. It is never reused:
	// on Linux 6.18 (seen here), once cgroup.kill was written to a
	// cgroup, even an empty one, every child later cloned into it with
	// CLONE_INTO_CGROUP is killed at birth.
	killed bool
}

// maxPool bounds the empty leaves a sandbox keeps for reuse.
const maxPool = 4

// create makes the cgroups of sandbox id with limits. It is idempotent, so
// re-adoption can call it again.
func (c *cgroups) create(id string, l api.Limits) (*sandboxCgroup, error) {
	sc := &sandboxCgroup{v1: map[string]string{}, mounts: c.v1Mounts, v2Pids: c.v2Limits}
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
	if err == nil && len(sc.v1) > 0 {
		sc.spawner, err = newSpawner(sc.v1)
	}
	if err != nil {
		sc.remove()
		return nil, fmt.Errorf("set cgroup limits: %w", err)
	}
	sc.oomSeen = sc.oomKills()
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

// leaf returns an empty cgroup2 leaf for one process tree: one from the
// pool, or a new one. It returns nil when there is no cgroup2.
func (sc *sandboxCgroup) leaf() (*leaf, error) {
	if sc == nil || sc.v2 == "" {
		return nil, nil
	}
	sc.mu.Lock()
	if n := len(sc.pool); n > 0 {
		l := sc.pool[n-1]
		sc.pool = sc.pool[:n-1]
		sc.mu.Unlock()
		return l, nil
	}
	sc.mu.Unlock()
	dir := filepath.Join(sc.v2, "p"+strconv.FormatInt(sc.leaves.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create process cgroup: %w", err)
	}
	l := &leaf{dir: dir, fd: -1, events: -1}
	var err error
	if l.fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		l.events, err = unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		l.close()
		unix.Rmdir(dir)
		return nil, fmt.Errorf("open process cgroup: %w", err)
	}
	return l, nil
}

func (l *leaf) close() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	if l.events >= 0 {
		unix.Close(l.events)
		l.events = -1
	}
}

// populated reports whether processes are still in the leaf.
func (l *leaf) populated() bool {
	var buf [128]byte
	n, err := unix.Pread(l.events, buf[:], 0)
	if err != nil {
		return true
	}
	return strings.Contains(string(buf[:n]), "populated 1")
}

// release takes a leaf back once its leader is gone, and reports whether
// it did. An empty leaf is kept for the next process (or removed); one still
// holding processes the leader started is not taken: it stays with its
// process, so Kill can still reach them, until the sandbox goes.
func (sc *sandboxCgroup) release(l *leaf) bool {
	if l == nil || l.populated() {
		return false
	}
	sc.mu.Lock()
	if !sc.closed && !l.killed && len(sc.pool) < maxPool {
		sc.pool = append(sc.pool, l)
		sc.mu.Unlock()
		return true
	}
	sc.mu.Unlock()
	l.close()
	unix.Rmdir(l.dir)
	return true
}

// spawner is an OS thread that sits in a sandbox's v1 cgroups and runs the
// forks of the sandbox's processes.
type spawner struct {
	jobs chan func()
	quit chan struct{}
	done chan struct{}
}

func newSpawner(dirs map[string]string) (*spawner, error) {
	sp := &spawner{jobs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	errc := make(chan error, 1)
	go onSpareThread(func() bool {
		defer close(sp.done)
		tid := []byte(strconv.Itoa(unix.Gettid()))
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
				errc <- fmt.Errorf("enter sandbox cgroup: %w", err)
				return true
			}
		}
		errc <- nil
		for {
			select {
			case job := <-sp.jobs:
				job()
			case <-sp.quit:
				// The thread ends with this goroutine, and so leaves the
				// sandbox's cgroups.
				return true
			}
		}
	})
	if err := <-errc; err != nil {
		<-sp.done
		return nil, err
	}
	return sp, nil
}

// run runs f on the spawner thread.
func (sp *spawner) run(f func() error) error {
	var err error
	ran := make(chan struct{})
	select {
	case sp.jobs <- func() { err = f(); close(ran) }:
	case <-sp.done:
		return errors.New("the sandbox's cgroups are gone")
	}
	<-ran
	return err
}

func (sp *spawner) stop() {
	select {
	case <-sp.done:
	default:
		close(sp.quit)
		<-sp.done
	}
}

// forkIn runs start (which forks on the calling thread) so that the child is
// born in the sandbox's v1 cgroups.
func (sc *sandboxCgroup) forkIn(start func() error) error {
	if sc == nil || sc.spawner == nil {
		return start()
	}
	return sc.spawner.run(start)
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

// newOOMKill reports whether the OOM killer struck since the last call
// that said so. It is asked only when a process died of SIGKILL, so the
// counter is not read on every exit (a cgroup file read costs tens of
// microseconds); with several processes killed at once, each kill is
// attributed once.
func (sc *sandboxCgroup) newOOMKill() bool {
	if sc == nil {
		return false
	}
	n := sc.oomKills()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if n > sc.oomSeen {
		sc.oomSeen++
		return true
	}
	return false
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

// remove kills what is left and removes the sandbox's cgroups.
func (sc *sandboxCgroup) remove() error {
	if sc == nil {
		return nil
	}
	sc.mu.Lock()
	sc.closed = true
	for _, l := range sc.pool {
		l.close()
	}
	sc.pool = nil
	sc.mu.Unlock()
	if sc.spawner != nil {
		sc.spawner.stop()
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
	if r, err := filepath.Rel(m.root, p); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
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
