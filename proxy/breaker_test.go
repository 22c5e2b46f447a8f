package proxy

import (
	"github.com/quotagate/quotagate/internal/testclock"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// newFakeClock returns the tests' shared fake clock at a fixed instant.
func newFakeClock() *testclock.Clock { return testclock.New(time.Unix(1_700_000_000, 0)) }

func TestNewBreakerRejectsBadOptions(t *testing.T) {
	for _, o := range []BreakerOptions{{Failures: 0, Cooldown: time.Second}, {Failures: 1, Cooldown: 0}, {Failures: 1, Cooldown: -time.Second}} {
		if _, err := NewBreaker(o); err == nil {
			t.Errorf("NewBreaker(%+v) = nil error", o)
		}
	}
}

// TestBreakerSteps walks the state machine with a fake clock.
func TestBreakerSteps(t *testing.T) {
	clk := newFakeClock()
	b, err := NewBreaker(BreakerOptions{Failures: 3, Cooldown: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(out outcome) {
		t.Helper()
		probe, _, ok := b.admit()
		if !ok || probe {
			t.Fatalf("admit = probe %v ok %v, want a plain admission", probe, ok)
		}
		b.done(false, out)
	}
	// Two failures, a success resets the count, then three in a row open.
	pass(outcomeFailure)
	pass(outcomeFailure)
	pass(outcomeSuccess)
	pass(outcomeFailure)
	pass(outcomeFailure)
	pass(outcomeNone) // the client left: counts neither way
	if got := b.State(); got != BreakerClosed {
		t.Fatalf("state after 2 failures = %v, want closed", got)
	}
	pass(outcomeFailure)
	if got := b.State(); got != BreakerOpen {
		t.Fatalf("state after 3 failures = %v, want open", got)
	}
	clk.Add(2 * time.Second)
	if _, retry, ok := b.admit(); ok || retry != 3*time.Second {
		t.Fatalf("open: admit = ok %v retry %v, want refused with 3s", ok, retry)
	}
	clk.Add(3 * time.Second)
	probe, _, ok := b.admit()
	if !ok || !probe {
		t.Fatalf("after cooldown: admit = probe %v ok %v, want the probe", probe, ok)
	}
	if b.State() != BreakerHalfOpen {
		t.Fatalf("state with a probe in flight = %v, want half_open", b.State())
	}
	if _, _, ok := b.admit(); ok {
		t.Fatal("a second request passed while the probe was in flight")
	}
	b.done(true, outcomeFailure) // probe failed: another full cooldown
	clk.Add(5*time.Second - time.Nanosecond)
	if _, _, ok := b.admit(); ok {
		t.Fatal("admitted before the second cooldown passed")
	}
	clk.Add(time.Nanosecond)
	probe, _, ok = b.admit()
	if !ok || !probe {
		t.Fatal("no probe after the second cooldown")
	}
	b.done(true, outcomeNone) // abandoned probe: the next request probes at once
	probe, _, ok = b.admit()
	if !ok || !probe {
		t.Fatal("no probe after an abandoned probe")
	}
	b.done(true, outcomeSuccess)
	if b.State() != BreakerClosed {
		t.Fatalf("state after a good probe = %v, want closed", b.State())
	}
	// A late failure of a request admitted before the breaker opened does
	// not count once it is open.
	for range 3 {
		pass(outcomeFailure)
	}
	b.done(false, outcomeSuccess)
	if b.State() != BreakerOpen {
		t.Fatalf("a late success closed an open breaker: %v", b.State())
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {5 * time.Second, 5}} {
		if got := retryAfterSeconds(c.d); got != c.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestBreakerDeadUpstream: an upstream that resets every connection opens
// the breaker after Failures requests; then the proxy answers 503 without
// contacting it, until the cooldown passes and a probe finds it healthy.
func TestBreakerDeadUpstream(t *testing.T) {
	var healthy atomic.Bool
	var arrivals atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrivals.Add(1)
		if healthy.Load() {
			w.Write([]byte("ok"))
			return
		}
		resetConn(t, w)
	}))
	defer up.Close()
	clk := newFakeClock()
	b, err := NewBreaker(BreakerOptions{Failures: 2, Cooldown: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, up.URL, time.Minute, nil, func(o *testOptions) { o.Breaker = b })
	for i := range 2 {
		if status, _ := getStatus(t, f, "/x"); status != http.StatusBadGateway {
			t.Fatalf("request %d: got %d, want 502 from the dead upstream", i, status)
		}
	}
	if b.State() != BreakerOpen {
		t.Fatalf("breaker %v after 2 failures, want open", b.State())
	}
	before := arrivals.Load()
	clk.Add(time.Second)
	resp, err := http.Get(f.front.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "4" {
		t.Fatalf("open breaker: got %d Retry-After %q, want 503 with 4", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := arrivals.Load(); got != before {
		t.Fatalf("the open breaker let %d requests reach the upstream", got-before)
	}
	calls := f.errs.get()
	if last := calls[len(calls)-1]; last != (errorCall{http.StatusServiceUnavailable, CodeUnavailable}) {
		t.Fatalf("last WriteError call = %v, want 503 %s", last, CodeUnavailable)
	}
	// The upstream recovers; the probe after the cooldown closes the breaker.
	healthy.Store(true)
	clk.Add(4 * time.Second)
	if status, body := getStatus(t, f, "/x"); status != http.StatusOK || body != "ok" {
		t.Fatalf("probe: got %d %q, want 200 ok", status, body)
	}
	if b.State() != BreakerClosed {
		t.Fatalf("breaker %v after a good probe, want closed", b.State())
	}
	if status, _ := getStatus(t, f, "/x"); status != http.StatusOK {
		t.Fatalf("after recovery: got %d, want 200", status)
	}
}

// TestBreakerCounts5xx: a 503 from the upstream is a failure, a 404 is not.
func TestBreakerCounts5xx(t *testing.T) {
	var status atomic.Int64
	status.Store(http.StatusNotFound)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer up.Close()
	b, _ := NewBreaker(BreakerOptions{Failures: 2, Cooldown: time.Hour})
	f := newFixture(t, up.URL, time.Minute, nil, func(o *testOptions) { o.Breaker = b })
	for range 3 {
		getStatus(t, f, "/x")
	}
	if b.State() != BreakerClosed {
		t.Fatalf("404s opened the breaker")
	}
	status.Store(http.StatusServiceUnavailable)
	getStatus(t, f, "/x")
	getStatus(t, f, "/x")
	if b.State() != BreakerOpen {
		t.Fatalf("two 503s left the breaker %v, want open", b.State())
	}
}
