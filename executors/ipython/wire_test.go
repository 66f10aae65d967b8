package ipython

import (
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"
)

func TestWire(t *testing.T) {
	s := signer{key: []byte("secret"), session: "sess"}
	m, id, err := s.encode("execute_request", map[string]any{"code": "1+1"})
	if err != nil {
		t.Fatal(err)
	}
	topic := append([][]byte{[]byte("kernel.x.iopub")}, m.Frames...)
	tampered := append([][]byte{}, m.Frames...)
	tampered[5] = []byte(`{"code":"import os"}`)
	other := signer{key: []byte("other"), session: "sess"}
	for _, tc := range []struct {
		name    string
		s       signer
		frames  [][]byte
		wantErr string
	}{
		{"as sent", s, m.Frames, ""},
		{"after a topic", s, topic, ""},
		{"content changed", s, tampered, "bad signature"},
		{"another key", other, m.Frames, "bad signature"},
		{"no delimiter", s, m.Frames[1:], "not a Jupyter message"},
		{"too short", s, m.Frames[:4], "not a Jupyter message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := tc.s.decode(zmq4.NewMsgFrom(tc.frames...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decode = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || msg.Header.MsgID != id || msg.Header.MsgType != "execute_request" || msg.Header.Session != "sess" || string(msg.Content) != `{"code":"1+1"}` {
				t.Fatalf("decode = %+v, %v", msg, err)
			}
		})
	}
}

func TestANSIStripped(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[0;31mZeroDivisionError\x1b[0m": "ZeroDivisionError",
		"\x1b[1;32m----> 1\x1b[39m x":        "----> 1 x",
		"plain":                              "plain",
		"\x1b[?25h\x1b[38;5;28mok":           "ok",
	} {
		if got := ansi.ReplaceAllString(in, ""); got != want {
			t.Errorf("strip(%q) = %q, want %q", in, got, want)
		}
	}
}
