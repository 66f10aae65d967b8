package browser

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/process"
	"github.com/sandboxd/sandboxd/executors"
)

// needChromium fails in CI and skips elsewhere when there is no Chromium.
func needChromium(t testing.TB) {
	t.Helper()
	for _, c := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if _, err := exec.LookPath(c); err == nil {
			return
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium on PATH: CI must install the Debian package chromium")
	}
	t.Skip("no Chromium on PATH (install the Debian package chromium); skipping")
}

func sandbox(t testing.TB) backends.Sandbox {
	t.Helper()
	dir := t.TempDir()
	b, err := process.New(process.Config{WorkspaceRoot: filepath.Join(dir, "ws"), TmpRoot: filepath.Join(dir, "tmp")})
	if err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(dir, "sb")
	if err := os.Mkdir(sd, 0o700); err != nil {
		t.Fatal(err)
	}
	sb, err := b.Create(context.Background(), backends.Spec{ID: "sb-browsertest01", Dir: sd, Network: api.NetworkHost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

const formPage = `<!doctype html><title>Form test</title>
<h1>Hello browser</h1>
<p id="out">nothing yet</p>
<label>Name <input id="name" name="name"></label>
<select id="color"><option value="r">Red</option><option value="g">Green</option></select>
<button id="go" onclick="document.getElementById('out').textContent = 'hi ' + document.getElementById('name').value + ' ' + document.getElementById('color').value">Greet</button>
<a href="/two">Second page</a>
<input id="k" onkeydown="if (event.key === 'Enter') document.title = 'entered'">`

func serve(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, formPage) })
	mux.HandleFunc("/two", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Two</title><h1>Page two</h1>`)
	})
	mux.HandleFunc("/redirect-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

func act(t *testing.T, e *Executor, a api.Action) api.Observation {
	t.Helper()
	a.Kind = api.KindBrowser
	obs, err := e.Execute(context.Background(), &a, executors.Discard)
	if err != nil {
		t.Fatalf("%s: %v", a.Op, err)
	}
	return obs
}

// idOf finds the [eN] id of the line of tree matching re.
func idOf(t *testing.T, tree, re string) string {
	t.Helper()
	m := regexp.MustCompile(`\[(e\d+)\] ` + re).FindStringSubmatch(tree)
	if m == nil {
		t.Fatalf("no element matching %q in tree:\n%s", re, tree)
	}
	return m[1]
}

func TestBrowser(t *testing.T) {
	needChromium(t)
	sb := sandbox(t)
	base := serve(t)
	e := New(sb, Config{})
	defer e.Close(context.Background())

	obs := act(t, e, api.Action{Op: "goto", URL: base + "/"})
	if obs.BrowserError != "" || obs.Title != "Form test" || !strings.Contains(obs.Text, "Hello browser") {
		t.Fatalf("goto: %+v", obs)
	}
	if !strings.Contains(obs.AXTree, `heading "Hello browser"`) {
		t.Errorf("tree has no heading:\n%s", obs.AXTree)
	}
	name := idOf(t, obs.AXTree, `textbox "Name"`)
	greet := idOf(t, obs.AXTree, `button "Greet"`)
	color := idOf(t, obs.AXTree, `combobox`)

	if obs = act(t, e, api.Action{Op: "fill", Target: name, Text: "Ada"}); obs.BrowserError != "" {
		t.Fatalf("fill: %s", obs.BrowserError)
	}
	if obs = act(t, e, api.Action{Op: "select", Target: color, Text: "Green"}); obs.BrowserError != "" {
		t.Fatalf("select: %s", obs.BrowserError)
	}
	obs = act(t, e, api.Action{Op: "click", Target: greet})
	if obs.BrowserError != "" || !strings.Contains(obs.Text, "hi Ada g") {
		t.Fatalf("click: error %q, text %q", obs.BrowserError, obs.Text)
	}
	// Ids stay the same within a document.
	if got := idOf(t, obs.AXTree, `button "Greet"`); got != greet {
		t.Errorf("the button's id changed from %s to %s", greet, got)
	}
	// A CSS selector works as a target too.
	act(t, e, api.Action{Op: "fill", Target: "#name", Text: ""})
	obs = act(t, e, api.Action{Op: "evaluate", Script: "document.getElementById('name').value.length"})
	if obs.Result != "0" {
		t.Errorf("fill with empty text left %s characters", obs.Result)
	}
	obs = act(t, e, api.Action{Op: "press", Target: "#k", Key: "Enter"})
	if obs.Title != "entered" {
		t.Errorf("press Enter: title %q", obs.Title)
	}
	obs = act(t, e, api.Action{Op: "evaluate", Script: "({a: 1, b: [document.querySelectorAll('option').length]})"})
	if obs.Result != `{"a":1,"b":[2]}` {
		t.Errorf("evaluate: %q", obs.Result)
	}
	obs = act(t, e, api.Action{Op: "evaluate", Script: "await new Promise(r => setTimeout(() => r('later'), 10))"})
	if obs.Result != `"later"` {
		t.Errorf("evaluate a promise: %q (%s)", obs.Result, obs.BrowserError)
	}
	obs = act(t, e, api.Action{Op: "evaluate", Script: "throw new Error('boom')"})
	if !strings.Contains(obs.BrowserError, "boom") {
		t.Errorf("evaluate throw: error %q", obs.BrowserError)
	}

	obs = act(t, e, api.Action{Op: "click", Target: idOf(t, obs.AXTree, `link "Second page"`), Screenshot: true})
	if obs.Title != "Two" || obs.URL != base+"/two" {
		t.Fatalf("link: %q %q %q", obs.Title, obs.URL, obs.BrowserError)
	}
	img, err := png.Decode(bytes.NewReader(mustB64(t, obs.Screenshot)))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Errorf("screenshot is %v, want 1280x800", b)
	}
	// The page comes back from the back-forward cache as it was left.
	if obs = act(t, e, api.Action{Op: "back"}); obs.URL != base+"/" || obs.Title != "entered" {
		t.Errorf("back: %q %q", obs.Title, obs.BrowserError)
	}
	if obs = act(t, e, api.Action{Op: "forward"}); obs.Title != "Two" {
		t.Errorf("forward: %q %q", obs.Title, obs.BrowserError)
	}
	if obs = act(t, e, api.Action{Op: "forward"}); !strings.Contains(obs.BrowserError, "no page to go forward") {
		t.Errorf("forward at the end: %q", obs.BrowserError)
	}
	if obs = act(t, e, api.Action{Op: "click", Target: "e999"}); !strings.Contains(obs.BrowserError, "no element e999") {
		t.Errorf("unknown id: %q", obs.BrowserError)
	}
	for _, u := range []string{"file:///etc/passwd", "chrome://version", "view-source:" + base, "http://169.254.169.254/latest/meta-data/", "http://2852039166/"} {
		obs = act(t, e, api.Action{Op: "goto", URL: u})
		if obs.BrowserError == "" || obs.Title != "Two" {
			t.Errorf("goto %s: error %q, now at %q", u, obs.BrowserError, obs.URL)
		}
	}
	// A redirect to the metadata address is blocked by the browser.
	obs = act(t, e, api.Action{Op: "goto", URL: base + "/redirect-metadata"})
	if !strings.Contains(obs.BrowserError, "BLOCKED") || !strings.Contains(obs.Note, "169.254.169.254") {
		t.Errorf("redirect to metadata: error %q, note %q", obs.BrowserError, obs.Note)
	}
	// So does a request the page makes itself.
	obs = act(t, e, api.Action{Op: "evaluate", Script: "fetch('http://169.254.169.254/').then(r => 'fetched', e => 'refused: ' + e)"})
	if !strings.HasPrefix(obs.Result, `"refused`) {
		t.Errorf("fetch of the metadata address: %q %q", obs.Result, obs.BrowserError)
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBrowserRestartsAfterCrash(t *testing.T) {
	needChromium(t)
	sb := sandbox(t)
	e := New(sb, Config{})
	defer e.Close(context.Background())
	act(t, e, api.Action{Op: "goto", URL: "data:text/html,<title>one</title>"})
	e.mu.Lock()
	e.inst.kill()
	dead := e.inst.dead
	e.mu.Unlock()
	select {
	case <-dead:
	case <-time.After(10 * time.Second):
		t.Fatal("the browser did not die")
	}
	obs := act(t, e, api.Action{Op: "snapshot"})
	if !strings.Contains(obs.Note, "the browser had exited") || obs.URL != "about:blank" {
		t.Errorf("after a crash: note %q url %q", obs.Note, obs.URL)
	}
}

func TestBrowserHungPage(t *testing.T) {
	needChromium(t)
	sb := sandbox(t)
	e := New(sb, Config{})
	defer e.Close(context.Background())
	act(t, e, api.Action{Op: "goto", URL: "data:text/html,<title>loop</title>"})
	start := time.Now()
	obs := act(t, e, api.Action{Op: "evaluate", Script: "while (true) {}", TimeoutS: api.Seconds(1)})
	if !strings.Contains(obs.BrowserError, "did not finish") || !strings.Contains(obs.Note, "stopped responding") {
		t.Errorf("endless script: error %q note %q", obs.BrowserError, obs.Note)
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("the hung page took %v to answer", d)
	}
	obs = act(t, e, api.Action{Op: "goto", URL: "data:text/html,<title>after</title>"})
	if obs.Title != "after" || obs.BrowserError != "" {
		t.Errorf("after the hang: %q %q %q", obs.Title, obs.BrowserError, obs.Note)
	}
}
