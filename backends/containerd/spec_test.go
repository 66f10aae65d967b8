package containerd

import (
	"context"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
)

// TestSpecGolden checks the hardening of the spec every sandbox gets, for
// the limits and network asked for.
func TestSpecGolden(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "sandboxd"}, helper: helperInfo{path: "/usr/bin/true"}}
	for _, tc := range []struct {
		name    string
		limits  api.Limits
		network string
		mem     int64
		pids    int64
		quota   int64
	}{
		{"defaults", api.Limits{}, api.NetworkNone, defaultMemoryMB << 20, defaultPids, 0},
		{"limits", api.Limits{MemoryMB: 256, Pids: 64, CPUs: 0.5}, api.NetworkNone, 256 << 20, 64, 50000},
		{"host-network", api.Limits{MemoryMB: 128, Pids: 32, CPUs: 2}, api.NetworkHost, 128 << 20, 32, 200000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := backends.Spec{ID: "sb-golden", Dir: t.TempDir(), Limits: tc.limits, Network: tc.network}
			s, err := b.buildSpec(context.Background(), spec, true, "/workspace", []string{"PATH=/usr/bin"})
			if err != nil {
				t.Fatal(err)
			}
			p := s.Process
			if !p.NoNewPrivileges {
				t.Error("no_new_privileges is off")
			}
			for _, set := range [][]string{p.Capabilities.Bounding, p.Capabilities.Effective, p.Capabilities.Permitted} {
				if !slices.Equal(set, sandboxCaps) {
					t.Errorf("capabilities = %v, want %v", set, sandboxCaps)
				}
				for _, bad := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_MKNOD", "CAP_SYS_MODULE", "CAP_DAC_READ_SEARCH"} {
					if slices.Contains(set, bad) {
						t.Errorf("capabilities include %s", bad)
					}
				}
			}
			if len(p.Capabilities.Inheritable) != 0 || len(p.Capabilities.Ambient) != 0 {
				t.Errorf("inheritable %v / ambient %v capabilities", p.Capabilities.Inheritable, p.Capabilities.Ambient)
			}
			if p.User.UID != 0 || p.OOMScoreAdj == nil || *p.OOMScoreAdj <= 0 {
				t.Errorf("user %+v oom_score_adj %v", p.User, p.OOMScoreAdj)
			}
			l := s.Linux
			if l.Seccomp == nil || l.Seccomp.DefaultAction != specs.ActErrno || len(l.Seccomp.Syscalls) == 0 {
				t.Errorf("seccomp = %+v, want the default profile (deny by default)", l.Seccomp)
			}
			for _, m := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"} {
				if !slices.Contains(l.MaskedPaths, m) {
					t.Errorf("%s is not masked", m)
				}
			}
			for _, r := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/irq"} {
				if !slices.Contains(l.ReadonlyPaths, r) {
					t.Errorf("%s is not read-only", r)
				}
			}
			var nss []specs.LinuxNamespaceType
			for _, n := range l.Namespaces {
				if n.Path != "" {
					t.Errorf("namespace %s joins %s", n.Type, n.Path)
				}
				nss = append(nss, n.Type)
			}
			for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.CgroupNamespace} {
				if !slices.Contains(nss, want) {
					t.Errorf("no %s namespace", want)
				}
			}
			if got := slices.Contains(nss, specs.NetworkNamespace); got != (tc.network != api.NetworkHost) {
				t.Errorf("own network namespace = %v for network %q", got, tc.network)
			}
			r := l.Resources
			if r.Memory == nil || *r.Memory.Limit != tc.mem || *r.Memory.Swap != tc.mem {
				t.Errorf("memory = %+v, want limit and swap %d", r.Memory, tc.mem)
			}
			if r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != tc.pids {
				t.Errorf("pids = %+v, want %d", r.Pids, tc.pids)
			}
			switch {
			case tc.quota == 0 && r.CPU != nil && r.CPU.Quota != nil:
				t.Errorf("cpu quota %d without a cpus limit", *r.CPU.Quota)
			case tc.quota != 0 && (r.CPU == nil || *r.CPU.Quota != tc.quota || *r.CPU.Period != 100000):
				t.Errorf("cpu = %+v, want quota %d per 100000", r.CPU, tc.quota)
			}
			if len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Access != "rwm" {
				t.Errorf("device rules %+v, want deny-all first", r.Devices)
			}
			if s.Root == nil || !s.Root.Readonly {
				t.Errorf("host image root %+v is not read-only", s.Root)
			}
			mounts := map[string]specs.Mount{}
			for _, m := range s.Mounts {
				mounts[m.Destination] = m
			}
			for dst, ro := range map[string]bool{"/usr": true, "/etc": true, helperPath: true, "/workspace": false, "/tmp": false, "/root": false} {
				m, ok := mounts[dst]
				if !ok {
					t.Errorf("no mount at %s", dst)
					continue
				}
				if slices.Contains(m.Options, "ro") != ro {
					t.Errorf("mount %s options %v, want read-only %v", dst, m.Options, ro)
				}
				if m.Type == "bind" && !slices.Contains(m.Options, "nosuid") {
					t.Errorf("mount %s options %v lack nosuid", dst, m.Options)
				}
			}
			for _, m := range s.Mounts {
				for _, secret := range []string{"/etc/shadow", "/etc/ssh", "/root", "/var/lib/sandboxd", "/run/containerd"} {
					if m.Source == secret {
						t.Errorf("host %s is mounted at %s", secret, m.Destination)
					}
				}
			}
		})
	}
}
