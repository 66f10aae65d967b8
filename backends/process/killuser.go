package process

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// killUser sends SIGKILL to every process whose real or saved uid is uid.
//
// It drops the credentials of one OS thread (raw setresuid changes only the
// calling thread on Linux) and calls kill(-1, SIGKILL) from it. The kernel
// delivers that signal to all matching processes while holding the task list
// lock, and a process with a pending SIGKILL cannot complete a fork, so a
// fork bomb cannot outrun it. The thread is a spare one that ends afterwards
// (see onSpareThread), never the main thread, whose credentials stand for
// the whole daemon.
func killUser(uid int) error {
	if uid <= 0 {
		return fmt.Errorf("refusing to kill processes of uid %d", uid)
	}
	var err error
	onSpareThread(func() bool {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			err = fmt.Errorf("setresgid: %w", e)
			return true
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			err = fmt.Errorf("setresuid: %w", e)
			return true
		}
		// ESRCH means there was nothing to kill.
		if e := unix.Kill(-1, unix.SIGKILL); e != nil && e != unix.ESRCH {
			err = fmt.Errorf("kill -1: %w", e)
		}
		return true // this thread's credentials are spoiled
	})
	return err
}
