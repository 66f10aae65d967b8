package daemon

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/daemon/eventlog"
	"github.com/sandboxd/sandboxd/executors"
	"github.com/sandboxd/sandboxd/executors/bash"
	"github.com/sandboxd/sandboxd/executors/browser"
	execx "github.com/sandboxd/sandboxd/executors/exec"
	filex "github.com/sandboxd/sandboxd/executors/file"
	"github.com/sandboxd/sandboxd/executors/ipython"
	"github.com/sandboxd/sandboxd/internal/atomicfile"
)

// meta is what the daemon persists of a sandbox (sandbox.json).
type meta struct {
	Sandbox api.Sandbox       `json:"sandbox"`
	Env     map[string]string `json:"env,omitempty"`
	// Sessions are the bash sessions used so far, so that after a restart
	// their first command can say the shell is a new one.
	Sessions []string `json:"sessions,omitempty"`
	// Shells are the sessions whose shells outlive the daemon (containerd
	// sandboxes): the next daemon re-attaches to them.
	Shells []bash.SessionInfo `json:"shells,omitempty"`
	// Kernel records that an ipython kernel was started: after a restart
	// the first cell is told its state is gone.
	Kernel bool `json:"kernel,omitempty"`
	// Browser records, the same way, that a browser was started.
	Browser bool `json:"browser,omitempty"`
}

const (
	metaFile = "sandbox.json"
	logFile  = "events.log"
)

var idRE = regexp.MustCompile(`^sb-[a-z0-9]{8,32}$`)

// newID returns a random sandbox id.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "sb-" + string(b)
}

// manager holds the daemon's sandboxes.
type manager struct {
	d   *Daemon
	dir string // <state>/sandboxes

	mu        sync.RWMutex
	sandboxes map[string]*sandbox
	creating  int
	// creatingMB is the memory promised to the sandboxes being created.
	creatingMB int64
	active     atomic.Int64 // actions in flight, all sandboxes
	mem        *memoryGate
}

// sandbox is the daemon's side of one sandbox.
type sandbox struct {
	m       *manager
	id      string
	dir     string
	backend backends.Backend
	log     *eventlog.Log
	gone    chan struct{} // closed when it is deleted or the daemon stops
	saveMu  sync.Mutex    // one saveMeta at a time
	// memoryMB is its memory limit (0: none), fixed at creation.
	memoryMB int64

	mu         sync.Mutex
	meta       meta
	sb         backends.Sandbox // nil when lost
	bash       *bash.Executor
	ipython    *ipython.Executor
	browser    *browser.Executor
	exec       *execx.Executor
	file       *filex.Executor
	calls      map[string]*call // in flight, by client action id
	active     int
	lastActive time.Time
	closed     bool // deleted, or the daemon stopped
	waiting    bool // lost for now: its backend was down at start (adoptLater)
	// owed are results the log could not take when their actions ended
	// (the state directory was full): recorded before anything else.
	owed []api.Event
}

// call is an action in flight, for retries that arrive meanwhile.
type call struct {
	action *api.Action
	done   chan struct{}
	obs    api.Observation
	err    error
}

func newManager(d *Daemon) (*manager, error) {
	m := &manager{d: d, dir: filepath.Join(d.cfg.StateDir, "sandboxes"), sandboxes: map[string]*sandbox{}, mem: newMemoryGate(d.cfg.Sandbox.MinFreeMemoryMB)}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *manager) get(id string) (*sandbox, error) {
	m.mu.RLock()
	s := m.sandboxes[id]
	m.mu.RUnlock()
	if s == nil {
		return nil, api.Errorf(api.ErrNotFound, "sandbox %q does not exist", id)
	}
	return s, nil
}

func (m *manager) list() []api.Sandbox {
	m.mu.RLock()
	all := make([]*sandbox, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		all = append(all, s)
	}
	m.mu.RUnlock()
	out := make([]api.Sandbox, 0, len(all))
	for _, s := range all {
		out = append(out, s.view())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (m *manager) count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sandboxes)
}

