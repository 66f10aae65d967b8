package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

// proc is one task exec.
type proc struct {
	s     *sandbox
	id    string // exec id
	tty   bool
	cp    client.Process
	pid   int // host pid
	fdMu  sync.Mutex
	pidfd int // -1 once released; fdMu guards its use against its close
	dio   *cio.DirectIO
	fifos *cio.FIFOSet
	stdin io.Writer // a terminal's stdin, nil otherwise
	oom0  int64     // the sandbox's OOM kills when the process started

	cancelWait context.CancelFunc
	detached   atomic.Bool
	done       chan struct{}
	status     backends.ExitStatus
	err        error
	stopOnce   sync.Once
}

// errDetached is Wait's answer once the daemon let go of a terminal that
// lives on for the next daemon.
var errDetached = api.Errorf(api.ErrUnavailable, "the daemon let go of this process; it keeps running in the container")

// Start implements backends.Sandbox.
func (s *sandbox) Start(ctx context.Context, ps backends.ProcessSpec) (_ backends.Process, err error) {
	if len(ps.Argv) == 0 || ps.Argv[0] == "" {
		return nil, api.Errorf(api.ErrInvalidArgument, "no program to start")
	}
	if !s.alive() {
		return nil, errGone
	}
	env := s.env(ps.Env)
	cwd := s.dir(ps.Dir)
	if err := s.checkStart(ps.Argv[0], envValue(env, "PATH"), cwd); err != nil {
		return nil, err
	}
	id := newExecID(ps.TTY)
	p := &proc{s: s, id: id, tty: ps.TTY, pidfd: -1, done: make(chan struct{}), oom0: s.oomKills()}
	cfg := cio.Config{
		Stdin:    filepath.Join(s.l.fifos(), id+"-stdin"),
		Stdout:   filepath.Join(s.l.fifos(), id+"-stdout"),
		Terminal: ps.TTY,
	}
	if !ps.TTY {
		cfg.Stderr = filepath.Join(s.l.fifos(), id+"-stderr")
	}
	p.fifos = cio.NewFIFOSet(cfg, func() error { return removeFIFOs(cfg) })
	p.dio, err = cio.NewDirectIO(context.Background(), p.fifos)
	if err != nil {
		_ = p.fifos.Close()
		return nil, fmt.Errorf("make the process's FIFOs: %w", err)
	}
	defer func() {
		if err != nil {
			p.dio.Cancel()
			_ = p.dio.Close()
		}
	}()
	pspec := s.proc
	pspec.Args = append([]string{helperPath, sbinit.Arg, sbinit.ModeExec}, ps.Argv...)
	pspec.Env = env
	pspec.Cwd = cwd
	pspec.Terminal = ps.TTY
	if ps.TTY {
		pspec.ConsoleSize = &specs.Box{Height: backends.TTYRows, Width: backends.TTYCols}
	}
	cp, err := s.task.Exec(ctx, id, &pspec, func(string) (cio.IO, error) { return p.dio, nil })
	if err != nil {
		return nil, s.b.classify("exec in the container", err)
	}
	p.cp = cp
	waitCtx, cancel := context.WithCancel(context.Background())
	p.cancelWait = cancel
	exitCh, err := cp.Wait(waitCtx)
	if err != nil {
		cancel()
		_, _ = cp.Delete(context.WithoutCancel(ctx))
		return nil, s.b.classify("wait for the process", err)
	}
	if err := cp.Start(ctx); err != nil {
		cancel()
		_, _ = cp.Delete(context.WithoutCancel(ctx))
		return nil, startError(ps.Argv[0], s.b.classify("start the process", err))
	}
	if p.pid = int(cp.Pid()); p.pid <= 1 {
		cancel()
		_, _ = cp.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		return nil, fmt.Errorf("containerd gave process %s no pid", id)
	}
	if fd, err := unix.PidfdOpen(p.pid, 0); err == nil {
		p.pidfd = fd
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		p.stop()
		return nil, errGone
	}
	s.procs[p] = true
	s.mu.Unlock()
	if ps.TTY {
		// No keeper needed for the terminal's stdin: the shim holds its
		// FIFO open itself, so the shell sees no EOF when the daemon dies
		// and a later daemon re-attaches (see Reattach).
		p.stdin = p.dio.Stdin
	} else {
		go func() {
			if ps.Stdin != nil {
				_, _ = io.Copy(p.dio.Stdin, ps.Stdin)
			}
			p.dio.Stdin.Close()
			// The shim holds the FIFO open itself: EOF reaches the
			// process only when the shim is told.
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_ = cp.CloseIO(ctx, client.WithStdinCloser)
		}()
	}
	p.run(exitCh, ps.Stdout, ps.Stderr)
	return p, nil
}

