package daemon

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/tarfs"
	"github.com/sandboxd/sandboxd/internal/textdiff"
)

// The OpenHands-compatible endpoint: the HTTP surface of OpenHands'
// action execution server, so its runtime client can use a sandbox as its
// runtime. Its base URL is /openhands/{sandbox id}, or /openhands/default
// for a sandbox the daemon makes on first use. Every action runs as an
// ordinary sandboxd action (event log and all). See docs/openhands.md.

const openhandsDefault = "default"

// openhandsState remembers the default sandbox.
type openhandsState struct {
	mu    sync.Mutex
	def   string
	users map[string]string // sandbox id -> its user's name
}

// user is the name of the user commands run as in s (asked once; the
// cache forgets deleted sandboxes only when it grows large).
func (d *Daemon) ohUser(s *sandbox) string {
	d.oh.mu.Lock()
	u, ok := d.oh.users[s.id]
	d.oh.mu.Unlock()
	if ok {
		return u
	}
	o, err := s.actFields(map[string]any{"kind": api.KindExec, "argv": []string{"id", "-un"}, "timeout_s": 10})
	if err != nil || o.ExitCode == nil || *o.ExitCode != 0 {
		return ""
	}
	u = strings.TrimSpace(o.Stdout)
	d.oh.mu.Lock()
	if d.oh.users == nil || len(d.oh.users) > 10000 {
		d.oh.users = map[string]string{}
	}
	d.oh.users[s.id] = u
	d.oh.mu.Unlock()
	return u
}

// openhands serves /openhands/{id}/{endpoint}.
func (d *Daemon) openhands(ctx *fasthttp.RequestCtx, rest string) {
	id, endpoint, _ := strings.Cut(rest, "/")
	method := string(ctx.Method())
	if endpoint == "alive" {
		// No sandbox needed to say the server is up.
		if onlyMethod(ctx, method, "GET") {
			writeJSON(ctx, 200, map[string]string{"status": "ok"})
		}
		return
	}
	// The method first: a wrong one neither finds nor makes a sandbox.
	allowed, ok := map[string]string{
		"execute_action": "POST", "upload_file": "POST", "list_files": "POST",
		"download_files": "GET", "server_info": "GET",
	}[endpoint]
	if !ok {
		writeError(ctx, api.Errorf(api.ErrNotFound, "no such OpenHands endpoint: %s (alive, execute_action, upload_file, download_files, list_files, server_info)", endpoint))
		return
	}
	if !onlyMethod(ctx, method, allowed) {
		return
	}
	s, err := d.openhandsSandbox(id)
	if err != nil {
		writeError(ctx, err)
		return
	}
	switch endpoint {
	case "execute_action":
		d.ohExecute(ctx, s)
	case "upload_file":
		d.ohUpload(ctx, s)
	case "download_files":
		d.ohDownload(ctx, s)
	case "list_files":
		d.ohList(ctx, s)
	case "server_info":
		writeJSON(ctx, 200, map[string]any{"sandbox_id": s.id, "runtime": "sandboxd", "version": version()})
	}
}

