package daemon

import (
	"bufio"
	"encoding/base64"
	"unicode/utf8"
)

// needsEscape marks the bytes a JSON string must escape; the rest of valid
// UTF-8 goes through as is (no HTML escaping: nobody embeds this in HTML).
var needsEscape = func() (t [256]bool) {
	for i := 0; i < 0x20; i++ {
		t[i] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// writeJSONString writes s as a JSON string literal. s must be valid UTF-8.
// It is the hot path of output streaming, so it writes runs of plain bytes
// straight from s.
func writeJSONString(w *bufio.Writer, s []byte) {
	const hexdig = "0123456789abcdef"
	w.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !needsEscape[c] {
			continue
		}
		w.Write(s[start:i])
		switch c {
		case '"':
			w.WriteString(`\"`)
		case '\\':
			w.WriteString(`\\`)
		case '\n':
			w.WriteString(`\n`)
		case '\r':
			w.WriteString(`\r`)
		case '\t':
			w.WriteString(`\t`)
		default:
			w.Write([]byte{'\\', 'u', '0', '0', hexdig[c>>4], hexdig[c&15]})
		}
		start = i + 1
	}
	w.Write(s[start:])
	w.WriteByte('"')
}

// writeOutputLine writes one {"type":"output",...} line. Valid UTF-8 goes in
// "data" as text; anything else in "data_b64".
func writeOutputLine(w *bufio.Writer, stream string, p []byte) {
	w.WriteString(`{"type":"output","stream":"`)
	w.WriteString(stream)
	if utf8.Valid(p) {
		w.WriteString(`","data":`)
		writeJSONString(w, p)
	} else {
		w.WriteString(`","data_b64":"`)
		enc := base64.NewEncoder(base64.StdEncoding, w)
		enc.Write(p)
		enc.Close()
		w.WriteByte('"')
	}
	w.WriteString("}\n")
}

// splitUTF8 splits p before an incomplete UTF-8 sequence at its end, so a
// character cut by a read boundary is sent whole with the next chunk.
func splitUTF8(p []byte) (whole, rest []byte) {
	// A sequence is at most 4 bytes: look at the last 3 for its start.
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		c := p[i]
		if c < 0x80 {
			return p, nil
		}
		if c >= 0xC0 {
			need := 2
			switch {
			case c >= 0xF0:
				need = 4
			case c >= 0xE0:
				need = 3
			}
			if len(p)-i < need {
				return p[:i], p[i:]
			}
			return p, nil
		}
	}
	return p, nil
}