// effectiveLimits applies the server's defaults and caps to asked.
func (m *manager) effectiveLimits(asked *api.Limits) api.Limits {
	def, max := m.d.cfg.Limits.Default.api(), m.d.cfg.Limits.Max.api()
	l := def
	if asked != nil {
		if asked.MemoryMB > 0 {
			l.MemoryMB = asked.MemoryMB
		}
		if asked.Pids > 0 {
			l.Pids = asked.Pids
		}
		if asked.CPUs > 0 {
			l.CPUs = asked.CPUs
		}
		if asked.DiskMB > 0 {
			l.DiskMB = asked.DiskMB
		}
		if asked.OutputBytes > 0 {
			l.OutputBytes = asked.OutputBytes
		}
	}
	clamp := func(v *int64, hi int64) {
		if hi > 0 && *v > hi {
			*v = hi
		}
	}
	clamp(&l.MemoryMB, max.MemoryMB)
	clamp(&l.Pids, max.Pids)
	clamp(&l.DiskMB, max.DiskMB)
	clamp(&l.OutputBytes, max.OutputBytes)
	if max.CPUs > 0 && l.CPUs > max.CPUs {
		l.CPUs = max.CPUs
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = 64 << 20
	}
	return l
}

// create makes a sandbox.
func (m *manager) create(ctx context.Context, req *api.CreateSandboxRequest) (api.Sandbox, error) {
	if m.d.stopping.Load() {
		return api.Sandbox{}, errShuttingDown
	}
	name := req.Backend
	if name == "" {
		name = api.BackendProcess
	}
	be, ok := m.d.backends[name]
	if !ok {
		return api.Sandbox{}, api.Errorf(api.ErrInvalidArgument, "unknown backend %q; one of %s", name, backendNames)
	}
	if err := be.Available(ctx); err != nil {
		return api.Sandbox{}, api.Errorf(api.ErrUnavailable, "the %s backend is not available on this host: %v", name, err)
	}
	if err := m.mem.admit("creating a sandbox"); err != nil {
		return api.Sandbox{}, err
	}
	limits := m.effectiveLimits(req.Limits)
	m.mu.Lock()
	if len(m.sandboxes)+m.creating >= m.d.cfg.Sandbox.MaxSandboxes {
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.ErrResourceExhausted, "the daemon holds its maximum of %d sandboxes; delete some first", m.d.cfg.Sandbox.MaxSandboxes)
	}
	promise := m.promisedMB(limits.MemoryMB)
	if err := memoryBudget(m.d.cfg.Sandbox.MemoryBudgetMB, m.promisedLocked(), limits.MemoryMB); err != nil {
		m.mu.Unlock()
		return api.Sandbox{}, err
	}
	m.creating++
	m.creatingMB += promise
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.creating--
		m.creatingMB -= promise
		m.mu.Unlock()
	}()

	network := req.Network
	if network == "" {
		network = api.NetworkNone
		if name == api.BackendProcess {
			// Process sandboxes share the host's network; say so.
			network = api.NetworkHost
		}
	}
	idle := m.d.cfg.Sandbox.IdleTimeout.D().Seconds()
	if req.IdleTimeoutS != nil {
		idle = math.Min(*req.IdleTimeoutS, m.d.cfg.Sandbox.MaxIdleTimeout.D().Seconds())
	}
	image := req.Image
	if image == "" && name == api.BackendContainerd {
		image = "host"
	}
	id := newID()
	dir := filepath.Join(m.dir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return api.Sandbox{}, fmt.Errorf("create sandbox directory: %w", err)
	}
	spec := backends.Spec{
		ID: id, Dir: dir, Image: image, Env: req.Env, Workdir: req.Workdir,
		Limits: limits, Network: network,
	}
	bsb, err := be.Create(ctx, spec)
	if err != nil {
		os.RemoveAll(dir)
		return api.Sandbox{}, err
	}
	now := time.Now().UTC()
	labels := req.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	md := meta{
		Sandbox: api.Sandbox{
			ID: id, Backend: name, State: api.StateRunning, CreatedAt: now,
			Workdir: bsb.Workdir(), Image: image, Limits: spec.Limits, Network: network,
			Labels: labels, IdleTimeoutS: idle, LastActiveAt: now,
		},
		Env: req.Env,
	}
	s, err := m.open(be, dir, md, bsb)
	if err == nil {
		err = s.saveMeta()
	}
	if err != nil {
		if s != nil {
			s.log.Close()
		}
		_ = bsb.Destroy(context.WithoutCancel(ctx))
		os.RemoveAll(dir)
		return api.Sandbox{}, err
	}
	m.mu.Lock()
	m.sandboxes[id] = s
	m.mu.Unlock()
	m.d.log.Info("sandbox created", "sandbox", id, "backend", name)
	return s.view(), nil
}

// promisedMB is what a sandbox with memory limit mb takes of the memory
// budget: a sandbox without a limit may use all of it.
func (m *manager) promisedMB(mb int64) int64 {
	if mb <= 0 {
		return m.d.cfg.Sandbox.MemoryBudgetMB
	}
	return mb
}

