package storetest

import (
	"fmt"
	"time"

	"pgregory.net/rapid"

	"github.com/quotagate/quotagate/ratelimit"
)

// testSlidingWindowBound drives sliding-window keys through adversarial
// traces (bursts just before a bucket or window ends, after idle periods,
// alternating with bursts just after) and random ones, and checks both
// bounds the algorithm states:
//
//   - over-admission: no interval of length Per admits more than Rate;
//   - under-admission: an item is denied only when the units admitted in the
//     (N+1)×L µs up to now, plus its cost, exceed Rate (L = ceil(Per/N)).
//
// Per is at least 10 s so that a store on real time (Redis) keeps every key
// for at least as long as the injected clock needs it.
func testSlidingWindowBound(e *env) {
	var seq int
	rapid.Check(e.t, func(rt *rapid.T) {
		seq++
		n := rapid.IntRange(1, 12).Draw(rt, "buckets")
		rate := rapid.Int64Range(1, 20).Draw(rt, "rate")
		per := rapid.Int64Range(10, 60).Draw(rt, "per_s") * 1_000_000
		lim := ratelimit.Limit{Rate: rate, Per: time.Duration(per) * time.Microsecond, Buckets: n}
		bl := (per + int64(n) - 1) / int64(n)
		key := fmt.Sprintf("bound%d", seq)
		type adm struct{ at, cost int64 }
		var got []adm
		now := t0.UnixMicro()
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(rt, "move") {
			case 0: // another request at the same instant
			case 1:
				now += rapid.Int64Range(0, 2*bl).Draw(rt, "dt")
			case 2: // just before the current bucket ends
				now = (now/bl+1)*bl - 1
			case 3: // just before the current window of length Per ends
				now = (now/per+1)*per - 1
			case 4: // just after the next bucket begins
				now = (now/bl + 1) * bl
			case 5: // idle
				now += rapid.Int64Range(per, 3*per).Draw(rt, "idle")
			}
			cost := rapid.Int64Range(1, rate).Draw(rt, "cost")
			e.clock.Set(time.UnixMicro(now))
			r := e.one(e.item(key, spec{ratelimit.SlidingWindow, lim}, cost))
			if r.Allowed {
				got = append(got, adm{now, cost})
				continue
			}
			var recent int64
			for _, a := range got {
				if a.at > now-int64(n+1)*bl {
					recent += a.cost
				}
			}
			if recent+cost <= rate {
				rt.Fatalf("denied cost %d at %d µs with only %d units admitted in the %d µs before (rate %d, %d buckets of %d µs)", cost, now-t0.UnixMicro(), recent, int64(n+1)*bl, rate, n, bl)
			}
		}
		// The interval of length Per with the most admissions starts at one.
		for i, a := range got {
			var sum int64
			for _, b := range got[i:] {
				if b.at < a.at+per {
					sum += b.cost
				}
			}
			if sum > rate {
				rt.Fatalf("%d units admitted in [%d, %d) µs, rate %d per %d µs (%d buckets)", sum, a.at-t0.UnixMicro(), a.at-t0.UnixMicro()+per, rate, per, n)
			}
		}
	})
}
