package stack_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestDenialCacheLargerCostOwnWait is the case of a smaller denial
// remembered with 13 s and a larger request needing 21.4 s: the larger one
// is told its own wait (answered from memory, exactly as the store would),
// and a request at the told time is admitted.
func TestDenialCacheLargerCostOwnWait(t *testing.T) {
	c, inner, clock := newDenialCache(0)
	defer c.Close()
	tb := func(cost int64) ratelimit.Item {
		return ratelimit.Item{Key: "tpm", Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 100, Per: time.Second, Burst: 3000}, Cost: cost}
	}
	if d := decide(t, c, tb(3000)); !d.Allowed {
		t.Fatalf("draining the bucket: %+v", d)
	}
	if d := decide(t, c, tb(1300)); d.Allowed || d.RetryAfter != 13*time.Second {
		t.Fatalf("small request: %+v, want a denial with RetryAfter 13s", d)
	}
	calls := inner.Calls()
	clock.Set(dcT0.Add(time.Second))
	d := decide(t, c, tb(2140))
	if want := 20400 * time.Millisecond; d.Allowed || d.RetryAfter != want || d.Results[0].RetryAfter != want {
		t.Fatalf("larger request 1 s later: %+v, want a denial with RetryAfter %v (21.4 s from the drain)", d, want)
	}
	if d.Results[0].ResetAfter < d.RetryAfter {
		t.Errorf("ResetAfter %v before RetryAfter %v", d.Results[0].ResetAfter, d.RetryAfter)
	}
	if got := inner.Calls(); got != calls {
		t.Errorf("%d store calls for the larger request, want it answered from memory", got-calls)
	}
	// Just before the told time the store agrees it does not fit.
	clock.Set(dcT0.Add(21400*time.Millisecond - time.Microsecond))
	if d := decide(t, c, tb(2140)); d.Allowed {
		t.Fatalf("1 µs before the told time: admitted %+v", d)
	}
	clock.Set(dcT0.Add(21400 * time.Millisecond))
	if d := decide(t, c, tb(2140)); !d.Allowed {
		t.Fatalf("at the told time: %+v, want admitted", d)
	}
}

// TestDenialCacheLargerCostAsksStore: where a larger cost's wait does not
// follow from the remembered denial, the store is asked, and its answer
// (not the remembered, too early one) is what the caller is told.
func TestDenialCacheLargerCostAsksStore(t *testing.T) {
	t.Run("sliding log", func(t *testing.T) {
		c, inner, clock := newDenialCache(0)
		defer c.Close()
		sl := func(cost int64) ratelimit.Item {
			return ratelimit.Item{Key: "k", Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 4, Per: 10 * time.Second}, Cost: cost}
		}
		decide(t, c, sl(2))
		clock.Set(dcT0.Add(4 * time.Second))
		decide(t, c, sl(2))
		clock.Set(dcT0.Add(5 * time.Second))
		small := decide(t, c, sl(1)) // the first two leave at 10 s
		if small.Allowed || small.RetryAfter != 5*time.Second {
			t.Fatalf("small: %+v, want RetryAfter 5s", small)
		}
		calls := inner.Calls()
		large := decide(t, c, sl(3)) // needs the second two gone too: 14 s
		if large.Allowed || large.RetryAfter != 9*time.Second || inner.Calls() != calls+1 {
			t.Fatalf("large: %+v after %d store calls, want the store's RetryAfter 9s", large, inner.Calls()-calls)
		}
	})
	t.Run("allowed item the larger cost may not fit", func(t *testing.T) {
		c, inner, _ := newDenialCache(0)
		defer c.Close()
		a := func(cost int64) ratelimit.Item {
			return ratelimit.Item{Key: "a", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 10}, Cost: cost}
		}
		b := func(cost int64) ratelimit.Item {
			return ratelimit.Item{Key: "b", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: cost}
		}
		decide(t, c, a(6))  // a keeps 4
		decide(t, c, b(10)) // b empty
		if d := decide(t, c, a(3), b(3)); d.Allowed || d.RetryAfter != 300*time.Millisecond {
			t.Fatalf("small: %+v, want b's 300ms", d)
		}
		calls := inner.Calls()
		d := decide(t, c, a(5), b(5)) // a now needs 1 s, b 500 ms
		if d.Allowed || d.RetryAfter != time.Second || inner.Calls() != calls+1 {
			t.Fatalf("large: %+v after %d store calls, want the store's RetryAfter 1s", d, inner.Calls()-calls)
		}
	})
}
