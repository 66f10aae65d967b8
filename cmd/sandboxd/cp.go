package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/tarfs"
)

var sandboxRef = regexp.MustCompile(`^(sb-[a-z0-9]+):(.*)$`)

// cp copies between the local machine and a sandbox, like docker cp:
//
//	sandboxd cp LOCAL SANDBOX:PATH   a file, or a directory's contents into PATH
//	sandboxd cp SANDBOX:PATH LOCAL   a file, or a directory's contents into LOCAL
//
// "-" as LOCAL is standard input or output (a file's bytes).
func cp(ctx context.Context, c *client.Client, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 2 {
		return errUsage
	}
	src, dst := sandboxRef.FindStringSubmatch(args[0]), sandboxRef.FindStringSubmatch(args[1])
	switch {
	case src == nil && dst != nil:
		return cpUp(ctx, c, args[0], dst[1], dst[2], stdin, stdout)
	case src != nil && dst == nil:
		return cpDown(ctx, c, src[1], src[2], args[1], stdout)
	}
	return errors.New("exactly one of the two paths must be SANDBOX:PATH (sb-...:path)")
}

func cpUp(ctx context.Context, c *client.Client, local, id, path string, stdin io.Reader, stdout io.Writer) error {
	if local == "-" {
		res, err := c.Upload(ctx, id, path, stdin, -1, false)
		if err == nil {
			fmt.Fprintf(stdout, "%s: %d bytes\n", res.Path, res.Bytes)
		}
		return err
	}
	res, err := c.UploadPath(ctx, id, local, path)
	if err == nil {
		fmt.Fprintf(stdout, "%s: %d files, %d bytes\n", res.Path, res.Files, res.Bytes)
	}
	return err
}

func cpDown(ctx context.Context, c *client.Client, id, path, local string, stdout io.Writer) error {
	body, isTar, _, err := c.OpenDownload(ctx, id, path)
	if err != nil {
		return err
	}
	defer body.Close()
	if isTar {
		if local == "-" {
			_, err := io.Copy(stdout, body)
			return err
		}
		if err := os.MkdirAll(local, 0o755); err != nil {
			return err
		}
		root, err := os.OpenRoot(local)
		if err != nil {
			return err
		}
		defer root.Close()
		// The archive comes from the sandbox: extract it as safely as the
		// daemon extracts what it is sent (nothing may land outside LOCAL).
		_, err = tarfs.Extract(root, ".", body, tarfs.Limits{MaxBytes: 1 << 50, MaxEntries: 10_000_000}, -1, -1)
		return err
	}
	if local == "-" {
		_, err := io.Copy(stdout, body)
		return err
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, filepath.Base(strings.TrimSuffix(path, "/")))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".sandboxd-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
