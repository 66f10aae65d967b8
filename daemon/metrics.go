package daemon

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// latencyBuckets are the upper bounds (seconds) of the action duration
// histogram.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// metrics counts what /metrics reports, in the Prometheus text format.
type metrics struct {
	start time.Time

	mu       sync.Mutex
	requests map[int]int64         // by HTTP status
	actions  map[[2]string]int64   // by kind and result code ("ok" or an API code)
	hist     map[string]*histogram // action durations by kind
}

type histogram struct {
	counts []int64 // per bucket, then +Inf
	sum    float64
	n      int64
}

func newMetrics() *metrics {
	return &metrics{
		start:    time.Now(),
		requests: map[int]int64{},
		actions:  map[[2]string]int64{},
		hist:     map[string]*histogram{},
	}
}

func (m *metrics) request(status int) {
	m.mu.Lock()
	m.requests[status]++
	m.mu.Unlock()
}

func (m *metrics) action(kind string, err error, d time.Duration) {
	result := "ok"
	if err != nil {
		result = string(errorInfo(err).Code)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.actions[[2]string{kind, result}]++
	h := m.hist[kind]
	if h == nil {
		h = &histogram{counts: make([]int64, len(latencyBuckets)+1)}
		m.hist[kind] = h
	}
	s := d.Seconds()
	i := sort.SearchFloat64s(latencyBuckets, s)
	h.counts[i]++
	h.sum += s
	h.n++
}

func (d *Daemon) serveMetrics(ctx *fasthttp.RequestCtx) {
	var b bytes.Buffer
	m := d.metrics
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# HELP sandboxd_up Whether the daemon is serving.\n# TYPE sandboxd_up gauge\nsandboxd_up 1\n")
	p("# HELP sandboxd_uptime_seconds Seconds since the daemon started.\n# TYPE sandboxd_uptime_seconds gauge\nsandboxd_uptime_seconds %g\n", time.Since(m.start).Seconds())

	counts := map[[2]string]int{}
	for _, s := range d.mgr.list() {
		counts[[2]string{s.Backend, s.State}]++
	}
	p("# HELP sandboxd_sandboxes Sandboxes by backend and state.\n# TYPE sandboxd_sandboxes gauge\n")
	for _, k := range sortedKeys(counts) {
		p("sandboxd_sandboxes{backend=%q,state=%q} %d\n", k[0], k[1], counts[k])
	}
	p("# HELP sandboxd_actions_in_flight Actions running now.\n# TYPE sandboxd_actions_in_flight gauge\nsandboxd_actions_in_flight %d\n", d.mgr.active.Load())

	m.mu.Lock()
	p("# HELP sandboxd_http_requests_total HTTP requests by status.\n# TYPE sandboxd_http_requests_total counter\n")
	statuses := make([]int, 0, len(m.requests))
	for s := range m.requests {
		statuses = append(statuses, s)
	}
	sort.Ints(statuses)
	for _, s := range statuses {
		p("sandboxd_http_requests_total{status=\"%d\"} %d\n", s, m.requests[s])
	}
	p("# HELP sandboxd_actions_total Actions by kind and result (ok or an API error code).\n# TYPE sandboxd_actions_total counter\n")
	for _, k := range sortedKeys(m.actions) {
		p("sandboxd_actions_total{kind=%q,result=%q} %d\n", k[0], k[1], m.actions[k])
	}
	p("# HELP sandboxd_action_duration_seconds Time to answer an action, by kind.\n# TYPE sandboxd_action_duration_seconds histogram\n")
	kinds := make([]string, 0, len(m.hist))
	for k := range m.hist {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		h := m.hist[k]
		var cum int64
		for i, le := range latencyBuckets {
			cum += h.counts[i]
			p("sandboxd_action_duration_seconds_bucket{kind=%q,le=\"%g\"} %d\n", k, le, cum)
		}
		cum += h.counts[len(latencyBuckets)]
		p("sandboxd_action_duration_seconds_bucket{kind=%q,le=\"+Inf\"} %d\n", k, cum)
		p("sandboxd_action_duration_seconds_sum{kind=%q} %g\nsandboxd_action_duration_seconds_count{kind=%q} %d\n", k, h.sum, k, h.n)
	}
	m.mu.Unlock()

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p("# HELP sandboxd_goroutines Goroutines of the daemon.\n# TYPE sandboxd_goroutines gauge\nsandboxd_goroutines %d\n", runtime.NumGoroutine())
	p("# HELP sandboxd_heap_bytes Go heap in use.\n# TYPE sandboxd_heap_bytes gauge\nsandboxd_heap_bytes %d\n", ms.HeapInuse)
	if rss, ok := residentBytes(); ok {
		p("# HELP sandboxd_resident_bytes Resident memory of the daemon.\n# TYPE sandboxd_resident_bytes gauge\nsandboxd_resident_bytes %d\n", rss)
	}
	if avail, ok := d.mgr.mem.availableNow(); ok {
		p("# HELP sandboxd_memory_available_bytes Memory available for new work (host, or the daemon's cgroup when less).\n# TYPE sandboxd_memory_available_bytes gauge\nsandboxd_memory_available_bytes %d\n", avail)
	}
	d.mgr.mu.RLock()
	promised := d.mgr.promisedLocked()
	d.mgr.mu.RUnlock()
	p("# HELP sandboxd_memory_promised_bytes The sum of the sandboxes' memory limits (a sandbox without one counts as the memory budget).\n# TYPE sandboxd_memory_promised_bytes gauge\nsandboxd_memory_promised_bytes %d\n", promised<<20)
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		p("# HELP sandboxd_open_fds Open file descriptors of the daemon.\n# TYPE sandboxd_open_fds gauge\nsandboxd_open_fds %d\n", len(ents))
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/plain; version=0.0.4")
	ctx.SetBody(b.Bytes())
}

// residentBytes reads the daemon's RSS from /proc/self/statm.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

func sortedKeys[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}