// promisedLocked sums the memory promised to the sandboxes, those being
// created included. m.mu is held.
func (m *manager) promisedLocked() int64 {
	n := m.creatingMB
	for _, s := range m.sandboxes {
		n += m.promisedMB(s.memoryMB)
	}
	return n
}

// open builds the runtime of a sandbox whose backend part exists (bsb) or
// is lost (nil).
func (m *manager) open(be backends.Backend, dir string, md meta, bsb backends.Sandbox) (*sandbox, error) {
	log, err := eventlog.Open(filepath.Join(dir, logFile))
	if err != nil {
		return nil, err
	}
	s := &sandbox{
		m: m, id: md.Sandbox.ID, dir: dir, backend: be, log: log, memoryMB: md.Sandbox.Limits.MemoryMB,
		gone: make(chan struct{}), meta: md, sb: bsb,
		calls: map[string]*call{}, lastActive: time.Now(),
	}
	if bsb != nil {
		s.setBackend(bsb)
	}
	return s, nil
}

// setBackend gives the sandbox its backend part and the executors on it;
// s.mu is held or s is not shared yet.
func (s *sandbox) setBackend(bsb backends.Sandbox) {
	m := s.m
	bc := m.d.bashConfig()
	bc.Persist = func(infos []bash.SessionInfo) {
		s.mu.Lock()
		s.meta.Shells = infos
		s.mu.Unlock()
		if err := s.saveMeta(); err != nil {
			m.d.log.Warn("record bash sessions", "sandbox", s.id, "err", err)
		}
	}
	s.sb = bsb
	s.bash = bash.New(bsb, bc)
	ic := m.d.ipythonConfig()
	ic.Cwd = func() (string, bool) { return s.bash.Cwd(api.DefaultSession) }
	s.ipython = ipython.New(bsb, ic)
	if s.meta.Kernel {
		s.ipython.MarkLost()
	}
	s.browser = browser.New(bsb, m.d.browserConfig())
	if s.meta.Browser {
		s.browser.MarkLost()
	}
	s.exec = execx.New(bsb, m.d.execConfig())
	s.file = filex.New(bsb.FS(), m.d.fileConfig())
}

var backendNames = "process, containerd, wasm"

// recover re-adopts the sandboxes of a previous run.
func (m *manager) recover(ctx context.Context) error {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	type found struct {
		dir string
		md  meta
	}
	byBackend := map[string][]found{}
	var later []*sandbox // of a backend that is down for now
	for _, e := range ents {
		if !e.IsDir() || !idRE.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(m.dir, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, metaFile))
		if err != nil {
			// A crash between making the directory and recording the
			// sandbox: there is nothing to re-adopt.
			m.d.log.Warn("sandbox directory without metadata; removing", "dir", dir, "err", err)
			os.RemoveAll(dir)
			continue
		}
		var md meta
		if err := json.Unmarshal(data, &md); err != nil || md.Sandbox.ID != e.Name() {
			m.d.log.Error("unreadable sandbox metadata; leaving it alone", "dir", dir, "err", err)
			continue
		}
		byBackend[md.Sandbox.Backend] = append(byBackend[md.Sandbox.Backend], found{dir, md})
	}
	for name, fs := range byBackend {
		be := m.d.backends[name]
		results := map[string]backends.Recovered{}
		var unavailable error
		deferred := false
		if be == nil {
			unavailable = fmt.Errorf("this daemon has no %q backend", name)
		} else if err := be.Available(ctx); err != nil {
			unavailable = fmt.Errorf("the %s backend is not available: %w", name, err)
			// Its sandboxes may well be alive (containers run on
			// without containerd's API): adopt them once it is back.
			deferred = name == api.BackendContainerd
			if deferred {
				unavailable = fmt.Errorf("%w; the sandbox is re-adopted when it is back", unavailable)
			}
		} else {
			specs := make([]backends.Spec, 0, len(fs))
			for _, f := range fs {
				specs = append(specs, backends.Spec{
					ID: f.md.Sandbox.ID, Dir: f.dir, Image: f.md.Sandbox.Image, Env: f.md.Env,
					Workdir: f.md.Sandbox.Workdir, Limits: f.md.Sandbox.Limits, Network: f.md.Sandbox.Network,
				})
			}
			for _, r := range be.Recover(ctx, specs) {
				results[r.ID] = r
			}
		}
		for _, f := range fs {
			r, ok := results[f.md.Sandbox.ID]
			switch {
			case unavailable != nil:
				r.Err = unavailable
			case !ok:
				r.Err = errors.New("the backend did not report on it")
			}
			md := f.md
			if r.Err != nil {
				md.Sandbox.State, md.Sandbox.Reason = api.StateLost, r.Err.Error()
			} else {
				md.Sandbox.State, md.Sandbox.Reason = api.StateRunning, ""
			}
			s, err := m.open(be, f.dir, md, r.Sandbox)
			if err != nil {
				m.d.log.Error("open event log; sandbox left out", "sandbox", md.Sandbox.ID, "err", err)
				if r.Sandbox != nil {
					_ = r.Sandbox.Close(ctx)
				}
				continue
			}
			if deferred {
				s.waiting = true
				later = append(later, s)
			} else {
				resumed := s.reattach(ctx, md)
				if err := s.settlePending(resumed); err != nil {
					m.d.log.Error("record lost actions", "sandbox", s.id, "err", err)
				}
			}
			_ = s.saveMeta()
			m.mu.Lock()
			m.sandboxes[s.id] = s
			m.mu.Unlock()
			if r.Err != nil {
				m.d.log.Warn("sandbox lost", "sandbox", s.id, "reason", r.Err)
			} else {
				m.d.log.Info("sandbox re-adopted", "sandbox", s.id, "note", r.Note)
			}
		}
	}
	if len(later) > 0 {
		go m.adoptLater(later)
	}
	return nil
}

