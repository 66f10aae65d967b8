package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// rawRequest sends a request over TCP and returns status and body.
func rawRequest(t *testing.T, d *daemon, method, path, token string, body []byte, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.tcp+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func errorCode(t *testing.T, body []byte) api.Code {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Message == "" {
		t.Fatalf("not an error body: %q", body)
	}
	return eb.Error.Code
}

func TestAuth(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	proof := filepath.Join(d.stateDir, "workspaces", id, "proof")
	action, _ := json.Marshal(api.Run("touch proof"))

	for _, tc := range []struct{ name, token string }{{"no token", ""}, {"wrong token", "x" + d.token[1:]}, {"prefix of token", d.token[:10]}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []struct{ method, path string }{
				{"POST", "/v1/sandboxes/" + id + "/actions"},
				{"GET", "/v1/sandboxes"},
				{"POST", "/v1/sandboxes"},
				{"DELETE", "/v1/sandboxes/" + id},
				{"GET", "/v1/info"},
				{"GET", "/metrics"},
				{"GET", "/v1/sandboxes/" + id + "/events"},
				{"GET", "/v1/sandboxes/" + id + "/files?path=."},
				{"PUT", "/v1/sandboxes/" + id + "/files?path=proof"},
				{"GET", "/v1/images"},
				{"DELETE", "/v1/images/busybox"},
				{"POST", "/mcp"},
				{"POST", "/openhands/" + id + "/execute_action"},
				{"GET", "/openhands/" + id + "/alive"},
			} {
				status, body := rawRequest(t, d, r.method, r.path, tc.token, action, nil)
				if status != 401 || errorCode(t, body) != api.CodeUnauthenticated {
					t.Errorf("%s %s: %d %s", r.method, r.path, status, body)
				}
			}
		})
	}
	if _, err := os.Stat(proof); !os.IsNotExist(err) {
		t.Fatalf("an unauthenticated action ran: %v", err)
	}
	if sbs, _ := c.ListSandboxes(ctxT(t, 10*time.Second)); len(sbs) != 1 {
		t.Fatalf("unauthenticated requests changed the sandboxes: %d", len(sbs))
	}
	// Health needs no token; everything else works with it, over TCP.
	if status, _ := rawRequest(t, d, "GET", "/v1/health", "", nil, nil); status != 200 {
		t.Fatalf("health without token: %d", status)
	}
	tc := d.tcpClient(d.token)
	defer tc.Close()
	wantRun(t, run(t, tc, id, "touch proof && echo ran"), 0, "ran\n")
	bad := d.tcpClient("wrong-token-wrong-token")
	defer bad.Close()
	if _, err := bad.ListSandboxes(ctxT(t, 10*time.Second)); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("client with a wrong token: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	proof := filepath.Join(d.stateDir, "workspaces", id, "proof")
	path := "/v1/sandboxes/" + id + "/actions"
	cases := []struct {
		name   string
		body   string
		status int
		code   api.Code
		field  string // the message must name it
	}{
		{"unknown field", `{"kind":"run","command":"touch proof","comand":"x"}`, 400, api.CodeInvalidArgument, "comand"},
		{"field of another kind", `{"kind":"run","command":"touch proof","argv":["x"]}`, 400, api.CodeInvalidArgument, "argv"},
		{"unknown kind", `{"kind":"shell","command":"touch proof"}`, 400, api.CodeInvalidArgument, "shell"},
		{"malformed JSON", `{"kind":"run","command":"touch proof"`, 400, api.CodeInvalidArgument, "JSON"},
		{"wrong type", `{"kind":"run","command":"touch proof","timeout_s":"soon"}`, 400, api.CodeInvalidArgument, "timeout_s"},
		{"negative timeout", `{"kind":"run","command":"touch proof","timeout_s":-1}`, 400, api.CodeInvalidArgument, "timeout_s"},
		{"NUL in command", `{"kind":"run","command":"touch proof\u0000"}`, 400, api.CodeInvalidArgument, "command"},
		{"invalid UTF-8", "{\"kind\":\"run\",\"command\":\"touch proof \xff\"}", 400, api.CodeInvalidArgument, "command"},
		{"not an object", `["run"]`, 400, api.CodeInvalidArgument, "object"},
		{"empty argv", `{"kind":"exec","argv":[]}`, 400, api.CodeInvalidArgument, "argv"},
		{"unknown browser op", `{"kind":"browser","op":"shell","script":"touch proof"}`, 400, api.CodeInvalidArgument, "shell"},
		{"browser op without its field", `{"kind":"browser","op":"click"}`, 400, api.CodeInvalidArgument, "target"},
		{"unknown key", `{"kind":"browser","op":"press","key":"Hyper+q"}`, 400, api.CodeInvalidArgument, "Hyper"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawRequest(t, d, "POST", path, d.token, []byte(tc.body), nil)
			if status != tc.status || errorCode(t, body) != tc.code || !strings.Contains(string(body), tc.field) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
	// Too large: 413 and nothing runs.
	big, _ := json.Marshal(api.Run("touch proof # " + strings.Repeat("x", 17<<20)))
	status, body := rawRequest(t, d, "POST", path, d.token, big, nil)
	if status != 413 || errorCode(t, body) != api.CodeTooLarge {
		t.Fatalf("large body: %d %s", status, body)
	}
	// Headers too large: 431.
	status, body = rawRequest(t, d, "GET", "/v1/info", d.token, nil, map[string]string{"X-Big": strings.Repeat("h", 64<<10)})
	if status != 431 || errorCode(t, body) != api.CodeTooLarge {
		t.Fatalf("large header: %d %s", status, body)
	}
	// Create with bad fields: refused, naming the field; nothing created.
	for _, tc := range []struct {
		body   string
		status int
		says   string
	}{
		{`{"backend":"kvm"}`, 400, "kvm"},
		{`{"limits":{"memory_mb":-1}}`, 400, "memory_mb"},
		{`{"limits":{"cpus":-0.5}}`, 400, "cpus"},
		{`{"idle_timeout_s":-3}`, 400, "idle_timeout_s"},
		{`{"nework":"none"}`, 400, "nework"},
		{`{"network":"bridge"}`, 400, "network"},
		{`{"env":{"A\u0000":"b"}}`, 400, "env"},
		{`{"labels":{"k":1}}`, 400, "labels"},
		// The process backend cannot do these: it says so.
		{`{"network":"none"}`, 501, "network"},
		{`{"limits":{"disk_mb":10}}`, 501, "disk"},
		{`{"image":"debian"}`, 501, "image"},
	} {
		status, b := rawRequest(t, d, "POST", "/v1/sandboxes", d.token, []byte(tc.body), nil)
		if status != tc.status || !strings.Contains(string(b), tc.says) {
			t.Errorf("create %s: %d %s; want %d naming %q", tc.body, status, b, tc.status, tc.says)
		}
	}
	if list, err := c.ListSandboxes(ctxT(t, 10*time.Second)); err != nil || len(list) != 1 {
		t.Fatalf("refused creates left sandboxes: %d %v", len(list), err)
	}
	// Limits past the server's maxima are clamped to them, not refused.
	info, err := c.Info(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	huge, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{
		Limits:       &api.Limits{MemoryMB: 1 << 40, Pids: 1 << 40, OutputBytes: 1 << 60},
		IdleTimeoutS: api.Seconds(1e12),
	})
	if err != nil {
		t.Fatalf("create with huge limits: %v", err)
	}
	if huge.Limits.MemoryMB != info.MaxLimits.MemoryMB || huge.Limits.Pids != info.MaxLimits.Pids || huge.Limits.OutputBytes != info.MaxLimits.OutputBytes || huge.IdleTimeoutS > 7*24*3600 {
		t.Errorf("huge limits became %+v idle %v; maxima %+v", huge.Limits, huge.IdleTimeoutS, info.MaxLimits)
	}
	// A huge action timeout is refused, naming the field and its range;
	// nothing runs.
	for _, a := range []*api.Action{
		{Kind: api.KindRun, Command: "touch proof", TimeoutS: api.Seconds(1e300)},
		{Kind: api.KindRun, Command: "touch proof", HardTimeoutS: 1e300},
		{Kind: api.KindExec, Argv: []string{"touch", "proof"}, TimeoutS: api.Seconds(1e12)},
	} {
		if _, err := c.Act(ctxT(t, 10*time.Second), huge.ID, a); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "timeout_s") {
			t.Errorf("%s with a huge timeout: %v", a.Kind, err)
		}
	}
	if _, err := os.Stat(filepath.Join(huge.Workdir, "proof")); !os.IsNotExist(err) {
		t.Fatalf("an action with a huge timeout ran")
	}
	if err := c.DeleteSandbox(ctxT(t, 30*time.Second), huge.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(proof); !os.IsNotExist(err) {
		t.Fatalf("a refused action ran")
	}
	// The daemon is fine afterwards.
	wantRun(t, run(t, c, id, "echo fine"), 0, "fine\n")
}

func TestSandboxLifecycle(t *testing.T) {
	d := startDaemon(t)
	leaks := newLeakCheck(t, d)
	c := d.client()
	ctx := ctxT(t, 60*time.Second)

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"task": "t1"}, Limits: &api.Limits{MemoryMB: 512, Pids: 10 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Backend != api.BackendProcess || sb.State != api.StateRunning || sb.Labels["task"] != "t1" || sb.Limits.MemoryMB != 512 || sb.Network != api.NetworkHost {
		t.Fatalf("created %+v", sb)
	}
	in, _ := c.Info(ctx)
	if sb.Limits.Pids != in.MaxLimits.Pids {
		t.Fatalf("pids %d not clamped to the maximum %d", sb.Limits.Pids, in.MaxLimits.Pids)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.Workdir != sb.Workdir {
		t.Fatalf("get: %+v %v", got, err)
	}
	if o := run(t, c, sb.ID, "pwd"); o.Output != sb.Workdir+"\n" {
		t.Fatalf("pwd %q, workdir %q", o.Output, sb.Workdir)
	}
	if fi, err := os.Stat(sb.Workdir); err != nil || !fi.IsDir() {
		t.Fatalf("workspace: %v", err)
	}
	marker := "sbxlife" + randomHex(4)
	run(t, c, sb.ID, fmt.Sprintf("(setsid bash -c 'exec -a %s sleep 300' &) ; sleep 0.1", marker))
	if len(processesOf(marker)) == 0 {
		t.Fatal("background process did not start")
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "sandbox processes gone after delete", func() bool { return len(processesOf(marker)) == 0 })
	if _, err := os.Stat(sb.Workdir); !os.IsNotExist(err) {
		t.Fatalf("workspace left after delete: %v", err)
	}
	for _, f := range []func() error{
		func() error { _, err := c.GetSandbox(ctx, sb.ID); return err },
		func() error { return c.DeleteSandbox(ctx, sb.ID) },
		func() error { _, err := c.Run(ctx, sb.ID, "true"); return err },
		func() error { _, err := c.Run(ctx, "sb-doesnotexist1", "true"); return err },
		func() error { _, err := c.GetSandbox(ctx, "../../etc"); return err },
	} {
		if err := f(); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("after delete: %v, want not_found", err)
		}
	}
	var cerr *client.Error
	if err := c.DeleteSandbox(ctx, sb.ID); !errors.As(err, &cerr) || cerr.Status != 404 {
		t.Fatalf("delete twice: %v", err)
	}
	c.CloseIdle()
	leaks.check()
}

func TestIdleTimeoutDestroysSandbox(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	ctx := ctxT(t, 60*time.Second)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{IdleTimeoutS: api.Seconds(1)})
	if err != nil {
		t.Fatal(err)
	}
	keep := newSandbox(t, c)
	eventually(t, 20*time.Second, "idle sandbox destroyed", func() bool {
		_, err := c.GetSandbox(ctx, sb.ID)
		return errors.Is(err, client.ErrNotFound)
	})
	eventually(t, 10*time.Second, "the reaped sandbox's workspace to be removed", func() bool {
		_, err := os.Stat(sb.Workdir)
		return os.IsNotExist(err)
	})
	if _, err := c.GetSandbox(ctx, keep); err != nil {
		t.Fatalf("the sandbox with the default idle timeout was reaped: %v", err)
	}
}

func TestInfoHealthMetrics(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	ctx := ctxT(t, 30*time.Second)
	in, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]api.BackendInfo{}
	for _, b := range in.Backends {
		names[b.Name] = b
	}
	if !names["process"].Available || len(names) != 3 || in.Version == "" {
		t.Fatalf("info %+v", in)
	}
	for _, n := range []string{"containerd", "wasm"} {
		if b := names[n]; !b.Available && b.Reason == "" {
			t.Errorf("unavailable backend %s without a reason", n)
		}
	}
	id := newSandbox(t, c)
	run(t, c, id, "true")
	status, body := rawRequest(t, d, "GET", "/metrics", d.token, nil, nil)
	for _, want := range []string{`sandboxd_actions_total{kind="run",result="ok"} 1`, `sandboxd_sandboxes{backend="process",state="running"} 1`, "sandboxd_resident_bytes"} {
		if status != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestStartupRefusals(t *testing.T) {
	d := startDaemon(t)
	if fi, err := os.Stat(d.sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	serve := func(args ...string) (string, error) {
		cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	state := filepath.Join(d.dir, "other-state")
	// No TLS on a non-loopback address: refused, nothing listens.
	out, err := serve("--state-dir", state, "--listen", "tcp://0.0.0.0:0")
	if err == nil || !strings.Contains(out, "without TLS") {
		t.Fatalf("non-loopback listener: %v %s", err, out)
	}
	// A second daemon on a state directory in use: refused at once.
	out, err = serve("--state-dir", d.stateDir, "--listen", "unix://"+filepath.Join(t.TempDir(), "s"))
	if err == nil || !strings.Contains(out, "in use by another sandboxd") {
		t.Fatalf("second daemon on the same state dir: %v %s", err, out)
	}
	// A socket another daemon serves on is not taken over.
	out, err = serve("--state-dir", state, "--listen", "unix://"+d.sock)
	if err == nil || !strings.Contains(out, "in use") {
		t.Fatalf("socket in use: %v %s", err, out)
	}
	// A short token is refused.
	tok := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tok, []byte("short\n"), 0o600)
	out, err = serve("--state-dir", state, "--listen", "unix://"+filepath.Join(t.TempDir(), "s"), "--token-file", tok)
	if err == nil || !strings.Contains(out, "shorter than") {
		t.Fatalf("short token: %v %s", err, out)
	}
	// The first daemon is unaffected.
	wantRun(t, run(t, d.client(), newSandbox(t, d.client()), "echo ok"), 0, "ok\n")
}

// TestMemoryFloor: past the free-memory floor, creates and actions are
// refused with 429 and Retry-After, nothing is recorded for them, the
// daemon keeps serving everything else, and work resumes once memory is
// there again. A floor above the host's memory stands in for a host that
// ran out.
func TestMemoryFloor(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	ctx := ctxT(t, 2*time.Minute)
	id := newSandbox(t, c)
	wantRun(t, run(t, c, id, "echo before"), 0, "before\n")

	base := d.extra
	d.extra = append(slices.Clone(base), "--set", "sandbox.min_free_memory_mb=100000000")
	c.CloseIdle()
	d.stop()
	d.restart()
	leaks := newLeakCheck(t, d)
	refused := func(what string, err error) {
		t.Helper()
		var cerr *client.Error
		if !errors.As(err, &cerr) || cerr.Status != 429 || cerr.Code != api.CodeResourceExhausted || cerr.RetryAfter <= 0 ||
			!strings.Contains(cerr.Message, "of memory is available, under the daemon's floor of 100000000 MB") {
			t.Fatalf("%s under the floor: %v", what, err)
		}
	}
	_, err := c.Run(ctx, id, "echo during")
	refused("an action", err)
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	refused("a create", err)
	if _, err := c.Act(ctx, id, &api.Action{Kind: api.KindInterrupt}); errors.Is(err, client.ErrResourceExhausted) {
		t.Errorf("an interrupt was refused: %v", err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err := c.ListSandboxes(ctx); err != nil || len(list) != 1 {
		t.Fatalf("list under the floor: %v %v", list, err)
	}

	d.extra = base
	c.CloseIdle()
	d.stop()
	d.restart()
	wantRun(t, run(t, c, id, "echo after"), 0, "after\n")
	var runs []string
	if err := c.Events(ctx, id, 0, false, func(ev api.Event) error {
		if ev.Type == api.EventAction && ev.Action.Kind == api.KindRun {
			runs = append(runs, ev.Action.Command)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []string{"echo before", "echo after"}) {
		t.Fatalf("runs in the log: %q; the refused one must not be there", runs)
	}
	if err := c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.CloseIdle()
	leaks.check()
}

// TestSlowloris: connections that send their request a byte at a time, or
// open and send nothing, are closed once http_read_timeout (or
// http_idle_timeout) passes, while normal requests are served all along;
// afterwards the daemon holds no more fds or goroutines than before.
func TestSlowloris(t *testing.T) {
	d := startDaemon(t, "--set", "http_read_timeout=2s", "--set", "http_idle_timeout=3s")
	leaks := newLeakCheck(t, d)
	c := d.tcpClient(d.token)
	ctx := ctxT(t, 2*time.Minute)
	const slow = 24
	closed := make(chan string, slow)
	for i := 0; i < slow; i++ {
		conn, err := net.Dial("tcp", d.tcp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		go func(i int) {
			// Half the connections send nothing at all; the others trickle a
			// request that never ends, a byte every 200 ms.
			req := "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + d.token + "\r\nX-Slow: " + strings.Repeat("a", 1000)
			for j := 0; i%2 == 1 && j < len(req); j++ {
				if _, err := conn.Write([]byte{req[j]}); err != nil {
					closed <- fmt.Sprintf("trickler %d: write after %d bytes: %v", i, j, err)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			// Whatever the daemon answers (408 or nothing), it then closes.
			conn.SetReadDeadline(time.Now().Add(90 * time.Second))
			_, err := io.Copy(io.Discard, conn)
			closed <- fmt.Sprintf("connection %d: closed (%v)", i, err)
		}(i)
	}
	// Normal work goes on meanwhile.
	id := newSandbox(t, c)
	for i := 0; i < 5; i++ {
		wantRun(t, run(t, c, id, fmt.Sprintf("echo %d", i)), 0, fmt.Sprintf("%d\n", i))
		time.Sleep(300 * time.Millisecond)
	}
	// Far past 2-3 s, and far before the defaults (60 s and 120 s): a
	// daemon that ignored the settings fails here.
	deadline := time.After(30 * time.Second)
	for i := 0; i < slow; i++ {
		select {
		case what := <-closed:
			if strings.Contains(what, "timeout") {
				t.Errorf("%s: the daemon did not close it", what)
			}
		case <-deadline:
			t.Fatalf("%d of %d slow connections still open 30 s later", slow-i, slow)
		}
	}
	if err := c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.CloseIdle()
	leaks.check()
}

// TestGeneratedToken: a daemon given no token generates one at first
// start, writes it 0600 in its state dir, says where in its log (never
// what), requires it on TCP, and keeps it across a restart.
func TestGeneratedToken(t *testing.T) {
	dir, err := os.MkdirTemp("", "sbd-token-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Sandboxes run as users of their own: they pass through to their
	// workspaces.
	os.Chmod(dir, 0o711)
	state := filepath.Join(dir, "state")
	addr := freePort(t)
	serve := func() (*exec.Cmd, *syncBuffer) {
		log := &syncBuffer{}
		cmd := exec.Command(binary, "serve", "--state-dir", state, "--listen", "tcp://"+addr, "--set", "containerd.enabled=false")
		var env []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "SANDBOXD_TOKEN=") {
				env = append(env, e)
			}
		}
		cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		hc, _ := client.New("http://" + addr)
		defer hc.Close()
		for start := time.Now(); hc.Health(context.Background()) != nil; time.Sleep(20 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("the daemon did not answer in 30 s:\n%s", log.String())
			}
		}
		return cmd, log
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	cmd, log := serve()
	tokenFile := filepath.Join(state, "token")
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated token file: %v %v", fi, err)
	}
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	if len(token) < 32 {
		t.Fatalf("generated token %d characters long", len(token))
	}
	check := func() {
		t.Helper()
		for _, tok := range []string{"", "x" + token[1:]} {
			c, _ := client.New("http://"+addr, client.WithToken(tok))
			_, err := c.ListSandboxes(ctxT(t, 10*time.Second))
			c.Close()
			if !errors.Is(err, client.ErrUnauthenticated) {
				t.Fatalf("token %q: %v, want unauthenticated", tok, err)
			}
		}
		c, _ := client.New("http://"+addr, client.WithToken(token))
		defer c.Close()
		if _, err := c.ListSandboxes(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("with the generated token: %v", err)
		}
	}
	check()
	stop(cmd)
	if !strings.Contains(log.String(), tokenFile) || strings.Contains(log.String(), token) {
		t.Fatalf("the log must name the token file and not show the token:\n%s", log.String())
	}
	cmd, log = serve()
	defer stop(cmd)
	if b2, _ := os.ReadFile(tokenFile); string(b2) != string(b) {
		t.Fatal("the token changed across a restart")
	}
	check()
	if strings.Contains(log.String(), token) {
		t.Fatalf("the log shows the token:\n%s", log.String())
	}
}
