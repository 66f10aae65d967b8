package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// browse opens a URL in the sandbox's browser and prints what an agent
// would read: the page's text, or its accessibility tree, or the whole
// observation as JSON.
func browse(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("browse")
	shot := fs.String("screenshot", "", "write a PNG of the page to `FILE` (- is stdout)")
	tree := fs.Bool("tree", false, "print the accessibility tree (with element ids) instead of the text")
	asJSON := fs.Bool("json", false, "print the observation as JSON")
	timeout := fs.Float64("timeout", 0, "seconds the page may take (default 30)")
	if len(args) < 2 {
		return errUsage
	}
	id, url := args[0], args[1]
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	a := api.Browse(url)
	a.Screenshot = *shot != ""
	if *timeout > 0 {
		a.TimeoutS = api.Seconds(*timeout)
	}
	obs, err := c.Act(ctx, id, a)
	if err != nil {
		return err
	}
	if *shot != "" && obs.Screenshot != "" {
		png, err := base64.StdEncoding.DecodeString(obs.Screenshot)
		if err != nil {
			return fmt.Errorf("the screenshot is not base64: %w", err)
		}
		if *shot == "-" {
			_, err = stdout.Write(png)
			return err
		}
		if err := os.WriteFile(*shot, png, 0o644); err != nil {
			return err
		}
	}
	switch {
	case *asJSON:
		obs.Screenshot = ""
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(obs); err != nil {
			return err
		}
	case *tree:
		fmt.Fprintf(stdout, "%s\n%s\n\n%s", obs.Title, obs.URL, obs.AXTree)
	default:
		fmt.Fprintf(stdout, "%s\n%s\n\n%s\n", obs.Title, obs.URL, obs.Text)
	}
	if obs.Note != "" {
		fmt.Fprintf(stderr, "sandboxd: %s\n", obs.Note)
	}
	if obs.BrowserError != "" {
		fmt.Fprintf(stderr, "sandboxd: %s\n", obs.BrowserError)
		return exitError{1}
	}
	return nil
}
