package process

import (
	"fmt"
	"os"
	"strconv"

	"github.com/sandboxd/sandboxd/backends"

	"golang.org/x/sys/unix"
)

// openPTY opens a new pseudo-terminal pair. The master is non-blocking so
// reads on it use the runtime's poller and Close unblocks them.
func openPTY() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	ws := &unix.Winsize{Row: backends.TTYRows, Col: backends.TTYCols}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, ws); err != nil {
		unix.Close(mfd)
		unix.Close(sfd)
		return nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(sfd), name), nil
}
