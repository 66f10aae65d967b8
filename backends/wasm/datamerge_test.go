package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// dataModule is a module with a 2-page memory exported as "memory", the
// given extra sections (id, content) and a data section of segs (each
// already encoded).
func dataModule(extra [][]byte, segs ...[]byte) []byte {
	sec := func(m []byte, id byte, body []byte) []byte {
		m = append(m, id)
		m = binary.AppendUvarint(m, uint64(len(body)))
		return append(m, body...)
	}
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	m = sec(m, 5, []byte{0x01, 0x00, 0x02})                                     // memory: min 2 pages
	m = sec(m, 7, []byte{0x01, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00}) // export it
	for _, e := range extra {
		m = sec(m, e[0], e[1:])
	}
	body := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		body = append(body, s...)
	}
	return sec(m, 11, body)
}

// active encodes an active segment at an i32.const offset.
func active(off int32, data string) []byte {
	s := appendSleb32([]byte{0x00, 0x41}, off)
	s = append(s, 0x0b)
	s = binary.AppendUvarint(s, uint64(len(data)))
	return append(s, data...)
}

// image instantiates code (no start function) and returns its memory.
func image(t *testing.T, code []byte) ([]byte, error) {
	t.Helper()
	ctx := context.Background()
	// The interpreter: nothing runs, and compiling a Go module to machine
	// code takes seconds (tens under -race).
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		return nil, err
	}
	mem, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		t.Fatal("memory unreadable")
	}
	return bytes.Clone(mem), nil
}

func segmentCount(t *testing.T, code []byte) int {
	t.Helper()
	s, e, ok := dataSection(code)
	if !ok {
		t.Fatal("no data section")
	}
	segs, err := parseData(code[s:e])
	if err != nil {
		t.Fatal(err)
	}
	return len(segs)
}

func TestMergeData(t *testing.T) {
	passive := append([]byte{0x01, 0x03}, "abc"...)
	globalOff := append([]byte{0x00, 0x23, 0x00, 0x0b, 0x01}, 'x') // offset global.get 0
	cases := []struct {
		name     string
		code     []byte
		segments int // after merging; 0: left as it is
	}{
		{"ascending small gaps", dataModule(nil, active(0, "ab"), active(10, "cd"), active(4000, "ef")), 1},
		{"unordered, disjoint", dataModule(nil, active(4000, "ef"), active(0, "ab"), active(10, "cd")), 1},
		{"adjacent", dataModule(nil, active(5, "ab"), active(7, "cd")), 1},
		{"a gap too wide to fill", dataModule(nil, active(0, "ab"), active(100000, "cd"), active(100010, "ef")), 2},
		{"empty segments", dataModule(nil, active(3, ""), active(3, "x"), active(9, "")), 1},
		{"overlapping: the later wins", dataModule(nil, active(0, "aaaa"), active(2, "bb")), 0},
		{"same offset twice", dataModule(nil, active(8, "aa"), active(8, "bb")), 0},
		{"a passive segment", dataModule(nil, active(0, "ab"), passive), 0},
		{"a global offset", dataModule(nil, active(0, "ab"), globalOff), 0},
		{"a data count section", dataModule([][]byte{{12, 0x02}}, active(0, "ab"), active(4, "cd")), 0},
		{"one segment", dataModule(nil, active(0, "ab")), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeData(tc.code)
			if tc.segments == 0 {
				if !bytes.Equal(got, tc.code) {
					t.Fatal("rewritten; want the module left as it is")
				}
			} else if n := segmentCount(t, got); n != tc.segments {
				t.Fatalf("%d segments after merging, want %d", n, tc.segments)
			}
			want, werr := image(t, tc.code)
			have, herr := image(t, got)
			if (werr == nil) != (herr == nil) {
				t.Fatalf("instantiate: original %v, merged %v", werr, herr)
			}
			if !bytes.Equal(want, have) {
				t.Fatal("the merged module's memory differs from the original's")
			}
		})
	}
}

// TestMergeDataMalformed: whatever the bytes, mergeData returns them
// unchanged or returns a module wazero treats the same way.
func TestMergeDataMalformed(t *testing.T) {
	good := dataModule(nil, active(0, "ab"), active(10, "cd"))
	for i := range len(good) {
		trunc := good[:i]
		if got := mergeData(trunc); !bytes.Equal(got, trunc) {
			t.Fatalf("truncated at %d: rewritten", i)
		}
	}
	for _, bad := range [][]byte{
		nil,
		[]byte("\x00asm\x02\x00\x00\x00"),
		append(bytes.Clone(good), 11, 0x01, 0x00), // a second data section
	} {
		if got := mergeData(bad); !bytes.Equal(got, bad) {
			t.Fatalf("%x: rewritten", bad)
		}
	}
	// An out-of-bounds segment fails instantiation before and after.
	oob := dataModule(nil, active(0, "ab"), active(2*65536-1, "cd"))
	if _, err := image(t, mergeData(oob)); err == nil {
		t.Fatal("an out-of-bounds segment instantiated after merging")
	}
}

func TestSleb32(t *testing.T) {
	for _, v := range []int32{0, 1, 63, 64, -1, -64, -65, 1 << 20, math.MaxInt32, math.MinInt32} {
		b := appendSleb32(nil, v)
		got, n := sleb32(b)
		if got != v || n != len(b) {
			t.Errorf("%d: encoded %x, decoded %d (%d bytes)", v, b, got, n)
		}
	}
	for _, bad := range [][]byte{{}, {0x80}, {0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, {0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, n := sleb32(bad); n > 0 {
			t.Errorf("%x decoded", bad)
		}
	}
}

// TestMergeDataGoModule: the module the Go toolchain builds (tens of
// thousands of segments) merges into few, with the same memory image.
func TestMergeDataGoModule(t *testing.T) {
	code := rfsGuestWasm(t)
	merged := mergeData(code)
	before, after := segmentCount(t, code), segmentCount(t, merged)
	t.Logf("%d segments -> %d; %d bytes -> %d", before, after, len(code), len(merged))
	if after >= before/10 {
		t.Errorf("%d segments merged into %d", before, after)
	}
	want, err := image(t, code)
	if err != nil {
		t.Fatal(err)
	}
	have, err := image(t, merged)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, have) {
		t.Fatal("the merged module's memory differs from the original's")
	}
}
