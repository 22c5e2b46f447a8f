package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// newQuotaFixture is newFixture on baseConfig with the store open returns.
func newQuotaFixture(t *testing.T, open func(now func() time.Time) *stack.Stack) *fixture {
	t.Helper()
	return newQuotaFixtureWith(t, baseConfig, false, open).fixture
}

// newQuotaFixtureWith is newQuotaFixture on the config base, recording
// metrics when withMetrics is set (the observed fixture's metrics then
// serve them; spans are not recorded).
func newQuotaFixtureWith(t *testing.T, base string, withMetrics bool, open func(now func() time.Time) *stack.Stack) *observed {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	f.path = writeConfig(t, renderConfig(base, f.upstream.srv.URL, deadURL(t)))
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.Store.Redis.KeyPrefix = "q" + strconv.FormatInt(time.Now().UnixNano(), 36)
	o := Options{Now: f.clock.Now, Getenv: testGetenv,
		OpenStore: func(config.Store) (*stack.Stack, error) { return open(f.clock.Now), nil }}
	obs := &observed{fixture: f}
	if withMetrics {
		tel, m := newTestMetrics(t)
		o.Metrics, obs.metrics = m, tel.Metrics
	}
	gw, err := New(cfg, o)
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return obs
}

// quota reads the quota endpoint for hdr and returns the policies by
// name (and route, for per-route scopes).
func (f *fixture) quota(t *testing.T, hdr map[string]string) (quotaReply, map[string]quotaPolicy) {
	t.Helper()
	w := f.do("GET", "/_quota", hdr, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /_quota: %d %s", w.Code, w.Body.String())
	}
	if f.upstream.last != nil && f.upstream.last.URL.Path == "/_quota" {
		t.Fatal("the quota request was forwarded")
	}
	var rep quotaReply
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	by := make(map[string]quotaPolicy)
	for _, p := range rep.Policies {
		by[p.Name+"/"+p.Route] = p
	}
	return rep, by
}

// testQuotaMatchesLimits: the endpoint reports every policy of the caller,
// consumes nothing, and the remaining it reports is exactly what the
// limits then admit.
//
// exact is false for a store on its own (the Redis server's) clock: its
// reset times then shrink as real time passes.
func testQuotaMatchesLimits(t *testing.T, f *fixture, exact bool) {
	resetIs := func(got, want int64) bool { return got == want || (!exact && got > 0 && got <= want) }
	auth := bearer(freeKey)
	rep, by := f.quota(t, auth)
	if rep.Tier != "free" || len(rep.TenantHash) != 16 {
		t.Fatalf("reply %+v", rep)
	}
	tenant, ok := by["tenant/"]
	if !ok || tenant.Limit != 5 || tenant.Remaining != 5 || tenant.Algorithm != "token_bucket" || tenant.ResetMS != 0 {
		t.Fatalf("tenant policy %+v (all: %+v)", tenant, rep.Policies)
	}
	if tr, ok := by["transfers/transfers.create"]; !ok || tr.Limit != 10 || tr.Remaining != 10 {
		t.Fatalf("transfers policy %+v (all: %+v)", tr, rep.Policies)
	}
	// Reading twice consumes nothing.
	if _, again := f.quota(t, auth); again["tenant/"].Remaining != 5 {
		t.Fatalf("second read: %+v", again["tenant/"])
	}
	for i := 0; i < 2; i++ {
		if w := f.do("GET", "/v1/transfers/1", auth, nil); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	_, by = f.quota(t, auth)
	left := by["tenant/"].Remaining
	if left != 3 || !resetIs(by["tenant/"].ResetMS, 2000) {
		t.Fatalf("after 2 requests: %+v, want 3 left, full again in 2000 ms", by["tenant/"])
	}
	for i := int64(0); i < left; i++ {
		if w := f.do("GET", "/v1/transfers/1", auth, nil); w.Code != http.StatusOK {
			t.Fatalf("request %d of the %d reported left: %d", i, left, w.Code)
		}
	}
	if w := f.do("GET", "/v1/transfers/1", auth, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("past what the endpoint reported: %d, want 429", w.Code)
	}
	// A denied caller still reads its quota.
	if _, by := f.quota(t, auth); by["tenant/"].Remaining != 0 || !resetIs(by["tenant/"].ResetMS, 5000) {
		t.Fatalf("when exhausted: %+v", by["tenant/"])
	}
}

func TestQuotaEndpointMemory(t *testing.T) {
	f := newQuotaFixture(t, func(now func() time.Time) *stack.Stack {
		return stack.New(nil, stack.Options{Now: now, FleetSize: 1})
	})
	testQuotaMatchesLimits(t, f, true)
}

func TestQuotaEndpointRedis(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := newQuotaFixture(t, func(now func() time.Time) *stack.Stack {
		return redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, Now: now, FleetSize: 1})
	})
	testQuotaMatchesLimits(t, f, false)
}

