package tests

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// The one leak checker of the suite. A test takes a baseline before its
// work and checks after it (its sandboxes deleted, its clients closed)
// that everything is back: the daemon's goroutines and fds, and on the
// host the sandboxes' processes, cgroups, mounts, FIFOs and sockets,
// per-sandbox directories, containerd objects and daemon containers. Each
// of the four parts of a RELIABILITY.md case ends with "nothing leaked";
// this is how the tests say it.
//
// The suite's tests run one at a time, so what is new on the host since
// the baseline belongs to the test. TestMain runs the host part once more
// over the whole suite.

// leakBaseline is what a daemon and the host held before a test's work.
type leakBaseline struct {
	t testing.TB // nil in TestMain
	d *daemon
	// Daemon figures from /metrics (missing when it was not serving).
	goroutines, fds float64
	host            map[string]bool
}

// goroutineSlack is how many more goroutines than its baseline a daemon may
// have without a leak being reported.
const goroutineSlack = 2

// newLeakCheck takes the baseline of d (nil: the host only).
func newLeakCheck(t testing.TB, d *daemon) *leakBaseline {
	t.Helper()
	b := &leakBaseline{t: t, d: d, goroutines: -1, fds: -1}
	if d != nil {
		// /v1/info probes every backend: what a daemon opens once and
		// keeps (containerd's gRPC connection) is then in the baseline.
		c := d.unixClient()
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatalf("leak check baseline: %v", err)
		}
		c.Close()
	}
	// A daemon just started may still be winding up (its first
	// accept, backend probes): the smaller of a few readings is the
	// baseline that matters.
	for i := 0; i < 3 && d != nil; i++ {
		g, f, err := daemonFigures(d)
		if err != nil {
			t.Fatalf("leak check baseline: %v", err)
		}
		if b.goroutines < 0 || g < b.goroutines {
			b.goroutines = g
		}
		if b.fds < 0 || f < b.fds {
			b.fds = f
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.host = hostHoldings(d)
	return b
}

// check waits (up to 40 s: fasthttp retires idle workers after 10 s, and
// keep-alive connections a client forgot are closed by the daemon's idle
// timeout only much later, so tests close their clients) until everything
// is back to the baseline, and fails the test with the list of what is
// not.
func (b *leakBaseline) check() {
	b.t.Helper()
	if leaks := b.leaks(40 * time.Second); len(leaks) > 0 {
		b.t.Errorf("leaked:\n  %s", strings.Join(leaks, "\n  "))
		if b.d != nil && b.d.running() && slices.ContainsFunc(leaks, func(l string) bool { return strings.HasPrefix(l, "daemon open fds") }) {
			b.t.Logf("the daemon's fds:\n%s", b.d.fds())
		}
		if b.d != nil && b.d.running() && slices.ContainsFunc(leaks, func(l string) bool { return strings.HasPrefix(l, "daemon goroutines") }) {
			b.t.Logf("the daemon's goroutines:\n%s", b.d.goroutineDump())
		}
	}
}

// fds lists the daemon's open files.
func (d *daemon) fds() string {
	dir := fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid)
	ents, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
	}
	return b.String()
}

// goroutineDump ends the daemon with SIGQUIT and returns the stacks the Go
// runtime prints then, without the runtime's own goroutines.
func (d *daemon) goroutineDump() string {
	from := len(d.log.String())
	_ = d.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
	}
	var keep []string
	for _, g := range strings.Split(d.log.String()[from:], "\n\n") {
		if strings.Contains(g, "goroutine ") && strings.Contains(g, "github.com/") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}

