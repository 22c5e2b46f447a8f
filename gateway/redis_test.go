package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// failureConfig has one route per on_store_error mode, on a Redis store
// with a 50ms deadline and a fast breaker.
const failureConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
store:
  kind: redis
  fleet_size: 2
  redis: {addrs: [REDIS], timeout: 50ms, breaker_failures: 3, breaker_cooldown: 200ms}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
policies:
  fail_open:   {on_store_error: open,   limits: {"*": {rate: 1, per: 1h, burst: 100}}}
  fail_closed: {on_store_error: closed, limits: {"*": {rate: 1, per: 1h, burst: 100}}}
  fail_local:  {on_store_error: local,  limits: {"*": {rate: 1, per: 1h, burst: 4}}}
upstreams: {up: {url: UPSTREAM}}
routes:
  - {name: open.get,   method: GET, path: /open,   upstream: up, policies: [fail_open]}
  - {name: closed.get, method: GET, path: /closed, upstream: up, policies: [fail_closed]}
  - {name: local.get,  method: GET, path: /local,  upstream: up, policies: [fail_local]}
`

func newRedisFixture(t *testing.T, srv *redistest.Server) *fixture {
	t.Helper()
	return newRedisFixtureWith(t, srv, failureConfig)
}

// newRedisFixtureWith is newRedisFixture on config (REDIS and UPSTREAM
// stand for the addresses).
func newRedisFixtureWith(t *testing.T, srv *redistest.Server, yaml string) *fixture {
	t.Helper()
	return newMeteredRedisFixture(t, srv, yaml, nil)
}

// newMeteredRedisFixture is newRedisFixtureWith recording in m (nil: no
// metrics).
func newMeteredRedisFixture(t *testing.T, srv *redistest.Server, yaml string, m *telemetry.Metrics) *fixture {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	text := strings.NewReplacer("REDIS", srv.Addr, "UPSTREAM", f.upstream.srv.URL).Replace(yaml)
	f.path = writeConfig(t, text)
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Redis.KeyPrefix = "gw" + strconv.FormatInt(time.Now().UnixNano(), 36)
	gw, err := New(cfg, Options{
		Now:       f.clock.Now,
		Metrics:   m,
		OpenStore: func(c config.Store) (*stack.Stack, error) { return openRedisStack(c, "", f.clock.Now), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return f
}

// openRedisStack opens the Redis stack of c as cmd/quotagate does, with
// password and the clock of the local shares.
func openRedisStack(c config.Store, password string, now func() time.Time) *stack.Stack {
	r := c.Redis
	return redisstore.Open(redisstore.Config{Addrs: r.Addrs, Password: password, PoolSize: r.PoolSize, Timeout: r.Timeout,
		BreakerFailures: r.BreakerFailures, BreakerCooldown: r.BreakerCooldown, Now: now, FleetSize: c.FleetSize})
}

// waitAllowed sends path until the gateway answers 200 through Redis. The
// first decisions of a fresh connection pool dial and load the script inside
// the 50ms deadline, which a loaded machine can miss: such a miss is a 503
// from the closed policy, not a wrong answer, so it is retried (the breaker
// may open meanwhile; its cooldown is 200ms) and reported as a missed
// deadline only if Redis never answers in time within 10 s.
func (f *fixture) waitAllowed(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	misses := 0
	for {
		code, _, took := f.timed(path)
		switch {
		case code == http.StatusOK:
			if misses > 0 {
				t.Logf("%s: %d decisions missed the deadline before the pool was warm", path, misses)
			}
			return
		case code != http.StatusServiceUnavailable:
			t.Fatalf("%s with Redis up: %d, want 200 (or 503 while the deadline is missed)", path, code)
		case time.Now().After(deadline):
			t.Fatalf("missed deadline: %s with Redis up still 503 after 10 s (last took %v); the machine is too slow for the 50ms store deadline", path, took)
		}
		misses++
		time.Sleep(20 * time.Millisecond) // polling a real Redis; the breaker's cooldown is real time
	}
}

// timed sends a request and returns the response and how long it took.
func (f *fixture) timed(path string) (int, http.Header, time.Duration) {
	start := time.Now()
	w := f.do("GET", path, nil, nil)
	return w.Code, w.Header(), time.Since(start)
}

// TestStoreFailureModesOnPausedRedis: with Redis frozen (SIGSTOP), an open
// policy answers 200, a closed one 503 with Retry-After, and a local one
// admits this instance's share (burst 4 over a fleet of 2 = 2) and then
// 429; the store calls end at the 50ms deadline, and once the breaker has
// opened, requests are answered without calling the store at all.
//
// Nothing is timed: the store errors are counted by kind in
// quotagate_store_errors_total ("timeout" for a call the deadline ended,
// "breaker_open" for one the breaker refused). A request that does not
// answer within waitFor is a missed deadline.
func TestStoreFailureModesOnPausedRedis(t *testing.T) {
	srv := redistest.StartStandalone(t)
	tel, m := newTestMetrics(t)
	f := newMeteredRedisFixture(t, srv, failureConfig, m)
	o := &observed{fixture: f, metrics: tel.Metrics}
	for _, p := range []string{"/open", "/closed", "/local"} {
		f.waitAllowed(t, p)
	}
	const cooldown = 200 * time.Millisecond // breaker_cooldown in failureConfig
	errorsOf := func(kind string) float64 {
		return counterValue(o.scrape(t), "quotagate_store_errors_total", map[string]string{"kind": kind})
	}
	timeouts0 := errorsOf("timeout")
	srv.Pause()
	defer srv.Resume()
	var worst time.Duration
	check := func(path string, want int) http.Header {
		t.Helper()
		code, h, took := f.timed(path)
		worst = max(worst, took)
		if took > waitFor {
			proctest.Overrun(t, "%s took %v with Redis paused; the store's deadline is 50ms", path, took)
		}
		if code != want {
			t.Fatalf("%s with Redis paused: %d, want %d", path, code, want)
		}
		return h
	}
	check("/open", http.StatusOK)
	h := check("/closed", http.StatusServiceUnavailable)
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("503 Retry-After = %q", h.Get("Retry-After"))
	}
	// The local share: the first /local request with Redis up consumed from
	// Redis, not from the share; the share starts full at 2.
	check("/local", http.StatusOK)
	check("/local", http.StatusOK)
	h = check("/local", http.StatusTooManyRequests)
	if !strings.Contains(h.Get("RateLimit-Policy"), `"fail_local"`) {
		t.Fatalf("local-share denial names %q", h.Get("RateLimit-Policy"))
	}
	// The first three failures (which open the breaker) were the store's
	// deadline, not an error of another kind.
	if n := errorsOf("timeout") - timeouts0; n < 3 {
		t.Fatalf("%v store timeouts counted with Redis paused, want at least 3 (the calls that open the breaker)", n)
	}
	// The breaker is open now (3 failures): requests are refused without a
	// store call, except a probe each time the cooldown has passed.
	refused0, timeouts1 := errorsOf("breaker_open"), errorsOf("timeout")
	start := time.Now()
	const n = 20
	for range n {
		check("/open", http.StatusOK)
	}
	elapsed := time.Since(start)
	refused, probes := errorsOf("breaker_open")-refused0, errorsOf("timeout")-timeouts1
	t.Logf("with the breaker open: %v refused, %v probes in %v; worst latency with Redis paused: %v", refused, probes, elapsed, worst)
	if refused+probes != n {
		t.Fatalf("%v refused and %v probes for %d requests with the breaker open: other store errors", refused, probes, n)
	}
	// Each probe follows a whole cooldown after the last failure, so only
	// a run of n cooldowns can have probed every time.
	if refused == 0 {
		if elapsed >= n*cooldown {
			proctest.FatalOverrun(t, "%d requests took %v, more than their %v breaker cooldowns: each was a probe", n, elapsed, cooldown)
		}
		t.Fatalf("none of %d requests in %v was refused by the open breaker (cooldown %v): every one called the store", n, elapsed, cooldown)
	}
}

// TestGatewayRecoversFromRedisRestart: Redis killed and started again empty
// on the same port; the gateway, never restarted, decides through Redis
// again once the breaker's probe succeeds.
func TestGatewayRecoversFromRedisRestart(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := newRedisFixture(t, srv)
	f.waitAllowed(t, "/closed")
	srv.Kill()
	if code, _, _ := f.timed("/closed"); code != http.StatusServiceUnavailable {
		t.Fatalf("Redis dead: %d, want 503", code)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, h, _ := f.timed("/closed")
		if code == http.StatusOK {
			if h.Get("RateLimit") == "" {
				t.Fatal("recovered response lacks RateLimit")
			}
			break
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the gateway did not decide through Redis within 10 s of its restart: last status %d", code)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the breaker's cooldown to pass
	}
	// The restarted Redis is empty: the first decision there sees a full bucket.
	if _, h, _ := f.timed("/closed"); !strings.Contains(h.Get("RateLimit"), "r=98") {
		t.Fatalf("after recovery RateLimit = %q, want the second request of a fresh bucket (r=98)", h.Get("RateLimit"))
	}
}
