package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCloseThenDestroy: a delete closes the executors, then destroys the
// sandbox; an executor stuck on processes that only the destruction ends
// (a paused container) does not hold it back, and one that never returns
// does not hold the delete forever.
func TestCloseThenDestroy(t *testing.T) {
	const grace = 20 * time.Millisecond
	for _, tc := range []struct {
		name string
		// closeFn is the executors' close; destroyed is closed when
		// destroy has run, ended when the test has.
		closeFn   func(destroyed, ended <-chan struct{}) error
		wantOrder string
		wantErr   string
	}{
		{"closes first", func(_, _ <-chan struct{}) error { return nil }, "close destroy", ""},
		{"close fails", func(_, _ <-chan struct{}) error { return errors.New("close failed") }, "close destroy", "close failed"},
		{"stuck until destroyed", func(destroyed, _ <-chan struct{}) error { <-destroyed; return nil }, "destroy close", ""},
		{"never returns", func(_, ended <-chan struct{}) error { <-ended; return nil }, "destroy", "did not close"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				order []string
			)
			note := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, s)
			}
			destroyed, ended := make(chan struct{}), make(chan struct{})
			defer close(ended)
			err := closeThenDestroy(context.Background(), grace, func(context.Context) error {
				err := tc.closeFn(destroyed, ended)
				note("close")
				return err
			}, func(context.Context) error {
				note("destroy")
				close(destroyed)
				return nil
			})
			mu.Lock()
			got := strings.Join(order, " ")
			mu.Unlock()
			if got != tc.wantOrder {
				t.Errorf("ran %q, want %q", got, tc.wantOrder)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
