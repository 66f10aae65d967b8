// Package backends defines where sandboxed code runs: the Backend and
// Sandbox interfaces every backend implements (process, containerd, wasm),
// documented as contracts that the conformance suite in backendtest checks.
//
// Executors (bash, exec, ...) only see these interfaces, so an action means
// the same thing on every backend; what differs is isolation.
package backends

import (
	"context"
	"io"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
)

// Spec describes a sandbox to create or re-adopt.
type Spec struct {
	// ID is the sandbox's id, unique on this daemon.
	ID string
	// Dir is a private directory the daemon keeps for this sandbox (never
	// visible inside it). A backend may store what it needs to re-adopt the
	// sandbox there.
	Dir string
	// Image names the root filesystem (containerd only).
	Image string
	// Env is added to the sandbox's sanitized base environment.
	Env map[string]string
	// Workdir is the working directory inside a container ("" = /workspace).
	Workdir string
	// Limits are the effective limits (defaults applied, clamped).
	Limits api.Limits
	// Network is api.NetworkNone or api.NetworkHost.
	Network string
}

// Backend creates sandboxes of one kind.
type Backend interface {
	// Name is the backend's API name ("process", "containerd", "wasm").
	Name() string
	// Available returns nil if the backend can create sandboxes on this host
	// now, or an error saying why not (shown in /v1/info). It is cheap and
	// may be called often.
	Available(ctx context.Context) error
	// Features lists what the backend enforces on this host (shown in
	// /v1/info), such as "cgroup-memory" or "user-isolation".
	Features() []string
	// Create makes a new sandbox. On error nothing of it is left behind.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Recover re-adopts the sandboxes of a previous daemon run, given their
	// specs. It returns one Recovered per spec; a sandbox that cannot be
	// re-adopted has Err set and leaves nothing running. The backend may
	// also clean up leftovers of its own that no spec names.
	Recover(ctx context.Context, specs []Spec) []Recovered
}

// KindLimiter is implemented by backends that can run only some action
// kinds (the wasm backend has no shell): Unsupported returns an error
// wrapping api.ErrUnsupported that says what the backend can do, or nil.
type KindLimiter interface {
	Unsupported(kind string) error
}

// ImageStore is implemented by backends whose sandboxes are made from
// images they keep (the containerd backend): the daemon's /v1/images
// endpoints use it, so the daemon needs no backend's own types. Images are
// named as api.ImageInfo.Name says; the built-in "host" image is always
// listed and can be neither imported, pulled nor removed. Errors wrap the
// api classes: api.ErrUnavailable when the backend's engine is down.
type ImageStore interface {
	// Images lists the images sandboxes can be created from, the built-in
	// ones first.
	Images(ctx context.Context) ([]api.ImageInfo, error)
	// ImportImage reads an image archive from r: a `docker save` tar or an
	// OCI image layout tar (gzip-compressed or not), as it arrives. Its
	// images are named as the archive names them; name, if not empty,
	// names the archive's one image (it is an error for an archive of
	// several). Every image is unpacked before ImportImage returns them.
	// An archive that is not an image is an error wrapping
	// api.ErrInvalidArgument; a read error of r is returned as it is.
	ImportImage(ctx context.Context, r io.Reader, name string) ([]api.ImageInfo, error)
	// PullImage fetches an image from its registry and unpacks it. A
	// registry that cannot be reached is an error wrapping
	// api.ErrUnavailable.
	PullImage(ctx context.Context, ref string) ([]api.ImageInfo, error)
	// RemoveImage deletes an image and, once nothing else uses them, its
	// content and unpacked layers, before it returns. An image a sandbox
	// still uses is api.ErrConflict; a missing one api.ErrNotFound.
	RemoveImage(ctx context.Context, name string) error
}

// Recovered is the outcome of re-adopting one sandbox.
type Recovered struct {
	ID      string
	Sandbox Sandbox
	// Note says what the re-adoption did not keep, for example that shells
	// and processes were gone; empty if the sandbox is as it was.
	Note string
	Err  error
}

// Sandbox is one isolated environment.
type Sandbox interface {
	// ID returns the id it was created with.
	ID() string
	// Workdir is the working directory as processes in the sandbox see it
	// (what pwd prints there).
	Workdir() string
	// Start starts a process in the sandbox. The sandbox's limits apply. A
	// program that cannot be found or executed is an error wrapping
	// api.ErrNotFound or api.ErrPermissionDenied; anything else that keeps
	// it from starting is an error too. A process that starts and then
	// fails is not.
	Start(ctx context.Context, p ProcessSpec) (Process, error)
	// FS gives confined access to the sandbox's files (see FS).
	FS() FS
	// Close lets go of the sandbox when the daemon stops: processes that
	// cannot outlive the daemon are stopped, files are kept, and Recover
	// can re-adopt it later.
	Close(ctx context.Context) error
	// Destroy kills everything in the sandbox and frees all it holds. It is
	// idempotent and must complete even if ctx is cancelled part way.
	Destroy(ctx context.Context) error
}

