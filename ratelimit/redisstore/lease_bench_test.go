package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/benchloop"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// BenchmarkLeaseHotKey decides one hot key (a bucket that never runs out)
// from three instances, each a store on its own client, at 64 callers in
// all: leased (max_block 50, ttl 1s, instances 3) and not. It reports
// throughput, latency percentiles, script calls per admitted request and
// the time callers spent blocked on locks per decision.
func BenchmarkLeaseHotKey(b *testing.B) {
	srv := redistest.StartStandalone(b)
	for _, mode := range []string{"leased", "unleased"} {
		b.Run(mode, func(b *testing.B) {
			stores := make([]ratelimit.Store, 3)
			for i := range stores {
				r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{Timeout: time.Second})
				stores[i] = r
				if mode == "leased" {
					stores[i] = lease.New(r, lease.Options{})
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
			waited := benchloop.MutexWait()
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
			benchloop.ReportMutexWait(b, waited)
			if n := admitted.Load(); n > 0 {
				b.ReportMetric(float64(s1-s0)/float64(n), "scripts/admitted")
			}
		})
	}
}

// BenchmarkLeaseManyHotKeys decides 256 hot keys (buckets that never run
// out) on one leasing instance from parallel callers, each walking the
// keys from its own offset: with a hand-set lease (max_block 1000) and
// with lease: auto. Nearly every decision is admitted from a block, so
// ns/op is the instance's own work per decision and shows how it scales
// with -cpu when decisions of different keys need not wait for each
// other. It reports script calls per decision too, and the time callers spent
// blocked on locks per decision (mutex-wait-ns/op).
func BenchmarkLeaseManyHotKeys(b *testing.B) {
	srv := redistest.StartStandalone(b)
	const keys = 256
	for _, mode := range []string{"max_block", "auto"} {
		b.Run(mode, func(b *testing.B) {
			r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{Timeout: time.Second})
			l := lease.New(r, lease.Options{})
			b.Cleanup(func() { _ = l.Close() })
			items := make([][]ratelimit.Item, keys)
			for i := range items {
				it := leased(fmt.Sprintf("%s{t%d}:tenant", redistest.KeyPrefix(b), i), 1_000_000_000, 1_000_000_000, time.Second, 1, 1000, time.Second, 1)
				if mode == "auto" {
					it.Lease = ratelimit.Lease{Auto: true, TTL: time.Second, Instances: 1}
				}
				items[i] = []ratelimit.Item{it}
			}
			// Every key hot before the clock starts: its demand engaged and
			// a full block held.
			for range 20 {
				for _, batch := range items {
					if _, err := l.Decide(context.Background(), batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			_, s0, _ := commandCalls(b, srv)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			waited := benchloop.MutexWait()
			b.RunParallel(func(pb *testing.PB) {
				k := int(next.Add(97))
				for pb.Next() {
					k++
					if _, err := l.Decide(context.Background(), items[k%keys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			benchloop.ReportMutexWait(b, waited)
			_, s1, _ := commandCalls(b, srv)
			b.ReportMetric(float64(s1-s0)/float64(b.N), "scripts/op")
		})
	}
}
