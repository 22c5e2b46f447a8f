package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

// benchNow is the fixed instant the benchmarks run at.
var benchNow = time.Unix(1_700_000_000, 0)

// benchLimits never run dry within a benchmark, so every Decide consumes.
var benchLimits = map[ratelimit.Algorithm]ratelimit.Limit{
	ratelimit.TokenBucket:   {Rate: 1e9, Per: time.Second, Burst: 1e9},
	ratelimit.FixedWindow:   {Rate: 1e9, Per: time.Second},
	ratelimit.SlidingWindow: {Rate: 1e9, Per: time.Second},
	ratelimit.SlidingLog:    {Rate: ratelimit.MaxSlidingLogRate, Per: time.Second},
}

func benchStore(b *testing.B) *memstore.Store {
	s := memstore.New(memstore.Options{Now: func() time.Time { return benchNow }})
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkMemoryDecideOneKey: every goroutine takes 1 unit from the same
// key (one shard, one lock).
func BenchmarkMemoryDecideOneKey(b *testing.B) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow, ratelimit.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			s := benchStore(b)
			items := []ratelimit.Item{{Key: "tenant:acme", Algorithm: alg, Limit: benchLimits[alg], Cost: 1}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := s.Decide(ctx, items); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMemoryDecideDenied: the key is empty, so nothing is written.
func BenchmarkMemoryDecideDenied(b *testing.B) {
	s := benchStore(b)
	l := ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}
	items := []ratelimit.Item{{Key: "tenant:acme", Algorithm: ratelimit.TokenBucket, Limit: l, Cost: 1}}
	if _, err := s.Decide(context.Background(), items); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if d, err := s.Decide(ctx, items); err != nil || d.Allowed {
				b.Errorf("want a denial, got %+v, %v", d, err)
				return
			}
		}
	})
}

// BenchmarkMemoryDecideManyKeys: goroutines spread over 100000 keys, each
// taken from once per round.
func BenchmarkMemoryDecideManyKeys(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%d", i)
	}
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.SlidingLog} {
		b.Run(alg.String(), func(b *testing.B) {
			s := benchStore(b)
			b.ReportAllocs()
			var seed int64
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				seed++ // different starting points; exactness is not needed
				i := int(seed * 7919)
				items := []ratelimit.Item{{Algorithm: alg, Limit: benchLimits[alg], Cost: 1}}
				for pb.Next() {
					i = (i + 1) % n
					items[0].Key = keys[i]
					if _, err := s.Decide(ctx, items); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMemoryDecideBatch: a request under three policies (tenant,
// tenant+route, global), all-or-nothing.
func BenchmarkMemoryDecideBatch(b *testing.B) {
	s := benchStore(b)
	l := benchLimits[ratelimit.TokenBucket]
	items := []ratelimit.Item{
		{Key: "{acme}:tenant", Algorithm: ratelimit.TokenBucket, Limit: l, Cost: 1},
		{Key: "{acme}:transfers.create", Algorithm: ratelimit.SlidingWindow, Limit: benchLimits[ratelimit.SlidingWindow], Cost: 1},
		{Key: "global", Algorithm: ratelimit.FixedWindow, Limit: benchLimits[ratelimit.FixedWindow], Cost: 1, Shadow: true},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := s.Decide(ctx, items); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMemorySettle: a settlement of a reserved request on its
// tenant's token bucket and a sliding window (a refund of 700 units each,
// a fresh id per call, so the set of remembered ids grows and is swept
// as it would under load), after the reservation's Decide, for the time
// that decision reports.
func BenchmarkMemorySettle(b *testing.B) {
	s := benchStore(b)
	items := []ratelimit.Item{
		{Key: "{acme}:tokens", Algorithm: ratelimit.TokenBucket, Limit: benchLimits[ratelimit.TokenBucket], Cost: 1000},
		{Key: "{acme}:window", Algorithm: ratelimit.SlidingWindow, Limit: benchLimits[ratelimit.SlidingWindow], Cost: 1000},
	}
	ss := []ratelimit.Settlement{{Item: items[0], Delta: -700}, {Item: items[1], Delta: -700}}
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d, err := s.Decide(ctx, items)
		if err != nil {
			b.Fatal(err)
		}
		ss[0].ReservedAt, ss[1].ReservedAt = d.Results[0].DecidedAt, d.Results[1].DecidedAt
		if ok, err := s.Settle(ctx, ids[i%len(ids)]+strconv.Itoa(i/len(ids)), ss); err != nil || !ok {
			b.Fatalf("settle: %v %v", ok, err)
		}
	}
}
