package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestDenialCacheHotKeyAcrossInstances hammers one key far over its limit
// from 3 instances, each a stack.DenialCache over its own Redis client (and, for
// the token bucket, its own lease.Store), on one injected clock: a request
// per instance per millisecond for 30 s, 90,000 requests. The admitted
// count must be exactly what the limit allows (for the leased bucket: never
// more, and at most the instances' blocks fewer), and the script calls that
// reach Redis at most 0.05 per request.
func TestDenialCacheHotKeyAcrossInstances(t *testing.T) {
	srv := redistest.StartStandalone(t)
	t0 := time.Unix(1_700_000_000, 0) // a multiple of 10 s: windows start on it
	const instances, rounds = 3, 30_000
	cases := []struct {
		name     string
		item     ratelimit.Item
		min, max int
	}{
		// 50 per 10 s window, 3 windows.
		{"fixed_window", ratelimit.Item{Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 50, Per: 10 * time.Second}, Cost: 1}, 150, 150},
		// At most 150 per 10 s (sliding windows may admit a little less).
		{"sliding_window", ratelimit.Item{Algorithm: ratelimit.SlidingWindow, Limit: ratelimit.Limit{Rate: 50, Per: 10 * time.Second}, Cost: 1}, 136, 150},
		// Burst 10, then 5 a second: 10 + 5×(30 s − 1 ms) = 159; leased in
		// blocks of up to 3 per instance, whose units may be left unused.
		{"token_bucket_leased", ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 50, Per: 10 * time.Second, Burst: 10}, Cost: 1,
			Lease: ratelimit.Lease{MaxBlock: 3, TTL: time.Second, Instances: instances}}, 159 - 3*instances, 159},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := &storetest.Clock{}
			clock.Set(t0)
			c.item.Key = redistest.KeyPrefix(t) + "{hot}"
			stores := make([]*stack.DenialCache, instances)
			for i := range stores {
				red := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{Now: clock.Now})
				var inner ratelimit.Store = red
				if c.item.Lease.Leased() {
					inner = lease.New(red, lease.Options{Now: clock.Now, SweepEvery: -1})
				}
				stores[i] = stack.NewDenialCache(inner, stack.DenialCacheOptions{Now: clock.Now})
				t.Cleanup(func() { _ = stores[i].Close() })
			}
			_, scripts0, _ := commandCalls(t, srv)
			admitted := 0
			for r := range rounds {
				clock.Set(t0.Add(time.Duration(r) * time.Millisecond))
				for _, s := range stores {
					d, err := s.Decide(context.Background(), []ratelimit.Item{c.item})
					if err != nil {
						t.Fatalf("round %d: %v", r, err)
					}
					if d.Allowed {
						admitted++
					}
				}
			}
			_, scripts1, _ := commandCalls(t, srv)
			perReq := float64(scripts1-scripts0) / float64(instances*rounds)
			t.Logf("%s: %d admitted, %d script calls for %d requests (%.4f per request)", c.name, admitted, scripts1-scripts0, instances*rounds, perReq)
			if admitted < c.min || admitted > c.max {
				t.Errorf("admitted %d, want %d..%d", admitted, c.min, c.max)
			}
			if perReq > 0.05 {
				t.Errorf("%.4f script calls per request, want at most 0.05", perReq)
			}
		})
	}
}