// adoptLater re-adopts sandboxes whose backend was down when the daemon
// started, once it answers again (or gives up when the daemon stops).
func (m *manager) adoptLater(waiting []*sandbox) {
	if len(waiting) == 0 {
		return
	}
	be := waiting[0].backend
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.d.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if be.Available(ctx) != nil {
			cancel()
			continue
		}
		var specs []backends.Spec
		byID := map[string]*sandbox{}
		for _, s := range waiting {
			s.mu.Lock()
			closed, md := s.closed, s.meta
			s.mu.Unlock()
			if closed {
				continue
			}
			byID[s.id] = s
			specs = append(specs, backends.Spec{
				ID: md.Sandbox.ID, Dir: s.dir, Image: md.Sandbox.Image, Env: md.Env,
				Workdir: md.Sandbox.Workdir, Limits: md.Sandbox.Limits, Network: md.Sandbox.Network,
			})
		}
		for _, r := range be.Recover(ctx, specs) {
			s := byID[r.ID]
			if s == nil {
				continue
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				if r.Sandbox != nil {
					_ = r.Sandbox.Destroy(ctx)
				}
				continue
			}
			md := s.meta
			if r.Err != nil {
				s.waiting = false
				s.meta.Sandbox.Reason = r.Err.Error()
			} else {
				// Still waiting (actions answer 503) until its shells
				// are re-attached: an action now would start a fresh
				// session in their place.
				s.setBackend(r.Sandbox)
			}
			s.mu.Unlock()
			var resumed map[int64]bool
			if r.Err == nil {
				resumed = s.reattach(ctx, md)
				s.mu.Lock()
				s.waiting = false
				s.meta.Sandbox.State, s.meta.Sandbox.Reason = api.StateRunning, ""
				s.mu.Unlock()
				m.d.log.Info("sandbox re-adopted now that its backend is back", "sandbox", s.id, "note", r.Note)
			} else {
				m.d.log.Warn("sandbox lost", "sandbox", s.id, "reason", r.Err)
			}
			if err := s.settlePending(resumed); err != nil {
				m.d.log.Error("record lost actions", "sandbox", s.id, "err", err)
			}
			_ = s.saveMeta()
		}
		cancel()
		return
	}
}