func newExecID(tty bool) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	if tty {
		return "t" + hex.EncodeToString(b)
	}
	return "x" + hex.EncodeToString(b)
}

func removeFIFOs(cfg cio.Config) error {
	for _, f := range []string{cfg.Stdin, cfg.Stdout, cfg.Stderr} {
		if f != "" {
			_ = os.Remove(f)
		}
	}
	return nil
}

// run pumps the output and waits for the exit in the background.
func (p *proc) run(exitCh <-chan client.ExitStatus, stdout, stderr io.Writer) {
	var pumps sync.WaitGroup
	var clock backends.OutputClock
	pump := func(w io.Writer, r io.Reader) {
		defer pumps.Done()
		buf := make([]byte, 64<<10)
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
	pumps.Add(1)
	go pump(stdout, p.dio.Stdout)
	if p.dio.Stderr != nil {
		pumps.Add(1)
		go pump(stderr, p.dio.Stderr)
	}
	go func() {
		st, err := p.waitExit(exitCh)
		if p.detached.Load() {
			p.err = errDetached
			close(p.done)
			return
		}
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		backends.Drain(drained, &clock, time.Now(), func() {
			p.dio.Cancel()
			_ = p.dio.Stdout.Close()
			if p.dio.Stderr != nil {
				_ = p.dio.Stderr.Close()
			}
		})
		p.err = err
		if err == nil {
			p.status = exitStatus(st)
			if p.status.Signal == syscall.SIGKILL && p.s.oomKills() > p.oom0 {
				p.status.OOMKilled = true
			}
		}
		// Answer first; freeing the exec in the shim costs a round trip
		// or two that the caller need not wait for.
		close(p.done)
		p.release()
	}()
}

// waitExit waits for the exit status, asking again when containerd went
// away in between (it re-connects to its shims when it is back).
func (p *proc) waitExit(exitCh <-chan client.ExitStatus) (client.ExitStatus, error) {
	backoff := 100 * time.Millisecond
	for {
		st, ok := <-exitCh
		if p.detached.Load() {
			return st, errDetached
		}
		if ok && st.Error() == nil {
			return st, nil
		}
		if ok && errdefs.IsNotFound(st.Error()) {
			return st, api.Errorf(api.ErrUnavailable, "containerd lost track of the process")
		}
		// containerd went away (or the call failed): try again until it
		// answers, unless the sandbox is being torn down.
		if !p.s.alive() && !p.tty {
			if err := p.waitGone(); err == nil {
				return client.ExitStatus{}, api.Errorf(api.ErrUnavailable, "the sandbox was destroyed")
			}
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := p.cp.Wait(ctx)
		if err != nil {
			cancel()
			if errdefs.IsNotFound(err) {
				return st, api.Errorf(api.ErrUnavailable, "the process is gone (its container was removed)")
			}
			exitCh = closedStatus(err)
			continue
		}
		p.cancelWait = cancel
		exitCh = ch
	}
}

// waitGone reports nil once the process no longer exists on the host.
func (p *proc) waitGone() error {
	if p.pidfd >= 0 {
		fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			return nil
		}
	}
	return errors.New("still there")
}

func closedStatus(err error) <-chan client.ExitStatus {
	ch := make(chan client.ExitStatus, 1)
	ch <- *client.NewExitStatus(client.UnknownExitStatus, time.Time{}, err)
	close(ch)
	return ch
}

// release frees what the process held: its exec in the shim, its FIFOs.
func (p *proc) release() {
	p.dio.Cancel()
	_ = p.dio.Close()
	if p.cancelWait != nil {
		p.cancelWait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	if _, err := p.cp.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		p.s.b.log.Debug("containerd: delete exec", "exec", p.id, "err", err)
	}
	cancel()
	p.fdMu.Lock()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	p.fdMu.Unlock()
	p.s.mu.Lock()
	delete(p.s.procs, p)
	p.s.mu.Unlock()
}

// detach lets go of a terminal process without ending it (daemon stop).
func (p *proc) detach() {
	p.detached.Store(true)
	p.dio.Cancel()
	_ = p.dio.Stdin.Close()
	_ = p.dio.Stdout.Close()
	if p.cancelWait != nil {
		p.cancelWait()
	}
	<-p.done
}

// stop ends a process whose container is gone or going.
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		_ = p.Kill()
	})
	select {
	case <-p.done:
	case <-time.After(cleanupTimeout):
	}
}

