package ratelimit

import "time"

// DefaultBuckets is the number of buckets of a SlidingWindow limit whose
// Buckets is 0.
const DefaultBuckets = 10

// MaxBuckets is the largest Limit.Buckets: a decision sums N+1 counters,
// and a Redis script that does so must stay short.
const MaxBuckets = 100

// SlidingBuckets returns the number of buckets N of l as a SlidingWindow
// limit: Buckets, or DefaultBuckets when it is 0.
func (l Limit) SlidingBuckets() int64 {
	if l.Buckets == 0 {
		return DefaultBuckets
	}
	return int64(l.Buckets)
}

// bucketLen returns the bucket length L = ceil(P/N) in µs of a
// sliding-window limit of P µs and N buckets. N×L >= P.
func bucketLen(p, n int64) int64 { return ceilDiv(p, n) }

// slidingBuckets returns the counts of buckets k-N … k of st (N+1 values,
// oldest first) and k, the newest bucket: floor(now/L), or the stored newest
// bucket when the clock went back behind it. A state of another Per or N
// starts afresh: its buckets belong to another grid.
func slidingBuckets(st *State, now, p, n int64) (c []int64, k int64) {
	k = floorDiv(now, bucketLen(p, n))
	c = make([]int64, n+1)
	if absent(st) || st.Per != p || st.Buckets != n {
		return c, k
	}
	k = max(k, st.Window)
	first := st.Window - int64(len(st.Slots)) + 1
	for i, v := range st.Slots {
		if j := first + int64(i) - (k - n); j >= 0 {
			c[j] = v
		}
	}
	return c, k
}

// slidingState returns the state that stores buckets c ending at bucket k.
func slidingState(p, n, k int64, c []int64) State {
	i := 0
	for i < len(c) && c[i] <= 0 {
		i++
	}
	st := State{Per: p, Buckets: n, Window: k}
	if i < len(c) {
		st.Slots = c[i:]
	}
	return st
}

// applySlidingWindow is Apply for SlidingWindow. l must be valid.
//
// The sliding window divides time into buckets of L = ceil(Per/N) µs
// aligned on the Unix epoch, counts the units admitted in each, and admits
// cost at time t in bucket k = floor(t/L) when the buckets k-N … k (N+1 of
// them) hold at most Rate-cost units.
//
// Bound (no over-admission): any interval of length Per admits at most Rate.
// Proof sketch: an interval [t, t+Per) meets at most N+1 consecutive buckets,
// because N×L >= Per. Take N+1 consecutive buckets a … a+N and the last
// admission x that landed in them, in bucket j <= a+N. Every other
// admission in them came earlier, in a bucket of a … j, all of which lie in
// j-N … j, the buckets x was checked against; so when x was admitted the
// N+1 buckets held at most Rate units, and nothing was added to them since.
// (Refunds only lower counts. A clock that goes back is evaluated in the
// stored newest bucket, so admissions still land in non-decreasing buckets.)
//
// Bound (under-admission): the buckets checked at time t cover at most the
// (N+1)×L µs up to and including t, so an item is admitted whenever an
// exact sliding log of that length would admit it: Per + L, that is
// Per × (1 + 1/N), when N divides Per in µs. Steady load is thus admitted at no less than Rate×N/(N+1) per Per.
//
// State: Window is the newest bucket k; Slots the counts of buckets
// k-len(Slots)+1 … k, oldest first, with no leading zeros (at most N+1).
func applySlidingWindow(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p, n, r := l.Per.Microseconds(), l.SlidingBuckets(), l.Rate
	bl := bucketLen(p, n)
	c, k := slidingBuckets(st, now, p, n)
	var sum int64
	for _, v := range c {
		sum += v
	}
	res := Result{Allowed: sum+cost <= r, Limit: r}
	if res.Allowed && consume && cost > 0 {
		c[n] += cost
		sum += cost
	}
	res.Remaining = clamp(r-sum, 0, r)
	res.Debt = max(sum-r, 0)
	if !res.Allowed {
		// The first bucket boundary at which enough of the oldest buckets
		// have left the window; at j = N+1 every bucket has, and cost <=
		// Rate fits.
		j, left := int64(1), sum-c[0]
		for left+cost > r {
			left -= c[j]
			j++
		}
		res.RetryAfter = micros((k+j)*bl - now)
	}
	// Bucket k-N+i leaves the window when bucket k+i+1 begins.
	var end int64
	for i := n; i >= 0; i-- {
		if c[i] > 0 {
			end = (k+i+1)*bl - now
			break
		}
	}
	res.ResetAfter = micros(end)
	return slidingState(p, n, k, c), res, TTLMillis(end)
}

// refundSlidingWindow is Refund for SlidingWindow: the cost comes off the
// buckets still in the window, newest first (an admission lands in the
// newest bucket), never below 0.
func refundSlidingWindow(st *State, now, cost int64, l Limit) State {
	p, n := l.Per.Microseconds(), l.SlidingBuckets()
	if st.Per != p || st.Buckets != n {
		return State{}
	}
	c, k := slidingBuckets(st, now, p, n)
	for i := n; i >= 0 && cost > 0; i-- {
		t := min(c[i], cost)
		c[i] -= t
		cost -= t
	}
	return slidingState(p, n, k, c)
}
