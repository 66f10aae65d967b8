package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// edit runs the str_replace_editor on a sandbox's file and prints what
// the editor says.
func edit(ctx context.Context, c *client.Client, args []string, stdout io.Writer) error {
	fs := newFlags("edit")
	oldStr := fs.String("old", "", "str_replace: the text to replace (must occur exactly once)")
	newStr := fs.String("new", "", "str_replace and insert: the new text")
	fileText := fs.String("text", "", "create: the file's content")
	line := fs.Int("line", -1, "insert: the line after which the text goes (0 = top)")
	if len(args) < 3 {
		return errUsage
	}
	id, command, path := args[0], args[1], args[2]
	if err := fs.Parse(args[3:]); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	var a *api.Action
	switch command {
	case "view":
		a = api.View(path)
	case "create":
		a = api.Create(path, *fileText)
	case "str_replace":
		a = api.StrReplace(path, *oldStr, *newStr)
	case "insert":
		if *line < 0 {
			return fmt.Errorf("insert needs --line N")
		}
		a = api.Insert(path, *line, *newStr)
	case "undo_edit":
		a = api.UndoEdit(path)
	default:
		return fmt.Errorf("unknown edit command %q: view, create, str_replace, insert or undo_edit", command)
	}
	obs, err := c.Act(ctx, id, a)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, obs.Output)
	return nil
}