// exitStatus turns containerd's status (128+N for a signal) into ours.
func exitStatus(st client.ExitStatus) backends.ExitStatus {
	code := int(st.ExitCode())
	es := backends.ExitStatus{Code: code}
	if code > 128 && code < 128+65 {
		es.Signal = syscall.Signal(code - 128)
	}
	return es
}

// Handle implements backends.Handled: terminals can be re-attached to.
func (p *proc) Handle() string {
	if !p.tty {
		return ""
	}
	return p.id
}

// WaitingForInput implements backends.InputWaiter: the program is blocked
// in read(2) on its terminal (fd 0) and is its terminal's foreground.
func (p *proc) WaitingForInput() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", p.pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) >= 2 && f[0] == strconv.Itoa(unix.SYS_READ) && f[1] == "0x0" &&
		foregroundOf(p.pid) == statField(p.pid, 5)
}

// Reattach implements backends.Reattacher.
func (s *sandbox) Reattach(ctx context.Context, handle string, stdout io.Writer) (_ backends.Process, err error) {
	if !strings.HasPrefix(handle, "t") {
		return nil, api.Errorf(api.ErrNotFound, "%q names no terminal of this sandbox", handle)
	}
	if !s.alive() {
		return nil, errGone
	}
	p := &proc{s: s, id: handle, tty: true, pidfd: -1, done: make(chan struct{}), oom0: s.oomKills()}
	cp, err := s.task.LoadProcess(ctx, handle, func(f *cio.FIFOSet) (cio.IO, error) {
		if f == nil || f.Stdin == "" || f.Stdout == "" || filepath.Dir(f.Stdin) != s.l.fifos() || filepath.Dir(f.Stdout) != s.l.fifos() {
			return nil, errors.New("the process has no terminal FIFOs of this sandbox")
		}
		p.fifos = cio.NewFIFOSet(f.Config, func() error { return removeFIFOs(f.Config) })
		p.dio, err = cio.NewDirectIO(context.Background(), p.fifos)
		return p.dio, err
	})
	if err != nil {
		if p.dio != nil {
			p.dio.Cancel()
			_ = p.dio.Close()
		}
		if errdefs.IsNotFound(err) {
			return nil, api.Errorf(api.ErrNotFound, "terminal %s is gone", handle)
		}
		return nil, s.b.classify("re-attach to terminal "+handle, err)
	}
	p.cp = cp
	defer func() {
		if err != nil {
			p.dio.Cancel()
			_ = p.dio.Close()
			_, _ = cp.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		}
	}()
	st, err := cp.Status(ctx)
	if err != nil || st.Status != client.Running {
		return nil, api.Errorf(api.ErrNotFound, "terminal %s is no longer running", handle)
	}
	waitCtx, cancel := context.WithCancel(context.Background())
	p.cancelWait = cancel
	exitCh, err := cp.Wait(waitCtx)
	if err != nil {
		cancel()
		return nil, s.b.classify("wait for terminal "+handle, err)
	}
	// LoadProcess leaves the pid unknown (0): ask the task service.
	resp, err := s.b.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: s.ctr.ID(), ExecID: handle})
	if err != nil {
		cancel()
		return nil, s.b.classify("look up terminal "+handle, err)
	}
	if p.pid = int(resp.Process.Pid); p.pid <= 1 {
		cancel()
		return nil, api.Errorf(api.ErrNotFound, "terminal %s has no process", handle)
	}
	if fd, err := unix.PidfdOpen(p.pid, 0); err == nil {
		p.pidfd = fd
	}
	s.mu.Lock()
	s.procs[p] = true
	s.mu.Unlock()
	p.stdin = p.dio.Stdin
	p.run(exitCh, stdout, nil)
	return p, nil
}

