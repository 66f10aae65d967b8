package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// The README's example: the same code works against StartLocal or New.
func ExampleStartLocal() {
	ctx := context.Background()
	c, err := client.StartLocal(ctx, client.LocalOptions{}) // or client.New("http://host:7070", client.WithToken(tok))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, _ := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	c.Run(ctx, sb.ID, "cd /tmp && export GREETING=hi")
	obs, _ := c.Run(ctx, sb.ID, "echo $GREETING from $PWD") // "hi from /tmp\n", exit code 0
	fmt.Print(obs.Output, *obs.ExitCode)
	_, err = c.Run(ctx, "sb-nope", "true")
	fmt.Println(errors.Is(err, client.ErrNotFound)) // true: API errors keep their class
}
