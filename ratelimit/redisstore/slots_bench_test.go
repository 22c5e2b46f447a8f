package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/slotkeeper"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// BenchmarkRedisSlots measures what a concurrency slot costs on Redis per
// request: the admitted decision of benchItems plus one slot (still one
// script call), its release (one more), and a renewal of 100 held slots of
// 100 tenants (one script call on a single primary; on a Cluster one per
// hash slot, pipelined per node), with the commands and server time each
// takes; busy_key is the same on keys that hold another request's slot,
// as a tenant's does while it has requests in flight. The parallel cases take and release slots from 16 goroutines:
// each release its own store call (release_each), or through a
// slotkeeper.Keeper, which sends the releases that come while one is in flight
// together (release_gathered).
//
//	go test -run '^$' -bench RedisSlots ./ratelimit/redisstore
func BenchmarkRedisSlots(b *testing.B) {
	srv := redistest.StartStandalone(b)
	slot := func(prefix string, i int, holder string) ratelimit.Item {
		return ratelimit.Item{Key: prefix + "{t" + strconv.Itoa(i%benchTenants) + "}:inflight", Algorithm: ratelimit.Concurrency,
			Limit: ratelimit.Limit{Max: 1_000_000, Per: 30 * time.Second}, Cost: 1, Holder: holder}
	}
	// parallel runs the operation from 16 goroutines; flush then waits
	// for what it left in the background.
	parallel, flush := false, func() {}
	measure := func(b *testing.B, op func(i int) error) {
		b.Helper()
		total0, scripts0, us0 := commandCalls(b, srv)
		b.ResetTimer()
		if parallel {
			var seq atomic.Int64
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := op(int(seq.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		} else {
			for i := range b.N {
				if err := op(i); err != nil {
					b.Fatal(err)
				}
			}
		}
		flush()
		b.StopTimer()
		total1, scripts1, us1 := commandCalls(b, srv)
		b.ReportMetric(float64(total1-total0)/float64(b.N), "cmds/op")
		b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/op")
		b.ReportMetric(float64(us1-us0)/float64(b.N), "server-µs/op")
	}
	ctx := context.Background()
	take := func(s *redisstore.RedisStore, prefix string, i int) ([]ratelimit.Item, error) {
		items := append(benchItems(prefix, i%benchTenants), slot(prefix, i, "h"+strconv.Itoa(i)))
		d, err := s.Decide(ctx, items)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied: %+v", d)
		}
		return items[2:], err
	}
	b.Run("parallel_release_each", func(b *testing.B) {
		s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
		prefix := redistest.KeyPrefix(b)
		storetest.WarmUp(b, s, benchItems(prefix, 0))
		parallel = true
		defer func() { parallel = false }()
		measure(b, func(i int) error {
			held, err := take(s, prefix, i)
			if err != nil {
				return err
			}
			return s.Release(ctx, held)
		})
	})
	b.Run("parallel_release_gathered", func(b *testing.B) {
		s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
		prefix := redistest.KeyPrefix(b)
		storetest.WarmUp(b, s, benchItems(prefix, 0))
		var failed atomic.Int64
		k := slotkeeper.New(slotkeeper.Options{OnError: func(string, error) { failed.Add(1) }})
		defer k.Close()
		parallel, flush = true, k.Wait
		defer func() { parallel, flush = false, func() {} }()
		measure(b, func(i int) error {
			held, err := take(s, prefix, i)
			if err != nil {
				return err
			}
			k.Hold(s, held, false, nil).Release()
			return nil
		})
		if n := failed.Load(); n > 0 {
			b.Errorf("%d releases failed", n)
		}
	})
	b.Run("decide_with_slot_and_release", func(b *testing.B) {
		s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
		prefix := redistest.KeyPrefix(b)
		storetest.WarmUp(b, s, benchItems(prefix, 0))
		measure(b, func(i int) error {
			h := "h" + strconv.Itoa(i)
			items := append(benchItems(prefix, i%benchTenants), slot(prefix, i, h))
			if _, err := s.Decide(ctx, items); err != nil {
				return err
			}
			return s.Release(ctx, items[2:])
		})
	})
	b.Run("decide_with_slot_and_release_busy_key", func(b *testing.B) {
		// Each tenant's key already holds a slot of another request, as
		// it does while the tenant has requests in flight.
		s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
		prefix := redistest.KeyPrefix(b)
		storetest.WarmUp(b, s, benchItems(prefix, 0))
		for i := range benchTenants {
			if _, err := s.Decide(ctx, []ratelimit.Item{slot(prefix, i, "resident")}); err != nil {
				b.Fatal(err)
			}
		}
		measure(b, func(i int) error {
			items := append(benchItems(prefix, i%benchTenants), slot(prefix, i, "h"+strconv.Itoa(i)))
			if _, err := s.Decide(ctx, items); err != nil {
				return err
			}
			return s.Release(ctx, items[2:])
		})
	})
	b.Run("renew_100_slots", func(b *testing.B) {
		s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
		prefix := redistest.KeyPrefix(b)
		held := make([]ratelimit.Item, 100)
		for i := range held {
			held[i] = slot(prefix, i, "h"+strconv.Itoa(i))
			if _, err := s.Decide(ctx, held[i:i+1]); err != nil {
				b.Fatal(err)
			}
		}
		measure(b, func(int) error { _, err := s.Renew(ctx, held); return err })
	})
}
