package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Action kinds.
const (
	KindRun       = "run"
	KindInterrupt = "interrupt"
	KindExec      = "exec"
	KindIPython   = "ipython"
	KindFileRead  = "file.read"
	KindFileWrite = "file.write"
	KindFileEdit  = "file.edit"
	KindBrowser   = "browser"
)

// DefaultSession is the bash session used when an action names none.
const DefaultSession = "default"

// Action is one request to a sandbox. It is flat: each kind uses the fields
// its section of the API names and no others (DecodeAction enforces that).
type Action struct {
	// ID is chosen by the client; a retried action with the same ID is not
	// executed twice.
	ID   string `json:"id,omitempty"`
	Kind string `json:"kind"`

	// Command is the shell text of a run action (typed into the program when
	// Input is set), or the editor verb of a file.edit action.
	Command string `json:"command,omitempty"`
	// Session names a bash session (run, interrupt).
	Session string `json:"session,omitempty"`
	// TimeoutS bounds how long the action waits; nil means the kind's default.
	// For run it is the soft timeout; for exec a hard one.
	TimeoutS     *float64 `json:"timeout_s,omitempty"`
	HardTimeoutS float64  `json:"hard_timeout_s,omitempty"`
	Input        bool     `json:"input,omitempty"`

	// exec
	Argv  []string          `json:"argv,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Stdin string            `json:"stdin,omitempty"`

	// ipython
	Code string `json:"code,omitempty"`

	// file.read, file.write, file.edit
	Path       string  `json:"path,omitempty"`
	StartLine  int     `json:"start_line,omitempty"`
	EndLine    int     `json:"end_line,omitempty"`
	Content    *string `json:"content,omitempty"`
	Mode       string  `json:"mode,omitempty"`
	FileText   *string `json:"file_text,omitempty"`
	OldStr     *string `json:"old_str,omitempty"`
	NewStr     *string `json:"new_str,omitempty"`
	InsertLine *int    `json:"insert_line,omitempty"`
	ViewRange  []int   `json:"view_range,omitempty"`

	// browser
	Op         string `json:"op,omitempty"`
	URL        string `json:"url,omitempty"`
	Target     string `json:"target,omitempty"`
	Text       string `json:"text,omitempty"`
	Key        string `json:"key,omitempty"`
	Script     string `json:"script,omitempty"`
	Screenshot bool   `json:"screenshot,omitempty"`
}

// fieldsOf lists, per kind, the JSON fields an action of that kind may carry.
var fieldsOf = map[string][]string{
	KindRun:       {"command", "session", "timeout_s", "hard_timeout_s", "input"},
	KindInterrupt: {"session", "timeout_s"},
	KindExec:      {"argv", "cwd", "env", "stdin", "timeout_s"},
	KindIPython:   {"code", "timeout_s"},
	KindFileRead:  {"path", "start_line", "end_line"},
	KindFileWrite: {"path", "content", "mode"},
	KindFileEdit:  {"command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range"},
	KindBrowser:   {"op", "url", "target", "text", "key", "script", "screenshot", "timeout_s"},
}

// Kinds lists the action kinds of the API.
func Kinds() []string {
	ks := make([]string, 0, len(fieldsOf))
	for k := range fieldsOf {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Limits of the fields of an action.
const (
	MaxIDLen      = 256
	MaxSessionLen = 64
	// MaxTimeoutS is the largest timeout an action may ask for (one week);
	// the server may clamp lower.
	MaxTimeoutS = 7 * 24 * 3600
)

var sessionRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// DecodeAction parses and validates one action. Every failure is an
// ErrInvalidArgument whose message names the offending field.
func DecodeAction(data []byte) (*Action, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, jsonError("action", err)
	}
	if raw == nil {
		return nil, Errorf(ErrInvalidArgument, "the action must be a JSON object")
	}
	var kind string
	if k, ok := raw["kind"]; !ok {
		return nil, Errorf(ErrInvalidArgument, "field \"kind\" is required; one of %s", strings.Join(Kinds(), ", "))
	} else if err := json.Unmarshal(k, &kind); err != nil {
		return nil, Errorf(ErrInvalidArgument, "field \"kind\" must be a string")
	}
	allowed, ok := fieldsOf[kind]
	if !ok {
		return nil, Errorf(ErrInvalidArgument, "unknown action kind %q; one of %s", kind, strings.Join(Kinds(), ", "))
	}
	for name, v := range raw {
		if name != "id" && name != "kind" && !slices.Contains(allowed, name) {
			return nil, Errorf(ErrInvalidArgument, "field %q is not part of a %q action (it takes: %s)", name, kind, strings.Join(allowed, ", "))
		}
		if !utf8.Valid(v) {
			return nil, Errorf(ErrInvalidArgument, "field %q is not valid UTF-8", name)
		}
	}
	var a Action
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, jsonError("action", err)
	}
	if err := a.checkNUL(); err != nil {
		return nil, err
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// checkNUL refuses NUL bytes in the fields that end up as C strings or
// terminal input, where a NUL would be cut off or misread. Payload fields
// (file content, stdin, code) may carry any bytes.
func (a *Action) checkNUL() error {
	fields := []struct {
		name string
		vals []string
	}{
		{"id", []string{a.ID}}, {"command", []string{a.Command}}, {"session", []string{a.Session}},
		{"argv", a.Argv}, {"cwd", []string{a.Cwd}}, {"path", []string{a.Path}}, {"mode", []string{a.Mode}},
		{"op", []string{a.Op}}, {"url", []string{a.URL}}, {"target", []string{a.Target}}, {"key", []string{a.Key}},
	}
	for _, f := range fields {
		for _, v := range f.vals {
			if strings.IndexByte(v, 0) >= 0 {
				return Errorf(ErrInvalidArgument, "field %q contains a NUL character", f.name)
			}
		}
	}
	for k, v := range a.Env {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return Errorf(ErrInvalidArgument, "field \"env\" contains a NUL character")
		}
	}
	return nil
}

// jsonError turns a decoding error into an invalid_argument naming the field.
func jsonError(what string, err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return Errorf(ErrInvalidArgument, "the %s must be a JSON object, not %s", what, te.Value)
		}
		return Errorf(ErrInvalidArgument, "field %q must be %s, not %s", field, jsonTypeName(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return Errorf(ErrInvalidArgument, "the %s is not valid JSON at byte %d: %v", what, se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Errorf(ErrInvalidArgument, "unknown field %s in the %s", strings.TrimPrefix(err.Error(), "json: unknown field "), what)
	}
	return Errorf(ErrInvalidArgument, "the %s is not valid JSON: %v", what, err)
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "a value of the documented type"
	}
	return "a number"
}

// Validate checks the fields of an action that do not depend on the server's
// configuration.
func (a *Action) Validate() error {
	if len(a.ID) > MaxIDLen {
		return Errorf(ErrInvalidArgument, "field \"id\" is longer than %d bytes", MaxIDLen)
	}
	if a.TimeoutS != nil {
		if err := checkSeconds("timeout_s", *a.TimeoutS); err != nil {
			return err
		}
	}
	if err := checkSeconds("hard_timeout_s", a.HardTimeoutS); err != nil {
		return err
	}
	switch a.Kind {
	case KindRun, KindInterrupt:
		if a.Session != "" && (len(a.Session) > MaxSessionLen || !sessionRE.MatchString(a.Session)) {
			return Errorf(ErrInvalidArgument, "field \"session\" must be 1-%d characters of A-Z a-z 0-9 _ . -", MaxSessionLen)
		}
	case KindExec:
		if len(a.Argv) == 0 || a.Argv[0] == "" {
			return Errorf(ErrInvalidArgument, "field \"argv\" must name a program to run")
		}
		for k := range a.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return Errorf(ErrInvalidArgument, "field \"env\" has an invalid variable name %q", k)
			}
		}
	}
	return nil
}

func checkSeconds(field string, v float64) error {
	if math.IsNaN(v) || v < 0 || v > MaxTimeoutS {
		return Errorf(ErrInvalidArgument, "field %q must be a number of seconds from 0 to %d, not %v", field, MaxTimeoutS, v)
	}
	return nil
}

// SessionName returns the action's session, or the default one.
func (a *Action) SessionName() string {
	if a.Session == "" {
		return DefaultSession
	}
	return a.Session
}

// Timeout returns the action's timeout in seconds, def if it gave none, and
// never more than max.
func (a *Action) Timeout(def, max float64) float64 {
	t := def
	if a.TimeoutS != nil {
		t = *a.TimeoutS
	}
	return math.Min(t, max)
}

// Equivalent reports whether two actions ask for the same thing, ignoring
// their IDs: a retry with a reused ID must be the same action.
func (a *Action) Equivalent(b *Action) bool {
	x, y := *a, *b
	x.ID, y.ID = "", ""
	bx, err1 := json.Marshal(&x)
	by, err2 := json.Marshal(&y)
	return err1 == nil && err2 == nil && bytes.Equal(bx, by)
}

// Convenience constructors for the Go client and tests.

// Run returns a run action of command in the default session.
func Run(command string) *Action { return &Action{Kind: KindRun, Command: command} }

// Exec returns an exec action of argv.
func Exec(argv ...string) *Action { return &Action{Kind: KindExec, Argv: argv} }

// Browse returns a browser action that opens url.
func Browse(url string) *Action { return &Action{Kind: KindBrowser, Op: "goto", URL: url} }

// Seconds returns a pointer to s, for TimeoutS.
func Seconds(s float64) *float64 { return &s }

// String returns a short description of the action for logs and errors
// (never its payload, which may be large or secret).
func (a *Action) String() string {
	switch a.Kind {
	case KindRun, KindInterrupt:
		return fmt.Sprintf("%s[%s]", a.Kind, a.SessionName())
	case KindExec:
		if len(a.Argv) > 0 {
			return fmt.Sprintf("exec[%s]", a.Argv[0])
		}
	}
	return a.Kind
}

// ReadFile returns a file.read action of the whole file at path.
func ReadFile(path string) *Action { return &Action{Kind: KindFileRead, Path: path} }

// WriteFile returns a file.write action.
func WriteFile(path, content string) *Action {
	return &Action{Kind: KindFileWrite, Path: path, Content: &content}
}

// View returns a file.edit view action.
func View(path string) *Action { return &Action{Kind: KindFileEdit, Command: "view", Path: path} }

// Create returns a file.edit create action.
func Create(path, text string) *Action {
	return &Action{Kind: KindFileEdit, Command: "create", Path: path, FileText: &text}
}

// StrReplace returns a file.edit str_replace action.
func StrReplace(path, oldStr, newStr string) *Action {
	return &Action{Kind: KindFileEdit, Command: "str_replace", Path: path, OldStr: &oldStr, NewStr: &newStr}
}

// Insert returns a file.edit insert action: text after line (0 = top).
func Insert(path string, line int, text string) *Action {
	return &Action{Kind: KindFileEdit, Command: "insert", Path: path, InsertLine: &line, NewStr: &text}
}

// UndoEdit returns a file.edit undo_edit action.
func UndoEdit(path string) *Action {
	return &Action{Kind: KindFileEdit, Command: "undo_edit", Path: path}
}
