package containerd

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// killTree kills the process root and everything below it. The exec
// wrapper made root a child subreaper, so everything it started is still
// below it, however it forked or detached. The tree is frozen first (every
// member SIGSTOPped, until a scan finds no new member: a stopped process
// cannot fork), then killed, so a fork bomb cannot outrun the walk.
func killTree(root, pidfd int) error {
	// kill(0) and kill(-1) mean the caller's process group and every
	// process: never walk from a pid that is not a real one. The pidfd
	// pins root: once it is signalled through it, root's pid cannot be
	// another process (a zombie keeps its pid).
	if root <= 1 || pidfd < 0 {
		return fmt.Errorf("kill tree: no process (pid %d)", root)
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGSTOP, nil, 0); err == unix.ESRCH {
		return nil
	}
	members := map[int]bool{}
	for range 1000 {
		grew := false
		for _, pid := range descendants(root) {
			if !members[pid] {
				members[pid] = true
				grew = true
			}
			_ = unix.Kill(pid, unix.SIGSTOP)
		}
		if !grew {
			break
		}
	}
	for pid := range members {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

// descendants lists the host pids below root, from /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentOf reads a process's parent pid from /proc/PID/stat.
func parentOf(pid int) int { return statField(pid, 4) }

// foregroundOf reads the foreground process group of a process's
// terminal (tpgid), in the host's pid numbering.
func foregroundOf(pid int) int { return statField(pid, 8) }

// statField reads numeric field n (1-based, as proc(5) counts) of
// /proc/PID/stat; the command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func statField(pid, n int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < n-2 {
		return 0
	}
	v, _ := strconv.Atoi(f[n-3])
	return v
}
