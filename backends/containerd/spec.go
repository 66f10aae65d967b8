package containerd

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backends"
	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

// Paths inside every container.
const (
	helperDir  = "/.sandboxd"
	helperPath = helperDir + "/sandboxd"
	defaultWD  = "/workspace"
)

// Capabilities every sandbox keeps: what root needs to own and chmod its
// files, switch users (su, pip's builds), signal its processes and bind
// low ports. Left out of containerd's defaults: MKNOD, NET_RAW (raw
// sockets: spoofing, ping floods), SETFCAP, SETPCAP, SYS_CHROOT and
// AUDIT_WRITE. SYS_ADMIN, NET_ADMIN, SYS_PTRACE and the rest were never in.
var sandboxCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID",
}

// Defaults when the sandbox's limits leave a field 0.
const (
	defaultMemoryMB = 2048
	defaultPids     = 1024
)

// helperInfo is the program bind-mounted as the containers' init.
type helperInfo struct {
	path   string
	static bool // runs in any image, not just "host"
}

func findHelper(p string) (helperInfo, error) {
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return helperInfo{}, fmt.Errorf("containerd backend: find own executable: %w", err)
		}
		p = exe
		// The small helper binary beside the daemon starts much faster
		// than the daemon binary (see cmd/sandboxd-helper).
		if small := filepath.Join(filepath.Dir(exe), HelperName); isFile(small) {
			p = small
		}
	}
	p, err := filepath.EvalSymlinks(p)
	if err != nil {
		return helperInfo{}, fmt.Errorf("containerd backend: helper: %w", err)
	}
	f, err := elf.Open(p)
	if err != nil {
		return helperInfo{}, fmt.Errorf("containerd backend: helper %s: %w", p, err)
	}
	defer f.Close()
	static := true
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			static = false
		}
	}
	return helperInfo{path: p, static: static}, nil
}

// HelperName is the file name of the small helper binary
// (cmd/sandboxd-helper) the daemon looks for beside its executable.
const HelperName = "sandboxd-helper"

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// hostLinks are the top-level entries of the host image taken from the
// host as they are: symlinks (merged /usr) copied, directories bind-mounted
// read-only.
var hostLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtc are files and directories of the host's /etc that hold no
// secrets and that programs need: Debian's alternatives (awk, editor,
// python links), the dynamic loader's cache and CA certificates.
var hostEtc = []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "mime.types", "localtime", "fonts"}

// layout is where a sandbox's host-side directories are.
type layout struct {
	dir string // Spec.Dir: private to the daemon
}

func (l layout) rootfs() string    { return filepath.Join(l.dir, "rootfs") }
func (l layout) etc() string       { return filepath.Join(l.dir, "etc") }
func (l layout) workspace() string { return filepath.Join(l.dir, "workspace") }
func (l layout) tmp() string       { return filepath.Join(l.dir, "tmp") }
func (l layout) home() string      { return filepath.Join(l.dir, "home") }
func (l layout) fifos() string     { return filepath.Join(l.dir, "io") }

// prepare makes the host-side directories of a sandbox. The workspace,
// /tmp and /root directories belong to root inside the container, which
// is root on the host too (no user namespace): mode 0755 and 1777 as in
// any Linux system.
func (l layout) prepare(host bool, hostname string) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{l.workspace(), 0o755}, {l.tmp(), 0o1777}, {l.home(), 0o700}, {l.fifos(), 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	if !host {
		return nil
	}
	root := l.rootfs()
	for _, d := range []string{"usr", "etc", "proc", "dev", "sys", "tmp", "root", "run", "var", "workspace", strings.TrimPrefix(helperDir, "/")} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for _, name := range hostLinks {
		fi, err := os.Lstat("/" + name)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + name)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case fi.IsDir():
			if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, strings.TrimPrefix(helperPath, "/")), nil, 0o755); err != nil {
		return err
	}
	return writeEtc(l.etc(), hostname)
}

// writeEtc generates the host image's /etc: users and groups of a minimal
// system, name resolution, and mount points for the host files of
// hostEtc. Nothing of the host's own users, shadow, keys or secrets.
func writeEtc(dir, hostname string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":         "root:x:0:\nnogroup:x:65534:\n",
		"hosts":         "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname":      hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
		"resolv.conf":   resolvConf(),
		"os-release":    osRelease(),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, name := range hostEtc {
		fi, err := os.Stat("/etc/" + name)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			err = os.MkdirAll(filepath.Join(dir, name), 0o755)
		default:
			err = os.WriteFile(filepath.Join(dir, name), nil, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// resolvConf is the host's resolver configuration (nameservers are no
// secret; a sandbox without network cannot use them anyway).
func resolvConf() string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "nameserver" || f[0] == "search" || f[0] == "options") {
			out.WriteString(line)
		}
	}
	return out.String()
}

