package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// mcpSDK is the MCP client the test runs: the official TypeScript SDK.
const mcpSDK = "@modelcontextprotocol/sdk@1.32.2"

// TestMCP drives the daemon's MCP endpoint with a real MCP client (the
// TypeScript SDK from npm, run by node, over Streamable HTTP): list the
// tools, then a small agent task — create a file, run its failing test,
// fix it with str_replace, rerun, read the result.
func TestMCP(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			require(t, "node and npm", err)
		}
	}
	dir := t.TempDir()
	install := exec.CommandContext(ctxT(t, 5*time.Minute), "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", dir, mcpSDK)
	if out, err := install.CombinedOutput(); err != nil {
		require(t, "the MCP SDK from npm ("+mcpSDK+")", fmt.Errorf("%v: %s", err, out))
	}
	script, err := os.ReadFile(filepath.Join("testdata", "mcp", "agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's directory.
	if err := os.WriteFile(filepath.Join(dir, "agent.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t)
	cmd := exec.Command("node", filepath.Join(dir, "agent.mjs"), "http://"+d.tcp+"/mcp", d.token)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the MCP client did not finish; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("node: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		Tools []string
		Calls []struct {
			Name    string
			IsError bool
			Text    string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if strings.Join(got.Tools, " ") != "browser execute_bash execute_ipython_cell sandbox_create sandbox_delete str_replace_editor" {
		t.Errorf("tools: %v", got.Tools)
	}
	want := []struct {
		isError bool
		text    string
	}{
		{false, "Created sandbox sb-"},
		{false, "hello from /bin/bash\n[The command completed with exit code 0.]"},
		{false, "File created"},
		{false, "File created"},
		{true, "AssertionError: -1"},
		{false, "return a + b"},
		{false, "status 0\n[The command completed with exit code 0.]"},
		{false, "ok"},
		{true, "Error (invalid_argument)"},
	}
	if len(got.Calls) != len(want) {
		t.Fatalf("%d calls, want %d: %+v", len(got.Calls), len(want), got.Calls)
	}
	for i, w := range want {
		c := got.Calls[i]
		if c.IsError != w.isError || !strings.Contains(c.Text, w.text) {
			t.Errorf("call %d (%s): isError %v, text %q; want isError %v and %q", i, c.Name, c.IsError, c.Text, w.isError, w.text)
		}
	}
	// Every tool call is an ordinary action in the sandbox's event log.
	c := d.client()
	sbs, err := c.ListSandboxes(ctxT(t, 10*time.Second))
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes: %v %v", sbs, err)
	}
	n := 0
	if err := c.Events(ctxT(t, 10*time.Second), sbs[0].ID, 0, false, func(ev api.Event) error {
		if ev.Type == "action" {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 9 { // the 8 calls after sandbox_create, and the last one
		t.Errorf("%d actions in the event log, want 9", n)
	}
}
