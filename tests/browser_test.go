package tests

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// requireChromium skips (fails in CI) without a Chromium on the host
// (which process sandboxes and the containerd host image use).
func requireChromium(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("chromium")
	require(t, "chromium", err)
}

func browse(t *testing.T, c *client.Client, id string, a api.Action) *api.Observation {
	t.Helper()
	a.Kind = api.KindBrowser
	o, err := c.Act(ctxT(t, 120*time.Second), id, &a)
	if err != nil {
		t.Fatalf("browser %s %s%s: %v", a.Op, a.URL, a.Target, err)
	}
	return o
}

// elementID finds the [eN] id of the tree line matching re.
func elementID(t *testing.T, tree, re string) string {
	t.Helper()
	m := regexp.MustCompile(`\[(e\d+)\] ` + re).FindStringSubmatch(tree)
	if m == nil {
		t.Fatalf("no element matching %q in the tree:\n%s", re, tree)
	}
	return m[1]
}

const appPage = `<!doctype html><title>Sandbox app</title>
<h1>Served from the sandbox</h1>
<p id="out">waiting</p>
<label>Name <input id="name"></label>
<button onclick="document.getElementById('out').textContent = 'hello ' + document.getElementById('name').value">Greet</button>
<a href="two.html">Next</a>`

// TestBrowser drives a page that a server started inside the sandbox
// serves at http://localhost:PORT, on the process backend (host network)
// and the containerd backend (the sandbox's own network namespace).
func TestBrowser(t *testing.T) {
	requireChromium(t)
	host := serveHost(t)
	onBackends(t, func(t *testing.T, c *client.Client, id string) {
		sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(freePort(t))
		for name, body := range map[string]string{"site/index.html": appPage, "site/two.html": "<title>Two</title><h1>Second</h1>"} {
			if _, err := act(t, c, id, api.WriteFile(name, body)); err != nil {
				t.Fatal(err)
			}
		}
		wantRun(t, run(t, c, id, "cd site && (python3 -m http.server "+port+" --bind 127.0.0.1 >/dev/null 2>&1 &) && cd .."), 0, "")
		base := "http://localhost:" + port + "/"
		var o *api.Observation
		for try := 0; ; try++ {
			o = browse(t, c, id, api.Action{Op: "goto", URL: base})
			if o.BrowserError == "" {
				break
			}
			if try == 100 {
				t.Fatalf("the sandbox's server: %s (%s)", o.BrowserError, o.Note)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if o.Title != "Sandbox app" || !strings.Contains(o.Text, "Served from the sandbox") || !strings.Contains(o.AXTree, `heading "Served from the sandbox"`) {
			t.Fatalf("goto: %+v", o)
		}
		name := elementID(t, o.AXTree, `textbox "Name"`)
		greet := elementID(t, o.AXTree, `button "Greet"`)
		if o = browse(t, c, id, api.Action{Op: "fill", Target: name, Text: "agent"}); o.BrowserError != "" {
			t.Fatalf("fill: %s", o.BrowserError)
		}
		o = browse(t, c, id, api.Action{Op: "click", Target: greet, Screenshot: true})
		if o.BrowserError != "" || !strings.Contains(o.Text, "hello agent") {
			t.Fatalf("click: %q %q", o.BrowserError, o.Text)
		}
		raw, err := base64.StdEncoding.DecodeString(o.Screenshot)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 || len(raw) < 2000 {
			t.Errorf("screenshot: %v, %d bytes", b, len(raw))
		}
		o = browse(t, c, id, api.Action{Op: "click", Target: elementID(t, o.AXTree, `link "Next"`)})
		if o.Title != "Two" {
			t.Fatalf("link: %q %q", o.Title, o.BrowserError)
		}
		if o = browse(t, c, id, api.Action{Op: "back"}); o.URL != base {
			t.Errorf("back: %q %q", o.URL, o.BrowserError)
		}
		if o = browse(t, c, id, api.Action{Op: "forward"}); o.Title != "Two" {
			t.Errorf("forward: %q %q", o.Title, o.BrowserError)
		}
		if o = browse(t, c, id, api.Action{Op: "evaluate", Script: "location.port"}); o.Result != strconv.Quote(port) {
			t.Errorf("evaluate: %q %q", o.Result, o.BrowserError)
		}
		// The browser's downloads land in the workspace.
		wantRun(t, run(t, c, id, "head -c 3000 /dev/zero > site/blob.bin"), 0, "")
		o = browse(t, c, id, api.Action{Op: "evaluate", Script: "const a = document.createElement('a'); a.href = '/blob.bin'; a.download = 'blob.bin'; document.body.append(a); a.click(); await new Promise(r => setTimeout(r, 1000)); 'clicked'"})
		eventually(t, 20*time.Second, "the download", func() bool {
			r := run(t, c, id, "stat -c %s .downloads/blob.bin 2>/dev/null || echo none")
			return strings.TrimSpace(r.Output) == "3000"
		})

		// Refused: schemes that reach the host or the browser itself, and
		// cloud metadata; the page stays where it was.
		for _, u := range []string{"file:///etc/passwd", "chrome://version", "view-source:" + base, "devtools://devtools/bundled/inspector.html", "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/"} {
			if o = browse(t, c, id, api.Action{Op: "goto", URL: u}); o.BrowserError == "" || o.Title != "Two" {
				t.Errorf("goto %s: error %q, now at %q", u, o.BrowserError, o.URL)
			}
		}

		// The network view: a process sandbox shares the host's; a
		// containerd sandbox (network none) cannot reach the host's
		// loopback, nor anything else.
		o = browse(t, c, id, api.Action{Op: "goto", URL: host})
		if sb.Backend == api.BackendProcess {
			if o.BrowserError != "" || o.Title != "Host page" {
				t.Errorf("process sandbox to the host's loopback: %q %q", o.Title, o.BrowserError)
			}
		} else if o.BrowserError == "" || o.Title == "Host page" {
			t.Errorf("containerd sandbox reached the host's loopback: %q %q", o.Title, o.BrowserError)
		}

		// No DevTools port: no browser process of this sandbox listens.
		checkNoDevToolsPort(t)

		// A crashed browser is restarted by the next action, which says so.
		run(t, c, id, "pkill -KILL -f remote-debugging-pipe; true")
		eventually(t, 20*time.Second, "a restarted browser", func() bool {
			o = browse(t, c, id, api.Action{Op: "snapshot"})
			return strings.Contains(o.Note, "the browser had exited")
		})
		if o.URL != "about:blank" {
			t.Errorf("after the restart: %q", o.URL)
		}
	})
}

// serveHost serves a page on the host's loopback.
func serveHost(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<title>Host page</title><p>on the host</p>")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String() + "/"
}

// checkNoDevToolsPort fails if a browser process holds a listening TCP
// socket: DevTools must go over the daemon's pipes only.
func checkNoDevToolsPort(t *testing.T) {
	t.Helper()
	procs := processesOf("--remote-debugging-pipe")
	if len(procs) == 0 {
		t.Fatal("no browser process found")
	}
	for _, p := range procs {
		pid := strings.SplitN(p, ":", 2)[0]
		if strings.Contains(p, "--remote-debugging-port") {
			t.Errorf("browser %s has a DevTools port: %s", pid, p)
		}
		listening := map[string]bool{}
		for _, f := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile(filepath.Join("/proc", pid, "net", f))
			for _, line := range strings.Split(string(b), "\n")[1:] {
				if fs := strings.Fields(line); len(fs) > 9 && fs[3] == "0A" {
					listening[fs[9]] = true
				}
			}
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(l, "socket:["); ok && listening[strings.TrimSuffix(ino, "]")] {
				t.Errorf("browser process %s listens on a TCP socket (fd %s)", pid, fd.Name())
			}
		}
	}
}

// TestBrowserChurn creates and deletes many sandboxes that browsed: no
// browser process and no profile directory is left.
func TestBrowserChurn(t *testing.T) {
	requireChromium(t)
	d := startDaemon(t)
	c := d.client()
	for _, tc := range []struct {
		backend    string
		n, workers int
	}{{api.BackendProcess, 50, 4}, {api.BackendContainerd, 6, 2}} {
		t.Run(tc.backend, func(t *testing.T) {
			if tc.backend == api.BackendContainerd {
				requireContainerd(t, c)
			}
			leaks := newLeakCheck(t, d)
			var wg sync.WaitGroup
			errs := make(chan error, tc.n)
			next := make(chan int, tc.n)
			for i := 0; i < tc.n; i++ {
				next <- i
			}
			close(next)
			for w := 0; w < tc.workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						ctx := ctxT(t, 120*time.Second)
						sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: tc.backend})
						if err != nil {
							errs <- err
							return
						}
						o, err := c.Browse(ctx, sb.ID, fmt.Sprintf("data:text/html,<title>page %d</title>", i))
						if err == nil && o.Title != fmt.Sprintf("page %d", i) {
							err = fmt.Errorf("sandbox %d browsed to %q (%s)", i, o.Title, o.BrowserError)
						}
						if err != nil {
							errs <- err
						}
						if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			eventually(t, 10*time.Second, "no browser processes", func() bool { return len(processesOf("--remote-debugging-pipe")) == 0 })
			var profiles []string
			filepath.WalkDir(d.stateDir, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.Name() == ".sandboxd-browser" {
					profiles = append(profiles, p)
				}
				return nil
			})
			if len(profiles) > 0 {
				t.Errorf("profile directories left: %v", profiles)
			}
			c.CloseIdle()
			leaks.check()
		})
	}
}

