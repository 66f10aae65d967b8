package daemon

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigDocIsTheDefault keeps docs/config.md true: its TOML block must
// decode strictly and give the defaults (as root).
func TestConfigDocIsTheDefault(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```toml\n")
	if !ok {
		t.Fatal("docs/config.md has no toml block")
	}
	block, _, _ = strings.Cut(block, "```")
	if block != DefaultConfigTOML {
		t.Fatal("docs/config.md's toml block and daemon/default.toml (what `sandboxd config default` prints) differ")
	}
	var got Config
	if err := DecodeConfig([]byte(block), &got); err != nil {
		t.Fatalf("the documented config does not decode: %v", err)
	}
	want := DefaultConfig()
	want.StateDir = defaultStateDir(true)
	want.Listen = defaultListen(true)
	want.Process.UIDLockDir = defaultUIDLockDir(true)
	on := true
	want.Process.UserIsolation = &on
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("docs/config.md differs from the defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestDecodeConfigErrors(t *testing.T) {
	cases := []struct {
		name, toml, want string
	}{
		{"unknown top-level key", "state_dir = \"/x\"\nlisten_on = [\"tcp://a:1\"]\n", `line 2: unknown key "listen_on"`},
		{"unknown key in a table", "[sandbox]\nidle = \"1h\"\n", `line 2: unknown key "sandbox.idle"`},
		{"unknown table", "[proces]\ncgroups = true\n", `unknown key "proces`},
		{"bad duration", "shutdown_grace = \"ten seconds\"\n", "line 1"},
		{"negative duration", "[bash]\ndefault_timeout = \"-1s\"\n", "negative"},
		{"wrong type", "max_body_bytes = \"big\"\n", "line 1"},
		{"syntax", "state_dir = \n", "line 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			err := DecodeConfig([]byte(tc.toml), &c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no listeners", func(c *Config) { c.Listen = nil }, false},
		{"tls cert without key", func(c *Config) { c.TLSCert = "/c" }, false},
		{"negative limit", func(c *Config) { c.Limits.Max.Pids = -1 }, false},
		{"zero body", func(c *Config) { c.MaxBodyBytes = 0 }, false},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, false},
		{"non-loopback TCP without TLS", func(c *Config) { c.Listen = []string{"tcp://0.0.0.0:7070"} }, false},
		{"non-loopback TCP allowed", func(c *Config) {
			c.Listen = []string{"tcp://0.0.0.0:7070"}
			c.AllowInsecureListen = true
		}, true},
		{"non-loopback TCP with TLS", func(c *Config) {
			c.Listen = []string{"tcp://0.0.0.0:7070"}
			c.TLSCert, c.TLSKey = "/c", "/k"
		}, true},
		{"bad listen address", func(c *Config) { c.Listen = []string{"udp://x:1"} }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestParseListen(t *testing.T) {
	cases := []struct{ in, network, addr string }{
		{"tcp://127.0.0.1:7070", "tcp", "127.0.0.1:7070"},
		{"127.0.0.1:7070", "tcp", "127.0.0.1:7070"},
		{"unix:///run/s.sock", "unix", "/run/s.sock"},
		{"unix://relative.sock", "", ""},
		{"http://x:1", "", ""},
		{"tcp://nohostport", "", ""},
	}
	for _, tc := range cases {
		n, a, err := ParseListen(tc.in)
		if n != tc.network || a != tc.addr || (err == nil) != (tc.network != "") {
			t.Errorf("ParseListen(%q) = %q, %q, %v", tc.in, n, a, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, "10.0.0.1:1": false} {
		if isLoopback(addr) != want {
			t.Errorf("isLoopback(%q) != %v", addr, want)
		}
	}
}

func TestSetConfig(t *testing.T) {
	for _, tc := range []struct {
		kv      string
		check   func(c Config) bool
		wantErr string
	}{
		{"containerd.socket=/x/y.sock", func(c Config) bool { return c.Containerd.Socket == "/x/y.sock" }, ""},
		{"containerd.enabled=false", func(c Config) bool { return !c.Containerd.Enabled }, ""},
		{"limits.default.pids=77", func(c Config) bool { return c.Limits.Default.Pids == 77 }, ""},
		{"log_level=warn", func(c Config) bool { return c.LogLevel == "warn" }, ""},
		{`containerd.helper="a b"`, func(c Config) bool { return c.Containerd.Helper == "a b" }, ""},
		{"containerd.nope=1", nil, "unknown key"},
		{"limits.default.pids=many", nil, "--set limits.default.pids"},
		{"novalue", nil, "KEY=VALUE"},
		{"a]b=1", nil, "not a configuration key"},
	} {
		c := DefaultConfig()
		err := SetConfig(&c, tc.kv)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("SetConfig(%q) = %v, want an error with %q", tc.kv, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !tc.check(c) {
			t.Errorf("SetConfig(%q) = %v, config not as asked", tc.kv, err)
		}
	}
}
