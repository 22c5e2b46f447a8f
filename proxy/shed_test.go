package proxy

import (
	"github.com/quotagate/quotagate/internal/testclock"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

var tiers = []string{"enterprise", "pro", "free", "anonymous"}

func newTestShedder(t *testing.T, clk *testclock.Clock) *Shedder {
	t.Helper()
	s, err := NewShedder(ShedderOptions{TargetLatency: 100 * time.Millisecond, Priority: tiers, MinInflight: 2, MaxInflight: 50, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewShedderRejectsBadOptions(t *testing.T) {
	for _, o := range []ShedderOptions{
		{TargetLatency: 0, MinInflight: 1, MaxInflight: 1},
		{TargetLatency: time.Second, MinInflight: 0, MaxInflight: 1},
		{TargetLatency: time.Second, MinInflight: 5, MaxInflight: 4},
	} {
		if _, err := NewShedder(o); err == nil {
			t.Errorf("NewShedder(%+v) = nil error", o)
		}
	}
}

// TestShedderHealthyAdmitsUpToMax: at the healthy limit every tier passes
// up to MaxInflight, whatever its rank.
func TestShedderHealthyAdmitsUpToMax(t *testing.T) {
	s := newTestShedder(t, newFakeClock())
	for i := range 50 {
		if !s.admit("unknown") {
			t.Fatalf("healthy: request %d of an unlisted tier shed", i)
		}
	}
	if s.admit("enterprise") {
		t.Fatal("admitted past MaxInflight")
	}
	for range 50 {
		s.done(time.Millisecond, true)
	}
	if l, n := s.Limit(); l != 50 || n != 0 {
		t.Fatalf("after fast responses: limit %v in flight %d, want 50 and 0", l, n)
	}
}

// TestShedderCutsAndShedsByRank walks the controller with a fake clock.
func TestShedderCutsAndShedsByRank(t *testing.T) {
	clk := newFakeClock()
	s := newTestShedder(t, clk)
	for range 10 {
		s.admit("enterprise")
	}
	// A response at 4× the target: the limit falls to in flight (10) × 0.5.
	s.done(400*time.Millisecond, true)
	if l, _ := s.Limit(); l != 5 {
		t.Fatalf("after one slow response: limit %v, want 5", l)
	}
	// More slow responses within one target interval are the same signal.
	s.done(400*time.Millisecond, true)
	if l, _ := s.Limit(); l != 5 {
		t.Fatalf("second cut within the interval: limit %v, want 5", l)
	}
	clk.Add(100 * time.Millisecond)
	s.done(150*time.Millisecond, true) // 1.5× target: × 2/3 of min(5, 8 in flight)
	if l, _ := s.Limit(); l < 3.33 || l > 3.34 {
		t.Fatalf("after a 150ms response: limit %v, want 10/3", l)
	}
	for range 7 {
		s.done(0, false) // failures and abandoned exchanges do not move it
	}
	if l, n := s.Limit(); l < 3.33 || l > 3.34 || n != 0 {
		t.Fatalf("unmeasured exchanges moved the limit: %v, in flight %d", l, n)
	}
	// limit 10/3 with 4 listed tiers: shares 1, .8, .6, .4, .2 ->
	// enterprise 3, pro 2, free 2, anonymous 1, unlisted 1.
	for _, c := range []struct {
		tier string
		want int
	}{{"enterprise", 3}, {"pro", 2}, {"free", 2}, {"anonymous", 1}, {"other", 1}} {
		n := 0
		for s.admit(c.tier) {
			n++
		}
		if n != c.want {
			t.Errorf("%s: admitted %d from idle, want %d", c.tier, n, c.want)
		}
		for range n {
			s.done(0, false)
		}
	}
	// Fast responses raise it by 1 each, never past MaxInflight, and a
	// limit back at MaxInflight is healthy again.
	for range 100 {
		s.admit("enterprise")
		s.done(time.Millisecond, true)
	}
	if l, _ := s.Limit(); l != 50 {
		t.Fatalf("after recovery: limit %v, want 50", l)
	}
	// The floor: never below MinInflight.
	clk.Add(time.Second)
	s.admit("enterprise")
	s.done(10*time.Second, true)
	if l, _ := s.Limit(); l != 2 {
		t.Fatalf("after a very slow response from one in flight: limit %v, want MinInflight 2", l)
	}
}

// TestShedderOverRealUpstream: an upstream whose latency the test controls.
// Once it answers slower than the target, a free request is shed with 503
// while an enterprise request still passes.
func TestShedderOverRealUpstream(t *testing.T) {
	var delay atomic.Int64
	gate := make(chan struct{})
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gated":
			arrived <- struct{}{}
			<-gate
		case "/slow":
			time.Sleep(time.Duration(delay.Load())) // the upstream's own latency
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	defer close(gate)
	s, f, shed := newShedFixture(t, up.URL, 50*time.Millisecond)
	get := func(path, tier string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", f.front.URL+path, nil)
		req.Header.Set("X-Tier", tier)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// The upstream slows to 6× the target: one response cuts the limit.
	delay.Store(int64(300 * time.Millisecond))
	if resp := get("/slow", "enterprise"); resp.StatusCode != http.StatusOK {
		t.Fatalf("slow request: %d", resp.StatusCode)
	}
	if l, _ := s.Limit(); l != 2 {
		t.Fatalf("limit after a slow response = %v, want MinInflight 2", l)
	}
	// One enterprise request holds a place at the upstream.
	go func() { // its answer comes only after the test's end
		req, _ := http.NewRequest("GET", f.front.URL+"/gated", nil)
		req.Header.Set("X-Tier", "enterprise")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the gated request did not reach the upstream within %v", waitFor)
	}
	resp := get("/fast", "free")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("free under saturation: %d Retry-After %q, want 503 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if calls := f.errs.get(); calls[len(calls)-1] != (errorCall{http.StatusServiceUnavailable, CodeOverloaded}) {
		t.Fatalf("last WriteError = %v, want 503 %s", calls[len(calls)-1], CodeOverloaded)
	}
	if resp := get("/fast", "enterprise"); resp.StatusCode != http.StatusOK {
		t.Fatalf("enterprise under saturation: %d, want 200", resp.StatusCode)
	}
	if shed.Load() != 1 {
		t.Fatalf("OnShed called %d times, want 1", shed.Load())
	}
}

// TestShedderHealthyUpstreamShedsNothing: concurrent load on an upstream
// well within its target latency is never shed.
func TestShedderHealthyUpstreamShedsNothing(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	// 2s: far above what the upstream takes even on a loaded machine.
	s, f, shed := newShedFixture(t, up.URL, 2*time.Second)
	// Healthy: concurrent free requests are never shed.
	done := make(chan int, 40)
	for range 40 {
		go func() {
			req, _ := http.NewRequest("GET", f.front.URL+"/fast", nil)
			req.Header.Set("X-Tier", "free")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 40 {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("healthy upstream: a free request got %d", code)
		}
	}
	if shed.Load() != 0 {
		t.Fatalf("healthy upstream: %d shed", shed.Load())
	}
	if l, n := s.Limit(); l != 100 || n != 0 {
		t.Errorf("after healthy load: limit %v in flight %d, want 100 and 0", l, n)
	}
}

// newShedFixture proxies to upstream through a shedder with target, the
// tiers above, and limits 2 to 100; the tier is the X-Tier header. shed
// counts OnShed calls.
func newShedFixture(t *testing.T, upstream string, target time.Duration) (*Shedder, *fixture, *atomic.Int64) {
	t.Helper()
	s, err := NewShedder(ShedderOptions{TargetLatency: target, Priority: tiers, MinInflight: 2, MaxInflight: 100})
	if err != nil {
		t.Fatal(err)
	}
	shed := new(atomic.Int64)
	f := newFixture(t, upstream, time.Minute, nil, func(o *testOptions) {
		o.Shedder = s
		o.TierOf = func(in *http.Request) string { return in.Header.Get("X-Tier") }
		o.OnShed = func(*http.Request, string) { shed.Add(1) }
	})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() { // these tests do not wait on served: keep it from filling
		for {
			select {
			case <-f.served:
			case <-stop:
				return
			}
		}
	}()
	return s, f, shed
}
