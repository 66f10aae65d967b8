package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

func TestMemoryBudget(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		budget, committed, wantMB int64
		refused                   string // a part of the message, "" if admitted
	}{
		{"no budget", 0, 1 << 20, 4096, ""},
		{"fits", 4096, 2048, 2048, ""},
		{"one over", 4096, 2049, 2048, "take the sandboxes' memory limits to 4097 MB, past the daemon's memory budget of 4096 MB"},
		{"unlimited counts as the whole budget", 4096, 1, 0, "a sandbox with no memory limit"},
		{"unlimited alone fits", 4096, 0, 0, ""},
		{"asked for more than the budget", 1024, 0, 2048, "memory_mb 2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := memoryBudget(tc.budget, tc.committed, tc.wantMB)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (!errors.Is(err, api.ErrResourceExhausted) || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("got %v, want resource_exhausted saying %q", err, tc.refused)
			}
		})
	}
}

func TestMemoryGate(t *testing.T) {
	reads := 0
	avail, known := int64(100<<20), true
	g := &memoryGate{floorMB: 256, available: func() (int64, bool) { reads++; return avail, known }}
	err := g.admit("the action")
	if !errors.Is(err, api.ErrResourceExhausted) || !strings.Contains(err.Error(), "the action refused: only 100 MB of memory is available, under the daemon's floor of 256 MB") {
		t.Fatalf("under the floor: %v", err)
	}
	// The reading is reused for a moment: under load it is not taken
	// once per action.
	avail = 1 << 30
	if err := g.admit("the action"); err == nil || reads != 1 {
		t.Fatalf("second admit within %v: %v after %d reads", memoryReadEvery, err, reads)
	}
	g.at = g.at.Add(-memoryReadEvery)
	if err := g.admit("the action"); err != nil || reads != 2 {
		t.Fatalf("after the reading aged: %v after %d reads", err, reads)
	}
	// A host that cannot tell is given the benefit of the doubt.
	known, g.at = false, g.at.Add(-memoryReadEvery)
	if err := g.admit("the action"); err != nil {
		t.Fatalf("unknown memory: %v", err)
	}
	var off *memoryGate
	if err := off.admit("x"); err != nil {
		t.Fatal(err)
	}
}

func TestMemAvailable(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          int64
		ok            bool
	}{
		{"meminfo", "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n", 20000000 << 10, true},
		{"old kernel without MemAvailable", "MemTotal: 1000 kB\nMemFree: 10 kB\n", 0, false},
		{"garbage", "MemAvailable: lots kB\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, ok := memAvailable(p)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %d %v, want %d %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := memAvailable("/proc/meminfo"); !ok {
		t.Error("this host's /proc/meminfo has no MemAvailable")
	}
}

func TestCgroupMemoryHeadroom(t *testing.T) {
	for _, tc := range []struct {
		name, procCgroup, max, current string
		want                           int64
		ok                             bool
	}{
		{"limited", "0::/system.slice/sandboxd.service\n", "1073741824\n", "268435456\n", 805306368, true},
		{"over the limit", "0::/a\n", "100\n", "200\n", 0, true},
		{"no limit", "0::/a\n", "max\n", "100\n", 0, false},
		{"cgroup v1", "12:memory:/a\n1:name=systemd:/a\n", "100\n", "10\n", 0, false},
		{"escape attempt stays in the root", "0::/../../etc\n", "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := strings.TrimSpace(strings.TrimPrefix(strings.Split(tc.procCgroup, "\n")[0], "0::"))
			dir := filepath.Join(root, filepath.Clean("/"+rel))
			if tc.max != "" {
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "memory.max"), []byte(tc.max), 0o644)
				os.WriteFile(filepath.Join(dir, "memory.current"), []byte(tc.current), 0o644)
			}
			pc := filepath.Join(root, "proc-cgroup")
			os.WriteFile(pc, []byte(tc.procCgroup), 0o644)
			got, ok := cgroupMemoryHeadroom(pc, root)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %d %v, want %d %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
