package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"golang.org/x/sys/unix"
)

// sandbox is one process sandbox.
type sandbox struct {
	b       *Backend
	id      string
	st      state
	env     map[string]string
	envList []string // env rendered once, for processes that add nothing
	limits  api.Limits
	cg      *sandboxCgroup

	mu        sync.Mutex
	procs     map[*proc]struct{}
	destroyed bool
	starting  sync.WaitGroup // Starts past the destroyed check
}

func (s *sandbox) ID() string      { return s.id }
func (s *sandbox) Workdir() string { return s.st.Workspace }

// FS implements backends.Sandbox: the workspace is all a process sandbox's
// files the daemon touches, and new files belong to the sandbox's user.
func (s *sandbox) FS() backends.FS {
	return backends.DirFS{Dir: s.st.Workspace, View: s.st.Workspace, UID: s.st.UID, GID: s.st.UID}
}

// spawnMu serializes the window in which the daemon's RLIMIT_NPROC is set to
// one sandbox's pids limit for the fork of that sandbox's process. The
// daemon, as root, is not bound by RLIMIT_NPROC itself; the child inherits
// it and is, from its first instruction as the sandbox's user.
var spawnMu sync.Mutex

// Start implements backends.Sandbox.
func (s *sandbox) Start(ctx context.Context, ps backends.ProcessSpec) (backends.Process, error) {
	if len(ps.Argv) == 0 {
		return nil, api.Errorf(api.ErrInvalidArgument, "no program to run")
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return nil, api.Errorf(api.ErrNotFound, "sandbox %s is destroyed", s.id)
	}
	// Destroy waits for Starts in progress, so none can fork into a
	// sandbox it has already cleaned out.
	s.starting.Add(1)
	s.mu.Unlock()
	defer s.starting.Done()

	env, envList := s.env, s.envList
	if len(ps.Env) > 0 {
		env = make(map[string]string, len(s.env)+len(ps.Env))
		for k, v := range s.env {
			env[k] = v
		}
		for k, v := range ps.Env {
			env[k] = v
		}
		envList = sortedEnv(env)
	}
	dir := ps.Dir
	if dir == "" {
		dir = s.st.Workspace
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.st.Workspace, dir)
	}
	path, err := lookPath(ps.Argv[0], env["PATH"], dir)
	if err != nil {
		return nil, err
	}

	p := &proc{sb: s, done: make(chan struct{})}
	var childFiles []*os.File // closed in the parent once the child has them
	defer func() {
		for _, f := range childFiles {
			f.Close()
		}
	}()
	files := make([]*os.File, 3)
	if ps.TTY {
		master, slave, err := openPTY()
		if err != nil {
			return nil, err
		}
		if err := withFD(master, backends.QuietTerminal); err != nil {
			master.Close()
			slave.Close()
			return nil, fmt.Errorf("set up terminal: %w", err)
		}
		if s.st.UID >= 0 {
			_ = slave.Chown(s.st.UID, s.st.UID)
		}
		p.tty = master
		childFiles = append(childFiles, slave)
		files[0], files[1], files[2] = slave, slave, slave
		p.pumps = append(p.pumps, pump{r: master, w: ps.Stdout})
	} else {
		if ps.Stdin != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			childFiles = append(childFiles, r)
			files[0] = r
			p.stdin = w
		} else {
			files[0] = s.b.devNull
		}
		for i, w := range []io.Writer{ps.Stdout, ps.Stderr} {
			r, wf, err := os.Pipe()
			if err != nil {
				p.closeFiles()
				return nil, err
			}
			childFiles = append(childFiles, wf)
			files[1+i] = wf
			p.pumps = append(p.pumps, pump{r: r, w: w})
		}
	}

	sys := &syscall.SysProcAttr{Setsid: true}
	if ps.TTY {
		sys.Setctty = true
		sys.Ctty = 0
	}
	if s.st.UID >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(s.st.UID), Gid: uint32(s.st.UID), Groups: []uint32{}}
	}
	leaf, err := s.cg.leaf()
	if err != nil {
		p.closeFiles()
		return nil, err
	}
	if leaf != nil {
		sys.UseCgroupFD = true
		sys.CgroupFD = leaf.fd
	}
	p.leaf = leaf

	attr := &os.ProcAttr{Dir: dir, Env: envList, Files: files, Sys: sys}
	var osp *os.Process
	err = s.forkLimited(func() error {
		var err error
		osp, err = os.StartProcess(path, ps.Argv, attr)
		return err
	})
	if err != nil {
		p.closeFiles()
		if leaf != nil && !s.cg.release(leaf) {
			leaf.close()
		}
		return nil, startError(ps.Argv[0], dir, err)
	}
	p.osp = osp
	p.pgid = osp.Pid
	s.mu.Lock()
	s.procs[p] = struct{}{}
	s.mu.Unlock()

	p.start(ps.Stdin)
	return p, nil
}

