package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sandboxd/sandboxd/api"
)

// The MCP endpoint: the Model Context Protocol's Streamable HTTP transport
// (revision 2025-06-18) at POST /mcp, answering each JSON-RPC request with
// one application/json response (the transport allows that instead of an
// SSE stream; sandboxd sends no server-initiated messages). Its tools are
// ordinary actions: each call is appended to the sandbox's event log like
// any other.

// mcpVersions are the protocol revisions the endpoint speaks, newest first.
var mcpVersions = []string{"2025-06-18", "2025-03-26"}

const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
)

type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// mcpSessions are the MCP sessions: each has the sandbox its tools use
// when a call names none.
type mcpSessions struct {
	mu sync.Mutex
	m  map[string]*mcpSession
}

type mcpSession struct {
	sandbox string // default sandbox: the last one sandbox_create made, or made on first use
	last    time.Time
}

// maxMCPSessions bounds the sessions kept; the least recently used go.
const maxMCPSessions = 1000

func (ss *mcpSessions) add() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*mcpSession{}
	}
	if len(ss.m) >= maxMCPSessions {
		var oldest string
		var t time.Time
		for k, s := range ss.m {
			if oldest == "" || s.last.Before(t) {
				oldest, t = k, s.last
			}
		}
		delete(ss.m, oldest)
	}
	ss.m[id] = &mcpSession{last: time.Now()}
	return id
}

func (ss *mcpSessions) get(id string) *mcpSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s != nil {
		s.last = time.Now()
	}
	return s
}

func (ss *mcpSessions) remove(id string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	_, ok := ss.m[id]
	delete(ss.m, id)
	return ok
}

// mcp serves /mcp.
func (d *Daemon) mcp(ctx *fasthttp.RequestCtx) {
	method := string(ctx.Method())
	sid := string(ctx.Request.Header.Peek("Mcp-Session-Id"))
	switch method {
	case "POST":
	case "DELETE":
		if sid == "" || !d.mcpSessions.remove(sid) {
			writeError(ctx, api.Errorf(api.ErrNotFound, "no MCP session %q", sid))
			return
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	default:
		// No server-to-client stream: the transport says 405 for GET.
		onlyMethod(ctx, method, "POST", "DELETE")
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		return
	}
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	var msg rpcMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		mcpAnswer(ctx, rpcResponse{ID: json.RawMessage("null"), Error: &rpcError{rpcParseError, "the body is not one JSON-RPC message: " + err.Error()}})
		return
	}
	if msg.JSONRPC != "2.0" {
		mcpAnswer(ctx, rpcResponse{ID: orNull(msg.ID), Error: &rpcError{rpcInvalidRequest, `"jsonrpc" must be "2.0"`}})
		return
	}
	var sess *mcpSession
	if msg.Method != "initialize" && sid != "" {
		if sess = d.mcpSessions.get(sid); sess == nil {
			// The transport: an unknown session is a 404, and the
			// client starts a new one.
			writeError(ctx, api.Errorf(api.ErrNotFound, "no MCP session %q (the daemon restarted, or it was closed): initialize a new one", sid))
			return
		}
	}
	if len(msg.ID) == 0 || msg.Method == "" {
		// A notification or a response: nothing to answer.
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	resp := rpcResponse{ID: msg.ID}
	switch msg.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		proto := mcpVersions[0]
		for _, v := range mcpVersions {
			if v == p.ProtocolVersion {
				proto = v
			}
		}
		ctx.Response.Header.Set("Mcp-Session-Id", d.mcpSessions.add())
		resp.Result = map[string]any{
			"protocolVersion": proto,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": "sandboxd", "version": version()},
			"instructions":    "Tools run in sandboxd sandboxes. Call sandbox_create first (or let the first call make one); later calls use that sandbox unless they name a sandbox_id.",
		}
	case "ping":
		resp.Result = map[string]any{}
	case "tools/list":
		resp.Result = map[string]any{"tools": mcpTools}
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(msg.Params, &p); err != nil || p.Name == "" {
			resp.Error = &rpcError{rpcInvalidParams, "tools/call needs params {name, arguments}"}
			break
		}
		result, rerr := d.mcpCall(ctx, sess, p.Name, p.Arguments)
		if rerr != nil {
			resp.Error = rerr
		} else {
			resp.Result = result
		}
	default:
		resp.Error = &rpcError{rpcMethodNotFound, fmt.Sprintf("method %q is not supported (initialize, ping, tools/list and tools/call are)", msg.Method)}
	}
	mcpAnswer(ctx, resp)
}

func orNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

func mcpAnswer(ctx *fasthttp.RequestCtx, r rpcResponse) {
	r.JSONRPC = "2.0"
	writeJSON(ctx, fasthttp.StatusOK, r)
}

// mcpTool describes one tool for tools/list.
type mcpTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

func schema(required []string, props map[string]any) map[string]any {
	props["sandbox_id"] = map[string]any{"type": "string", "description": "The sandbox (default: this session's, made by sandbox_create or on first use)."}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func str(desc string) map[string]any  { return map[string]any{"type": "string", "description": desc} }
func num(desc string) map[string]any  { return map[string]any{"type": "number", "description": desc} }
func boolean(d string) map[string]any { return map[string]any{"type": "boolean", "description": d} }

var mcpTools = []mcpTool{
	{"execute_bash", "Run a command in a stateful bash session of the sandbox (cwd, env and venvs persist). A command still running after timeout keeps running: call again with an empty command to wait, or with is_input to type into it.",
		schema([]string{"command"}, map[string]any{
			"command":  str("The command; empty to wait for a running one; with is_input, text to type (\\n for Enter)."),
			"session":  str("The bash session (default \"default\")."),
			"timeout":  num("Seconds to wait before answering with the output so far (default 30)."),
			"is_input": boolean("Type command into the running command instead of starting a new one."),
		})},
	{"execute_ipython_cell", "Run Python code in the sandbox's IPython kernel; variables persist between cells.",
		schema([]string{"code"}, map[string]any{
			"code":    str("The cell."),
			"timeout": num("Seconds before the cell is interrupted (default 60)."),
		})},
	{"str_replace_editor", "View, create and edit files in the sandbox: view (a file with line numbers, or a directory), create, str_replace (old_str must occur exactly once), insert (after insert_line), undo_edit.",
		schema([]string{"command", "path"}, map[string]any{
			"command":     map[string]any{"type": "string", "enum": []string{"view", "create", "str_replace", "insert", "undo_edit"}},
			"path":        str("Relative to the sandbox's workdir, or absolute inside it."),
			"file_text":   str("For create."),
			"old_str":     str("For str_replace."),
			"new_str":     str("For str_replace and insert."),
			"insert_line": map[string]any{"type": "integer", "description": "For insert."},
			"view_range":  map[string]any{"type": "array", "items": map[string]any{"type": "integer"}, "description": "For view: [start, end], end -1 for the end."},
		})},
	{"browser", "Drive the sandbox's headless Chromium. Every answer has the page's url, title, text and accessibility tree, whose interactive elements carry ids ([e12]) for target.",
		schema([]string{"op"}, map[string]any{
			"op":         map[string]any{"type": "string", "enum": []string{"goto", "click", "fill", "press", "scroll", "back", "forward", "select", "snapshot", "screenshot", "evaluate"}},
			"url":        str("For goto."),
			"target":     str("An element id of the last tree (e12) or a CSS selector."),
			"text":       str("For fill and select; for scroll without target: up, down, top, bottom."),
			"key":        str("For press: Enter, Tab, Control+a, ..."),
			"script":     str("For evaluate: JavaScript; its value comes back as JSON."),
			"screenshot": boolean("Add a PNG screenshot."),
		})},
	{"sandbox_create", "Create a sandbox; later calls of this session use it unless they name another.",
		map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"backend": map[string]any{"type": "string", "enum": []string{api.BackendProcess, api.BackendContainerd, api.BackendWasm}},
			"image":   str("containerd only: an imported image, or host (default)."),
			"network": map[string]any{"type": "string", "enum": []string{api.NetworkNone, api.NetworkHost}},
		}}},
	{"sandbox_delete", "Delete a sandbox and everything running in it.",
		map[string]any{"type": "object", "additionalProperties": false, "required": []string{"sandbox_id"}, "properties": map[string]any{
			"sandbox_id": str("The sandbox."),
		}}},
}