// Stdin implements backends.Process.
func (p *proc) Stdin() io.Writer { return p.stdin }

// Wait implements backends.Process.
func (p *proc) Wait(ctx context.Context) (backends.ExitStatus, error) {
	select {
	case <-p.done:
		return p.status, p.err
	case <-ctx.Done():
		return backends.ExitStatus{}, ctx.Err()
	}
}

// Signal implements backends.Process: from the host, through a pidfd, so
// a recycled pid is never signalled.
func (p *proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.fdMu.Lock()
	defer p.fdMu.Unlock()
	if p.pidfd < 0 {
		return p.cp.Kill(context.Background(), sig)
	}
	if err := unix.PidfdSendSignal(p.pidfd, sig, nil, 0); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

// Kill implements backends.Process: the process and its whole tree (the
// exec wrapper made it a subreaper, so orphans stay in it).
func (p *proc) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.fdMu.Lock()
	defer p.fdMu.Unlock()
	if p.pidfd < 0 {
		// Without a pidfd the pid may be another process by now: let
		// containerd kill what it knows (the process itself).
		return p.cp.Kill(context.Background(), syscall.SIGKILL)
	}
	return killTree(p.pid, p.pidfd)
}

// SignalForeground implements backends.Terminal.
func (p *proc) SignalForeground(sig syscall.Signal) (bool, error) {
	if !p.tty {
		return false, nil
	}
	// TIOCGPGRP answers only a terminal's master or its session's
	// members; /proc knows it for everyone.
	fg := foregroundOf(p.pid)
	if fg <= 1 || fg == p.pid {
		return false, nil
	}
	if err := unix.Kill(-fg, sig); err != nil && err != unix.ESRCH {
		return false, err
	}
	return true, nil
}

// Quiet implements backends.Terminal.
func (p *proc) Quiet() error {
	if !p.tty {
		return nil
	}
	return p.withTTY(backends.QuietTerminal)
}

// withTTY opens the process's terminal (its stdin, seen from the host) and
// runs fn on it. The process controls its fd 0, so the open must not block
// and what it opens must be a terminal.
func (p *proc) withTTY(fn func(fd int) error) error {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/fd/0", p.pid), unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return errors.New("the process's stdin is not a terminal")
	}
	return fn(fd)
}

// oomKills counts the OOM kills in the sandbox's memory cgroup (v2's
// memory.events or v1's memory.oom_control); -1 if unknown.
func (s *sandbox) oomKills() int64 {
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup", s.cgroup, "memory.events"),
		filepath.Join("/sys/fs/cgroup/memory", s.cgroup, "memory.oom_control"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// startError classifies runc's failure to start a program.
func startError(prog string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "not found"):
		return api.Errorf(api.ErrNotFound, "%s: not found in the sandbox: %v", prog, errText(err))
	case strings.Contains(msg, "permission denied"):
		return api.Errorf(api.ErrPermissionDenied, "%s: cannot be executed: %v", prog, errText(err))
	}
	return err
}
