// Package exec executes exec actions: one process from an argv, no shell and
// no state, with separate stdout and stderr, optional stdin, and a hard
// timeout that kills the process and everything it started.
package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
	"golang.org/x/sys/unix"
)

// Config configures exec actions.
type Config struct {
	// DefaultTimeout applies to actions without timeout_s; MaxTimeout caps
	// every timeout.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// MaxStreamBytes caps each of stdout and stderr in an observation
	// (first and last half).
	MaxStreamBytes int
}

// DefaultConfig returns the defaults of the API.
func DefaultConfig() Config {
	return Config{DefaultTimeout: 60 * time.Second, MaxTimeout: 24 * time.Hour, MaxStreamBytes: 1 << 20}
}

// Executor runs exec actions in one sandbox.
type Executor struct {
	sb  backends.Sandbox
	cfg Config
}

// New returns the exec executor of sb.
func New(sb backends.Sandbox, cfg Config) *Executor { return &Executor{sb: sb, cfg: cfg} }

// Close implements executors.Executor; exec keeps nothing running.
func (e *Executor) Close(context.Context) error { return nil }

// stream captures one output stream of the process.
type stream struct {
	name string
	cap  executors.Capture
	out  executors.OutputSink
}

func (s *stream) Write(p []byte) (int, error) {
	s.cap.Write(p)
	s.out.Record(s.name, p)
	s.out.Live(s.name, p)
	return len(p), nil
}

// Execute implements executors.Executor.
func (e *Executor) Execute(ctx context.Context, a *api.Action, out executors.OutputSink) (api.Observation, error) {
	if a.Kind != api.KindExec {
		return api.Observation{}, api.Errorf(api.ErrUnsupported, "the exec executor does not run %q actions", a.Kind)
	}
	timeout := time.Duration(a.Timeout(e.cfg.DefaultTimeout.Seconds(), e.cfg.MaxTimeout.Seconds()) * float64(time.Second))
	half := e.cfg.MaxStreamBytes / 2
	stdout := &stream{name: api.StreamStdout, cap: executors.Capture{Limit: half}, out: out}
	stderr := &stream{name: api.StreamStderr, cap: executors.Capture{Limit: half}, out: out}
	spec := backends.ProcessSpec{Argv: a.Argv, Env: a.Env, Dir: a.Cwd, Stdout: stdout, Stderr: stderr}
	if a.Stdin != "" {
		spec.Stdin = strings.NewReader(a.Stdin)
	}
	obs := api.Observation{Kind: a.Kind}
	start := time.Now()
	p, err := e.sb.Start(ctx, spec)
	if err != nil {
		// A program that is not there or not executable did not run, but
		// an agent reads that best the way a shell reports it.
		code := 0
		switch {
		case errors.Is(err, api.ErrNotFound):
			code = 127
		case errors.Is(err, api.ErrPermissionDenied):
			code = 126
		default:
			return api.Observation{}, err
		}
		msg := fmt.Sprintf("sandboxd: exec %s: %v\n", a.Argv[0], err)
		out.Record(api.StreamStderr, []byte(msg))
		out.Live(api.StreamStderr, []byte(msg))
		obs.ExitCode, obs.Stderr = api.ExitCode(code), msg
		obs.DurationMS = time.Since(start).Milliseconds()
		return obs, nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	st, werr := p.Wait(wctx)
	cancel()
	if werr != nil {
		// Timed out, or the daemon is stopping: kill the whole tree, then
		// collect its status and the rest of its output.
		obs.TimedOut = ctx.Err() == nil
		if ctx.Err() != nil {
			obs.Note = "stopped because the daemon or the sandbox is shutting down"
		}
		if err := p.Kill(); err != nil {
			obs.Note = executors.JoinNotes(obs.Note, "killing the process tree: "+err.Error())
		}
		reap, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, werr = p.Wait(reap)
		cancel()
		if werr != nil {
			return api.Observation{}, fmt.Errorf("process did not exit after SIGKILL: %w", werr)
		}
	}
	obs.DurationMS = time.Since(start).Milliseconds()
	obs.ExitCode = api.ExitCode(st.Code)
	if st.Signal != 0 {
		obs.Signal = unix.SignalName(st.Signal)
	}
	obs.OOMKilled = st.OOMKilled
	obs.Stdout, obs.Stderr = stdout.cap.String(), stderr.cap.String()
	obs.Truncated = stdout.cap.Truncated() || stderr.cap.Truncated()
	return obs, nil
}
