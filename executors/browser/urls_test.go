package browser

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"http://example.com/x", "http://example.com/x", ""},
		{"https://example.com", "https://example.com", ""},
		{"localhost:8000/a?b", "http://localhost:8000/a?b", ""},
		{"example.com", "http://example.com", ""},
		{"about:blank", "about:blank", ""},
		{"data:text/html,<h1>x</h1>", "data:text/html,<h1>x</h1>", ""},
		{"file:///etc/passwd", "", "file: URLs are refused"},
		{"FILE:///etc/passwd", "", "file: URLs are refused"},
		{"file:/etc/passwd", "", "file: URLs are refused"},
		{"chrome://settings", "", "chrome: URLs are refused"},
		{"view-source:http://x", "", "view-source: URLs are refused"},
		{"devtools://devtools/bundled/inspector.html", "", "devtools: URLs are refused"},
		{"javascript:alert(1)", "", "javascript: URLs are refused"},
		{"chrome-extension://abc/x", "", "chrome-extension: URLs are refused"},
		{"about:config", "", "only about:blank"},
		{"ftp://x/y", "", "ftp: URLs are refused"},
		{"", "", "no url"},
		{"http://", "", "no host"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			u, err := normalizeURL(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("normalizeURL(%q) = %v, %v; want error containing %q", tc.in, u, err, tc.err)
				}
				return
			}
			if err != nil || u.String() != tc.want {
				t.Fatalf("normalizeURL(%q) = %v, %v; want %q", tc.in, u, err, tc.want)
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	resolve := func(_ context.Context, h string) ([]netip.Addr, error) {
		switch h {
		case "evil.test":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("169.254.169.254")}, nil
		case "fine.test":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return nil, &netErr{}
	}
	tests := []struct {
		host    string
		refused bool
	}{
		{"169.254.169.254", true},
		{"2852039166", true},          // the same, as one number
		{"0xA9.0xFE.0xA9.0xFE", true}, // in hex
		{"0251.0376.0251.0376", true}, // in octal
		{"169.254.43518", true},       // two parts
		{"[fd00:ec2::254]", true},
		{"[::ffff:169.254.169.254]", true},
		{"[fe80::1]", true},
		{"100.100.100.200", true},
		{"metadata.google.internal", true},
		{"METADATA.GOOGLE.INTERNAL.", true},
		{"evil.test", true},
		{"fine.test", false},
		{"unknown.test", false},
		{"127.0.0.1", false},
		{"localhost", false},
		{"10.0.0.1", false},
		{"256.1.1.1", false}, // not an address: a name
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			err := checkHost(context.Background(), tc.host, resolve)
			if (err != nil) != tc.refused {
				t.Fatalf("checkHost(%q) = %v, want refused %v", tc.host, err, tc.refused)
			}
		})
	}
}

type netErr struct{}

func (*netErr) Error() string { return "no such host" }
