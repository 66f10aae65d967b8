package api

import (
	"bytes"
	"encoding/json"
)

// Observation is the answer to an action. Like Action it is flat; its JSON
// form carries exactly the fields the API names for its kind (always, even
// when zero, so "exit_code": null and "running": false are explicit), plus
// the optional extras Note, Lost and SessionEnded when they are set.
type Observation struct {
	Kind  string `json:"kind"`
	Cause int64  `json:"cause"`

	// run, interrupt (and Output for ipython and file.edit)
	Output       string
	ExitCode     *int // nil while a command runs, or when its status is unknown
	Running      bool
	TimedOut     bool
	Cwd          string
	Session      string
	SessionEnded bool

	// exec
	Signal     string
	Stdout     string
	Stderr     string
	OOMKilled  bool
	DurationMS int64

	// ipython
	Images         []Image
	IPythonError   *IPythonError
	ExecutionCount int

	// file.*
	Path    string
	Content string
	Bytes   int64

	// browser
	URL          string
	Title        string
	Text         string
	AXTree       string
	Screenshot   string
	BrowserError string
	// Result is an evaluate op's value as JSON ("undefined" for none).
	Result string

	Truncated bool
	// Note tells the caller something it did not ask about but must know:
	// the session was restarted, the kernel's state was lost, the command
	// is still running in the background, ...
	Note string
	// Lost is set when the daemon restarted while the action ran, so its
	// outcome is unknown; the action will not run again.
	Lost bool
}

// Image is one image produced by an ipython cell.
type Image struct {
	MIME string `json:"mime"`
	Data string `json:"data"`
}

// IPythonError is the exception a cell raised.
type IPythonError struct {
	EName     string `json:"ename"`
	EValue    string `json:"evalue"`
	Traceback string `json:"traceback"`
}

// ExitCode returns a pointer to c, for Observation.ExitCode.
func ExitCode(c int) *int { return &c }

// obsWriter appends "key":value pairs of one JSON object.
type obsWriter struct {
	buf   bytes.Buffer
	enc   *json.Encoder
	first bool
	err   error
}

func (w *obsWriter) field(key string, v any) {
	if w.err != nil {
		return
	}
	if !w.first {
		w.buf.WriteByte(',')
	}
	w.first = false
	w.buf.WriteByte('"')
	w.buf.WriteString(key)
	w.buf.WriteString(`":`)
	// Encoder appends a newline after each value; it is whitespace between
	// a value and the next comma, which JSON allows, but trim it anyway so
	// the stored and sent bytes are compact.
	w.err = w.enc.Encode(v)
	if n := w.buf.Len(); n > 0 && w.buf.Bytes()[n-1] == '\n' {
		w.buf.Truncate(n - 1)
	}
}

// MarshalJSON writes the fields of the observation's kind.
func (o Observation) MarshalJSON() ([]byte, error) {
	w := &obsWriter{first: true}
	w.enc = json.NewEncoder(&w.buf)
	// Terminal text is full of < > &; escaping them helps no JSON reader.
	w.enc.SetEscapeHTML(false)
	w.buf.WriteByte('{')
	w.field("kind", o.Kind)
	w.field("cause", o.Cause)
	switch o.Kind {
	case KindRun, KindInterrupt:
		w.field("output", o.Output)
		w.field("exit_code", o.ExitCode)
		w.field("running", o.Running)
		w.field("timed_out", o.TimedOut)
		w.field("cwd", o.Cwd)
		w.field("session", o.Session)
		w.field("truncated", o.Truncated)
		if o.SessionEnded {
			w.field("session_ended", true)
		}
	case KindExec:
		w.field("exit_code", o.ExitCode)
		w.field("signal", o.Signal)
		w.field("stdout", o.Stdout)
		w.field("stderr", o.Stderr)
		w.field("timed_out", o.TimedOut)
		w.field("oom_killed", o.OOMKilled)
		w.field("duration_ms", o.DurationMS)
		w.field("truncated", o.Truncated)
	case KindIPython:
		w.field("output", o.Output)
		images := o.Images
		if images == nil {
			images = []Image{}
		}
		w.field("images", images)
		w.field("error", o.IPythonError)
		w.field("execution_count", o.ExecutionCount)
		w.field("timed_out", o.TimedOut)
		w.field("truncated", o.Truncated)
	case KindFileRead:
		w.field("path", o.Path)
		w.field("content", o.Content)
		w.field("truncated", o.Truncated)
	case KindFileWrite:
		w.field("path", o.Path)
		w.field("bytes", o.Bytes)
	case KindFileEdit:
		w.field("output", o.Output)
		w.field("path", o.Path)
	case KindBrowser:
		w.field("url", o.URL)
		w.field("title", o.Title)
		w.field("text", o.Text)
		w.field("axtree", o.AXTree)
		w.field("screenshot", o.Screenshot)
		w.field("error", o.BrowserError)
		w.field("truncated", o.Truncated)
		if o.Result != "" {
			w.field("result", o.Result)
		}
	}
	if o.Note != "" {
		w.field("note", o.Note)
	}
	if o.Lost {
		w.field("lost", true)
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), w.err
}

