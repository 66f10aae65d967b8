package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/executors"
)

const benchPage = `<!doctype html><title>Bench</title><h1>Benchmark page</h1>
<p>Some text to read, with <a href="/a">a link</a> and <a href="/b">another</a>.</p>
<form><label>Name <input name="n"></label><label>Mail <input name="m" type="email"></label>
<select name="s"><option>One</option><option>Two</option></select><button>Send</button></form>
<ul><li>first</li><li>second</li><li>third</li></ul>`

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// BenchmarkExecutorSnapshot is the snapshot op without the daemon (the
// executor and its pipe transport) against rod over its websocket doing
// the same reads, in the same run; tests/ has the REST benchmark.
func BenchmarkExecutorSnapshot(b *testing.B) {
	needChromium(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, benchPage) })}
	go srv.Serve(l)
	defer srv.Close()
	url := "http://" + l.Addr().String() + "/"
	e := New(sandbox(b), Config{})
	defer e.Close(context.Background())
	ctx := context.Background()
	snapshot := func() error {
		_, err := e.Execute(ctx, &api.Action{Kind: api.KindBrowser, Op: "snapshot"}, executors.Discard)
		return err
	}
	if _, err := e.Execute(ctx, &api.Action{Kind: api.KindBrowser, Op: "goto", URL: url}, executors.Discard); err != nil {
		b.Fatal(err)
	}
	chromium, _ := exec.LookPath("chromium")
	u, err := launcher.New().Bin(chromium).Headless(true).NoSandbox(true).Leakless(false).Set("disable-gpu").Launch()
	if err != nil {
		b.Fatal(err)
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
	_ = page.WaitLoad()
	floor := func() error {
		if _, err := (proto.RuntimeEvaluate{Expression: "document.body.innerText", ReturnByValue: true}).Call(page); err != nil {
			return err
		}
		_, err := proto.AccessibilityGetFullAXTree{}.Call(page)
		return err
	}
	var got, fl []time.Duration
	b.ResetTimer()
	for range max(b.N, 100) {
		s := time.Now()
		if err := floor(); err != nil {
			b.Fatal(err)
		}
		fl = append(fl, time.Since(s))
		s = time.Now()
		if err := snapshot(); err != nil {
			b.Fatal(err)
		}
		got = append(got, time.Since(s))
	}
	b.ReportMetric(float64(p50(got).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p50(fl).Microseconds())/1000, "floor-rod-p50-ms")
}
