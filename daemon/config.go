package daemon

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/sandboxd/sandboxd/api"
)

// DefaultConfigTOML is the default configuration as a commented TOML file
// (the defaults as root), what `sandboxd config default` prints and
// `sandboxd install` writes; docs/config.md shows the same.
//
//go:embed default.toml
var DefaultConfigTOML string

// Config is the daemon's configuration: the TOML file (see docs/config.md),
// then flags on top. Every field has a working default (DefaultConfig).
type Config struct {
	// StateDir holds event logs, metadata, workspaces and the token.
	StateDir string `toml:"state_dir"`
	// Listen lists listeners: tcp://HOST:PORT or unix:///PATH.
	Listen []string `toml:"listen"`
	// TokenFile holds the API token; "" means SANDBOXD_TOKEN, or a token
	// generated at first start in <state_dir>/token.
	TokenFile string `toml:"token_file"`
	// AllowInsecureListen permits TCP listeners on non-loopback addresses
	// without TLS. Anyone on the network who can see the token can then
	// run code on this host.
	AllowInsecureListen bool `toml:"allow_insecure_listen"`
	// TLSCert and TLSKey turn on TLS for every TCP listener.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// MaxBodyBytes caps request bodies (actions); larger ones get 413.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// ShutdownGrace is how long a graceful shutdown lets running actions
	// finish before stopping them.
	ShutdownGrace Duration `toml:"shutdown_grace"`
	// HTTPReadTimeout bounds the arrival of a whole request's headers and
	// (unstreamed) body, so slowloris connections are closed;
	// HTTPIdleTimeout closes a keep-alive connection with no request.
	HTTPReadTimeout Duration `toml:"http_read_timeout"`
	HTTPIdleTimeout Duration `toml:"http_idle_timeout"`
	// LogLevel is debug, info, warn or error; LogFormat is text or json.
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`

	Sandbox SandboxConfig `toml:"sandbox"`
	Limits  LimitsConfig  `toml:"limits"`
	Process ProcessConfig `toml:"process"`
	Bash    BashConfig    `toml:"bash"`
	Exec    ExecConfig    `toml:"exec"`
	Files   FilesConfig   `toml:"files"`
	Wasm    WasmConfig    `toml:"wasm"`

	Containerd ContainerdConfig `toml:"containerd"`
	IPython    IPythonConfig    `toml:"ipython"`
	Browser    BrowserConfig    `toml:"browser"`
}

// BrowserConfig configures browser actions.
type BrowserConfig struct {
	// Chromium is the browser run in the sandbox, a path or a name on its
	// PATH; "" is the first of chromium, chromium-browser, google-chrome
	// and google-chrome-stable.
	Chromium string `toml:"chromium"`
	// StartTimeout bounds a browser's start.
	StartTimeout Duration `toml:"start_timeout"`
	// DefaultTimeout is an action's timeout without timeout_s.
	DefaultTimeout Duration `toml:"default_timeout"`
	// MaxTextChars caps an observation's text and accessibility tree.
	MaxTextChars int `toml:"max_text_chars"`
	// MaxDownloadBytes caps one download into <workdir>/.downloads.
	MaxDownloadBytes int64 `toml:"max_download_bytes"`
}

// IPythonConfig configures ipython actions.
type IPythonConfig struct {
	// Python runs ipykernel in the sandbox; "" is the first of python3 on
	// the sandbox's PATH and /usr/bin/python3 that can import it.
	Python string `toml:"python"`
	// StartTimeout bounds a kernel's start.
	StartTimeout Duration `toml:"start_timeout"`
	// DefaultTimeout is a cell's timeout without timeout_s.
	DefaultTimeout Duration `toml:"default_timeout"`
}

// ContainerdConfig configures the containerd backend.
type ContainerdConfig struct {
	// Enabled turns the backend off when false (it is then listed as
	// unavailable, saying so).
	Enabled bool `toml:"enabled"`
	// Socket is containerd's gRPC socket.
	Socket string `toml:"socket"`
	// Namespace is the containerd namespace sandboxd's containers,
	// images and snapshots live in.
	Namespace string `toml:"namespace"`
	// Runtime is the containerd runtime (shim) of sandbox containers.
	Runtime string `toml:"runtime"`
	// Snapshotter unpacks images; "" is containerd's default.
	Snapshotter string `toml:"snapshotter"`
	// Helper is the sandboxd binary mounted into containers as their init;
	// "" is the daemon's own executable. Images other than "host" need a
	// statically linked one.
	Helper string `toml:"helper"`
	// MaxImageBytes caps one image upload (POST /v1/images): the bytes of
	// the archive as sent, and a compressed archive's bytes once
	// decompressed.
	MaxImageBytes int64 `toml:"max_image_bytes"`
	// PoolSize is how many host-image containers are kept started ahead
	// of need, so that a create (with the host image, no network, the
	// default workdir) takes one instead of waiting for runc.
	PoolSize int `toml:"pool_size"`
}

// WasmConfig configures the wasm backend.
type WasmConfig struct {
	// MaxModuleBytes is the largest module file the daemon runs.
	MaxModuleBytes int64 `toml:"max_module_bytes"`
	// MaxCompiled is how many compiled modules stay in memory per memory
	// cap; the on-disk cache keeps every one.
	MaxCompiled int `toml:"max_compiled"`
}

// FilesConfig bounds file actions and bulk transfers.
type FilesConfig struct {
	// MaxReadBytes caps the content of a file.read.
	MaxReadBytes int `toml:"max_read_bytes"`
	// MaxEditBytes is the largest file file.edit loads to change it.
	MaxEditBytes int64 `toml:"max_edit_bytes"`
	// MaxTransferBytes caps one upload (file bytes, or all the content of
	// a tar); MaxTransferEntries caps a tar upload's entries.
	MaxTransferBytes   int64 `toml:"max_transfer_bytes"`
	MaxTransferEntries int   `toml:"max_transfer_entries"`
}

// SandboxConfig bounds sandboxes.
type SandboxConfig struct {
	// IdleTimeout destroys a sandbox that received no action for this long
	// (0: never), unless its create request asks otherwise.
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxIdleTimeout caps what a create request may ask for.
	MaxIdleTimeout Duration `toml:"max_idle_timeout"`
	// MaxSandboxes caps how many sandboxes may exist at once.
	MaxSandboxes int `toml:"max_sandboxes"`
	// MaxActions caps the actions in flight at once, all sandboxes
	// together (0: no cap); interrupts are always let through.
	MaxActions int `toml:"max_actions"`
	// MemoryBudgetMB caps the sum of the sandboxes' memory limits (0: no
	// budget); a sandbox without a memory limit counts as all of it.
	MemoryBudgetMB int64 `toml:"memory_budget_mb"`
	// MinFreeMemoryMB is the memory that must stay available (host, or
	// the daemon's cgroup) for new sandboxes and actions (0: no floor).
	MinFreeMemoryMB int64 `toml:"min_free_memory_mb"`
}

// Limit is one sandbox limit set (defaults or maxima).
type Limit struct {
	MemoryMB    int64   `toml:"memory_mb"`
	Pids        int64   `toml:"pids"`
	CPUs        float64 `toml:"cpus"`
	DiskMB      int64   `toml:"disk_mb"`
	OutputBytes int64   `toml:"output_bytes"`
}

func (l Limit) api() api.Limits {
	return api.Limits{MemoryMB: l.MemoryMB, Pids: l.Pids, CPUs: l.CPUs, DiskMB: l.DiskMB, OutputBytes: l.OutputBytes}
}

// LimitsConfig holds the limits a sandbox gets when its request names none,
// and the most it may ask for.
type LimitsConfig struct {
	Default Limit `toml:"default"`
	Max     Limit `toml:"max"`
}

// ProcessConfig configures the process backend.
type ProcessConfig struct {
	// UserIsolation runs each sandbox as a uid of its own; it needs root.
	// Unset: on when the daemon runs as root.
	UserIsolation *bool `toml:"user_isolation"`
	// UIDBase is the first of the uids given to sandboxes.
	UIDBase int `toml:"uid_base"`
	// UIDLockDir coordinates uids between daemons on one host.
	UIDLockDir string `toml:"uid_lock_dir"`
	// Cgroups places sandbox processes in cgroups when the daemon can.
	Cgroups bool `toml:"cgroups"`
	// CgroupParent is the cgroup2 path to create sandbox cgroups under;
	// "" is a child of the daemon's own cgroup named after the state dir.
	CgroupParent string `toml:"cgroup_parent"`
}

// BashConfig configures run actions.
type BashConfig struct {
	DefaultTimeout Duration `toml:"default_timeout"`
	MaxOutputChars int      `toml:"max_output_chars"`
}

// ExecConfig configures exec actions.
type ExecConfig struct {
	DefaultTimeout Duration `toml:"default_timeout"`
	MaxStreamBytes int      `toml:"max_stream_bytes"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// DefaultConfig returns the configuration used when no file sets anything.
// Paths follow who runs the daemon: FHS paths for root, XDG ones otherwise.
func DefaultConfig() Config {
	root := os.Geteuid() == 0
	c := Config{
		StateDir:        defaultStateDir(root),
		Listen:          defaultListen(root),
		MaxBodyBytes:    16 << 20,
		ShutdownGrace:   Duration(10 * time.Second),
		HTTPReadTimeout: Duration(60 * time.Second),
		HTTPIdleTimeout: Duration(120 * time.Second),
		LogLevel:        "info",
		LogFormat:       "text",
		Sandbox: SandboxConfig{
			IdleTimeout:     Duration(time.Hour),
			MaxIdleTimeout:  Duration(7 * 24 * time.Hour),
			MaxSandboxes:    1000,
			MaxActions:      1024,
			MinFreeMemoryMB: 256,
		},
		Limits: LimitsConfig{
			Default: Limit{MemoryMB: 2048, Pids: 1024, OutputBytes: 64 << 20},
			Max:     Limit{MemoryMB: 64 << 10, Pids: 32768, CPUs: 0, DiskMB: 1 << 20, OutputBytes: 1 << 30},
		},
		Process: ProcessConfig{
			UIDBase:    2_000_000_000,
			UIDLockDir: defaultUIDLockDir(root),
			Cgroups:    true,
		},
		Bash: BashConfig{DefaultTimeout: Duration(30 * time.Second), MaxOutputChars: 30000},
		Exec: ExecConfig{DefaultTimeout: Duration(60 * time.Second), MaxStreamBytes: 1 << 20},
		Wasm: WasmConfig{MaxModuleBytes: 256 << 20, MaxCompiled: 32},
		Containerd: ContainerdConfig{
			Enabled:   true,
			Socket:    "/run/containerd/containerd.sock",
			Namespace: "sandboxd",
			Runtime:   "io.containerd.runc.v2",
			// 16 GiB, as files.max_transfer_bytes.
			MaxImageBytes: 16 << 30,
			PoolSize:      1,
		},
		IPython: IPythonConfig{StartTimeout: Duration(60 * time.Second), DefaultTimeout: Duration(60 * time.Second)},
		Browser: BrowserConfig{
			StartTimeout: Duration(30 * time.Second), DefaultTimeout: Duration(30 * time.Second),
			MaxTextChars: 20000, MaxDownloadBytes: 100 << 20,
		},
		Files: FilesConfig{
			MaxReadBytes:       256 << 10,
			MaxEditBytes:       32 << 20,
			MaxTransferBytes:   16 << 30,
			MaxTransferEntries: 100000,
		},
	}
	return c
}

func defaultStateDir(root bool) string {
	if root {
		return "/var/lib/sandboxd"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandboxd")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "sandboxd")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sandboxd-%d", os.Geteuid()))
}

