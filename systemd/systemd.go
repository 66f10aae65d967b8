// Package systemd holds sandboxd's systemd units and their companions
// (sysusers and tmpfiles snippets), embedded so that `sandboxd install`
// can put them in place from the binary alone.
package systemd

import "embed"

// Files are sandboxd.service, sandboxd.socket, sandboxd.sysusers and
// sandboxd.tmpfiles. The service's ExecStart names
// /usr/local/bin/sandboxd; install rewrites it to where it puts the
// binary.
//
//go:embed sandboxd.service sandboxd.socket sandboxd.sysusers sandboxd.tmpfiles
var Files embed.FS

// BinaryPath is the binary path the units name as shipped.
const BinaryPath = "/usr/local/bin/sandboxd"
