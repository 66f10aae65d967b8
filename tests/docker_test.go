package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/openapispec"
)

// dockerImage is the image the Docker-mode tests run: `make image` builds
// it (.ci/run does).
const dockerImage = "sandboxd:latest"

// requireDocker skips (fails in CI) without a running dockerd that has
// the daemon's image.
func requireDocker(t testing.TB) {
	t.Helper()
	if err := exec.Command("docker", "version").Run(); err != nil {
		require(t, "a running dockerd (Debian: docker.io)", err)
	}
	if err := exec.Command("docker", "image", "inspect", dockerImage).Run(); err != nil {
		require(t, "the image "+dockerImage+" (make image)", err)
	}
}

// dockerContainers lists the containers StartDocker made.
func dockerContainers(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "-q", "--filter", "label=io.sandboxd.daemon").Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// TestDockerPackagesMatch keeps `make image` and the Dockerfile in step.
func TestDockerPackagesMatch(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_PACKAGES = (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no IMAGE_PACKAGES in the Makefile")
	}
	want := strings.Fields(string(m[1]))
	d := regexp.MustCompile(`(?s)--no-install-recommends(.*?)&&`).FindSubmatch(df)
	if d == nil {
		t.Fatal("no apt-get install in the Dockerfile")
	}
	got := strings.Fields(strings.ReplaceAll(string(d[1]), "\\", " "))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the Dockerfile installs %v, make image %v", got, want)
	}
}