func (b *leakBaseline) leaks(within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		var leaks []string
		if b.d != nil && b.goroutines >= 0 && b.d.running() {
			g, f, err := daemonFigures(b.d)
			switch {
			case err != nil:
				leaks = append(leaks, "daemon figures: "+err.Error())
			default:
				// containerd's gRPC connection starts and ends
				// goroutines of its own as its state changes (a
				// Connect after the first use, say): that much is
				// not a leak. A goroutine per sandbox or per request
				// outgrows it as soon as a test has a few of them.
				if g > b.goroutines+goroutineSlack {
					leaks = append(leaks, fmt.Sprintf("daemon goroutines %v (baseline %v)", g, b.goroutines))
				}
				if f > b.fds {
					leaks = append(leaks, fmt.Sprintf("daemon open fds %v (baseline %v)", f, b.fds))
				}
			}
		}
		for h := range hostHoldings(b.d) {
			if !b.host[h] {
				leaks = append(leaks, h)
			}
		}
		if len(leaks) == 0 || time.Now().After(deadline) {
			slices.Sort(leaks)
			return leaks
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// running reports whether the daemon process is up.
func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// daemonFigures reads the daemon's goroutines and open fds over a
// connection of its own that the daemon closes after answering (read to
// its end): a reading never finds the one before it still open.
func daemonFigures(d *daemon) (goroutines, fds float64, err error) {
	conn, err := net.DialTimeout("unix", d.sock, 10*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: sandboxd\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, 0, err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return 0, 0, err
	}
	g, f := -1.0, -1.0
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "sandboxd_goroutines "); ok {
			g, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, "sandboxd_open_fds "); ok {
			f, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if g < 0 || f < 0 {
		return 0, 0, fmt.Errorf("metrics lack sandboxd_goroutines or sandboxd_open_fds: %.300s", b)
	}
	// The metrics connection itself is one fd while it is read.
	return g, f - 1, nil
}

// hostHoldings lists what sandboxes hold on the host, one string each:
// processes of sandbox users, sandbox cgroups, mounts of the tests' state
// dirs and containers, FIFOs and sockets and per-sandbox directories in
// d's state dir, containerd objects of the tests' namespace and daemon
// containers. Processes are named by pid and command line, so a new
// process with an old pid's name still differs.
func hostHoldings(d *daemon) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(strings.TrimPrefix(line, "Uid:"))
			if strings.HasPrefix(line, "Uid:") && len(f) > 0 && len(f[0]) == 10 && f[0] >= "2000000000" && f[0] < "2100000000" {
				cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				out[fmt.Sprintf("process %s (uid %s): %s", e.Name(), f[0], strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")))] = true
			}
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/sandboxd-*/*", "/sys/fs/cgroup/*/sandboxd-*/*", "/sys/fs/cgroup/*/*/*/sandboxd-*/*", "/sys/fs/cgroup/*/" + e2eNamespace + "/*", "/sys/fs/cgroup/" + e2eNamespace + "/*"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				out["cgroup "+m] = true
			}
		}
	}
	// A daemon makes its cgroup parents with its first sandbox and
	// removes them when it stops: only the suite's check (d == nil, no
	// daemon running) counts them.
	for k := range cgroupParents() {
		if d == nil {
			out[k] = true
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			mp := f[4]
			if strings.Contains(mp, "/"+e2eNamespace+"/") || (d != nil && strings.HasPrefix(mp, d.dir+"/")) {
				out["mount "+mp] = true
			}
		}
	}
	if d != nil {
		for k := range stateHoldings(d.stateDir) {
			out[k] = true
		}
	}
	for _, l := range containerdLeftovers() {
		out[l] = true
	}
	for _, l := range dockerLeftovers() {
		out[l] = true
	}
	return out
}

// stateHoldings lists the FIFOs and sockets anywhere in a state dir and
// the per-sandbox directories of the backends (workspaces, tmp, wasm).
// The event logs under sandboxes/ are data, kept by design.
func stateHoldings(stateDir string) map[string]bool {
	out := map[string]bool{}
	for _, sub := range []string{"workspaces", "tmp", "wasm"} {
		ents, _ := os.ReadDir(filepath.Join(stateDir, sub))
		for _, e := range ents {
			out["state dir entry "+filepath.Join(sub, e.Name())] = true
		}
	}
	_ = filepath.WalkDir(stateDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.Type()&(fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			out["state dir "+e.Type().String()+" "+strings.TrimPrefix(path, stateDir+"/")] = true
		}
		return nil
	})
	return out
}

// deleteAll deletes a test's sandboxes and closes its client's idle
// connections: what a test does before its leak check.
func deleteAll(t testing.TB, c *client.Client, ids []string) {
	t.Helper()
	for _, id := range ids {
		if err := c.DeleteSandbox(ctxT(t, 60*time.Second), id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	c.CloseIdle()
}
