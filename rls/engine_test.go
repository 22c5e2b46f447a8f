package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotagate/quotagate/internal/testclock"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// t0 is a fixed instant at the start of a minute, so that fixed windows
// of a minute start with it.
var t0 = time.Unix(1_800_000_000-1_800_000_000%3600, 0)

func newTestEngine(t testing.TB, o Options) (*Engine, *testclock.Clock) {
	t.Helper()
	clk := testclock.New(t0)
	if o.Store == nil {
		s := memstore.New(memstore.Options{Now: clk.Now})
		t.Cleanup(func() { s.Close() })
		o.Store = s
	}
	o.Now = clk.Now
	return NewEngine(loadTestdata(t), o), clk
}

func desc(kv ...string) Descriptor { return Descriptor{Entries: entries(kv...)} }

func decide(t *testing.T, e *Engine, req Request) Response {
	t.Helper()
	resp, err := e.Decide(context.Background(), &req)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return resp
}

func TestDecidePerValueCounters(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	for i := range 10 {
		r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("remote_address", "192.0.2.1")}})
		if r.Overall != OK || r.Statuses[0].Remaining != uint32(9-i) {
			t.Fatalf("hit %d: %+v", i+1, r)
		}
		if st := r.Statuses[0]; st.Rule == nil || st.Rule.RequestsPerUnit != 10 || st.Rule.Unit != Minute || st.ResetAfter != time.Minute {
			t.Fatalf("hit %d: status %+v", i+1, st)
		}
	}
	r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("remote_address", "192.0.2.1")}})
	if r.Overall != OverLimit || r.Statuses[0].Code != OverLimit || r.RetryAfter != time.Minute {
		t.Fatalf("11th hit: %+v", r)
	}
	// Another address has a counter of its own.
	r = decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("remote_address", "192.0.2.2")}})
	if r.Overall != OK || r.Statuses[0].Remaining != 9 {
		t.Fatalf("other address: %+v", r)
	}
	// The trusted address is unlimited.
	r = decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("remote_address", "10.0.0.1")}})
	if r.Overall != OK || r.Statuses[0].Remaining != math.MaxUint32 {
		t.Fatalf("unlimited: %+v", r)
	}
}

func TestDecideAllOrNothing(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	login := desc("client", "c1", "path", "/login") // 3 per minute
	other := desc("client", "c1", "path", "/x")     // 20 per second
	for range 3 {
		if r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{other, login}}); r.Overall != OK {
			t.Fatalf("%+v", r)
		}
	}
	r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{other, login}})
	if r.Overall != OverLimit || r.Statuses[0].Code != OK || r.Statuses[1].Code != OverLimit {
		t.Fatalf("4th: %+v", r)
	}
	// The denied request took nothing from the descriptor that allowed:
	// 20 - 3 remain, and this call takes one more.
	r = decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{other}})
	if r.Statuses[0].Remaining != 16 {
		t.Fatalf("remaining after a denied request = %d, want 16 (nothing charged)", r.Statuses[0].Remaining)
	}
}

func TestDecideHitsAddend(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	addr := desc("remote_address", "198.51.100.1")
	r := decide(t, e, Request{Domain: "edge", Hits: 7, Descriptors: []Descriptor{addr}})
	if r.Overall != OK || r.Statuses[0].Remaining != 3 {
		t.Fatalf("hits 7: %+v", r)
	}
	r = decide(t, e, Request{Domain: "edge", Hits: 4, Descriptors: []Descriptor{addr}})
	if r.Overall != OverLimit || r.Statuses[0].Remaining != 3 {
		t.Fatalf("hits 4 with 3 left: %+v", r)
	}
	zero := uint64(0)
	r = decide(t, e, Request{Domain: "edge", Hits: 4, Descriptors: []Descriptor{{Entries: addr.Entries, Hits: &zero}}})
	if r.Overall != OK || r.Statuses[0].Remaining != 3 {
		t.Fatalf("per-descriptor hits 0: %+v", r)
	}
	// A cost above the limit is over without touching the store.
	r = decide(t, e, Request{Domain: "edge", Hits: 11, Descriptors: []Descriptor{desc("remote_address", "198.51.100.2")}})
	if r.Overall != OverLimit {
		t.Fatalf("hits 11 of 10: %+v", r)
	}
	r = decide(t, e, Request{Domain: "edge", Hits: 1, Descriptors: []Descriptor{desc("remote_address", "198.51.100.2")}})
	if r.Statuses[0].Remaining != 9 {
		t.Fatalf("after an impossible cost: %+v", r)
	}
}

