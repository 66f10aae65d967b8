// Package bash executes run and interrupt actions: stateful bash sessions on
// a terminal, one per session name, in any backend's sandbox.
//
// How a command runs. The shell is an interactive bash without readline
// (--noediting) on a PTY with echo off, started with PS1 and PS2 empty and a
// PROMPT_COMMAND that prints a marker (see marker.go) carrying the exit code
// and cwd. A command is typed as printable ASCII: its text quoted with $'..'
// into a variable, in lines short enough for the terminal's line buffer,
// then `eval` of the variable at the top level (so cd, export, functions and
// set -e behave as typed) followed by the marker. Completion is the marker
// arriving on the output stream: no polling, no fork per command.
//
// Ctrl-C is a ^C byte on the terminal (the line discipline signals the
// foreground job), sent once the shell has printed the command's start
// marker: with the signal the terminal discards unread input, which before
// then is part of the command. A hard timeout sends SIGINT to the shell
// and SIGKILL to the foreground process group, which aborts the rest of
// the command line.
package bash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
)

// Config configures bash sessions.
type Config struct {
	// Shell is the command line of the shell.
	Shell []string
	// MaxOutputChars caps an observation's output (first and last half).
	MaxOutputChars int
	// DefaultTimeout is the soft timeout of a run without timeout_s, and
	// MaxTimeout caps any timeout.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// InterruptWait is how long an interrupt waits for the command to stop.
	InterruptWait time.Duration
	// StartTimeout bounds how long a new shell may take to be ready.
	StartTimeout time.Duration
	Logger       *slog.Logger
	// Persist, if set, is called with every session that can be
	// re-attached to after a daemon restart, whenever one starts or ends,
	// so the daemon can record them (see Reattach).
	Persist func([]SessionInfo)
}

// SessionInfo is what a later daemon needs to re-attach to a session's
// shell: the backend's handle of its terminal and the marker nonce.
type SessionInfo struct {
	Name   string `json:"name"`
	Handle string `json:"handle"`
	Nonce  string `json:"nonce"`
}

// DefaultConfig returns the defaults of the API.
func DefaultConfig() Config {
	return Config{
		Shell:          []string{"bash", "--noprofile", "--norc", "--noediting", "-i"},
		MaxOutputChars: 30000,
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     24 * time.Hour,
		InterruptWait:  5 * time.Second,
		StartTimeout:   10 * time.Second,
	}
}

// Executor holds the bash sessions of one sandbox.
type Executor struct {
	sb  backends.Sandbox
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	starting map[string]chan struct{} // sessions being started
	lost     map[string]bool          // sessions a previous daemon run had
	closed   bool
}

// New returns the bash executor of sb.
func New(sb backends.Sandbox, cfg Config) *Executor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Executor{
		sb:       sb,
		cfg:      cfg,
		log:      cfg.Logger,
		sessions: map[string]*session{},
		starting: map[string]chan struct{}{},
		lost:     map[string]bool{},
	}
}

// MarkLost records sessions that existed before the daemon restarted; the
// first action on each is told its shell is a new one.
func (e *Executor) MarkLost(names []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range names {
		e.lost[n] = true
	}
}

// persist reports the re-attachable sessions to Config.Persist.
func (e *Executor) persist() {
	if e.cfg.Persist == nil {
		return
	}
	e.mu.Lock()
	infos := make([]SessionInfo, 0, len(e.sessions))
	for name, s := range e.sessions {
		if s.handle != "" {
			infos = append(infos, SessionInfo{Name: name, Handle: s.handle, Nonce: s.nonce})
		}
	}
	e.mu.Unlock()
	e.cfg.Persist(infos)
}

// Reattach re-attaches, after a daemon restart, to the shells of sessions
// a previous daemon recorded through Config.Persist. running names the
// sessions in which an action was in flight when that daemon stopped:
// their command is taken to be running still (Resume answers it). A
// session whose shell cannot be re-attached to is marked lost.
func (e *Executor) Reattach(ctx context.Context, infos []SessionInfo, running map[string]bool) {
	r, ok := e.sb.(backends.Reattacher)
	for _, info := range infos {
		if !ok || info.Handle == "" || info.Nonce == "" {
			e.MarkLost([]string{info.Name})
			continue
		}
		s := e.emptySession(info.Name, info.Nonce)
		s.handle = info.Handle
		s.running = running[info.Name]
		// A previous daemon typed it, with or without a start marker:
		// the shell has long read it.
		s.started = s.running
		p, err := r.Reattach(ctx, info.Handle, s)
		if err != nil {
			e.log.Info("bash session not re-attached", "session", info.Name, "err", err)
			e.MarkLost([]string{info.Name})
			continue
		}
		s.proc = p
		s.term, _ = p.(backends.Terminal)
		go s.watch()
		e.mu.Lock()
		e.sessions[info.Name] = s
		e.mu.Unlock()
	}
	e.persist()
}

