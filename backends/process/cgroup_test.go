package process

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestParseCgroupFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
	}{
		{
			name: "cgroup2 only",
			in:   "0::/user.slice/user-1000.slice/session-2.scope\n",
			want: map[string]string{"": "/user.slice/user-1000.slice/session-2.scope"},
		},
		{
			name: "hybrid",
			in: "12:pids:/\n" +
				"11:cpu,cpuacct:/system.slice/x.service\n" +
				"4:memory:/process_api/178684a7d825a6beccde336cd41b8e93\n" +
				"1:name=systemd:/init.scope\n" +
				"0::/init.scope\n",
			want: map[string]string{
				"pids":         "/",
				"cpu":          "/system.slice/x.service",
				"cpuacct":      "/system.slice/x.service",
				"memory":       "/process_api/178684a7d825a6beccde336cd41b8e93",
				"name=systemd": "/init.scope",
				"":             "/init.scope",
			},
		},
		{
			name: "v1 only",
			in:   "3:memory:/a\n2:pids:/b\n",
			want: map[string]string{"memory": "/a", "pids": "/b"},
		},
		{
			name: "colons in the path",
			in:   "0::/a:b/c:d\n5:memory:/x:y\n",
			want: map[string]string{"": "/a:b/c:d", "memory": "/x:y"},
		},
		{
			name: "spaces in the path",
			in:   "0::/my group/leaf\n",
			want: map[string]string{"": "/my group/leaf"},
		},
		{
			name: "no trailing newline, blank and bad lines",
			in:   "\n garbage\n7:pids\n0::/x",
			want: map[string]string{"": "/x"},
		},
		{
			name: "empty",
			in:   "",
			want: map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "cgroup")
			if err := os.WriteFile(f, []byte(tc.in), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := parseCgroupFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("parseCgroupFile(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if _, err := parseCgroupFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("parseCgroupFile of a missing file: no error")
	}
	// Ours parses and has what the backend looks for.
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(own) == 0 {
		t.Error("ownCgroups() is empty")
	}
}

func TestMountRel(t *testing.T) {
	for _, tc := range []struct {
		root, p, want string
	}{
		{"/", "/", "."},
		{"/", "/a", "a"},
		{"/", "/a/b/c", "a/b/c"},
		{"/", "/a/../b", "b"},
		{"/process_api", "/process_api", "."},
		{"/process_api", "/process_api/abc", "abc"},
		{"/process_api", "/process_api/abc/def", "abc/def"},
		// Outside the mounted root (a cgroup namespace or a bind mount
		// of a subtree): the mount point itself.
		{"/a", "/b", "."},
		{"/a", "/", "."},
		{"/a/b", "/a", "."},
		{"/a", "/ab", "."},
		{"/a", "/a/../c", "."},
	} {
		m := mount{dir: "/sys/fs/cgroup/x", root: tc.root}
		if got := m.rel(tc.p); got != tc.want {
			t.Errorf("mount{root: %q}.rel(%q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}

func TestMountRelDotDotNames(t *testing.T) {
	for _, tc := range []struct{ root, p, want string }{
		{"/", "/..data", "..data"},
		{"/a", "/a/..b/c", "..b/c"},
	} {
		m := mount{dir: "/sys/fs/cgroup/x", root: tc.root}
		if got := m.rel(tc.p); got != tc.want {
			t.Errorf("mount{root: %q}.rel(%q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}

func TestCgroupMounts(t *testing.T) {
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		t.Skip("no cgroup hierarchies are mounted here")
	}
	for ctl, m := range mounts {
		fi, err := os.Stat(m.dir)
		if err != nil || !fi.IsDir() {
			t.Errorf("mount of %q: %s is not a directory (%v)", ctl, m.dir, err)
		}
		if !filepath.IsAbs(m.root) {
			t.Errorf("mount of %q: root %q is not absolute", ctl, m.root)
		}
		file := "cgroup.procs"
		if _, err := os.Stat(filepath.Join(m.dir, file)); err != nil {
			t.Errorf("mount of %q at %s has no %s", ctl, m.dir, file)
		}
	}
	if m, ok := mounts[""]; ok {
		if _, err := os.Stat(filepath.Join(m.dir, "cgroup.controllers")); err != nil {
			t.Errorf("the cgroup2 mount %s has no cgroup.controllers", m.dir)
		}
	}
	for _, ctl := range v1Controllers {
		if m, ok := mounts[ctl]; ok {
			if _, err := os.Stat(filepath.Join(m.dir, "tasks")); err != nil {
				t.Errorf("the v1 %s mount %s has no tasks file", ctl, m.dir)
			}
		}
	}
}

func TestWriteLimit(t *testing.T) {
	for _, tc := range []struct {
		file string
		v    int64
		want string
	}{
		{"memory.max", 64 << 20, "67108864"},
		{"memory.max", 0, "max"},
		{"memory.max", -1, "max"},
		{"memory.swap.max", 0, "0"},
		{"memory.swap.max", -1, "max"},
		{"pids.max", 20, "20"},
		{"pids.max", 0, "max"},
		{"memory.limit_in_bytes", 0, "-1"},
		{"memory.limit_in_bytes", 1 << 20, "1048576"},
		{"memory.memsw.limit_in_bytes", 0, "-1"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tc.file), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := writeLimit(dir, tc.file, tc.v); err != nil {
			t.Errorf("writeLimit(%s, %d): %v", tc.file, tc.v, err)
			continue
		}
		got, _ := os.ReadFile(filepath.Join(dir, tc.file))
		if string(got) != tc.want {
			t.Errorf("writeLimit(%s, %d) wrote %q, want %q", tc.file, tc.v, got, tc.want)
		}
	}
	// memory.swap.max may be missing (no swap accounting); others may not.
	// (Files in a cgroup directory cannot be created; a missing directory
	// stands for that here.)
	dir := filepath.Join(t.TempDir(), "missing")
	if err := writeLimit(dir, "memory.swap.max", 0); err != nil {
		t.Errorf("writeLimit of a missing memory.swap.max: %v", err)
	}
	if err := writeLimit(dir, "pids.max", 5); err == nil {
		t.Error("writeLimit of a missing pids.max: no error")
	}
}
