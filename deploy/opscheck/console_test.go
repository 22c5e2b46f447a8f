package opscheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// eval evaluates a JavaScript expression that yields a string.
func (p *page) eval(expr string) string {
	p.t.Helper()
	var s string
	p.run("evaluate "+expr, 10*time.Second, chromedp.Evaluate(expr, &s))
	return s
}

// waitEval polls expr (a string-valued JavaScript expression) until ok
// accepts its value, and returns it; past timeout the test fails with a
// missed deadline.
func (p *page) waitEval(what, expr string, timeout time.Duration, ok func(string) bool) string {
	p.t.Helper()
	start := time.Now()
	for {
		s := p.eval(expr)
		if ok(s) {
			return s
		}
		if time.Since(start) > timeout {
			p.t.Fatalf("missed deadline: after %v %s is still %q\nbrowser problems: %q", timeout, what, s, p.problems())
		}
		time.Sleep(100 * time.Millisecond) // polling the page, which updates every second
	}
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
	return openConsoleOn(t, repoPath("config.yaml"), env...)
}

// openConsoleOn is openConsole on the configuration file config.
func openConsoleOn(t *testing.T, config string, env ...string) *page {
	t.Helper()
	ctx, problems := browser(t)
	g := startGateway(t, []string{"-config", config},
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

// supportConfig is a gateway for the console's support test: one API key
// (tenant globex) and one policy, "daily", of 10 units a day, so that
// nothing refills during the test; upstream is the URL of the upstream.
const supportConfig = `
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
identity:
  api_keys:
    - {key_sha256: KEYHASH, tenant: globex, tier: pro}
tiers:
  pro: {}
policies:
  daily:
    limits:
      "*": {rate: 10, per: 24h, burst: 10}
upstreams:
  app: {url: UPSTREAM, timeout: 2s}
routes:
  - {name: items.get, method: GET, path: "/v1/items", upstream: app, policies: [daily]}
`

// TestAdminConsoleHistoryAndSupport loads the console of a real gateway
// in headless Chromium and uses what support staff use: the history chart
// draws the gateway's own samples, the decisions of six requests among
// them; a lookup of the tenant by name shows its key of "daily" at 4 of
// 10; a grant of 3 with a reason shows 7 in the next lookup, a reset 10;
// both are counted in quotagate_console_actions_total and logged with the
// reason; and the page logs no problem. With
// QUOTAGATE_CONSOLE_SUPPORT_SCREENSHOT=file.png it also saves a screenshot.
func TestAdminConsoleHistoryAndSupport(t *testing.T) {
	const key = "console-support-key-0123456789"
	p := openConsoleOn(t, writeSupportConfig(t, supportConfig, key))
	g := p.g
	for i := range 6 {
		req, _ := http.NewRequest("GET", "http://"+g.listen+"/v1/items", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d, want 200 (10 a day)", i, resp.StatusCode)
		}
	}

	// The chart of decisions: at least two samples, one of them above the
	// baseline (y < 96 of a height of 100) with the six decisions.
	chart := `(() => { const s = document.getElementById("chart-decisions"); const l = s.querySelector("polyline.s0");
		if (!l) return ""; const ys = l.getAttribute("points").trim().split(" ").map((p) => parseFloat(p.split(",")[1]));
		return s.dataset.points + " " + Math.min(...ys); })()`
	drawn := p.waitEval("the decisions chart", chart, 30*time.Second, func(s string) bool {
		var n int
		var top float64
		_, err := fmt.Sscanf(s, "%d %g", &n, &top)
		return err == nil && n >= 2 && top < 96
	})
	t.Logf("decisions chart: %s (points, highest y)", drawn)
	if now := p.text("#now-latency"); !strings.Contains(now, " / ") && !strings.Contains(now, "no store decision") {
		t.Errorf("the latency chart's values read %q", now)
	}

	remaining := `#lookup tr[data-key="daily/"] td.remaining`
	p.waitEval("the support section", `document.getElementById("support").hidden ? "hidden" : "shown"`, 20*time.Second,
		func(s string) bool { return s == "shown" })
	p.run("look the tenant up", 10*time.Second,
		chromedp.SendKeys("#lookup-who", "globex", chromedp.ByQuery),
		chromedp.Click("#lookup-form button", chromedp.ByQuery))
	p.waitText("daily's remaining after 6 requests", remaining, 10*time.Second, func(s string) bool { return s == "4" })
	if s := p.text("#lookup-status"); !strings.Contains(s, "globex (api_key, tier pro") {
		t.Errorf("lookup status %q, want the tenant, its kind and tier", s)
	}

	p.run("grant 3 units", 10*time.Second,
		chromedp.SetValue("#action-units", "3", chromedp.ByQuery),
		chromedp.SendKeys("#action-reason", "ticket 77: opscheck", chromedp.ByQuery),
		chromedp.SendKeys("#action-by", "opscheck", chromedp.ByQuery),
		chromedp.Click("#action-grant", chromedp.ByQuery))
	p.waitText("daily's remaining after a grant of 3", remaining, 10*time.Second, func(s string) bool { return s == "7" })
	if s := p.text("#action-status"); !strings.Contains(s, "granted 3 units of daily") {
		t.Errorf("action status %q after the grant", s)
	}
	p.run("reset the key", 10*time.Second, chromedp.Click("#action-reset", chromedp.ByQuery))
	p.waitText("daily's remaining after a reset", remaining, 10*time.Second, func(s string) bool { return s == "10" })

	ss := g.scrape(t)
	for _, action := range []string{"grant", "reset"} {
		if v := metricValue(ss, "quotagate_console_actions_total", map[string]string{"action": action, "result": "applied"}); v != 1 {
			t.Errorf("quotagate_console_actions_total{action=%q,result=applied} = %v, want 1", action, v)
		}
	}
	var logged int
	for line := range strings.SplitSeq(g.logs.String(), "\n") {
		var rec struct {
			Msg, Level, Action, Reason, By string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "console action" {
			logged++
			if rec.Level != "WARN" || rec.Reason != "ticket 77: opscheck" || rec.By != "opscheck" {
				t.Errorf("console action logged as %+v", rec)
			}
		}
	}
	if logged != 2 {
		t.Errorf("%d console actions logged, want 2; logs:\n%s", logged, g.logs)
	}
	if strings.Contains(g.logs.String(), key) {
		t.Error("the logs hold the API key")
	}
	if path := os.Getenv("QUOTAGATE_CONSOLE_SUPPORT_SCREENSHOT"); path != "" {
		var png []byte
		p.run("screenshot", 20*time.Second, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if pr := p.problems(); len(pr) > 0 {
		t.Errorf("the page logged problems: %q", pr)
	}
}

// regionsConfig is supportConfig as region eu of a cross-region quota:
// policy "quota" of 100 a second shared across regions, reports every
// 200 ms, grants for 1 s; REGIONAL and GLOBAL are the addresses of the
// regional and the global redis-server.
var regionsConfig = strings.NewReplacer(
	"identity:", `store:
  kind: redis
  redis: {addrs: [REGIONAL]}
  region: eu
  global:
    redis: {addrs: [GLOBAL], timeout: 100ms}
    report_interval: 200ms
    lease_ttl: 1s
identity:`,
	"daily:\n", "quota:\n    on_store_error: closed\n    regions: {mode: leased, safe_share: 0.2}\n",
	"{rate: 10, per: 24h, burst: 10}", "{rate: 100, per: 1s, burst: 100}",
	"[daily]", "[quota]").Replace(supportConfig)

// writeSupportConfig starts the upstream of a support config and writes
// the config (text, with KEYHASH the SHA-256 of key, UPSTREAM the
// upstream's URL and the pairs of replace applied) to a file of the test.
func writeSupportConfig(t *testing.T, text, key string, replace ...string) string {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(upstream.Close)
	sum := sha256.Sum256([]byte(key))
	config := filepath.Join(t.TempDir(), "config.yaml")
	text = strings.NewReplacer(append([]string{"KEYHASH", hex.EncodeToString(sum[:]), "UPSTREAM", upstream.URL}, replace...)...).Replace(text)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// TestAdminConsoleShowsRegions loads the console of a real gateway of
// region eu in headless Chromium, under about 20 requests a second of a
// quota of 100 a second shared across regions: the regions panel shows
// the region, its reporter, the policy granted the whole 100/s (the only
// region asking gets the capacity), a demand and a utilisation above 0,
// and the region connected; with the global Redis stopped, the panel
// shows the region partitioned once lease_ttl has passed.
func TestAdminConsoleShowsRegions(t *testing.T) {
	const key = "console-regions-key-0123456789"
	regional, global := startRedis(t), startRedis(t)
	p := openConsoleOn(t, writeSupportConfig(t, regionsConfig, key, "REGIONAL", regional.addr, "GLOBAL", global.addr))
	g := p.g
	stop := make(chan struct{})
	var sent sync.WaitGroup
	var codesMu sync.Mutex
	codes := map[int]int{}
	sent.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest("GET", "http://"+g.listen+"/v1/items", nil)
			req.Header.Set("X-API-Key", key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				codesMu.Lock()
				codes[resp.StatusCode]++
				codesMu.Unlock()
			}
		}
	})
	defer func() { close(stop); sent.Wait() }()
	defer func() {
		codesMu.Lock()
		defer codesMu.Unlock()
		t.Logf("answers by status: %v", codes)
	}()

	row := `#region-classes tr[data-policy="quota"] `
	granted, took := p.waitText("the policy's granted rate", row+"td.granted", 30*time.Second, func(s string) bool { return s == "100" })
	t.Logf("granted %s/s shown %v after the console opened", granted, took.Round(100*time.Millisecond))
	// Demand and utilisation are those of the last report (one interval
	// of 200 ms: 4 requests, or none on a busy machine).
	p.waitText("the policy's demand", row+"td.demand", 10*time.Second, func(s string) bool {
		v, err := strconv.ParseFloat(s, 64)
		return err == nil && v > 0
	})
	util, _ := p.waitText("the policy's utilisation", row+"td.utilisation", 10*time.Second, func(s string) bool {
		u, err := strconv.ParseFloat(strings.TrimSuffix(s, " %"), 64)
		return err == nil && u > 0
	})
	if u, _ := strconv.ParseFloat(strings.TrimSuffix(util, " %"), 64); u > 100 {
		t.Errorf("utilisation %q, want at most 100 %% (admitted within the grant)", util)
	}
	if s := p.text(row + "td.partition"); s != "connected" {
		t.Errorf("partition %q, want connected", s)
	}
	if s := p.text("#region-name"); s != "eu, this instance reports" {
		t.Errorf("region %q, want eu, this instance reports", s)
	}
	if s := p.text(row + "td.safe"); s != "20 %" {
		t.Errorf("safe share %q, want 20 %%", s)
	}
	t.Logf("demand %s/s, admitted %s/s, utilisation %s", p.text(row+"td.demand"), p.text(row+"td.admitted"), util)

	// The global owner stops answering: past lease_ttl the region is
	// partitioned.
	if err := global.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer global.cmd.Process.Signal(syscall.SIGCONT)
	_, took = p.waitText("the partition", row+"td.partition", 20*time.Second, func(s string) bool { return s == "partitioned" })
	t.Logf("partitioned shown %v after the global Redis stopped (lease_ttl 1s)", took.Round(100*time.Millisecond))
	if s := p.text("#region-state"); !strings.HasPrefix(s, "partitioned (last report ") {
		t.Errorf("region state %q, want partitioned (last report …)", s)
	}
	if pr := p.problems(); len(pr) > 0 {
		t.Errorf("the page logged problems: %q", pr)
	}
}