// DefaultSocket returns the default unix socket path ("" if none).
func DefaultSocket() string { return defaultSocket(os.Geteuid() == 0) }

func defaultSocket(root bool) string {
	if root {
		return "/run/sandboxd/sandboxd.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sandboxd.sock")
	}
	return ""
}

func defaultListen(root bool) []string {
	l := []string{"tcp://127.0.0.1:7070"}
	if s := defaultSocket(root); s != "" {
		l = append(l, "unix://"+s)
	}
	return l
}

func defaultUIDLockDir(root bool) string {
	if root {
		return "/run/sandboxd/uids"
	}
	return ""
}

// LoadConfig reads a TOML config file over the defaults. Unknown keys are
// errors that name the key and its line.
func LoadConfig(path string) (Config, error) {
	c := DefaultConfig()
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := DecodeConfig(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// DecodeConfig decodes TOML over c, strictly.
func DecodeConfig(data []byte, c *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	err := dec.Decode(c)
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &strict):
		var msgs []string
		for _, e := range strict.Errors {
			row, _ := e.Position()
			msgs = append(msgs, fmt.Sprintf("line %d: unknown key %q", row, strings.Join(e.Key(), ".")))
		}
		return errors.New(strings.Join(msgs, "; "))
	case errors.As(err, &de):
		row, col := de.Position()
		return fmt.Errorf("line %d, column %d: %v", row, col, err)
	}
	return err
}

