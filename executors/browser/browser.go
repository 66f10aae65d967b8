// Package browser runs browser actions: one headless Chromium per sandbox,
// started lazily inside it and driven over the DevTools protocol with
// go-rod/rod.
//
// Chromium runs in the sandbox like any other process (so a containerd
// sandbox's browser sees that sandbox's network, and `localhost` is the
// sandbox's own), and it speaks DevTools over a pair of pipes
// (--remote-debugging-pipe) that only the daemon holds: there is no
// DevTools port for anything inside any sandbox to reach. rod's launcher is
// never used, so rod neither downloads a browser nor runs its leakless
// helper.
//
// rod is confined to this package.
package browser

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/proto"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
)

// Config configures browsers.
type Config struct {
	// Chromium is the browser to run, a path or a name on the sandbox's
	// PATH; "" tries chromium, chromium-browser, google-chrome and
	// google-chrome-stable.
	Chromium string
	// StartTimeout bounds a browser's start.
	StartTimeout time.Duration
	// DefaultTimeout and MaxTimeout are an action's timeout without
	// timeout_s and its cap.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// SettleMax caps the wait, after an action, for the page to load and
	// its network to go quiet.
	SettleMax time.Duration
	// MaxTextChars caps the text and the accessibility tree of an
	// observation, each.
	MaxTextChars int
	// MaxDownloadBytes caps one download; a larger one is cancelled.
	MaxDownloadBytes int64
	// Width and Height are the window's size in CSS pixels.
	Width, Height int
	Logger        *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		StartTimeout:     30 * time.Second,
		DefaultTimeout:   30 * time.Second,
		MaxTimeout:       10 * time.Minute,
		SettleMax:        5 * time.Second,
		MaxTextChars:     20000,
		MaxDownloadBytes: 100 << 20,
		Width:            1280,
		Height:           800,
	}
}

// Ops are the browser action's operations.
var Ops = []string{"goto", "click", "fill", "press", "scroll", "back", "forward", "select", "snapshot", "screenshot", "evaluate"}

// Executor runs the browser actions of one sandbox.
type Executor struct {
	sb  backends.Sandbox
	cfg Config
	log *slog.Logger

	mu     sync.Mutex // one action at a time; guards the fields below
	inst   *instance
	lost   string // why the previous browser's state is gone, for the next answer
	closed bool
}

// New returns the browser executor of sb.
func New(sb backends.Sandbox, cfg Config) *Executor {
	def := DefaultConfig()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = def.StartTimeout
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = def.DefaultTimeout
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = def.MaxTimeout
	}
	if cfg.SettleMax <= 0 {
		cfg.SettleMax = def.SettleMax
	}
	if cfg.MaxTextChars <= 0 {
		cfg.MaxTextChars = def.MaxTextChars
	}
	if cfg.MaxDownloadBytes <= 0 {
		cfg.MaxDownloadBytes = def.MaxDownloadBytes
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		cfg.Width, cfg.Height = def.Width, def.Height
	}
	return &Executor{sb: sb, cfg: cfg, log: cfg.Logger}
}

// MarkLost records that a previous daemon run had a browser in this
// sandbox: the next action is told its pages are gone.
func (e *Executor) MarkLost() {
	e.mu.Lock()
	e.lost = "the daemon restarted since the last browser action: this is a new browser, and the open page, cookies and history are gone"
	e.mu.Unlock()
}

// Close shuts the browser down: nothing of it stays running.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.inst != nil {
		e.inst.stop(ctx)
		e.inst = nil
	}
	return nil
}

// Running reports whether a browser is up, for tests and metrics.
func (e *Executor) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inst != nil && !e.inst.isDead()
}