// settlePending records an observation for every action the previous run
// left without one: it may or may not have had its effect, and it will not
// run again.
func (s *sandbox) settlePending(skip map[int64]bool) error {
	var pending []int64
	for _, seq := range s.log.Pending() {
		if !skip[seq] {
			pending = append(pending, seq)
		}
	}
	for _, seq := range pending {
		kind := ""
		if raw, err := s.log.Event(seq); err == nil {
			var ev api.Event
			if json.Unmarshal(raw, &ev) == nil && ev.Action != nil {
				kind = ev.Action.Kind
			}
		}
		obs := api.Observation{
			Kind: kind, Cause: seq, Lost: true,
			Note: "the daemon stopped while this action ran; its outcome is unknown and it will not run again (its output up to then is in the event log)",
		}
		if _, err := s.log.Append(&api.Event{Type: api.EventObservation, Cause: seq, Observation: &obs}); err != nil {
			return err
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return s.log.Sync()
}

// reattach re-attaches to the bash sessions whose shells outlived the
// previous daemon, and resumes the run and interrupt actions that were in
// flight in them: their observations are recorded when their commands
// end. It returns the resumed actions' seqs; the other sessions are
// marked lost.
func (s *sandbox) reattach(ctx context.Context, md meta) map[int64]bool {
	if s.bash == nil {
		return nil
	}
	type inflight struct {
		seq int64
		a   *api.Action
	}
	var pending []inflight
	running := map[string]bool{}
	for _, seq := range s.log.Pending() {
		raw, err := s.log.Event(seq)
		if err != nil {
			continue
		}
		var ev api.Event
		if json.Unmarshal(raw, &ev) != nil || ev.Action == nil {
			continue
		}
		if k := ev.Action.Kind; k == api.KindRun || k == api.KindInterrupt {
			pending = append(pending, inflight{seq, ev.Action})
			running[ev.Action.SessionName()] = true
		}
	}
	s.bash.Reattach(ctx, md.Shells, running)
	live := map[string]bool{}
	for _, n := range s.bash.Sessions() {
		live[n] = true
	}
	var lost []string
	for _, n := range md.Sessions {
		if !live[n] {
			lost = append(lost, n)
		}
	}
	s.bash.MarkLost(lost)
	resumed := map[int64]bool{}
	for _, p := range pending {
		if !live[p.a.SessionName()] {
			continue
		}
		resumed[p.seq] = true
		s.mu.Lock()
		s.active++
		s.mu.Unlock()
		s.m.active.Add(1)
		go s.resume(p.seq, p.a)
	}
	return resumed
}

// resume records the observation of an action a previous daemon started in
// a shell that outlived it, once its command ends: what that daemon had
// recorded of its output, then the rest.
func (s *sandbox) resume(seq int64, a *api.Action) {
	defer func() {
		s.mu.Lock()
		s.active--
		s.lastActive = time.Now()
		s.mu.Unlock()
		s.m.active.Add(-1)
	}()
	var before strings.Builder
	if _, err := s.log.Output(seq, api.StreamPTY, &before); err != nil {
		s.m.d.log.Warn("read output recorded before the restart", "sandbox", s.id, "seq", seq, "err", err)
	}
	sink := &actionSink{log: s.log, cause: seq, limit: s.meta.Sandbox.Limits.OutputBytes}
	ctx, cancel := untilClosed(s.gone, s.m.d.abort)
	obs, ok := s.bash.Resume(ctx, a.SessionName(), a.Kind, sink)
	cancel()
	sink.detach()
	if !ok {
		obs = api.Observation{Lost: true, Note: "the daemon restarted while this action ran and its session could not be re-attached to"}
	}
	obs.Kind, obs.Cause = a.Kind, seq
	obs.Output = capOutput(before.String()+obs.Output, s.m.d.cfg.Bash.MaxOutputChars)
	obs.Note = executors.JoinNotes("the daemon restarted while this command ran; the shell kept running and was re-attached to", obs.Note)
	if _, err := s.log.Append(&api.Event{Type: api.EventObservation, Cause: seq, Observation: &obs}); err != nil {
		s.m.d.log.Error("record a resumed observation", "sandbox", s.id, "seq", seq, "err", err)
		return
	}
	if err := s.log.Sync(); err != nil {
		s.m.d.log.Error("record a resumed observation", "sandbox", s.id, "seq", seq, "err", err)
	}
}

// capOutput keeps the first and last max/2 characters of out, with a
// marker line between, as a run observation does.
func capOutput(out string, max int) string {
	c := executors.Capture{Limit: max / 2, Runes: true}
	c.Write([]byte(out))
	return c.String()
}

// view returns the API view of the sandbox.
func (s *sandbox) view() api.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.meta.Sandbox
	v.LastActiveAt = s.lastActive.UTC()
	return v
}

// saveMeta persists the metadata atomically. Saves run one at a time,
// each of the metadata as it is then: concurrent ones (an action starting
// a session while bash records its shells) could otherwise land an older
// snapshot last.
func (s *sandbox) saveMeta() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	data, err := json.MarshalIndent(s.meta, "", "  ")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, metaFile), data, 0o600)
}

// errShuttingDown answers work that arrives during shutdown.
var errShuttingDown = api.Errorf(api.ErrUnavailable, "the daemon is shutting down")