func TestDecideShadowQuotaReplacesBanned(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	exp := desc("experiment", "new_quota") // shadow, 2 per minute
	for i := range 4 {
		r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{exp}})
		if r.Overall != OK || r.Statuses[0].Code != OK || r.Statuses[0].ShadowOver != (i >= 2) {
			t.Fatalf("shadow hit %d: %+v", i+1, r)
		}
	}

	// Replaces: plan_gold replaces plan_default, which is then not charged.
	r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("plan", "free"), desc("tier_hint", "x")}})
	if r.Statuses[0].Rule != nil || r.Statuses[1].Rule == nil {
		t.Fatalf("replaces: %+v", r.Statuses)
	}

	// Quota mode: over only when every quota descriptor is.
	q := []Descriptor{desc("quota_bucket", "primary"), desc("quota_bucket", "secondary")}
	want := []Code{OK, OK, OverLimit}
	for i, w := range want {
		if r := decide(t, e, Request{Domain: "edge", Descriptors: q}); r.Overall != w {
			t.Fatalf("quota hit %d: overall %v, want %v (%+v)", i+1, r.Overall, w, r.Statuses)
		}
	}

	// Banned: every hit over, reset at the end of the unit.
	r = decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("client_class", "abusive")}})
	if r.Overall != OverLimit || r.Statuses[0].ResetAfter != time.Minute {
		t.Fatalf("banned: %+v", r)
	}
}

func TestDecideUnknownIsOK(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	for _, req := range []Request{
		{Domain: "nope", Descriptors: []Descriptor{desc("a", "b")}},
		{Domain: "edge", Descriptors: []Descriptor{desc("unknown", "x"), desc("client", "c")}},
	} {
		r := decide(t, e, req)
		if r.Overall != OK {
			t.Fatalf("%+v: %+v", req, r)
		}
		for _, st := range r.Statuses {
			if st.Code != OK || st.Rule != nil {
				t.Fatalf("%+v: status %+v", req, st)
			}
		}
	}
}

func TestDecideDryRun(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	addr := desc("remote_address", "203.0.113.9")
	decide(t, e, Request{Domain: "edge", Hits: 8, Descriptors: []Descriptor{addr}})
	r := decide(t, e, Request{Domain: "edge", Hits: 2, DryRun: true, Descriptors: []Descriptor{addr}})
	if r.Overall != OK || r.Statuses[0].Remaining != 2 {
		t.Fatalf("dry run that fits: %+v", r)
	}
	r = decide(t, e, Request{Domain: "edge", Hits: 3, DryRun: true, Descriptors: []Descriptor{addr}})
	if r.Overall != OverLimit || r.Statuses[0].Remaining != 2 {
		t.Fatalf("dry run that does not fit: %+v", r)
	}
	r = decide(t, e, Request{Domain: "edge", Hits: 2, Descriptors: []Descriptor{addr}})
	if r.Overall != OK || r.Statuses[0].Remaining != 0 {
		t.Fatalf("dry runs consumed: %+v", r)
	}
}

func TestDecideWindowsFollowTheClock(t *testing.T) {
	e, clk := newTestEngine(t, Options{})
	addr := desc("remote_address", "203.0.113.10")
	decide(t, e, Request{Domain: "edge", Hits: 10, Descriptors: []Descriptor{addr}})
	clk.Set(t0.Add(45 * time.Second))
	r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{addr}})
	if r.Overall != OverLimit || r.RetryAfter != 15*time.Second {
		t.Fatalf("at 45s: %+v", r)
	}
	clk.Set(t0.Add(time.Minute))
	if r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{addr}}); r.Overall != OK {
		t.Fatalf("next window: %+v", r)
	}
}

func TestDecideBadRequests(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	many := make([]Descriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("a", "b")
	}
	for _, req := range []Request{
		{Descriptors: []Descriptor{desc("a", "b")}},
		{Domain: "edge"},
		{Domain: "edge", Descriptors: many},
		{Domain: "edge", Descriptors: []Descriptor{{}}},
		{Domain: "edge", Descriptors: []Descriptor{desc("", "secret-value")}},
	} {
		_, err := e.Decide(context.Background(), &req)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: err = %v, want ErrBadRequest", req, err)
		} else if strings.Contains(err.Error(), "secret-value") {
			t.Errorf("error %q repeats a client value", err)
		}
	}
}

