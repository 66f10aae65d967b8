package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/atomicfile"
)

// minTokenLen is the shortest token the daemon accepts.
const minTokenLen = 16

// loadToken finds the API token: the token file, else SANDBOXD_TOKEN, else
// <state>/token, which is generated (mode 0600) on first start. There is no
// mode without a token.
func loadToken(cfg Config, log *slog.Logger) (string, error) {
	check := func(t, from string) (string, error) {
		t = strings.TrimSpace(t)
		if len(t) < minTokenLen {
			return "", fmt.Errorf("the token from %s is shorter than %d characters", from, minTokenLen)
		}
		if strings.ContainsAny(t, " \t\r\n") {
			return "", fmt.Errorf("the token from %s contains white space", from)
		}
		return t, nil
	}
	if cfg.TokenFile != "" {
		b, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		return check(string(b), cfg.TokenFile)
	}
	if t := os.Getenv("SANDBOXD_TOKEN"); t != "" {
		return check(t, "SANDBOXD_TOKEN")
	}
	path := filepath.Join(cfg.StateDir, "token")
	if b, err := os.ReadFile(path); err == nil {
		return check(string(b), path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	t := hex.EncodeToString(raw)
	if err := atomicfile.Write(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	log.Info("generated an API token", "file", path)
	return t, nil
}

// listener is one bound address.
type listener struct {
	ln   net.Listener
	auth bool // TCP needs the token; unix sockets are guarded by file mode
	tls  bool
}

// listen takes the sockets the service manager passed (socket
// activation), then binds every configured address they do not cover.
func (d *Daemon) listen() ([]listener, []string, error) {
	var out []listener
	var addrs []string
	fail := func(err error) ([]listener, []string, error) {
		for _, l := range out {
			l.ln.Close()
		}
		return nil, nil, err
	}
	inherited, err := activationListeners()
	if err != nil {
		return fail(err)
	}
	have := map[string]bool{}
	for _, ln := range inherited {
		switch a := ln.Addr().(type) {
		case *net.UnixAddr:
			// The socket file is the service manager's: it stays when
			// the daemon stops, for the next activation.
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			out = append(out, listener{ln: ln})
			addrs = append(addrs, "unix://"+a.Name+" (socket activation)")
			have["unix:"+a.Name] = true
		case *net.TCPAddr:
			tls := d.cfg.TLSCert != ""
			if !tls && !d.cfg.AllowInsecureListen && !isLoopback(a.String()) {
				ln.Close()
				return fail(fmt.Errorf("the socket passed by the service manager listens on %s, not loopback, and there is no TLS: refused (allow_insecure_listen to allow)", a))
			}
			out = append(out, listener{ln: ln, auth: true, tls: tls})
			addrs = append(addrs, "tcp://"+a.String()+" (socket activation)")
			have["tcp:"+a.String()] = true
		default:
			ln.Close()
			return fail(fmt.Errorf("the service manager passed a %s socket; sandboxd serves unix and tcp only", ln.Addr().Network()))
		}
	}
	for _, a := range d.cfg.Listen {
		network, addr, err := ParseListen(a)
		if err != nil {
			return fail(err)
		}
		if have[network+":"+addr] {
			continue
		}
		switch network {
		case "tcp":
			// Config.Validate refused non-loopback addresses without TLS.
			tls := d.cfg.TLSCert != ""
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fail(err)
			}
			out = append(out, listener{ln: ln, auth: true, tls: tls})
			scheme := "tcp://"
			if tls {
				scheme = "tls://"
			}
			addrs = append(addrs, scheme+ln.Addr().String())
		case "unix":
			ln, err := listenUnix(addr)
			if err != nil {
				return fail(err)
			}
			d.sockets = append(d.sockets, addr)
			out = append(out, listener{ln: ln})
			addrs = append(addrs, "unix://"+addr)
		}
	}
	return out, addrs, nil
}

// activationListeners returns the listening sockets the service manager
// passed (systemd's LISTEN_PID, LISTEN_FDS: descriptors 3, 4, ...), and
// unsets those variables so nothing the daemon starts inherits them.
func activationListeners() ([]net.Listener, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if pid == "" || fds == "" || pid != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 || n > 64 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: not a number of sockets", fds)
	}
	var out []net.Listener
	for fd := 3; fd < 3+n; fd++ {
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "listen-fd-"+strconv.Itoa(fd))
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("socket activation: descriptor %d: %w", fd, err)
		}
		out = append(out, ln)
	}
	return out, nil
}

// ParseListen splits tcp://HOST:PORT, unix:///PATH or a bare HOST:PORT.
func ParseListen(a string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(a, "tcp://"):
		network, addr = "tcp", strings.TrimPrefix(a, "tcp://")
	case strings.HasPrefix(a, "unix://"):
		network, addr = "unix", strings.TrimPrefix(a, "unix://")
		if !filepath.IsAbs(addr) {
			return "", "", fmt.Errorf("listen %q: a unix socket needs an absolute path (unix:///run/x.sock)", a)
		}
		return network, addr, nil
	case strings.Contains(a, "://"):
		return "", "", fmt.Errorf("listen %q: use tcp://HOST:PORT or unix:///PATH", a)
	default:
		network, addr = "tcp", a
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("listen %q: %v", a, err)
	}
	return network, addr, nil
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenUnix binds a unix socket with mode 0660, replacing a stale socket
// file but never one a live daemon is serving on.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another daemon", path)
		}
		os.Remove(path)
	}
	// Bind with a tight umask so the socket is never open wider than 0660,
	// not even between bind and chmod.
	old := umask(0o117)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, nil
}
