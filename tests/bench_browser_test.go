package tests

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"

	"github.com/sandboxd/sandboxd/api"
)

// benchPage is a simple page: a heading, some text, a form.
const benchPage = `<!doctype html><title>Bench</title><h1>Benchmark page</h1>
<p>Some text to read, with <a href="/a">a link</a> and <a href="/b">another</a>.</p>
<form><label>Name <input name="n"></label><label>Mail <input name="m" type="email"></label>
<select name="s"><option>One</option><option>Two</option></select><button>Send</button></form>
<ul><li>first</li><li>second</li><li>third</li></ul>`

// BenchmarkBrowserSnapshot: the `snapshot` op of a loaded loopback page
// over the REST API (a process sandbox), against rod driving a Chromium
// it launched itself doing the same reads (target info, the page's
// innerText, the full accessibility tree) in the same run; and the
// first browser action of a sandbox (the browser's start).
func BenchmarkBrowserSnapshot(b *testing.B) {
	chromium, err := exec.LookPath("chromium")
	require(b, "chromium", err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, benchPage) })}
	go srv.Serve(l)
	defer srv.Close()
	url := "http://" + l.Addr().String() + "/"

	_, c := benchDaemon(b)
	ctx := context.Background()
	var firsts []time.Duration
	for range 3 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		o, err := c.Browse(ctx, sb.ID, url)
		if err != nil || o.Title != "Bench" {
			b.Fatalf("first goto: %+v %v", o, err)
		}
		firsts = append(firsts, time.Since(start))
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if o, err := c.Browse(ctx, sb.ID, url); err != nil || o.Title != "Bench" {
		b.Fatalf("goto: %+v %v", o, err)
	}
	snapshot := func() error {
		o, err := c.Snapshot(ctx, sb.ID)
		if err == nil && !strings.Contains(o.AXTree, `button "Send"`) {
			err = fmt.Errorf("snapshot: %q", o.AXTree)
		}
		return err
	}

	// The floor: rod and the same Chromium, no daemon.
	u, err := launcher.New().Bin(chromium).Headless(true).NoSandbox(true).Leakless(false).
		Set("disable-gpu").Set("disable-dev-shm-usage").Launch()
	if err != nil {
		b.Fatalf("launch chromium: %v", err)
	}
	browser := rod.New().ControlURL(u)
	if err := browser.Connect(); err != nil {
		b.Fatal(err)
	}
	defer browser.Close()
	page, err := browser.Page(proto.TargetCreateTarget{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	if err := page.WaitLoad(); err != nil {
		b.Fatal(err)
	}
	floorSnapshot := func() error {
		if _, err := (proto.TargetGetTargetInfo{TargetID: page.TargetID}).Call(page); err != nil {
			return err
		}
		if _, err := (proto.RuntimeEvaluate{Expression: "document.body.innerText", ReturnByValue: true}).Call(page); err != nil {
			return err
		}
		tree, err := proto.AccessibilityGetFullAXTree{}.Call(page)
		if err == nil && len(tree.Nodes) < 10 {
			err = fmt.Errorf("floor tree has %d nodes", len(tree.Nodes))
		}
		return err
	}
	n := max(b.N, 100)
	for range 20 {
		if err := snapshot(); err != nil {
			b.Fatal(err)
		}
		if err := floorSnapshot(); err != nil {
			b.Fatal(err)
		}
	}
	// Interleaved, so both see the same machine.
	var got, floor []time.Duration
	b.ResetTimer()
	for range n {
		start := time.Now()
		if err := floorSnapshot(); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(start))
		start = time.Now()
		if err := snapshot(); err != nil {
			b.Fatal(err)
		}
		got = append(got, time.Since(start))
	}
	b.StopTimer()
	g, f := p50(got), p50(floor)
	b.ReportMetric(float64(g.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "floor-rod-p50-ms")
	b.ReportMetric(float64(g)/float64(f), "ratio")
	b.ReportMetric(float64(p50(firsts).Milliseconds()), "first-action-ms")
}