// openhandsSandbox is the sandbox id names; "default" is made on first use.
func (d *Daemon) openhandsSandbox(id string) (*sandbox, error) {
	if id != openhandsDefault {
		if !idRE.MatchString(id) {
			return nil, api.Errorf(api.ErrNotFound, "sandbox %q does not exist", id)
		}
		return d.mgr.get(id)
	}
	d.oh.mu.Lock()
	defer d.oh.mu.Unlock()
	if d.oh.def != "" {
		if s, err := d.mgr.get(d.oh.def); err == nil {
			return s, nil
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.mgr.create(cctx, &api.CreateSandboxRequest{Labels: map[string]string{"created-by": "openhands"}})
	if err != nil {
		return nil, err
	}
	d.oh.def = sb.ID
	return d.mgr.get(sb.ID)
}

// ohAction is an OpenHands action event, as event_to_dict writes it.
type ohAction struct {
	Action  string          `json:"action"`
	Args    json.RawMessage `json:"args"`
	Timeout *float64        `json:"timeout"`
	ID      *int64          `json:"id"`
}

type ohArgs struct {
	Command    string  `json:"command"`
	IsInput    bool    `json:"is_input"`
	Blocking   bool    `json:"blocking"`
	IsStatic   bool    `json:"is_static"`
	Cwd        *string `json:"cwd"`
	Hidden     bool    `json:"hidden"`
	Code       string  `json:"code"`
	Path       string  `json:"path"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	ViewRange  []int   `json:"view_range"`
	Content    string  `json:"content"`
	FileText   *string `json:"file_text"`
	OldStr     *string `json:"old_str"`
	NewStr     *string `json:"new_str"`
	InsertLine *int    `json:"insert_line"`
	URL        string  `json:"url"`
}

// ohObservation is an OpenHands observation event.
type ohObservation struct {
	Observation string         `json:"observation"`
	Content     string         `json:"content"`
	Extras      map[string]any `json:"extras"`
	Message     string         `json:"message"`
	Cause       *int64         `json:"cause,omitempty"`
	Success     bool           `json:"success"`
}

func ohError(cause *int64, msg string) ohObservation {
	return ohObservation{Observation: "error", Content: msg, Extras: map[string]any{"error_id": ""}, Message: msg, Cause: cause}
}

// ohExecute serves POST execute_action: {"action": <event>} -> <event>.
func (d *Daemon) ohExecute(ctx *fasthttp.RequestCtx, s *sandbox) {
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	var req struct {
		Action json.RawMessage `json:"action"`
	}
	var a ohAction
	if err := json.Unmarshal(body, &req); err != nil || len(req.Action) == 0 {
		writeJSON(ctx, 200, ohError(nil, `the body must be {"action": <an OpenHands action event>}`))
		return
	}
	if err := json.Unmarshal(req.Action, &a); err != nil {
		writeJSON(ctx, 200, ohError(nil, "not an OpenHands action event: "+err.Error()))
		return
	}
	var args ohArgs
	args.End = -1
	if len(a.Args) > 0 {
		if err := json.Unmarshal(a.Args, &args); err != nil {
			writeJSON(ctx, 200, ohError(a.ID, "bad args of "+a.Action+": "+err.Error()))
			return
		}
	}
	obs, err := d.ohRun(s, &a, &args)
	if err != nil {
		info := errorInfo(err)
		obs = ohError(a.ID, info.Message)
	}
	obs.Cause = a.ID
	if obs.Extras == nil {
		obs.Extras = map[string]any{}
	}
	writeJSON(ctx, 200, obs)
}

// act runs one sandboxd action given as JSON fields (checked like a REST
// action).
func (s *sandbox) actFields(fields map[string]any) (api.Observation, error) {
	b, _ := json.Marshal(fields)
	a, err := api.DecodeAction(b)
	if err != nil {
		return api.Observation{}, err
	}
	return s.act(a, nil)
}

func (d *Daemon) ohRun(s *sandbox, a *ohAction, args *ohArgs) (ohObservation, error) {
	switch a.Action {
	case "run":
		return d.ohCmd(s, a, args)
	case "run_ipython":
		o, err := s.actFields(map[string]any{"kind": api.KindIPython, "code": args.Code})
		if err != nil {
			return ohObservation{}, err
		}
		content := o.Output
		if e := o.IPythonError; e != nil {
			content = strings.TrimRight(content+"\n"+e.Traceback, "\n")
		}
		urls := []string{}
		for _, img := range o.Images {
			if img.MIME != "image/svg+xml" {
				urls = append(urls, "data:"+img.MIME+";base64,"+img.Data)
			}
		}
		return ohObservation{Observation: "run_ipython", Content: content, Success: o.IPythonError == nil,
			Message: "Code executed in IPython cell.",
			Extras:  map[string]any{"code": args.Code, "image_urls": urls}}, nil
	case "read":
		if len(args.ViewRange) > 0 {
			o, err := s.actFields(map[string]any{"kind": api.KindFileEdit, "command": "view", "path": args.Path, "view_range": args.ViewRange})
			if err != nil {
				return ohObservation{}, err
			}
			return ohObservation{Observation: "read", Content: o.Output, Success: true, Message: "I read the file " + args.Path + ".",
				Extras: map[string]any{"path": args.Path, "impl_source": "oh_aci"}}, nil
		}
		f := map[string]any{"kind": api.KindFileRead, "path": args.Path}
		if args.Start > 0 {
			f["start_line"] = args.Start + 1
		}
		if args.End > 0 {
			f["end_line"] = args.End
		}
		o, err := s.actFields(f)
		if err != nil {
			return ohObservation{}, err
		}
		return ohObservation{Observation: "read", Content: o.Content, Success: true, Message: "I read the file " + args.Path + ".",
			Extras: map[string]any{"path": args.Path, "impl_source": "default"}}, nil
	case "write":
		content := args.Content
		if args.Start != 0 || args.End != -1 {
			// Replace lines [start, end) of the file, as OpenHands does.
			old, err := s.actFields(map[string]any{"kind": api.KindFileRead, "path": args.Path})
			if err != nil && !errors.Is(err, api.ErrNotFound) {
				return ohObservation{}, err
			}
			if old.Truncated {
				return ohObservation{}, api.Errorf(api.ErrTooLarge, "%s is too large to edit by lines here: use edit", args.Path)
			}
			content = spliceLines(old.Content, content, args.Start, args.End)
		}
		if _, err := s.actFields(map[string]any{"kind": api.KindFileWrite, "path": args.Path, "content": content}); err != nil {
			return ohObservation{}, err
		}
		return ohObservation{Observation: "write", Content: "", Success: true, Message: "I wrote to the file " + args.Path + ".",
			Extras: map[string]any{"path": args.Path, "content": args.Content}}, nil
	case "edit":
		return d.ohEdit(s, args)
	case "browse":
		o, err := s.actFields(map[string]any{"kind": api.KindBrowser, "op": "goto", "url": args.URL})
		if err != nil {
			return ohObservation{}, err
		}
		return ohObservation{Observation: "browse", Content: o.Text, Success: o.BrowserError == "",
			Message: "Visited " + o.URL,
			Extras: map[string]any{"url": o.URL, "trigger_by_action": "browse", "screenshot": o.Screenshot,
				"error": o.BrowserError != "", "last_browser_action_error": o.BrowserError,
				"axtree_object": map[string]any{}, "extra_element_properties": map[string]any{},
				"open_pages_urls": []string{o.URL}, "active_page_index": 0, "focused_element_bid": "",
				"goal_image_urls": []string{}, "filter_visible_only": false, "last_browser_action": "",
				"dom_object": map[string]any{}, "text_content": o.Text, "axtree": o.AXTree}}, nil
	case "":
		return ohObservation{}, api.Errorf(api.ErrInvalidArgument, `the action event has no "action"`)
	}
	return ohObservation{}, api.Errorf(api.ErrUnsupported, "action %q is not supported by sandboxd's OpenHands endpoint (run, run_ipython, read, write, edit and browse are)", a.Action)
}

// OpenHands' hints after a command's output.
const (
	ohNoChange = "\n[The command has no new output after %g seconds. You may wait longer to see additional output by sending empty command '', send other commands to interact with the current process, send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous command before sending your new command, or use the timeout parameter in execute_bash for future commands.]"
	ohTimedOut = "\n[The command timed out after %g seconds. You may wait longer to see additional output by sending empty command '', send other commands to interact with the current process, send keys to interrupt/kill the command, or use the timeout parameter in execute_bash for future commands.]"
	ohDone     = "\n[The command completed with exit code %d.]"
)

func (d *Daemon) ohCmd(s *sandbox, a *ohAction, args *ohArgs) (ohObservation, error) {
	timeout := 30.0
	if a.Timeout != nil && *a.Timeout > 0 {
		timeout = *a.Timeout
	}
	var (
		o   api.Observation
		err error
	)
	cmd := args.Command
	switch {
	case args.IsStatic:
		// A one-off process, outside the session.
		f := map[string]any{"kind": api.KindExec, "argv": []string{"bash", "-c", cmd}, "timeout_s": timeout}
		if args.Cwd != nil && *args.Cwd != "" {
			f["cwd"] = *args.Cwd
		}
		o, err = s.actFields(f)
		if err == nil {
			o.Output = o.Stdout + o.Stderr
		}
	case args.IsInput && cmd == "C-c":
		o, err = s.actFields(map[string]any{"kind": api.KindInterrupt})
	case args.IsInput:
		in := cmd
		switch cmd {
		case "C-d":
			in = "\x04"
		case "C-z":
			in = "\x1a"
		default:
			if !strings.HasSuffix(in, "\n") {
				in += "\n"
			}
		}
		o, err = s.actFields(map[string]any{"kind": api.KindRun, "command": in, "input": true, "timeout_s": timeout})
	default:
		if args.Cwd != nil && *args.Cwd != "" && cmd != "" {
			cmd = "cd " + shellQuote(*args.Cwd) + " && " + cmd
		}
		f := map[string]any{"kind": api.KindRun, "command": cmd, "timeout_s": timeout}
		if args.Blocking {
			// Blocking: the timeout is a hard one.
			f["hard_timeout_s"] = timeout
			f["timeout_s"] = timeout + 5
		}
		o, err = s.actFields(f)
	}
	if err != nil {
		return ohObservation{}, err
	}
	exit := -1
	suffix := ""
	switch {
	case o.TimedOut:
		suffix = fmt.Sprintf(ohTimedOut, timeout)
		if o.ExitCode != nil {
			exit = *o.ExitCode
		}
	case o.Running || o.ExitCode == nil:
		suffix = fmt.Sprintf(ohNoChange, timeout)
	default:
		exit = *o.ExitCode
		suffix = fmt.Sprintf(ohDone, exit)
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = s.view().Workdir
	}
	host, _ := os.Hostname()
	msg := fmt.Sprintf("Command `%s` executed with exit code %d.", args.Command, exit)
	return ohObservation{
		Observation: "run", Content: o.Output, Success: exit == 0, Message: msg,
		Extras: map[string]any{
			"command": args.Command,
			"metadata": map[string]any{
				"exit_code": exit, "pid": -1, "username": d.ohUser(s), "hostname": host,
				"working_dir": cwd, "py_interpreter_path": "/usr/bin/python3",
				"prefix": "", "suffix": suffix,
			},
			"hidden": args.Hidden,
		},
	}, nil
}

func (d *Daemon) ohEdit(s *sandbox, args *ohArgs) (ohObservation, error) {
	f := map[string]any{"kind": api.KindFileEdit, "command": args.Command, "path": args.Path}
	if args.FileText != nil {
		f["file_text"] = *args.FileText
	}
	if args.OldStr != nil {
		f["old_str"] = *args.OldStr
	}
	if args.NewStr != nil {
		f["new_str"] = *args.NewStr
	}
	if args.InsertLine != nil {
		f["insert_line"] = *args.InsertLine
	}
	if len(args.ViewRange) > 0 {
		f["view_range"] = args.ViewRange
	}
	// The file before and after, for the observation's diff.
	var before string
	changes := args.Command != "view"
	if changes {
		if o, err := s.actFields(map[string]any{"kind": api.KindFileRead, "path": args.Path}); err == nil && !o.Truncated {
			before = o.Content
		}
	}
	o, err := s.actFields(f)
	if err != nil {
		return ohObservation{}, err
	}
	extras := map[string]any{"path": args.Path, "prev_exist": before != "", "old_content": nil, "new_content": nil, "impl_source": "oh_aci", "diff": ""}
	if changes {
		if after, err := s.actFields(map[string]any{"kind": api.KindFileRead, "path": args.Path}); err == nil && !after.Truncated {
			extras["old_content"], extras["new_content"] = before, after.Content
			extras["diff"] = textdiff.Unified("a/"+strings.TrimPrefix(args.Path, "/"), "b/"+strings.TrimPrefix(args.Path, "/"), before, after.Content)
		}
	}
	return ohObservation{Observation: "edit", Content: o.Output, Success: true, Message: "I edited the file " + args.Path + ".", Extras: extras}, nil
}

// spliceLines replaces lines [start, end) of old (0-based; end -1 is the
// end) with content.
func spliceLines(old, content string, start, end int) string {
	lines := strings.SplitAfter(old, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	start = max(0, min(start, len(lines)))
	if end < 0 || end > len(lines) {
		end = len(lines)
	}
	end = max(end, start)
	if content != "" && !strings.HasSuffix(content, "\n") && end < len(lines) {
		content += "\n"
	}
	return strings.Join(lines[:start], "") + content + strings.Join(lines[end:], "")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ohUpload serves POST upload_file: multipart "file", "destination" and
// "recursive" (the file is then a zip, extracted into destination).
func (d *Daemon) ohUpload(ctx *fasthttp.RequestCtx, s *sandbox) {
	fx, err := s.files()
	if err != nil {
		writeError(ctx, err)
		return
	}
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	_, params, err := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	if err != nil || params["boundary"] == "" {
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, "upload_file wants a multipart/form-data body"))
		return
	}
	form, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).ReadForm(d.cfg.MaxBodyBytes)
	if err != nil {
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, "upload_file: %v", err))
		return
	}
	defer form.RemoveAll()
	dest := first(form.Value["destination"])
	recursive := strings.EqualFold(first(form.Value["recursive"]), "true")
	files := form.File["file"]
	if dest == "" || len(files) != 1 {
		writeError(ctx, api.Errorf(api.ErrInvalidArgument, `upload_file needs a "destination" and one "file"`))
		return
	}
	f, err := files[0].Open()
	if err != nil {
		writeError(ctx, err)
		return
	}
	defer f.Close()
	done := s.busy()
	defer done()
	if recursive {
		// A zip: turned into a tar stream for the confined extractor.
		zr, err := zip.NewReader(f, files[0].Size)
		if err != nil {
			writeError(ctx, api.Errorf(api.ErrInvalidArgument, "upload_file: recursive wants a zip: %v", err))
			return
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(zipToTar(zr, pw)) }()
		res, err := fx.ExtractTar(dest, pr, tarfs.Limits{MaxBytes: d.cfg.Files.MaxTransferBytes, MaxEntries: d.cfg.Files.MaxTransferEntries})
		pr.CloseWithError(io.ErrClosedPipe)
		if err != nil {
			writeError(ctx, err)
			return
		}
		writeJSON(ctx, 200, map[string]any{"filename": res.Path, "files": res.Files})
		return
	}
	name := path.Base("/" + files[0].Filename)
	res, err := fx.Upload(path.Join(dest, name), f, d.cfg.Files.MaxTransferBytes)
	if err != nil {
		writeError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]any{"filename": res.Path})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// zipToTar copies a zip's regular files and directories into a tar
// stream (no links: zip has none that OpenHands sends).
func zipToTar(zr *zip.Reader, w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, zf := range zr.File {
		mode := zf.Mode()
		hdr := &tar.Header{Name: zf.Name, ModTime: zf.Modified, Mode: int64(mode.Perm())}
		switch {
		case mode.IsDir():
			hdr.Typeflag = tar.TypeDir
		case mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(zf.UncompressedSize64)
		default:
			continue
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if mode.IsDir() {
				hdr.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			rc, err := zf.Open()
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, rc, hdr.Size)
			rc.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// ohDownload serves GET download_files?path=P: P (a file or a directory)
// as a zip.
func (d *Daemon) ohDownload(ctx *fasthttp.RequestCtx, s *sandbox) {
	fx, err := s.files()
	if err != nil {
		writeError(ctx, err)
		return
	}
	dl, err := fx.Open(pathArg(ctx))
	if err != nil {
		writeError(ctx, err)
		return
	}
	// Streamed, not built in memory: a directory may be large. An error
	// part way ends the stream, and the client sees a truncated zip.
	done := s.busy()
	dl.OnClose(done)
	d.streamWith(ctx, "application/zip", "Content-Disposition: attachment; filename=\"download.zip\"\r\n", func(w *bufio.Writer, conn net.Conn) {
		zw := zip.NewWriter(deadlineWriter{w, conn})
		var err error
		if dl.Dir {
			pr, pw := io.Pipe()
			go func() {
				_, err := dl.WriteTo(pw)
				pw.CloseWithError(err)
			}()
			err = tarToZip(tar.NewReader(pr), zw)
			pr.CloseWithError(io.ErrClosedPipe)
		} else {
			var zf io.Writer
			if zf, err = zw.Create(path.Base(dl.Path)); err == nil {
				_, err = dl.WriteTo(zf)
			} else {
				dl.Close()
			}
		}
		if err == nil {
			err = zw.Close()
		}
		if err != nil {
			d.log.Debug("openhands download", "sandbox", s.id, "path", dl.Path, "err", err)
		}
	})
}

func tarToZip(tr *tar.Reader, zw *zip.Writer) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if name == "" || name == "." {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if _, err := zw.Create(strings.TrimSuffix(name, "/") + "/"); err != nil {
				return err
			}
		case tar.TypeReg:
			w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: hdr.ModTime})
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, tr); err != nil {
				return err
			}
		}
	}
}

// ohList serves POST list_files {"path": P}: the entries of directory P
// (default the workdir), directories first with a trailing slash.
func (d *Daemon) ohList(ctx *fasthttp.RequestCtx, s *sandbox) {
	body, err := d.readBody(ctx)
	if err != nil {
		writeError(ctx, err)
		return
	}
	var req struct {
		Path string `json:"path"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(ctx, api.Errorf(api.ErrInvalidArgument, "list_files wants {\"path\": ...}: %v", err))
			return
		}
	}
	fx, err := s.files()
	if err != nil {
		writeError(ctx, err)
		return
	}
	p := req.Path
	if p == "" {
		p = "."
	}
	names, err := fx.List(p)
	if err != nil {
		// OpenHands answers a path that is no directory with no entries.
		if errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrInvalidArgument) {
			writeJSON(ctx, 200, []string{})
			return
		}
		writeError(ctx, err)
		return
	}
	if names == nil {
		names = []string{}
	}
	writeJSON(ctx, 200, names)
}