// ProcessSpec describes a process to start.
type ProcessSpec struct {
	// Argv is the program and its arguments. argv[0] without a slash is
	// looked up in the sandbox's PATH, not the daemon's.
	Argv []string
	// Env is added on top of the sandbox's environment.
	Env map[string]string
	// Dir is the working directory in sandbox terms; "" is the workdir.
	Dir string
	// TTY gives the process a terminal as its stdin, stdout and stderr, and
	// makes it the leader of a new session. Stderr is unused then; write to
	// the terminal with Process.Stdin.
	TTY bool
	// Stdin is copied to a non-TTY process's standard input, which is then
	// closed; nil means the process reads EOF at once.
	Stdin io.Reader
	// Stdout and Stderr receive the output. Writes must not block for long:
	// the process is never stalled on an unread pipe. They are called from
	// one goroutine per stream. nil discards.
	Stdout, Stderr io.Writer
}

// Process is a started process.
type Process interface {
	// Stdin writes to a TTY process's terminal; nil for other processes
	// (they get ProcessSpec.Stdin).
	Stdin() io.Writer
	// Wait waits until the process has exited and all its output has been
	// delivered to Stdout and Stderr, or ctx ends (then it returns ctx's
	// error and the process keeps running). It may be called many times.
	Wait(ctx context.Context) (ExitStatus, error)
	// Signal sends sig to the process itself.
	Signal(sig syscall.Signal) error
	// Kill kills the process and everything it started, including children
	// that left its process group or session, as far as the backend can
	// track them (a cgroup of its own where one can be made).
	Kill() error
}

// Terminal is implemented by TTY processes whose terminal the backend
// controls.
type Terminal interface {
	// SignalForeground sends sig to the terminal's foreground process group
	// when that group is not the started process's own; it reports whether
	// it sent anything.
	SignalForeground(sig syscall.Signal) (bool, error)
	// Quiet turns off echo and CR-LF translation on the terminal, so output
	// is the program's bytes only. Programs may turn them back on; callers
	// re-assert before each command.
	Quiet() error
}

// Reattacher is implemented by sandboxes whose terminal processes outlive
// the daemon (the containerd backend's: their shells keep running while
// the daemon restarts).
type Reattacher interface {
	// Reattach attaches to the terminal process that Handle named before
	// the daemon restarted; from now on its output goes to stdout (as
	// ProcessSpec.Stdout). A process that is gone is an error wrapping
	// api.ErrNotFound.
	Reattach(ctx context.Context, handle string, stdout io.Writer) (Process, error)
}

// Handled is implemented by processes a later daemon can re-attach to.
type Handled interface {
	// Handle names the process for Reattacher.Reattach; "" if it cannot
	// be re-attached to.
	Handle() string
}

// InputWaiter is implemented by terminal processes that can tell whether
// their program sits waiting for terminal input (a shell at its prompt),
// which is how a re-attached shell is known to be idle.
type InputWaiter interface {
	WaitingForInput() bool
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// Code is the exit code, or 128+N when killed by signal N.
	Code int
	// Signal is the signal that killed the process, 0 if none.
	Signal syscall.Signal
	// OOMKilled is set when the kernel's OOM killer killed it.
	OOMKilled bool
}

// AgentEnv is the environment every sandbox starts from, whatever its
// backend: what a non-interactive agent needs (no pagers, no colours, no
// prompts that wait for a human) and nothing of the daemon's own.
func AgentEnv() map[string]string {
	return map[string]string{
		"PATH":                          "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG":                          "C.UTF-8",
		"SHELL":                         "/bin/bash",
		"TERM":                          "dumb",
		"NO_COLOR":                      "1",
		"PAGER":                         "cat",
		"GIT_PAGER":                     "cat",
		"MANPAGER":                      "cat",
		"SYSTEMD_PAGER":                 "",
		"GIT_TERMINAL_PROMPT":           "0",
		"DEBIAN_FRONTEND":               "noninteractive",
		"PYTHONUNBUFFERED":              "1",
		"PIP_DISABLE_PIP_VERSION_CHECK": "1",
	}
}
