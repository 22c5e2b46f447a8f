package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// withQuotaReads is baseConfig with server.quota_reads set to reads (a
// YAML flow mapping).
func withQuotaReads(reads string) string {
	return strings.Replace(baseConfig, "  max_body_bytes: 1024\n", "  max_body_bytes: 1024\n  quota_reads: "+reads+"\n", 1)
}

// itemStore is a Store that records the size of every batch it is asked.
type itemStore struct {
	ratelimit.Store
	mu      sync.Mutex
	batches []int
}

func (s *itemStore) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(items))
	s.mu.Unlock()
	return s.Store.Decide(ctx, items)
}

// take returns the batch sizes recorded since the last take.
func (s *itemStore) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batches
	s.batches = nil
	return b
}

// memoryItems opens a memory stack whose backend records its batches.
func memoryItems(rec **itemStore) func(now func() time.Time) *stack.Stack {
	return func(now func() time.Time) *stack.Stack {
		*rec = &itemStore{Store: memstore.New(memstore.Options{Now: now})}
		return stack.New(*rec, stack.Options{Now: now, FleetSize: 1})
	}
}

// readFrom reads the quota endpoint as the anonymous caller at addr (its
// own caller: each IPv6 /64 is one).
func (f *fixture) readFrom(addr string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/_quota", nil)
	r.RemoteAddr = addr
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.gw.ServeHTTP(w, r)
	return w
}

