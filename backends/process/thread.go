package process

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// onSpareThread runs f in a new goroutine locked to an OS thread that is
// not the process's main thread, and waits for it.
//
// The backend changes per-thread state (credentials, v1 cgroups) on such
// threads. When f reports the thread spoiled, the goroutine exits still
// locked and the runtime ends the thread, so the change dies with it. The
// main thread is never used: the runtime cannot end it (it parks it
// instead), and its credentials are what /proc and kill(2) show for the
// whole daemon.
func onSpareThread(f func() (spoiled bool)) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Keep the main thread busy until a goroutine of our own holds
			// another one, then let the main thread go.
			go func() {
				runtime.LockOSThread()
				if !f() {
					runtime.UnlockOSThread()
				}
				close(done)
			}()
			<-done
			runtime.UnlockOSThread()
			return
		}
		if !f() {
			runtime.UnlockOSThread()
		}
		close(done)
	}()
	<-done
}
