// Package atomicfile writes small files so that a crash leaves either the
// old content or the new one, never a mix.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
)

// Write writes data to path with mode perm via a synced temporary file in
// the same directory and a rename, then syncs the directory. Concurrent
// writes of one path each leave a whole content: every write has a
// temporary file of its own.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	perr := f.Chmod(perm)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, perr, serr, cerr); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
