package main

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The generated part of docs/benchmarks.md lies between these lines;
// everything outside them is hand-written and left alone.
const (
	beginMarker = "<!-- make bench: begin -->"
	endMarker   = "<!-- make bench: end -->"
)

// rewrite replaces what lies between the markers of doc with generated.
func rewrite(doc, generated string) (string, error) {
	b := strings.Index(doc, beginMarker)
	e := strings.Index(doc, endMarker)
	switch {
	case b < 0 || e < 0:
		return "", fmt.Errorf("the markers %q and %q must both be in the document", beginMarker, endMarker)
	case strings.Count(doc, beginMarker) > 1 || strings.Count(doc, endMarker) > 1:
		return "", errors.New("the markers must appear once each")
	case e < b:
		return "", errors.New("the end marker comes before the begin marker")
	}
	head := doc[:b+len(beginMarker)]
	return head + "\n" + strings.TrimSpace(generated) + "\n" + doc[e:], nil
}

// machine describes where the benchmarks ran.
type machine struct {
	cpu    string
	cores  int
	memory string
	kernel string
	os     string
	goVer  string
}

// loadReport is the part of `sandboxd bench --json` the document shows.
type loadReport struct {
	Clients   int     `json:"clients"`
	Sandboxes int     `json:"sandboxes"`
	Backend   string  `json:"backend"`
	DurationS float64 `json:"duration_s"`
	Actions   int     `json:"actions"`
	PerSecond float64 `json:"actions_per_s"`
	Latency   struct {
		P50 float64 `json:"p50"`
		P90 float64 `json:"p90"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
	Errors       map[string]int     `json:"errors_by_code"`
	Refused      map[string]int     `json:"refused_by_code"` // of Errors, admission control's refusals
	DaemonBefore map[string]float64 `json:"daemon_before"`
	DaemonAfter  map[string]float64 `json:"daemon_after"`
}

// report is everything the generated part shows.
type report struct {
	machine machine
	date    string
	commit  string
	run     *run
	load    *loadReport
	loadErr string // why there is no load report
}

// row is one line of the results table.
type row struct {
	bench, floor, value, ratio, target, met string
}

// rows lays the results out against the figures: every figure of a
// benchmark that ran, one row for a benchmark that did not, and rows
// without a target for whatever the figures do not know.
func rows(r *run) []row {
	var out []row
	var benches []string
	byBench := map[string][]figure{}
	for _, f := range figures {
		if _, ok := byBench[f.bench]; !ok {
			benches = append(benches, f.bench)
		}
		byBench[f.bench] = append(byBench[f.bench], f)
	}
	for _, name := range r.order {
		if _, ok := byBench[name]; !ok {
			benches = append(benches, name)
		}
	}
	for _, name := range benches {
		figs := byBench[name]
		res := r.results[name]
		if res == nil || res.status != statusOK {
			out = append(out, notRun(r, name, res, figs))
			continue
		}
		known := map[string]bool{}
		for _, f := range figs {
			out = append(out, figureRow(f, res))
			known[f.metric], known[f.floor], known[f.ratio] = true, true, true
		}
		custom := slices.ContainsFunc(res.order, func(m string) bool { return !standardMetrics[m] })
		for _, m := range res.order {
			if known[m] || restated[m] || (custom && standardMetrics[m]) {
				continue
			}
			out = append(out, row{bench: "`" + name + "` " + m, floor: "—", value: number(res.metrics[m]), ratio: "—", target: "—", met: "—"})
		}
	}
	return out
}

func figureRow(f figure, res *result) row {
	rw := row{bench: f.label, floor: "—", value: "not reported", ratio: "—", target: f.target.describe(f.unit), met: "—"}
	v, ok := res.metrics[f.metric]
	if !ok {
		return rw
	}
	rw.value = withUnit(number(f.shown(v)), f.unit)
	var ratio float64
	hasRatio := false
	if fl, ok := res.metrics[f.floor]; ok && f.floor != "" {
		rw.floor = withUnit(number(f.shown(fl)), f.unit)
		if f.floorLabel != "" {
			rw.floor = f.floorLabel + ": " + rw.floor
		}
		if fl != 0 {
			ratio, hasRatio = v/fl, true
		}
	}
	if x, ok := res.metrics[f.ratio]; ok && f.ratio != "" {
		ratio, hasRatio = x, true
	}
	if hasRatio {
		rw.ratio = fmt.Sprintf("%.2f×", ratio)
	}
	if f.target.cmp != noTarget && (hasRatio || !f.target.onRatio) {
		rw.met = "no"
		if f.target.met(f.shown(v), ratio) {
			rw.met = "**yes**"
		}
	}
	return rw
}

// notRun is the row of a benchmark without results, saying why.
func notRun(r *run, name string, res *result, figs []figure) row {
	label := "`" + name + "`"
	var targets []string
	if len(figs) > 0 {
		label = figs[0].label + " (`" + name + "`)"
		for _, f := range figs {
			if f.target.cmp != noTarget {
				targets = append(targets, f.target.describe(f.unit))
			}
		}
	}
	var g *group
	for i := range r.groups {
		if r.groups[i].covers(name) {
			g = &r.groups[i]
		}
	}
	met, why := "not run", ""
	switch {
	case res != nil && res.status == statusSkipped:
		why = "**skipped**: " + short(strings.TrimPrefix(res.reason, "skipping: "))
	case res != nil && res.status == statusFailed:
		met, why = "failed", "**failed**: "+short(res.reason)
	case g != nil && g.exit != 0:
		met, why = "failed", fmt.Sprintf("**failed**: group %s exited with status %d before reporting it (%s)", g.name, g.exit, g.file)
	case g != nil:
		why = fmt.Sprintf("**not run**: group %s did not report it", g.name)
	default:
		why = "**not run**: no group of `make bench` runs it"
	}
	if res != nil && res.status == statusFailed && res.reason == "" {
		why = "**failed**"
	}
	t := "—"
	if len(targets) > 0 {
		t = strings.Join(targets, "; ")
	}
	return row{bench: label, floor: "—", value: why, ratio: "—", target: t, met: met}
}

// short keeps a reason to one table cell.
func short(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "|", "\\|")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:120]) + "…"
	}
	if s == "" {
		return "no reason given"
	}
	return s
}

// render is the generated part of the document.
func render(rep *report) string {
	var b strings.Builder
	m := rep.machine
	fmt.Fprintf(&b, "## Latest `make bench`\n\n")
	fmt.Fprintf(&b, "Generated by `make bench` (`internal/benchdoc`): do not edit between the\nmarkers, the next run replaces it.\n\n")
	fmt.Fprintf(&b, "- Machine: %s, %d cores, %s, Linux %s, %s, %s\n", m.cpu, m.cores, m.memory, m.kernel, m.os, m.goVer)
	fmt.Fprintf(&b, "- Date: %s\n", rep.date)
	fmt.Fprintf(&b, "- Commit: `%s`\n\n", rep.commit)
	b.WriteString("| benchmark | floor (same run) | sandboxd | ratio | target | met |\n|---|---|---|---|---|---|\n")
	for _, rw := range rows(rep.run) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", rw.bench, rw.floor, rw.value, rw.ratio, rw.target, rw.met)
	}
	b.WriteString("\n")
	renderLoad(&b, rep)
	renderGroups(&b, rep.run)
	return b.String()
}

func renderLoad(b *strings.Builder, rep *report) {
	l := rep.load
	if l == nil {
		why := rep.loadErr
		if why == "" {
			why = "no report given"
		}
		fmt.Fprintf(b, "Load (`sandboxd bench`): **not run**: %s.\n\n", short(why))
		return
	}
	backend := l.Backend
	if backend == "" {
		backend = "process"
	}
	fmt.Fprintf(b, "Load: `sandboxd bench --clients %d --sandboxes %d --duration %.0fs` against a daemon of its own (TCP loopback, %s sandboxes):\n\n", l.Clients, l.Sandboxes, l.DurationS, backend)
	b.WriteString("| clients × sandboxes | actions/s | p50 | p90 | p99 | errors | daemon goroutines / fds / RSS before → after |\n|---|---|---|---|---|---|---|\n")
	errs := "none"
	if len(l.Errors) > 0 {
		var parts []string
		for code, n := range l.Errors {
			p := fmt.Sprintf("%s: %d", code, n)
			if k := l.Refused[code]; k > 0 {
				p += fmt.Sprintf(" (%d refused with Retry-After)", k)
			}
			parts = append(parts, p)
		}
		sort.Strings(parts)
		errs = "**" + strings.Join(parts, ", ") + "**"
	}
	gauge := func(name string, scale float64, format string) string {
		before, okB := l.DaemonBefore[name]
		after, okA := l.DaemonAfter[name]
		if !okB || !okA {
			return "?"
		}
		return fmt.Sprintf(format+" → "+format, before*scale, after*scale)
	}
	fmt.Fprintf(b, "| %d × %d | %.0f | %s ms | %s ms | %s ms | %s | %s / %s / %s MiB |\n\n",
		l.Clients, l.Sandboxes, l.PerSecond, number(l.Latency.P50), number(l.Latency.P90), number(l.Latency.P99), errs,
		gauge("sandboxd_goroutines", 1, "%.0f"), gauge("sandboxd_open_fds", 1, "%.0f"), gauge("sandboxd_resident_bytes", 1.0/(1<<20), "%.1f"))
}

func renderGroups(b *strings.Builder, r *run) {
	if len(r.groups) == 0 {
		return
	}
	b.WriteString("The groups of this run (their output is in `build/bench/`):\n\n| group | benchtime | time | status |\n|---|---|---|---|\n")
	var total float64
	for _, g := range r.groups {
		status := "ok"
		if g.exit != 0 {
			status = fmt.Sprintf("**failed** (exit %d)", g.exit)
			if g.note != "" {
				status += ": " + short(g.note)
			}
		}
		bt := g.benchtime
		if bt == "" {
			bt = "—"
		}
		fmt.Fprintf(b, "| %s | %s | %.0f s | %s |\n", g.name, bt, g.seconds, status)
		total += g.seconds
	}
	fmt.Fprintf(b, "| total | | %.0f s (%.1f min) | |\n", total, total/60)
}
