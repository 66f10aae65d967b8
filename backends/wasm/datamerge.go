package wasm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// mergeGap is the largest run of zeros mergeData writes to join two
// segments: memory starts zeroed, so the zeros change nothing, and one
// copy of a few extra bytes is cheaper than one more segment.
const mergeGap = 4096

// mergeData returns code with its active data segments joined into as few
// as keep the same memory image, or code itself when it cannot prove the
// result equivalent.
//
// Why: the Go toolchain writes a module's data as tens of thousands of
// small segments (it splits at every run of zeros), and wazero evaluates
// and copies each one on every instantiation: about 4 ms of each run of a
// 3 MB Go module, more than its runtime takes to start. The merge is done
// once, before compiling, and the compiled result is what the cache keeps.
//
// It applies only when every segment is active, in memory 0, at an i32.const
// offset, no two overlap, and the module has no data
// count section (so no instruction can name a segment by index). Anything
// else (passive segments, global offsets, overlaps, malformed sections) and
// the module is left as it is, for wazero to run or reject.
func mergeData(code []byte) []byte {
	start, end, ok := dataSection(code)
	if !ok {
		return code
	}
	segs, err := parseData(code[start:end])
	if err != nil || len(segs) < 2 {
		return code
	}
	// Disjoint writes commute, so order does not matter unless two overlap,
	// which the walk below refuses.
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(a.off, b.off) })
	merged := make([]segment, 0, len(segs)/8+1)
	for _, s := range segs {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			lastEnd := uint64(last.off) + uint64(len(last.data))
			if uint64(s.off) < lastEnd {
				return code // overlap: the later segment wins, keep it so
			}
			if gap := uint64(s.off) - lastEnd; gap <= mergeGap {
				if !last.owned {
					last.data = append([]byte(nil), last.data...)
					last.owned = true
				}
				last.data = append(last.data, make([]byte, gap)...)
				last.data = append(last.data, s.data...)
				continue
			}
		}
		merged = append(merged, s)
	}
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(merged)))
	for _, s := range merged {
		body = append(body, 0x00, 0x41) // active in memory 0; i32.const
		body = appendSleb32(body, int32(s.off))
		body = append(body, 0x0b) // end
		body = binary.AppendUvarint(body, uint64(len(s.data)))
		body = append(body, s.data...)
	}
	out := make([]byte, 0, len(code)-(end-start)+len(body)+8)
	out = append(out, code[:start]...)
	out = append(out, 11)
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = append(out, body...)
	return append(out, code[end:]...)
}

type segment struct {
	off   uint32
	data  []byte
	owned bool // data is a copy mergeData may append to
}

// dataSection finds the data section (id 11): from its id byte to the end
// of its content. ok is false when there is none, when the module has a
// data count section (id 12), or when the module does not parse.
func dataSection(code []byte) (start, end int, ok bool) {
	if len(code) < 8 || string(code[:4]) != "\x00asm" || binary.LittleEndian.Uint32(code[4:8]) != 1 {
		return 0, 0, false
	}
	found := false
	for i := 8; i < len(code); {
		id := code[i]
		size, n := binary.Uvarint(code[i+1:])
		if n <= 0 || size > uint64(len(code)-i-1-n) {
			return 0, 0, false
		}
		next := i + 1 + n + int(size)
		switch id {
		case 12:
			return 0, 0, false
		case 11:
			if found {
				return 0, 0, false
			}
			start, end, found = i, next, true
		}
		i = next
	}
	return start, end, found
}

var errShape = errors.New("not a data section mergeData can prove equivalent")

// parseData reads a data section (id, size, content) into segments,
// failing on anything but active memory-0 segments at i32.const offsets.
func parseData(sec []byte) ([]segment, error) {
	_, n := binary.Uvarint(sec[1:])
	p := sec[1+n:]
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)) {
		return nil, errShape
	}
	p = p[n:]
	segs := make([]segment, 0, count)
	for range count {
		if len(p) < 2 || p[0] != 0x00 || p[1] != 0x41 {
			return nil, errShape
		}
		off, n := sleb32(p[2:])
		if n <= 0 || len(p) < 2+n+1 || p[2+n] != 0x0b {
			return nil, errShape
		}
		p = p[2+n+1:]
		size, n := binary.Uvarint(p)
		if n <= 0 || size > uint64(len(p)-n) {
			return nil, errShape
		}
		segs = append(segs, segment{off: uint32(off), data: p[n : n+int(size)]})
		p = p[n+int(size):]
	}
	if len(p) != 0 {
		return nil, errShape
	}
	return segs, nil
}

// sleb32 decodes a signed LEB128 of at most 5 bytes, as wasm encodes an
// i32.const; n <= 0 when it is malformed.
func sleb32(b []byte) (v int32, n int) {
	var r int64
	var shift uint
	for i := 0; i < 5 && i < len(b); i++ {
		c := b[i]
		r |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				r |= -1 << shift
			}
			if r < -1<<31 || r > 1<<31-1 {
				return 0, -1
			}
			return int32(r), i + 1
		}
	}
	return 0, -1
}

// appendSleb32 appends v as a signed LEB128.
func appendSleb32(b []byte, v int32) []byte {
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
