package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sbdaemon "github.com/sandboxd/sandboxd/daemon"
)

// TestConfigDefault: `sandboxd config default` prints a configuration
// that decodes strictly to the defaults.
func TestConfigDefault(t *testing.T) {
	out, err := exec.Command(binary, "config", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	c := sbdaemon.DefaultConfig()
	if err := sbdaemon.DecodeConfig(out, &c); err != nil {
		t.Fatalf("the printed default does not decode: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "[containerd]") || !strings.HasPrefix(string(out), "# sandboxd configuration") {
		t.Errorf("config default:\n%s", out)
	}
}

// TestInstallUninstall runs install and uninstall into a directory
// standing for the system's root (systemctl is only run for the real
// root): what install puts in place, that it keeps an edited config, and
// that uninstall takes back what install added.
func TestInstallUninstall(t *testing.T) {
	root := t.TempDir()
	sbd := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--root", root)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sandboxd %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	sbd("install")
	self, _ := os.ReadFile(binary)
	installed, err := os.ReadFile(filepath.Join(root, "usr/local/bin/sandboxd"))
	if err != nil || !bytes.Equal(installed, self) {
		t.Fatalf("the installed binary: %v (same bytes: %v)", err, bytes.Equal(installed, self))
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/sandboxd.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStart=/usr/local/bin/sandboxd serve\n") || !strings.Contains(string(unit), "Type=notify") {
		t.Fatalf("the installed service: %v\n%s", err, unit)
	}
	for _, f := range []string{"etc/systemd/system/sandboxd.socket", "etc/sysusers.d/sandboxd.conf", "etc/tmpfiles.d/sandboxd.conf", "etc/sandboxd/config.toml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// An edited config survives a second install.
	cfg := filepath.Join(root, "etc/sandboxd/config.toml")
	if err := os.WriteFile(cfg, []byte("log_level = \"debug\"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if out := sbd("install", "--prefix", "/opt/sbd"); !strings.Contains(out, "kept /etc/sandboxd/config.toml") {
		t.Errorf("second install:\n%s", out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "log_level = \"debug\"\n" {
		t.Errorf("install overwrote the edited config: %q", b)
	}
	unit, _ = os.ReadFile(filepath.Join(root, "etc/systemd/system/sandboxd.service"))
	if !strings.Contains(string(unit), "\nExecStart=/opt/sbd/bin/sandboxd serve\n") {
		t.Errorf("--prefix not in the service:\n%s", unit)
	}
	// uninstall keeps config and state; --purge takes them too.
	os.MkdirAll(filepath.Join(root, "var/lib/sandboxd/sandboxes"), 0o700)
	sbd("uninstall", "--prefix", "/opt/sbd")
	for _, f := range []string{"opt/sbd/bin/sandboxd", "etc/systemd/system/sandboxd.service", "etc/systemd/system/sandboxd.socket", "etc/sysusers.d/sandboxd.conf", "etc/tmpfiles.d/sandboxd.conf"} {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after uninstall: %v", f, err)
		}
	}
	for _, f := range []string{"etc/sandboxd/config.toml", "var/lib/sandboxd/sandboxes"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("uninstall removed %s: %v", f, err)
		}
	}
	sbd("uninstall", "--prefix", "/usr/local", "--purge")
	for _, f := range []string{"usr/local/bin/sandboxd", "etc/sandboxd", "var/lib/sandboxd"} {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after uninstall --purge: %v", f, err)
		}
	}
}
