package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/daemon"
)

// withClient parses the connection flags shared by all client commands and
// runs f with a client and the remaining arguments.
func withClient(ctx context.Context, args []string, stderr io.Writer, f func(*client.Client, []string) error) error {
	addr, token, tokenFile := os.Getenv("SANDBOXD_ADDR"), os.Getenv("SANDBOXD_TOKEN"), ""
	// The connection flags may come first: sandboxd run --addr X SANDBOX ...
	for len(args) > 0 {
		name, val, ok := connFlag(args)
		if !ok {
			break
		}
		switch name {
		case "addr":
			addr = val
		case "token":
			token = val
		case "token-file":
			tokenFile = val
		}
		if strings.Contains(args[0], "=") {
			args = args[1:]
		} else {
			args = args[2:]
		}
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(b))
	}
	if addr == "" {
		addr = defaultAddr()
	}
	if token == "" && !strings.HasPrefix(addr, "unix://") {
		if b, err := os.ReadFile(filepath.Join(daemon.DefaultConfig().StateDir, "token")); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	c, err := client.New(addr, client.WithToken(token))
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c, args)
}

// connFlag recognises --addr, --token and --token-file at args[0].
func connFlag(args []string) (name, val string, ok bool) {
	a := strings.TrimLeft(args[0], "-")
	if !strings.HasPrefix(args[0], "-") {
		return "", "", false
	}
	name, val, hasVal := strings.Cut(a, "=")
	switch name {
	case "addr", "token", "token-file":
	default:
		return "", "", false
	}
	if !hasVal {
		if len(args) < 2 {
			return "", "", false
		}
		val = args[1]
	}
	return name, val, true
}

// defaultAddr is the local socket when a daemon answers on it, else the
// default TCP address.
func defaultAddr() string {
	if s := daemon.DefaultSocket(); s != "" {
		if c, err := net.DialTimeout("unix", s, time.Second); err == nil {
			c.Close()
			return "unix://" + s
		}
	}
	return "http://127.0.0.1:7070"
}

// kvFlag is a repeatable K=V flag.
type kvFlag map[string]string

func (m kvFlag) String() string { return "" }
func (m kvFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	m[k] = val
	return nil
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

func create(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("create")
	backend := fs.String("backend", "", "process, containerd or wasm (default process)")
	image := fs.String("image", "", "image (containerd)")
	network := fs.String("network", "", "none or host")
	workdir := fs.String("workdir", "", "working directory inside a container (default /workspace)")
	env, labels := kvFlag{}, kvFlag{}
	fs.Var(env, "env", "environment variable `K=V`; repeatable")
	fs.Var(labels, "label", "label `K=V`; repeatable")
	memory := fs.Int64("memory", 0, "memory limit in MB")
	pids := fs.Int64("pids", 0, "process limit")
	cpus := fs.Float64("cpus", 0, "CPU limit")
	idle := fs.Duration("idle-timeout", 0, "destroy after this long without actions")
	asJSON := fs.Bool("json", false, "print the sandbox as JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	req := api.CreateSandboxRequest{Backend: *backend, Image: *image, Network: *network, Workdir: *workdir, Env: env, Labels: labels}
	if *memory > 0 || *pids > 0 || *cpus > 0 {
		req.Limits = &api.Limits{MemoryMB: *memory, Pids: *pids, CPUs: *cpus}
	}
	if *idle > 0 {
		req.IdleTimeoutS = api.Seconds(idle.Seconds())
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, sb)
	}
	fmt.Fprintln(stdout, sb.ID)
	return nil
}

// streamTo writes streamed output to the local terminal.
func streamTo(stdout, stderr io.Writer) func(client.Output) {
	return func(o client.Output) {
		if o.Stream == api.StreamStderr {
			stderr.Write(o.Data)
		} else {
			stdout.Write(o.Data)
		}
	}
}

func runCmd(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run")
	session := fs.String("session", "", "bash session (default \"default\")")
	timeout := fs.Float64("timeout", 0, "seconds to wait before returning while the command keeps running (default 30)")
	hard := fs.Float64("hard-timeout", 0, "seconds after which the command is killed")
	input := fs.Bool("input", false, "type the text into the running command instead")
	if len(args) < 1 {
		return errUsage
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return errUsage
	}
	a := &api.Action{Kind: api.KindRun, Command: strings.Join(fs.Args(), " "), Session: *session, HardTimeoutS: *hard, Input: *input}
	if *timeout > 0 {
		a.TimeoutS = api.Seconds(*timeout)
	}
	obs, err := c.ActStream(ctx, id, a, streamTo(stdout, stderr))
	if err != nil {
		return err
	}
	if obs.Note != "" {
		fmt.Fprintf(stderr, "sandboxd: %s\n", obs.Note)
	}
	if obs.ExitCode == nil {
		return exitError{124}
	}
	return exitError{*obs.ExitCode}
}

func execCmd(ctx context.Context, c *client.Client, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("exec")
	cwd := fs.String("cwd", "", "working directory")
	env := kvFlag{}
	fs.Var(env, "env", "environment variable `K=V`; repeatable")
	timeout := fs.Float64("timeout", 0, "seconds after which the process is killed (default 60)")
	withStdin := fs.Bool("stdin", false, "send this command's standard input to the process")
	if len(args) < 1 {
		return errUsage
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() == 0 {
		return errUsage
	}
	a := &api.Action{Kind: api.KindExec, Argv: fs.Args(), Cwd: *cwd, Env: env}
	if *timeout > 0 {
		a.TimeoutS = api.Seconds(*timeout)
	}
	if *withStdin {
		b, err := io.ReadAll(io.LimitReader(stdin, 8<<20))
		if err != nil {
			return err
		}
		a.Stdin = string(b)
	}
	obs, err := c.ActStream(ctx, id, a, streamTo(stdout, stderr))
	if err != nil {
		return err
	}
	if obs.TimedOut {
		fmt.Fprintln(stderr, "sandboxd: timed out")
	}
	if obs.Note != "" {
		fmt.Fprintf(stderr, "sandboxd: %s\n", obs.Note)
	}
	if obs.ExitCode == nil {
		return exitError{1}
	}
	return exitError{*obs.ExitCode}
}

func ps(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("ps")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	sbs, err := c.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, sbs)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tCREATED\tWORKDIR")
	for _, s := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.Backend, s.State, s.CreatedAt.Local().Format(time.DateTime), s.Workdir)
	}
	return tw.Flush()
}

func rm(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	var failed error
	for _, id := range args {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd rm: %s: %v\n", id, err)
			failed = exitError{1}
			continue
		}
		fmt.Fprintln(stdout, id)
	}
	return failed
}

func events(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("events")
	after := fs.Int64("after", 0, "print events after this seq")
	follow := fs.Bool("follow", false, "keep printing new events")
	if len(args) < 1 {
		return errUsage
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return c.Events(ctx, id, *after, *follow, func(ev api.Event) error { return enc.Encode(ev) })
}

func info(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	in, err := c.Info(ctx)
	if err != nil {
		return err
	}
	return printJSON(stdout, in)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
