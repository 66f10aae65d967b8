package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Status of a benchmark in a run.
const (
	statusOK      = "ok"
	statusSkipped = "skipped"
	statusFailed  = "failed"
)

// result is one benchmark's outcome in `go test -bench -v` output.
type result struct {
	name    string // without the -GOMAXPROCS suffix
	pkg     string
	status  string
	reason  string // why it was skipped or failed: its first log line
	metrics map[string]float64
	order   []string // metric names as reported
	log     []string // its log lines, without the indentation
}

// group is one `go test` invocation of scripts/bench.sh (or the load run),
// from the line the script appends after it:
//
//	make-bench: group NAME pkg PKG benchtime N exit CODE seconds S regex REGEX
type group struct {
	name, pkg, benchtime, regex string
	exit                        int
	seconds                     float64
	file                        string // the output file it was read from
	note                        string // the first line of its output that is none of go test's own
}

// run is everything read from the output files.
type run struct {
	results map[string]*result
	order   []string // benchmark names as met
	groups  []group
}

func newRun() *run { return &run{results: map[string]*result{}} }

// groupPrefix starts the line scripts/bench.sh writes after each group.
const groupPrefix = "make-bench: group "

var (
	// A result line: name, iterations, then value-unit pairs.
	resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)
	// A benchmark's name alone: chatty output announces each one so.
	nameLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s*$`)
	// A log line's file:line prefix.
	logPrefix = regexp.MustCompile(`^\S+\.go:\d+: `)
)

func (r *run) result(name, pkg string) *result {
	if res, ok := r.results[name]; ok {
		return res
	}
	res := &result{name: name, pkg: pkg, metrics: map[string]float64{}}
	r.results[name] = res
	r.order = append(r.order, name)
	return res
}

// parse reads the output of `go test -run '^$' -bench ... -v` (file names
// it in errors) into r. Log lines go to the benchmark last announced; a
// benchmark's status comes from its result line or its --- SKIP or
// --- FAIL line.
func (r *run) parse(file string, in io.Reader) error {
	var pkg string
	// current takes the log lines; announced is the benchmark running,
	// which a panic or a timeout is blamed on.
	var current, announced *result
	// note is what the group said beyond its benchmarks: why it failed
	// when all of them passed (the tests' check for leftovers, a build
	// error); noteMore takes the line after one ending in ":".
	var note string
	noteMore := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
		case strings.HasPrefix(line, groupPrefix):
			g, err := parseGroup(line)
			if err != nil {
				return fmt.Errorf("%s:%d: %v", file, n, err)
			}
			g.file, g.note = file, note
			r.groups = append(r.groups, g)
			note, noteMore, current, announced = "", false, nil, nil
		case strings.HasPrefix(line, "--- SKIP: "), strings.HasPrefix(line, "--- FAIL: "):
			f := strings.Fields(line)
			if len(f) < 3 || !strings.HasPrefix(f[2], "Benchmark") {
				continue // a test's, not a benchmark's
			}
			current = r.result(trimProcs(f[2]), pkg)
			current.status = statusSkipped
			if f[1] == "FAIL:" {
				current.status = statusFailed
			}
		case strings.HasPrefix(line, "    ") && current != nil:
			current.log = append(current.log, strings.TrimSpace(line))
		case noteMore && strings.TrimSpace(line) != "":
			note += " " + strings.TrimSpace(line)
			noteMore = false
		default:
			if m := resultLine.FindStringSubmatch(line); m != nil {
				current = r.result(m[1], pkg)
				if err := current.parseMetrics(m[3]); err != nil {
					return fmt.Errorf("%s:%d: %v", file, n, err)
				}
				if current.status == "" {
					current.status = statusOK
				}
			} else if m := nameLine.FindStringSubmatch(line); m != nil {
				current = r.result(m[1], pkg)
				announced = current
			} else if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
				// PASS, ok, FAIL, a panic: nothing of a benchmark's.
				current = nil
				if strings.HasPrefix(line, "panic: ") && announced != nil && announced.status == "" {
					announced.status = statusFailed
					announced.reason = line
				}
				if note == "" && !goTestLine(line) {
					note = strings.TrimSpace(line)
					noteMore = strings.HasSuffix(note, ":")
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	for _, res := range r.results {
		if res.reason == "" && res.status != statusOK && len(res.log) > 0 {
			res.reason = logPrefix.ReplaceAllString(res.log[0], "")
		}
	}
	return nil
}

// goTestLine reports whether line is go test's own and says nothing of a
// failure ("# pkg" heads a build error: the error follows it).
func goTestLine(line string) bool {
	if line == "PASS" || line == "FAIL" || strings.TrimSpace(line) == "" {
		return true
	}
	for _, p := range []string{"goos: ", "goarch: ", "cpu: ", "ok ", "FAIL\t", "exit status ", "=== ", "--- ", "# "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// parseMetrics reads "value unit" pairs.
func (res *result) parseMetrics(s string) error {
	f := strings.Fields(s)
	if len(f)%2 != 0 {
		return fmt.Errorf("%s: odd value/unit pairs in %q", res.name, s)
	}
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", res.name, f[i])
		}
		if _, seen := res.metrics[f[i+1]]; !seen {
			res.order = append(res.order, f[i+1])
		}
		res.metrics[f[i+1]] = v
	}
	return nil
}

// trimProcs removes the -GOMAXPROCS suffix of a benchmark's name.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// parseGroup reads a groupPrefix line; regex, last, takes the rest of it.
func parseGroup(line string) (group, error) {
	var g group
	rest := strings.TrimPrefix(line, groupPrefix)
	if before, re, ok := strings.Cut(rest, " regex "); ok {
		rest, g.regex = before, strings.TrimSpace(re)
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f)%2 != 1 {
		return g, fmt.Errorf("malformed group line %q", line)
	}
	g.name = f[0]
	for i := 1; i < len(f); i += 2 {
		k, v := f[i], f[i+1]
		var err error
		switch k {
		case "pkg":
			g.pkg = v
		case "benchtime":
			g.benchtime = v
		case "exit":
			g.exit, err = strconv.Atoi(v)
		case "seconds":
			g.seconds, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return g, fmt.Errorf("group line %q: %s: %v", line, k, err)
		}
	}
	return g, nil
}

// covers reports whether g was meant to run the benchmark name. The
// groups' expressions are anchored names, unique across packages.
func (g group) covers(name string) bool {
	if g.regex == "" {
		return false
	}
	re, err := regexp.Compile(g.regex)
	return err == nil && re.MatchString(name)
}
