package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// fallbackOnlyConfig is failureConfig with its closed policy in shadow
// mode and another closed one no route uses: no enforced policy fails
// closed.
var fallbackOnlyConfig = strings.NewReplacer(
	"fail_closed: {on_store_error: closed,", "fail_closed: {on_store_error: closed, shadow: true,",
	"policies:\n", "policies:\n  unused: {on_store_error: closed, limits: {\"*\": {rate: 1, per: 1h, burst: 1}}}\n",
).Replace(failureConfig)

// readyz calls /readyz of f's admin handler and decodes its body.
func (f *fixture) readyz(t *testing.T) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	f.gw.Admin(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %q: %v", w.Body.String(), err)
	}
	return w.Code, body
}

// names returns body[field] as strings (nil when absent).
func names(body map[string]any, field string) []string {
	list, _ := body[field].([]any)
	var out []string
	for _, v := range list {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// TestReadyzFollowsOnStoreError: with Redis stopped, a gateway whose
// enforced policies all fall back (open, local) keeps serving, so /readyz
// answers 200 "degraded" and names the store's state; a closed policy —
// but not a shadow one, which denies nobody — makes it 503. With Redis up
// both are plain "ready".
func TestReadyzFollowsOnStoreError(t *testing.T) {
	srv := redistest.StartStandalone(t)
	degradable := newRedisFixtureWith(t, srv, fallbackOnlyConfig)
	strict := newRedisFixture(t, srv)
	for _, f := range []*fixture{degradable, strict} {
		if code, body := f.readyz(t); code != http.StatusOK || body["status"] != "ready" || body["store"] != nil {
			t.Fatalf("Redis up: /readyz = %d %v, want 200 ready", code, body)
		}
	}

	srv.Kill()
	code, body := degradable.readyz(t)
	if code != http.StatusOK || body["status"] != "degraded" || body["store"] != "store unreachable" {
		t.Errorf("Redis stopped, only open/local policies: /readyz = %d %v, want 200 degraded, store unreachable", code, body)
	}
	if got := names(body, "fail_open"); !slices.Equal(got, []string{"fail_open"}) {
		t.Errorf("fail_open = %v, want [fail_open]", got)
	}
	if got := names(body, "fail_local"); !slices.Equal(got, []string{"fail_local"}) {
		t.Errorf("fail_local = %v, want [fail_local]", got)
	}
	if got := names(body, "fail_closed"); len(got) != 0 {
		t.Errorf("fail_closed = %v, want none (the shadow policy and the unused one deny nobody)", got)
	}
	// It does serve: the open policy admits, the local one its share.
	for _, path := range []string{"/open", "/closed", "/local"} {
		if code, _, _ := degradable.timed(path); code != http.StatusOK {
			t.Errorf("%s with Redis stopped: %d, want 200", path, code)
		}
	}

	code, body = strict.readyz(t)
	if code != http.StatusServiceUnavailable || body["status"] != "store unreachable" || body["store"] != "store unreachable" {
		t.Errorf("Redis stopped, a closed policy: /readyz = %d %v, want 503 store unreachable", code, body)
	}
	if got := names(body, "fail_closed"); !slices.Equal(got, []string{"fail_closed"}) {
		t.Errorf("fail_closed = %v, want [fail_closed]", got)
	}

	// The breaker open (every domain) is the same rule, without a PING.
	for i := 0; i < 5; i++ {
		degradable.timed("/open")
	}
	if code, body := degradable.readyz(t); code != http.StatusOK || body["status"] != "degraded" || body["store"] != "store circuit open" {
		t.Errorf("breaker open, only open/local policies: /readyz = %d %v, want 200 degraded, store circuit open", code, body)
	}
}

// TestReadyzClusterCircuitOpen: once every primary of a real Cluster has
// died and the breaker of each is open,
// /readyz says "store circuit open" (503 with a closed policy enforced,
// 200 "degraded" without), not "store unreachable" from a PING: the
// breaker of the decisions made before the slot map was known, closed
// since, does not count.
func TestReadyzClusterCircuitOpen(t *testing.T) {
	c := redistest.StartCluster(t, 2)
	cluster := func(yaml, path string) (*fixture, string) {
		f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
		// A cooldown far longer than the test: the breakers stay open.
		text := strings.NewReplacer("REDIS", strings.Join(c.Addrs(), ", "), "UPSTREAM", f.upstream.srv.URL,
			"breaker_cooldown: 200ms", "breaker_cooldown: 1h").Replace(yaml)
		f.path = writeConfig(t, text)
		cfg, err := config.Load(f.path, testGetenv)
		if err != nil {
			t.Fatal(err)
		}
		gw, err := New(cfg, Options{Now: f.clock.Now, OpenStore: func(s config.Store) (*stack.Stack, error) {
			r := s.Redis
			// A static fleet: no heartbeat counts in a breaker of its own.
			return redisstore.Open(redisstore.Config{Addrs: r.Addrs, PoolSize: r.PoolSize, Timeout: r.Timeout,
				BreakerFailures: r.BreakerFailures, BreakerCooldown: r.BreakerCooldown, Now: f.clock.Now,
				FleetSize: s.FleetSize, FleetStatic: true, KeyPrefix: r.KeyPrefix}), nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gw.Close() })
		f.gw = gw
		return f, path
	}
	strict, strictPath := cluster(failureConfig, "/closed")
	degradable, degradablePath := cluster(fallbackOnlyConfig, "/open")
	// Anonymous callers from 16 addresses: their keys fall on both
	// primaries, so that each primary's breaker opens below (a primary
	// no decision reached counts as closed).
	from := func(f *fixture, path string, i int) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:4321", 20+i)
		w := httptest.NewRecorder()
		f.gw.ServeHTTP(w, r)
		return w.Code
	}
	for f, path := range map[*fixture]string{strict: strictPath, degradable: degradablePath} {
		for i := range 16 {
			if code := from(f, path, i); code != http.StatusOK {
				t.Fatalf("%s with the Cluster up: %d, want 200", path, code)
			}
		}
	}
	for _, n := range c.Nodes() {
		n.Kill()
	}
	// breaker_failures is 3 in failureConfig; the cooldown is an hour.
	for f, path := range map[*fixture]string{strict: strictPath, degradable: degradablePath} {
		for range 3 {
			for i := range 16 {
				from(f, path, i)
			}
		}
	}
	if code, body := strict.readyz(t); code != http.StatusServiceUnavailable || body["status"] != "store circuit open" || body["store"] != "store circuit open" {
		t.Errorf("every primary down, breakers open, a closed policy: /readyz = %d %v, want 503 store circuit open", code, body)
	}
	if code, body := degradable.readyz(t); code != http.StatusOK || body["status"] != "degraded" || body["store"] != "store circuit open" {
		t.Errorf("every primary down, breakers open, only open/local policies: /readyz = %d %v, want 200 degraded, store circuit open", code, body)
	}
}