// Resume waits for the command that was running in session name when the
// previous daemon stopped (see Reattach) and answers its observation, as
// the action that started it would have. ok is false if the session was
// not re-attached. If the shell turns out to be idle at its prompt with no
// marker seen (the previous daemon read the marker but died before
// recording it), the observation says the exit code is unknown.
func (e *Executor) Resume(ctx context.Context, name, kind string, out executors.OutputSink) (obs api.Observation, ok bool) {
	s, _ := e.existing(name)
	if s == nil {
		return api.Observation{}, false
	}
	tick := time.NewTicker(resumeCheck)
	defer tick.Stop()
	s.mu.Lock()
	s.cmdSink = out
	for s.running && !s.ended {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		case <-tick.C:
			// Still running, unless the shell sits at its prompt: then
			// the command ended with a marker this daemon never saw.
			if w, ok := s.proc.(backends.InputWaiter); ok && w.WaitingForInput() {
				s.mu.Lock()
				if s.running && !s.ended {
					s.running = false
					s.unknownExit = true
				}
				s.mu.Unlock()
			}
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			break
		}
	}
	obs = s.observation(kind)
	s.cmdSink = nil
	if s.unknownExit && !obs.Running {
		obs.ExitCode = nil
		obs.Note = executors.JoinNotes(obs.Note, "the command ended while the daemon restarted; its exit code is unknown")
		s.unknownExit = false
	}
	s.mu.Unlock()
	return obs, true
}

// resumeCheck is how often Resume looks whether a re-attached shell went
// idle without a marker.
const resumeCheck = 500 * time.Millisecond

// Detach lets go of the sessions when the daemon stops: shells that a
// later daemon can re-attach to keep running (the backend's Close lets go
// of their terminals); the others are killed.
func (e *Executor) Detach(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	ss := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		if s.handle == "" {
			ss = append(ss, s)
		}
	}
	e.sessions = map[string]*session{}
	e.mu.Unlock()
	var errs error
	for _, s := range ss {
		errs = errors.Join(errs, s.kill(ctx))
	}
	return errs
}

// Cwd returns the working directory session name's shell reported after
// its last command, if the session exists and has run one.
func (e *Executor) Cwd(name string) (string, bool) {
	s, ended := e.existing(name)
	if s == nil || ended {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd, s.cwd != ""
}

// Sessions lists the names of the live sessions.
func (e *Executor) Sessions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.sessions))
	for n := range e.sessions {
		names = append(names, n)
	}
	return names
}

// Close kills every session.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	ss := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		ss = append(ss, s)
	}
	e.sessions = map[string]*session{}
	e.mu.Unlock()
	var errs error
	for _, s := range ss {
		errs = errors.Join(errs, s.kill(ctx))
	}
	return errs
}

// Execute implements executors.Executor for run and interrupt actions.
func (e *Executor) Execute(ctx context.Context, a *api.Action, out executors.OutputSink) (api.Observation, error) {
	switch a.Kind {
	case api.KindRun:
		return e.run(ctx, a, out)
	case api.KindInterrupt:
		return e.interrupt(ctx, a, out)
	}
	return api.Observation{}, api.Errorf(api.ErrUnsupported, "the bash executor does not run %q actions", a.Kind)
}

func (e *Executor) timeout(a *api.Action, def time.Duration) time.Duration {
	return time.Duration(a.Timeout(def.Seconds(), e.cfg.MaxTimeout.Seconds()) * float64(time.Second))
}

