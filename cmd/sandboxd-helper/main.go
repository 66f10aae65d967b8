// Command sandboxd-helper is the containers' init and exec wrapper of the
// containerd backend (see package sbinit), as a binary of its own: it
// holds nothing but the helpers, so it starts in a few milliseconds and
// keeps a few hundred KiB resident where the whole daemon binary would
// spend ~10 ms on package initialisation per process started and ~15 MiB
// per sandbox. The daemon uses the sandboxd-helper next to its own
// executable when there is one (build it with CGO_ENABLED=0: it must run
// in any image), and itself otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/backends/containerd/sbinit"
)

func main() {
	sbinit.Main(os.Args)
	fmt.Fprintf(os.Stderr, "sandboxd-helper is started by sandboxd inside containers (%s MODE ...), not by hand\n", sbinit.Arg)
	os.Exit(2)
}
