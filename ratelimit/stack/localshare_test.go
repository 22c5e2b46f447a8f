package stack_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// The gateway compiles a policy's local share without checking it again:
// config.Validate holds each limit to Limit.Validate and each route's cost
// to the limit's capacity, and this property is what makes the share safe
// to trust. For every valid limit of every algorithm, every fleet size and
// every cost the full limit admits, the share is an item the store accepts,
// its capacity is at least cost and at most the full capacity.
func TestLocalShareOfAValidLimitIsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 31))
	algs := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.Concurrency}
	pick := func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo+1) }
	pers := []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, 30 * 24 * time.Hour}
	checked := 0
	for range 20000 {
		alg := algs[rng.IntN(len(algs))]
		per := pers[rng.IntN(len(pers))]
		var l ratelimit.Limit
		switch alg {
		case ratelimit.Concurrency:
			l = ratelimit.Limit{Max: pick(1, 1<<20), Per: per}
		case ratelimit.TokenBucket:
			l = ratelimit.Limit{Rate: pick(1, 1<<30), Per: per, Burst: pick(1, 1<<30)}
		case ratelimit.SlidingWindow:
			l = ratelimit.Limit{Rate: pick(1, 1<<30), Per: per, Buckets: int(pick(0, ratelimit.MaxBuckets))}
		case ratelimit.SlidingLog:
			l = ratelimit.Limit{Rate: pick(1, ratelimit.MaxSlidingLogRate), Per: per}
		default:
			l = ratelimit.Limit{Rate: pick(1, 1<<30), Per: per}
		}
		if l.Validate(alg) != nil {
			continue // only valid limits reach the gateway
		}
		full := ratelimit.Capacity(alg, l)
		maxCost := full
		if alg == ratelimit.Concurrency {
			maxCost = 1
		}
		cost := pick(1, maxCost)
		fleet := pick(1, 5000)
		share := stack.LocalShare(l, alg, fleet, cost)
		it := ratelimit.Item{Key: "k", Algorithm: alg, Limit: share, Cost: cost, Holder: "h"}
		if err := ratelimit.ValidateItem(it); err != nil {
			t.Fatalf("share of %s %+v over %d at cost %d: %+v refused: %v", alg, l, fleet, cost, share, err)
		}
		if c := ratelimit.Capacity(alg, share); c < cost || c > full {
			t.Fatalf("share of %s %+v over %d at cost %d: capacity %d, want in [%d, %d]", alg, l, fleet, cost, c, cost, full)
		}
		checked++
	}
	if checked < 10000 {
		t.Fatalf("only %d of 20000 generated limits were valid; the generator no longer covers the space", checked)
	}
}
