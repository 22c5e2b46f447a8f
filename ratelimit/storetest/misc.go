package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

func testInvalid(e *env) {
	tb := ratelimit.Limit{Rate: 5, Per: time.Second, Burst: 5}
	win := ratelimit.Limit{Rate: 5, Per: time.Second}
	k := e.key("inv")
	cases := []struct {
		name string
		it   ratelimit.Item
	}{
		{"empty key", ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: tb, Cost: 1}},
		{"zero algorithm", ratelimit.Item{Key: k, Limit: tb, Cost: 1}},
		{"unknown algorithm", ratelimit.Item{Key: k, Algorithm: 99, Limit: tb, Cost: 1}},
		{"zero rate", ratelimit.Item{Key: k, Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Per: time.Second}, Cost: 1}},
		{"negative rate", ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingWindow, Limit: ratelimit.Limit{Rate: -1, Per: time.Second}}},
		{"zero per", ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Burst: 1}}},
		{"per below 1µs", ratelimit.Item{Key: k, Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: 500 * time.Nanosecond}}},
		{"token bucket without burst", ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: win, Cost: 1}},
		{"window with burst", ratelimit.Item{Key: k, Algorithm: ratelimit.FixedWindow, Limit: tb, Cost: 1}},
		{"negative cost", ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingLog, Limit: win, Cost: -1}},
		{"cost above burst", ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: tb, Cost: 6}},
		{"cost above rate", ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingWindow, Limit: win, Cost: 6}},
		{"sliding log rate too high", ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: ratelimit.MaxSlidingLogRate + 1, Per: time.Second}}},
		{"burst × per above 2^53", ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1 << 33}}},
		{"rate × per above 2^53", ratelimit.Item{Key: k, Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1 << 33, Per: time.Hour}}},
	}
	for _, c := range cases {
		_, err := e.store.Decide(context.Background(), []ratelimit.Item{c.it})
		if !errors.Is(err, ratelimit.ErrInvalid) {
			e.t.Errorf("%s: err = %v, want one wrapping ErrInvalid", c.name, err)
		}
	}

	// One invalid item fails the whole batch, and nothing is taken.
	valid := ratelimit.Item{Key: e.key("valid"), Algorithm: ratelimit.TokenBucket, Limit: tb, Cost: 5}
	_, err := e.store.Decide(context.Background(), []ratelimit.Item{valid, cases[len(cases)-1].it})
	if !errors.Is(err, ratelimit.ErrInvalid) {
		e.t.Errorf("batch with one invalid item: err = %v, want one wrapping ErrInvalid", err)
	}
	e.wantRemaining("valid item of an invalid batch", "valid", spec{valid.Algorithm, valid.Limit}, 5)
}

func testRetryAfterMax(e *env) {
	per := func(p time.Duration) spec {
		return spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 1, Per: p, Burst: 1}}
	}
	short, long, longer := per(time.Second), per(10*time.Second), per(100*time.Second)
	e.set(0)
	for _, it := range []ratelimit.Item{e.item("short", short, 1), e.item("long", long, 1), e.item("longer", longer, 1)} {
		e.wantAllowed("drain "+it.Key, e.one(it), true)
	}
	d := e.decide(e.item("short", short, 1), e.item("long", long, 1))
	if d.Allowed || d.RetryAfter != 10*time.Second || d.Results[0].RetryAfter != time.Second {
		e.t.Errorf("two denials: got %+v, want denied, RetryAfter 10s (the longest), first result 1s", d)
	}
	sh := e.item("longer", longer, 1)
	sh.Shadow = true
	d = e.decide(e.item("short", short, 1), sh)
	if d.Allowed || d.RetryAfter != time.Second {
		e.t.Errorf("denial beside a longer shadow denial: got %+v, want RetryAfter 1s (shadow items do not count)", d)
	}
}

func testDoneContext(e *env) {
	s := specs(5, time.Second)[0]
	e.set(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.store.Decide(ctx, []ratelimit.Item{e.item("ctx", s, 5)})
	if !errors.Is(err, ratelimit.ErrUnavailable) {
		e.t.Errorf("Decide with a cancelled context: err = %v, want one wrapping ErrUnavailable", err)
	}
	e.wantRemaining("after a cancelled Decide", "ctx", s, 5)
}

// testConcurrent hammers one key, and a pair of keys in batches, from
// several goroutines with the clock frozen: exactly the capacity is admitted.
func testConcurrent(e *env, s spec) {
	const workers, tries = 8, 25
	c := s.capacity()
	e.set(0)
	var admitted atomic.Int64
	errs := make(chan error, workers)
	run := func(items func() []ratelimit.Item) {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range tries {
					d, err := e.store.Decide(context.Background(), items())
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}

	run(func() []ratelimit.Item { return []ratelimit.Item{e.item("hot", s, 1)} })
	if got := admitted.Load(); got != c {
		e.t.Errorf("%d goroutines × %d tries on one key of capacity %d admitted %d", workers, tries, c, got)
	}
	e.wantRemaining("after the hammering", "hot", s, 0)

	// Batches of a small key and a large one: once the small one is empty
	// every batch is denied, and the large key lost exactly what was admitted.
	small := s
	small.lim.Rate = 30
	if small.alg == ratelimit.TokenBucket {
		small.lim.Burst = 30
	}
	admitted.Store(0)
	run(func() []ratelimit.Item { return []ratelimit.Item{e.item("small", small, 1), e.item("large", s, 1)} })
	if got := admitted.Load(); got != 30 {
		e.t.Errorf("batches limited by a key of capacity 30: admitted %d", got)
	}
	e.wantRemaining("large key after the batches", "large", s, c-30)

	close(errs)
	for err := range errs {
		e.t.Errorf("concurrent Decide: %v", err)
	}
}
