package wasm

import (
	"testing"

	"github.com/tetratelabs/wazero/experimental"
)

func TestLinearMemory(t *testing.T) {
	const page = 65536
	for _, tc := range []struct {
		name string
		mem  experimental.LinearMemory
		// stable: growing keeps the address (no copy)
		stable bool
	}{
		{"allocator", allocator().Allocate(0, 4*page), true},
		{"heap", &heapMemory{max: 4 * page}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.mem.Free()
			b := tc.mem.Reallocate(page)
			if len(b) != page {
				t.Fatalf("len %d", len(b))
			}
			b[0], b[page-1] = 1, 2
			g := tc.mem.Reallocate(3 * page)
			if len(g) != 3*page || g[0] != 1 || g[page-1] != 2 || g[2*page] != 0 {
				t.Fatalf("grown: len %d, content lost or not zero", len(g))
			}
			g[3*page-1] = 3 // writable to the end
			if tc.stable && &g[0] != &b[0] {
				t.Error("growing moved the memory")
			}
			if m, ok := tc.mem.(*mmapMemory); ok {
				if tc.mem.Reallocate(4*page+1) != nil {
					t.Error("grew past its maximum")
				}
				if m.open != 3*page {
					t.Errorf("%d bytes open, want %d", m.open, 3*page)
				}
			}
		})
	}
}
