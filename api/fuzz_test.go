package api_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
)

// FuzzDecodeAction: whatever the bytes, DecodeAction answers an action or
// an invalid_argument error, never a panic; an action it accepts encodes
// to JSON that decodes to the same action, and carries no NUL and no
// invalid UTF-8 in its strings.
func FuzzDecodeAction(f *testing.F) {
	for _, s := range []string{
		`{"kind":"run","command":"ls -la","timeout_s":1.5}`,
		`{"kind":"run","command":"","input":true,"session":"s2","hard_timeout_s":3}`,
		`{"kind":"exec","argv":["sh","-c","echo $1","x"],"env":{"A":"b"},"stdin":"in","cwd":"/tmp"}`,
		`{"kind":"ipython","code":"1+1"}`,
		`{"kind":"file.read","path":"a.txt","start_line":2,"end_line":-1}`,
		`{"kind":"file.write","path":"a","content":"x","mode":"0600"}`,
		`{"kind":"file.edit","command":"str_replace","path":"a","old_str":"x","new_str":"y"}`,
		`{"kind":"file.edit","command":"view","path":"a","view_range":[1,-1]}`,
		`{"kind":"browser","op":"goto","url":"http://x","screenshot":true}`,
		`{"kind":"interrupt","session":"default"}`,
		`{"id":"a-1","kind":"run","command":"x"}`,
		`{"kind":"run","command":"\u0000"}`,
		"{\"kind\":\"run\",\"command\":\"\xff\"}",
		`{"kind":"run","command":"x","timeout_s":-1}`,
		`{"kind":"run","command":"x","timeout_s":1e308}`,
		`{"kind":"exec","argv":[]}`,
		`{"kind":"run"}`,
		`[]`, `null`, `{}`, `{"kind":1}`, `{"kind":"run","command":"a","command":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := api.DecodeAction(data)
		if err != nil {
			if api.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("DecodeAction(%q): error %v of code %s, want invalid_argument", data, err, api.CodeOf(err))
			}
			return
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("an accepted action does not encode: %v", err)
		}
		if !utf8.Valid(b) {
			t.Fatalf("an accepted action encodes to invalid UTF-8: %q", b)
		}
		again, err := api.DecodeAction(b)
		if err != nil {
			t.Fatalf("the encoding of an accepted action is refused: %v\n%s", err, b)
		}
		if !again.Equivalent(a) {
			t.Fatalf("round trip changed the action:\n%s\n%+v\n%+v", b, a, again)
		}
	})
}