// mcpCall runs one tool. A tool that ran and failed (a command's exit
// code, a refused edit) is a result with isError; a JSON-RPC error means
// the call itself was wrong.
func (d *Daemon) mcpCall(ctx *fasthttp.RequestCtx, sess *mcpSession, name string, raw json.RawMessage) (map[string]any, *rpcError) {
	args := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, &rpcError{rpcInvalidParams, "arguments must be an object: " + err.Error()}
		}
	}
	var sandboxID string
	if v, ok := args["sandbox_id"]; ok {
		if err := json.Unmarshal(v, &sandboxID); err != nil {
			return nil, &rpcError{rpcInvalidParams, "sandbox_id must be a string"}
		}
		delete(args, "sandbox_id")
	}
	switch name {
	case "sandbox_create":
		body, _ := json.Marshal(args)
		req, err := api.DecodeCreateSandbox(body)
		if err != nil {
			return toolError(err), nil
		}
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := d.mgr.create(cctx, req)
		if err != nil {
			return toolError(err), nil
		}
		d.setSessionSandbox(sess, sb.ID)
		return toolText(fmt.Sprintf("Created sandbox %s (%s backend, workdir %s).", sb.ID, sb.Backend, sb.Workdir), false, sb), nil
	case "sandbox_delete":
		if sandboxID == "" {
			return nil, &rpcError{rpcInvalidParams, "sandbox_delete needs sandbox_id"}
		}
		if err := d.mgr.delete(ctx, sandboxID, "deleted by an MCP client"); err != nil {
			return toolError(err), nil
		}
		d.setSessionSandbox(sess, "")
		return toolText("Deleted sandbox "+sandboxID+".", false, nil), nil
	}
	action, err := mcpAction(name, args)
	if err != nil {
		if errors.Is(err, errUnknownTool) {
			return nil, &rpcError{rpcInvalidParams, err.Error()}
		}
		return toolError(err), nil
	}
	if sandboxID == "" {
		if sandboxID, err = d.sessionSandbox(sess); err != nil {
			return toolError(err), nil
		}
	}
	s, err := d.mgr.get(sandboxID)
	if err != nil {
		return toolError(err), nil
	}
	obs, err := s.act(action, nil)
	if err != nil {
		return toolError(err), nil
	}
	return mcpResult(name, &obs), nil
}

var errUnknownTool = errors.New("unknown tool")

// mcpAction turns a tool's arguments into the action, decoded like any
// REST action (the same checks, the same errors).
func mcpAction(tool string, args map[string]json.RawMessage) (*api.Action, error) {
	rename := func(from, to string) {
		if v, ok := args[from]; ok {
			args[to] = v
			delete(args, from)
		}
	}
	var kind string
	switch tool {
	case "execute_bash":
		kind = api.KindRun
		rename("timeout", "timeout_s")
		rename("is_input", "input")
	case "execute_ipython_cell":
		kind = api.KindIPython
		rename("timeout", "timeout_s")
	case "str_replace_editor":
		kind = api.KindFileEdit
	case "browser":
		kind = api.KindBrowser
	default:
		return nil, fmt.Errorf("%w %q: the tools are execute_bash, execute_ipython_cell, str_replace_editor, browser, sandbox_create and sandbox_delete", errUnknownTool, tool)
	}
	args["kind"], _ = json.Marshal(kind)
	body, _ := json.Marshal(args)
	return api.DecodeAction(body)
}

