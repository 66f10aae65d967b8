package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/backends/containerd"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/daemon"
	"github.com/sandboxd/sandboxd/internal/atomicfile"
	"github.com/sandboxd/sandboxd/systemd"
)

// configCmd: `sandboxd config default` prints the commented default
// configuration.
func configCmd(args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] != "default" {
		return errUsage
	}
	_, err := fmt.Fprintf(stdout, "# sandboxd configuration (/etc/sandboxd/config.toml): the defaults.\n# Every key is optional; unknown keys are errors. See docs/config.md.\n\n%s", daemon.DefaultConfigTOML)
	return err
}

// layoutPaths are where install puts things, below root ("/" but in
// tests).
type layoutPaths struct {
	root, prefix string
}

func (l layoutPaths) p(path string) string { return filepath.Join(l.root, path) }
func (l layoutPaths) bin() string          { return filepath.Join(l.prefix, "bin", "sandboxd") }
func (l layoutPaths) helper() string {
	return filepath.Join(l.prefix, "bin", containerd.HelperName)
}

// installed lists what install puts in place (in the installed system's
// paths), and where each comes from.
func (l layoutPaths) files() []struct{ src, dst string } {
	return []struct{ src, dst string }{
		{"sandboxd.service", "/etc/systemd/system/sandboxd.service"},
		{"sandboxd.socket", "/etc/systemd/system/sandboxd.socket"},
		{"sandboxd.sysusers", "/etc/sysusers.d/sandboxd.conf"},
		{"sandboxd.tmpfiles", "/etc/tmpfiles.d/sandboxd.conf"},
	}
}

const configPath = "/etc/sandboxd/config.toml"

func installFlags(name string) (*flag.FlagSet, *string, *string) {
	flags := newFlags(name)
	prefix := flags.String("prefix", "/usr/local", "install the binary to `DIR`/bin")
	root := flags.String("root", "/", "install into the system rooted at `DIR` (for packaging and tests; systemctl is not run unless it is /)")
	return flags, prefix, root
}

// install puts the binary (and the small helper beside it, if there is
// one), the units, sysusers and tmpfiles snippets and a default config in
// place. It is idempotent and never overwrites an existing config.
func install(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags, prefix, root := installFlags("install")
	enable := flags.Bool("enable", false, "enable and start the socket and the service")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		return errUsage
	}
	l := layoutPaths{root: *root, prefix: *prefix}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyFile(self, l.p(l.bin()), 0o755); err != nil {
		return fmt.Errorf("install the binary: %w", err)
	}
	fmt.Fprintf(stdout, "installed %s\n", l.bin())
	if h := filepath.Join(filepath.Dir(self), containerd.HelperName); fileExists(h) {
		if err := copyFile(h, l.p(l.helper()), 0o755); err != nil {
			return fmt.Errorf("install the helper: %w", err)
		}
		fmt.Fprintf(stdout, "installed %s\n", l.helper())
	}
	for _, f := range l.files() {
		b, err := systemd.Files.ReadFile(f.src)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), systemd.BinaryPath, l.bin())
		if err := os.MkdirAll(filepath.Dir(l.p(f.dst)), 0o755); err != nil {
			return err
		}
		if err := atomicfile.Write(l.p(f.dst), []byte(text), 0o644); err != nil {
			return fmt.Errorf("install %s: %w", f.dst, err)
		}
		fmt.Fprintf(stdout, "installed %s\n", f.dst)
	}
	if err := os.MkdirAll(l.p("/etc/sandboxd"), 0o750); err != nil {
		return err
	}
	if fileExists(l.p(configPath)) {
		fmt.Fprintf(stdout, "kept %s (it exists)\n", configPath)
	} else {
		var b strings.Builder
		if err := configCmd([]string{"default"}, &b); err != nil {
			return err
		}
		if err := atomicfile.Write(l.p(configPath), []byte(b.String()), 0o640); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "installed %s\n", configPath)
	}
	if *root != "/" {
		return nil
	}
	for _, c := range [][]string{
		{"systemd-sysusers", "/etc/sysusers.d/sandboxd.conf"},
		{"systemd-tmpfiles", "--create", "/etc/tmpfiles.d/sandboxd.conf"},
		{"systemctl", "daemon-reload"},
	} {
		if err := runTool(ctx, stderr, c...); err != nil {
			return err
		}
	}
	if *enable {
		if err := runTool(ctx, stderr, "systemctl", "enable", "--now", "sandboxd.socket", "sandboxd.service"); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "enabled and started sandboxd.socket and sandboxd.service")
	} else {
		fmt.Fprintln(stdout, "enable it with: systemctl enable --now sandboxd.socket sandboxd.service")
	}
	return nil
}

// uninstall removes what install put in place; the configuration and the
// state directory (sandboxes, event logs, token) stay unless --purge.
func uninstall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags, prefix, root := installFlags("uninstall")
	purge := flags.Bool("purge", false, "also remove the configuration and the state directory")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		return errUsage
	}
	l := layoutPaths{root: *root, prefix: *prefix}
	if *root == "/" {
		// Stopping the service stops its process sandboxes; containerd
		// sandboxes stay unless purged (they belong to the state).
		_ = runTool(ctx, stderr, "systemctl", "disable", "--now", "sandboxd.socket", "sandboxd.service")
	}
	remove := func(path string) error {
		err := os.Remove(l.p(path))
		switch {
		case err == nil:
			fmt.Fprintf(stdout, "removed %s\n", path)
		case errors.Is(err, fs.ErrNotExist):
			return nil
		}
		return err
	}
	var errs error
	for _, f := range l.files() {
		errs = errors.Join(errs, remove(f.dst))
	}
	errs = errors.Join(errs, remove(l.bin()), remove(l.helper()))
	if *purge {
		errs = errors.Join(errs, remove(configPath))
		for _, d := range []string{"/etc/sandboxd", "/var/lib/sandboxd"} {
			if err := os.RemoveAll(l.p(d)); err != nil {
				errs = errors.Join(errs, err)
			} else {
				fmt.Fprintf(stdout, "removed %s\n", d)
			}
		}
	} else {
		fmt.Fprintf(stdout, "kept %s and /var/lib/sandboxd (--purge removes them)\n", configPath)
	}
	if *root == "/" {
		errs = errors.Join(errs, runTool(ctx, stderr, "systemctl", "daemon-reload"))
	}
	return errs
}

// status shows the service's state (when systemd runs) and the daemon's
// backends.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if _, err := exec.LookPath("systemctl"); err == nil {
		out, err := exec.CommandContext(ctx, "systemctl", "show", "sandboxd.service", "sandboxd.socket", "--property=Id,ActiveState,SubState,MainPID").Output()
		if err == nil {
			fmt.Fprint(stdout, string(out))
		} else {
			fmt.Fprintf(stdout, "systemd: not available here (%v)\n", err)
		}
	}
	return withClient(ctx, args, stderr, func(c *client.Client, rest []string) error { return info(ctx, c, rest, stdout) })
}

func runTool(ctx context.Context, stderr io.Writer, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// copyFile copies src to dst atomically (a running binary is replaced,
// not overwritten).
func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(dst, b, mode)
}
