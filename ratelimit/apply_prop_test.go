package ratelimit

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// baseUS is an arbitrary recent Unix time in µs.
const baseUS = 1_700_000_000_000_000

// drawLimit draws an algorithm and a small valid limit for it.
func drawLimit(t *rapid.T) (Algorithm, Limit) {
	alg := rapid.SampledFrom([]Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog}).Draw(t, "alg")
	l := Limit{
		Rate: rapid.Int64Range(1, 40).Draw(t, "rate"),
		Per:  time.Duration(rapid.Int64Range(1, 3_000_000).Draw(t, "per_us")) * time.Microsecond,
	}
	if alg == TokenBucket {
		l.Burst = rapid.Int64Range(1, 40).Draw(t, "burst")
	}
	if alg == SlidingWindow {
		l.Buckets = rapid.IntRange(0, 12).Draw(t, "buckets")
	}
	return alg, l
}

// used returns the units st holds in its own terms: the token bucket's
// missing level (scaled), a window's count, the log's total.
func used(alg Algorithm, l Limit, st State) int64 {
	switch alg {
	case TokenBucket:
		return l.Burst*l.Per.Microseconds() - st.Level
	case SlidingLog:
		var n int64
		for _, e := range st.Entries {
			n += e.Cost
		}
		return n
	case SlidingWindow:
		var n int64
		for _, v := range st.Slots {
			n += v
		}
		return n
	}
	return st.Count
}

// timeWentBack reports whether now lies before the time st was last
// evaluated at, the case in which the algorithms hold back on purpose.
func timeWentBack(alg Algorithm, st *State, now int64) bool {
	if st == nil {
		return false
	}
	switch alg {
	case TokenBucket:
		return now < st.Stamp
	case SlidingWindow:
		return st.Buckets > 0 && floorDiv(now, bucketLen(st.Per, st.Buckets)) < st.Window
	case SlidingLog:
		return len(st.Entries) > 0 && now < st.Entries[len(st.Entries)-1].At
	}
	return false
}

// TestApplyProperties drives random sequences of decisions and refunds,
// with time moving both ways, and checks the invariants every store relies
// on after each step.
func TestApplyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alg, l := drawLimit(t)
		p := l.Per.Microseconds()
		capacity := Capacity(alg, l)
		now := baseUS + rapid.Int64Range(0, 10_000_000).Draw(t, "start")
		var st *State
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for range steps {
			now += rapid.Int64Range(-2*p, 3*p).Draw(t, "dt")
			cost := rapid.Int64Range(0, capacity).Draw(t, "cost")
			if rapid.IntRange(0, 5).Draw(t, "op") == 0 {
				checkRefund(t, alg, l, st, now, cost)
				if st != nil {
					next := Refund(alg, st, now, cost, l)
					st = &next
				}
				continue
			}
			checkStep(t, alg, l, st, now, cost)
			if next, r, _ := Apply(alg, st, now, cost, l, true); r.Allowed && cost > 0 {
				st = &next
			}
		}
	})
}

