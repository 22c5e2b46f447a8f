package redisstore_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/benchloop"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// BenchmarkLeaseHotKey decides one hot key (a bucket that never runs out)
// from three instances, each a store on its own client, at 64 callers in
// all: leased (max_block 50, ttl 1s, instances 3) and not. It reports
// throughput, latency percentiles and script calls per admitted request.
func BenchmarkLeaseHotKey(b *testing.B) {
	srv := redistest.StartStandalone(b)
	for _, mode := range []string{"leased", "unleased"} {
		b.Run(mode, func(b *testing.B) {
			stores := make([]ratelimit.Store, 3)
			for i := range stores {
				r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{Timeout: time.Second})
				stores[i] = r
				if mode == "leased" {
					stores[i] = ratelimit.NewLeaseStore(r, ratelimit.LeaseOptions{})
				}
				s := stores[i]
				b.Cleanup(func() { _ = s.Close() })
			}
			it := leased(redistest.KeyPrefix(b)+"{hot}:tenant", 1_000_000_000, 1_000_000_000, time.Second, 1, 50, time.Second, 3)
			storetest.WarmUp(b, stores[0], []ratelimit.Item{it})
			_, s0, _ := commandCalls(b, srv)
			var next atomic.Int64
			var admitted atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				s := stores[next.Add(1)%3]
				local := make([]time.Duration, 0, 1024)
				for pb.Next() {
					t := time.Now()
					d, err := s.Decide(context.Background(), []ratelimit.Item{it})
					local = append(local, time.Since(t))
					if err != nil {
						b.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			_, s1, _ := commandCalls(b, srv)
			benchloop.ReportLatency(b, lat, elapsed)
			if n := admitted.Load(); n > 0 {
				b.ReportMetric(float64(s1-s0)/float64(n), "scripts/admitted")
			}
		})
	}
}
