package daemon

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"sync"
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
// It is the hot path of output streaming: it escapes into a reused buffer
// and hands bufio one write.
func writeJSONString(w *bufio.Writer, s []byte) {
	bp := escBufs.Get().(*[]byte)
	b := appendJSONString((*bp)[:0], s)
	w.Write(b)
	*bp = b
	escBufs.Put(bp)
}

var escBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// appendJSONString appends s as a JSON string literal to dst. It looks for
// bytes that need escaping eight at a time (SWAR), so plain text costs
// little more than a copy.
func appendJSONString(dst, s []byte) []byte {
	const hexdig = "0123456789abcdef"
	dst = append(dst, '"')
	start, i := 0, 0
	for i < len(s) {
		if i+8 <= len(s) && !special8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
			continue
		}
		c := s[i]
		if !needsEscape[c] {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexdig[c>>4], hexdig[c&15])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// special8 reports whether any of the 8 bytes in x is below 0x20, '"' or
// '\\' (the classic "has a zero byte" and "has a byte less than n" tricks).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := (x - ones*0x20) & ^x & highs
	q := x ^ (ones * '"')
	quote := (q - ones) & ^q & highs
	bs := x ^ (ones * '\\')
	bslash := (bs - ones) & ^bs & highs
	return less|quote|bslash != 0
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