func osRelease() string {
	b, _ := os.ReadFile("/etc/os-release")
	if len(b) == 0 {
		b, _ = os.ReadFile("/usr/lib/os-release")
	}
	return string(b)
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
}

func rwBind(src, dst string) specs.Mount {
	return specs.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", "rw", "nosuid", "nodev"}}
}

// buildSpec returns the OCI spec of a sandbox's container: containerd's
// defaults (namespaces, masked and read-only /proc and /sys paths, device
// rules), hardened further (see sandboxCaps), with the sandbox's mounts,
// limits and network.
func (b *Backend) buildSpec(ctx context.Context, spec backends.Spec, host bool, workdir string, env []string) (*specs.Spec, error) {
	ctx = namespaces.WithNamespace(ctx, b.cfg.Namespace)
	l := layout{spec.Dir}
	s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: spec.ID})
	if err != nil {
		return nil, err
	}
	s.Hostname = containerHostname
	s.Process.Args = []string{helperPath, sbinit.Arg, sbinit.ModeInit}
	s.Process.Env = env
	s.Process.Cwd = "/"
	s.Process.NoNewPrivileges = true
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding: sandboxCaps, Permitted: sandboxCaps, Effective: sandboxCaps,
	}
	s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: maxFiles(), Soft: maxFiles()}}
	s.Process.OOMScoreAdj = ptr(500) // the sandbox dies before the daemon does
	if host {
		s.Root = &specs.Root{Path: l.rootfs(), Readonly: true}
	}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	if spec.Network == api.NetworkHost {
		ns := s.Linux.Namespaces[:0]
		for _, n := range s.Linux.Namespaces {
			if n.Type != specs.NetworkNamespace {
				ns = append(ns, n)
			}
		}
		s.Linux.Namespaces = ns
	}
	s.Linux.Seccomp = seccomp.DefaultProfile(s)

	mounts := s.Mounts
	// /dev/shm: containerd's default is 64 KiB short of useless for some
	// programs; it counts against the memory limit anyway.
	for i := range mounts {
		if mounts[i].Destination == "/dev/shm" {
			mounts[i].Options = []string{"nosuid", "noexec", "nodev", "mode=1777", "size=256m"}
		}
	}
	// The sandbox's own cgroup, read-only (the cgroup namespace hides the
	// rest): programs size themselves from its limits.
	mounts = append(mounts,
		specs.Mount{Type: "cgroup", Source: "cgroup", Destination: "/sys/fs/cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		roBind(b.helper.path, helperPath))
	if host {
		mounts = append(mounts, roBind("/usr", "/usr"))
		for _, name := range hostLinks {
			if fi, err := os.Lstat("/" + name); err == nil && fi.IsDir() && fi.Mode()&os.ModeSymlink == 0 {
				mounts = append(mounts, roBind("/"+name, "/"+name))
			}
		}
		mounts = append(mounts, roBind(l.etc(), "/etc"))
		for _, name := range hostEtc {
			if _, err := os.Stat("/etc/" + name); err == nil {
				mounts = append(mounts, roBind("/etc/"+name, "/etc/"+name))
			}
		}
		mounts = append(mounts,
			specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/var", Options: []string{"nosuid", "nodev", "mode=755", "size=256m"}},
		)
	}
	mounts = append(mounts,
		rwBind(l.tmp(), "/tmp"),
		rwBind(l.home(), "/root"),
		rwBind(l.workspace(), workdir),
	)
	s.Mounts = mounts

	mem := spec.Limits.MemoryMB
	if mem <= 0 {
		mem = defaultMemoryMB
	}
	pids := spec.Limits.Pids
	if pids <= 0 {
		pids = defaultPids
	}
	memBytes := mem << 20
	s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &memBytes, Swap: &memBytes}
	s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &pids}
	if spec.Limits.CPUs > 0 {
		period := uint64(100000)
		quota := int64(spec.Limits.CPUs * float64(period))
		s.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return s, nil
}

// maxFiles is the open-files limit of sandboxes: 65536, or less if the
// daemon's own hard limit is lower (containerd's, which runc inherits, is
// usually the same; raising it needs privileges runc does not keep).
func maxFiles() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Max < 1<<16 {
		return rl.Max
	}
	return 1 << 16
}

func ptr[T any](v T) *T { return &v }

// containerHostname is every container's host name: a sandbox may come
// from the warm pool, made before its id was known.
const containerHostname = "sandbox"

// envList renders an environment map for an OCI process, sorted.
func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
