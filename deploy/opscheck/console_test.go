package opscheck

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium; without it the test is skipped, or
// fails when CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed and CI=true")
	}
	t.Skip("chromium not installed")
	return ""
}

// browser starts a headless Chromium for the test and returns a tab's
// context, and a function that returns the console errors, failed
// assertions, uncaught exceptions and error log entries (failed loads) the
// page produced so far.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	// Not t.TempDir: Chromium's helpers may still write to the profile for
	// a moment after the browser is gone, which would fail its cleanup.
	profile, err := os.MkdirTemp("", "quotagate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	})

	var mu sync.Mutex
	var problems []string
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "uncaught: "+ev.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.LevelError {
				problems = append(problems, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	// The first Run starts the browser, which lives as long as the context
	// of that call: no deadline here.
	if err := chromedp.Run(ctx, cdplog.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// page drives one browser tab of a test against a gateway.
type page struct {
	t        *testing.T
	ctx      context.Context
	problems func() []string
	g        *gateway
}

// run runs actions under timeout; an error fails the test.
func (p *page) run(what string, timeout time.Duration, actions ...chromedp.Action) {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	if err := chromedp.Run(c, actions...); err != nil {
		p.t.Fatalf("%s: %v (missed deadline if the context expired)\nbrowser problems: %q\ngateway logs:\n%s", what, err, p.problems(), p.g.logs)
	}
}

// text reads an element's text in one evaluation ("" when there is no such
// element): the page replaces its table rows every second, so a node found
// by one protocol call may be gone by the next.
func (p *page) text(selector string) string {
	p.t.Helper()
	var s string
	p.run("read "+selector, 10*time.Second, chromedp.Evaluate(
		fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, selector), &s))
	return s
}

// waitText polls selector's text until ok accepts it, and returns it with
// the time it took; past timeout the test fails with a missed deadline.
func (p *page) waitText(what, selector string, timeout time.Duration, ok func(string) bool) (string, time.Duration) {
	p.t.Helper()
	start := time.Now()
	for {
		s := p.text(selector)
		if ok(s) {
			return s, time.Since(start)
		}
		if time.Since(start) > timeout {
			p.t.Fatalf("missed deadline: after %v %s still shows %q\nbrowser problems: %q", timeout, what, s, p.problems())
		}
		time.Sleep(100 * time.Millisecond) // polling the page, which updates every second
	}
}

// openConsole starts a gateway on the repository's config.yaml with env
// added, and opens its console in a new headless Chromium.
func openConsole(t *testing.T, env ...string) *page {
	t.Helper()
	ctx, problems := browser(t)
	g := startGateway(t, []string{"-config", repoPath("config.yaml")},
		append([]string{"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0"}, env...))
	p := &page{t: t, ctx: ctx, problems: problems, g: g}
	p.run("open the console", 30*time.Second, chromedp.Navigate("http://"+g.admin+"/"))
	return p
}

// TestAdminConsoleInBrowser loads the admin console of a real gateway (the
// repository's config.yaml) in headless Chromium: the page loads without
// console errors, lists every configured policy, and a burst of denied
// traffic shows in the "tenant" policy's deny ratio within a few seconds.
// With QUOTAGATE_CONSOLE_SCREENSHOT=file.png it also saves a screenshot.
func TestAdminConsoleInBrowser(t *testing.T) {
	p := openConsole(t)
	g, problems := p.g, p.problems
	for _, name := range []string{"tenant", "transfers"} {
		p.waitText("the policy table", fmt.Sprintf(`#policies tr[data-policy=%q] td`, name), 20*time.Second,
			func(s string) bool { return s == name })
	}
	fleet, config := p.text("#fleet"), p.text("#config")
	if fleet != "1 (memory)" {
		t.Errorf("fleet card = %q, want %q (config.yaml: memory store, fleet_size 1)", fleet, "1 (memory)")
	}
	if len(config) < 12 || !strings.Contains(config, "since") {
		t.Errorf("config card = %q, want a version and a time", config)
	}

	// Anonymous callers get a burst of 5 from "tenant": keep sending until
	// the page shows the denials, at most 30 s.
	stop := make(chan struct{})
	var sent sync.WaitGroup
	sent.Go(func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			if resp, err := http.Get("http://" + g.listen + "/v1/transfers/42"); err == nil {
				resp.Body.Close()
			}
		}
	})
	defer func() { close(stop); sent.Wait() }()

	ratio, took := p.waitText("the tenant's deny ratio during a burst of denied requests", `#policies tr[data-policy="tenant"] td.ratio`,
		20*time.Second, func(s string) bool {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, " %"), 64)
			return err == nil && v > 0
		})
	t.Logf("deny ratio %s shown %v after the burst began", ratio, took.Round(100*time.Millisecond))

	if path := os.Getenv("QUOTAGATE_CONSOLE_SCREENSHOT"); path != "" {
		var png []byte
		p.run("screenshot", 20*time.Second, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p := problems(); len(p) > 0 {
		t.Errorf("the page logged problems: %q", p)
	}
}

// TestAdminConsoleAsksForTheToken runs the gateway with an admin token: the
// page shows only what the open /metrics holds until the token is given, a
// wrong token is refused, and the right one brings the protected state
// (config version, policies' settings).
func TestAdminConsoleAsksForTheToken(t *testing.T) {
	const token = "console-test-token-0123456789"
	p := openConsole(t, "QUOTAGATE_SERVER_ADMIN_TOKEN_ENV=QG_ADMIN_TOKEN", "QG_ADMIN_TOKEN="+token)
	needsToken := func(s string) bool { return strings.Contains(s, "admin token") }
	p.waitText("the token prompt", "#token-why", 20*time.Second, needsToken)
	// What comes from the open /metrics shows; what comes from the
	// protected /console/state does not.
	if s := p.text("#config"); s != "–" {
		t.Errorf("without the token the config card shows %q", s)
	}
	p.run("give a wrong token", 10*time.Second,
		chromedp.SendKeys("#token", "wrong-token", chromedp.ByQuery),
		chromedp.Click("#token-form button", chromedp.ByQuery))
	// Two more polls of the page (its status line names each one's time).
	for range 2 {
		before := p.text("#status")
		p.waitText("the next poll", "#status", 20*time.Second, func(s string) bool { return s != before })
	}
	if s := p.text("#config"); s != "–" || !needsToken(p.text("#token-why")) {
		t.Errorf("with a wrong token the config card shows %q and the prompt %q", s, p.text("#token-why"))
	}
	p.run("give the token", 10*time.Second,
		chromedp.Evaluate(`document.getElementById("token").value = ""`, nil),
		chromedp.SendKeys("#token", token, chromedp.ByQuery),
		chromedp.Click("#token-form button", chromedp.ByQuery))
	p.waitText("the config card after the token", "#config", 20*time.Second,
		func(s string) bool { return strings.Contains(s, "since") })
	if s := p.text(`#policies tr[data-policy="transfers"] td:nth-child(3)`); s != "closed" {
		t.Errorf("after the token the transfers policy's on_store_error shows %q, want closed (from /console/state)", s)
	}
	// The only problems are the refused reads before the token.
	for _, pr := range p.problems() {
		if !strings.Contains(pr, "401") {
			t.Errorf("the page logged %q", pr)
		}
	}
}
