// Package process is the process backend: sandboxes are host processes in a
// workspace directory of their own. It is the fastest backend and the
// weakest isolation; what it does enforce:
//
//   - every process starts in a new session (so a process group of its own)
//     with a sanitized environment: nothing of the daemon's leaks in;
//   - when the daemon runs as root, each sandbox runs as a uid of its own
//     (UIDBase + n, no passwd entry needed), which keeps it out of the
//     daemon's state, other sandboxes' workspaces and other processes'
//     /proc, makes RLIMIT_NPROC a per-sandbox pids limit, and lets Destroy
//     kill everything the sandbox ever started, double forks included;
//   - where cgroups can be made, every process is born in the sandbox's
//     cgroup, for limits (memory, pids, cpu) and for killing whole trees.
//
// Features (shown in /v1/info) says which of these work on this host.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// Config configures the process backend.
type Config struct {
	// WorkspaceRoot holds one workspace directory per sandbox. With user
	// isolation every directory above it must be searchable by others.
	WorkspaceRoot string
	// TmpRoot holds one TMPDIR per sandbox.
	TmpRoot string
	// UserIsolation runs each sandbox as a uid of its own. It needs root.
	UserIsolation bool
	// UIDBase is the first uid used for sandboxes; MaxSandboxes uids from it
	// must be free for sandboxd's use.
	UIDBase int
	// UIDLockDir holds one lock file per uid in use. Every daemon on the
	// host must use the same directory, so two daemons (with different
	// state directories) never give the same uid to two sandboxes.
	UIDLockDir string
	// MaxSandboxes bounds the number of sandboxes (and so of uids).
	MaxSandboxes int
	// Cgroups enables cgroup placement; CgroupParent is the cgroup2 path to
	// create sandbox cgroups under ("" = a child of the daemon's own).
	Cgroups      bool
	CgroupParent string
	Logger       *slog.Logger
}

// Backend is the process backend.
type Backend struct {
	cfg   Config
	log   *slog.Logger
	cg    *cgroups // nil without cgroups
	cgErr error

	devNull *os.File // stdin of processes that get none

	mu      sync.Mutex
	uids    map[int]*uidLease // uids this daemon holds
	nextUID int               // where the search for a free uid starts
}

// uidLease is a uid held for one sandbox: the flock on its lock file.
type uidLease struct {
	id string
	f  *os.File
}

// New returns a process backend. It creates the workspace and tmp roots.
func New(cfg Config) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxSandboxes <= 0 {
		cfg.MaxSandboxes = 100000
	}
	if cfg.UserIsolation && os.Geteuid() != 0 {
		return nil, errors.New("process backend: user isolation needs the daemon to run as root")
	}
	if cfg.UserIsolation && (cfg.UIDBase <= 0 || cfg.UIDLockDir == "") {
		return nil, errors.New("process backend: user isolation needs a UID base and a UID lock directory")
	}
	if cfg.UserIsolation {
		// The parent (/run/sandboxd) also holds the socket: only the lock
		// directory itself is private.
		if err := os.MkdirAll(filepath.Dir(cfg.UIDLockDir), 0o755); err != nil {
			return nil, fmt.Errorf("process backend: %w", err)
		}
		if err := os.Mkdir(cfg.UIDLockDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("process backend: %w", err)
		}
	}
	for _, d := range []string{cfg.WorkspaceRoot, cfg.TmpRoot} {
		if d == "" {
			return nil, errors.New("process backend: workspace and tmp roots are required")
		}
		mode := os.FileMode(0o700)
		if cfg.UserIsolation {
			// Others may pass through, never list: a sandbox reaches only
			// its own directory below, which it owns.
			mode = 0o711
		}
		if err := os.MkdirAll(d, mode); err != nil {
			return nil, err
		}
		if err := os.Chmod(d, mode); err != nil {
			return nil, err
		}
		if cfg.UserIsolation {
			if err := searchable(d); err != nil {
				return nil, fmt.Errorf("process backend: %w (sandboxes run as other users and must reach their workspace; make the state directory's parents searchable or turn user isolation off)", err)
			}
		}
	}
	// No sandbox process dumps core into its workspace (or anywhere): the
	// soft limit is inherited by every process the daemon starts.
	var core unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_CORE, nil, &core); err == nil && core.Cur != 0 {
		core.Cur = 0
		_ = unix.Prlimit(0, unix.RLIMIT_CORE, &core, nil)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, uids: map[int]*uidLease{}, devNull: null}
	if cfg.Cgroups {
		b.cg, b.cgErr = newCgroups(cfg.CgroupParent)
		if b.cgErr != nil {
			b.log.Warn("process backend: no cgroups; limits are rlimits only and kill falls back to process groups", "err", b.cgErr)
		}
	}
	return b, nil
}

// searchable checks that every directory above and including d can be
// passed through by any user.
func searchable(d string) error {
	for p := filepath.Clean(d); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v)", p, st.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

