package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

const imageUsage = `Usage:
  sandboxd image import FILE [--name NAME] [--quiet]   FILE: a docker save or OCI image layout tar (maybe gzipped); - is stdin
  sandboxd image ls [--json]
  sandboxd image rm IMAGE...
  sandboxd image pull REF                              needs a registry the daemon's host can reach
`

// image runs `sandboxd image import|ls|rm|pull`: the images containerd
// sandboxes are made from.
func image(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	err := imageCmd(ctx, args, stdin, stdout, stderr)
	if errors.Is(err, errUsage) {
		fmt.Fprint(stderr, imageUsage)
	}
	return err
}

func imageCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	sub, rest := args[0], args[1:]
	var f func(*client.Client, []string) error
	switch sub {
	case "import":
		f = func(c *client.Client, args []string) error { return imageImport(ctx, c, args, stdin, stdout, stderr) }
	case "ls", "list":
		f = func(c *client.Client, args []string) error { return imageList(ctx, c, args, stdout) }
	case "rm", "remove":
		f = func(c *client.Client, args []string) error { return imageRemove(ctx, c, args, stdout, stderr) }
	case "pull":
		f = func(c *client.Client, args []string) error { return imagePull(ctx, c, args, stdout, stderr) }
	default:
		fmt.Fprintf(stderr, "sandboxd image: unknown command %q (import, ls, rm or pull)\n", sub)
		return errUsage
	}
	return withClient(ctx, rest, stderr, f)
}

// parseInterleaved parses flags that may come before, between or after
// the positional arguments ("import FILE --name N"); "--" ends the flags.
func parseInterleaved(fs interface {
	Parse([]string) error
	Args() []string
}, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// imageImport uploads an image archive (a file, or - for standard input),
// showing the upload's progress on stderr, and prints the names imported.
func imageImport(ctx context.Context, c *client.Client, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("image import")
	name := fs.String("name", "", "name of the archive's image when it names none (NAME[:TAG])")
	quiet := fs.Bool("quiet", false, "show no progress")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 {
		return errUsage
	}
	src := pos[0]
	var r io.Reader
	var size int64 = -1
	label := src
	if src == "-" {
		r, label = stdin, "standard input"
		if f, ok := stdin.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
				size = st.Size()
			}
		}
	} else {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("%s is a directory: give the image archive (docker save or OCI layout tar)", src)
		}
		if st.Mode().IsRegular() {
			size = st.Size()
		}
		r = f
	}
	var body io.Reader = r
	var p *progress
	if !*quiet {
		now := time.Now()
		p = &progress{r: r, w: stderr, label: label, total: size, tty: isTerminal(stderr), start: now, last: now}
		body = p
		if size >= 0 {
			body = &sizedProgress{p}
		}
	}
	imgs, err := c.ImportImage(ctx, body, *name)
	if p != nil {
		p.finish(err == nil)
	}
	if err != nil {
		return err
	}
	for _, img := range imgs {
		fmt.Fprintln(stdout, img.Name)
	}
	return nil
}

// progress reports how much of an upload was sent: on a terminal one line
// rewritten in place, elsewhere a line a second at most, and a last one.
type progress struct {
	r      io.Reader
	w      io.Writer
	label  string
	total  int64 // -1: unknown
	n      int64
	tty    bool
	start  time.Time
	last   time.Time
	shown  bool
	closed bool
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	every := time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	if err == io.EOF {
		p.show("uploaded")
	} else if now := time.Now(); now.Sub(p.last) >= every {
		p.last = now
		p.show("uploading")
	}
	return n, err
}

func (p *progress) show(verb string) {
	if p.closed {
		return
	}
	line := fmt.Sprintf("%s %s: %s", verb, p.label, humanBytes(p.n))
	if p.total >= 0 {
		pct := 100
		if p.total > 0 {
			pct = int(p.n * 100 / p.total)
		}
		line = fmt.Sprintf("%s %s: %s of %s (%d%%)", verb, p.label, humanBytes(p.n), humanBytes(p.total), pct)
	}
	if verb == "uploaded" {
		line += fmt.Sprintf(" in %.1fs; importing", time.Since(p.start).Seconds())
		p.closed = true
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		if p.closed {
			fmt.Fprintln(p.w)
		}
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.shown = true
}

// finish ends the progress display once the daemon answered.
func (p *progress) finish(ok bool) {
	if p.tty && p.shown && !p.closed {
		fmt.Fprintln(p.w)
	}
	p.closed = true
}

// sizedProgress is a progress of known size: its Len lets the client
// send a Content-Length.
type sizedProgress struct{ *progress }

func (s *sizedProgress) Len() int { return int(s.total - s.n) }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func imageList(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("image ls")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	imgs, err := c.Images(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, imgs)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPLATFORM\tSIZE\tDIGEST\tCREATED")
	for _, img := range imgs {
		size, digest, created := humanBytes(img.Size), img.Digest, "-"
		if d, ok := strings.CutPrefix(digest, "sha256:"); ok && len(d) > 12 {
			digest = "sha256:" + d[:12]
		}
		if !img.CreatedAt.IsZero() {
			created = img.CreatedAt.Local().Format(time.DateTime)
		}
		if img.Builtin {
			size, digest, created = "-", "(built in: the host's system, read-only)", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.Name, img.Platform, size, digest, created)
	}
	return tw.Flush()
}

func imageRemove(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	var failed error
	for _, name := range args {
		if err := c.RemoveImage(ctx, name); err != nil {
			fmt.Fprintf(stderr, "sandboxd image rm: %s: %v\n", name, err)
			failed = exitError{1}
			continue
		}
		fmt.Fprintln(stdout, name)
	}
	return failed
}

func imagePull(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return errUsage
	}
	fmt.Fprintf(stderr, "pulling %s (the daemon fetches it from its registry)\n", args[0])
	imgs, err := c.PullImage(ctx, args[0])
	if err != nil {
		return err
	}
	for _, img := range imgs {
		fmt.Fprintln(stdout, img.Name)
	}
	return nil
}
