package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// accuracyTimeout is the store deadline of the accuracy tests. They check
// what the limiter decides, not how fast: with a deadline long enough for a
// loaded two-core machine, any store failure is a finding (their policies
// fail closed, so one shows as a 503).
const accuracyTimeout = "500ms"

// limiterConfig is the config the fleet and fault tests start from: the
// Redis store at addrs with the accuracyTimeout deadline, tier "std" without a local
// stage (so only the fleet-wide stage decides), and the API key "key-<t>"
// for each tenant t of tier std. Tests add policies and routes.
func limiterConfig(upstreamURL string, addrs []string, tenants ...string) *gwConfig {
	c := baseConfig(upstreamURL)
	if len(addrs) > 0 {
		c.useRedis(accuracyTimeout, addrs...)
	}
	c.Tiers["std"] = tierCfg{}
	for _, tn := range tenants {
		c.addKey("key-"+tn, tn, "std")
	}
	return c
}

// roundRobin spreads request i of worker w over gws.
func roundRobin(gws []*gateway, w, i int) *gateway { return gws[(w+i)%len(gws)] }

// TestFleetExactBurst: two gateways share one Redis; 200 concurrent requests
// of one tenant against a token bucket of burst 50 that refills 1 unit per
// hour admit exactly 50 and deny the other 150 with 429. Every Redis key the
// gateways wrote carries a hash tag and an expiry.
func TestFleetExactBurst(t *testing.T) {
	const burst = 50
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr}, "acme")
	cfg.Policies["tenant"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", burst)}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gws := startGateways(t, 2, cfg)

	out := load{workers: 200, perWorker: 1, keepBody: true, next: func(w, i int) call {
		return call{base: roundRobin(gws, w, i).URL, path: "/ok/" + strconv.Itoa(w), key: "key-acme"}
	}}.run(t)
	s := summarize(out, nil)
	t.Logf("200 concurrent requests, burst %d: %s, worst %v", burst, s.mix(), s.worst())
	if s.unanswered > 0 {
		t.Fatalf("%d requests unanswered (first error: %v)", s.unanswered, s.firstErr)
	}
	if s.status[200] != burst || s.status[429] != 200-burst {
		t.Errorf("status mix %s, want exactly 200:%d 429:%d", s.mix(), burst, 200-burst)
	}
	for _, o := range out {
		if o.status == 429 {
			checkDenial(t, o, "tenant")
			break
		}
	}

	keys := redisKeys(t, rs)
	if len(keys) == 0 {
		t.Fatal("no keys in Redis after admitting requests")
	}
	for _, k := range keys {
		if tag := redistest.HashTag(k); tag == k {
			t.Errorf("key %q has no hash tag", k)
		}
		if strings.Contains(k, "acme") || strings.Contains(k, "key-acme") {
			t.Errorf("key %q contains the tenant or key in clear", k)
		}
		pttl, ok := rs.MustDo(t, "PTTL", k).(int64)
		// Empty from full at 1 unit per hour: full again within burst hours.
		if !ok || pttl <= 0 || pttl > burst*int64(time.Hour/time.Millisecond) {
			t.Errorf("key %q: PTTL %v, want 0 < PTTL <= %dh", k, pttl, burst)
		}
	}
}

// checkDenial asserts the documented shape of a 429: Retry-After of at least
// one whole second, problem+json with error rate_limited, the denying
// policy, and the RateLimit headers.
func checkDenial(t *testing.T, o outcome, policy string) {
	t.Helper()
	ra, err := strconv.Atoi(o.header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("429 Retry-After %q, want whole seconds >= 1", o.header.Get("Retry-After"))
	}
	if ct := o.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("429 Content-Type %q", ct)
	}
	var p struct {
		Error, Policy string
		Status        int
	}
	if err := json.Unmarshal(o.body, &p); err != nil || p.Error != "rate_limited" || p.Policy != policy || p.Status != 429 {
		t.Errorf("429 body %s (%v), want error rate_limited, policy %s", o.body, err, policy)
	}
	if !strings.HasPrefix(o.header.Get("RateLimit-Policy"), `"`+policy+`"`) || o.header.Get("RateLimit") == "" {
		t.Errorf("429 RateLimit-Policy %q RateLimit %q", o.header.Get("RateLimit-Policy"), o.header.Get("RateLimit"))
	}
}