// Close releases what the backend itself holds once its sandboxes are
// closed or destroyed: its cgroup parents, when they are empty (a parent
// holding sandboxes to re-adopt later stays).
func (b *Backend) Close() error {
	b.devNull.Close()
	if b.cg == nil {
		return nil
	}
	for _, dir := range append([]string{b.cg.v2}, mapValues(b.cg.v1)...) {
		if dir != "" {
			// EBUSY: sandboxes remain (or, for the v1 parent, another
			// daemon uses it too).
			_ = unix.Rmdir(dir)
		}
	}
	return nil
}

// Name implements backends.Backend.
func (b *Backend) Name() string { return api.BackendProcess }

// Available implements backends.Backend: the process backend always is.
func (b *Backend) Available(context.Context) error { return nil }

// Features implements backends.Backend.
func (b *Backend) Features() []string {
	var f []string
	if b.cfg.UserIsolation {
		f = append(f, "user-isolation", "rlimit-nproc")
	}
	if b.cg != nil {
		f = append(f, b.cg.features()...)
	}
	return f
}

// state is what the backend stores in the sandbox's private dir to
// re-adopt it.
type state struct {
	UID       int    `json:"uid"` // -1 without user isolation
	Workspace string `json:"workspace"`
	Tmp       string `json:"tmp"`
}

const stateFile = "process.json"

// Create implements backends.Backend.
func (b *Backend) Create(ctx context.Context, spec backends.Spec) (backends.Sandbox, error) {
	if spec.Limits.DiskMB > 0 {
		return nil, api.Errorf(api.ErrUnsupported, "the process backend cannot enforce limits.disk_mb; leave it 0 or use the containerd backend")
	}
	if spec.Image != "" && spec.Image != "host" {
		return nil, api.Errorf(api.ErrUnsupported, "the process backend runs on the host system and takes no image (got %q)", spec.Image)
	}
	if spec.Network == api.NetworkNone {
		return nil, api.Errorf(api.ErrUnsupported, "the process backend shares the host network and cannot give a sandbox network \"none\"; use the containerd backend for that")
	}
	st := state{
		UID:       -1,
		Workspace: filepath.Join(b.cfg.WorkspaceRoot, spec.ID),
		Tmp:       filepath.Join(b.cfg.TmpRoot, spec.ID),
	}
	if b.cfg.UserIsolation {
		uid, err := b.allocUID(spec.ID)
		if err != nil {
			return nil, err
		}
		st.UID = uid
	}
	if _, err := os.Lstat(st.Workspace); err == nil {
		b.releaseUID(st.UID)
		return nil, api.Errorf(api.ErrConflict, "a workspace for sandbox %s exists already", spec.ID)
	}
	sb, err := b.setup(spec, st, true)
	if err != nil {
		b.releaseUID(st.UID)
		os.RemoveAll(st.Workspace)
		os.RemoveAll(st.Tmp)
		return nil, err
	}
	return sb, nil
}

// setup makes (or, when re-adopting, checks) the sandbox's directories and
// cgroups and saves its state.
func (b *Backend) setup(spec backends.Spec, st state, fresh bool) (*sandbox, error) {
	for _, d := range []string{st.Workspace, st.Tmp} {
		if fresh {
			if err := os.Mkdir(d, 0o700); err != nil {
				return nil, fmt.Errorf("create sandbox directory: %w", err)
			}
		} else if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			if d == st.Tmp {
				// TMPDIR may be recreated; the workspace may not.
				_ = os.RemoveAll(d)
				if err := os.Mkdir(d, 0o700); err != nil {
					return nil, err
				}
			} else {
				return nil, fmt.Errorf("workspace %s is gone", d)
			}
		}
		if st.UID >= 0 {
			if err := os.Lchown(d, st.UID, st.UID); err != nil {
				return nil, err
			}
		}
	}
	sb := &sandbox{
		b:      b,
		id:     spec.ID,
		st:     st,
		limits: spec.Limits,
		procs:  map[*proc]struct{}{},
	}
	sb.env = b.env(spec, st)
	sb.envList = sortedEnv(sb.env)
	if b.cg != nil {
		cg, err := b.cg.create(spec.ID, spec.Limits)
		if err != nil {
			return nil, err
		}
		sb.cg = cg
	}
	data, _ := json.Marshal(st)
	if err := atomicfile.Write(filepath.Join(spec.Dir, stateFile), data, 0o600); err != nil {
		sb.cg.remove()
		return nil, err
	}
	return sb, nil
}

