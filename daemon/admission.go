package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Memory admission. Two rules, both answering 429 resource_exhausted with
// Retry-After instead of letting the host fall over:
//
//   - a budget (sandbox.memory_budget_mb) for the sum of the sandboxes'
//     memory limits, checked when one is created: a promise the daemon
//     makes before any memory is used, so it holds even when every
//     sandbox uses all it may at once;
//   - a floor (sandbox.min_free_memory_mb) for the memory still available
//     now, checked when a sandbox is created and when an action starts:
//     limits are usually overcommitted, and this is what stops new work
//     when the overcommitment comes due.

// memoryGate answers whether there is memory enough for new work. The
// reading costs a file read or three, so it is reused for a moment: under
// load it is read a few times a second, not once per action.
type memoryGate struct {
	floorMB int64
	// available reads the memory available to the daemon's work, in
	// bytes; ok is false when it cannot tell.
	available func() (bytes int64, ok bool)

	mu   sync.Mutex
	at   time.Time
	last int64
	ok   bool
}

// memoryReadEvery is how long a reading of the available memory is reused.
const memoryReadEvery = 250 * time.Millisecond

func newMemoryGate(floorMB int64) *memoryGate {
	return &memoryGate{floorMB: floorMB, available: availableMemory}
}

// availableNow returns the latest reading.
func (g *memoryGate) availableNow() (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); g.at.IsZero() || now.Sub(g.at) >= memoryReadEvery {
		g.last, g.ok = g.available()
		g.at = now
	}
	return g.last, g.ok
}

// admit returns a resource_exhausted error when less memory than the floor
// is available. A host that cannot tell is given the benefit of the doubt.
func (g *memoryGate) admit(what string) error {
	if g == nil || g.floorMB <= 0 {
		return nil
	}
	avail, ok := g.availableNow()
	if !ok || avail >= g.floorMB<<20 {
		return nil
	}
	return api.Errorf(api.ErrResourceExhausted, "%s refused: only %d MB of memory is available, under the daemon's floor of %d MB (sandbox.min_free_memory_mb); retry when memory is freed", what, avail>>20, g.floorMB)
}

// availableMemory is the smaller of the host's MemAvailable and what the
// daemon's cgroup (v2) may still use under its memory.max: inside a
// container or a systemd unit with MemoryMax the cgroup is the real bound.
func availableMemory() (int64, bool) {
	host, ok := memAvailable("/proc/meminfo")
	if cg, cgok := cgroupMemoryHeadroom("/proc/self/cgroup", "/sys/fs/cgroup"); cgok && (!ok || cg < host) {
		return cg, true
	}
	return host, ok
}

// memAvailable reads MemAvailable from a meminfo file, in bytes.
func memAvailable(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// cgroupMemoryHeadroom is memory.max minus memory.current of the cgroup v2
// a process is in (procCgroup is its /proc/PID/cgroup). ok is false on
// cgroup v1, or when the cgroup has no memory.max.
func cgroupMemoryHeadroom(procCgroup, root string) (int64, bool) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, false
	}
	var rel string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return 0, false
	}
	dir := filepath.Join(root, filepath.Clean("/"+rel))
	read := func(name string) (int64, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, errors.New("no limit")
		}
		return strconv.ParseInt(s, 10, 64)
	}
	limit, err := read("memory.max")
	if err != nil {
		return 0, false
	}
	cur, err := read("memory.current")
	if err != nil {
		return 0, false
	}
	return max(0, limit-cur), true
}

// memoryBudget checks a new sandbox's memory limit against the budget,
// given what the existing ones (and those being created) were promised.
// A sandbox without a memory limit may use all of it: it counts as the
// whole budget.
func memoryBudget(budgetMB, committedMB, wantMB int64) error {
	if budgetMB <= 0 {
		return nil
	}
	asked := fmt.Sprintf("memory_mb %d", wantMB)
	if wantMB <= 0 {
		wantMB, asked = budgetMB, "no memory limit"
	}
	if committedMB+wantMB <= budgetMB {
		return nil
	}
	return api.Errorf(api.ErrResourceExhausted, "a sandbox with %s would take the sandboxes' memory limits to %d MB, past the daemon's memory budget of %d MB (sandbox.memory_budget_mb; %d MB are promised now); delete a sandbox or ask for less memory", asked, committedMB+wantMB, budgetMB, committedMB)
}
