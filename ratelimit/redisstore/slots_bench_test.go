package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// BenchmarkRedisSlots measures what a concurrency slot costs on Redis per
// request: the admitted decision of benchItems plus one slot (still one
// script call), its release (one more), and a renewal of 100 held slots of
// 100 tenants (one script call on a single primary; on a Cluster one per
// hash slot, pipelined per node), with the commands and server time each
// takes.
//
//	go test -run '^$' -bench RedisSlots ./ratelimit/redisstore
func BenchmarkRedisSlots(b *testing.B) {
	srv := redistest.StartStandalone(b)
	slot := func(prefix string, i int, holder string) ratelimit.Item {
		return ratelimit.Item{Key: prefix + "{t" + strconv.Itoa(i%benchTenants) + "}:inflight", Algorithm: ratelimit.Concurrency,
			Limit: ratelimit.Limit{Max: 1_000_000, Per: 30 * time.Second}, Cost: 1, Holder: holder}
	}
	measure := func(b *testing.B, op func(i int) error) {
		b.Helper()
		total0, scripts0, us0 := commandCalls(b, srv)
		b.ResetTimer()
		for i := range b.N {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		total1, scripts1, us1 := commandCalls(b, srv)
		b.ReportMetric(float64(total1-total0)/float64(b.N), "cmds/op")
		b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/op")
		b.ReportMetric(float64(us1-us0)/float64(b.N), "server-µs/op")
	}
	ctx := context.Background()
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
