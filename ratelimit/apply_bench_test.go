package ratelimit_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// BenchmarkApply measures the pure algorithms alone, each on a limit that
// never runs dry, so every step consumes.
func BenchmarkApply(b *testing.B) {
	now := time.Unix(1_700_000_000, 0).UnixMicro()
	for _, c := range []struct {
		alg ratelimit.Algorithm
		l   ratelimit.Limit
	}{
		{ratelimit.TokenBucket, ratelimit.Limit{Rate: 1e9, Per: time.Second, Burst: 1e9}},
		{ratelimit.FixedWindow, ratelimit.Limit{Rate: 1e9, Per: time.Second}},
		{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 1e9, Per: time.Second}},
		{ratelimit.SlidingLog, ratelimit.Limit{Rate: ratelimit.MaxSlidingLogRate, Per: time.Second}},
	} {
		b.Run(c.alg.String(), func(b *testing.B) {
			st, _, _ := ratelimit.Apply(c.alg, nil, now, 1, c.l, true)
			b.ReportAllocs()
			for b.Loop() {
				ratelimit.Apply(c.alg, &st, now, 1, c.l, false)
			}
		})
	}
}
