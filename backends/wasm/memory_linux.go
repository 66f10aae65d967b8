package wasm

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// mmapMemory is a linear memory in its own mapping: the whole cap is
// reserved (address space only) when the instance starts, and pages are
// made accessible as the guest grows. Beside wazero's default (a Go slice
// grown by copying), growing never copies, fresh pages come zeroed from the
// kernel instead of being cleared, and the memory goes back to the system
// the moment the instance closes rather than at the next garbage
// collection: what bounds 200 concurrent instances is instances × what
// each touched, not the Go heap's slack.
type mmapMemory struct {
	all  []byte // the reservation, max bytes
	open int    // bytes made readable and writable, page aligned
}

var pageSize = syscall.Getpagesize()

// allocator returns wazero's memory allocator.
func allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		if max == 0 || max > 1<<32 {
			return &heapMemory{max: max}
		}
		all, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
		if err != nil {
			// Out of address space (RLIMIT_AS): the slower way still works.
			return &heapMemory{max: max}
		}
		return &mmapMemory{all: all}
	})
}

// Reallocate implements experimental.LinearMemory. A nil answer makes
// memory.grow fail in the guest, which is how a module learns it hit its
// cap.
func (m *mmapMemory) Reallocate(size uint64) []byte {
	if m.all == nil || size > uint64(len(m.all)) {
		return nil
	}
	want := (int(size) + pageSize - 1) &^ (pageSize - 1)
	if want > m.open {
		if err := syscall.Mprotect(m.all[m.open:want], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil
		}
		m.open = want
	}
	return m.all[:size:size]
}

// Free implements experimental.LinearMemory. wazero calls it once, from
// the goroutine that ran the guest, after the guest stopped.
func (m *mmapMemory) Free() {
	if m.all != nil {
		syscall.Munmap(m.all)
		m.all = nil
	}
}