// forkLimited runs start with the sandbox's RLIMIT_NPROC in force for the
// fork (see spawnMu) and in its v1 cgroups. The rlimit is only needed where
// no pids cgroup limits the sandbox: the window serializes spawns.
//
// Only the soft limit changes unless the daemon holds CAP_SYS_RESOURCE:
// without it a lowered hard limit could not be raised back for the next
// sandbox. A soft limit can be raised by the sandbox itself, so it is
// defence in depth; the pids cgroup is the limit that holds.
func (s *sandbox) forkLimited(start func() error) error {
	if s.st.UID < 0 || s.limits.Pids <= 0 || s.cg.limitsPids() {
		return s.cg.forkIn(start)
	}
	spawnMu.Lock()
	defer spawnMu.Unlock()
	var old unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_NPROC, nil, &old); err != nil {
		return fmt.Errorf("read rlimit: %w", err)
	}
	lim := unix.Rlimit{Cur: min(uint64(s.limits.Pids), old.Max), Max: old.Max}
	if capSysResource {
		lim.Max = lim.Cur
	}
	if err := unix.Prlimit(0, unix.RLIMIT_NPROC, &lim, nil); err != nil {
		return fmt.Errorf("set rlimit: %w", err)
	}
	defer unix.Prlimit(0, unix.RLIMIT_NPROC, &old, nil)
	return s.cg.forkIn(start)
}

// capSysResource reports whether the daemon may raise hard rlimits.
var capSysResource = hasCap(unix.CAP_SYS_RESOURCE)

func hasCap(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var mask uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err != nil {
				return false
			}
			return mask&(1<<uint(c)) != 0
		}
	}
	return false
}

// startError classifies why a process did not start.
func startError(prog, dir string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(dir); serr != nil {
			return api.Errorf(api.ErrNotFound, "working directory %s does not exist", dir)
		}
		return api.Errorf(api.ErrNotFound, "%s: no such file or directory", prog)
	case errors.Is(err, fs.ErrPermission):
		return api.Errorf(api.ErrPermissionDenied, "%s: permission denied", prog)
	case errors.Is(err, syscall.EAGAIN):
		return api.Errorf(api.ErrResourceExhausted, "cannot start %s: the sandbox's pids limit is reached", prog)
	case errors.Is(err, syscall.ENOEXEC):
		return api.Errorf(api.ErrPermissionDenied, "%s: exec format error", prog)
	}
	return fmt.Errorf("start %s: %w", prog, err)
}

// lookPath finds prog in the sandbox's PATH (never the daemon's). A name
// with a slash is taken as is, relative to dir.
func lookPath(prog, pathEnv, dir string) (string, error) {
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(dir, prog)
		}
		return prog, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", api.Errorf(api.ErrNotFound, "%s: command not found in PATH", prog)
}

// Close implements backends.Sandbox: processes cannot outlive the daemon
// (their pipes and terminals die with it), so stop them; keep the files.
// The uid is let go too: Recover takes it again.
func (s *sandbox) Close(ctx context.Context) error {
	err := s.stop()
	s.b.releaseUID(s.st.UID)
	return err
}

// stop refuses new processes, waits for Starts in progress, kills every
// process of the sandbox and removes its cgroups.
func (s *sandbox) stop() error {
	s.mu.Lock()
	s.destroyed = true
	s.mu.Unlock()
	s.starting.Wait()
	return errors.Join(s.killAll(), s.cg.remove())
}

// Destroy implements backends.Sandbox.
func (s *sandbox) Destroy(ctx context.Context) error {
	errs := s.stop()
	// Nothing of the sandbox runs any more, so nothing can swap a symlink
	// in while these run; RemoveAll never follows links anyway.
	for _, d := range []string{s.st.Workspace, s.st.Tmp} {
		if err := os.RemoveAll(d); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	if s.st.UID >= 0 {
		// The uid will serve another sandbox: what this one left in the
		// shared writable places must not be readable by that one.
		errs = errors.Join(errs, removeOwned(s.st.UID, sharedTmpDirs...))
	}
	s.b.releaseUID(s.st.UID)
	return errs
}

// sharedTmpDirs are the world-writable places a sandbox user can leave
// files in outside its own directories.
var sharedTmpDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// removeOwned removes, below each dir, every entry owned by uid (a
// directory with everything in it). It does not follow symlinks, and it
// only descends into directories others may write to: the user cannot have
// created anything anywhere else.
func removeOwned(uid int, dirs ...string) error {
	var errs error
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return nil
			}
			if path != dir && int(st.Uid) == uid {
				if err := os.RemoveAll(path); err != nil {
					errs = errors.Join(errs, err)
				}
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() && info.Mode().Perm()&0o002 == 0 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return errs
}

// killAll kills every process of the sandbox: its cgroup, its user, and the
// process groups of the processes this daemon started.
func (s *sandbox) killAll() error {
	var errs error
	if s.cg != nil {
		errs = errors.Join(errs, killCgroup(s.cg.v2))
	}
	if s.st.UID >= 0 {
		errs = errors.Join(errs, killUser(s.st.UID))
	}
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		_ = unix.Kill(-p.pgid, unix.SIGKILL)
	}
	for _, p := range procs {
		// Reaping is quick once everything is SIGKILLed; the bound is for a
		// process stuck in the kernel (D state).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := p.Wait(ctx)
		cancel()
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("process %d did not exit after SIGKILL", p.osp.Pid))
		}
	}
	return errs
}

