package tests

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// requireIPykernel skips (fails in CI) without a python3 that imports
// ipykernel on the host (which the process sandboxes and the containerd
// host image use).
func requireIPykernel(t *testing.T) {
	t.Helper()
	err := exec.Command("/usr/bin/python3", "-c", "import ipykernel").Run()
	require(t, "python3-ipykernel", err)
}

func cell(t *testing.T, c *client.Client, id, code string, timeout float64) *api.Observation {
	t.Helper()
	o, err := c.Act(ctxT(t, 120*time.Second), id, &api.Action{Kind: api.KindIPython, Code: code, TimeoutS: api.Seconds(timeout)})
	if err != nil {
		t.Fatalf("ipython %q: %v", code, err)
	}
	return o
}

// tinyPNG is a 2x2 red PNG.
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="

func TestIPython(t *testing.T) {
	requireIPykernel(t)
	onBackends(t, func(t *testing.T, c *client.Client, id string) {
		// State across cells, the value of the last expression.
		o := cell(t, c, id, "x = 41\nx + 1", 60)
		if o.Output != "42" || o.IPythonError != nil || o.ExecutionCount != 1 || o.TimedOut {
			t.Fatalf("first cell: %+v", o)
		}
		o = cell(t, c, id, "print('x is', x)\ny = x * 2", 60)
		if o.Output != "x is 41\n" || o.ExecutionCount != 2 {
			t.Fatalf("second cell: %+v", o)
		}

		// An image, matplotlib-free.
		o = cell(t, c, id, "import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode('"+tinyPNG+"')))", 60)
		if len(o.Images) != 1 || o.Images[0].MIME != "image/png" || o.Images[0].Data != tinyPNG {
			t.Fatalf("image cell: %+v", o)
		}

		// An exception: its name, value and a plain-text traceback.
		o = cell(t, c, id, "def f():\n    return 1/0\nf()", 60)
		if e := o.IPythonError; e == nil || e.EName != "ZeroDivisionError" || !strings.Contains(e.Traceback, "return 1/0") || strings.Contains(e.Traceback, "\x1b") {
			t.Fatalf("exception: %+v %+v", o, o.IPythonError)
		}

		// A timeout interrupts the cell; the kernel and its state stay.
		start := time.Now()
		o = cell(t, c, id, "import time\nfor i in range(1000):\n    print(i, flush=True)\n    time.sleep(0.05)", 1)
		if !o.TimedOut || !strings.HasPrefix(o.Output, "0\n1\n") || time.Since(start) > 30*time.Second {
			t.Fatalf("cell past its timeout: %+v", o)
		}
		o = cell(t, c, id, "print(x, y, i > 0)", 60)
		if o.Output != "41 82 True\n" || o.TimedOut {
			t.Fatalf("after the interrupt: %+v", o)
		}

		// The kernel follows the default bash session's cwd.
		wantRun(t, run(t, c, id, "mkdir -p nb/sub && cd nb/sub && echo data > f.txt"), 0, "")
		o = cell(t, c, id, "import os\nprint(os.getcwd().endswith('/nb/sub'), open('f.txt').read().strip())", 60)
		if o.Output != "True data\n" {
			t.Fatalf("cwd after cd in bash: %+v", o)
		}

		// What the cell's child processes write to fd 1 and 2 is the
		// cell's output, every time (the launcher's quick flush waits for
		// ipykernel's fd watcher), and a cell may import debugpy although
		// the kernel started without it.
		for i := range 25 {
			o = cell(t, c, id, fmt.Sprintf("import os, subprocess\nos.system('echo fd-%d')\nsubprocess.run(['sh', '-c', 'echo sub-%d >&2'])\nprint('py-%d')", i, i, i), 60)
			for _, want := range []string{"fd-", "sub-", "py-"} {
				if want += strconv.Itoa(i) + "\n"; !strings.Contains(o.Output, want) {
					t.Fatalf("cell %d: no %q in %q", i, want, o.Output)
				}
			}
		}
		if exec.Command("/usr/bin/python3", "-c", "import debugpy").Run() == nil {
			if o = cell(t, c, id, "import debugpy\nprint(debugpy.__name__)", 60); o.Output != "debugpy\n" {
				t.Fatalf("import debugpy in a cell: %+v %+v", o, o.IPythonError)
			}
		}

		// A killed kernel: the very next cell gets a new one and says so,
		// whether the daemon has seen the kernel's exit yet or not (then
		// sending the cell fails, or it waits for a reply that never comes).
		var after *api.Observation
		for round := range 3 {
			cell(t, c, id, "z = 1", 60)
			o = cell(t, c, id, "import os\nprint(os.getpid())", 60)
			pid := strings.TrimSpace(o.Output)
			if _, err := c.Act(ctxT(t, 30*time.Second), id, api.Exec("kill", "-9", pid)); err != nil {
				t.Fatal(err)
			}
			after = cell(t, c, id, "print('z' in dir())", 60)
			if after.Output != "False\n" || !strings.Contains(after.Note, "died") || !strings.Contains(after.Note, "gone") {
				t.Fatalf("round %d, the cell after the kernel was killed: %+v", round, after)
			}
		}
		o = cell(t, c, id, "x", 60)
		if o.IPythonError == nil || o.IPythonError.EName != "NameError" {
			t.Fatalf("state after a new kernel: %+v", o)
		}

		// exit() ends the kernel too; the next cell says so.
		cell(t, c, id, "w = 1\nexit()", 60)
		eventually(t, 30*time.Second, "a new kernel after exit()", func() bool {
			after = cell(t, c, id, "print('w' in dir())", 60)
			return strings.Contains(after.Note, "died")
		})
		if after.Output != "False\n" || !strings.Contains(after.Note, "exit code 0") {
			t.Fatalf("after exit(): %+v", after)
		}
	})
}

