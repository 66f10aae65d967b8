package backends

import "golang.org/x/sys/unix"

// Terminal size every backend gives TTY processes: wide, so tools do not
// wrap lines the agent will read as one.
const (
	TTYCols = 250
	TTYRows = 50
)

// QuietTerminal turns off echo and output CR-LF translation on the
// terminal fd is open on (a master applies them to its slave), and makes
// input UTF-8: what Terminal.Quiet does.
func QuietTerminal(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	want := *t
	want.Lflag &^= unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL | unix.ECHOCTL
	want.Oflag &^= unix.ONLCR
	want.Iflag |= unix.IUTF8
	if want == *t {
		return nil
	}
	return unix.IoctlSetTermios(fd, unix.TCSETS, &want)
}
