// Command sandboxd is the sandboxd daemon (`sandboxd serve`) and its
// command-line client (create, run, exec, ps, rm, events, cp, image, info).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
	"github.com/sandboxd/sandboxd/client"
)

const usage = `sandboxd — an execution runtime for AI agents.

Usage:
  sandboxd serve [--listen ADDR]... [--state-dir DIR] [--token-file FILE] [--config FILE]
  sandboxd create [--backend process|containerd|wasm] [--image host|IMAGE] [--network none|host] [--workdir DIR] [--env K=V]... [--label K=V]... [--memory MB] [--pids N] [--cpus N]
  sandboxd run SANDBOX [--session NAME] [--timeout SEC] [--hard-timeout SEC] COMMAND...
  sandboxd exec SANDBOX [--cwd DIR] [--env K=V]... [--timeout SEC] [--stdin] -- PROGRAM [ARG]...
  sandboxd edit SANDBOX view|create|str_replace|insert|undo_edit PATH [--old S] [--new S] [--text S] [--line N]
  sandboxd browse SANDBOX URL [--screenshot FILE] [--tree] [--json] [--timeout SEC]   (prints the page's text)
  sandboxd bench [--clients N] [--sandboxes M] [--duration D] [--backend B] [--mix run=4,exec=4,file=2] [--json]   (load: latency, throughput, errors, daemon before/after)
  sandboxd ps [--json]
  sandboxd rm SANDBOX...
  sandboxd events SANDBOX [--after SEQ] [--follow]
  sandboxd cp LOCAL SANDBOX:PATH | SANDBOX:PATH LOCAL   (a file, or a directory's contents; - is stdin/stdout)
  sandboxd image import FILE [--name NAME] [--quiet]   (a docker save or OCI layout tar, maybe gzipped; - is stdin)
  sandboxd image ls [--json]
  sandboxd image rm IMAGE...
  sandboxd image pull REF                              (needs a registry the daemon's host can reach)
  sandboxd info
  sandboxd status                                    (the systemd service and the daemon's backends)
  sandboxd config default                            (the commented default configuration)
  sandboxd install [--prefix /usr/local] [--enable]  (binary, units, default config; systemctl daemon-reload)
  sandboxd uninstall [--purge]                       (keeps config and state unless --purge)
  sandboxd version

Client commands reach the daemon at --addr (or $SANDBOXD_ADDR): unix:///PATH,
http://HOST:PORT or https://HOST:PORT. By default: the local socket if it
answers, else http://127.0.0.1:7070. Over TCP the token comes from --token,
$SANDBOXD_TOKEN, --token-file, or the daemon's state directory.
`

func main() {
	// The binary is also the containers' init and exec wrapper.
	sbinit.Main(os.Args)
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		err = serve(ctx, rest, stderr)
	case "create":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return create(ctx, c, args, stdout) })
	case "run":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return runCmd(ctx, c, args, stdout, stderr) })
	case "exec":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return execCmd(ctx, c, args, stdin, stdout, stderr) })
	case "edit":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return edit(ctx, c, args, stdout) })
	case "browse":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return browse(ctx, c, args, stdout, stderr) })
	case "bench":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return bench(ctx, c, args, stdout) })
	case "ps":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return ps(ctx, c, args, stdout) })
	case "rm":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return rm(ctx, c, args, stdout) })
	case "cp":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return cp(ctx, c, args, stdin, stdout) })
	case "image", "images":
		err = image(ctx, rest, stdin, stdout, stderr)
	case "events":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return events(ctx, c, args, stdout) })
	case "info":
		err = withClient(ctx, rest, stderr, func(c *client.Client, args []string) error { return info(ctx, c, args, stdout) })
	case "config":
		err = configCmd(rest, stdout)
	case "install":
		err = install(ctx, rest, stdout, stderr)
	case "uninstall":
		err = uninstall(ctx, rest, stdout, stderr)
	case "status":
		err = status(ctx, rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionString())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "sandboxd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "sandboxd %s: %v\n", cmd, err)
	return 1
}