// TestIPythonKernelsAreIndependent: two sandboxes, two kernels; deleting
// a sandbox takes its kernel with it.
func TestIPythonKernelsAreIndependent(t *testing.T) {
	requireIPykernel(t)
	d := startDaemon(t)
	c := d.client()
	a, b := newSandbox(t, c), newSandbox(t, c)
	if o := cell(t, c, a, "secret = 'a'\nimport os\nos.getpid()", 60); o.IPythonError != nil {
		t.Fatal(o.IPythonError)
	}
	o := cell(t, c, b, "secret", 60)
	if o.IPythonError == nil || o.IPythonError.EName != "NameError" {
		t.Fatalf("sandbox b sees a's variable: %+v", o)
	}
	kernels := func() int {
		n := 0
		for _, p := range processesOf("sandboxd ipykernel launcher") {
			if strings.Contains(p, d.stateDir) {
				n++
			}
		}
		return n
	}
	if n := kernels(); n != 2 {
		t.Fatalf("%d kernels for 2 sandboxes", n)
	}
	if err := c.DeleteSandbox(ctxT(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a's kernel to be gone", func() bool { return kernels() == 1 })
	// A daemon stop leaves none either.
	d.stop()
	eventually(t, 10*time.Second, "every kernel to be gone", func() bool { return kernels() == 0 })
}

// TestIPythonIdleTimeout: a sandbox reaped for idleness takes its kernel
// with it.
func TestIPythonIdleTimeout(t *testing.T) {
	requireIPykernel(t)
	d := startDaemon(t)
	c := d.client()
	ctx := ctxT(t, 60*time.Second)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{IdleTimeoutS: api.Seconds(2)})
	if err != nil {
		t.Fatal(err)
	}
	o := cell(t, c, sb.ID, "import os\nos.getpid()", 60)
	pid, err := strconv.Atoi(o.Output)
	if err != nil {
		t.Fatalf("kernel pid: %+v", o)
	}
	eventually(t, 30*time.Second, "the idle sandbox to be reaped", func() bool {
		_, err := c.GetSandbox(ctx, sb.ID)
		return errors.Is(err, client.ErrNotFound)
	})
	eventually(t, 10*time.Second, "its kernel to be gone", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
}

// TestIPythonUnavailable: without ipykernel the action says what to
// install.
func TestIPythonUnavailable(t *testing.T) {
	d := startDaemon(t, "--set", "ipython.python=/usr/bin/no-such-python")
	c := d.client()
	id := newSandbox(t, c)
	_, err := c.Act(ctxT(t, 60*time.Second), id, &api.Action{Kind: api.KindIPython, Code: "1"})
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "ipykernel") {
		t.Fatalf("ipython without ipykernel: %v", err)
	}
}

// TestIPythonAfterRestart: after a daemon restart the first cell runs in a
// new kernel and says the earlier state is gone.
func TestIPythonAfterRestart(t *testing.T) {
	requireIPykernel(t)
	d := startDaemon(t)
	c := d.unixClient()
	id := newSandbox(t, c)
	cell(t, c, id, "kept = 1", 60)
	c.Close()
	d.stop()
	d.restart()
	c = d.client()
	o := cell(t, c, id, "'kept' in dir()", 60)
	if o.Output != "False" || !strings.Contains(o.Note, "daemon restarted") {
		t.Fatalf("first cell after a restart: %+v", o)
	}
	if o := cell(t, c, id, "1 + 1", 60); o.Note != "" || o.Output != "2" {
		t.Fatalf("second cell after a restart: %+v", o)
	}
}
