// Package ipython executes ipython actions: a real IPython kernel
// (ipykernel) per sandbox, started inside the sandbox on its first cell and
// driven from Go over the Jupyter messaging protocol v5 (ZeroMQ, ipc
// transport, HMAC-SHA256 signed messages).
//
// The kernel binds its five sockets in a directory of the sandbox's (its
// /tmp when the sandbox's files include one, else its workdir); the daemon
// reaches them through the sandbox's FS root and connects to each only
// after opening it with O_PATH, no symlink followed, and checking it is a
// socket: a sandbox that swaps a socket for a link cannot make the daemon
// connect anywhere else.
//
// A cell past its timeout is interrupted (SIGINT to the kernel, its
// interrupt mode) and answered with what it printed so far; the kernel and
// its variables survive. A kernel that died is started again on the next
// cell, and that cell's observation says the state was lost.
package ipython

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/executors"
)

// Config configures kernels.
type Config struct {
	// Python is the interpreter that runs ipykernel; "" tries python3 on
	// the sandbox's PATH, then /usr/bin/python3.
	Python string
	// StartTimeout bounds a kernel's start.
	StartTimeout time.Duration
	// DefaultTimeout and MaxTimeout are a cell's timeout without
	// timeout_s and its cap.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// InterruptWait is how long a timed-out cell may take to stop.
	InterruptWait time.Duration
	// MaxOutputChars caps an observation's output (first and last half).
	MaxOutputChars int
	// Cwd, if set, returns the directory the kernel should be in before a
	// cell (the default bash session's), and whether there is one.
	Cwd    func() (string, bool)
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		StartTimeout:   60 * time.Second,
		DefaultTimeout: 60 * time.Second,
		MaxTimeout:     24 * time.Hour,
		InterruptWait:  5 * time.Second,
		MaxOutputChars: 30000,
	}
}

// Executor runs the cells of one sandbox in its kernel.
type Executor struct {
	sb  backends.Sandbox
	cfg Config
	log *slog.Logger

	mu     sync.Mutex // one cell at a time; guards the fields below
	k      *kernel
	lost   string // why the previous kernel's state is gone, for the next answer
	closed bool
}

// New returns the ipython executor of sb.
func New(sb backends.Sandbox, cfg Config) *Executor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultConfig().StartTimeout
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultConfig().DefaultTimeout
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultConfig().MaxTimeout
	}
	if cfg.InterruptWait <= 0 {
		cfg.InterruptWait = DefaultConfig().InterruptWait
	}
	if cfg.MaxOutputChars <= 0 {
		cfg.MaxOutputChars = DefaultConfig().MaxOutputChars
	}
	return &Executor{sb: sb, cfg: cfg, log: cfg.Logger}
}

// MarkLost records that a previous daemon run had a kernel in this
// sandbox: the first cell is told its state is gone.
func (e *Executor) MarkLost() {
	e.mu.Lock()
	e.lost = "the daemon restarted since the last cell: this is a new kernel, and the variables, imports and definitions of earlier cells are gone"
	e.mu.Unlock()
}

// Close shuts the kernel down.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.k != nil {
		e.k.shutdown(ctx)
		e.k = nil
	}
	return nil
}

