package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

func strp(s string) *string { return &s }
func intp(i int) *int       { return &i }

// ---------------------------------------------------------------------------
// DecodeAction: valid actions

func TestDecodeActionValid(t *testing.T) {
	long64 := strings.Repeat("s", api.MaxSessionLen)
	tests := []struct {
		name string
		body string
		want api.Action
	}{
		{"run minimal", `{"kind":"run","command":"ls -la"}`,
			api.Action{Kind: api.KindRun, Command: "ls -la"}},
		{"run every field", `{"id":"a1","kind":"run","command":"echo hi","session":"s-1.x_Y","timeout_s":2.5,"hard_timeout_s":10,"input":true}`,
			api.Action{ID: "a1", Kind: api.KindRun, Command: "echo hi", Session: "s-1.x_Y", TimeoutS: api.Seconds(2.5), HardTimeoutS: 10, Input: true}},
		{"run zero timeout", `{"kind":"run","command":"x","timeout_s":0,"hard_timeout_s":0}`,
			api.Action{Kind: api.KindRun, Command: "x", TimeoutS: api.Seconds(0)}},
		{"run empty command (wait)", `{"kind":"run"}`,
			api.Action{Kind: api.KindRun}},
		{"run session at max length", `{"kind":"run","command":"x","session":"` + long64 + `"}`,
			api.Action{Kind: api.KindRun, Command: "x", Session: long64}},
		{"run id at max length", `{"kind":"run","id":"` + strings.Repeat("i", api.MaxIDLen) + `"}`,
			api.Action{Kind: api.KindRun, ID: strings.Repeat("i", api.MaxIDLen)}},
		{"run command with html and utf-8", `{"kind":"run","command":"echo '<a>&b' é 日本 🎉"}`,
			api.Action{Kind: api.KindRun, Command: "echo '<a>&b' é 日本 🎉"}},
		{"run escaped backslash then u0000 is not NUL", `{"kind":"run","command":"printf '\\u0000'"}`,
			api.Action{Kind: api.KindRun, Command: `printf '\u0000'`}},
		{"run escaped control characters", `{"kind":"run","command":"a\tb\nc\u0003\u001b"}`,
			api.Action{Kind: api.KindRun, Command: "a\tb\nc\x03\x1b"}},
		{"run with surrounding whitespace", " \n\t{\"kind\":\"run\",\"command\":\"x\"}\r\n ",
			api.Action{Kind: api.KindRun, Command: "x"}},
		{"interrupt", `{"kind":"interrupt","session":"build","timeout_s":1}`,
			api.Action{Kind: api.KindInterrupt, Session: "build", TimeoutS: api.Seconds(1)}},
		{"interrupt default session", `{"kind":"interrupt"}`,
			api.Action{Kind: api.KindInterrupt}},
		{"exec every field", `{"kind":"exec","argv":["ls","-l","/"],"cwd":"/tmp","env":{"A":"1","B_2":""},"stdin":"in\u0000put","timeout_s":3}`,
			api.Action{Kind: api.KindExec, Argv: []string{"ls", "-l", "/"}, Cwd: "/tmp", Env: map[string]string{"A": "1", "B_2": ""}, Stdin: "in\x00put", TimeoutS: api.Seconds(3)}},
		{"exec escaped backslash u0000 in argv, env and cwd", `{"kind":"exec","argv":["echo","\\u0000"],"cwd":"/x\\u0000","env":{"K\\u0000":"v\\u0000"}}`,
			api.Action{Kind: api.KindExec, Argv: []string{"echo", `\u0000`}, Cwd: `/x\u0000`, Env: map[string]string{`K\u0000`: `v\u0000`}}},
		{"exec empty later argument", `{"kind":"exec","argv":["true",""]}`,
			api.Action{Kind: api.KindExec, Argv: []string{"true", ""}}},
		{"ipython", `{"kind":"ipython","code":"print(1)\u0000","timeout_s":5}`,
			api.Action{Kind: api.KindIPython, Code: "print(1)\x00", TimeoutS: api.Seconds(5)}},
		{"file.read", `{"kind":"file.read","path":"/etc/hosts","start_line":2,"end_line":9}`,
			api.Action{Kind: api.KindFileRead, Path: "/etc/hosts", StartLine: 2, EndLine: 9}},
		{"file.read escaped backslash u0000 in path", `{"kind":"file.read","path":"/a\\u0000b"}`,
			api.Action{Kind: api.KindFileRead, Path: `/a\u0000b`}},
		{"file.write with NUL in content", `{"kind":"file.write","path":"/tmp/f","content":"a\u0000b","mode":"0644"}`,
			api.Action{Kind: api.KindFileWrite, Path: "/tmp/f", Content: strp("a\x00b"), Mode: "0644"}},
		{"file.write empty content", `{"kind":"file.write","path":"/tmp/f","content":""}`,
			api.Action{Kind: api.KindFileWrite, Path: "/tmp/f", Content: strp("")}},
		{"file.edit str_replace", `{"kind":"file.edit","command":"str_replace","path":"/a","old_str":"x\u0000","new_str":""}`,
			api.Action{Kind: api.KindFileEdit, Command: "str_replace", Path: "/a", OldStr: strp("x\x00"), NewStr: strp("")}},
		{"file.edit create", `{"kind":"file.edit","command":"create","path":"/a","file_text":"hello\n"}`,
			api.Action{Kind: api.KindFileEdit, Command: "create", Path: "/a", FileText: strp("hello\n")}},
		{"file.edit insert", `{"kind":"file.edit","command":"insert","path":"/a","insert_line":0,"new_str":"x"}`,
			api.Action{Kind: api.KindFileEdit, Command: "insert", Path: "/a", InsertLine: intp(0), NewStr: strp("x")}},
		{"file.edit view", `{"kind":"file.edit","command":"view","path":"/a","view_range":[1,-1]}`,
			api.Action{Kind: api.KindFileEdit, Command: "view", Path: "/a", ViewRange: []int{1, -1}}},
		{"browser", `{"kind":"browser","op":"click","url":"https://x.test/?a=1&b=<2>","target":"#id","text":"t\u0000","key":"Enter","script":"s\u0000","screenshot":true,"timeout_s":30}`,
			api.Action{Kind: api.KindBrowser, Op: "click", URL: "https://x.test/?a=1&b=<2>", Target: "#id", Text: "t\x00", Key: "Enter", Script: "s\x00", Screenshot: true, TimeoutS: api.Seconds(30)}},
		{"null optional fields", `{"kind":"file.write","path":"/p","content":null,"id":null}`,
			api.Action{Kind: api.KindFileWrite, Path: "/p"}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := api.DecodeAction([]byte(tt.body))
			if err != nil {
				t.Fatalf("DecodeAction(%q): %v", tt.body, err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("DecodeAction(%q)\n got %#v\nwant %#v", tt.body, *got, tt.want)
			}
		})
		seen[tt.want.Kind] = true
	}
	for _, k := range api.Kinds() {
		if !seen[k] {
			t.Errorf("kind %q has no valid-decoding case", k)
		}
	}
}

