package client

import (
	"context"

	"github.com/sandboxd/sandboxd/api"
)

// Browse opens url in the sandbox's browser and answers the page: its url,
// title, text and accessibility tree. A refused URL or a navigation error
// is in the observation's BrowserError, not err.
func (c *Client) Browse(ctx context.Context, id, url string) (*api.Observation, error) {
	return c.Act(ctx, id, api.Browse(url))
}

// Browser runs one browser op (a.Op: goto, click, fill, press, scroll,
// back, forward, select, snapshot, screenshot or evaluate).
func (c *Client) Browser(ctx context.Context, id string, a *api.Action) (*api.Observation, error) {
	a.Kind = api.KindBrowser
	return c.Act(ctx, id, a)
}

// Snapshot answers the browser's current page without changing it.
func (c *Client) Snapshot(ctx context.Context, id string) (*api.Observation, error) {
	return c.Act(ctx, id, &api.Action{Kind: api.KindBrowser, Op: "snapshot"})
}

// Screenshot answers the current page with a PNG of its viewport (base64,
// in Screenshot).
func (c *Client) Screenshot(ctx context.Context, id string) (*api.Observation, error) {
	return c.Act(ctx, id, &api.Action{Kind: api.KindBrowser, Op: "screenshot"})
}

// Click clicks target: an element id of the last tree ("e12") or a CSS
// selector.
func (c *Client) Click(ctx context.Context, id, target string) (*api.Observation, error) {
	return c.Act(ctx, id, &api.Action{Kind: api.KindBrowser, Op: "click", Target: target})
}

// Fill replaces the value of the input target with text.
func (c *Client) Fill(ctx context.Context, id, target, text string) (*api.Observation, error) {
	return c.Act(ctx, id, &api.Action{Kind: api.KindBrowser, Op: "fill", Target: target, Text: text})
}

// Evaluate runs JavaScript in the page; its value comes back as JSON in
// the observation's Result.
func (c *Client) Evaluate(ctx context.Context, id, script string) (*api.Observation, error) {
	return c.Act(ctx, id, &api.Action{Kind: api.KindBrowser, Op: "evaluate", Script: script})
}