// Execute implements executors.Executor for ipython actions.
func (e *Executor) Execute(ctx context.Context, a *api.Action, out executors.OutputSink) (api.Observation, error) {
	if a.Kind != api.KindIPython {
		return api.Observation{}, api.Errorf(api.ErrUnsupported, "the ipython executor does not run %q actions", a.Kind)
	}
	timeout := time.Duration(a.Timeout(e.cfg.DefaultTimeout.Seconds(), e.cfg.MaxTimeout.Seconds()) * float64(time.Second))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return api.Observation{}, api.Errorf(api.ErrUnavailable, "the sandbox is shutting down")
	}
	var note string
	if e.k != nil && e.k.isDead() {
		note = fmt.Sprintf("the kernel had died (%s): a new one was started, and the variables, imports and definitions of earlier cells are gone", e.k.deathReason())
		e.k.shutdown(context.WithoutCancel(ctx))
		e.k = nil
	}
	if e.k == nil {
		k, err := e.start(ctx)
		if err != nil {
			return api.Observation{}, err
		}
		e.k = k
		if e.lost != "" {
			note = executors.JoinNotes(note, e.lost)
			e.lost = ""
		}
	}
	if e.cfg.Cwd != nil {
		if dir, ok := e.cfg.Cwd(); ok && dir != e.k.cwd {
			if err := e.k.chdir(ctx, dir); err == nil {
				e.k.cwd = dir
			} else {
				e.log.Debug("ipython: follow bash's cwd", "dir", dir, "err", err)
			}
		}
	}
	obs, err := e.k.execute(ctx, a.Code, timeout, e.cfg.InterruptWait, out, e.cfg.MaxOutputChars)
	if errors.Is(err, errGone) {
		// The kernel died before it took the cell (killed while idle, say):
		// run the cell in a new one.
		note = executors.JoinNotes(note, fmt.Sprintf("the kernel had died (%s): a new one was started, and the variables, imports and definitions of earlier cells are gone", e.k.deathReason()))
		e.k.shutdown(context.WithoutCancel(ctx))
		e.k = nil
		k, serr := e.start(ctx)
		if serr != nil {
			return api.Observation{}, serr
		}
		e.k = k
		obs, err = e.k.execute(ctx, a.Code, timeout, e.cfg.InterruptWait, out, e.cfg.MaxOutputChars)
	}
	if err != nil {
		return api.Observation{}, err
	}
	obs.Kind = a.Kind
	obs.Note = executors.JoinNotes(note, obs.Note)
	return obs, nil
}

// lockedCapture is a Capture written from two goroutines (a process's
// stdout and stderr pumps).
type lockedCapture struct {
	mu sync.Mutex
	c  executors.Capture
}

func (l *lockedCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Write(p)
}

func (l *lockedCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.String()
}

// errGone is execute's answer when the kernel went away before it took
// the cell.
var errGone = errors.New("the kernel is gone")

// ansi matches terminal escape sequences in tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// launcher starts the kernel: ipykernel_launcher minus per-cell and
// start-up work the daemon has no use for (launch.py says which), each
// left out only on an ipykernel it was written for. It is passed with -c,
// so it needs no file inside the sandbox.
//
//go:embed launch.py
var launcher string

// kernel is one running ipykernel and the daemon's sockets to it.
type kernel struct {
	proc    backends.Process
	sig     signer
	cancel  context.CancelFunc // ends the sockets
	shell   zmq4.Socket
	ctrl    zmq4.Socket
	iopub   chan message // decoded iopub messages
	replies chan message // decoded shell replies
	fds     []int        // O_PATH descriptors of the sockets, kept while connected
	cwd     string

	sb      backends.Sandbox
	dirRel  string         // the socket directory, relative to the FS root
	stderr  *lockedCapture // the kernel process's own stdout and stderr
	dead    chan struct{}
	status  backends.ExitStatus
	waitErr error
}

func (k *kernel) isDead() bool {
	select {
	case <-k.dead:
		return true
	default:
		return false
	}
}

// awaitExit gives a kernel that stopped answering a moment (2 s) for its
// exit to be seen, so deathReason can say how it ended.
func (k *kernel) awaitExit() {
	select {
	case <-k.dead:
	case <-time.After(2 * time.Second):
	}
}

func (k *kernel) deathReason() string {
	if !k.isDead() {
		// Still running (status is not ours to read yet) but unreachable.
		return "it stopped taking messages"
	}
	st := k.status
	switch {
	case k.waitErr != nil:
		return k.waitErr.Error()
	case st.Signal != 0:
		return "killed by " + unix.SignalName(st.Signal)
	}
	return "exit code " + strconv.Itoa(st.Code)
}