// Execute implements executors.Executor for browser actions.
func (e *Executor) Execute(ctx context.Context, a *api.Action, _ executors.OutputSink) (api.Observation, error) {
	if a.Kind != api.KindBrowser {
		return api.Observation{}, api.Errorf(api.ErrUnsupported, "the browser executor does not run %q actions", a.Kind)
	}
	if err := validate(a); err != nil {
		return api.Observation{}, err
	}
	timeout := time.Duration(a.Timeout(e.cfg.DefaultTimeout.Seconds(), e.cfg.MaxTimeout.Seconds()) * float64(time.Second))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return api.Observation{}, api.Errorf(api.ErrUnavailable, "the sandbox is shutting down")
	}
	var note string
	if e.inst != nil && e.inst.isDead() {
		note = fmt.Sprintf("the browser had exited (%s): a new one was started, and the open page, cookies and history are gone", e.inst.deathReason())
		e.inst.stop(context.WithoutCancel(ctx))
		e.inst = nil
	}
	if e.inst == nil {
		in, err := e.start(ctx)
		if err != nil {
			return api.Observation{}, err
		}
		e.inst = in
		if e.lost != "" {
			note = executors.JoinNotes(note, e.lost)
			e.lost = ""
		}
	}
	in := e.inst
	if why := in.takeCrash(); why != "" {
		if err := in.replacePage(ctx); err != nil {
			return api.Observation{}, fmt.Errorf("replace the crashed page: %w", err)
		}
		note = executors.JoinNotes(note, why+": it was replaced by a blank page")
	}
	obs := api.Observation{Kind: api.KindBrowser}
	actx, cancel := context.WithTimeout(ctx, timeout)
	err := in.do(actx, a, &obs)
	cancel()
	// A page that did not finish its op may be hung: do not wait long for
	// it to answer the snapshot.
	snapWait := 10 * time.Second
	if err != nil {
		switch {
		case in.isDead():
			obs.BrowserError = fmt.Sprintf("the browser exited during the action (%s); the next action starts a new one", in.deathReason())
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			obs.BrowserError = fmt.Sprintf("the action did not finish within %s", timeout)
			snapWait = 2 * time.Second
		case ctx.Err() != nil:
			return api.Observation{}, api.Errorf(api.ErrUnavailable, "the sandbox is shutting down")
		default:
			obs.BrowserError = describe(err).Error()
		}
	}
	if !in.isDead() {
		if serr := in.snapshot(ctx, a, &obs, snapWait); serr != nil {
			if in.isDead() {
				note = executors.JoinNotes(note, fmt.Sprintf("the browser exited (%s); the next action starts a new one", in.deathReason()))
			} else if rerr := in.replacePage(ctx); rerr == nil {
				note = executors.JoinNotes(note, fmt.Sprintf("the page stopped responding (%s): it was closed and replaced by a blank page", describe(serr)))
			} else {
				in.kill()
				note = executors.JoinNotes(note, "the browser stopped responding: it was stopped, and the next action starts a new one")
			}
		}
	}
	obs.Note = executors.JoinNotes(note, executors.JoinNotes(obs.Note, in.takeEvents()))
	return obs, nil
}

// validate checks that a carries what its op needs.
func validate(a *api.Action) error {
	need := func(field, val string) error {
		if val == "" {
			return api.Errorf(api.ErrInvalidArgument, "browser op %q needs %q", a.Op, field)
		}
		return nil
	}
	switch a.Op {
	case "goto":
		return need("url", a.URL)
	case "click", "fill", "select":
		return need("target", a.Target)
	case "press":
		if err := need("key", a.Key); err != nil {
			return err
		}
		_, err := parseKeys(a.Key)
		return err
	case "evaluate":
		return need("script", a.Script)
	case "scroll":
		switch strings.ToLower(a.Text) {
		case "", "up", "down", "top", "bottom", "left", "right":
			return nil
		}
		return api.Errorf(api.ErrInvalidArgument, "browser op \"scroll\": text is %q; want up, down, top, bottom, left or right (or a target to scroll into view)", a.Text)
	case "back", "forward", "snapshot", "screenshot":
		return nil
	case "":
		return api.Errorf(api.ErrInvalidArgument, "browser action needs \"op\": one of %s", strings.Join(Ops, ", "))
	}
	return api.Errorf(api.ErrInvalidArgument, "unknown browser op %q: want one of %s", a.Op, strings.Join(Ops, ", "))
}

// describe turns a rod or DevTools error into one line for the agent.
func describe(err error) error {
	var nav *rod.NavigationError
	if errors.As(err, &nav) {
		return errors.New(nav.Reason)
	}
	var ce *cdp.Error
	if errors.As(err, &ce) {
		if ce.Data != "" {
			return fmt.Errorf("%s: %s", ce.Message, ce.Data)
		}
		return errors.New(ce.Message)
	}
	return err
}

// instance is one running browser.
type instance struct {
	cfg        Config
	proc       backends.Process
	conn       *pipeConn
	b          *rod.Browser
	page       *rod.Page
	pageCancel context.CancelFunc // ends the page's event loop
	cancel     context.CancelFunc // ends the event loops
	stderr     *executors.Capture
	errMu      sync.Mutex // guards stderr

	dead    chan struct{}
	status  backends.ExitStatus
	waitErr error

	// Element ids of the current document: [eN] in the tree.
	root proto.DOMBackendNodeID
	ids  map[proto.DOMBackendNodeID]string
	rev  map[string]proto.DOMBackendNodeID

	evMu      sync.Mutex
	events    []string // dialogs and downloads, for the next observation
	crashed   string
	downloads map[string]*download
}

