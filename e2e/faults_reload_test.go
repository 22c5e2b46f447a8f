package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// fleetCount sends n requests of tenant key spread over gws, one after
// another, and returns how many were admitted and the statuses.
func fleetCount(t *testing.T, gws []*gateway, path, key string, n int) (admitted int, statuses string) {
	t.Helper()
	client := newClient(1)
	defer client.CloseIdleConnections()
	var codes []string
	for i := range n {
		o := do(client, call{base: gws[i%len(gws)].URL, path: path, key: key}, false)
		codes = append(codes, fmt.Sprint(o.status))
		if o.status == 200 {
			admitted++
		}
	}
	return admitted, strings.Join(codes, " ")
}

// TestFaultReloadUnderTraffic: three gateways take traffic while their
// config files are rewritten and each gets SIGHUP. The new config changes a
// tier's limit (burst 5 → 8), adds a route, and changes the store section
// (pool_size), so each gateway builds a new Redis client and retires the
// old one. Expectation: zero failed requests (no 5xx, nothing unanswered;
// the traffic's limit is never reached, so only 200), every gateway counts
// one successful reload, and afterwards the new limit holds fleet-wide
// (a fresh tenant gets exactly 8) and the new route answers.
func TestFaultReloadUnderTraffic(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr}, "acme")
	cfg.Tiers["probe"] = tierCfg{}
	cfg.addKey("key-probe-old", "probe-old", "probe")
	cfg.addKey("key-probe-new", "probe-new", "probe")
	cfg.Policies["tenant"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{
		"std":   bucket(100000, "1s", 100000),
		"probe": bucket(1, "1h", 5),
	}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gws := startGateways(t, 3, cfg)
	if n, got := fleetCount(t, gws, "/ok/x", "key-probe-old", 8); n != 5 {
		t.Fatalf("before the reload the probe tier admitted %d of 8 (%s), want 5", n, got)
	}

	next := cfg.clone(t)
	next.Policies["tenant"].Limits["probe"] = bucket(1, "1h", 8)
	next.Store.Redis.PoolSize = 32
	next.route("items.new", "GET", "/new/{rest...}", 1, "tenant")

	var outs []outcome
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		outs = load{workers: 48, duration: 3 * time.Second, pace: 2 * time.Millisecond, next: func(w, i int) call {
			return call{base: gws[w%3].URL, path: "/ok/x", key: "key-acme"}
		}}.run(t)
	}()
	time.Sleep(time.Second) // traffic on the old config first
	reloadAt := time.Now()
	for _, g := range gws {
		g.reload(next)
		time.Sleep(100 * time.Millisecond) // staggered, as a rollout would be
	}
	for _, g := range gws {
		g.waitMetric(10*time.Second, 1, "quotagate_config_reloads_total", "result=ok")
	}
	reloaded := time.Since(reloadAt)
	wg.Wait()

	s := summarize(outs, nil)
	t.Logf("reload under traffic: %s, worst %v; all three reloaded within %v", s.mix(), s.worst(), reloaded.Round(time.Millisecond))
	if s.unanswered > 0 || !s.only(200) {
		t.Errorf("during the reload: %s (first error %v), want only 200", s.mix(), s.firstErr)
	}
	for _, g := range gws {
		if v := g.metric("quotagate_config_reloads_total", "result=error"); v != 0 {
			t.Errorf("%s counted %v failed reloads", g.name, v)
		}
	}
	n, got := fleetCount(t, gws, "/ok/x", "key-probe-new", 11)
	if n != 8 {
		t.Errorf("after the reload a fresh probe tenant got %s: %d admitted, want 8", got, n)
	}
	if o := do(newClient(1), call{base: gws[2].URL, path: "/new/x", key: "key-acme"}, false); o.status != http.StatusOK {
		t.Errorf("the route added by the reload answered %d, want 200", o.status)
	}
	recordFault(t, faultRecord{
		Fault:      "SIGHUP reload of 3 gateways under traffic (limit, route and store section changed)",
		Expect:     "zero failed requests; new limit (8) in force fleet-wide",
		Mix:        s.mix(),
		Worst:      s.worst(),
		Unanswered: s.unanswered,
		Over:       fmt.Sprintf("%d (fresh tenant after reload: %d of limit 8)", max(0, n-8), n),
	})
}