// redisKeys lists the keys of a (small) test database.
func redisKeys(t *testing.T, rs *redistest.Server) []string {
	t.Helper()
	r, ok := rs.MustDo(t, "KEYS", "*").([]any)
	if !ok {
		t.Fatalf("KEYS did not answer an array")
	}
	keys := make([]string, 0, len(r))
	for _, k := range r {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	return keys
}

// TestFleetTokenBucketUnderLoad: three gateways, 64 clients each, hammer one
// tenant for 3 s; every fourth request is a cost-5 route. The units admitted
// never exceed burst + rate × elapsed (elapsed from the first request's start
// to the last answer), and reach at least 99% of burst + rate × the time the
// decisions surely spanned. Then a second tenant sends only cost-5 requests
// (16 clients per gateway, 1.5 s), which must be admitted in exactly the
// same unit budget: weighting is counted in units, not requests.
//
// The rate is low enough that even a slow, shared machine offers more than
// it, so the lower bound tests the limiter, not the load generator. (Cost-5
// requests interleaved with cost-1 ones are mostly denied: a bucket that
// refills one unit at a time is drained by the cheap requests first. That
// is how a token bucket treats mixed costs, and it is logged, not asserted.)
func TestFleetTokenBucketUnderLoad(t *testing.T) {
	const (
		burst = 100
		rate  = 100 // units per second
	)
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr}, "acme", "heavy")
	cfg.Policies["tenant"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(rate, "1s", burst)}}
	cfg.route("items.create", "POST", "/ok/{id}", 5, "tenant")
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gws := startGateways(t, 3, cfg)

	out := load{workers: 3 * 64, duration: 3 * time.Second, next: func(w, i int) call {
		c := call{base: gws[w%3].URL, path: "/ok/" + strconv.Itoa(i), key: "key-acme"}
		if i%4 == 3 {
			c.method, c.cost, c.label = "POST", 5, "cost5"
		}
		return c
	}}.run(t)
	s := summarize(out, nil)
	heavy := summarize(out, byLabel("cost5"))
	lo, hi := tokenBucketBounds(s, burst, rate, 5)
	t.Logf("mixed costs: %d requests in %v: %s; units admitted %d (cost-5: %d admitted of %d), bounds [%d, %d], p99 %v worst %v",
		s.n, s.lastEnd.Sub(s.firstStart).Round(time.Millisecond), s.mix(), s.admitted, heavy.status[200], heavy.n, lo, hi, s.pct(99), s.worst())
	if s.unanswered > 0 || !s.only(200, 429) {
		t.Fatalf("status mix %s, want only 200 and 429 (first error %v)", s.mix(), s.firstErr)
	}
	if s.admitted > hi {
		t.Errorf("over-admission: %d units admitted, at most %d allowed", s.admitted, hi)
	}
	if s.admitted < lo {
		t.Errorf("under-admission: %d units admitted, want at least %d", s.admitted, lo)
	}

	out = load{workers: 3 * 16, duration: 1500 * time.Millisecond, next: func(w, i int) call {
		return call{base: gws[w%3].URL, method: "POST", path: "/ok/" + strconv.Itoa(i), key: "key-heavy", cost: 5}
	}}.run(t)
	s = summarize(out, nil)
	lo, hi = tokenBucketBounds(s, burst, rate, 5)
	t.Logf("cost 5 only: %s; units admitted %d, bounds [%d, %d]", s.mix(), s.admitted, lo, hi)
	if s.unanswered > 0 || !s.only(200, 429) || s.admitted > hi || s.admitted < lo {
		t.Errorf("cost-5 requests: %s, %d units admitted, want only 200/429 and units in [%d, %d]", s.mix(), s.admitted, lo, hi)
	}
}

