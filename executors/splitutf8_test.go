package executors

import (
	"bytes"
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

// utf8Texts are valid UTF-8 texts with characters of every length.
var utf8Texts = []string{
	"",
	"a",
	"é",
	"日",
	"🎉",
	"aé日🎉",
	"🎉日éa",
	"é\n日本語のテキスト\t🎉🎉 end",
	"\u0080\u07ff\u0800\uffff\U00010000\U0010ffff",
	"\ufffd\ufeff\u2028",
	strings.Repeat("日本🎉é", 5),
}

func TestSplitUTF8AllCuts(t *testing.T) {
	for _, text := range utf8Texts {
		b := []byte(text)
		for cut := 0; cut <= len(b); cut++ {
			first := append([]byte(nil), b[:cut]...)
			second := b[cut:]
			whole, rest := SplitUTF8(first)
			if !bytes.Equal(append(append([]byte(nil), whole...), rest...), first) {
				t.Errorf("%q cut at %d: whole %q + rest %q != %q", text, cut, whole, rest, first)
				continue
			}
			if !utf8.Valid(whole) {
				t.Errorf("%q cut at %d: whole part %q is not valid UTF-8", text, cut, whole)
			}
			if len(rest) > 3 {
				t.Errorf("%q cut at %d: rest %q is longer than 3 bytes", text, cut, rest)
			}
			if utf8.Valid(first) && len(rest) != 0 {
				t.Errorf("%q cut at %d: valid %q split into %q + %q", text, cut, first, whole, rest)
			}
			joined := append(append([]byte(nil), rest...), second...)
			if !utf8.Valid(joined) {
				t.Errorf("%q cut at %d: rest+second %q is not valid UTF-8", text, cut, joined)
			}
			// Splitting the second half again, with the rest carried,
			// must also keep only whole characters.
			for cut2 := 0; cut2 <= len(joined); cut2++ {
				w2, r2 := SplitUTF8(joined[:cut2])
				if !utf8.Valid(w2) {
					t.Errorf("%q cut at %d,%d: %q is not valid", text, cut, cut2, w2)
				}
				if !utf8.Valid(append(append([]byte(nil), r2...), joined[cut2:]...)) {
					t.Errorf("%q cut at %d,%d: carry %q breaks the rest", text, cut, cut2, r2)
				}
			}
		}
	}
}

// A stream pushed through SplitUTF8 in arbitrary chunks, carrying the rest
// as the live stream does, comes out whole and in order.
func TestSplitUTF8Stream(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	text := []byte(strings.Repeat("aé日🎉\n", 200))
	for trial := 0; trial < 200; trial++ {
		var out, carry []byte
		for p := text; len(p) > 0; {
			n := 1 + r.Intn(9)
			if n > len(p) {
				n = len(p)
			}
			chunk := append(append([]byte(nil), carry...), p[:n]...)
			p = p[n:]
			whole, rest := SplitUTF8(chunk)
			if !utf8.Valid(whole) {
				t.Fatalf("trial %d: chunk %q sent invalid %q", trial, chunk, whole)
			}
			out = append(out, whole...)
			carry = append([]byte(nil), rest...)
		}
		out = append(out, carry...)
		if !bytes.Equal(out, text) {
			t.Fatalf("trial %d: stream changed", trial)
		}
	}
}

func TestSplitUTF8Invalid(t *testing.T) {
	tests := []struct {
		in        string
		whole     string
		wantSplit bool
	}{
		{"abc", "abc", false},
		{"ab\xc3", "ab", true},
		{"ab\xe6\x97", "ab", true},
		{"ab\xe6", "ab", true},
		{"ab\xf0\x9f\x8e", "ab", true},
		{"ab\xf0\x9f", "ab", true},
		{"ab\xf0", "ab", true},
		// Stray continuation bytes are not held: no character can complete them.
		{"ab\x80", "ab\x80", false},
		{"\x80\x80\x80\x80", "\x80\x80\x80\x80", false},
		{"é\x80", "é\x80", false},
	}
	for _, tt := range tests {
		whole, rest := SplitUTF8([]byte(tt.in))
		if string(whole) != tt.whole || (len(rest) > 0) != tt.wantSplit || string(whole)+string(rest) != tt.in {
			t.Errorf("SplitUTF8(%q) = %q, %q; want whole %q (split %v)", tt.in, whole, rest, tt.whole, tt.wantSplit)
		}
	}
}