// act runs one action: record it, run it, record its result durably, and
// answer. A retry of an action id gets the first answer again.
func (s *sandbox) act(a *api.Action, live *liveStream) (api.Observation, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return api.Observation{}, api.Errorf(api.ErrNotFound, "sandbox %q does not exist", s.id)
	}
	// A result still owed to the log goes first: a retry of its action is
	// then answered from the log rather than as still in flight.
	if err := s.recordOwed(); err != nil {
		s.mu.Unlock()
		return api.Observation{}, err
	}
	if a.ID != "" {
		if c := s.calls[a.ID]; c != nil {
			s.mu.Unlock()
			if !c.action.Equivalent(a) {
				return api.Observation{}, reusedID(a.ID)
			}
			<-c.done
			return c.obs, c.err
		}
		if seq, res, ok := s.log.Lookup(a.ID); ok {
			s.mu.Unlock()
			return s.replay(a, seq, res)
		}
	}
	if s.sb == nil || s.waiting {
		waiting, reason := s.waiting, s.meta.Sandbox.Reason
		s.mu.Unlock()
		if waiting {
			return api.Observation{}, api.Errorf(api.ErrUnavailable, "sandbox %s waits for its backend: %s", s.id, reason)
		}
		return api.Observation{}, api.Errorf(api.ErrConflict, "sandbox %s is lost (%s); it runs nothing any more: delete it", s.id, reason)
	}
	if s.m.d.stopping.Load() {
		s.mu.Unlock()
		return api.Observation{}, errShuttingDown
	}
	ex, err := s.executor(a.Kind)
	if err != nil {
		s.mu.Unlock()
		return api.Observation{}, err
	}
	// Admission: past the cap, refuse before anything is recorded, so a
	// retry is a clean new attempt. An interrupt lightens the load: it
	// always passes.
	n := s.m.active.Add(1)
	if max := int64(s.m.d.cfg.Sandbox.MaxActions); max > 0 && n > max && a.Kind != api.KindInterrupt {
		s.m.active.Add(-1)
		s.mu.Unlock()
		return api.Observation{}, api.Errorf(api.ErrResourceExhausted, "the daemon runs its maximum of %d actions at once; retry in a moment", max)
	}
	if a.Kind != api.KindInterrupt {
		if err := s.m.mem.admit("the action"); err != nil {
			s.m.active.Add(-1)
			s.mu.Unlock()
			return api.Observation{}, err
		}
	}
	seq, err := s.log.Append(&api.Event{Type: api.EventAction, Action: a})
	if err != nil {
		s.m.active.Add(-1)
		s.mu.Unlock()
		return api.Observation{}, err
	}
	c := &call{action: a, done: make(chan struct{})}
	if a.ID != "" {
		s.calls[a.ID] = c
	}
	s.active++
	s.lastActive = time.Now()
	newSession := a.Kind == api.KindRun && !slices.Contains(s.meta.Sessions, a.SessionName())
	if newSession {
		s.meta.Sessions = append(s.meta.Sessions, a.SessionName())
	}
	if a.Kind == api.KindIPython && !s.meta.Kernel {
		s.meta.Kernel, newSession = true, true
	}
	if a.Kind == api.KindBrowser && !s.meta.Browser {
		s.meta.Browser, newSession = true, true
	}
	s.mu.Unlock()
	if newSession {
		_ = s.saveMeta()
	}

	sink := &actionSink{log: s.log, cause: seq, limit: s.meta.Sandbox.Limits.OutputBytes}
	if live != nil {
		sink.live.Store(live)
	}
	ctx, cancel := untilClosed(s.gone, s.m.d.abort)
	start := time.Now()
	obs, err := ex.Execute(ctx, a, sink)
	cancel()
	sink.detach()
	ev := api.Event{Cause: seq}
	if err == nil {
		obs.Kind, obs.Cause = a.Kind, seq
		if n := sink.note(); n != "" {
			obs.Note = executors.JoinNotes(obs.Note, n)
		}
		ev.Type, ev.Observation = api.EventObservation, &obs
	} else {
		info := errorInfo(err)
		ev.Type, ev.Error = api.EventError, &info
	}
	owed := false
	if _, aerr := s.log.Append(&ev); aerr != nil {
		err = api.Errorf(api.ErrUnavailable, "the action ran but its result could not be recorded yet (a retry with the same id is answered once it is): %w", aerr)
		owed = true
	} else if serr := s.log.Sync(); serr != nil {
		err = api.Errorf(api.ErrUnavailable, "the action ran but its result could not be made durable: %w", serr)
	}
	s.m.d.metrics.action(a.Kind, err, time.Since(start))

	s.mu.Lock()
	s.active--
	s.lastActive = time.Now()
	if a.ID != "" {
		delete(s.calls, a.ID)
	}
	if owed {
		ev.Time = time.Time{} // the time it is recorded
		s.owed = append(s.owed, ev)
	}
	s.mu.Unlock()
	s.m.active.Add(-1)
	c.obs, c.err = obs, err
	close(c.done)
	return obs, err
}