func (e *Executor) run(ctx context.Context, a *api.Action, out executors.OutputSink) (api.Observation, error) {
	name := a.SessionName()
	newCommand := a.Command != "" && !a.Input
	var note string
	s, ended := e.existing(name)
	switch {
	case s == nil && !newCommand:
		// Nothing ran here yet: nothing to wait for or type into.
		if a.Input {
			return api.Observation{}, api.Errorf(api.ErrConflict, "no command is running in session %q to type into", name)
		}
		return api.Observation{Kind: a.Kind, Session: name, ExitCode: nil, Note: e.takeLostNote(name)}, nil
	case s != nil && ended && newCommand:
		note = fmt.Sprintf("the shell of session %q had exited (exit code %d); this command runs in a fresh shell", name, s.endCode)
		e.drop(name, s)
		s = nil
	}
	if s == nil {
		var err error
		var startNote string
		s, startNote, err = e.start(ctx, name)
		if err != nil {
			return api.Observation{}, err
		}
		note = executors.JoinNotes(note, startNote)
	}
	obs, err := s.do(ctx, a, out, e.timeout(a, e.cfg.DefaultTimeout))
	if err != nil {
		return obs, err
	}
	if obs.SessionEnded {
		e.drop(name, s)
	}
	obs.Note = executors.JoinNotes(note, obs.Note)
	return obs, nil
}

func (e *Executor) interrupt(ctx context.Context, a *api.Action, out executors.OutputSink) (api.Observation, error) {
	name := a.SessionName()
	s, _ := e.existing(name)
	if s == nil {
		return api.Observation{Kind: a.Kind, Session: name, Note: "no command was running: session " + name + " has not been started"}, nil
	}
	obs, err := s.interrupt(ctx, a, out, e.timeout(a, e.cfg.InterruptWait))
	if err == nil && obs.SessionEnded {
		e.drop(name, s)
	}
	return obs, err
}

// existing returns the session called name, if any, and whether its shell
// has ended.
func (e *Executor) existing(name string) (*session, bool) {
	e.mu.Lock()
	s := e.sessions[name]
	e.mu.Unlock()
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s, s.ended
}

func (e *Executor) drop(name string, s *session) {
	e.mu.Lock()
	dropped := e.sessions[name] == s
	if dropped {
		delete(e.sessions, name)
	}
	e.mu.Unlock()
	if dropped && s.handle != "" {
		e.persist()
	}
}

func (e *Executor) takeLostNote(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.lost[name] {
		return ""
	}
	delete(e.lost, name)
	return fmt.Sprintf("the daemon restarted since session %q was last used: its shell, cwd, variables and running commands are gone; this is a fresh shell", name)
}

// start returns the session called name, starting its shell if no one else
// is. Concurrent starts of one name share one shell.
func (e *Executor) start(ctx context.Context, name string) (*session, string, error) {
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, "", api.Errorf(api.ErrUnavailable, "the sandbox is shutting down")
		}
		if s := e.sessions[name]; s != nil {
			e.mu.Unlock()
			return s, "", nil
		}
		wait, busy := e.starting[name]
		if !busy {
			done := make(chan struct{})
			e.starting[name] = done
			e.mu.Unlock()
			s, err := e.newSession(ctx, name)
			e.mu.Lock()
			delete(e.starting, name)
			close(done)
			if err == nil {
				if e.closed {
					e.mu.Unlock()
					s.kill(context.Background())
					return nil, "", api.Errorf(api.ErrUnavailable, "the sandbox is shutting down")
				}
				e.sessions[name] = s
			}
			e.mu.Unlock()
			if err != nil {
				return nil, "", err
			}
			if s.handle != "" {
				e.persist()
			}
			return s, e.takeLostNote(name), nil
		}
		e.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

func newNonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// initScript sets up a fresh shell: no prompts, no history, and the marker
// function __sbx_p, run by PROMPT_COMMAND and after every command. It
// prints a marker only when a command asked for one (__sbx_m), measuring
// the cwd in bytes (LC_ALL=C), and never fails, even under set -e or -u.
// It also clears the prompts every time, since scripts such as a venv's
// activate set PS1, and a prompt is noise in an agent's output.
func initScript(nonce string) string {
	return `__sbx_p(){ local e=$? LC_ALL=C; PS1= PS2= PS0=; [ -n "${__sbx_m-}" ] || return 0; __sbx_m=; printf '\033]697;%s;%d;%d;%s\007' "$__sbx_n" "$e" "${#PWD}" "$PWD"; return 0; };` +
		` __sbx_n=` + nonce + `; PS1=; PS2=; PROMPT_COMMAND=__sbx_p; unset HISTFILE; set +o history; __sbx_m=1` + "\n"
}