// env builds the sandbox's base environment.
func (b *Backend) env(spec backends.Spec, st state) map[string]string {
	env := backends.AgentEnv()
	env["HOME"] = st.Workspace
	env["TMPDIR"] = st.Tmp
	name := "sandbox"
	if st.UID < 0 {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	env["USER"], env["LOGNAME"] = name, name
	for k, v := range spec.Env {
		env[k] = v
	}
	return env
}

func (b *Backend) allocUID(id string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Round robin rather than lowest free: a uid comes back into use as
	// late as possible.
	for i := 0; i < b.cfg.MaxSandboxes; i++ {
		uid := b.cfg.UIDBase + (b.nextUID+i)%b.cfg.MaxSandboxes
		if _, used := b.uids[uid]; used {
			continue
		}
		err := b.lockUID(uid, id)
		if err == nil {
			b.nextUID = (uid - b.cfg.UIDBase + 1) % b.cfg.MaxSandboxes
			return uid, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return 0, err
		}
	}
	return 0, api.Errorf(api.ErrResourceExhausted, "all %d sandbox user ids are in use", b.cfg.MaxSandboxes)
}

// lockUID takes uid for sandbox id; b.mu is held. It fails with
// EWOULDBLOCK when another daemon (or sandbox) holds it.
func (b *Backend) lockUID(uid int, id string) error {
	f, err := os.OpenFile(filepath.Join(b.cfg.UIDLockDir, strconv.Itoa(uid)), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("uid lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return err
	}
	b.uids[uid] = &uidLease{id: id, f: f}
	return nil
}

func (b *Backend) releaseUID(uid int) {
	if uid < 0 {
		return
	}
	b.mu.Lock()
	if l := b.uids[uid]; l != nil {
		l.f.Close() // drops the flock
		delete(b.uids, uid)
	}
	b.mu.Unlock()
}

// Recover implements backends.Backend. Shells and processes do not survive
// their daemon (their terminals and pipes died with it), so re-adoption
// keeps the files, stops anything left over, and says so.
func (b *Backend) Recover(ctx context.Context, specs []backends.Spec) []backends.Recovered {
	out := make([]backends.Recovered, 0, len(specs))
	known := map[string]bool{}
	for _, spec := range specs {
		known[spec.ID] = true
		r := backends.Recovered{ID: spec.ID}
		sb, err := b.recover(spec)
		if err != nil {
			r.Err = err
		} else {
			r.Sandbox = sb
			r.Note = "re-adopted after a daemon restart: files are kept; shells, kernels and processes that were running were stopped"
		}
		out = append(out, r)
	}
	b.sweep(known)
	return out
}

func (b *Backend) recover(spec backends.Spec) (*sandbox, error) {
	data, err := os.ReadFile(filepath.Join(spec.Dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	if st.UID >= 0 {
		if !b.cfg.UserIsolation {
			// It will not run again, but what it left running must stop.
			if os.Geteuid() == 0 {
				_ = killUser(st.UID)
			}
			b.removeStaleCgroups(spec.ID)
			return nil, errors.New("the sandbox ran as a user of its own, but user isolation is now off")
		}
		b.mu.Lock()
		if l, used := b.uids[st.UID]; used && l.id != spec.ID {
			b.mu.Unlock()
			return nil, fmt.Errorf("uid %d is already used by sandbox %s", st.UID, l.id)
		} else if !used {
			if err := b.lockUID(st.UID, spec.ID); err != nil {
				b.mu.Unlock()
				return nil, fmt.Errorf("uid %d is in use by another sandboxd: %w", st.UID, err)
			}
		}
		b.mu.Unlock()
		if err := killUser(st.UID); err != nil {
			b.log.Warn("kill leftover processes", "sandbox", spec.ID, "err", err)
		}
	}
	// Leftovers of the previous run: kill them, then start clean.
	b.removeStaleCgroups(spec.ID)
	sb, err := b.setup(spec, st, false)
	if err != nil {
		b.releaseUID(st.UID)
		return nil, err
	}
	return sb, nil
}

// sweep removes cgroups of sandboxes no daemon knows about any more (a crash
// between creating one and recording it). Their files are left alone.
func (b *Backend) sweep(known map[string]bool) {
	if b.cg == nil {
		return
	}
	dirs := append([]string{b.cg.v2}, mapValues(b.cg.v1)...)
	for _, parent := range dirs {
		if parent == "" {
			continue
		}
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "sb-") && !known[e.Name()] {
				b.removeStaleCgroups(e.Name())
			}
		}
	}
}

// removeStaleCgroups kills and removes the cgroups a previous run left for
// sandbox id.
func (b *Backend) removeStaleCgroups(id string) {
	if b.cg == nil {
		return
	}
	old := &sandboxCgroup{v1: map[string]string{}}
	if b.cg.v2 != "" {
		old.v2 = filepath.Join(b.cg.v2, id)
	}
	for ctl, parent := range b.cg.v1 {
		if d := filepath.Join(parent, id); dirExists(d) {
			old.v1[ctl] = d
		}
	}
	if err := old.remove(); err != nil {
		b.log.Warn("remove stale cgroups", "sandbox", id, "err", err)
	}
}

func dirExists(d string) bool {
	fi, err := os.Stat(d)
	return err == nil && fi.IsDir()
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// sortedEnv renders env as KEY=VALUE strings in a stable order.
func sortedEnv(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