// TestFleetHotTenantAmongLightOnes: 10,000 API keys, each its own tenant,
// requested with a Zipf distribution through two gateways. The hottest
// tenant has a tight limit and keeps it exactly (bounds as in
// TestFleetTokenBucketUnderLoad); the light tenants, whose limit the traffic
// never reaches, are never denied, and each is counted on a key of its
// own that both gateways share: their limit refills one unit an hour, so a
// light tenant sent n requests is answered the remaining units burst-1
// down to burst-n, each once. Tenants keyed together would see lower or
// repeated values, and a tenant keyed per gateway the same values twice.
func TestFleetHotTenantAmongLightOnes(t *testing.T) {
	const (
		tenants    = 10000
		hotBurst   = 10
		hotRate    = 10
		lightBurst = 100000
	)
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr})
	cfg.Tiers["hot"] = tierCfg{}
	cfg.addKey("key-t0", "t0", "hot")
	for i := 1; i < tenants; i++ {
		cfg.addKey(fmt.Sprintf("key-t%d", i), fmt.Sprintf("t%d", i), "std")
	}
	cfg.Policies["tenant"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{
		"hot": bucket(hotRate, "1s", hotBurst),
		"std": bucket(1, "1h", lightBurst),
	}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gws := startGateways(t, 2, cfg)

	// A count of requests, not a duration: the seeded Zipf draws then give
	// the same 586 distinct tenants however busy the machine (the bounds of
	// the hot tenant follow the time the run took): 498 requests of the
	// hot one, 217 of the next, and one each of 420 of the 585 light ones.
	const workers, perWorker = 48, 50
	zipfs := make([]*rand.Zipf, workers)
	for w := range zipfs {
		zipfs[w] = rand.NewZipf(rand.New(rand.NewPCG(uint64(w), 42)), 1.2, 1, tenants-1)
	}
	out := load{workers: workers, perWorker: perWorker, next: func(w, i int) call {
		n := zipfs[w].Uint64()
		label := "light"
		if n == 0 {
			label = "hot"
		}
		return call{label: label, base: roundRobin(gws, w, i).URL, path: "/ok/x", key: fmt.Sprintf("key-t%d", n)}
	}}.run(t)
	hot, light := summarize(out, byLabel("hot")), summarize(out, byLabel("light"))
	remaining := map[string][]int64{} // of each light tenant's key, one per request
	for _, o := range out {
		if o.label == "light" {
			remaining[o.key] = append(remaining[o.key], rateLimitRemaining(o.header))
		}
	}
	lo, hi := tokenBucketBounds(hot, hotBurst, hotRate, 1)
	t.Logf("hot tenant: %s, admitted %d, bounds [%d, %d]; light tenants (%d distinct keys): %s; worst %v",
		hot.mix(), hot.admitted, lo, hi, len(remaining), light.mix(), max(hot.worst(), light.worst()))
	if hot.unanswered+light.unanswered > 0 {
		t.Fatalf("unanswered requests: hot %d, light %d (%v %v)", hot.unanswered, light.unanswered, hot.firstErr, light.firstErr)
	}
	if !light.only(200) {
		t.Errorf("light tenants got %s, want only 200", light.mix())
	}
	if !hot.only(200, 429) || hot.admitted > hi || hot.admitted < lo {
		t.Errorf("hot tenant: %s, %d admitted, want only 200/429 and admitted in [%d, %d]", hot.mix(), hot.admitted, lo, hi)
	}
	if !light.only(200) {
		return // the remaining units of denied requests say nothing more
	}
	wrong := 0
	for key, got := range remaining {
		slices.Sort(got)
		n := int64(len(got))
		for i, r := range got {
			if r != lightBurst-n+int64(i) {
				wrong++
				if wrong <= 3 {
					t.Errorf("%s: %d requests were answered remaining %v, want %d to %d, each once: not one key of its own",
						key, n, got, lightBurst-n, lightBurst-1)
				}
				break
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d light tenants were not counted on a key of their own", wrong, len(remaining))
	}
}

// rateLimitRemaining returns the remaining units r of h's RateLimit header
// ("policy";r=<r>;t=<t>), or -1 when it has none.
func rateLimitRemaining(h http.Header) int64 {
	_, v, ok := strings.Cut(h.Get("RateLimit"), ";r=")
	if !ok {
		return -1
	}
	v, _, _ = strings.Cut(v, ";")
	r, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return r
}
