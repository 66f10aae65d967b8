// Command benchdoc writes the results of `make bench` into
// docs/benchmarks.md: it reads the output of `go test -bench -v` (one or
// more files, each ending with the line scripts/bench.sh adds about its
// group) and the JSON report of `sandboxd bench`, and replaces the part of
// the document between the markers
//
//	<!-- make bench: begin -->
//	<!-- make bench: end -->
//
// with the machine, the date, the commit and one table holding each figure
// beside its floor, its ratio and its target. Usage:
//
//	go run ./internal/benchdoc [-doc docs/benchmarks.md] [-load load.json] [-commit REV] OUTPUT.txt...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/atomicfile"
)

func main() {
	doc := flag.String("doc", "docs/benchmarks.md", "the document to rewrite between its markers")
	load := flag.String("load", "", "the `sandboxd bench --json` report of the load run")
	commit := flag.String("commit", "", "the commit benchmarked (default: git describe --always --dirty now)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchdoc [-doc FILE] [-load FILE] [-commit REV] GO-TEST-OUTPUT...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := generate(*doc, *load, *commit, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func generate(docPath, loadPath, commit string, outputs []string) error {
	r := newRun()
	for _, name := range outputs {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = r.parse(name, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	rep := &report{machine: readMachine(), date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit: commit, run: r}
	if rep.commit == "" {
		rep.commit = describe()
	}
	if loadPath != "" {
		rep.load, rep.loadErr = readLoad(loadPath)
	}
	old, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	doc, err := rewrite(string(old), render(rep))
	if err != nil {
		return fmt.Errorf("%s: %v", docPath, err)
	}
	return atomicfile.Write(docPath, []byte(doc), 0o644)
}

// readLoad reads the load run's report; an empty or broken one (the run
// failed) becomes the reason shown instead.
func readLoad(path string) (*loadReport, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	var l loadReport
	if err := json.Unmarshal(b, &l); err != nil || l.Clients == 0 {
		return nil, fmt.Sprintf("%s holds no report (see the daemon's log beside it)", path)
	}
	return &l, ""
}

// describe names the commit now; a tree being edited shows as -dirty.
func describe() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// readMachine reads the CPU, memory, kernel and OS from /proc and /etc;
// what cannot be read shows as "?". The Go version is this program's,
// built by the toolchain that ran the benchmarks.
func readMachine() machine {
	m := machine{cpu: "?", cores: runtime.NumCPU(), memory: "?", kernel: "?", os: "?", goVer: runtime.Version()}
	cores := 0
	eachLine("/proc/cpuinfo", func(k, v string) {
		switch k {
		case "model name":
			if m.cpu == "?" {
				m.cpu = v
			}
		case "processor":
			cores++
		}
	})
	if cores > 0 {
		m.cores = cores
	}
	eachLine("/proc/meminfo", func(k, v string) {
		if k == "MemTotal" {
			if kb, err := strconv.ParseFloat(strings.TrimSuffix(v, " kB"), 64); err == nil {
				m.memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	})
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/etc/os-release"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
				m.os = strings.Trim(v, `"`)
			}
		}
		f.Close()
	}
	return m
}

// eachLine calls f with the key and value of each "key : value" line.
func eachLine(path string, f func(k, v string)) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			f(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
}