// emptySession returns a session without a shell yet.
func (e *Executor) emptySession(name, nonce string) *session {
	return &session{
		name:    name,
		log:     e.log,
		changed: make(chan struct{}),
		out:     &executors.Capture{Limit: e.cfg.MaxOutputChars / 2, Runes: true},
		idle:    &executors.Capture{Limit: e.cfg.MaxOutputChars / 2, Runes: true},
		nonce:   nonce,
		parser:  newMarkerParser(nonce),
	}
}

func (e *Executor) newSession(ctx context.Context, name string) (*session, error) {
	nonce := newNonce()
	s := e.emptySession(name, nonce)
	s.starting = true
	p, err := e.sb.Start(ctx, backends.ProcessSpec{Argv: e.cfg.Shell, TTY: true, Stdout: s})
	if err != nil {
		return nil, fmt.Errorf("start bash for session %q: %w", name, err)
	}
	s.proc = p
	s.term, _ = p.(backends.Terminal)
	if h, ok := p.(backends.Handled); ok {
		s.handle = h.Handle()
	}
	go s.watch()
	if _, err := p.Stdin().Write([]byte(initScript(nonce))); err != nil {
		s.kill(context.Background())
		return nil, fmt.Errorf("start bash for session %q: %w", name, err)
	}
	timer := time.NewTimer(e.cfg.StartTimeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ready, ended, ch := !s.starting, s.ended, s.changed
		s.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("bash for session %q exited at start (exit code %d)", name, s.endCode)
		}
		if ready {
			return s, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			s.kill(context.Background())
			return nil, api.Errorf(api.ErrUnavailable, "bash for session %q was not ready within %v", name, e.cfg.StartTimeout)
		case <-ctx.Done():
			s.kill(context.Background())
			return nil, ctx.Err()
		}
	}
}

// session is one bash on a terminal.
type session struct {
	name   string
	log    *slog.Logger
	proc   backends.Process
	term   backends.Terminal // nil if the backend gives no terminal control
	parser *markerParser
	nonce  string
	handle string // the backend's handle for re-attaching, "" if none

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when a command completes or the shell ends
	starting bool          // no marker yet: output is the shell's start-up noise
	running  bool          // a command is in flight
	started  bool          // the shell has begun it: all its typed text is read
	gen      int64         // counts commands, so a stale hard timer does nothing
	waiters  int           // actions waiting on this session
	cmdSink  executors.OutputSink
	live     executors.OutputSink
	out      *executors.Capture // output of the running (or last) command not yet returned
	idle     *executors.Capture // output that arrived while no command ran
	exitCode int
	cwd      string
	timedOut bool
	ended    bool
	endCode  int
	hard     *time.Timer

	unknownExit bool // the command ended unseen (see Executor.Resume)
}

// Write receives the terminal's output (the backend calls it from one
// goroutine).
func (s *session) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parser.Feed(p, s.text, s.marker, s.begin)
	return len(p), nil
}

// text handles output; s.mu is held.
func (s *session) text(p []byte) {
	if s.starting {
		return
	}
	// Output after a command's marker (background jobs) is not that
	// command's answer; a later empty run collects it.
	if s.running {
		s.out.Write(p)
	} else {
		s.idle.Write(p)
	}
	if s.cmdSink != nil {
		s.cmdSink.Record(api.StreamPTY, p)
	}
	if s.live != nil {
		s.live.Live(api.StreamPTY, p)
	}
}

// begin handles a start marker: the shell has read the whole command and
// runs it; s.mu is held.
func (s *session) begin() {
	if s.running && !s.started {
		s.started = true
		s.notify()
	}
}

// marker handles a completed command; s.mu is held.
func (s *session) marker(code int, cwd string) {
	s.exitCode, s.cwd = code, cwd
	s.starting = false
	s.running = false
	if s.hard != nil {
		s.hard.Stop()
		s.hard = nil
	}
	s.notify()
}