// pump copies one output stream of a process to its writer.
type pump struct {
	r *os.File
	w io.Writer
}

// proc is one started process.
type proc struct {
	sb    *sandbox
	osp   *os.Process
	pgid  int
	tty   *os.File // master side, for TTY processes
	stdin *os.File // write end of the stdin pipe
	pumps []pump

	leafMu sync.Mutex
	leaf   *leaf // cgroup2 leaf while it is this process's, nil if none

	done   chan struct{}
	status backends.ExitStatus
	err    error
}

func (p *proc) closeFiles() {
	for _, pm := range p.pumps {
		pm.r.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

func (p *proc) start(stdin io.Reader) {
	var pumps sync.WaitGroup
	var clock backends.OutputClock
	for _, pm := range p.pumps {
		pumps.Add(1)
		go func(pm pump) {
			defer pumps.Done()
			copyOut(pm.w, pm.r, &clock)
		}(pm)
	}
	if p.stdin != nil {
		go func() {
			_, _ = io.Copy(p.stdin, stdin)
			p.stdin.Close()
		}()
	}
	go func() {
		state, err := p.osp.Wait()
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		// Something the process started may hold its output open;
		// closing the read ends unblocks the pumps.
		backends.Drain(drained, &clock, time.Now(), func() {
			for _, pm := range p.pumps {
				pm.r.Close()
			}
		})
		for _, pm := range p.pumps {
			pm.r.Close()
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		if err != nil {
			p.err = err
		} else {
			p.status = exitStatus(state)
			if p.status.Signal == syscall.SIGKILL && p.sb.cg.newOOMKill() {
				p.status.OOMKilled = true
			}
		}
		p.sb.mu.Lock()
		delete(p.sb.procs, p)
		p.sb.mu.Unlock()
		close(p.done)
		// Once pooled, the leaf may hold the next process at any moment:
		// it is no longer this one's to kill.
		p.leafMu.Lock()
		if p.sb.cg.release(p.leaf) {
			p.leaf = nil
		} else if p.leaf != nil {
			p.leaf.close() // Kill needs only its path from now on
		}
		p.leafMu.Unlock()
	}()
}

// pumpBufs recycles the read buffers of output pumps: a short process would
// otherwise leave two of them as garbage.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// copyOut reads r until it ends and hands every chunk to w. A terminal's
// master reports EIO once the last slave is closed: that is its EOF.
func copyOut(w io.Writer, r *os.File, clock *backends.OutputClock) {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	for {
		n, err := r.Read(buf)
		if n > 0 {
			clock.Tick()
			if w != nil {
				_, _ = w.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

func exitStatus(st *os.ProcessState) backends.ExitStatus {
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return backends.ExitStatus{Code: st.ExitCode()}
	}
	if ws.Signaled() {
		return backends.ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return backends.ExitStatus{Code: ws.ExitStatus()}
}

// Stdin implements backends.Process.
func (p *proc) Stdin() io.Writer {
	if p.tty != nil {
		return p.tty
	}
	return nil
}

// Wait implements backends.Process.
func (p *proc) Wait(ctx context.Context) (backends.ExitStatus, error) {
	select {
	case <-p.done:
		return p.status, p.err
	case <-ctx.Done():
		return backends.ExitStatus{}, ctx.Err()
	}
}

// Signal implements backends.Process.
func (p *proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.osp.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Kill implements backends.Process: its cgroup leaf holds everything it
// started; its process group is the fallback.
func (p *proc) Kill() error {
	p.leafMu.Lock()
	defer p.leafMu.Unlock()
	if p.leaf != nil {
		p.leaf.killed = true
		return killCgroup(p.leaf.dir)
	}
	select {
	case <-p.done:
		// Reaped: its pid may belong to someone else by now.
		return nil
	default:
	}
	if e := unix.Kill(-p.pgid, unix.SIGKILL); e != nil && e != unix.ESRCH {
		return e
	}
	return nil
}

// SignalForeground implements backends.Terminal.
func (p *proc) SignalForeground(sig syscall.Signal) (bool, error) {
	if p.tty == nil {
		return false, nil
	}
	var fg int
	err := withFD(p.tty, func(fd int) (err error) {
		fg, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	if err != nil || fg <= 0 || fg == p.pgid {
		return false, nil
	}
	if err := unix.Kill(-fg, sig); err != nil && err != unix.ESRCH {
		return false, err
	}
	return true, nil
}

// Quiet implements backends.Terminal.
func (p *proc) Quiet() error {
	if p.tty == nil {
		return nil
	}
	return withFD(p.tty, backends.QuietTerminal)
}

// withFD runs fn on f's descriptor without f.Fd(), which would switch a
// pollable file to blocking mode and keep Close from waking its reader.
func withFD(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