// TestBrowserAfterRestart: the browser does not outlive the daemon; after
// a restart the first browser action starts a new one and says so, and
// no browser process of the old daemon is left.
func TestBrowserAfterRestart(t *testing.T) {
	requireChromium(t)
	d := startDaemon(t)
	c := d.unixClient()
	id := newSandbox(t, c)
	if o, err := c.Browse(ctxT(t, 60*time.Second), id, "data:text/html,<title>before</title>"); err != nil || o.Title != "before" {
		t.Fatalf("browse: %+v %v", o, err)
	}
	c.Close()
	d.stop()
	if procs := processesOf("--remote-debugging-pipe"); len(procs) > 0 {
		t.Errorf("browser processes outlived the daemon: %v", procs)
	}
	d.restart()
	c = d.client()
	o := browse(t, c, id, api.Action{Op: "snapshot"})
	if o.URL != "about:blank" || !strings.Contains(o.Note, "daemon restarted") {
		t.Fatalf("first action after a restart: %+v", o)
	}
	if o = browse(t, c, id, api.Action{Op: "snapshot"}); o.Note != "" {
		t.Fatalf("second action after a restart: note %q", o.Note)
	}
}

// TestBrowseCLI: `sandboxd browse` prints the page's text, or its tree,
// and writes the screenshot; a refused URL is an exit code and a message.
func TestBrowseCLI(t *testing.T) {
	requireChromium(t)
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	cli := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(binary, append([]string{"browse", "--addr", "unix://" + d.sock}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	shot := filepath.Join(t.TempDir(), "page.png")
	out, stderr, err := cli(id, "data:text/html,<title>CLI</title><h1>From the CLI</h1><button>Push</button>", "--screenshot", shot)
	if err != nil || !strings.HasPrefix(out, "CLI\n") || !strings.Contains(out, "From the CLI") {
		t.Fatalf("browse: %v %q %q", err, out, stderr)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the screenshot is not a PNG: %v", err)
	}
	if out, _, err = cli(id, "data:text/html,<button>Push</button>", "--tree"); err != nil || !regexp.MustCompile(`\[e\d+\] button "Push"`).MatchString(out) {
		t.Errorf("browse --tree: %v %q", err, out)
	}
	_, stderr, err = cli(id, "file:///etc/passwd")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr, "refused") {
		t.Errorf("browse file://: %v %q", err, stderr)
	}
}

// TestBrowserDownloadsAndHangs: a download named to climb out lands in
// <workdir>/.downloads under its base name; one past
// browser.max_download_bytes is cancelled and said so; a page hung in an
// endless script is answered for its sandbox while another sandbox's
// browser carries on, and then both work. Process and containerd.
func TestBrowserDownloadsAndHangs(t *testing.T) {
	requireChromium(t)
	d := startDaemon(t, "--set", "browser.max_download_bytes=1048576")
	leaks := newLeakCheck(t, d)
	c := d.client()
	for _, backend := range []string{api.BackendProcess, api.BackendContainerd} {
		t.Run(backend, func(t *testing.T) {
			newSB := func() string {
				if backend == api.BackendContainerd {
					requireContainerd(t, c)
					return newContainerd(t, d, api.CreateSandboxRequest{})
				}
				return newSandbox(t, c)
			}
			id, other := newSB(), newSB()
			_, port, _ := net.SplitHostPort(freePort(t))
			wantRun(t, run(t, c, id, "mkdir -p deep/site && (cd deep/site && head -c 3000 /dev/urandom > small.bin && head -c 3000000 /dev/zero > big.bin && echo '<title>dl</title>' > index.html && (python3 -m http.server "+port+" --bind 127.0.0.1 >/dev/null 2>&1 &))"), 0, "")
			base := "http://localhost:" + port + "/"
			eventually(t, 30*time.Second, "the sandbox's server", func() bool {
				return browse(t, c, id, api.Action{Op: "goto", URL: base}).Title == "dl"
			})
			// Notes of downloads come with whichever observation follows
			// them.
			var notes strings.Builder
			click := func(href, name string) {
				t.Helper()
				script := fmt.Sprintf("const a = document.createElement('a'); a.href = %q; a.download = %q; document.body.append(a); a.click(); await new Promise(r => setTimeout(r, 500)); 'ok'", href, name)
				o := browse(t, c, id, api.Action{Op: "evaluate", Script: script})
				if o.BrowserError != "" {
					t.Fatalf("click %s: %s", href, o.BrowserError)
				}
				notes.WriteString(o.Note)
			}
			// A name that climbs out is only a name.
			escape := "escape-" + randomHex(4)
			click("/small.bin", "../../../"+escape+".bin")
			eventually(t, 30*time.Second, "the small download", func() bool {
				notes.WriteString(browse(t, c, id, api.Action{Op: "snapshot"}).Note)
				return strings.Contains(notes.String(), "downloaded .downloads/")
			})
			o := run(t, c, id, "cmp -s deep/site/small.bin .downloads/$(ls .downloads | grep "+escape+" | head -1) && echo same; find / -xdev -name '*"+escape+"*' -not -path '*/.downloads/*' 2>/dev/null | head -3")
			if o.Output != "same\n" {
				t.Fatalf("the hostile-named download: %q (notes %q)", o.Output, notes.String())
			}
			// Past the cap: cancelled, and said.
			notes.Reset()
			click("/big.bin", "big.bin")
			eventually(t, 60*time.Second, "the cancelled download's note", func() bool {
				notes.WriteString(browse(t, c, id, api.Action{Op: "snapshot"}).Note)
				return strings.Contains(notes.String(), "was cancelled: it passed the 1 MiB cap")
			})
			if o := run(t, c, id, "find .downloads -size +1024k | wc -l"); o.Output != "0\n" {
				t.Errorf("a download past the cap is on disk: %q", o.Output)
			}

			// A hung page: its sandbox gets an answer; the other's browser
			// works meanwhile.
			browse(t, c, other, api.Action{Op: "goto", URL: "data:text/html,<title>other</title>"})
			hung := make(chan *api.Observation, 1)
			go func() {
				o, err := c.Act(ctxT(t, 120*time.Second), id, &api.Action{Kind: api.KindBrowser, Op: "evaluate", Script: "while (true) {}", TimeoutS: api.Seconds(2)})
				if err != nil {
					t.Error(err)
				}
				hung <- o
			}()
			for i := 0; i < 3; i++ {
				if o := browse(t, c, other, api.Action{Op: "snapshot"}); o.Title != "other" || o.BrowserError != "" {
					t.Fatalf("the other sandbox's browser during the hang: %q %q", o.Title, o.BrowserError)
				}
			}
			if o := <-hung; o == nil || !strings.Contains(o.BrowserError, "did not finish") {
				t.Fatalf("the hung page: %+v", o)
			}
			if o := browse(t, c, id, api.Action{Op: "goto", URL: "data:text/html,<title>after</title>"}); o.Title != "after" {
				t.Fatalf("after the hang: %q %q %q", o.Title, o.BrowserError, o.Note)
			}
			if o := browse(t, c, other, api.Action{Op: "snapshot"}); o.Title != "other" {
				t.Fatalf("the other sandbox after the hang: %q %q", o.Title, o.BrowserError)
			}
			for _, sb := range []string{id, other} {
				if err := c.DeleteSandbox(ctxT(t, 60*time.Second), sb); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	c.CloseIdle()
	leaks.check()
}