// python finds the interpreter that can run ipykernel.
func (e *Executor) python(ctx context.Context) (string, error) {
	candidates := []string{"python3", "/usr/bin/python3"}
	if e.cfg.Python != "" {
		candidates = []string{e.cfg.Python}
	}
	for _, py := range candidates {
		p, err := e.sb.Start(ctx, backends.ProcessSpec{Argv: []string{py, "-c", "import ipykernel"}})
		if err != nil {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := p.Wait(wctx)
		cancel()
		if err != nil {
			_ = p.Kill()
			continue
		}
		if st.Code == 0 {
			return py, nil
		}
	}
	return "", api.Errorf(api.ErrUnavailable, "no Python in the sandbox can import ipykernel (tried %s): install it, e.g. the Debian package python3-ipykernel, or `pip install ipykernel`, or set ipython.python", strings.Join(candidates, ", "))
}

// Channel numbers: the kernel binds ipc://<prefix>-<n>.
const (
	chShell = iota + 1
	chIOPub
	chStdin
	chControl
	chHB
)

// start starts a kernel in the sandbox and connects to it.
func (e *Executor) start(ctx context.Context) (_ *kernel, err error) {
	py, err := e.python(ctx)
	if err != nil {
		return nil, err
	}
	fsys := e.sb.FS()
	// The sockets go where the sandbox has its temporary files if the
	// daemon can reach them, else in its workdir.
	view := path.Join(e.sb.Workdir(), ".sandboxd-ipython-"+newID()[:8])
	if _, err := fsys.Rel("/tmp"); err == nil {
		view = "/tmp/.sandboxd-ipython-" + newID()[:8]
	}
	dirRel, err := fsys.Rel(view)
	if err != nil {
		return nil, err
	}
	root, err := fsys.Root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := root.Mkdir(dirRel, 0o700); err != nil {
		return nil, backends.FSError(view, err)
	}
	uid, gid := fsys.Owner()
	if uid >= 0 {
		if err := root.Lchown(dirRel, uid, gid); err != nil {
			return nil, backends.FSError(view, err)
		}
	}
	k := &kernel{
		sb: e.sb, dirRel: dirRel, dead: make(chan struct{}),
		sig:     signer{key: []byte(newID()), session: newID()},
		iopub:   make(chan message, 1024),
		replies: make(chan message, 64),
		stderr:  &lockedCapture{c: executors.Capture{Limit: 2048, Runes: true}},
	}
	defer func() {
		if err != nil {
			k.shutdown(context.WithoutCancel(ctx))
		}
	}()
	conn := map[string]any{
		"transport": "ipc", "ip": path.Join(view, "k"),
		"shell_port": chShell, "iopub_port": chIOPub, "stdin_port": chStdin, "control_port": chControl, "hb_port": chHB,
		"key": string(k.sig.key), "signature_scheme": "hmac-sha256", "kernel_name": "python3",
	}
	cb, _ := json.Marshal(conn)
	connRel := path.Join(dirRel, "kernel.json")
	if err := root.WriteFile(connRel, cb, 0o600); err != nil {
		return nil, backends.FSError(view, err)
	}
	if uid >= 0 {
		_ = root.Lchown(connRel, uid, gid)
	}
	p, err := e.sb.Start(ctx, backends.ProcessSpec{
		// No history database, and no pause before each execute_reply
		// (ipykernel's hedge for clients that stop reading at the reply:
		// the executor waits for the kernel's idle status instead).
		Argv:   []string{py, "-c", launcher, "-f", path.Join(view, "kernel.json"), "--HistoryManager.enabled=False", "--IPythonKernel._execute_sleep=0"},
		Env:    map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "module://matplotlib_inline.backend_inline"},
		Stderr: k.stderr, Stdout: k.stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("start the kernel: %w", err)
	}
	k.proc = p
	go func() {
		k.status, k.waitErr = p.Wait(context.Background())
		close(k.dead)
	}()
	sctx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
	defer cancel()
	if err := k.connect(sctx, root, dirRel); err != nil {
		return nil, err
	}
	if err := k.handshake(sctx); err != nil {
		return nil, err
	}
	return k, nil
}

// connect waits for the kernel's sockets and connects to them.
func (k *kernel) connect(ctx context.Context, root *os.Root, dirRel string) error {
	dir, err := root.Open(dirRel)
	if err != nil {
		return err
	}
	defer dir.Close()
	dirfd := int(dir.Fd())
	open := func(n int) (int, error) {
		for {
			fd, err := unix.Openat2(dirfd, "k-"+strconv.Itoa(n), &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err == nil {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
					unix.Close(fd)
					return -1, api.Errorf(api.ErrPermissionDenied, "the kernel's socket %d is not a socket (something in the sandbox replaced it)", n)
				}
				return fd, nil
			}
			if !errors.Is(err, unix.ENOENT) {
				return -1, err
			}
			select {
			case <-k.dead:
				return -1, k.startFailure()
			case <-ctx.Done():
				return -1, api.Errorf(api.ErrUnavailable, "the kernel did not start in time: %s", strings.TrimSpace(k.stderr.String()))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	endpoint := func(n int) (string, error) {
		fd, err := open(n)
		if err != nil {
			return "", err
		}
		k.fds = append(k.fds, fd)
		return "ipc:///proc/self/fd/" + strconv.Itoa(fd), nil
	}
	sockCtx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	k.shell = zmq4.NewDealer(sockCtx)
	k.ctrl = zmq4.NewDealer(sockCtx)
	iopub := zmq4.NewSub(sockCtx)
	hb := zmq4.NewReq(sockCtx)
	for _, c := range []struct {
		n int
		s zmq4.Socket
	}{{chShell, k.shell}, {chIOPub, iopub}, {chControl, k.ctrl}, {chHB, hb}} {
		ep, err := endpoint(c.n)
		if err != nil {
			return err
		}
		if err := c.s.Dial(ep); err != nil {
			return fmt.Errorf("connect to the kernel: %w", err)
		}
	}
	if err := iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return err
	}
	// The heartbeat answers once the kernel's loop runs.
	if err := hb.Send(zmq4.NewMsgString("ping")); err != nil {
		return fmt.Errorf("kernel heartbeat: %w", err)
	}
	if _, err := hb.Recv(); err != nil {
		return fmt.Errorf("kernel heartbeat: %w", err)
	}
	hb.Close()
	go k.read(iopub, k.iopub, sockCtx.Done())
	go k.read(k.shell, k.replies, sockCtx.Done())
	return nil
}

// read decodes the messages of one socket until it closes or done;
// messages that do not verify are dropped. A full channel holds the
// reader back (and ZeroMQ's buffers the kernel) until the next cell drains
// it: nothing of a cell is dropped.
func (k *kernel) read(s zmq4.Socket, ch chan<- message, done <-chan struct{}) {
	defer close(ch)
	for {
		m, err := s.Recv()
		if err != nil {
			return
		}
		msg, err := k.sig.decode(m)
		if err != nil {
			continue
		}
		select {
		case ch <- msg:
		case <-done:
			return
		}
	}
}

func (k *kernel) startFailure() error {
	<-k.dead
	return api.Errorf(api.ErrUnavailable, "the kernel exited at start (%s): %s", k.deathReason(), strings.TrimSpace(k.stderr.String()))
}

// handshake waits for kernel_info_reply and for iopub to carry messages
// (a subscriber misses what is published before it is connected).
func (k *kernel) handshake(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	gotReply, gotIOPub := false, false
	for !gotReply || !gotIOPub {
		if err := k.send(k.shell, "kernel_info_request", map[string]any{}); err != nil {
			return err
		}
	wait:
		for !gotReply || !gotIOPub {
			select {
			case m, ok := <-k.replies:
				if !ok {
					return errors.New("the kernel closed its shell socket")
				}
				gotReply = gotReply || m.Header.MsgType == "kernel_info_reply"
			case _, ok := <-k.iopub:
				if !ok {
					return errors.New("the kernel closed its iopub socket")
				}
				gotIOPub = true
			case <-tick.C:
				break wait
			case <-k.dead:
				return k.startFailure()
			case <-ctx.Done():
				return api.Errorf(api.ErrUnavailable, "the kernel did not answer in time: %s", strings.TrimSpace(k.stderr.String()))
			}
		}
	}
	// Drain what the handshake left.
	for {
		select {
		case <-k.iopub:
		case <-k.replies:
		default:
			return nil
		}
	}
}

func (k *kernel) send(s zmq4.Socket, msgType string, content any) error {
	_, err := k.sendID(s, msgType, content)
	return err
}

func (k *kernel) sendID(s zmq4.Socket, msgType string, content any) (string, error) {
	m, id, err := k.sig.encode(msgType, content)
	if err != nil {
		return "", err
	}
	if err := s.Send(m); err != nil {
		return "", fmt.Errorf("send %s to the kernel: %w", msgType, err)
	}
	return id, nil
}

// chdir moves the kernel to dir, silently.
func (k *kernel) chdir(ctx context.Context, dir string) error {
	q, _ := json.Marshal(dir)
	code := "__import__('os').chdir(" + string(q) + ")"
	id, err := k.sendID(k.shell, "execute_request", map[string]any{
		"code": code, "silent": true, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		select {
		case m, ok := <-k.replies:
			if !ok {
				return errors.New("the kernel closed its shell socket")
			}
			if m.Parent.MsgID == id {
				var r struct{ Status string }
				_ = json.Unmarshal(m.Content, &r)
				if r.Status != "ok" {
					return fmt.Errorf("chdir: %s", r.Status)
				}
				return nil
			}
		case <-k.dead:
			return errors.New("the kernel died")
		case <-tctx.Done():
			return tctx.Err()
		}
	}
}

// execute runs one cell.
func (k *kernel) execute(ctx context.Context, code string, timeout, interruptWait time.Duration, out executors.OutputSink, maxChars int) (api.Observation, error) {
	id, err := k.sendID(k.shell, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true,
	})
	if err != nil {
		// A kernel that cannot take the cell (killed, its exit not seen
		// yet: the socket's far end is gone) is replaced like one seen
		// dead: the caller starts a new kernel and runs the cell there.
		k.awaitExit()
		return api.Observation{}, fmt.Errorf("%w: %w", errGone, err)
	}
	obs := api.Observation{Images: []api.Image{}}
	text := &executors.Capture{Limit: maxChars / 2, Runes: true}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var (
		idle, replied, interrupted bool
		started                    bool // the kernel took the cell
		stopBy                     <-chan time.Time
	)
	// gone answers a kernel that went away: before it took the cell,
	// errGone (the caller starts a new kernel and runs the cell there).
	gone := func() error {
		k.awaitExit()
		if !started {
			return errGone
		}
		obs.Note = executors.JoinNotes(obs.Note, "the kernel died during the cell ("+k.deathReason()+"); the next cell starts a new kernel, and earlier state is lost")
		return nil
	}
	interrupt := func(why string) {
		if interrupted {
			return
		}
		interrupted = true
		obs.Note = executors.JoinNotes(obs.Note, why)
		_ = k.proc.Signal(syscall.SIGINT)
		stopBy = time.After(interruptWait)
	}
	for !(idle && replied) {
		select {
		case m, ok := <-k.iopub:
			if !ok {
				if err := gone(); err != nil {
					return obs, err
				}
				idle, replied = true, true
				continue
			}
			if m.Parent.MsgID != id {
				continue
			}
			started = true
			k.handle(m, &obs, text, out)
			if m.Header.MsgType == "status" {
				var st struct {
					ExecutionState string `json:"execution_state"`
				}
				_ = json.Unmarshal(m.Content, &st)
				idle = st.ExecutionState == "idle"
			}
		case m, ok := <-k.replies:
			if !ok {
				if err := gone(); err != nil {
					return obs, err
				}
				idle, replied = true, true
				continue
			}
			if m.Parent.MsgID != id {
				continue
			}
			started = true
			replied = true
			var r struct {
				ExecutionCount int `json:"execution_count"`
			}
			_ = json.Unmarshal(m.Content, &r)
			obs.ExecutionCount = r.ExecutionCount
		case <-deadline.C:
			obs.TimedOut = true
			interrupt(fmt.Sprintf("the cell ran past its timeout (%v) and was interrupted; the kernel and its state are kept", timeout))
		case <-ctx.Done():
			interrupt("the cell was interrupted: the request ended or the daemon is stopping")
		case <-stopBy:
			// The interrupt did not stop it: answer anyway; the kernel
			// is still busy with it, the next cell waits behind it.
			obs.Note = executors.JoinNotes(obs.Note, "the kernel did not stop within "+interruptWait.String()+" of the interrupt")
			idle, replied = true, true
		case <-k.dead:
			if err := gone(); err != nil {
				return obs, err
			}
			idle, replied = true, true
		}
	}
	obs.Output = text.String()
	obs.Truncated = text.Truncated()
	return obs, nil
}

// handle folds one iopub message of the running cell into obs.
func (k *kernel) handle(m message, obs *api.Observation, text *executors.Capture, out executors.OutputSink) {
	switch m.Header.MsgType {
	case "stream":
		var c struct{ Name, Text string }
		_ = json.Unmarshal(m.Content, &c)
		text.Write([]byte(c.Text))
		stream := api.StreamStdout
		if c.Name == "stderr" {
			stream = api.StreamStderr
		}
		out.Record(stream, []byte(c.Text))
		out.Live(stream, []byte(c.Text))
	case "execute_result", "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(m.Content, &c)
		for _, mime := range []string{"image/png", "image/jpeg", "image/svg+xml"} {
			raw, ok := c.Data[mime]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				continue
			}
			if mime != "image/svg+xml" {
				// Keep it base64, as the API says; check it is.
				s = strings.TrimSpace(s)
				if _, err := base64.StdEncoding.DecodeString(s); err != nil {
					continue
				}
			}
			obs.Images = append(obs.Images, api.Image{MIME: mime, Data: s})
		}
		if raw, ok := c.Data["text/plain"]; ok && m.Header.MsgType == "execute_result" {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				text.Write([]byte(s))
				out.Record(api.StreamStdout, []byte(s))
				out.Live(api.StreamStdout, []byte(s))
			}
		}
	case "error":
		var c struct {
			EName     string   `json:"ename"`
			EValue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		_ = json.Unmarshal(m.Content, &c)
		tb := ansi.ReplaceAllString(strings.Join(c.Traceback, "\n"), "")
		obs.IPythonError = &api.IPythonError{EName: c.EName, EValue: c.EValue, Traceback: tb}
		out.Record(api.StreamStderr, []byte(tb))
	}
}

// shutdown asks the kernel to stop, then kills it, and removes its
// socket directory.
func (k *kernel) shutdown(ctx context.Context) {
	if k.proc != nil && !k.isDead() && k.ctrl != nil {
		_ = k.send(k.ctrl, "shutdown_request", map[string]any{"restart": false})
		select {
		case <-k.dead:
		case <-time.After(time.Second):
		}
	}
	if k.proc != nil {
		_ = k.proc.Kill()
		select {
		case <-k.dead:
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
	}
	if k.cancel != nil {
		k.cancel()
	}
	for _, s := range []zmq4.Socket{k.shell, k.ctrl} {
		if s != nil {
			s.Close()
		}
	}
	for _, fd := range k.fds {
		unix.Close(fd)
	}
	k.fds = nil
	// The socket directory goes with the kernel (best effort: a sandbox
	// being destroyed takes it anyway).
	if root, err := k.sb.FS().Root(); err == nil {
		_ = root.RemoveAll(k.dirRel)
		root.Close()
	}
}
