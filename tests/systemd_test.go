package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSystemdUnits checks the units in systemd/ with systemd's own tools:
// `systemd-analyze verify` finds nothing to say, and the service's
// exposure score (`systemd-analyze security`) stays in the "OK" band it
// was measured at (docs/operator.md explains each remaining exposure).
func TestSystemdUnits(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	require(t, "systemd-analyze (Debian package systemd)", err)
	dir := t.TempDir()
	for _, name := range []string{"sandboxd.service", "sandboxd.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		// verify checks that ExecStart's program exists: the binary under
		// test stands in for the installed one.
		unit := strings.ReplaceAll(string(b), "/usr/local/bin/sandboxd", binary)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(tool, "verify", filepath.Join(dir, "sandboxd.service"), filepath.Join(dir, "sandboxd.socket")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(tool, "security", "--offline=yes", filepath.Join(dir, "sandboxd.service")).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for sandboxd.service: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("exposure %.1f %s", score, m[2])
	if score > 4.2 {
		t.Errorf("exposure %.1f %s: worse than the 4.1 OK recorded in docs/operator.md", score, m[2])
	}
}
