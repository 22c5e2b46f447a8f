package e2e

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFleetHotKeyDeniedLocally: three gateway processes, one caller far
// over its limit (a bucket of 100 refilling 1 per hour), with and without
// leases. Expectation: never more than the 100 units admitted across the
// fleet (exactly 100 unleased; leased, at most the blocks the other
// instances hold short of it), and once the key is empty each instance
// answers the caller's 429s itself until the Retry-After runs out: at most
// 0.05 Redis script calls per request over the whole run.
func TestFleetHotKeyDeniedLocally(t *testing.T) {
	for _, leased := range []bool{false, true} {
		name := "unleased"
		if leased {
			name = "leased"
		}
		t.Run(name, func(t *testing.T) {
			const burst, requests = 100, 4800
			rs := redistest.StartStandalone(t)
			up := startUpstream(t)
			cfg := limiterConfig(up.URL(), []string{rs.Addr}, "hot")
			pol := policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", burst)}}
			if leased {
				pol.Lease = &leaseCfg{MaxBlock: 10, TTL: "5s", Instances: 3}
			}
			cfg.Policies["tenant"] = pol
			cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
			gws := startGateways(t, 3, cfg)
			before := scriptCalls(t, rs)
			out := load{workers: 48, perWorker: requests / 48, next: func(w, i int) call {
				return call{base: roundRobin(gws, w, i).URL, path: "/ok/x", key: "key-hot"}
			}}.run(t)
			s := summarize(out, nil)
			calls := scriptCalls(t, rs) - before
			if s.unanswered > 0 {
				t.Fatalf("%d requests unanswered (first error: %v)", s.unanswered, s.firstErr)
			}
			if !s.only(200, 429) {
				t.Fatalf("status mix %s: only 200 and 429 expected", s.mix())
			}
			perReq := float64(calls) / requests
			t.Logf("%s: %s; %d script calls for %d requests (%.4f per request)", name, s.mix(), calls, requests, perReq)
			low := burst
			if leased {
				low = burst - 2*10
			}
			if got := s.status[200]; got > burst || got < low {
				t.Errorf("admitted %d, want %d..%d", got, low, burst)
			}
			if perReq > 0.05 {
				t.Errorf("%.4f script calls per request, want at most 0.05", perReq)
			}
		})
	}
}
