package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// benchReport is what `sandboxd bench` measured.
type benchReport struct {
	Clients      int                     `json:"clients"`
	Sandboxes    int                     `json:"sandboxes"`
	Backend      string                  `json:"backend"`
	DurationS    float64                 `json:"duration_s"`
	Actions      int                     `json:"actions"`
	PerSecond    float64                 `json:"actions_per_s"`
	Latency      benchLatency            `json:"latency_ms"`
	ByKind       map[string]benchLatency `json:"latency_ms_by_kind"`
	Errors       map[string]int          `json:"errors_by_code"`
	DaemonBefore map[string]float64      `json:"daemon_before"`
	DaemonAfter  map[string]float64      `json:"daemon_after"`

	// Refused counts, by code, the errors that came with a Retry-After:
	// admission control's explicit refusals, which the client waited out
	// before its next action. An error counted in Errors but not here
	// was not a refusal.
	Refused map[string]int `json:"refused_by_code"`
	// ErrorSamples holds one message of each code, to tell why.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
}

type benchLatency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

func latencies(d []time.Duration) benchLatency {
	if len(d) == 0 {
		return benchLatency{}
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
	}
	return benchLatency{N: len(d), P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

// daemonGauges are the daemon's figures compared before and after.
var daemonGauges = []string{"sandboxd_goroutines", "sandboxd_resident_bytes", "sandboxd_open_fds", "sandboxd_actions_in_flight"}

// bench drives a running daemon: clients × sandboxes × a mix of actions
// for a duration, then reports latency percentiles, throughput, errors by
// code and the daemon's goroutines, memory and fds before and after.
func bench(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("bench")
	clients := fs.Int("clients", 8, "concurrent clients")
	sandboxes := fs.Int("sandboxes", 4, "sandboxes the clients share")
	duration := fs.Duration("duration", 10*time.Second, "how long to drive the daemon")
	backend := fs.String("backend", "", "the sandboxes' backend (default process)")
	mix := fs.String("mix", "run=4,exec=4,file=2", "the mix of actions, as weights: run (a command in a bash session), exec (true), file (write then read)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *clients < 1 || *sandboxes < 1 || *duration <= 0 {
		return errUsage
	}
	weights, err := parseMix(*mix)
	if err != nil {
		return err
	}
	rep := benchReport{Clients: *clients, Sandboxes: *sandboxes, Backend: *backend, Errors: map[string]int{}, Refused: map[string]int{}, ErrorSamples: map[string]string{}, ByKind: map[string]benchLatency{}}
	if rep.DaemonBefore, err = gauges(ctx, c); err != nil {
		return err
	}
	ids := make([]string, 0, *sandboxes)
	defer func() {
		// Cleanup must run even if ctx was cancelled (Ctrl-C).
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, id := range ids {
			_ = c.DeleteSandbox(cctx, id)
		}
	}()
	for range *sandboxes {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Backend: *backend, Labels: map[string]string{"created-by": "sandboxd-bench"}})
		if err != nil {
			return fmt.Errorf("create a sandbox: %w", err)
		}
		ids = append(ids, sb.ID)
	}
	var (
		mu     sync.Mutex
		byKind = map[string][]time.Duration{}
		all    []time.Duration
		wg     sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(*duration)
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(i)))
			// Each client has a bash session of its own in every sandbox:
			// one session runs one command at a time.
			session := "bench-" + strconv.Itoa(i)
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				id := ids[r.Intn(len(ids))]
				kind := pick(r, weights)
				t := time.Now()
				err := benchAction(ctx, c, id, kind, session, fmt.Sprintf("bench-%d-%d.txt", i, n%8))
				d := time.Since(t)
				var wait time.Duration
				mu.Lock()
				if err != nil {
					code := string(errorCode(err))
					rep.Errors[code]++
					if _, ok := rep.ErrorSamples[code]; !ok {
						rep.ErrorSamples[code] = err.Error()
					}
					var ce *client.Error
					if errors.As(err, &ce) && ce.RetryAfter > 0 {
						rep.Refused[code]++
						wait = ce.RetryAfter
					}
				} else {
					byKind[kind] = append(byKind[kind], d)
					all = append(all, d)
				}
				mu.Unlock()
				// A refusal says when to come back: coming back sooner
				// only adds to the load that was refused. Up to half as
				// long again, at random, so that clients refused together
				// do not all come back together.
				if wait > 0 {
					wait += time.Duration(r.Int63n(int64(wait/2) + 1))
					select {
					case <-time.After(min(wait, time.Until(deadline))):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep.DurationS = elapsed.Seconds()
	rep.Actions = len(all)
	rep.PerSecond = float64(len(all)) / elapsed.Seconds()
	rep.Latency = latencies(all)
	for k, d := range byKind {
		rep.ByKind[k] = latencies(d)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range ids {
		if err := c.DeleteSandbox(cctx, id); err != nil {
			code := "delete:" + string(errorCode(err))
			rep.Errors[code]++
			rep.ErrorSamples[code] = err.Error()
		}
	}
	ids = nil
	// The clients' connections are the bench's, not the daemon's: close
	// them. What the sandboxes held is let go asynchronously: give it a
	// moment.
	c.CloseIdle()
	time.Sleep(time.Second)
	if rep.DaemonAfter, err = gauges(cctx, c); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBench(stdout, &rep)
	return nil
}

func benchAction(ctx context.Context, c *client.Client, id, kind, session, file string) error {
	var a *api.Action
	switch kind {
	case "run":
		a = api.Run("echo bench")
		a.Session = session
	case "exec":
		a = api.Exec("true")
	case "file":
		if _, err := c.Act(ctx, id, api.WriteFile(file, "bench\n")); err != nil {
			return err
		}
		a = &api.Action{Kind: api.KindFileRead, Path: file}
	}
	o, err := c.Act(ctx, id, a)
	if err == nil && kind != "file" && (o.ExitCode == nil || *o.ExitCode != 0) {
		err = fmt.Errorf("%s answered exit %v", kind, o.ExitCode)
	}
	return err
}

// errorCode is an API error's code, or "client" for anything else.
func errorCode(err error) api.Code {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return "client"
}

func parseMix(s string) (map[string]int, error) {
	w := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 || (k != "run" && k != "exec" && k != "file") {
			return nil, fmt.Errorf("--mix %q: want kind=weight pairs of run, exec and file, as run=4,exec=4,file=2", s)
		}
		w[k] = n
	}
	total := 0
	for _, n := range w {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("--mix %q: the weights add up to 0", s)
	}
	return w, nil
}

func pick(r *rand.Rand, w map[string]int) string {
	keys := make([]string, 0, len(w))
	total := 0
	for k, n := range w {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	x := r.Intn(total)
	for _, k := range keys {
		if x < w[k] {
			return k
		}
		x -= w[k]
	}
	return keys[len(keys)-1]
}

func gauges(ctx context.Context, c *client.Client) (map[string]float64, error) {
	m, err := c.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, g := range daemonGauges {
		if v, ok := m[g]; ok {
			out[g] = v
		}
	}
	return out, nil
}

func printBench(w io.Writer, r *benchReport) {
	backend := r.Backend
	if backend == "" {
		backend = "process"
	}
	fmt.Fprintf(w, "%d clients, %d %s sandboxes, %.1f s: %d actions, %.0f/s\n", r.Clients, r.Sandboxes, backend, r.DurationS, r.Actions, r.PerSecond)
	fmt.Fprintf(w, "latency ms        n      p50      p90      p99\n")
	fmt.Fprintf(w, "  %-8s %8d %8.2f %8.2f %8.2f\n", "all", r.Latency.N, r.Latency.P50, r.Latency.P90, r.Latency.P99)
	kinds := make([]string, 0, len(r.ByKind))
	for k := range r.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		l := r.ByKind[k]
		fmt.Fprintf(w, "  %-8s %8d %8.2f %8.2f %8.2f\n", k, l.N, l.P50, l.P90, l.P99)
	}
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors: none")
	} else {
		codes := make([]string, 0, len(r.Errors))
		for c := range r.Errors {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			if n := r.Refused[c]; n > 0 {
				fmt.Fprintf(w, "errors %s: %d (%d refusals with Retry-After, waited out)\n", c, r.Errors[c], n)
			} else {
				fmt.Fprintf(w, "errors %s: %d (e.g. %s)\n", c, r.Errors[c], r.ErrorSamples[c])
			}
		}
	}
	fmt.Fprintf(w, "daemon            before    after\n")
	for _, g := range daemonGauges {
		fmt.Fprintf(w, "  %-26s %12.0f %12.0f\n", strings.TrimPrefix(g, "sandboxd_"), r.DaemonBefore[g], r.DaemonAfter[g])
	}
}