// TestQuotaEndpointCallers: anonymous callers read theirs, and each read
// spends one unit of stage 1 of the caller's tier (anonymous: a burst of
// 5), so the sixth read at one instant is 429 without a store call, and so
// is a routed request after it; a bad credential is 401.
func TestQuotaEndpointCallers(t *testing.T) {
	f := newFixture(t, baseConfig)
	for i := 0; i < 5; i++ {
		rep, by := f.quota(t, nil)
		if rep.Tier != "anonymous" || by["tenant/"].Limit != 5 || rep.Truncated {
			t.Fatalf("anonymous read %d: %+v", i, rep)
		}
	}
	w := f.do("GET", "/_quota", nil, nil)
	problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
	if ra := w.Header().Get("Retry-After"); ra != "1" {
		t.Fatalf("sixth read: Retry-After %q, want 1 (one unit at 2/s)", ra)
	}
	if w := f.do("GET", "/v1/transfers/1", nil, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("routed request after 5 reads: %d, want 429 from stage 1", w.Code)
	}
	w = f.do("GET", "/_quota", bearer("not-a-key"), nil)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("bad credential: %d, want 401", w.Code)
	}
}

// TestQuotaEndpointBoundsStoreCalls: one caller hammering the quota endpoint
// against a real Redis makes at most quotaReadBurst store calls at one
// instant, then quotaReadRate a second; the reads past that are 429 with a
// Retry-After and cost no store call. Another caller is not affected.
func TestQuotaEndpointBoundsStoreCalls(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var counted *storetest.CountingStore
	f := newQuotaFixture(t, func(now func() time.Time) *stack.Stack {
		counted = &storetest.CountingStore{Store: redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, Now: now, FleetSize: 1})}
		return stack.New(counted, stack.Options{Now: now, FleetSize: 1})
	})
	limited := 0
	for i := 0; i < 200; i++ {
		w := f.do("GET", "/_quota", bearer(freeKey), nil)
		switch w.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			limited++
			if w.Header().Get("Retry-After") != "1" {
				t.Fatalf("read %d: Retry-After %q, want 1", i, w.Header().Get("Retry-After"))
			}
		default:
			t.Fatalf("read %d: %d %s", i, w.Code, w.Body.String())
		}
	}
	if got := counted.Calls(); got != int64(quotaReadBurst) || limited != 200-quotaReadBurst {
		t.Fatalf("200 reads at one instant: %d store calls and %d refused, want %d and %d", got, limited, quotaReadBurst, 200-quotaReadBurst)
	}
	// Another caller still reads; and one second later, the first reads again.
	f.quota(t, bearer(enterpriseKey))
	f.clock.Add(time.Second)
	f.quota(t, bearer(freeKey))
	if got := counted.Calls(); got != int64(quotaReadBurst)+2 {
		t.Fatalf("store calls %d, want %d", got, quotaReadBurst+2)
	}
}

func TestQuotaEndpointCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	f := newQuotaFixture(t, func(now func() time.Time) *stack.Stack {
		return redisstore.Open(redisstore.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second, Now: now, FleetSize: 1})
	})
	testQuotaMatchesLimits(t, f, false)
}