// SetConfig sets one key of c from a `KEY=VALUE` override (the serve
// command's --set): KEY is a dotted path as in the file
// ("containerd.socket"), VALUE a TOML value, or a bare string.
func SetConfig(c *Config, kv string) error {
	key, value, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want KEY=VALUE", kv)
	}
	parts := strings.Split(key, ".")
	for _, p := range parts {
		if !bareKey.MatchString(p) {
			return fmt.Errorf("--set %q: %q is not a configuration key", kv, key)
		}
	}
	table, leaf := parts[:len(parts)-1], parts[len(parts)-1]
	doc := func(v string) []byte {
		var b strings.Builder
		if len(table) > 0 {
			b.WriteString("[" + strings.Join(table, ".") + "]\n")
		}
		b.WriteString(leaf + " = " + v + "\n")
		return []byte(b.String())
	}
	// A TOML value as it is (numbers, booleans, arrays, quoted strings);
	// anything else is a string.
	trial := *c
	if err := DecodeConfig(doc(value), &trial); err == nil {
		*c = trial
		return nil
	}
	quoted, _ := toml.Marshal(map[string]string{"v": value})
	v := strings.TrimSpace(strings.TrimPrefix(string(quoted), "v = "))
	if err := DecodeConfig(doc(v), c); err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	return nil
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	if c.StateDir == "" {
		return errors.New("state_dir is empty")
	}
	if len(c.Listen) == 0 {
		return errors.New("no listeners: set listen (tcp://HOST:PORT or unix:///PATH)")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("tls_cert and tls_key go together")
	}
	for _, l := range c.Listen {
		network, addr, err := ParseListen(l)
		if err != nil {
			return err
		}
		if network == "tcp" && c.TLSCert == "" && !c.AllowInsecureListen && !isLoopback(addr) {
			return fmt.Errorf("refusing to listen on %s without TLS: anyone who can reach it and sees the token can run code on this host; set tls_cert/tls_key, or allow_insecure_listen if the network is trusted", addr)
		}
	}
	if c.MaxBodyBytes <= 0 {
		return errors.New("max_body_bytes must be positive")
	}
	if c.HTTPReadTimeout.D() < 100*time.Millisecond || c.HTTPIdleTimeout.D() < 100*time.Millisecond {
		return errors.New("http_read_timeout and http_idle_timeout must be at least 100ms")
	}
	if c.Sandbox.MaxSandboxes <= 0 {
		return errors.New("sandbox.max_sandboxes must be positive")
	}
	if c.Sandbox.MaxActions < 0 || c.Sandbox.MemoryBudgetMB < 0 || c.Sandbox.MinFreeMemoryMB < 0 {
		return errors.New("sandbox.max_actions, sandbox.memory_budget_mb and sandbox.min_free_memory_mb must not be negative")
	}
	if c.Files.MaxReadBytes < 100 || c.Files.MaxEditBytes < 100 || c.Files.MaxTransferBytes < 1 || c.Files.MaxTransferEntries < 1 {
		return errors.New("files limits must be positive (max_read_bytes and max_edit_bytes at least 100)")
	}
	if c.Containerd.MaxImageBytes < 1 {
		return errors.New("containerd.max_image_bytes must be positive")
	}
	if c.Containerd.PoolSize < 0 || c.Containerd.PoolSize > 64 {
		return errors.New("containerd.pool_size must be between 0 and 64")
	}
	if c.Wasm.MaxModuleBytes < 8 || c.Wasm.MaxCompiled < 1 {
		return errors.New("wasm.max_module_bytes must be at least 8 and wasm.max_compiled at least 1")
	}
	if c.Bash.MaxOutputChars < 100 || c.Exec.MaxStreamBytes < 100 {
		return errors.New("bash.max_output_chars and exec.max_stream_bytes must be at least 100")
	}
	for _, l := range []Limit{c.Limits.Default, c.Limits.Max} {
		if l.MemoryMB < 0 || l.Pids < 0 || l.CPUs < 0 || l.DiskMB < 0 || l.OutputBytes < 0 {
			return errors.New("limits must not be negative")
		}
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("log_format must be text or json, not %q", c.LogFormat)
	}
	return nil
}
