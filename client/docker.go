package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DockerOptions configures StartDocker.
type DockerOptions struct {
	// Image is the daemon's image; default "sandboxd:latest" (make image).
	Image string
	// Name is the container's name; default "sandboxd-" and random hex.
	// AttachDocker finds a container by it.
	Name string
	// Env is added to the daemon's environment.
	Env map[string]string
	// Workspace, if set, is a host directory mounted read-write at
	// /workspace in the container, where the sandboxes' processes find it.
	Workspace string
	// MemoryMB, CPUs and Pids limit the whole container (0: no limit).
	MemoryMB int64
	CPUs     float64
	Pids     int64
	// KeepOnClose leaves the container running when the client is closed,
	// for AttachDocker to find later.
	KeepOnClose bool
	// StartTimeout bounds the wait for the daemon to answer; default 60 s.
	StartTimeout time.Duration
	// DockerHost is the Docker Engine's address (unix:///PATH or
	// tcp://HOST:PORT); default $DOCKER_HOST, else
	// unix:///var/run/docker.sock.
	DockerHost string
}

// containerPort is where the daemon listens inside the container.
const containerPort = "7070/tcp"

// Labels mark the containers StartDocker makes.
const (
	dockerLabel        = "io.sandboxd.daemon"
	dockerDefaultImage = "sandboxd:latest"
)

// StartDocker runs the daemon in a Docker container and returns a client
// of it: the same *Client as New and StartLocal. The container gets a
// random token, publishes the daemon's port on 127.0.0.1 only, and uses
// the process backend (the container is the isolation boundary). Close
// stops and removes the container unless KeepOnClose.
//
// It speaks the Docker Engine API over its socket with the standard
// library. If the daemon does not answer in time, the error shows the
// container's last log lines and the container is removed.
func StartDocker(ctx context.Context, opts DockerOptions) (_ *Client, err error) {
	d, err := newDockerAPI(opts.DockerHost)
	if err != nil {
		return nil, err
	}
	if opts.Image == "" {
		opts.Image = dockerDefaultImage
	}
	if opts.Name == "" {
		opts.Name = "sandboxd-" + randHex(6)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if err := d.ping(ctx); err != nil {
		return nil, err
	}
	token := randHex(32)
	env := []string{"SANDBOXD_TOKEN=" + token}
	keys := make([]string, 0, len(opts.Env))
	for k := range opts.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "SANDBOXD_TOKEN" {
			return nil, errors.New("StartDocker: Env may not set SANDBOXD_TOKEN: the client makes the token")
		}
		env = append(env, k+"="+opts.Env[k])
	}
	host := map[string]any{
		"PortBindings": map[string]any{containerPort: []map[string]string{{"HostIp": "127.0.0.1", "HostPort": ""}}},
		"Init":         false,
	}
	if opts.Workspace != "" {
		abs, err := filepath.Abs(opts.Workspace)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("StartDocker: workspace %s is not a directory", abs)
		}
		host["Binds"] = []string{abs + ":/workspace"}
	}
	if opts.MemoryMB > 0 {
		host["Memory"] = opts.MemoryMB << 20
	}
	if opts.CPUs > 0 {
		host["NanoCpus"] = int64(opts.CPUs * 1e9)
	}
	if opts.Pids > 0 {
		host["PidsLimit"] = opts.Pids
	}
	body := map[string]any{
		"Image":        opts.Image,
		"Env":          env,
		"ExposedPorts": map[string]any{containerPort: map[string]any{}},
		"Labels":       map[string]string{dockerLabel: "1"},
		"HostConfig":   host,
	}
	var created struct {
		ID string `json:"Id"`
	}
	if err := d.call(ctx, http.MethodPost, "/containers/create?name="+url.QueryEscape(opts.Name), body, &created); err != nil {
		var de *dockerError
		if errors.As(err, &de) && de.status == http.StatusNotFound {
			return nil, fmt.Errorf("StartDocker: no image %s in Docker: build it with `make image` (or pull it): %w", opts.Image, err)
		}
		return nil, fmt.Errorf("StartDocker: create the container: %w", err)
	}
	remove := func() {
		// Cleanup must finish even if ctx is done.
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.call(rctx, http.MethodDelete, "/containers/"+created.ID+"?force=1&v=1", nil, nil)
	}
	defer func() {
		if err != nil {
			remove()
		}
	}()
	if err := d.call(ctx, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil); err != nil {
		return nil, fmt.Errorf("StartDocker: start the container: %w", err)
	}
	c, err := d.connect(ctx, created.ID, token, opts.StartTimeout)
	if err != nil {
		return nil, err
	}
	if !opts.KeepOnClose {
		c.close = func() error {
			// A polite stop lets the daemon end its sandboxes; the
			// delete then cannot fail on a running container.
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stopErr := d.call(sctx, http.MethodPost, "/containers/"+created.ID+"/stop?t=5", nil, nil)
			if err := d.call(sctx, http.MethodDelete, "/containers/"+created.ID+"?force=1&v=1", nil, nil); err != nil {
				return fmt.Errorf("remove the daemon's container %s: %w", opts.Name, errors.Join(stopErr, err))
			}
			return nil
		}
	}
	return c, nil
}