// refusedReads returns quotagate_quota_reads_refused_total by reason.
func (o *observed) refusedReads(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	fam := o.scrape(t)["quotagate_quota_reads_refused_total"]
	if fam == nil {
		t.Fatal("quotagate_quota_reads_refused_total is not exported")
	}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				out[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestQuotaReadBudget: callers that are each new (one anonymous IPv6 /64
// after another, so neither their own bound nor stage 1 ever refuses
// them) share the gateway-wide budget of rate 2, burst 3: at one instant
// three reads reach the store and the others are 429 with Retry-After 1
// and retry_after_ms 500, without a store call, counted as reason budget.
// Half a second later one more read fits. A reload that keeps the rate and
// burst keeps the spent budget; one that changes them starts a full one.
func TestQuotaReadBudget(t *testing.T) {
	var rec *itemStore
	base := withQuotaReads("{rate: 2, burst: 3}")
	o := newQuotaFixtureWith(t, base, true, memoryItems(&rec))
	caller := 0
	read := func() *httptest.ResponseRecorder {
		caller++
		return o.readFrom(fmt.Sprintf("[2001:db8:%x:%x::1]:4000", caller>>16, caller&0xffff), nil)
	}
	maxMS := 500.0 // one read at 2/s
	refused := func(what string) {
		t.Helper()
		w := read()
		body := problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			t.Fatalf("%s: Retry-After %q, want 1", what, ra)
		}
		if ms, _ := body["retry_after_ms"].(float64); ms <= 0 || ms > maxMS {
			t.Fatalf("%s: retry_after_ms %v, want in (0, %v]", what, body["retry_after_ms"], maxMS)
		}
	}
	for i := range 3 {
		if w := read(); w.Code != http.StatusOK {
			t.Fatalf("read %d within the burst: %d %s", i, w.Code, w.Body.String())
		}
	}
	for i := range 50 {
		refused(fmt.Sprintf("read %d past the burst", i))
	}
	if got := rec.take(); len(got) != 3 {
		t.Fatalf("store calls %v, want 3", got)
	}
	if got := o.refusedReads(t); got[telemetry.ReadBudget] != 50 || got[telemetry.ReadCaller] != 0 || got[telemetry.ReadTier] != 0 {
		t.Fatalf("refused reads %v, want 50 for budget and none else", got)
	}
	o.clock.Add(500 * time.Millisecond)
	if w := read(); w.Code != http.StatusOK {
		t.Fatalf("read after 500ms: %d", w.Code)
	}
	refused("the next one")

	cfg, err := config.Load(o.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = o.gw.Config().Store // the same store: only the budget may change
	if err := o.gw.Reload(cfg, 0); err != nil {
		t.Fatal(err)
	}
	refused("after a reload that keeps the budget")
	cfg.Server.QuotaReads = &config.QuotaReads{Rate: 1, Burst: 2, MaxItems: 100}
	if err := o.gw.Reload(cfg, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if w := read(); w.Code != http.StatusOK {
			t.Fatalf("read %d after a reload to burst 2: %d", i, w.Code)
		}
	}
	maxMS = 1000
	refused("past the new burst")
	if got := rec.take(); len(got) != 3 {
		t.Fatalf("store calls after the first 3: %v, want 3", got)
	}
}

// TestQuotaReadRefusalOrder: a read spends the caller's own bound, then
// stage 1 of its tier, then the gateway-wide budget, each only when the
// one before admitted it, so reads one caller makes past its own limits
// cost the others nothing. Budget: a burst of 12 at one instant.
func TestQuotaReadRefusalOrder(t *testing.T) {
	var rec *itemStore
	o := newQuotaFixtureWith(t, withQuotaReads("{rate: 1, burst: 12}"), true, memoryItems(&rec))
	// The enterprise tier has no stage 1: its own bound (a burst of 10)
	// admits 10 reads, which spend 10 of the budget; 20 are refused.
	for i := range 30 {
		w := o.readFrom("192.0.2.1:1", bearer(enterpriseKey))
		if i >= 10 {
			problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
		} else if w.Code != http.StatusOK {
			t.Fatalf("read %d: %d", i, w.Code)
		}
	}
	// An anonymous caller: its own bound admits 10 reads, stage 1 (a
	// burst of 5) 5 of them, and the budget the 2 it has left.
	for i := range 30 {
		w := o.readFrom("192.0.2.2:1", nil)
		if i >= 2 {
			problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
		} else if w.Code != http.StatusOK {
			t.Fatalf("anonymous read %d: %d", i, w.Code)
		}
	}
	want := map[string]float64{telemetry.ReadCaller: 20 + 20, telemetry.ReadTier: 5, telemetry.ReadBudget: 3,
		telemetry.ReadBreakerOpen: 0, telemetry.ReadStoreError: 0}
	if got := o.refusedReads(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refused reads %v, want %v", got, want)
	}
	if n := len(rec.take()); n != 12 {
		t.Fatalf("store calls %d, want the budget's 12", n)
	}
}

// TestQuotaReadTruncated: one read carries at most max_items keys, those
// of scopes tenant and global first; the reply says when it left some
// out.
func TestQuotaReadTruncated(t *testing.T) {
	for _, c := range []struct {
		maxItems  int
		names     []string
		truncated bool
	}{
		// The free caller's keys: tenant and audit (scope tenant), and
		// transfers on transfers.create (scope tenant_route).
		{1, []string{"tenant/"}, true},
		{2, []string{"tenant/", "audit/"}, true},
		{3, []string{"tenant/", "audit/", "transfers/transfers.create"}, false},
		{100, []string{"tenant/", "audit/", "transfers/transfers.create"}, false},
	} {
		var rec *itemStore
		o := newQuotaFixtureWith(t, withQuotaReads(fmt.Sprintf("{max_items: %d}", c.maxItems)), false, memoryItems(&rec))
		w := o.readFrom("192.0.2.1:1", bearer(freeKey))
		var raw map[string]json.RawMessage
		var rep quotaReply
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &raw) != nil || json.Unmarshal(w.Body.Bytes(), &rep) != nil {
			t.Fatalf("max_items %d: %d %s", c.maxItems, w.Code, w.Body.String())
		}
		if string(raw["truncated"]) != fmt.Sprint(c.truncated) {
			t.Fatalf("max_items %d: truncated %s, want %v", c.maxItems, raw["truncated"], c.truncated)
		}
		var names []string
		for _, p := range rep.Policies {
			names = append(names, p.Name+"/"+p.Route)
		}
		if fmt.Sprint(names) != fmt.Sprint(c.names) {
			t.Fatalf("max_items %d: policies %v, want %v", c.maxItems, names, c.names)
		}
		if got := rec.take(); len(got) != 1 || got[0] != len(c.names) {
			t.Fatalf("max_items %d: store batches %v, want one of %d items", c.maxItems, got, len(c.names))
		}
	}
}

// TestQuotaReadsDoNotOpenTheBreaker runs the gateway on a real Redis
// frozen with SIGSTOP: reads time out (503 limiter_unavailable,
// Retry-After 1, reason store_error), more of them than the breaker's
// failures, and the breaker stays closed: once Redis is back, the first
// request on a route whose policy is on_store_error: closed is admitted
// (it used to be 503: the reads had opened the breaker). Then two failed
// decisions open it, and reads are 503 without a store call (reason
// breaker_open) until a decision's probe closes it.
func TestQuotaReadsDoNotOpenTheBreaker(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var stk *stack.Stack
	o := newQuotaFixtureWith(t, baseConfig, true, func(now func() time.Time) *stack.Stack {
		stk = redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 250 * time.Millisecond,
			BreakerFailures: 2, BreakerCooldown: time.Hour, Now: now, FleetSize: 1, FleetStatic: true})
		return stk
	})
	post := func() int { return o.do("POST", "/v1/transfers/1", bearer(enterpriseKey), nil).Code }
	if c := post(); c != http.StatusOK {
		proctest.FatalOverrun(t, "first decision on a live Redis: %d", c)
	}
	srv.Pause()
	defer srv.Resume()
	for i := range 5 {
		w := o.readFrom("192.0.2.1:1", bearer(enterpriseKey))
		problemBody(t, w, http.StatusServiceUnavailable, codeLimiterUnavailable)
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			t.Fatalf("failed read %d: Retry-After %q, want 1", i, ra)
		}
	}
	if st := stk.Health().Breaker; st != stack.BreakerClosed {
		t.Fatalf("after 5 failed reads: breaker %v, want closed", st)
	}
	srv.Resume()
	if c := post(); c != http.StatusOK {
		t.Fatalf("closed policy after the failed reads, Redis back: %d, want 200 (breaker %v)", c, stk.Health().Breaker)
	}

	srv.Pause()
	for range 2 {
		if c := post(); c != http.StatusServiceUnavailable {
			t.Fatalf("closed policy on a frozen Redis: %d, want 503", c)
		}
	}
	srv.Resume()
	if st := stk.Health().Breaker; st != stack.BreakerOpen {
		t.Fatalf("after 2 failed decisions: breaker %v, want open", st)
	}
	for range 3 {
		problemBody(t, o.readFrom("192.0.2.1:1", bearer(enterpriseKey)), http.StatusServiceUnavailable, codeLimiterUnavailable)
	}
	got := o.refusedReads(t)
	if got[telemetry.ReadStoreError] != 5 || got[telemetry.ReadBreakerOpen] != 3 {
		t.Fatalf("refused reads %v, want 5 store_error and 3 breaker_open", got)
	}
}
