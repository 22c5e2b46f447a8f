package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestCallerFloodAtMaxLocalCallers: with server.max_local_callers 4, a
// flood of 500 distinct anonymous callers (one /64 each) neither grows the
// per-caller limiters of the quota endpoint and of stage 1 past 4 nor
// hands a drained caller a fresh burst: limiters that are not full are
// never evicted, and callers beyond the cap share one overflow bucket, so
// the flood gets at most 3 own first reads plus one bucket between them.
// The quota endpoint is tried on a gateway whose anonymous tier has no
// stage 1 (reads spend stage 1 too, which would refuse them first), and a
// read budget above what the flood can be admitted.
func TestCallerFloodAtMaxLocalCallers(t *testing.T) {
	capped := strings.Replace(baseConfig, "  max_body_bytes: 1024\n", "  max_body_bytes: 1024\n  max_local_callers: 4\n", 1)
	callers := func(f *fixture) (from func(path, addr string) int, flood func(path string) int) {
		from = func(path, addr string) int {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = addr
			w := httptest.NewRecorder()
			f.gw.ServeHTTP(w, r)
			return w.Code
		}
		flood = func(path string) (admitted int) {
			for i := range 500 {
				if from(path, fmt.Sprintf("[2001:db8:%x::1]:4000", i)) == http.StatusOK {
					admitted++
				}
			}
			return admitted
		}
		return from, flood
	}
	const victim = "192.0.2.10:4321"

	t.Run("quota endpoint", func(t *testing.T) {
		f := newFixture(t, strings.Replace(capped, "  anonymous: {local: {rate: 2, per: 1s, burst: 5}}\n", "  anonymous: {}\n", 1))
		from, flood := callers(f)
		p := f.gw.live.Load()
		for i := range quotaReadBurst {
			if code := from("/_quota", victim); code != http.StatusOK {
				t.Fatalf("victim read %d: %d", i+1, code)
			}
		}
		if got, want := flood("/_quota"), 3+quotaReadBurst; got != want {
			t.Errorf("flood of 500 callers at one instant: %d reads admitted, want %d (3 own limiters + one shared burst)", got, want)
		}
		if n := p.quotaReads.Len(); n > 4 {
			t.Errorf("quota read limiters: %d, want at most 4", n)
		}
		if code := from("/_quota", victim); code != http.StatusTooManyRequests {
			t.Errorf("drained victim after the flood: %d, want 429 (no fresh burst)", code)
		}
		f.clock.Add(500 * time.Millisecond) // one read at 2 a second
		if a, b := from("/_quota", victim), from("/_quota", victim); a != http.StatusOK || b != http.StatusTooManyRequests {
			t.Errorf("victim 500ms later: %d then %d, want 200 then 429", a, b)
		}
	})

	t.Run("stage 1", func(t *testing.T) {
		f := newFixture(t, capped)
		from, flood := callers(f)
		p := f.gw.live.Load()
		for i := range 5 { // the anonymous tier: burst 5, 2 a second
			if code := from("/v1/open", victim); code != http.StatusOK {
				t.Fatalf("victim request %d: %d", i+1, code)
			}
		}
		got := flood("/v1/open")
		if got > 3+5 {
			t.Errorf("flood of 500 callers at one instant: %d requests admitted, want at most 8 (3 own limiters + one shared burst)", got)
		}
		if n := p.tiers["anonymous"].Len(); n > 4 {
			t.Errorf("stage-1 limiters: %d, want at most 4", n)
		}
		if code := from("/v1/open", victim); code != http.StatusTooManyRequests {
			t.Errorf("drained victim after the flood: %d, want 429 (no fresh burst)", code)
		}
	})
}
