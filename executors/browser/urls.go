package browser

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Schemes the browser may be sent to. Everything else (file:, chrome:,
// view-source:, devtools:, javascript:, chrome-extension:, ...) reaches
// the host or the browser itself rather than the web.
var allowedSchemes = map[string]bool{"http": true, "https": true, "data": true, "about": true}

// metadataHosts are the names cloud providers serve instance metadata
// (credentials) under.
var metadataHosts = map[string]bool{
	"metadata.google.internal": true,
	"metadata.goog":            true,
	"metadata":                 true,
	"instance-data":            true,
	"metadata.azure.internal":  true,
}

// metadataAddrs are metadata services outside the link-local ranges.
var metadataAddrs = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local; AWS, GCP, Azure, OpenStack: 169.254.169.254
	netip.MustParsePrefix("fe80::/10"),          // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
}

// blockedPatterns keep every request of a page (redirects, frames,
// scripts, fetches) away from what goto refuses. Chromium matches them
// against canonical URLs, so 0xA9FEA9FE and friends are covered too; a
// name that resolves to a metadata address is refused by goto only.
var blockedPatterns = []string{
	"file:*", "chrome:*", "chrome-extension:*", "devtools:*", "view-source:*", "filesystem:*",
	"*://169.254.*", "*://[fe80:*", "*://[fd00:ec2::254]*", "*://100.100.100.200*",
	"*://metadata.google.internal*", "*://metadata.goog*", "*://metadata/*", "*://metadata:*",
	"*://instance-data/*", "*://instance-data:*", "*://metadata.azure.internal*",
}

var schemeRE = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*):`)

// normalizeURL turns what an agent typed into the URL to open, as an
// address bar would ("localhost:8000/x" is http), and refuses schemes
// outside allowedSchemes.
func normalizeURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, fmt.Errorf("no url to open")
	}
	if m := schemeRE.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		// "host:port..." has no scheme; "javascript:..." does.
		rest := raw[len(m[0]):]
		if !startsWithPort(rest) {
			scheme := strings.ToLower(m[1])
			if !allowedSchemes[scheme] {
				return nil, refusedScheme(scheme)
			}
			if scheme == "about" && !strings.EqualFold(raw, "about:blank") {
				return nil, fmt.Errorf("only about:blank is allowed among about: pages")
			}
			u, err := url.Parse(raw)
			if err != nil {
				return nil, fmt.Errorf("bad url: %v", err)
			}
			return u, nil
		}
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad url: %v", err)
	}
	scheme := strings.ToLower(u.Scheme)
	if !allowedSchemes[scheme] || scheme == "about" || scheme == "data" {
		return nil, refusedScheme(scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("bad url %q: no host", raw)
	}
	return u, nil
}

func startsWithPort(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i > 0 && (i == len(s) || s[i] == '/' || s[i] == '?' || s[i] == '#')
}

func refusedScheme(scheme string) error {
	return fmt.Errorf("%s: URLs are refused: the browser opens http, https, data: and about:blank only (it may not read the host's files or its own internals)", scheme)
}

// checkHost refuses cloud-metadata hosts: by name, by address literal
// (in any of the forms a browser accepts: 169.254.169.254, 2852039166,
// 0xA9.0xFE.0xA9.0xFE, ...), and by what the name resolves to.
func checkHost(ctx context.Context, host string, resolve func(context.Context, string) ([]netip.Addr, error)) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if metadataHosts[h] {
		return metadataRefused(host)
	}
	if a, ok := parseHostAddr(h); ok {
		if isMetadata(a) {
			return metadataRefused(host)
		}
		return nil
	}
	if resolve == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := resolve(rctx, h)
	if err != nil {
		// The browser will say the name does not resolve.
		return nil
	}
	for _, a := range addrs {
		if isMetadata(a) {
			return fmt.Errorf("%s resolves to %s, a cloud-metadata address: refused", host, a)
		}
	}
	return nil
}

func metadataRefused(host string) error {
	return fmt.Errorf("%s is a cloud-metadata address: refused (it would hand out the host's credentials)", host)
}

func isMetadata(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range metadataAddrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostAddr reads an IP literal the way a URL parser does: IPv6 in
// brackets, or IPv4 as one to four dot-separated parts, each decimal,
// octal (leading 0) or hex (0x).
func parseHostAddr(h string) (netip.Addr, bool) {
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	parts := strings.Split(h, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if len(parts) == 0 || len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(p) > 1 && (strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X")):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil || n > 0xffffffff {
		return 0, false
	}
	return n, true
}

// resolveHost is the daemon's resolver, for checkHost.
func resolveHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}