// AttachDocker returns a client of the daemon running in the container
// named name (one StartDocker made, with KeepOnClose, before the agent
// restarted). Closing it leaves the container running.
func AttachDocker(ctx context.Context, name string, opts DockerOptions) (*Client, error) {
	d, err := newDockerAPI(opts.DockerHost)
	if err != nil {
		return nil, err
	}
	if err := d.ping(ctx); err != nil {
		return nil, err
	}
	info, err := d.inspect(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, ok := info.Config.Labels[dockerLabel]; !ok {
		return nil, fmt.Errorf("AttachDocker: container %s was not started by StartDocker", name)
	}
	if !info.State.Running {
		return nil, fmt.Errorf("AttachDocker: container %s is not running (%s)", name, info.State.Status)
	}
	var token string
	for _, kv := range info.Config.Env {
		if v, ok := strings.CutPrefix(kv, "SANDBOXD_TOKEN="); ok {
			token = v
		}
	}
	if token == "" {
		return nil, fmt.Errorf("AttachDocker: container %s has no token", name)
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	return d.connect(ctx, info.ID, token, timeout)
}

// connect finds the container's published port and waits for the daemon.
func (d *dockerAPI) connect(ctx context.Context, id, token string, timeout time.Duration) (*Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		info, err := d.inspect(ctx, id)
		if err != nil {
			return nil, err
		}
		if !info.State.Running {
			return nil, fmt.Errorf("StartDocker: the container exited (%s, code %d):\n%s", info.State.Status, info.State.ExitCode, d.logs(id))
		}
		if port := info.hostPort(); port != "" {
			c, err := New("http://"+net.JoinHostPort("127.0.0.1", port), WithToken(token))
			if err != nil {
				return nil, err
			}
			hctx, cancel := context.WithDeadline(ctx, deadline)
			err = c.WaitHealthy(hctx)
			cancel()
			if err == nil {
				return c, nil
			}
			c.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if info, ierr := d.inspect(ctx, id); ierr == nil && !info.State.Running {
				return nil, fmt.Errorf("StartDocker: the container exited (%s, code %d):\n%s", info.State.Status, info.State.ExitCode, d.logs(id))
			}
			return nil, fmt.Errorf("StartDocker: the daemon did not answer within %s (%v); its log:\n%s", timeout, err, d.logs(id))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("StartDocker: Docker published no port for the daemon within %s; its log:\n%s", timeout, d.logs(id))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dockerAPI is a minimal Docker Engine API client.
type dockerAPI struct {
	hc   *http.Client
	base string
	addr string
}

func newDockerAPI(host string) (*dockerAPI, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("Docker host %q: %w", host, err)
	}
	d := &dockerAPI{addr: host}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		d.base = "http://docker"
		d.hc = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "unix", sock)
			},
		}}
	case "tcp", "http":
		d.base = "http://" + u.Host
		d.hc = &http.Client{Transport: &http.Transport{}}
	default:
		return nil, fmt.Errorf("Docker host %q: want unix:///PATH or tcp://HOST:PORT", host)
	}
	return d, nil
}

// dockerError is an error answer of the Engine API.
type dockerError struct {
	status  int
	message string
}

func (e *dockerError) Error() string { return fmt.Sprintf("Docker: %s (HTTP %d)", e.message, e.status) }

func (d *dockerAPI) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return fmt.Errorf("Docker at %s does not answer (is dockerd running?): %w", d.addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(raw))
		}
		return &dockerError{status: resp.StatusCode, message: e.Message}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// ping checks that Docker answers, quickly.
func (d *dockerAPI) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return d.call(pctx, http.MethodGet, "/_ping", nil, nil)
}

type containerInfo struct {
	ID    string `json:"Id"`
	State struct {
		Status   string
		Running  bool
		ExitCode int
	}
	Config struct {
		Env    []string
		Labels map[string]string
	}
	NetworkSettings struct {
		Ports map[string][]struct {
			HostIP   string `json:"HostIp"`
			HostPort string
		}
	}
}

func (i *containerInfo) hostPort() string {
	for _, b := range i.NetworkSettings.Ports[containerPort] {
		if b.HostIP == "127.0.0.1" && b.HostPort != "" {
			return b.HostPort
		}
	}
	return ""
}

func (d *dockerAPI) inspect(ctx context.Context, idOrName string) (*containerInfo, error) {
	var info containerInfo
	if err := d.call(ctx, http.MethodGet, "/containers/"+url.PathEscape(idOrName)+"/json", nil, &info); err != nil {
		var de *dockerError
		if errors.As(err, &de) && de.status == http.StatusNotFound {
			return nil, fmt.Errorf("no container %s in Docker: %w", idOrName, ErrNotFound)
		}
		return nil, err
	}
	return &info, nil
}

// logs returns the container's last log lines, for errors.
func (d *dockerAPI) logs(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/containers/"+id+"/logs?stdout=1&stderr=1&tail=30", nil)
	if err != nil {
		return ""
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	return strings.TrimSpace(demuxLogs(raw))
}

// demuxLogs strips the 8-byte frame headers Docker puts on the logs of a
// container without a TTY.
func demuxLogs(b []byte) string {
	var out strings.Builder
	for len(b) >= 8 && (b[0] == 1 || b[0] == 2) && b[1] == 0 && b[2] == 0 && b[3] == 0 {
		n := int(binary.BigEndian.Uint32(b[4:8]))
		b = b[8:]
		if n > len(b) {
			n = len(b)
		}
		out.Write(b[:n])
		b = b[n:]
	}
	out.Write(b)
	return out.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