// observationJSON is the union of all kinds' fields; "error" differs in type
// between kinds and is resolved after decoding.
type observationJSON struct {
	Kind           string          `json:"kind"`
	Cause          int64           `json:"cause"`
	Output         string          `json:"output"`
	ExitCode       *int            `json:"exit_code"`
	Running        bool            `json:"running"`
	TimedOut       bool            `json:"timed_out"`
	Cwd            string          `json:"cwd"`
	Session        string          `json:"session"`
	SessionEnded   bool            `json:"session_ended"`
	Signal         string          `json:"signal"`
	Stdout         string          `json:"stdout"`
	Stderr         string          `json:"stderr"`
	OOMKilled      bool            `json:"oom_killed"`
	DurationMS     int64           `json:"duration_ms"`
	Images         []Image         `json:"images"`
	Error          json.RawMessage `json:"error"`
	ExecutionCount int             `json:"execution_count"`
	Path           string          `json:"path"`
	Content        string          `json:"content"`
	Bytes          int64           `json:"bytes"`
	URL            string          `json:"url"`
	Title          string          `json:"title"`
	Text           string          `json:"text"`
	AXTree         string          `json:"axtree"`
	Screenshot     string          `json:"screenshot"`
	Result         string          `json:"result"`
	Truncated      bool            `json:"truncated"`
	Note           string          `json:"note"`
	Lost           bool            `json:"lost"`
}

// UnmarshalJSON reads any kind's observation; unknown fields are ignored so
// older clients keep working against newer daemons.
func (o *Observation) UnmarshalJSON(data []byte) error {
	var j observationJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*o = Observation{
		Kind: j.Kind, Cause: j.Cause, Output: j.Output, ExitCode: j.ExitCode,
		Running: j.Running, TimedOut: j.TimedOut, Cwd: j.Cwd, Session: j.Session,
		SessionEnded: j.SessionEnded, Signal: j.Signal, Stdout: j.Stdout,
		Stderr: j.Stderr, OOMKilled: j.OOMKilled, DurationMS: j.DurationMS,
		Images: j.Images, ExecutionCount: j.ExecutionCount, Path: j.Path,
		Content: j.Content, Bytes: j.Bytes, URL: j.URL, Title: j.Title,
		Text: j.Text, AXTree: j.AXTree, Screenshot: j.Screenshot, Result: j.Result,
		Truncated: j.Truncated, Note: j.Note, Lost: j.Lost,
	}
	if len(j.Error) == 0 || string(j.Error) == "null" {
		return nil
	}
	if j.Kind == KindBrowser {
		return json.Unmarshal(j.Error, &o.BrowserError)
	}
	o.IPythonError = new(IPythonError)
	return json.Unmarshal(j.Error, o.IPythonError)
}