func (s *session) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch waits for the shell to exit.
func (s *session) watch() {
	st, err := s.proc.Wait(context.Background())
	// Jobs of the shell that still run would hold its terminal; a shell
	// that is gone takes its jobs with it.
	_ = s.proc.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended, s.running = true, false
	s.endCode = st.Code
	if err != nil {
		s.endCode = -1
	}
	if s.hard != nil {
		s.hard.Stop()
	}
	s.notify()
}

// kill ends the shell and everything it started.
func (s *session) kill(ctx context.Context) error {
	if s.proc == nil {
		return nil
	}
	err := s.proc.Kill()
	if _, werr := s.proc.Wait(ctx); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// do runs one run action on the session.
func (s *session) do(ctx context.Context, a *api.Action, out executors.OutputSink, timeout time.Duration) (api.Observation, error) {
	s.mu.Lock()
	switch {
	case a.Input:
		if !s.running {
			s.mu.Unlock()
			return api.Observation{}, api.Errorf(api.ErrConflict, "no command is running in session %q to type into", s.name)
		}
		if _, err := s.proc.Stdin().Write([]byte(a.Command)); err != nil {
			s.mu.Unlock()
			return api.Observation{}, fmt.Errorf("type into session %q: %w", s.name, err)
		}
	case a.Command == "":
		// Wait for the running command, or collect what is left.
		if !s.running {
			return s.collect(a.Kind), nil
		}
	default:
		if s.running {
			s.mu.Unlock()
			return api.Observation{}, api.Errorf(api.ErrConflict, "a command is still running in session %q; wait for it with an empty command, type into it with input, stop it with an interrupt action, or use another session", s.name)
		}
		if s.term != nil {
			// A program may have turned echo back on; keep the output
			// the program's own.
			_ = s.term.Quiet()
		}
		s.out.Reset()
		s.idle.Reset()
		s.running, s.timedOut, s.started = true, false, false
		s.gen++
		s.cmdSink = out
		if hard := a.HardTimeoutS; hard > 0 {
			gen := s.gen
			d := time.Duration(min(hard, maxTimeout.Seconds()) * float64(time.Second))
			s.hard = time.AfterFunc(d, func() { s.hardTimeout(gen) })
		}
		if _, err := s.proc.Stdin().Write(typeCommand(a.Command)); err != nil {
			s.running = false
			s.mu.Unlock()
			return api.Observation{}, fmt.Errorf("send command to session %q: %w", s.name, err)
		}
	}
	return s.await(ctx, a.Kind, out, timeout)
}

// await waits, with s.mu held on entry, until the command completes, the
// shell ends, or timeout passes; then answers what is new.
func (s *session) await(ctx context.Context, kind string, out executors.OutputSink, timeout time.Duration) (api.Observation, error) {
	s.waiters++
	prevLive := s.live
	s.live = out
	s.waitUntil(ctx, timeout, func() bool { return !s.running || s.ended })
	s.waiters--
	if s.live == out {
		s.live = prevLive
		if s.waiters == 0 {
			s.live = nil
		}
	}
	obs := s.observation(kind)
	s.mu.Unlock()
	return obs, nil
}

// collect answers an empty run on an idle session: the output not yet
// returned, including what arrived since the last command ended; s.mu is
// held on entry and released.
func (s *session) collect(kind string) api.Observation {
	defer s.mu.Unlock()
	obs := s.observation(kind)
	if s.idle.Total() > 0 {
		obs.Output += s.idle.String()
		obs.Truncated = obs.Truncated || s.idle.Truncated()
		s.idle.Reset()
	}
	return obs
}

// observation answers the session's state and the output not yet returned;
// s.mu is held.
func (s *session) observation(kind string) api.Observation {
	obs := api.Observation{
		Kind:      kind,
		Output:    s.out.String(),
		Truncated: s.out.Truncated(),
		Running:   s.running && !s.ended,
		TimedOut:  s.timedOut,
		Cwd:       s.cwd,
		Session:   s.name,
	}
	s.out.Reset()
	switch {
	case s.ended:
		obs.ExitCode = api.ExitCode(s.endCode)
		obs.SessionEnded = true
		obs.Note = fmt.Sprintf("the shell exited (exit code %d); the next command starts a fresh session", s.endCode)
	case s.running:
		obs.Note = "the command is still running: send a run action with an empty command to wait for it, input: true to type into it, or an interrupt action to stop it"
	default:
		obs.ExitCode = api.ExitCode(s.exitCode)
	}
	return obs
}

// interrupt sends Ctrl-C to the running command and waits for it to stop.
func (s *session) interrupt(ctx context.Context, a *api.Action, out executors.OutputSink, timeout time.Duration) (api.Observation, error) {
	s.mu.Lock()
	if !s.running || s.ended {
		obs := s.observation(a.Kind)
		if !obs.SessionEnded {
			obs.Note = "no command was running"
		}
		s.mu.Unlock()
		return obs, nil
	}
	// A ^C also makes the terminal discard the input the shell has not
	// read yet. Before the shell has begun the command, that is the rest
	// of the command's typed lines, marker request included: the command
	// would then neither run nor end, and the session would wait for it
	// forever. So the ^C waits for the command's start marker.
	begun := time.Now()
	if !s.awaitStart(ctx, timeout) {
		// It ended by itself meanwhile, or has not begun in time.
		obs := s.observation(a.Kind)
		if obs.Running {
			obs.Note = "the command has not started yet, so it was not interrupted; interrupt it again, or wait for it with a run action with an empty command"
		}
		s.mu.Unlock()
		return obs, nil
	}
	if _, err := s.proc.Stdin().Write([]byte{0x03}); err != nil {
		s.mu.Unlock()
		return api.Observation{}, fmt.Errorf("interrupt session %q: %w", s.name, err)
	}
	return s.await(ctx, a.Kind, out, timeout-time.Since(begun))
}

// awaitStart waits, with s.mu held on entry and return, until the running
// command has begun or is over, or timeout passes, and reports whether it
// has begun and still runs.
func (s *session) awaitStart(ctx context.Context, timeout time.Duration) bool {
	s.waitUntil(ctx, timeout, func() bool { return !s.running || s.ended || s.started })
	return s.running && !s.ended && s.started
}

// waitUntil waits, with s.mu held on entry and return, until done holds
// (looked at again each time s.changed is closed), timeout passes or ctx
// ends.
func (s *session) waitUntil(ctx context.Context, timeout time.Duration, done func() bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for !done() {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		s.mu.Lock()
		return
	}
}

// hardTimeout kills the foreground job of command gen if it still runs.
func (s *session) hardTimeout(gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || s.gen != gen || s.ended {
		return
	}
	s.timedOut = true
	// SIGINT to the shell makes it abandon the rest of the command line
	// once the foreground job dies; SIGKILL makes sure that job dies.
	_ = s.proc.Signal(syscall.SIGINT)
	if s.term != nil {
		if _, err := s.term.SignalForeground(syscall.SIGKILL); err != nil {
			s.log.Warn("hard timeout: kill foreground job", "session", s.name, "err", err)
		}
	} else {
		_, _ = s.proc.Stdin().Write([]byte{0x03})
	}
}

// maxTimeout bounds every timer a session sets, whatever it is asked for:
// time.Duration overflows (to a negative, immediate, timer) near 292 years.
const maxTimeout = 7 * 24 * time.Hour

// lineMax bounds one typed line; the terminal's canonical line buffer holds
// 4095 bytes.
const lineMax = 3000

// typeCommand renders command as terminal input: printable lines that
// assign it to __sbx_c piece by piece, then run it at the top level and
// print the marker.
func typeCommand(command string) []byte {
	out := make([]byte, 0, len(command)+64)
	out = append(out, "__sbx_c="...)
	lineStart := 0
	open := func() { out = append(out, "$'"...) }
	open()
	for i := 0; i < len(command); i++ {
		c := command[i]
		if len(out)-lineStart > lineMax {
			out = append(out, "'\n__sbx_c+="...)
			lineStart = len(out) - len("__sbx_c+=")
			open()
		}
		switch {
		case c == '\'' || c == '\\':
			out = append(out, '\\', c)
		case c >= 0x20 && c < 0x7f, c >= 0x80:
			out = append(out, c)
		default:
			const hexdig = "0123456789abcdef"
			out = append(out, '\\', 'x', hexdig[c>>4], hexdig[c&15])
		}
	}
	// The start marker says the shell has read all of the above.
	out = append(out, "'\n__sbx_m=1; printf '\\033]697;%s;S\\007' \"$__sbx_n\"; eval \"$__sbx_c\"; __sbx_p\n"...)
	return out
}