// TestFaultBrokenReload: a config that does not load (an unknown key) and
// then one that does not validate (burst on a window algorithm) are each
// refused on SIGHUP: the gateway keeps serving, counts each in
// quotagate_config_reloads_total{result="error"}, logs it, and the old
// limits stay in force. A valid config after that is accepted.
func TestFaultBrokenReload(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "a", "b", "c", "d")
	cfg.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 5)}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gw := startGateway(t, "gw", cfg)
	gws := []*gateway{gw}

	// An unknown key: a typo must not silently drop a limit.
	typo := strings.Replace(gw.configJSON(cfg), `"policies"`, `"polices"`, 1)
	writeFileAtomic(t, gw.cfgPath, []byte(typo))
	gw.hup()
	gw.waitMetric(5*time.Second, 1, "quotagate_config_reloads_total", "result=error")
	if n, got := fleetCount(t, gws, "/ok/x", "key-a", 8); n != 5 {
		t.Errorf("after a refused reload tenant a got %s: %d admitted, want the old limit 5", got, n)
	}

	// A config that parses but does not validate.
	bad := cfg.clone(t)
	bad.Policies["tenant"] = policyCfg{Algorithm: "fixed_window", Limits: map[string]limitCfg{"std": bucket(50, "1s", 50)}}
	gw.reload(bad)
	gw.waitMetric(5*time.Second, 2, "quotagate_config_reloads_total", "result=error")
	if n, got := fleetCount(t, gws, "/ok/x", "key-b", 8); n != 5 {
		t.Errorf("after the second refused reload tenant b got %s: %d admitted, want the old limit 5", got, n)
	}
	if ok := gw.metric("quotagate_config_reloads_total", "result=ok"); ok != 0 {
		t.Errorf("%v reloads counted ok, want 0", ok)
	}
	if gw.exited() || readyzStatus(gw) != 200 {
		t.Errorf("gateway not ready after refused reloads (exited: %v)", gw.exited())
	}
	if n := gw.logs.Count("config reload rejected"); n < 2 {
		t.Errorf("%d rejected reloads logged, want 2", n)
	}

	good := cfg.clone(t)
	good.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 3)}}
	gw.reload(good)
	gw.waitMetric(5*time.Second, 1, "quotagate_config_reloads_total", "result=ok")
	n, got := fleetCount(t, gws, "/ok/x", "key-c", 8)
	if n != 3 {
		t.Errorf("after a valid reload tenant c got %s: %d admitted, want the new limit 3", got, n)
	}
	recordFault(t, faultRecord{
		Fault:  "reload of a broken config (unknown key; then burst on fixed_window)",
		Expect: "refused, counted result=error, old limit stays; a valid one is then accepted",
		Mix: fmt.Sprintf("reloads error=%v ok=%v; tenant after refusals admitted 5 of 8; after valid reload %d of 8",
			gw.metric("quotagate_config_reloads_total", "result=error"), gw.metric("quotagate_config_reloads_total", "result=ok"), n),
		Over: "0",
	})
}

// TestReloadOnFileChange: with the file watcher on, rewriting the config
// file (no signal) reloads it: the new limit applies to a fresh tenant.
func TestReloadOnFileChange(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "a", "b")
	cfg.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 5)}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gw := startGateway(t, "gw", cfg, withArgs("-watch-interval", "100ms"))
	next := cfg.clone(t)
	next.Policies["tenant"].Limits["std"] = bucket(1, "1h", 2)
	gw.writeConfig(next)
	gw.waitMetric(5*time.Second, 1, "quotagate_config_reloads_total", "result=ok")
	if n, got := fleetCount(t, []*gateway{gw}, "/ok/x", "key-b", 5); n != 2 {
		t.Errorf("after the file changed tenant b got %s: %d admitted, want the new limit 2", got, n)
	}
}