func checkStep(t *rapid.T, alg Algorithm, l Limit, st *State, now, cost int64) {
	capacity := Capacity(alg, l)
	p := l.Per.Microseconds()
	peek, r0, _ := Apply(alg, st, now, cost, l, false)
	next, r1, ttl := Apply(alg, st, now, cost, l, true)

	for _, r := range []Result{r0, r1} {
		if r.Remaining < 0 || r.Remaining > capacity || r.Limit != capacity {
			t.Fatalf("remaining %d / limit %d outside [0, %d]", r.Remaining, r.Limit, capacity)
		}
		if r.Allowed != (r.RetryAfter == 0) || r.RetryAfter < 0 || r.ResetAfter < 0 {
			t.Fatalf("inconsistent result %+v", r)
		}
	}
	if r0.Allowed != r1.Allowed {
		t.Fatalf("consume changed the verdict: %+v vs %+v", r0, r1)
	}

	// An admitted consume takes exactly cost; a denied one nothing.
	if r1.Allowed {
		unit := int64(1)
		if alg == TokenBucket {
			unit = p
		}
		if d := used(alg, l, next) - used(alg, l, peek); d != cost*unit {
			t.Fatalf("consume of %d took %d (scaled by %d)", cost, d, unit)
		}
		if r0.Remaining-r1.Remaining != cost {
			t.Fatalf("remaining went from %d to %d for cost %d", r0.Remaining, r1.Remaining, cost)
		}
	} else if !reflect.DeepEqual(next, peek) || r1 != r0 {
		t.Fatalf("denied consume changed something: %+v %+v vs %+v %+v", next, r1, peek, r0)
	}

	// An absent key is exactly full.
	_, ra, _ := Apply(alg, nil, now, cost, l, false)
	if want := (Result{Allowed: true, Limit: capacity, Remaining: capacity}); ra != want {
		t.Fatalf("absent key: %+v, want %+v", ra, want)
	}

	// Later, the stored state is worth at least as much as it is now:
	// going back in time never shows more capacity.
	later := now + rapid.Int64Range(0, 3*p).Draw(t, "later")
	earlier := now - rapid.Int64Range(0, 3*p).Draw(t, "earlier")
	_, re, _ := Apply(alg, &next, earlier, cost, l, false)
	_, rl, _ := Apply(alg, &next, later, cost, l, false)
	_, rn, _ := Apply(alg, &next, now, cost, l, false)
	if re.Remaining > rn.Remaining || rn.Remaining > rl.Remaining || (re.Allowed && !rn.Allowed) || (rn.Allowed && !rl.Allowed) {
		t.Fatalf("capacity not monotonic in time: %+v at -%d, %+v now, %+v at +%d", re, now-earlier, rn, rl, later-now)
	}

	// Evaluating (peeking) now does not change what any later time sees.
	c2 := rapid.Int64Range(0, capacity).Draw(t, "cost2")
	n1, a1, _ := Apply(alg, st, later, c2, l, true)
	n2, a2, _ := Apply(alg, &peek, later, c2, l, true)
	if a1 != a2 || !reflect.DeepEqual(n1, n2) {
		t.Fatalf("a peek changed the future: %+v %+v vs %+v %+v", n1, a1, n2, a2)
	}

	// From now+ttl on, the state behaves exactly like an absent key; long
	// idle in particular refills to capacity and no further.
	if ttl > 0 {
		for _, at := range []int64{now + ttl.Microseconds(), now + ttl.Microseconds() + rapid.Int64Range(0, 3*p).Draw(t, "after"), now + 1<<40} {
			n1, a1, t1 := Apply(alg, &next, at, c2, l, true)
			n2, a2, t2 := Apply(alg, nil, at, c2, l, true)
			if a1 != a2 || t1 != t2 || !reflect.DeepEqual(n1, n2) {
				t.Fatalf("%d µs after now (ttl %v) the state differs from an absent key: %+v %+v vs %+v %+v", at-now, ttl, n1, a1, n2, a2)
			}
		}
	} else if alg == TokenBucket || (r1.Allowed && cost > 0) {
		t.Fatalf("ttl %v for a state that must be kept (%+v)", ttl, next)
	}

	// RetryAfter is exact: the cost fits after it and not 1µs before.
	if !r0.Allowed && !timeWentBack(alg, st, now) {
		wait := r0.RetryAfter.Microseconds()
		if _, r, _ := Apply(alg, st, now+wait, cost, l, false); !r.Allowed {
			t.Fatalf("denied %d µs later, after the RetryAfter %v: %+v", wait, r0.RetryAfter, r)
		}
		if _, r, _ := Apply(alg, st, now+wait-1, cost, l, false); r.Allowed {
			t.Fatalf("allowed 1 µs before RetryAfter %v", r0.RetryAfter)
		}
	}

	// A refund right after an admitted consume restores the key exactly.
	if r1.Allowed && cost > 0 {
		back := Refund(alg, &next, now, cost, l)
		_, x, _ := Apply(alg, &back, now, c2, l, false)
		_, y, _ := Apply(alg, &peek, now, c2, l, false)
		if x != y {
			t.Fatalf("refund did not restore: %+v vs %+v", x, y)
		}
	}
}

// checkRefund checks that a refund of any cost gives back at most that
// cost and never more than the capacity.
func checkRefund(t *rapid.T, alg Algorithm, l Limit, st *State, now, cost int64) {
	capacity := Capacity(alg, l)
	back := Refund(alg, st, now, cost, l)
	if st == nil {
		if !reflect.DeepEqual(back, State{}) {
			t.Fatalf("refund to an absent key gave %+v", back)
		}
		return
	}
	if back.Level > l.Burst*l.Per.Microseconds() || back.Count < 0 || slices.ContainsFunc(back.Slots, func(v int64) bool { return v < 0 }) {
		t.Fatalf("refund left state %+v outside its bounds", back)
	}
	_, before, _ := Apply(alg, st, now, 0, l, false)
	_, after, _ := Apply(alg, &back, now, 0, l, false)
	if after.Remaining > min(capacity, before.Remaining+cost) || after.Remaining < before.Remaining {
		t.Fatalf("refund of %d took remaining from %d to %d (capacity %d)", cost, before.Remaining, after.Remaining, capacity)
	}
}
