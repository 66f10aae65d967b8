// Package sbinit holds the small helper programs the containerd backend
// needs, built into the sandboxd binary itself so that nothing extra has to
// be installed: the container's init (PID 1: reaps orphans, exits on
// SIGTERM) and the exec wrapper (makes every started process a child
// subreaper, so that the daemon can find and kill everything it started,
// double forks included).
//
// It imports only the standard library and x/sys: the helpers start in a
// millisecond and must run inside any image when the binary is static.
package sbinit

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg is the first argument that selects a helper mode:
// `sandboxd __sandboxd-helper MODE ARGS...`.
const Arg = "__sandboxd-helper"

// Modes.
const (
	ModeInit = "init"
	ModeExec = "exec"
)

// ExitNotFound and ExitNotExecutable are the exec wrapper's exit codes when
// the program cannot be run, as a shell reports them.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// Main runs a helper and exits if args (os.Args) select one; otherwise it
// returns. Programs that may be a helper call it first thing in main (and
// in TestMain).
func Main(args []string) {
	if len(args) < 3 || args[1] != Arg {
		return
	}
	var code int
	switch args[2] {
	case ModeInit:
		code = initMain()
	case ModeExec:
		code = execMain(args[3:])
	default:
		fmt.Fprintf(os.Stderr, "sandboxd helper: unknown mode %q\n", args[2])
		code = 2
	}
	os.Exit(code)
}

// initMain is PID 1 of a container: it reaps every child the kernel hands
// it and exits on SIGTERM or SIGINT (PID 1 gets no signal it has no handler
// for; SIGKILL from outside the container always works).
func initMain() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		if s := <-sigs; s != syscall.SIGCHLD {
			return 0
		}
	}
}

// execMain makes itself a child subreaper and replaces itself with the
// program: orphans of the program's tree are re-parented to the program,
// not to init, so the tree stays one tree the daemon can walk. The
// attribute survives execve.
func execMain(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "sandboxd exec: no program")
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd exec: subreaper:", err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: command not found\n", argv[0])
		return ExitNotFound
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: %v\n", argv[0], err)
	if err == syscall.ENOENT {
		return ExitNotFound
	}
	return ExitNotExecutable
}
