package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// python is the interpreter of the Python client's tests: Debian's, which
// CI installs with everything the tests use.
const python = "/usr/bin/python3"

// TestPythonClient runs the Python client's unittest suite
// (client/python/tests) against a real daemon, over TCP and the unix
// socket.
func TestPythonClient(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		require(t, "python3", err)
	}
	d := startDaemon(t)
	env := append(os.Environ(),
		"SANDBOXD_TEST_URL=http://"+d.tcp,
		"SANDBOXD_TEST_TOKEN="+d.token,
		"SANDBOXD_TEST_SOCKET="+d.sock,
		"PYTHONPATH="+filepath.Join("..", "client", "python"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	if err := exec.Command(python, "-c", "import ipykernel").Run(); err != nil {
		require(t, "python3-ipykernel", err)
		env = append(env, "SANDBOXD_TEST_NO_IPYTHON=1")
	}
	if _, err := exec.LookPath("chromium"); err != nil {
		require(t, "chromium", err)
		env = append(env, "SANDBOXD_TEST_NO_BROWSER=1")
	}
	cmd := exec.Command(python, "-m", "unittest", "discover", "-v", "-s", filepath.Join("..", "client", "python", "tests"))
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "skipped") && inCI() {
		t.Fatalf("Python tests were skipped in CI:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestPythonClientInstalls: `pip install ./client/python` works, offline
// (the build backend is the system's setuptools), and the installed
// package imports.
func TestPythonClientInstalls(t *testing.T) {
	if err := exec.Command(python, "-c", "import setuptools, wheel, ensurepip").Run(); err != nil {
		require(t, "python3-venv, python3-setuptools and python3-wheel", err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(python, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	src, _ := filepath.Abs(filepath.Join("..", "client", "python"))
	// Build in a copy: pip leaves build/ and *.egg-info beside the sources.
	work := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("cp", "-r", src, work).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", work)
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import sandboxd, os; print(sandboxd.__file__); print(sandboxd.Client('unix:///nonexistent').url)").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), venv) {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
}