func TestKeysHideValues(t *testing.T) {
	e, _ := newTestEngine(t, Options{KeyPrefix: "kp"})
	r, _ := e.Rules().Domain("edge").Match(entries("client", "alice@example.com", "path", "/x"))
	k1 := e.key("edge", r, entries("client", "alice@example.com", "path", "/x"), nil)
	k2 := e.key("edge", r, entries("client", "bob", "path", "/x"), nil)
	k3 := e.key("edge", r, entries("client", "alice@example.com", "path", "/y"), nil)
	if strings.Contains(k1, "alice") || strings.Contains(k1, "/x") || !strings.HasPrefix(k1, "kp:rls:{") {
		t.Errorf("key %q", k1)
	}
	if k1 == k2 || k1 == k3 {
		t.Errorf("distinct descriptors share a key: %q %q %q", k1, k2, k3)
	}
	tag := func(k string) string { return k[strings.Index(k, "{"):strings.Index(k, "}")] }
	if tag(k1) != tag(k3) || tag(k1) == tag(k2) {
		t.Errorf("hash tags: %q %q %q; want the first entry's", k1, k2, k3)
	}
	// Fields are length-prefixed: shifting text between key and value
	// makes another key.
	if e.key("edge", r, entries("ab", "c"), nil) == e.key("edge", r, entries("a", "bc"), nil) {
		t.Error("ambiguous key encoding")
	}
}

// failingStore fails every decision, as a store past its deadline does.
type failingStore struct{}

func (failingStore) Decide(context.Context, []ratelimit.Item) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, context.DeadlineExceeded)
}
func (failingStore) Close() error { return nil }

func TestDecideOnStoreError(t *testing.T) {
	addr := []Descriptor{desc("remote_address", "192.0.2.50")}
	for _, c := range []struct {
		mode string
		want Code
		err  error
	}{
		{"unavailable", 0, ErrUnavailable},
		{"open", OK, nil},
		{"closed", OverLimit, nil},
		{"local", OK, nil},
	} {
		e, _ := newTestEngine(t, Options{Store: failingStack(t, 5), OnStoreError: c.mode})
		r, err := e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: addr})
		if !errors.Is(err, c.err) || err == nil && r.Overall != c.want {
			t.Errorf("%s: %+v, %v; want %v, %v", c.mode, r, err, c.want, c.err)
		}
		if c.mode != "local" {
			continue
		}
		// Local: this instance's share of 10 per minute in a fleet of 5.
		if r.Fallback != "local" || r.Statuses[0].Remaining != 1 {
			t.Errorf("local: %+v", r)
		}
		e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: addr})
		if r, _ := e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: addr}); r.Overall != OverLimit {
			t.Errorf("local share exceeded: %+v", r)
		}
	}
	// A rule's own mode wins over the service's.
	e, _ := newTestEngine(t, Options{Store: failingStack(t, 1), OnStoreError: "unavailable"})
	r, err := e.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc("status_probe", "x")}})
	if err != nil || r.Overall != OK || r.Fallback != "open" {
		t.Errorf("rule on_store_error open: %+v, %v", r, err)
	}
	// A store without a Fallback layer: every failure is UNAVAILABLE.
	e, _ = newTestEngine(t, Options{Store: failingStore{}, OnStoreError: "open"})
	if _, err := e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: addr}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("bare failing store: %v, want ErrUnavailable", err)
	}
}

// failingStack is failingStore under the Fallback layer of a store stack,
// for a fleet of the given size, its local shares at t0.
func failingStack(t *testing.T, fleet int) ratelimit.Store {
	f := stack.NewFallback(failingStore{}, stack.FallbackOptions{FleetSize: fleet, Now: func() time.Time { return t0 }})
	t.Cleanup(func() { f.Close() })
	return f
}

func TestDecideSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e, _ := newTestEngine(t, Options{TracerProvider: tp})
	decide(t, e, Request{Domain: "edge", Hits: 11, Descriptors: []Descriptor{desc("remote_address", "192.0.2.99")}})
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "quotagate.rls.decide" {
		t.Fatalf("spans = %v", spans)
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["quotagate.domain"] != "edge" || attrs["quotagate.decision"] != "OVER_LIMIT" || attrs["quotagate.descriptors"] != "1" {
		t.Errorf("attributes = %v", attrs)
	}
	for k, v := range attrs {
		if strings.Contains(v, "192.0.2.99") {
			t.Errorf("attribute %s holds the client value", k)
		}
	}
}

func TestDecideWildcardCounters(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	// share_threshold: every value the pattern matches shares 4 per second.
	for i, v := range []string{"/v2/a/items", "/v2/b/items", "/v2/c/items", "/v2/d/items", "/v2/e/items"} {
		r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{desc("api_path", v)}})
		if want := map[bool]Code{true: OK, false: OverLimit}[i < 4]; r.Overall != want {
			t.Fatalf("%s (hit %d of the shared counter): %v, want %v", v, i+1, r.Overall, want)
		}
	}
	// A plain wildcard: each value its own 5 per second.
	for _, v := range []string{"/v1/a", "/v1/b"} {
		r := decide(t, e, Request{Domain: "edge", Hits: 5, Descriptors: []Descriptor{desc("api_path", v)}})
		if r.Overall != OK || r.Statuses[0].Remaining != 0 {
			t.Fatalf("%s: %+v", v, r)
		}
	}
}
