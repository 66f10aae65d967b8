package bash

import (
	"bytes"
	"strconv"
)

// The shell prints a marker after every command:
//
//	ESC ] 697 ; <nonce> ; <exit code> ; <cwd length in bytes> ; <cwd> BEL
//
// and a start marker when it begins a command, having read all of its
// typed text:
//
//	ESC ] 697 ; <nonce> ; S BEL
//
// An OSC sequence, so a terminal would ignore it; the nonce is random per
// session, so output that merely looks like a marker is taken as text; the
// cwd is length-prefixed, so any path (';', BEL, newlines) parses.
const oscPrefix = "\x1b]697;"

// startCode is parse's code for a start marker.
const startCode = -1

// maxCwd bounds the cwd length a marker may claim (PATH_MAX).
const maxCwd = 4096

// markerParser splits a terminal byte stream into text and markers. Chunks
// may split a marker anywhere.
type markerParser struct {
	prefix []byte // oscPrefix + nonce + ";"
	pend   []byte // bytes that may be the start of a marker
}

func newMarkerParser(nonce string) *markerParser {
	return &markerParser{prefix: []byte(oscPrefix + nonce + ";")}
}

// Feed parses p, calling text for plain output (in order, possibly in
// several pieces), marker for each complete marker and start (if not nil)
// for each start marker.
func (m *markerParser) Feed(p []byte, text func([]byte), marker func(code int, cwd string), start func()) {
	if len(m.pend) > 0 {
		m.pend = append(m.pend, p...)
		p, m.pend = m.pend, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, m.prefix[0])
		if i < 0 {
			text(p)
			return
		}
		if i > 0 {
			text(p[:i])
			p = p[i:]
		}
		code, cwd, n, ok := m.parse(p)
		switch {
		case n < 0:
			// Incomplete but still possibly a marker: wait for more.
			m.pend = append(m.pend[:0], p...)
			return
		case !ok:
			// Not a marker: the ESC is text.
			text(p[:1])
			p = p[1:]
		case code == startCode:
			if start != nil {
				start()
			}
			p = p[n:]
		default:
			marker(code, cwd)
			p = p[n:]
		}
	}
}

// parse tries to read a marker at the start of p (a start marker has code
// startCode). n < 0 means p is a proper prefix of a possible marker.
func (m *markerParser) parse(p []byte) (code int, cwd string, n int, ok bool) {
	k := min(len(p), len(m.prefix))
	if !bytes.Equal(p[:k], m.prefix[:k]) {
		return 0, "", 0, false
	}
	if k < len(m.prefix) {
		return 0, "", -1, false
	}
	i := len(m.prefix)
	if i < len(p) && p[i] == 'S' {
		switch {
		case i+1 == len(p):
			return 0, "", -1, false
		case p[i+1] == '\a':
			return startCode, "", i + 2, true
		}
		return 0, "", 0, false
	}
	code, i, st := number(p, i, 3)
	if st != 1 {
		return 0, "", st, false
	}
	size, i, st := number(p, i, 4)
	if st != 1 || size > maxCwd {
		return 0, "", min(st, 0), false
	}
	if len(p) < i+size+1 {
		return 0, "", -1, false
	}
	if p[i+size] != '\a' {
		return 0, "", 0, false
	}
	return code, string(p[i : i+size]), i + size + 1, true
}

// number reads decimal digits at p[i:] up to a ';' (at most max digits).
// st is 1 when read, -1 when p ends first, 0 when malformed.
func number(p []byte, i, max int) (v, next, st int) {
	j := i
	for j < len(p) && j-i <= max {
		c := p[j]
		if c == ';' {
			if j == i {
				return 0, 0, 0
			}
			v, err := strconv.Atoi(string(p[i:j]))
			if err != nil {
				return 0, 0, 0
			}
			return v, j + 1, 1
		}
		if c < '0' || c > '9' {
			return 0, 0, 0
		}
		j++
	}
	if j >= len(p) {
		return 0, 0, -1
	}
	return 0, 0, 0
}
