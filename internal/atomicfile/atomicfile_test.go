package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first\n", 0o600}, {"second, longer\n", 0o644}, {"", 0o640}} {
		if err := Write(path, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		fi, serr := os.Stat(path)
		if err != nil || serr != nil || string(b) != tc.data || fi.Mode().Perm() != tc.perm {
			t.Errorf("after Write(%q, %v): %q %v, mode %v %v", tc.data, tc.perm, b, err, fi.Mode().Perm(), serr)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// TestWriteConcurrent: writers of one path racing each other leave one of
// their contents whole, never a mix (a shared temporary file made a
// shorter content followed by the tail of a longer one).
func TestWriteConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandbox.json")
	var contents [][]byte
	for i := range 8 {
		contents = append(contents, []byte(`{"v":"`+strings.Repeat("x", 100+i*37)+`"}`))
	}
	var wg sync.WaitGroup
	for _, c := range contents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := Write(path, c, 0o600); err != nil {
					t.Error(err)
					return
				}
				b, err := os.ReadFile(path)
				if err != nil || !slices.ContainsFunc(contents, func(w []byte) bool { return bytes.Equal(w, b) }) {
					t.Errorf("read %q %v: not one whole content", b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
