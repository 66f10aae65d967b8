package process

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// killUser sends SIGKILL to every process whose real or saved uid is uid.
//
// It drops the credentials of one OS thread (raw setresuid changes only the
// calling thread on Linux) and calls kill(-1, SIGKILL) from it. The kernel
// delivers that signal to all matching processes while holding the task list
// lock, and a process with a pending SIGKILL cannot complete a fork, so a
// fork bomb cannot outrun it. The thread is never handed back to the Go
// scheduler: the goroutine exits while still locked, which ends the thread.
func killUser(uid int) error {
	if uid <= 0 {
		return fmt.Errorf("refusing to kill processes of uid %d", uid)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: this thread's credentials are spoiled.
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("setresuid: %w", e)
			return
		}
		// ESRCH means there was nothing to kill.
		if err := unix.Kill(-1, unix.SIGKILL); err != nil && err != unix.ESRCH {
			errc <- fmt.Errorf("kill -1: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// userPids lists the processes whose real uid is uid.
func userPids(uid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	want := []byte(strconv.Itoa(uid))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.HasPrefix(line, []byte("Uid:")) {
				fields := bytes.Fields(line[4:])
				if len(fields) > 0 && bytes.Equal(fields[0], want) {
					pids = append(pids, pid)
				}
				break
			}
		}
		f.Close()
	}
	return pids
}