func (d *Daemon) setSessionSandbox(sess *mcpSession, id string) {
	if sess == nil {
		return
	}
	d.mcpSessions.mu.Lock()
	sess.sandbox = id
	d.mcpSessions.mu.Unlock()
}

// sessionSandbox is the session's sandbox, made on first use.
func (d *Daemon) sessionSandbox(sess *mcpSession) (string, error) {
	if sess == nil {
		return "", api.Errorf(api.ErrInvalidArgument, "no sandbox_id, and no MCP session to remember one: name a sandbox_id, or call sandbox_create in a session")
	}
	d.mcpSessions.mu.Lock()
	id := sess.sandbox
	d.mcpSessions.mu.Unlock()
	if id != "" {
		if _, err := d.mgr.get(id); err == nil {
			return id, nil
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.mgr.create(cctx, &api.CreateSandboxRequest{Labels: map[string]string{"created-by": "mcp"}})
	if err != nil {
		return "", err
	}
	d.setSessionSandbox(sess, sb.ID)
	return sb.ID, nil
}

func toolText(text string, isError bool, structured any) map[string]any {
	r := map[string]any{"content": []map[string]any{{"type": "text", "text": text}}, "isError": isError}
	if structured != nil {
		r["structuredContent"] = structured
	}
	return r
}

func toolError(err error) map[string]any {
	info := errorInfo(err)
	return toolText(fmt.Sprintf("Error (%s): %s", info.Code, info.Message), true, map[string]any{"error": info})
}

// mcpResult renders an observation for a model: the text it reads, plus
// the observation itself as structured content.
func mcpResult(tool string, o *api.Observation) map[string]any {
	var b strings.Builder
	isError := false
	content := []map[string]any{}
	switch tool {
	case "execute_bash":
		b.WriteString(o.Output)
		if o.Output != "" && !strings.HasSuffix(o.Output, "\n") {
			b.WriteByte('\n')
		}
		switch {
		case o.Running:
			b.WriteString("[The command is still running. Call execute_bash with an empty command to wait for it, is_input to type into it, or C-c as input to interrupt it.]")
		case o.ExitCode != nil:
			fmt.Fprintf(&b, "[The command completed with exit code %d.]", *o.ExitCode)
			isError = *o.ExitCode != 0
		}
		if o.Cwd != "" {
			fmt.Fprintf(&b, "\n[Current working directory: %s]", o.Cwd)
		}
	case "execute_ipython_cell":
		b.WriteString(o.Output)
		if e := o.IPythonError; e != nil {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(e.Traceback)
			isError = true
		}
		for _, img := range o.Images {
			if img.MIME == "image/svg+xml" {
				continue
			}
			content = append(content, map[string]any{"type": "image", "data": img.Data, "mimeType": img.MIME})
		}
	case "str_replace_editor":
		b.WriteString(o.Output)
	case "browser":
		fmt.Fprintf(&b, "URL: %s\nTitle: %s\n", o.URL, o.Title)
		if o.BrowserError != "" {
			fmt.Fprintf(&b, "Error: %s\n", o.BrowserError)
			isError = true
		}
		if o.Result != "" {
			fmt.Fprintf(&b, "Result: %s\n", o.Result)
		}
		fmt.Fprintf(&b, "\nAccessibility tree:\n%s\nText:\n%s", o.AXTree, o.Text)
		if o.Screenshot != "" {
			content = append(content, map[string]any{"type": "image", "data": o.Screenshot, "mimeType": "image/png"})
		}
	}
	if o.Note != "" {
		fmt.Fprintf(&b, "\n[Note: %s]", o.Note)
	}
	content = append([]map[string]any{{"type": "text", "text": b.String()}}, content...)
	return map[string]any{"content": content, "isError": isError, "structuredContent": o}
}
