package wasm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/backendtest"
)

// conformanceGuestSrc is the one module behind the Programs of the
// conformance suite: its first argument names the program.
const conformanceGuestSrc = `package main

import (
	"io"
	"os"
	"strconv"
	"time"
)

func fail(msg string) {
	os.Stderr.WriteString("conformance guest: " + msg + "\n")
	os.Exit(1)
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func main() {
	if len(os.Args) < 2 {
		fail("no mode")
	}
	mode, args := os.Args[1], os.Args[2:]
	want := map[string]int{"echo": 1, "echoerrexit": 3, "cat": 1, "append": 2, "sleepecho": 2, "forever": 0, "symlink": 2}
	if n, ok := want[mode]; !ok {
		fail("unknown mode " + mode)
	} else if len(args) != n {
		fail(mode + " takes " + strconv.Itoa(n) + " arguments")
	}
	switch mode {
	case "echo":
		os.Stdout.WriteString(args[0] + "\n")
	case "echoerrexit":
		code, err := strconv.Atoi(args[2])
		check(err)
		os.Stdout.WriteString(args[0] + "\n")
		os.Stderr.WriteString(args[1] + "\n")
		os.Exit(code)
	case "cat":
		f, err := os.Open(args[0])
		check(err)
		_, err = io.Copy(os.Stdout, f)
		check(err)
	case "append":
		f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		check(err)
		_, err = f.WriteString(args[1])
		check(err)
		check(f.Close())
	case "sleepecho":
		d, err := time.ParseDuration(args[0])
		check(err)
		time.Sleep(d)
		os.Stdout.WriteString(args[1] + "\n")
	case "forever":
		// One long sleep: a kill must end it, not wait it out.
		time.Sleep(24 * time.Hour)
	case "symlink":
		check(os.Symlink(args[0], args[1]))
	}
}
`

// conformanceModule is where the guest is in every sandbox of the suite.
const conformanceModule = Guest + "/conformance.wasm"

// guestBackend puts the conformance guest into every sandbox it makes: the
// suite creates its sandboxes itself, and a wasm sandbox runs only what its
// workspace holds.
type guestBackend struct {
	backends.Backend
	code []byte
}

func (b *guestBackend) Create(ctx context.Context, spec backends.Spec) (backends.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := b.install(sb); err != nil {
		_ = sb.Destroy(ctx)
		return nil, err
	}
	return sb, nil
}

func (b *guestBackend) Recover(ctx context.Context, specs []backends.Spec) []backends.Recovered {
	rs := b.Backend.Recover(ctx, specs)
	for i, r := range rs {
		if r.Err == nil && r.Sandbox != nil {
			if err := b.install(r.Sandbox); err != nil {
				rs[i].Err = err
			}
		}
	}
	return rs
}

func (b *guestBackend) install(sb backends.Sandbox) error {
	fsys := sb.FS()
	rel, err := fsys.Rel(conformanceModule)
	if err != nil {
		return err
	}
	root, err := fsys.Root()
	if err != nil {
		return err
	}
	defer root.Close()
	return root.WriteFile(rel, b.code, 0o644)
}

func TestConformance(t *testing.T) {
	code := buildGuest(t, "conformance-guest", conformanceGuestSrc)
	// Every backend of the run shares the workspaces, as a daemon restarted
	// with the same configuration would (CloseThenRecoverOnNewBackend). The
	// compile cache outlives the run: each subtest makes new backends, and
	// compiling the guest takes seconds (over ten under -race).
	cfg := Config{
		WorkspaceRoot: filepath.Join(t.TempDir(), "ws"),
		CacheDir:      filepath.Join(os.TempDir(), "sandboxd-conformance-wazero-cache"),
	}
	run := func(args ...string) []string { return append([]string{conformanceModule}, args...) }
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		return &guestBackend{Backend: newBackend(t, cfg), code: code}
	}, backendtest.Options{
		Network: api.NetworkNone,
		// Enough for the guest, a Go program, 20 at once; CPUs and DiskMB
		// stay 0, which the wasm backend cannot enforce and refuses.
		Limits:  api.Limits{MemoryMB: 64, Pids: 64},
		NoShell: true,
		NoTTY:   true,
		Programs: &backendtest.Programs{
			Echo: func(text string) []string { return run("echo", text) },
			EchoErrExit: func(out, err string, code int) []string {
				return run("echoerrexit", out, err, strconv.Itoa(code))
			},
			Cat:       func(path string) []string { return run("cat", path) },
			Append:    func(path, text string) []string { return run("append", path, text) },
			SleepEcho: func(d time.Duration, text string) []string { return run("sleepecho", d.String(), text) },
			Forever:   func() []string { return run("forever") },
			Symlink:   func(target, link string) []string { return run("symlink", target, link) },
		},
	})
}
