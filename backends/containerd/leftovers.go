package containerd

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// What a daemon that died abruptly (kill -9, a crash) leaves in a sandbox
// it was starting processes in, and how the next daemon deals with it.
//
// A process's output goes through FIFOs that the daemon opens for reading
// before it asks the shim to start the process; the shim then opens them
// for writing, which blocks until there is a reader. A daemon killed in
// between leaves the shim blocked in that open for good, with its lock
// held: from then on the shim answers nothing, so containerd reports the
// task's status as "unknown" and even killing the container hangs. Holding
// every FIFO of the sandbox open lets such a start finish.

// heldFIFOs are the FIFOs left in a sandbox's io directory, held open.
type heldFIFOs struct {
	fds []int
	// execs are the non-terminal processes the FIFOs belong to: nobody
	// can read their output or learn how they end any more.
	execs []string
}

// holdFIFOs opens every FIFO in dir. Opening read-write never blocks on a
// FIFO, and makes a reader and a writer at once: whichever end a shim is
// blocked opening, it gets its partner.
func holdFIFOs(dir string) *heldFIFOs {
	h := &heldFIFOs{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Type()&fs.ModeNamedPipe == 0 {
			continue
		}
		fd, err := unix.Open(filepath.Join(dir, e.Name()), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		h.fds = append(h.fds, fd)
		// Non-terminal processes are "x<hex>", terminals "t<hex>" (see
		// newExecID); a FIFO is "<id>-stdin|stdout|stderr".
		if id, _, ok := strings.Cut(e.Name(), "-"); ok && strings.HasPrefix(id, "x") && !slices.Contains(h.execs, id) {
			h.execs = append(h.execs, id)
		}
	}
	return h
}

// close lets go of the FIFOs. Once the shim has answered a status request
// its starts are done (they hold its lock), so nothing waits for them any
// more.
func (h *heldFIFOs) close() {
	for _, fd := range h.fds {
		unix.Close(fd)
	}
	h.fds = nil
}

// settledStatus returns the task's status. "unknown" is what containerd
// answers when the shim did not answer in time, which a busy host or a
// shim finishing a start it was blocked in can cause: it is asked again
// for a while before the container is given up.
func settledStatus(ctx context.Context, task client.Task) (client.Status, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := task.Status(ctx)
		if err != nil || st.Status != client.Unknown || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopLeftovers stops the non-terminal processes a dead daemon had
// started, as a daemon's Close stops them when it stops gracefully (their
// actions are settled as lost), and frees their execs in the shim and
// their FIFOs. Terminals are left alone: they are re-attached to.
func (s *sandbox) stopLeftovers(ctx context.Context, ids []string) {
	for _, id := range ids {
		s.stopLeftover(ctx, id)
		_ = removeFIFOs(cio.Config{
			Stdin:  filepath.Join(s.l.fifos(), id+"-stdin"),
			Stdout: filepath.Join(s.l.fifos(), id+"-stdout"),
			Stderr: filepath.Join(s.l.fifos(), id+"-stderr"),
		})
	}
}

func (s *sandbox) stopLeftover(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	resp, err := s.b.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: s.ctr.ID(), ExecID: id})
	if err != nil {
		// Never made, or gone with the shim.
		return
	}
	cp, err := s.task.LoadProcess(ctx, id, nil)
	if err != nil {
		return
	}
	exited, werr := cp.Wait(ctx)
	if pid := int(resp.Process.Pid); pid > 1 {
		// The pidfd pins the process; it is only signalled if containerd
		// still says it runs once the pidfd is taken, so that a pid
		// reused since is never hit.
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			if st, err := cp.Status(ctx); err == nil && st.Status == client.Running {
				if err := killTree(pid, fd); err != nil {
					s.b.log.Debug("containerd: stop a leftover process", "exec", id, "err", err)
				}
				if werr == nil {
					select {
					case <-exited:
					case <-ctx.Done():
					}
				}
			}
			unix.Close(fd)
		}
	}
	if _, err := cp.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		s.b.log.Debug("containerd: delete a leftover exec", "exec", id, "err", err)
	}
}