type download struct {
	name      string
	cancelled bool
}

func (in *instance) isDead() bool {
	select {
	case <-in.dead:
		return true
	default:
		return false
	}
}

func (in *instance) deathReason() string {
	st := in.status
	var why string
	switch {
	case in.waitErr != nil:
		why = in.waitErr.Error()
	case st.Signal != 0:
		why = "killed by " + unix.SignalName(st.Signal)
	default:
		why = "exit code " + strconv.Itoa(st.Code)
	}
	if st.OOMKilled {
		why += ", out of memory"
	}
	return why
}

func (in *instance) writeStderr(p []byte) (int, error) {
	in.errMu.Lock()
	defer in.errMu.Unlock()
	return in.stderr.Write(p)
}

func (in *instance) stderrText() string {
	in.errMu.Lock()
	defer in.errMu.Unlock()
	return strings.TrimSpace(in.stderr.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// launch is the shell that starts the browser in the sandbox: it finds
// it, gives it a fresh private profile, and moves the DevTools pipes to
// the fds Chromium expects (3 in, 4 out). It runs the browser as a child,
// not with exec, so the profile is removed when the browser ends.
const launch = `set -u
b=$1; shift
if [ -z "$b" ]; then
  for c in chromium chromium-browser google-chrome google-chrome-stable; do
    if b=$(command -v "$c"); then break; fi
    b=
  done
elif case $b in */*) false;; *) true;; esac; then
  b=$(command -v "$b") || b=
fi
if [ -z "$b" ] || [ ! -x "$b" ]; then
  echo "sandboxd: no-chromium" >&2
  exit 127
fi
# Distribution launchers are shell scripts that read /etc files an image may
# lack and add nothing a headless browser needs: run the binary beside them.
if [ "$(head -c 2 "$b")" = "#!" ]; then
  for r in /usr/lib/chromium/chromium /usr/lib/chromium-browser/chromium-browser; do
    if [ -x "$r" ]; then b=$r; break; fi
  done
fi
d=${TMPDIR:-/tmp}/.sandboxd-browser
rm -rf "$d" && mkdir -m 700 "$d" || exit 126
mkdir -m 700 "$d/t" && cd "$d" || exit 126
# Chromium binds a unix socket under TMPDIR, whose path may not pass 107
# bytes: a relative one from inside the profile is short and goes with it.
export HOME="$d" XDG_CONFIG_HOME="$d/config" XDG_CACHE_HOME="$d/cache" TMPDIR=t
exec 3<&0 4>&1 </dev/null >&2
"$b" "$@" --user-data-dir="$d/profile"
s=$?
cd / && rm -rf "$d"
exit $s
`

// flags for every browser. --no-sandbox: the sandbox is the isolation
// boundary, and Chromium's own sandbox needs namespaces or a setuid helper
// that containers deny.
func (e *Executor) flags() []string {
	return []string{
		"--headless", "--remote-debugging-pipe", "--no-sandbox",
		"--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-default-apps", "--disable-breakpad", "--disable-crash-reporter",
		"--disable-client-side-phishing-detection", "--disable-domain-reliability",
		// One renderer for all frames of a page, so the page's request
		// blocking covers its iframes too.
		"--disable-site-isolation-trials",
		"--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider,IsolateOrigins,site-per-process",
		"--no-first-run", "--no-default-browser-check", "--mute-audio", "--hide-scrollbars",
		"--password-store=basic", "--use-mock-keychain", "--metrics-recording-only",
		"--noerrdialogs", "--force-color-profile=srgb",
		// The page is never in front of anyone: do not slow it down as a
		// background tab.
		"--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows",
		"--disable-renderer-backgrounding", "--disable-ipc-flooding-protection",
		"--disable-hang-monitor", "--disable-prompt-on-repost",
		"--disable-component-extensions-with-background-pages",
		"--window-size=" + strconv.Itoa(e.cfg.Width) + "," + strconv.Itoa(e.cfg.Height),
		"about:blank",
	}
}

// start starts a browser in the sandbox and connects to it.
func (e *Executor) start(ctx context.Context) (_ *instance, err error) {
	downloads, err := e.downloadDir()
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	in := &instance{
		cfg: e.cfg, dead: make(chan struct{}),
		stderr:    &executors.Capture{Limit: 2048, Runes: true},
		downloads: map[string]*download{},
	}
	in.conn = newPipeConn(inW)
	argv := append([]string{"/bin/sh", "-c", launch, "sandboxd-browser", e.cfg.Chromium}, e.flags()...)
	p, err := e.sb.Start(ctx, backends.ProcessSpec{
		Argv: argv, Stdin: inR, Stdout: in.conn, Stderr: writerFunc(in.writeStderr),
	})
	if err != nil {
		in.conn.Close()
		if errors.Is(err, api.ErrNotFound) {
			return nil, api.Errorf(api.ErrUnavailable, "the sandbox has no /bin/sh to start the browser with: %v", err)
		}
		return nil, fmt.Errorf("start the browser: %w", err)
	}
	in.proc = p
	go func() {
		in.status, in.waitErr = p.Wait(context.Background())
		// The output has all been delivered: end the reader's stream.
		in.conn.EndOutput()
		close(in.dead)
	}()
	defer func() {
		if err != nil {
			in.stop(context.WithoutCancel(ctx))
		}
	}()
	bctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	client := cdp.New().Start(in.conn)
	in.b = rod.New().Client(client).Context(bctx).NoDefaultDevice()
	// Everything below talks to the browser with no deadline of its own:
	// a browser that does not answer in time is killed, which ends every
	// call in flight.
	err = in.bounded(ctx, e.cfg.StartTimeout, func() error {
		if err := in.b.Connect(); err != nil {
			return err
		}
		if err := (proto.BrowserSetDownloadBehavior{
			Behavior: proto.BrowserSetDownloadBehaviorBehaviorAllow, DownloadPath: downloads, EventsEnabled: true,
		}).Call(in.b); err != nil {
			return err
		}
		go in.b.EachEvent(in.onDownloadBegin, in.onDownloadProgress)()
		pages, err := in.b.Pages()
		if err != nil {
			return err
		}
		var page *rod.Page
		if len(pages) > 0 {
			page = pages[0]
		} else if page, err = in.b.Page(proto.TargetCreateTarget{URL: "about:blank"}); err != nil {
			return err
		}
		return in.setPage(page)
	})
	if err != nil {
		return nil, in.startFailure(err)
	}
	return in, nil
}

// bounded runs fn, which talks to the browser; if fn has not returned
// when d passes or ctx ends, the browser is killed, which makes fn return.
func (in *instance) bounded(ctx context.Context, d time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		in.kill()
		<-done
		return fmt.Errorf("the browser did not answer within %s", d)
	case <-ctx.Done():
		in.kill()
		<-done
		return ctx.Err()
	}
}

// startFailure explains why a browser did not come up.
func (in *instance) startFailure(err error) error {
	if in.isDead() || waitDead(in.dead, time.Second) {
		text := in.stderrText()
		if in.status.Code == 127 && strings.Contains(text, "sandboxd: no-chromium") {
			return api.Errorf(api.ErrUnavailable, "no Chromium in the sandbox (tried chromium, chromium-browser, google-chrome and google-chrome-stable on its PATH): install one, e.g. the Debian package chromium, or set browser.chromium")
		}
		if text != "" {
			return api.Errorf(api.ErrUnavailable, "the browser exited at start (%s): %s", in.deathReason(), lastLines(text, 50))
		}
		return api.Errorf(api.ErrUnavailable, "the browser exited at start (%s)", in.deathReason())
	}
	return api.Errorf(api.ErrUnavailable, "start the browser: %v", describe(err))
}

func waitDead(dead <-chan struct{}, d time.Duration) bool {
	select {
	case <-dead:
		return true
	case <-time.After(d):
		return false
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// downloadDir makes <workdir>/.downloads and returns it as the sandbox
// sees it.
func (e *Executor) downloadDir() (string, error) {
	fsys := e.sb.FS()
	view := path.Join(e.sb.Workdir(), ".downloads")
	rel, err := fsys.Rel(view)
	if err != nil {
		return "", err
	}
	root, err := fsys.Root()
	if err != nil {
		return "", err
	}
	defer root.Close()
	if err := root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", backends.FSError(view, err)
	}
	if uid, gid := fsys.Owner(); uid >= 0 {
		if err := root.Lchown(rel, uid, gid); err != nil {
			return "", backends.FSError(view, err)
		}
	}
	return view, nil
}

// setPage makes p the page actions work on: blocked URLs, dialogs and
// crashes are taken care of.
func (in *instance) setPage(p *rod.Page) (err error) {
	// The page's event loop ends with the page, not with the browser.
	ctx, cancel := context.WithCancel(in.b.GetContext())
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	p = p.Context(ctx)
	c := p
	if err := (proto.NetworkEnable{}).Call(c); err != nil {
		return err
	}
	// Only requests matching the patterns pause, so the rest of the
	// page's traffic pays nothing for this.
	patterns := make([]*proto.FetchRequestPattern, len(blockedPatterns))
	for i, pat := range blockedPatterns {
		patterns[i] = &proto.FetchRequestPattern{URLPattern: pat}
	}
	if err := (proto.FetchEnable{Patterns: patterns}).Call(c); err != nil {
		return err
	}
	if err := (proto.PageEnable{}).Call(c); err != nil {
		return err
	}
	// With the domain on, the renderer keeps its accessibility tree up to
	// date instead of building one for every snapshot: several times
	// cheaper per action.
	if err := (proto.AccessibilityEnable{}).Call(c); err != nil {
		return err
	}
	if err := (proto.EmulationSetDeviceMetricsOverride{Width: in.cfg.Width, Height: in.cfg.Height, DeviceScaleFactor: 1}).Call(c); err != nil {
		return err
	}
	go p.EachEvent(func(ev *proto.PageJavascriptDialogOpening) {
		in.addEvent(fmt.Sprintf("the page opened a %s dialog (%q); it was answered with OK", ev.Type, oneLine(ev.Message)))
		go func() {
			_ = proto.PageHandleJavaScriptDialog{Accept: true, PromptText: ev.DefaultPrompt}.Call(p)
		}()
	}, func(ev *proto.FetchRequestPaused) {
		in.addEvent(fmt.Sprintf("a request to %s was blocked: cloud-metadata addresses and local files are off limits", oneLine(ev.Request.URL)))
		go func() {
			_ = proto.FetchFailRequest{RequestID: ev.RequestID, ErrorReason: proto.NetworkErrorReasonBlockedByClient}.Call(p)
		}()
	}, func(*proto.InspectorTargetCrashed) {
		in.evMu.Lock()
		in.crashed = "the page crashed"
		in.evMu.Unlock()
	})()
	if in.pageCancel != nil {
		in.pageCancel()
	}
	in.page, in.pageCancel = p, cancel
	in.resetIDs()
	return nil
}

// replacePage closes the current page and opens a blank one.
func (in *instance) replacePage(ctx context.Context) error {
	old := in.page
	return in.bounded(context.WithoutCancel(ctx), 10*time.Second, func() error {
		p, err := in.b.Page(proto.TargetCreateTarget{URL: "about:blank"})
		if err != nil {
			return err
		}
		if old != nil {
			_, _ = (proto.TargetCloseTarget{TargetID: old.TargetID}).Call(in.b)
		}
		in.evMu.Lock()
		in.crashed = ""
		in.evMu.Unlock()
		return in.setPage(p)
	})
}

func (in *instance) takeCrash() string {
	in.evMu.Lock()
	defer in.evMu.Unlock()
	return in.crashed
}

func (in *instance) addEvent(s string) {
	in.evMu.Lock()
	defer in.evMu.Unlock()
	if len(in.events) < 20 {
		in.events = append(in.events, s)
	}
}

func (in *instance) takeEvents() string {
	in.evMu.Lock()
	defer in.evMu.Unlock()
	s := strings.Join(in.events, "; ")
	in.events = nil
	return s
}

func (in *instance) onDownloadBegin(ev *proto.BrowserDownloadWillBegin) {
	in.evMu.Lock()
	defer in.evMu.Unlock()
	if len(in.downloads) < 1000 {
		in.downloads[ev.GUID] = &download{name: ev.SuggestedFilename}
	}
}

func (in *instance) onDownloadProgress(ev *proto.BrowserDownloadProgress) {
	in.evMu.Lock()
	d := in.downloads[ev.GUID]
	if d == nil {
		d = &download{}
	}
	name := path.Join(".downloads", path.Base("/"+d.name))
	switch {
	case ev.State == proto.BrowserDownloadProgressStateInProgress && int64(ev.ReceivedBytes) > in.cfg.MaxDownloadBytes && !d.cancelled:
		d.cancelled = true
		in.evMu.Unlock()
		in.addEvent(fmt.Sprintf("the download of %s was cancelled: it passed the %d MiB cap", name, in.cfg.MaxDownloadBytes>>20))
		go func() { _ = (proto.BrowserCancelDownload{GUID: ev.GUID}).Call(in.b) }()
		return
	case ev.State == proto.BrowserDownloadProgressStateCompleted:
		delete(in.downloads, ev.GUID)
		in.evMu.Unlock()
		in.addEvent(fmt.Sprintf("downloaded %s (%d bytes)", name, int64(ev.ReceivedBytes)))
		return
	case ev.State == proto.BrowserDownloadProgressStateCanceled:
		delete(in.downloads, ev.GUID)
	}
	in.evMu.Unlock()
}

// kill stops the browser at once.
func (in *instance) kill() {
	if in.proc != nil {
		_ = in.proc.Kill()
	}
}

// stop closes the browser (politely first, so it removes its profile),
// and waits until it is gone.
func (in *instance) stop(ctx context.Context) {
	if in.proc != nil && !in.isDead() && in.b != nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = (proto.BrowserClose{}).Call(in.b.Context(cctx))
		cancel()
		if !waitDead(in.dead, 3*time.Second) {
			in.kill()
		}
	} else {
		in.kill()
	}
	// Nothing reads the browser's messages after this; a write blocked on
	// them fails instead of holding the output pump.
	_ = in.conn.Close()
	if in.proc != nil && !waitDead(in.dead, 10*time.Second) {
		in.kill()
	}
	if in.cancel != nil {
		in.cancel()
	}
}

// do runs the action's op on the page.
func (in *instance) do(ctx context.Context, a *api.Action, obs *api.Observation) error {
	p := in.page.Context(ctx)
	switch a.Op {
	case "goto":
		u, err := normalizeURL(a.URL)
		if err == nil {
			err = checkHost(ctx, u.Hostname(), resolveHost)
		}
		if err != nil {
			obs.BrowserError = err.Error()
			return nil
		}
		return in.settle(ctx, func() error { return p.Navigate(u.String()) }, true)
	case "back", "forward":
		return in.history(ctx, p, a.Op)
	case "click":
		el, err := in.element(ctx, p, a.Target)
		if err != nil {
			return err
		}
		return in.settle(ctx, func() error { return el.Click(proto.InputMouseButtonLeft, 1) }, false)
	case "fill":
		el, err := in.element(ctx, p, a.Target)
		if err != nil {
			return err
		}
		return in.settle(ctx, func() error {
			if err := el.SelectAllText(); err != nil {
				return err
			}
			if a.Text == "" {
				return p.Keyboard.Type(keyBackspace)
			}
			return el.Input(a.Text)
		}, false)
	case "select":
		el, err := in.element(ctx, p, a.Target)
		if err != nil {
			return err
		}
		return in.settle(ctx, func() error { return selectOption(el, a.Text) }, false)
	case "press":
		keys, _ := parseKeys(a.Key)
		if a.Target != "" {
			el, err := in.element(ctx, p, a.Target)
			if err != nil {
				return err
			}
			if err := el.Focus(); err != nil {
				return err
			}
		}
		return in.settle(ctx, func() error { return keys.press(p) }, false)
	case "scroll":
		if a.Target != "" {
			el, err := in.element(ctx, p, a.Target)
			if err != nil {
				return err
			}
			return el.ScrollIntoView()
		}
		_, err := proto.RuntimeEvaluate{Expression: scrollJS(a.Text), UserGesture: true}.Call(p)
		return err
	case "evaluate":
		return in.evaluate(p, a.Script, obs)
	}
	return nil // snapshot, screenshot: what follows every op
}

// settle runs act and waits, up to SettleMax, for the page to load and
// its network to go quiet.
func (in *instance) settle(ctx context.Context, act func() error, navigation bool) error {
	sctx, cancel := context.WithTimeout(ctx, in.cfg.SettleMax)
	defer cancel()
	quiet := 100 * time.Millisecond
	if navigation {
		quiet = 250 * time.Millisecond
	}
	wait := in.page.Context(sctx).WaitRequestIdle(quiet, nil, nil, nil)
	if err := act(); err != nil {
		cancel()
		wait()
		return err
	}
	wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The load event, if a document is still loading.
	lctx, lcancel := context.WithTimeout(ctx, in.cfg.SettleMax)
	defer lcancel()
	_ = in.page.Context(lctx).WaitLoad()
	return ctx.Err()
}

func (in *instance) history(ctx context.Context, p *rod.Page, op string) error {
	h, err := proto.PageGetNavigationHistory{}.Call(p)
	if err != nil {
		return err
	}
	i := h.CurrentIndex - 1
	if op == "forward" {
		i = h.CurrentIndex + 1
	}
	if i < 0 || i >= len(h.Entries) {
		if op == "back" {
			return errors.New("there is no page to go back to")
		}
		return errors.New("there is no page to go forward to")
	}
	return in.settle(ctx, func() error {
		return proto.PageNavigateToHistoryEntry{EntryID: h.Entries[i].ID}.Call(p)
	}, true)
}

var elementID = regexp.MustCompile(`^\[?(e[0-9]+)\]?$`)

// element finds a target: an id of the last snapshot, or a CSS selector.
func (in *instance) element(ctx context.Context, p *rod.Page, target string) (*rod.Element, error) {
	if m := elementID.FindStringSubmatch(strings.TrimSpace(target)); m != nil {
		id, ok := in.rev[m[1]]
		if !ok {
			return nil, fmt.Errorf("no element %s on this page: take a snapshot and use an id from its tree", m[1])
		}
		res, err := proto.DOMResolveNode{BackendNodeID: id}.Call(p)
		if err != nil {
			return nil, fmt.Errorf("element %s is gone from the page: take a new snapshot", m[1])
		}
		return p.ElementFromObject(res.Object)
	}
	ok, el, err := p.Has(target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %v", target, describe(err))
	}
	if !ok {
		return nil, fmt.Errorf("no element matches %q", target)
	}
	return el, nil
}

// selectOption picks the option of a <select> whose value or label is
// text (exactly, else ignoring case and spaces).
func selectOption(el *rod.Element, text string) error {
	res, err := el.Eval(`function (want) {
  if (!(this instanceof HTMLSelectElement)) return "not a <select> element";
  const norm = s => s.trim().replace(/\s+/g, " ").toLowerCase();
  let opt = Array.from(this.options).find(o => o.value === want || o.label === want);
  if (!opt) opt = Array.from(this.options).find(o => norm(o.label) === norm(want) || norm(o.value) === norm(want));
  if (!opt) return "no option " + JSON.stringify(want) + "; options: " + Array.from(this.options).map(o => JSON.stringify(o.label)).join(", ");
  this.value = opt.value;
  this.dispatchEvent(new Event("input", {bubbles: true}));
  this.dispatchEvent(new Event("change", {bubbles: true}));
  return "";
}`, text)
	if err != nil {
		return err
	}
	if msg := res.Value.Str(); msg != "" {
		return errors.New(msg)
	}
	return nil
}

func scrollJS(dir string) string {
	switch strings.ToLower(dir) {
	case "up":
		return "window.scrollBy(0, -window.innerHeight * 0.9)"
	case "top":
		return "window.scrollTo(0, 0)"
	case "bottom":
		return "window.scrollTo(0, document.documentElement.scrollHeight)"
	case "left":
		return "window.scrollBy(-window.innerWidth * 0.9, 0)"
	case "right":
		return "window.scrollBy(window.innerWidth * 0.9, 0)"
	}
	return "window.scrollBy(0, window.innerHeight * 0.9)"
}

// maxResult caps an evaluate result.
const maxResult = 64 << 10

func (in *instance) evaluate(p *rod.Page, script string, obs *api.Observation) error {
	// REPL mode allows top-level await; a promise the script leaves is
	// awaited below, as an agent expects of fetch(...).then(...).
	res, err := proto.RuntimeEvaluate{
		Expression: script, AwaitPromise: true, UserGesture: true, ReplMode: true,
	}.Call(p)
	if err != nil {
		return err
	}
	r, ex := res.Result, res.ExceptionDetails
	if ex == nil && r != nil && r.ObjectID != "" {
		defer func() { _ = proto.RuntimeReleaseObject{ObjectID: r.ObjectID}.Call(p) }()
		byValue, err := proto.RuntimeCallFunctionOn{
			FunctionDeclaration: "async function () { return await this; }",
			ObjectID:            r.ObjectID, AwaitPromise: true, ReturnByValue: true, UserGesture: true,
		}.Call(p)
		if err != nil {
			return err
		}
		r, ex = byValue.Result, byValue.ExceptionDetails
	}
	if ex != nil {
		msg := ex.Text
		if ex.Exception != nil && ex.Exception.Description != "" {
			msg = ex.Exception.Description
		} else if ex.Exception != nil && !ex.Exception.Value.Nil() {
			msg = ex.Text + " " + ex.Exception.Value.JSON("", "")
		}
		obs.BrowserError = "the script threw: " + lastLines(msg, 10)
		return nil
	}
	switch {
	case r == nil:
	case r.Type == proto.RuntimeRemoteObjectTypeUndefined:
		obs.Result = "undefined"
	case r.UnserializableValue != "":
		obs.Result = string(r.UnserializableValue)
	default:
		obs.Result = r.Value.JSON("", "")
	}
	if len(obs.Result) > maxResult {
		obs.Result = obs.Result[:maxResult]
		obs.Truncated = true
	}
	return nil
}

// pageTextJS returns the page's readable text, head and tail when long.
const pageTextJS = `(() => {
  const max = %d;
  const root = document.body || document.documentElement;
  const t = root ? (root.innerText || "") : "";
  const r = {url: location.href, title: document.title, n: t.length};
  if (t.length <= max) r.text = t;
  else { r.head = t.slice(0, max / 2); r.tail = t.slice(t.length - max / 2); }
  return r;
})()`

// snapshot fills in what every answer carries: url, title, text, the
// accessibility tree, and a screenshot when asked. An error means the
// page did not answer.
func (in *instance) snapshot(ctx context.Context, a *api.Action, obs *api.Observation, wait time.Duration) error {
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	p := in.page.Context(sctx)
	// The reads are independent: ask for all of them at once, so their
	// round trips overlap.
	var (
		wg               sync.WaitGroup
		text             *proto.RuntimeEvaluateResult
		shot             *proto.PageCaptureScreenshotResult
		textErr, shotErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		text, textErr = proto.RuntimeEvaluate{Expression: fmt.Sprintf(pageTextJS, in.cfg.MaxTextChars), ReturnByValue: true}.Call(p)
	}()
	if a.Op == "screenshot" || a.Screenshot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shot, shotErr = proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng}.Call(p)
		}()
	}
	tree, treeErr := proto.AccessibilityGetFullAXTree{}.Call(p)
	wg.Wait()
	if err := errors.Join(textErr, shotErr, treeErr); err != nil {
		return err
	}
	if text.ExceptionDetails == nil && text.Result != nil {
		v := text.Result.Value
		obs.URL, obs.Title = v.Get("url").Str(), v.Get("title").Str()
		if head := v.Get("head"); !head.Nil() {
			n := v.Get("n").Int()
			h, t := head.Str(), v.Get("tail").Str()
			obs.Text = fmt.Sprintf("%s\n[... %d characters omitted: the text is capped at %d]\n%s", h, n-len([]rune(h))-len([]rune(t)), in.cfg.MaxTextChars, t)
			obs.Truncated = true
		} else {
			obs.Text = v.Get("text").Str()
		}
	}
	if obs.URL == "" || strings.HasPrefix(obs.URL, "chrome-error:") {
		// An error page's location is Chromium's own; the target knows
		// the URL that failed.
		info, err := proto.TargetGetTargetInfo{TargetID: in.page.TargetID}.Call(p)
		if err != nil {
			return err
		}
		obs.URL = info.TargetInfo.URL
		if obs.Title == "" {
			obs.Title = info.TargetInfo.Title
		}
	}
	in.noteRoot(tree.Nodes)
	var cut bool
	obs.AXTree, cut = formatAXTree(tree.Nodes, in.tag, in.cfg.MaxTextChars)
	obs.Truncated = obs.Truncated || cut
	if shot != nil {
		obs.Screenshot = base64.StdEncoding.EncodeToString(shot.Data)
	}
	return nil
}

// noteRoot starts a new numbering of element ids when the document changed.
func (in *instance) noteRoot(nodes []*proto.AccessibilityAXNode) {
	for _, n := range nodes {
		if n != nil && n.ParentID == "" && axString(n.Role) == "RootWebArea" {
			if n.BackendDOMNodeID != in.root {
				in.resetIDs()
				in.root = n.BackendDOMNodeID
			}
			return
		}
	}
}

func (in *instance) resetIDs() {
	in.root = 0
	in.ids = map[proto.DOMBackendNodeID]string{}
	in.rev = map[string]proto.DOMBackendNodeID{}
}

// tag returns the id of an interactive node, the same one for as long as
// the document lives.
func (in *instance) tag(id proto.DOMBackendNodeID) string {
	if s, ok := in.ids[id]; ok {
		return s
	}
	if len(in.ids) >= 100000 {
		return ""
	}
	s := "e" + strconv.Itoa(len(in.ids)+1)
	in.ids[id] = s
	in.rev[s] = id
	return s
}