// TestStartDockerErrors: no dockerd, or no image: a clear error within
// seconds, and no container left.
func TestStartDockerErrors(t *testing.T) {
	requireDocker(t)
	before := len(dockerContainers(t))
	start := time.Now()
	_, err := client.StartDocker(ctxT(t, 30*time.Second), client.DockerOptions{DockerHost: "unix:///nonexistent/docker.sock"})
	if err == nil || !strings.Contains(err.Error(), "is dockerd running") || time.Since(start) > 10*time.Second {
		t.Errorf("dockerd down: %v after %v", err, time.Since(start))
	}
	start = time.Now()
	_, err = client.StartDocker(ctxT(t, 30*time.Second), client.DockerOptions{Image: "sandboxd-missing:nope"})
	if err == nil || !strings.Contains(err.Error(), "make image") || time.Since(start) > 10*time.Second {
		t.Errorf("image missing: %v after %v", err, time.Since(start))
	}
	// A daemon that does not answer in time: the container is removed.
	_, err = client.StartDocker(ctxT(t, 60*time.Second), client.DockerOptions{StartTimeout: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "within") {
		t.Errorf("start timeout: %v", err)
	}
	if n := len(dockerContainers(t)); n != before {
		t.Errorf("%d containers after the failed starts, %d before", n, before)
	}
}

// TestDockerCloseAndAttach: Close removes the container; a container kept
// on close is found again by name, as after the agent's restart.
func TestDockerCloseAndAttach(t *testing.T) {
	requireDocker(t)
	name := "sandboxd-test-" + randomHex(4)
	c, err := client.StartDocker(ctxT(t, 120*time.Second), client.DockerOptions{Name: name, KeepOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, c)
	wantRun(t, run(t, c, sb, "export KEPT=yes"), 0, "")
	c.Close()
	// The agent restarts: a new client, found by name.
	c, err = client.AttachDocker(ctxT(t, 60*time.Second), name, client.DockerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRun(t, run(t, c, sb, "echo $KEPT"), 0, "yes\n")
	c.Close()
	// Attached clients leave the container; remove it the way a user would.
	if out, err := exec.Command("docker", "rm", "-f", name).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}
	if _, err := client.AttachDocker(ctxT(t, 10*time.Second), name, client.DockerOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("attach to a removed container: %v", err)
	}

	c, err = client.StartDocker(ctxT(t, 120*time.Second), client.DockerOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("docker", "ps", "-a", "-q", "--filter", "name=^"+name+"$").Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("Close left the container %s", name)
	}
}

// TestClientModes runs one agent-side suite, unchanged, against the three
// ways of reaching a daemon: Local (a daemon the client starts), Remote
// (URL and token) and Docker (the daemon in a container). Only the line
// that makes the client differs.
func TestClientModes(t *testing.T) {
	modes := []struct {
		name  string
		start func(t *testing.T) *client.Client
	}{
		{"local", func(t *testing.T) *client.Client {
			c, err := client.StartLocal(ctxT(t, 60*time.Second), client.LocalOptions{Binary: binary})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"remote", func(t *testing.T) *client.Client {
			d := startDaemon(t)
			return d.tcpClient(d.token)
		}},
		{"docker", func(t *testing.T) *client.Client {
			requireDocker(t)
			c, err := client.StartDocker(ctxT(t, 120*time.Second), client.DockerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			requireIPykernel(t)
			requireChromium(t)
			c := m.start(t)
			defer func() {
				if err := c.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}()
			agentSuite(t, c)
		})
	}
}

// agentSuite is what an agent does: it knows a *client.Client, nothing of
// where the daemon runs.
func agentSuite(t *testing.T, c *client.Client) {
	ctx := ctxT(t, 300*time.Second)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(context.Background(), sb.ID)
	id := sb.ID
	// bash keeps its state.
	wantRun(t, run(t, c, id, "mkdir -p app && cd app && export GREETING=hi"), 0, "")
	o := run(t, c, id, "echo $GREETING from $(basename $PWD)")
	wantRun(t, o, 0, "hi from app\n")
	// exec: one process, argv as given.
	if o, err := c.Exec(ctx, id, "sh", "-c", "echo \"$1\"; exit 3", "sh", "a b;c"); err != nil || o.Stdout != "a b;c\n" || *o.ExitCode != 3 {
		t.Fatalf("exec: %+v %v", o, err)
	}
	// file edit.
	if _, err := c.WriteFile(ctx, id, "app/main.py", "print('one')\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Edit(ctx, id, api.StrReplace("app/main.py", "one", "two")); err != nil {
		t.Fatal(err)
	}
	wantRun(t, run(t, c, id, "python3 main.py"), 0, "two\n")
	// An ipython cell, in the directory bash is in.
	o, err = c.Act(ctx, id, &api.Action{Kind: api.KindIPython, Code: "import os\nx = 6 * 7\nprint(x, os.path.basename(os.getcwd()))"})
	if err != nil || o.Output != "42 app\n" {
		t.Fatalf("ipython: %+v %v", o, err)
	}
	// A page served inside the sandbox, in its browser.
	if _, err := c.WriteFile(ctx, id, "app/index.html", "<title>Inside</title><h1>Served inside</h1><button>Go</button>"); err != nil {
		t.Fatal(err)
	}
	port := "18" + fmt.Sprint(100+rand.Intn(800))
	wantRun(t, run(t, c, id, "(python3 -m http.server "+port+" --bind 127.0.0.1 >/dev/null 2>&1 &)"), 0, "")
	for try := 0; ; try++ {
		o, err = c.Browse(ctx, id, "http://localhost:"+port+"/")
		if err != nil {
			t.Fatal(err)
		}
		if o.BrowserError == "" {
			break
		}
		if try == 50 {
			t.Fatalf("browse: %s", o.BrowserError)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if o.Title != "Inside" || !strings.Contains(o.AXTree, `button "Go"`) {
		t.Fatalf("browse: %q %q", o.Title, o.AXTree)
	}
	// The event log replays all of it, and every observation in it has
	// the fields docs/openapi.yaml says its kind has.
	doc, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := openapispec.Parse(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	if err := c.Events(ctx, id, 0, false, func(ev api.Event) error {
		switch ev.Type {
		case api.EventAction:
			kinds = append(kinds, ev.Action.Kind)
		case api.EventObservation:
			b, err := json.Marshal(ev.Observation)
			if err != nil {
				return err
			}
			if err := spec.CheckObservation(b); err != nil {
				t.Errorf("event %d: %v", ev.Seq, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "run run exec file.write file.edit run ipython file.write run browser"
	if got := strings.Join(kinds, " "); !strings.HasPrefix(got, want) {
		t.Errorf("events: %s, want %s...", got, want)
	}
}