func TestKindsListsEveryKind(t *testing.T) {
	want := []string{api.KindBrowser, api.KindExec, api.KindFileEdit, api.KindFileRead, api.KindFileWrite, api.KindInterrupt, api.KindIPython, api.KindRun}
	slices.Sort(want)
	if got := api.Kinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, want %v", got, want)
	}
	if !slices.IsSorted(api.Kinds()) {
		t.Errorf("Kinds() is not sorted")
	}
}

// ---------------------------------------------------------------------------
// DecodeAction: errors

func TestDecodeActionErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		// want are substrings the message must contain (usually the field).
		want []string
	}{
		// Structure.
		{"empty body", ``, []string{"JSON"}},
		{"whitespace body", " \n ", []string{"JSON"}},
		{"array", `[{"kind":"run"}]`, []string{"object"}},
		{"string", `"run"`, []string{"object"}},
		{"number", `42`, []string{"object"}},
		{"bool", `true`, []string{"object"}},
		{"null", `null`, []string{"object"}},
		{"trailing garbage", `{"kind":"run","command":"x"} x`, []string{"JSON"}},
		{"second object", `{"kind":"run","command":"x"}{"kind":"run"}`, []string{"JSON"}},
		{"trailing brace", `{"kind":"run","command":"x"}}`, []string{"JSON"}},
		{"trailing bracket", `{"kind":"run","command":"x"}]`, []string{"JSON"}},
		{"truncated object", `{"kind":"run","command":"x"`, []string{"JSON"}},
		{"single quotes", `{'kind':'run'}`, []string{"JSON"}},

		// kind.
		{"missing kind", `{"command":"ls"}`, []string{`"kind"`}},
		{"unknown kind", `{"kind":"shell","command":"ls"}`, []string{"kind", `"shell"`}},
		{"empty kind", `{"kind":""}`, []string{"kind"}},
		{"null kind", `{"kind":null}`, []string{"kind"}},
		{"kind not a string", `{"kind":5}`, []string{`"kind"`}},
		{"kind wrong case", `{"kind":"RUN"}`, []string{"kind", "RUN"}},
		{"Kind key wrong case", `{"Kind":"run","kind":"run"}`, []string{"Kind"}},

		// Unknown fields and fields of another kind.
		{"unknown field", `{"kind":"run","command":"ls","bogus":1}`, []string{`"bogus"`}},
		{"unknown field null", `{"kind":"run","bogus":null}`, []string{`"bogus"`}},
		{"field name wrong case", `{"kind":"run","Command":"ls"}`, []string{`"Command"`}},
		{"argv on run", `{"kind":"run","argv":["ls"]}`, []string{`"argv"`}},
		{"command on exec", `{"kind":"exec","argv":["ls"],"command":"ls"}`, []string{`"command"`}},
		{"input on interrupt", `{"kind":"interrupt","input":true}`, []string{`"input"`}},
		{"command on interrupt", `{"kind":"interrupt","command":"x"}`, []string{`"command"`}},
		{"session on exec", `{"kind":"exec","argv":["ls"],"session":"s"}`, []string{`"session"`}},
		{"hard_timeout_s on exec", `{"kind":"exec","argv":["ls"],"hard_timeout_s":1}`, []string{`"hard_timeout_s"`}},
		{"content on file.read", `{"kind":"file.read","path":"/x","content":"y"}`, []string{`"content"`}},
		{"timeout_s on file.read", `{"kind":"file.read","path":"/x","timeout_s":1}`, []string{`"timeout_s"`}},
		{"path on ipython", `{"kind":"ipython","code":"1","path":"/x"}`, []string{`"path"`}},
		{"url on file.write", `{"kind":"file.write","path":"/x","url":"http://x"}`, []string{`"url"`}},
		{"old_str on file.write", `{"kind":"file.write","path":"/x","old_str":"a"}`, []string{`"old_str"`}},
		{"command on browser", `{"kind":"browser","op":"goto","command":"x"}`, []string{`"command"`}},
		{"stdin on file.edit", `{"kind":"file.edit","command":"view","path":"/x","stdin":"a"}`, []string{`"stdin"`}},

		// Wrong JSON types.
		{"timeout_s string", `{"kind":"run","command":"x","timeout_s":"x"}`, []string{`"timeout_s"`}},
		{"timeout_s bool", `{"kind":"run","timeout_s":true}`, []string{`"timeout_s"`}},
		{"timeout_s out of range", `{"kind":"run","timeout_s":1e999}`, []string{`timeout_s`}},
		{"hard_timeout_s string", `{"kind":"run","hard_timeout_s":"1"}`, []string{`"hard_timeout_s"`}},
		{"command number", `{"kind":"run","command":5}`, []string{`"command"`}},
		{"command object", `{"kind":"run","command":{}}`, []string{`"command"`}},
		{"input string", `{"kind":"run","command":"x","input":"yes"}`, []string{`"input"`}},
		{"id number", `{"kind":"run","id":7}`, []string{`"id"`}},
		{"argv string", `{"kind":"exec","argv":"ls -l"}`, []string{`argv`}},
		{"argv of numbers", `{"kind":"exec","argv":[1,2]}`, []string{`argv`}},
		{"env array", `{"kind":"exec","argv":["ls"],"env":["A=1"]}`, []string{`env`}},
		{"env number value", `{"kind":"exec","argv":["ls"],"env":{"A":1}}`, []string{`env`}},
		{"start_line fraction", `{"kind":"file.read","path":"/x","start_line":1.5}`, []string{`start_line`}},
		{"end_line string", `{"kind":"file.read","path":"/x","end_line":"9"}`, []string{`end_line`}},
		{"content number", `{"kind":"file.write","path":"/x","content":1}`, []string{`content`}},
		{"insert_line string", `{"kind":"file.edit","command":"insert","path":"/x","insert_line":"3"}`, []string{`insert_line`}},
		{"view_range strings", `{"kind":"file.edit","command":"view","path":"/x","view_range":["1","2"]}`, []string{`view_range`}},
		{"screenshot number", `{"kind":"browser","op":"goto","screenshot":1}`, []string{`screenshot`}},

		// Bad values.
		{"negative timeout_s", `{"kind":"run","command":"x","timeout_s":-1}`, []string{`"timeout_s"`}},
		{"negative tiny timeout_s", `{"kind":"exec","argv":["x"],"timeout_s":-0.001}`, []string{`"timeout_s"`}},
		{"negative hard_timeout_s", `{"kind":"run","command":"x","hard_timeout_s":-0.5}`, []string{`"hard_timeout_s"`}},
		{"negative interrupt timeout_s", `{"kind":"interrupt","timeout_s":-3}`, []string{`"timeout_s"`}},
		{"id too long", `{"kind":"run","id":"` + strings.Repeat("i", api.MaxIDLen+1) + `"}`, []string{`"id"`}},

		// Invalid UTF-8.
		{"invalid utf-8 in command", "{\"kind\":\"run\",\"command\":\"a\xffb\"}", []string{`"command"`}},
		{"truncated utf-8 in command", "{\"kind\":\"run\",\"command\":\"\xe6\x97\"}", []string{`"command"`}},
		{"overlong utf-8 in command", "{\"kind\":\"run\",\"command\":\"\xc0\xaf\"}", []string{`"command"`}},
		{"surrogate utf-8 in command", "{\"kind\":\"run\",\"command\":\"\xed\xa0\x80\"}", []string{`"command"`}},
		{"invalid utf-8 in argv", "{\"kind\":\"exec\",\"argv\":[\"ls\",\"\xfe\"]}", []string{`"argv"`}},
		{"invalid utf-8 in env value", "{\"kind\":\"exec\",\"argv\":[\"ls\"],\"env\":{\"A\":\"\x80\"}}", []string{`"env"`}},
		{"invalid utf-8 in path", "{\"kind\":\"file.read\",\"path\":\"/tmp/\xff\"}", []string{`"path"`}},
		{"invalid utf-8 in content", "{\"kind\":\"file.write\",\"path\":\"/p\",\"content\":\"\xff\"}", []string{`"content"`}},
		{"invalid utf-8 in stdin", "{\"kind\":\"exec\",\"argv\":[\"cat\"],\"stdin\":\"\xff\"}", []string{`"stdin"`}},
		{"invalid utf-8 in id", "{\"kind\":\"run\",\"id\":\"\xff\"}", []string{`"id"`}},

		// NUL where it would be cut off.
		{"NUL in command", `{"kind":"run","command":"ls\u0000 -l"}`, []string{`"command"`}},
		{"NUL in session", `{"kind":"run","session":"a\u0000"}`, []string{`"session"`}},
		{"NUL in id", `{"kind":"run","id":"a\u0000"}`, []string{`"id"`}},
		{"NUL in argv[0]", `{"kind":"exec","argv":["l\u0000s"]}`, []string{`"argv"`}},
		{"NUL in later argv", `{"kind":"exec","argv":["ls","\u0000"]}`, []string{`"argv"`}},
		{"NUL in cwd", `{"kind":"exec","argv":["ls"],"cwd":"/\u0000"}`, []string{`"cwd"`}},
		{"NUL in env value", `{"kind":"exec","argv":["ls"],"env":{"A":"1\u0000"}}`, []string{`"env"`}},
		{"NUL in env name", `{"kind":"exec","argv":["ls"],"env":{"A\u0000":"1"}}`, []string{`"env"`}},
		{"NUL in file.read path", `{"kind":"file.read","path":"/etc/passwd\u0000.txt"}`, []string{`"path"`}},
		{"NUL in file.write path", `{"kind":"file.write","path":"/x\u0000","content":"a"}`, []string{`"path"`}},
		{"NUL in file.write mode", `{"kind":"file.write","path":"/x","mode":"06\u000044"}`, []string{`"mode"`}},
		{"NUL in file.edit path", `{"kind":"file.edit","command":"view","path":"/x\u0000"}`, []string{`"path"`}},
		{"NUL in file.edit command", `{"kind":"file.edit","command":"view\u0000","path":"/x"}`, []string{`"command"`}},
		{"NUL in url", `{"kind":"browser","op":"goto","url":"http://x\u0000"}`, []string{`"url"`}},
		{"NUL in op", `{"kind":"browser","op":"go\u0000to"}`, []string{`"op"`}},
		{"NUL in target", `{"kind":"browser","op":"click","target":"#\u0000"}`, []string{`"target"`}},
		{"NUL in key", `{"kind":"browser","op":"press","key":"\u0000"}`, []string{`"key"`}},

		// Sessions.
		{"session too long", `{"kind":"run","command":"x","session":"` + strings.Repeat("s", api.MaxSessionLen+1) + `"}`, []string{`"session"`}},
		{"session with space", `{"kind":"run","command":"x","session":"a b"}`, []string{`"session"`}},
		{"session with slash", `{"kind":"run","command":"x","session":"a/b"}`, []string{`"session"`}},
		{"session with semicolon", `{"kind":"run","command":"x","session":"a;b"}`, []string{`"session"`}},
		{"session with newline", `{"kind":"run","command":"x","session":"a\nb"}`, []string{`"session"`}},
		{"session non-ascii", `{"kind":"run","command":"x","session":"é"}`, []string{`"session"`}},
		{"interrupt session bad", `{"kind":"interrupt","session":"a$b"}`, []string{`"session"`}},

		// exec.
		{"exec without argv", `{"kind":"exec"}`, []string{`"argv"`}},
		{"exec empty argv", `{"kind":"exec","argv":[]}`, []string{`"argv"`}},
		{"exec null argv", `{"kind":"exec","argv":null}`, []string{`"argv"`}},
		{"exec empty program", `{"kind":"exec","argv":[""]}`, []string{`"argv"`}},
		{"exec env name with =", `{"kind":"exec","argv":["ls"],"env":{"A=B":"x"}}`, []string{`"env"`, "A=B"}},
		{"exec env name =", `{"kind":"exec","argv":["ls"],"env":{"=":"x"}}`, []string{`"env"`}},
		{"exec env empty name", `{"kind":"exec","argv":["ls"],"env":{"":"x"}}`, []string{`"env"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := api.DecodeAction([]byte(tt.body))
			if err == nil {
				t.Fatalf("DecodeAction(%q) = %#v, want an error", tt.body, a)
			}
			if a != nil {
				t.Errorf("DecodeAction(%q) returned an action with its error", tt.body)
			}
			if !errors.Is(err, api.ErrInvalidArgument) {
				t.Errorf("DecodeAction(%q) error %v (%T) is not ErrInvalidArgument", tt.body, err, err)
			}
			if c := api.CodeOf(err); c != api.CodeInvalidArgument {
				t.Errorf("CodeOf = %q, want invalid_argument", c)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("DecodeAction(%q) error %q does not mention %q", tt.body, err, w)
				}
			}
		})
	}
}

// Decoding the same bytes must give the same answer every time (the checks
// iterate a map; a body with one fault must always name that fault).
func TestDecodeActionDeterministic(t *testing.T) {
	body := []byte(`{"kind":"exec","argv":["ls"],"cwd":"/","env":{"A":"1","B":"2","C":"3"},"stdin":"x","timeout_s":1,"bogus":1}`)
	var first string
	for i := 0; i < 50; i++ {
		_, err := api.DecodeAction(body)
		if err == nil {
			t.Fatal("want an error")
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("message changed between runs: %q vs %q", first, err.Error())
		}
	}
}

// Every field an action of a kind may carry must decode for that kind and be
// refused for every other kind.
func TestDecodeActionFieldMatrix(t *testing.T) {
	// A valid value for each field, and a base body that makes each kind
	// valid.
	values := map[string]string{
		"command": `"x"`, "session": `"s"`, "timeout_s": `1`, "hard_timeout_s": `1`, "input": `true`,
		"argv": `["ls"]`, "cwd": `"/"`, "env": `{"A":"1"}`, "stdin": `"x"`,
		"code": `"1"`, "path": `"/p"`, "start_line": `1`, "end_line": `2`, "content": `"c"`, "mode": `"0644"`,
		"file_text": `"t"`, "old_str": `"o"`, "new_str": `"n"`, "insert_line": `1`, "view_range": `[1,2]`,
		"op": `"goto"`, "url": `"http://x"`, "target": `"#a"`, "text": `"t"`, "key": `"k"`, "script": `"s"`, "screenshot": `true`,
	}
	allowed := map[string][]string{
		api.KindRun:       {"command", "session", "timeout_s", "hard_timeout_s", "input"},
		api.KindInterrupt: {"session", "timeout_s"},
		api.KindExec:      {"argv", "cwd", "env", "stdin", "timeout_s"},
		api.KindIPython:   {"code", "timeout_s"},
		api.KindFileRead:  {"path", "start_line", "end_line"},
		api.KindFileWrite: {"path", "content", "mode"},
		api.KindFileEdit:  {"command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range"},
		api.KindBrowser:   {"op", "url", "target", "text", "key", "script", "screenshot", "timeout_s"},
	}
	base := map[string]string{api.KindExec: `"argv":["ls"],`}
	for _, kind := range api.Kinds() {
		for _, field := range slices.Sorted(maps.Keys(values)) {
			body := `{` + base[kind] + `"kind":"` + kind + `"`
			if !(kind == api.KindExec && field == "argv") {
				body += `,"` + field + `":` + values[field]
			}
			body += `}`
			_, err := api.DecodeAction([]byte(body))
			ok := slices.Contains(allowed[kind], field)
			switch {
			case ok && err != nil:
				t.Errorf("%s: field %q should be accepted: %v", kind, field, err)
			case !ok && err == nil:
				t.Errorf("%s: field %q should be refused", kind, field)
			case !ok && !strings.Contains(err.Error(), `"`+field+`"`):
				t.Errorf("%s: error for field %q does not name it: %v", kind, field, err)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Action helpers

func TestActionEquivalent(t *testing.T) {
	base := func() *api.Action {
		return &api.Action{
			ID: "a", Kind: api.KindExec, Argv: []string{"ls", "-l"}, Cwd: "/", Env: map[string]string{"A": "1", "B": "2"},
			Stdin: "in", TimeoutS: api.Seconds(3),
		}
	}
	tests := []struct {
		name   string
		modify func(*api.Action)
		equiv  bool
	}{
		{"identical", func(*api.Action) {}, true},
		{"different ID", func(a *api.Action) { a.ID = "b" }, true},
		{"no ID", func(a *api.Action) { a.ID = "" }, true},
		{"env rebuilt in other order", func(a *api.Action) { a.Env = map[string]string{"B": "2", "A": "1"} }, true},
		{"kind", func(a *api.Action) { a.Kind = api.KindRun }, false},
		{"argv", func(a *api.Action) { a.Argv = []string{"ls", "-la"} }, false},
		{"argv longer", func(a *api.Action) { a.Argv = append(a.Argv, "") }, false},
		{"cwd", func(a *api.Action) { a.Cwd = "/tmp" }, false},
		{"env value", func(a *api.Action) { a.Env["A"] = "2" }, false},
		{"env extra", func(a *api.Action) { a.Env["C"] = "" }, false},
		{"stdin", func(a *api.Action) { a.Stdin = "in2" }, false},
		{"timeout", func(a *api.Action) { a.TimeoutS = api.Seconds(4) }, false},
		{"timeout nil", func(a *api.Action) { a.TimeoutS = nil }, false},
		{"command", func(a *api.Action) { a.Command = "x" }, false},
		{"session", func(a *api.Action) { a.Session = "s" }, false},
		{"hard timeout", func(a *api.Action) { a.HardTimeoutS = 1 }, false},
		{"input", func(a *api.Action) { a.Input = true }, false},
		{"code", func(a *api.Action) { a.Code = "c" }, false},
		{"path", func(a *api.Action) { a.Path = "/p" }, false},
		{"content", func(a *api.Action) { a.Content = strp("") }, false},
		{"insert line", func(a *api.Action) { a.InsertLine = intp(0) }, false},
		{"view range", func(a *api.Action) { a.ViewRange = []int{1} }, false},
		{"screenshot", func(a *api.Action) { a.Screenshot = true }, false},
		{"url", func(a *api.Action) { a.URL = "u" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := base(), base()
			tt.modify(b)
			if got := a.Equivalent(b); got != tt.equiv {
				t.Errorf("a.Equivalent(b) = %v, want %v", got, tt.equiv)
			}
			if got := b.Equivalent(a); got != tt.equiv {
				t.Errorf("b.Equivalent(a) = %v, want %v", got, tt.equiv)
			}
			if a.ID != "a" {
				t.Errorf("Equivalent modified its receiver's ID: %q", a.ID)
			}
		})
	}
}

// An action stored in the event log (encoded, decoded) must stay equivalent
// to the one the client retries.
func TestActionEquivalentAfterRoundTrip(t *testing.T) {
	bodies := []string{
		`{"id":"x","kind":"run","command":"ls","timeout_s":0}`,
		`{"id":"x","kind":"file.write","path":"/p","content":""}`,
		`{"id":"x","kind":"file.edit","command":"insert","path":"/p","insert_line":0,"new_str":""}`,
		`{"id":"x","kind":"exec","argv":["a"],"env":{"Z":"1","A":"2"}}`,
	}
	for _, body := range bodies {
		a, err := api.DecodeAction([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		enc, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := api.DecodeAction(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		b.ID = "y"
		if !a.Equivalent(b) {
			t.Errorf("%s is not equivalent to its round trip %s", body, enc)
		}
	}
}

func TestActionSessionNameAndTimeout(t *testing.T) {
	if got := (&api.Action{Kind: api.KindRun}).SessionName(); got != api.DefaultSession {
		t.Errorf("SessionName() = %q, want %q", got, api.DefaultSession)
	}
	if got := (&api.Action{Kind: api.KindRun, Session: "x"}).SessionName(); got != "x" {
		t.Errorf("SessionName() = %q, want x", got)
	}
	tests := []struct {
		timeout       *float64
		def, max, out float64
	}{
		{nil, 30, 100, 30},
		{nil, 300, 100, 100},
		{api.Seconds(5), 30, 100, 5},
		{api.Seconds(0), 30, 100, 0},
		{api.Seconds(500), 30, 100, 100},
	}
	for _, tt := range tests {
		a := &api.Action{Kind: api.KindRun, TimeoutS: tt.timeout}
		if got := a.Timeout(tt.def, tt.max); got != tt.out {
			t.Errorf("Timeout(%v, %v) with timeout_s %v = %v, want %v", tt.def, tt.max, tt.timeout, got, tt.out)
		}
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    *api.Action
		want string
	}{
		{api.Run("secret command"), "run[default]"},
		{&api.Action{Kind: api.KindInterrupt, Session: "s"}, "interrupt[s]"},
		{api.Exec("ls", "secret"), "exec[ls]"},
		{&api.Action{Kind: api.KindFileWrite, Path: "/p", Content: strp("secret")}, "file.write"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if strings.Contains(tt.a.String(), "secret") {
			t.Errorf("String() %q leaks the payload", tt.a.String())
		}
	}
}

func TestActionStringEmptyArgv(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("String() of an exec action without argv panicked: %v", r)
		}
	}()
	_ = api.Exec().String()
}

// ---------------------------------------------------------------------------
// Observation JSON

func keySet(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return m
}

var contractKeys = map[string][]string{
	api.KindRun:       {"kind", "cause", "output", "exit_code", "running", "timed_out", "cwd", "session", "truncated"},
	api.KindInterrupt: {"kind", "cause", "output", "exit_code", "running", "timed_out", "cwd", "session", "truncated"},
	api.KindExec:      {"kind", "cause", "exit_code", "signal", "stdout", "stderr", "timed_out", "oom_killed", "duration_ms", "truncated"},
	api.KindIPython:   {"kind", "cause", "output", "images", "error", "execution_count", "timed_out", "truncated"},
	api.KindFileRead:  {"kind", "cause", "path", "content", "truncated"},
	api.KindFileWrite: {"kind", "cause", "path", "bytes"},
	api.KindFileEdit:  {"kind", "cause", "output", "path"},
	api.KindBrowser:   {"kind", "cause", "url", "title", "text", "axtree", "screenshot", "error", "truncated"},
}

// everything is an observation with every field set, whatever its kind.
func everything(kind string) api.Observation {
	return api.Observation{
		Kind: kind, Cause: 7, Output: "out", ExitCode: api.ExitCode(3), Running: true, TimedOut: true,
		Cwd: "/w", Session: "s", SessionEnded: true, Signal: "SIGKILL", Stdout: "so", Stderr: "se",
		OOMKilled: true, DurationMS: 12, Images: []api.Image{{MIME: "image/png", Data: "AAAA"}},
		IPythonError:   &api.IPythonError{EName: "E", EValue: "v", Traceback: "tb"},
		ExecutionCount: 4, Path: "/p", Content: "c", Bytes: 9, URL: "u", Title: "ti", Text: "te",
		AXTree: "ax", Screenshot: "png", BrowserError: "be", Truncated: true, Note: "n", Lost: true,
	}
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

func TestObservationKeySets(t *testing.T) {
	for _, kind := range api.Kinds() {
		want := contractKeys[kind]
		if want == nil {
			t.Errorf("no contract key set for kind %q", kind)
			continue
		}
		t.Run(kind, func(t *testing.T) {
			// Zero values: every contract field is present, no extra.
			b, err := json.Marshal(api.Observation{Kind: kind})
			if err != nil {
				t.Fatal(err)
			}
			m := keySet(t, b)
			if got, w := sortedKeys(m), slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
				t.Errorf("zero %s observation keys\n got %v\nwant %v\njson %s", kind, got, w, b)
			}
			// Every field set: only the kind's fields plus the optional
			// extras (note, lost; session_ended only for sessions).
			b, err = json.Marshal(everything(kind))
			if err != nil {
				t.Fatal(err)
			}
			m = keySet(t, b)
			extra := []string{"note", "lost"}
			if kind == api.KindRun || kind == api.KindInterrupt {
				extra = append(extra, "session_ended")
			}
			w := slices.Sorted(slices.Values(append(slices.Clone(want), extra...)))
			if got := sortedKeys(m); !slices.Equal(got, w) {
				t.Errorf("full %s observation keys\n got %v\nwant %v\njson %s", kind, got, w, b)
			}
			if m["kind"] != kind {
				t.Errorf("kind = %v", m["kind"])
			}
			if m["cause"] != float64(7) {
				t.Errorf("cause = %v", m["cause"])
			}
			if m["note"] != "n" || m["lost"] != true {
				t.Errorf("note/lost = %v/%v", m["note"], m["lost"])
			}
		})
	}
}

func TestObservationFieldValues(t *testing.T) {
	tests := []struct {
		obs  api.Observation
		want map[string]any
	}{
		{everything(api.KindRun), map[string]any{"output": "out", "exit_code": float64(3), "running": true, "timed_out": true, "cwd": "/w", "session": "s", "truncated": true, "session_ended": true}},
		{everything(api.KindExec), map[string]any{"exit_code": float64(3), "signal": "SIGKILL", "stdout": "so", "stderr": "se", "timed_out": true, "oom_killed": true, "duration_ms": float64(12), "truncated": true}},
		{everything(api.KindIPython), map[string]any{"output": "out", "images": []any{map[string]any{"mime": "image/png", "data": "AAAA"}}, "error": map[string]any{"ename": "E", "evalue": "v", "traceback": "tb"}, "execution_count": float64(4), "timed_out": true, "truncated": true}},
		{everything(api.KindFileRead), map[string]any{"path": "/p", "content": "c", "truncated": true}},
		{everything(api.KindFileWrite), map[string]any{"path": "/p", "bytes": float64(9)}},
		{everything(api.KindFileEdit), map[string]any{"output": "out", "path": "/p"}},
		{everything(api.KindBrowser), map[string]any{"url": "u", "title": "ti", "text": "te", "axtree": "ax", "screenshot": "png", "error": "be", "truncated": true}},
		// Zero values are explicit.
		{api.Observation{Kind: api.KindRun}, map[string]any{"exit_code": nil, "running": false, "output": "", "truncated": false}},
		{api.Observation{Kind: api.KindExec}, map[string]any{"exit_code": nil, "signal": "", "duration_ms": float64(0)}},
		{api.Observation{Kind: api.KindRun, ExitCode: api.ExitCode(0)}, map[string]any{"exit_code": float64(0)}},
		{api.Observation{Kind: api.KindExec, ExitCode: api.ExitCode(-1)}, map[string]any{"exit_code": float64(-1)}},
		{api.Observation{Kind: api.KindIPython}, map[string]any{"images": []any{}, "error": nil, "execution_count": float64(0)}},
		{api.Observation{Kind: api.KindBrowser}, map[string]any{"error": ""}},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.obs)
		if err != nil {
			t.Fatal(err)
		}
		m := keySet(t, b)
		for k, w := range tt.want {
			v, ok := m[k]
			if !ok {
				t.Errorf("%s: key %q missing from %s", tt.obs.Kind, k, b)
				continue
			}
			if !reflect.DeepEqual(v, w) {
				t.Errorf("%s: %q = %#v, want %#v (json %s)", tt.obs.Kind, k, v, w, b)
			}
		}
	}
}

func TestObservationOptionalExtras(t *testing.T) {
	for _, kind := range api.Kinds() {
		b, err := json.Marshal(api.Observation{Kind: kind, Note: "", Lost: false, SessionEnded: false})
		if err != nil {
			t.Fatal(err)
		}
		m := keySet(t, b)
		for _, k := range []string{"note", "lost", "session_ended"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s: %q present though unset: %s", kind, k, b)
			}
		}
		b, _ = json.Marshal(api.Observation{Kind: kind, Note: "restarted"})
		if m := keySet(t, b); m["note"] != "restarted" {
			t.Errorf("%s: note missing: %s", kind, b)
		}
		b, _ = json.Marshal(api.Observation{Kind: kind, Lost: true})
		if m := keySet(t, b); m["lost"] != true {
			t.Errorf("%s: lost missing: %s", kind, b)
		}
	}
}

// MarshalJSON itself never HTML-escapes. (json.Marshal re-escapes a
// Marshaler's output; the daemon writes with an Encoder that has
// SetEscapeHTML(false), which keeps the bytes as MarshalJSON made them.)
func TestObservationNoHTMLEscapeAndCompact(t *testing.T) {
	text := "<b>a & b</b> -> x\n\"q\" \\ \u2028 é"
	for _, kind := range api.Kinds() {
		o := api.Observation{Kind: kind, Output: text, Stdout: text, Stderr: text, Content: text, Text: text, Path: text, URL: text}
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(api.StreamLine{Type: api.LineObservation, Observation: &o}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(buf.Bytes(), b) {
			t.Errorf("%s: an Encoder without HTML escaping changed the observation:\n%s\nvs\n%s", kind, buf.Bytes(), b)
		}
		if !json.Valid(b) {
			t.Fatalf("%s: invalid JSON %s", kind, b)
		}
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if bytes.Contains(b, []byte(esc)) {
				t.Errorf("%s: %s is HTML-escaped: %s", kind, esc, b)
			}
		}
		if !bytes.Contains(b, []byte("<b>a & b</b> -> x")) {
			t.Errorf("%s: text not written as is: %s", kind, b)
		}
		if bytes.ContainsAny(b, "\n\r\t") {
			t.Errorf("%s: marshalled observation is not on one line: %q", kind, b)
		}
		var back api.Observation
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if kind == api.KindRun && back.Output != text {
			t.Errorf("output round trip: %q", back.Output)
		}
	}
}

func TestObservationRoundTrip(t *testing.T) {
	images := []api.Image{{MIME: "image/png", Data: "iVBOR"}, {MIME: "image/svg+xml", Data: "<svg/>"}}
	tests := []struct {
		name string
		obs  api.Observation
	}{
		{"run done", api.Observation{Kind: api.KindRun, Cause: 1, Output: "a\nb <&>\x1b[0m é", ExitCode: api.ExitCode(0), Cwd: "/home/u", Session: "default"}},
		{"run running", api.Observation{Kind: api.KindRun, Cause: 2, Output: "partial", Running: true, TimedOut: true, Cwd: "/", Session: "s", Note: "still running", Truncated: true}},
		{"run ended", api.Observation{Kind: api.KindRun, Cause: 3, ExitCode: api.ExitCode(137), SessionEnded: true, Session: "s", Note: "exited", Lost: true}},
		{"interrupt", api.Observation{Kind: api.KindInterrupt, Cause: 4, Output: "^C", ExitCode: api.ExitCode(130), Cwd: "/", Session: "default"}},
		{"exec", api.Observation{Kind: api.KindExec, Cause: 5, ExitCode: api.ExitCode(1), Stdout: "o", Stderr: "e\x00", DurationMS: 1234, Truncated: true}},
		{"exec killed", api.Observation{Kind: api.KindExec, Cause: 6, Signal: "SIGKILL", TimedOut: true, OOMKilled: true}},
		{"ipython ok", api.Observation{Kind: api.KindIPython, Cause: 7, Output: "2\n", Images: images, ExecutionCount: 3}},
		{"ipython error", api.Observation{Kind: api.KindIPython, Cause: 8, Images: []api.Image{}, IPythonError: &api.IPythonError{EName: "ZeroDivisionError", EValue: "division by zero", Traceback: "Traceback...\n  <module>"}, ExecutionCount: 9, TimedOut: true, Truncated: true, Note: "n"}},
		{"file.read", api.Observation{Kind: api.KindFileRead, Cause: 9, Path: "/etc/hosts", Content: "127.0.0.1 localhost\n", Truncated: true}},
		{"file.write", api.Observation{Kind: api.KindFileWrite, Cause: 10, Path: "/tmp/x", Bytes: 1 << 40}},
		{"file.edit", api.Observation{Kind: api.KindFileEdit, Cause: 11, Output: "edited", Path: "/a"}},
		{"browser", api.Observation{Kind: api.KindBrowser, Cause: 12, URL: "https://x/?a&b", Title: "T", Text: "body", AXTree: "tree", Screenshot: "png64", Truncated: true}},
		{"browser error", api.Observation{Kind: api.KindBrowser, Cause: 13, URL: "https://x", BrowserError: "net::ERR_NAME_NOT_RESOLVED", Lost: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.obs)
			if err != nil {
				t.Fatal(err)
			}
			var got api.Observation
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("unmarshal %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tt.obs) {
				t.Errorf("round trip of %s\n got %#v\nwant %#v", b, got, tt.obs)
			}
			// Through a pointer, inside a stream line and an event.
			line, err := json.Marshal(api.StreamLine{Type: api.LineObservation, Observation: &tt.obs})
			if err != nil {
				t.Fatal(err)
			}
			var sl api.StreamLine
			if err := json.Unmarshal(line, &sl); err != nil {
				t.Fatal(err)
			}
			if sl.Observation == nil || !reflect.DeepEqual(*sl.Observation, tt.obs) {
				t.Errorf("stream line round trip of %s: got %#v", line, sl.Observation)
			}
		})
	}
}

func TestObservationUnmarshalErrorKinds(t *testing.T) {
	var o api.Observation
	if err := json.Unmarshal([]byte(`{"kind":"browser","error":"boom"}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.BrowserError != "boom" || o.IPythonError != nil {
		t.Errorf("browser error: %#v", o)
	}
	o = api.Observation{}
	if err := json.Unmarshal([]byte(`{"kind":"ipython","error":{"ename":"E","evalue":"V","traceback":"T"}}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.IPythonError == nil || *o.IPythonError != (api.IPythonError{EName: "E", EValue: "V", Traceback: "T"}) || o.BrowserError != "" {
		t.Errorf("ipython error: %#v", o)
	}
	o = api.Observation{BrowserError: "stale", IPythonError: &api.IPythonError{}}
	if err := json.Unmarshal([]byte(`{"kind":"ipython","error":null}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.IPythonError != nil || o.BrowserError != "" {
		t.Errorf("null error must clear the stale values: %#v", o)
	}
	// Unknown fields are ignored (newer daemons).
	if err := json.Unmarshal([]byte(`{"kind":"run","output":"x","future_field":{"a":[1]}}`), &o); err != nil {
		t.Errorf("unknown field refused: %v", err)
	}
	if o.Output != "x" {
		t.Errorf("output = %q", o.Output)
	}
	// A type mismatch is an error.
	if err := json.Unmarshal([]byte(`{"kind":"browser","error":{"a":1}}`), &o); err == nil {
		t.Errorf("browser error object accepted")
	}
	if err := json.Unmarshal([]byte(`{"kind":"ipython","error":"str"}`), &o); err == nil {
		t.Errorf("ipython error string accepted")
	}
}

// ---------------------------------------------------------------------------
// CreateSandboxRequest

func TestDecodeCreateSandboxValid(t *testing.T) {
	bigEnv := map[string]string{}
	for i := 0; i < api.MaxEnvVars; i++ {
		bigEnv[fmt.Sprintf("V%d", i)] = "x"
	}
	bigEnvJSON, _ := json.Marshal(bigEnv)
	labels := map[string]string{}
	for i := 0; i < api.MaxLabels; i++ {
		labels[fmt.Sprintf("l%d", i)] = "v"
	}
	labelsJSON, _ := json.Marshal(labels)
	k256 := strings.Repeat("k", api.MaxLabelBytes)
	tests := []struct {
		name string
		body string
		want api.CreateSandboxRequest
	}{
		{"nil", "", api.CreateSandboxRequest{}},
		{"whitespace", " \r\n\t ", api.CreateSandboxRequest{}},
		{"empty object", "{}", api.CreateSandboxRequest{}},
		{"every field", `{"backend":"process","image":"debian:12","env":{"A":"1","B":"a=b"},"workdir":"/w","limits":{"memory_mb":512,"pids":100,"cpus":1.5,"disk_mb":1024,"output_bytes":1048576},"network":"none","idle_timeout_s":600,"labels":{"team":"x"}}`,
			api.CreateSandboxRequest{Backend: "process", Image: "debian:12", Env: map[string]string{"A": "1", "B": "a=b"}, Workdir: "/w",
				Limits: &api.Limits{MemoryMB: 512, Pids: 100, CPUs: 1.5, DiskMB: 1024, OutputBytes: 1 << 20}, Network: "none", IdleTimeoutS: api.Seconds(600), Labels: map[string]string{"team": "x"}}},
		{"network host", `{"network":"host"}`, api.CreateSandboxRequest{Network: "host"}},
		{"zero limits", `{"limits":{}}`, api.CreateSandboxRequest{Limits: &api.Limits{}}},
		{"zero idle timeout", `{"idle_timeout_s":0}`, api.CreateSandboxRequest{IdleTimeoutS: api.Seconds(0)}},
		{"utf-8 labels", `{"labels":{"é":"日本"}}`, api.CreateSandboxRequest{Labels: map[string]string{"é": "日本"}}},
		{"max env vars", `{"env":` + string(bigEnvJSON) + `}`, api.CreateSandboxRequest{Env: bigEnv}},
		{"max labels", `{"labels":` + string(labelsJSON) + `}`, api.CreateSandboxRequest{Labels: labels}},
		{"max label sizes", `{"labels":{"` + k256 + `":"` + k256 + `"}}`, api.CreateSandboxRequest{Labels: map[string]string{k256: k256}}},
		{"trailing whitespace", "{}\n\n", api.CreateSandboxRequest{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := api.DecodeCreateSandbox([]byte(tt.body))
			if err != nil {
				t.Fatalf("DecodeCreateSandbox: %v", err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %#v\nwant %#v", *got, tt.want)
			}
		})
	}
}

func TestDecodeCreateSandboxErrors(t *testing.T) {
	tooManyEnv := map[string]string{}
	for i := 0; i <= api.MaxEnvVars; i++ {
		tooManyEnv[fmt.Sprintf("V%d", i)] = ""
	}
	tooManyEnvJSON, _ := json.Marshal(tooManyEnv)
	tooManyLabels := map[string]string{}
	for i := 0; i <= api.MaxLabels; i++ {
		tooManyLabels[fmt.Sprintf("l%d", i)] = ""
	}
	tooManyLabelsJSON, _ := json.Marshal(tooManyLabels)
	big := strings.Repeat("x", api.MaxEnvBytes)
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"unknown field", `{"bogus":1}`, []string{"bogus"}},
		{"unknown limit", `{"limits":{"gpus":1}}`, []string{"gpus"}},
		{"field wrong case", `{"Network":"none","network":"none","NETWORK":"x"}`, nil},
		{"bad network", `{"network":"bridge"}`, []string{`"network"`, "bridge"}},
		{"network wrong case", `{"network":"None"}`, []string{`"network"`}},
		{"network number", `{"network":1}`, []string{`network`}},
		{"negative memory", `{"limits":{"memory_mb":-1}}`, []string{"memory_mb"}},
		{"negative pids", `{"limits":{"pids":-1}}`, []string{"pids"}},
		{"negative cpus", `{"limits":{"cpus":-0.5}}`, []string{"cpus"}},
		{"negative disk", `{"limits":{"disk_mb":-10}}`, []string{"disk_mb"}},
		{"negative output", `{"limits":{"output_bytes":-1}}`, []string{"output_bytes"}},
		{"fractional memory", `{"limits":{"memory_mb":1.5}}`, []string{"memory_mb"}},
		{"limits array", `{"limits":[]}`, []string{"limits"}},
		{"negative idle timeout", `{"idle_timeout_s":-1}`, []string{"idle_timeout_s"}},
		{"too many env vars", `{"env":` + string(tooManyEnvJSON) + `}`, []string{`"env"`}},
		{"env too large", `{"env":{"A":"` + big + `"}}`, []string{`"env"`}},
		{"env name with =", `{"env":{"A=B":"1"}}`, []string{`"env"`}},
		{"env empty name", `{"env":{"":"1"}}`, []string{`"env"`}},
		{"env NUL name", `{"env":{"A\u0000":"1"}}`, []string{`"env"`}},
		{"env NUL value", `{"env":{"A":"\u0000"}}`, []string{`"env"`}},
		{"env number value", `{"env":{"A":1}}`, []string{`env`}},
		{"too many labels", `{"labels":` + string(tooManyLabelsJSON) + `}`, []string{`"labels"`}},
		{"empty label key", `{"labels":{"":"v"}}`, []string{`"labels"`}},
		{"label key too long", `{"labels":{"` + strings.Repeat("k", api.MaxLabelBytes+1) + `":"v"}}`, []string{`"labels"`}},
		{"label value too long", `{"labels":{"k":"` + strings.Repeat("v", api.MaxLabelBytes+1) + `"}}`, []string{`"labels"`}},
		{"NUL in image", `{"image":"a\u0000"}`, []string{"image"}},
		{"NUL in workdir", `{"workdir":"/w\u0000"}`, []string{"workdir"}},
		{"NUL in backend", `{"backend":"p\u0000"}`, []string{"backend"}},
		{"invalid utf-8 in image", "{\"image\":\"\xff\"}", []string{"UTF-8"}},
		{"invalid utf-8 in label", "{\"labels\":{\"k\":\"\xc3\"}}", []string{"UTF-8"}},
		{"invalid utf-8 outside strings", "{\"image\":\"x\"}\xff", nil},
		{"array", `[]`, []string{"object"}},
		{"string", `"x"`, []string{"object"}},
		{"number", `1`, []string{"object"}},
		{"not JSON", `network=none`, []string{"JSON"}},
		{"truncated", `{"network":"none"`, nil},
		{"trailing garbage", `{} x`, nil},
		{"two objects", `{}{}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := api.DecodeCreateSandbox([]byte(tt.body))
			if err == nil {
				t.Fatalf("DecodeCreateSandbox(%.80q) = %#v, want an error", tt.body, r)
			}
			if !errors.Is(err, api.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrInvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %.200q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestDecodeCreateSandboxTrailingCloser(t *testing.T) {
	for _, body := range []string{`{}}`, `{"network":"none"}]`, `{} ]`} {
		if r, err := api.DecodeCreateSandbox([]byte(body)); err == nil {
			t.Errorf("DecodeCreateSandbox(%q) = %#v, want an error for the trailing garbage", body, r)
		}
	}
}

// ---------------------------------------------------------------------------
// Errors

func sentinels() map[api.Code]error {
	return map[api.Code]error{
		api.CodeInvalidArgument:   api.ErrInvalidArgument,
		api.CodeUnauthenticated:   api.ErrUnauthenticated,
		api.CodePermissionDenied:  api.ErrPermissionDenied,
		api.CodeNotFound:          api.ErrNotFound,
		api.CodeConflict:          api.ErrConflict,
		api.CodeTooLarge:          api.ErrTooLarge,
		api.CodeResourceExhausted: api.ErrResourceExhausted,
		api.CodeUnsupported:       api.ErrUnsupported,
		api.CodeUnavailable:       api.ErrUnavailable,
		api.CodeDeadlineExceeded:  api.ErrDeadlineExceeded,
		api.CodeInternal:          api.ErrInternal,
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	s := sentinels()
	for c1, e1 := range s {
		if e1.Error() != string(c1) {
			t.Errorf("sentinel of %q says %q", c1, e1.Error())
		}
		for c2, e2 := range s {
			if c1 != c2 && errors.Is(e1, e2) {
				t.Errorf("errors.Is(%v, %v) is true", e1, e2)
			}
		}
	}
}

func TestCodeOfAndErrorOf(t *testing.T) {
	for code, sentinel := range sentinels() {
		t.Run(string(code), func(t *testing.T) {
			if got := api.CodeOf(sentinel); got != code {
				t.Errorf("CodeOf(sentinel) = %q", got)
			}
			if got := api.ErrorOf(code); got != sentinel {
				t.Errorf("ErrorOf(%q) = %v", code, got)
			}
			if got := api.CodeOf(api.ErrorOf(code)); got != code {
				t.Errorf("CodeOf(ErrorOf(%q)) = %q", code, got)
			}
			err := api.Errorf(sentinel, "thing %d failed", 3)
			if err.Error() != "thing 3 failed" {
				t.Errorf("message = %q", err.Error())
			}
			if !errors.Is(err, sentinel) {
				t.Errorf("errors.Is(Errorf(%v), sentinel) = false", code)
			}
			if got := api.CodeOf(err); got != code {
				t.Errorf("CodeOf(Errorf) = %q", got)
			}
			wrapped := fmt.Errorf("outer: %w", err)
			if got := api.CodeOf(wrapped); got != code {
				t.Errorf("CodeOf(fmt.Errorf(%%w, Errorf)) = %q", got)
			}
			if !errors.Is(wrapped, sentinel) {
				t.Errorf("errors.Is through fmt.Errorf lost the class")
			}
			if got := api.CodeOf(fmt.Errorf("a: %w", fmt.Errorf("b: %w", sentinel))); got != code {
				t.Errorf("CodeOf(doubly wrapped sentinel) = %q", got)
			}
			if got := api.CodeOf(errors.Join(errors.New("plain"), err)); got != code {
				t.Errorf("CodeOf(errors.Join) = %q", got)
			}
			for other, os := range sentinels() {
				if other != code && errors.Is(err, os) {
					t.Errorf("Errorf(%v) also is %v", code, other)
				}
			}
		})
	}
}

func TestCodeOfUnclassified(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), io.EOF, fmt.Errorf("x: %w", io.EOF)} {
		if got := api.CodeOf(err); got != api.CodeInternal {
			t.Errorf("CodeOf(%v) = %q, want internal", err, got)
		}
	}
}

func TestErrorOfUnknown(t *testing.T) {
	for _, c := range []api.Code{"", "bogus", "NOT_FOUND", "not_found ", "Internal"} {
		if got := api.ErrorOf(c); got != api.ErrInternal {
			t.Errorf("ErrorOf(%q) = %v, want ErrInternal", c, got)
		}
	}
}

type customErr struct{ v int }

func (e *customErr) Error() string { return fmt.Sprintf("custom %d", e.v) }

func TestErrorfKeepsCause(t *testing.T) {
	cause := &customErr{v: 42}
	err := api.Errorf(api.ErrNotFound, "open %q: %w", "/x", cause)
	if !errors.Is(err, api.ErrNotFound) {
		t.Error("class lost")
	}
	if !errors.Is(err, cause) {
		t.Error("errors.Is(err, cause) = false")
	}
	var ce *customErr
	if !errors.As(err, &ce) || ce.v != 42 {
		t.Errorf("errors.As did not find the cause: %v", ce)
	}
	if want := `open "/x": custom 42`; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if !errors.Is(api.Errorf(api.ErrNotFound, "x: %w", io.EOF), io.EOF) {
		t.Error("io.EOF cause lost")
	}
	if errors.Is(api.Errorf(api.ErrNotFound, "x: %v", io.EOF), io.EOF) {
		t.Error("a percent-v verb must not wrap")
	}
	if api.CodeOf(api.Errorf(api.ErrTooLarge, "x: %w", io.EOF)) != api.CodeTooLarge {
		t.Error("class changed by the cause")
	}
	// Errorf with a percent in its arguments only, and no args.
	if got := api.Errorf(api.ErrConflict, "100%% busy").Error(); got != "100% busy" {
		t.Errorf("message %q", got)
	}
}

func TestErrorfMultipleCauses(t *testing.T) {
	a, b := errors.New("a"), &customErr{1}
	err := api.Errorf(api.ErrUnavailable, "%w and %w", a, b)
	if !errors.Is(err, api.ErrUnavailable) {
		t.Error("class lost")
	}
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Errorf("causes lost: Is(a)=%v Is(b)=%v", errors.Is(err, a), errors.Is(err, b))
	}
}

func TestCodeOfOuterClassWins(t *testing.T) {
	tests := []struct {
		outer, inner error
		want         api.Code
	}{
		{api.ErrUnavailable, api.ErrNotFound, api.CodeUnavailable},
		{api.ErrInternal, api.ErrInvalidArgument, api.CodeInternal},
		{api.ErrConflict, api.ErrInvalidArgument, api.CodeConflict},
		{api.ErrInvalidArgument, api.ErrInternal, api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		err := api.Errorf(tt.outer, "outer: %w", api.Errorf(tt.inner, "inner"))
		if got := api.CodeOf(err); got != tt.want {
			t.Errorf("CodeOf(Errorf(%v, %%w of %v)) = %q, want %q", tt.outer, tt.inner, got, tt.want)
		}
	}
}

func TestErrorBodyJSON(t *testing.T) {
	b, err := json.Marshal(api.ErrorBody{Error: api.ErrorInfo{Code: api.CodeNotFound, Message: "no sandbox <x>"}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["error"]["code"] != "not_found" || m["error"]["message"] != "no sandbox <x>" || len(m) != 1 || len(m["error"]) != 2 {
		t.Errorf("error body %s", b)
	}
}

// MaxTimeoutS is documented as the largest timeout an action may ask for.
// Past it, a timeout converted to a time.Duration overflows: the bash
// executor arms its hard timer with time.Duration(hard*float64(time.Second)),
// which for 1e10 s is negative, so the command is killed at once.
func TestDecodeActionTimeoutAboveMax(t *testing.T) {
	for _, body := range []string{
		`{"kind":"run","command":"x","timeout_s":604801}`,
		`{"kind":"exec","argv":["x"],"timeout_s":1e300}`,
	} {
		// The soft timeouts are clamped by Action.Timeout(def, max), so an
		// over-large value there is harmless; only check it decodes to
		// something Timeout clamps.
		a, err := api.DecodeAction([]byte(body))
		if err == nil && a.Timeout(30, api.MaxTimeoutS) > api.MaxTimeoutS {
			t.Errorf("%s: Timeout() = %v exceeds MaxTimeoutS", body, a.Timeout(30, api.MaxTimeoutS))
		}
	}
	for _, v := range []string{"604801", "1e10", "1e300"} {
		body := `{"kind":"run","command":"sleep 1","hard_timeout_s":` + v + `}`
		a, err := api.DecodeAction([]byte(body))
		if err == nil {
			t.Errorf("DecodeAction(%s) accepted hard_timeout_s %v > MaxTimeoutS %d", body, a.HardTimeoutS, api.MaxTimeoutS)
		}
	}
}