// recordOwed appends and syncs the results owed to the log; s.mu is held.
// While it fails nothing else is recorded: every append would fail alike.
func (s *sandbox) recordOwed() error {
	if len(s.owed) == 0 {
		return nil
	}
	for len(s.owed) > 0 {
		if _, err := s.log.Append(&s.owed[0]); err != nil {
			return err
		}
		s.owed = s.owed[1:]
	}
	return s.log.Sync()
}

func reusedID(id string) error {
	return api.Errorf(api.ErrConflict, "action id %q was already used for a different action; use a new id", id)
}

// replay answers a retried action from the log.
func (s *sandbox) replay(a *api.Action, seq, res int64) (api.Observation, error) {
	raw, err := s.log.Event(seq)
	if err != nil {
		return api.Observation{}, err
	}
	var ev api.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return api.Observation{}, fmt.Errorf("read event %d: %w", seq, err)
	}
	if ev.Action == nil || !ev.Action.Equivalent(a) {
		return api.Observation{}, reusedID(a.ID)
	}
	if res == 0 {
		return api.Observation{}, api.Errorf(api.ErrConflict, "action %q is still in flight", a.ID)
	}
	raw, err = s.log.Event(res)
	if err != nil {
		return api.Observation{}, err
	}
	var rev api.Event
	if err := json.Unmarshal(raw, &rev); err != nil {
		return api.Observation{}, fmt.Errorf("read event %d: %w", res, err)
	}
	if rev.Error != nil {
		return api.Observation{}, api.Errorf(api.ErrorOf(rev.Error.Code), "%s", rev.Error.Message)
	}
	if rev.Observation == nil {
		return api.Observation{}, fmt.Errorf("event %d holds no observation", res)
	}
	return *rev.Observation, nil
}

// executor returns what runs kind; s.mu is held.
func (s *sandbox) executor(kind string) (executors.Executor, error) {
	if l, ok := s.backend.(backends.KindLimiter); ok {
		if err := l.Unsupported(kind); err != nil {
			return nil, err
		}
	}
	switch kind {
	case api.KindRun, api.KindInterrupt:
		return s.bash, nil
	case api.KindExec:
		return s.exec, nil
	case api.KindIPython:
		return s.ipython, nil
	case api.KindBrowser:
		return s.browser, nil
	case api.KindFileRead, api.KindFileWrite, api.KindFileEdit:
		return s.file, nil
	}
	return nil, api.Errorf(api.ErrUnsupported, "%s actions are not available in this version of sandboxd (run, interrupt, exec, ipython, browser and file.* are)", kind)
}

// files returns the sandbox's file executor, for the bulk transfer
// endpoints.
func (s *sandbox) files() (*filex.Executor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, api.Errorf(api.ErrNotFound, "sandbox %q does not exist", s.id)
	}
	if s.waiting {
		return nil, api.Errorf(api.ErrUnavailable, "sandbox %s waits for its backend: %s", s.id, s.meta.Sandbox.Reason)
	}
	if s.file == nil {
		return nil, api.Errorf(api.ErrConflict, "sandbox %s is lost (%s); its files cannot be reached: delete it", s.id, s.meta.Sandbox.Reason)
	}
	return s.file, nil
}

// busy marks the sandbox active until the returned func is called, as an
// action in flight does: a transfer longer than the idle timeout must not
// see its sandbox reaped under it.
func (s *sandbox) busy() (done func()) {
	s.mu.Lock()
	s.active++
	s.lastActive = time.Now()
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.active--
			s.lastActive = time.Now()
			s.mu.Unlock()
		})
	}
}

