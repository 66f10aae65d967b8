package tests

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// The same small agent task runs through every way in: the Go client and
// the CLI here; the Python client (client/python/tests), MCP
// (testdata/mcp/agent.mjs) and the OpenHands endpoint
// (testdata/openhands/agent_task.json) in their tests. It creates a
// module and its test, runs the test (it fails), fixes the module with
// str_replace, reruns it and reads the result.
const (
	taskModule = "def add(a, b):\n    return a - b\n"
	taskTest   = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
)

func TestAgentTaskGoClient(t *testing.T) {
	d := startDaemon(t)
	c := d.tcpClient(d.token)
	ctx := ctxT(t, 2*time.Minute)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Edit(ctx, sb.ID, api.Create("calc.py", taskModule)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "test_calc.py", taskTest); err != nil {
		t.Fatal(err)
	}
	o, err := c.Run(ctx, sb.ID, "python3 test_calc.py")
	if err != nil || *o.ExitCode != 1 || !strings.Contains(o.Output, "AssertionError: -1") {
		t.Fatalf("failing test: %+v %v", o, err)
	}
	if _, err := c.Edit(ctx, sb.ID, api.StrReplace("calc.py", "return a - b", "return a + b")); err != nil {
		t.Fatal(err)
	}
	if o, err = c.Run(ctx, sb.ID, "python3 test_calc.py > result.txt"); err != nil || *o.ExitCode != 0 {
		t.Fatalf("fixed test: %+v %v", o, err)
	}
	if o, err = c.ReadFile(ctx, sb.ID, "result.txt"); err != nil || o.Content != "ok\n" {
		t.Fatalf("result: %+v %v", o, err)
	}
	// A str_replace that matches nothing is a typed error.
	if _, err := c.Edit(ctx, sb.ID, api.StrReplace("calc.py", "nothing like this", "x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("str_replace without a match: %v", err)
	}
}

func TestAgentTaskCLI(t *testing.T) {
	d := startDaemon(t)
	cli := func(stdin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{args[0], "--addr", "unix://" + d.sock}, args[1:]...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Stdin = strings.NewReader(stdin)
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("sandboxd %v: %v", args, err)
		}
		return out.String(), 0
	}
	out, code := cli("", "create")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: %d %q", code, out)
	}
	if out, code = cli("", "edit", id, "create", "calc.py", "--text", taskModule); code != 0 {
		t.Fatalf("edit create: %d %s", code, out)
	}
	if out, code = cli(taskTest, "cp", "-", id+":test_calc.py"); code != 0 {
		t.Fatalf("cp: %d %s", code, out)
	}
	if out, code = cli("", "run", id, "python3 test_calc.py"); code != 1 || !strings.Contains(out, "AssertionError: -1") {
		t.Fatalf("failing test: %d %s", code, out)
	}
	if out, code = cli("", "edit", id, "str_replace", "calc.py", "--old", "return a - b", "--new", "return a + b"); code != 0 || !strings.Contains(out, "return a + b") {
		t.Fatalf("str_replace: %d %s", code, out)
	}
	if out, code = cli("", "run", id, "python3 test_calc.py > result.txt"); code != 0 {
		t.Fatalf("fixed test: %d %s", code, out)
	}
	if out, code = cli("", "cp", id+":result.txt", "-"); code != 0 || out != "ok\n" {
		t.Fatalf("result: %d %q", code, out)
	}
	if out, code = cli("", "edit", id, "str_replace", "calc.py", "--old", "nothing like this", "--new", "x"); code == 0 || !strings.Contains(out, "0 times") {
		t.Errorf("str_replace without a match: %d %s", code, out)
	}
	cli("", "rm", id)
}
