package tests

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

func TestExec(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)

	cases := []struct {
		name   string
		action *api.Action
		code   int
		signal string
		stdout string
		stderr string
	}{
		{"stdout and stderr apart", api.Exec("sh", "-c", "echo out; echo err >&2; exit 3"), 3, "", "out\n", "err\n"},
		{"argv is literal", api.Exec("printf", "%s|", "a b", "$HOME", "`id`", ";", "*"), 0, "", "a b|$HOME|`id`|;|*|", ""},
		{"stdin", &api.Action{Kind: api.KindExec, Argv: []string{"tr", "a-z", "A-Z"}, Stdin: "shout\n"}, 0, "", "SHOUT\n", ""},
		{"no stdin reads EOF", api.Exec("cat"), 0, "", "", ""},
		{"env and cwd", &api.Action{Kind: api.KindExec, Argv: []string{"sh", "-c", "echo $X; pwd"}, Env: map[string]string{"X": "y"}, Cwd: "/"}, 0, "", "y\n/\n", ""},
		{"killed by signal", api.Exec("sh", "-c", "kill -KILL $$"), 137, "SIGKILL", "", ""},
		{"missing program", api.Exec("no-such-program-sbx"), 127, "", "", "sandboxd: exec no-such-program-sbx: no-such-program-sbx: command not found in PATH\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRun(t, c, id, tc.action)
			if o.ExitCode == nil || *o.ExitCode != tc.code || o.Signal != tc.signal || o.Stdout != tc.stdout || o.Stderr != tc.stderr || o.TimedOut {
				t.Fatalf("got exit %s signal %q stdout %q stderr %q timed_out %v", exitCode(o), o.Signal, o.Stdout, o.Stderr, o.TimedOut)
			}
		})
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	marker := "sbxexec" + randomHex(4)
	// A child that escapes the process group and ignores SIGTERM, and a
	// double-forked grandchild: all must go at the timeout.
	script := fmt.Sprintf(`setsid bash -c 'trap "" TERM; exec -a %[1]s-setsid sleep 300' &
(bash -c 'exec -a %[1]s-double sleep 300' &) ; echo started; exec -a %[1]s-main sleep 300`, marker)
	a := &api.Action{Kind: api.KindExec, Argv: []string{"bash", "-c", script}, TimeoutS: api.Seconds(0.7)}
	start := time.Now()
	o := mustRun(t, c, id, a)
	if !o.TimedOut || o.ExitCode == nil || *o.ExitCode != 137 || o.Stdout != "started\n" {
		t.Fatalf("timeout: timed_out=%v exit %s stdout %q", o.TimedOut, exitCode(o), o.Stdout)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	eventually(t, 5*time.Second, "every process of the timed-out exec to be gone", func() bool {
		return len(processesOf(marker)) == 0
	})
}

func TestExecLargeOutputIsCappedAndStreamed(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	id := newSandbox(t, c)
	const total = 20 << 20
	var streamed atomic.Int64
	o, err := c.ActStream(ctxT(t, 60*time.Second), id, api.Exec("head", "-c", fmt.Sprint(total), "/dev/zero"), func(out client.Output) {
		streamed.Add(int64(len(out.Data)) + out.Dropped)
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.ExitCode == nil || *o.ExitCode != 0 || !o.Truncated {
		t.Fatalf("exit %s truncated %v", exitCode(o), o.Truncated)
	}
	if len(o.Stdout) > 1<<20+200 || len(o.Stdout) < 1<<20 {
		t.Fatalf("observation stdout is %d bytes, want the 1 MiB head+tail", len(o.Stdout))
	}
	if streamed.Load() != total {
		t.Fatalf("streamed %d bytes (data + dropped), want %d", streamed.Load(), total)
	}
	n, err := c.Output(ctxT(t, 60*time.Second), id, o.Cause, api.StreamStdout, discard{})
	if err != nil || n != total {
		t.Fatalf("recorded output: %d bytes, %v; want %d", n, err, total)
	}
	// Binary output survives the stream exactly (as data_b64).
	var got []byte
	o, err = c.ActStream(ctxT(t, 30*time.Second), id, api.Exec("printf", `\377\376ok\000`), func(out client.Output) {
		got = append(got, out.Data...)
	})
	if err != nil || string(got) != "\xff\xfeok\x00" || o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("binary stream %q, %+v, %v", got, o, err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestSandboxSeesNoDaemonSecrets(t *testing.T) {
	d := startDaemon(t)
	c := d.client()
	// Another sandbox's data, which no sandbox but it may see.
	other := newSandbox(t, c)
	otherSecret := "other-sandbox-" + randomHex(8)
	mustRun(t, c, other, api.Exec("sh", "-c", "echo "+otherSecret+" > secret.txt"))
	otherSB, err := c.GetSandbox(ctxT(t, 10*time.Second), other)
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{api.BackendProcess, api.BackendContainerd} {
		t.Run(backend, func(t *testing.T) {
			var id string
			if backend == api.BackendContainerd {
				requireContainerd(t, c)
				id = newContainerd(t, d, api.CreateSandboxRequest{})
			} else {
				id = newSandbox(t, c)
			}
			probes := []string{
				"env",
				"cat /proc/self/environ | tr '\\0' '\\n'",
				"for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n'; done",
				"for f in /proc/[0-9]*/cmdline; do cat $f 2>/dev/null | tr '\\0' ' '; echo; done",
				"ps -eo args 2>/dev/null || true",
				"cat " + d.stateDir + "/token 2>&1; ls " + d.stateDir + "/sandboxes 2>&1",
				"cat " + d.dir + "/token 2>&1",
				"cat " + otherSB.Workdir + "/secret.txt 2>&1; ls -la " + otherSB.Workdir + " 2>&1",
				"cat " + d.stateDir + "/sandboxes/" + other + "/* 2>&1 | head -c 100000",
				// A pattern, not the secret: a probe must not find its own
				// command line.
				"grep -rsho 'other-sandbox-[0-9a-f]\\{16\\}' /tmp /var/tmp /dev/shm 2>/dev/null | head",
			}
			for _, p := range probes {
				o := run(t, c, id, p)
				for _, secret := range []string{d.token, "SANDBOXD_E2E_DAEMON_SECRET", "daemon-env-", otherSecret} {
					if strings.Contains(o.Output, secret) {
						t.Errorf("probe %q shows %q", p, secret)
					}
				}
				o = mustRun(t, c, id, api.Exec("sh", "-c", p))
				for _, secret := range []string{d.token, "SANDBOXD_E2E_DAEMON_SECRET", otherSecret} {
					if strings.Contains(o.Stdout+o.Stderr, secret) {
						t.Errorf("exec probe %q shows %q: %.2000s", p, secret, o.Stdout+o.Stderr)
					}
				}
			}
		})
	}
	// The sandbox's own environment is what it was given, on top of the
	// agent defaults.
	sb, err := c.CreateSandbox(ctxT(t, 30*time.Second), api.CreateSandboxRequest{Env: map[string]string{"MY_VAR": "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	o := mustRun(t, c, sb.ID, api.Exec("sh", "-c", "echo $MY_VAR $PAGER $HOME"))
	if o.Stdout != "mine cat "+sb.Workdir+"\n" {
		t.Fatalf("env: %q", o.Stdout)
	}
}