// untilClosed returns a context cancelled when a or b is closed.
func untilClosed(a, b <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-a:
		case <-b:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// delete destroys a sandbox and everything it holds.
func (m *manager) delete(ctx context.Context, id, why string) error {
	m.mu.Lock()
	s := m.sandboxes[id]
	if s == nil {
		m.mu.Unlock()
		return api.Errorf(api.ErrNotFound, "sandbox %q does not exist", id)
	}
	delete(m.sandboxes, id)
	m.mu.Unlock()
	// Cleanup must finish even if the request that asked for it goes away.
	ctx = context.WithoutCancel(ctx)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.gone)
	errs := closeThenDestroy(ctx, closeGrace, func(ctx context.Context) error {
		var errs error
		if s.bash != nil {
			errs = errors.Join(errs, s.bash.Close(ctx))
		}
		if s.ipython != nil {
			errs = errors.Join(errs, s.ipython.Close(ctx))
		}
		if s.browser != nil {
			errs = errors.Join(errs, s.browser.Close(ctx))
		}
		return errs
	}, func(ctx context.Context) error {
		if s.sb == nil {
			return nil
		}
		return s.sb.Destroy(ctx)
	})
	s.waitIdle(10 * time.Second)
	errs = errors.Join(errs, s.log.Close())
	if err := os.RemoveAll(s.dir); err != nil {
		errs = errors.Join(errs, err)
	}
	if errs != nil {
		m.d.log.Warn("sandbox deleted with errors", "sandbox", id, "why", why, "err", errs)
	} else {
		m.d.log.Info("sandbox deleted", "sandbox", id, "why", why)
	}
	return nil
}

// closeGrace is how long a delete lets the executors end their processes
// before the backend destroys the sandbox anyway.
const closeGrace = 10 * time.Second

// closeThenDestroy ends a sandbox being deleted: closeExecutors ends the
// executors' processes gracefully, then destroy ends everything else. A
// close still running after grace does not hold destroy back: processes
// that no signal ends (a paused container's are frozen) end only when
// destroy has run (runc thaws what it kills), which lets the close
// return; it is waited for one more grace at most.
func closeThenDestroy(ctx context.Context, grace time.Duration, closeExecutors, destroy func(context.Context) error) error {
	closed := make(chan error, 1)
	go func() { closed <- closeExecutors(ctx) }()
	var errs error
	select {
	case errs = <-closed:
		closed = nil
	case <-time.After(grace):
	}
	errs = errors.Join(errs, destroy(ctx))
	if closed != nil {
		select {
		case err := <-closed:
			errs = errors.Join(errs, err)
		case <-time.After(grace):
			errs = errors.Join(errs, fmt.Errorf("the executors did not close within %v of the sandbox's destruction", grace))
		}
	}
	return errs
}

// waitIdle waits until no action of the sandbox is in flight.
func (s *sandbox) waitIdle(max time.Duration) bool {
	deadline := time.Now().Add(max)
	for {
		s.mu.Lock()
		n := s.active
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reapIdle destroys sandboxes idle past their timeout.
func (m *manager) reapIdle(now time.Time) {
	m.mu.RLock()
	var idle []string
	for id, s := range m.sandboxes {
		s.mu.Lock()
		t := s.meta.Sandbox.IdleTimeoutS
		if t > 0 && s.active == 0 && now.Sub(s.lastActive) > time.Duration(t*float64(time.Second)) {
			idle = append(idle, id)
		}
		s.mu.Unlock()
	}
	m.mu.RUnlock()
	for _, id := range idle {
		_ = m.delete(context.Background(), id, "idle timeout")
	}
}

// closeAll lets go of every sandbox at shutdown: executors stop, backends
// keep what can outlive the daemon, logs are synced and closed.
func (m *manager) closeAll(ctx context.Context) {
	m.mu.Lock()
	all := make([]*sandbox, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		all = append(all, s)
	}
	m.sandboxes = map[string]*sandbox{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
			close(s.gone)
			if s.bash != nil {
				// Shells that outlive the daemon keep running, for the
				// next daemon to re-attach to.
				_ = s.bash.Detach(ctx)
			}
			if s.ipython != nil {
				_ = s.ipython.Close(ctx)
			}
			if s.browser != nil {
				_ = s.browser.Close(ctx)
			}
			if s.sb != nil {
				if err := s.sb.Close(ctx); err != nil {
					m.d.log.Warn("close sandbox", "sandbox", s.id, "err", err)
				}
			}
			s.waitIdle(5 * time.Second)
			s.mu.Lock()
			if err := s.recordOwed(); err != nil {
				m.d.log.Warn("record results owed to the event log; the next start marks their actions lost", "sandbox", s.id, "err", err)
			}
			s.mu.Unlock()
			if err := s.log.Close(); err != nil {
				m.d.log.Warn("close event log", "sandbox", s.id, "err", err)
			}
		}()
	}
	wg.Wait()
}
