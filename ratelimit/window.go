package ratelimit

import "time"

// windowStart returns the window, count and previous count of st. ok is
// false for an absent key, and for a state written with another Per: its
// window numbers belong to another grid, so a change of window length starts
// afresh.
func windowStart(st *State, p int64) (window, count, prev int64, ok bool) {
	if absent(st) || st.Per != p {
		return 0, 0, 0, false
	}
	return st.Window, st.Count, st.Prev, true
}

// applyFixedWindow is Apply for FixedWindow. l must be valid.
func applyFixedWindow(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p := l.Per.Microseconds()
	r := l.Rate
	w := floorDiv(now, p)
	window, count, _, ok := windowStart(st, p)
	// A stored window ahead of now (the clock went backwards) is kept with
	// its count, so going back in time frees nothing.
	if !ok || window < w {
		window, count = w, 0
	}

	res := Result{Allowed: count+cost <= r, Limit: r}
	if res.Allowed && consume {
		count += cost
	}
	res.Remaining = clamp(r-count, 0, r)
	end := (window+1)*p - now
	if !res.Allowed {
		res.RetryAfter = micros(max(end, 1))
	}
	var ttl time.Duration
	if count > 0 {
		res.ResetAfter = micros(end)
		ttl = ttlMillis(end)
	}
	return State{Per: p, Window: window, Count: count}, res, ttl
}

// refundFixedWindow is Refund for FixedWindow: the cost comes off the count
// only while the window it was admitted in is still the current one.
func refundFixedWindow(st *State, now, cost int64, l Limit) State {
	p := l.Per.Microseconds()
	window, count, _, ok := windowStart(st, p)
	if !ok {
		return State{}
	}
	if window >= floorDiv(now, p) {
		count = max(0, count-cost)
	}
	return State{Per: p, Window: window, Count: count}
}

// slideTo moves a sliding-window state to window w: one window on turns the
// current count into the previous one, two or more clear both. A w behind
// the stored window (the clock went backwards) changes nothing.
func slideTo(window, cur, prev, w int64) (int64, int64, int64) {
	switch {
	case w == window+1:
		return w, 0, cur
	case w > window+1:
		return w, 0, 0
	}
	return window, cur, prev
}

// applySlidingWindow is Apply for SlidingWindow. l must be valid.
//
// The estimate of the units in the sliding window ending now is
// prev×(P-into)/P + cur, kept multiplied by P so that it stays an integer.
func applySlidingWindow(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p := l.Per.Microseconds()
	r := l.Rate
	w := floorDiv(now, p)
	at := now
	window, cur, prev, ok := windowStart(st, p)
	if !ok {
		window, cur, prev = w, 0, 0
	} else if w < window {
		// The clock went backwards: evaluate at the start of the stored
		// window, where the previous window weighs the most.
		at = window * p
	} else {
		window, cur, prev = slideTo(window, cur, prev, w)
	}

	into := at - window*p
	est := prev*(p-into) + cur*p
	res := Result{Allowed: est+cost*p <= r*p, Limit: r}
	if res.Allowed && consume {
		cur += cost
		est += cost * p
	}
	res.Remaining = clamp(floorDiv(r*p-est, p), 0, r)
	if !res.Allowed {
		res.RetryAfter = micros(slidingRetry(p, r, cost, into, cur, prev))
	}
	switch {
	case cur > 0:
		res.ResetAfter = micros(2*p - into)
	case prev > 0:
		res.ResetAfter = micros(p - into)
	}
	// Both counts are gone at the end of the next window.
	ttl := ttlMillis((window+2)*p - now)
	return State{Per: p, Window: window, Count: cur, Prev: prev}, res, ttl
}

// slidingRetry returns the µs until cost fits a sliding window that denies
// it now, into µs into the current window.
func slidingRetry(p, r, cost, into, cur, prev int64) int64 {
	left := p - into
	// Later in this window the previous window's weight shrinks.
	if cur+cost <= r && prev > 0 {
		d := ceilDiv(prev*left-(r-cur-cost)*p, prev)
		if d > 0 && d < left {
			return d
		}
	}
	// Otherwise in the next one, where the current count becomes the
	// previous one and shrinks in turn.
	var e int64
	if cur > 0 {
		e = clamp(ceilDiv(p*(cur-r+cost), cur), 0, p)
	}
	return left + e
}

// refundSlidingWindow is Refund for SlidingWindow: the cost comes off the
// count of the window it was admitted in, if that is the current or the
// previous window.
func refundSlidingWindow(st *State, now, cost int64, l Limit) State {
	p := l.Per.Microseconds()
	window, cur, prev, ok := windowStart(st, p)
	if !ok {
		return State{}
	}
	w := floorDiv(now, p)
	switch {
	case w <= window:
		// The current window, or the clock went backwards and Apply
		// counted into the stored window.
		cur = max(0, cur-cost)
	case w == window+1:
		window, cur, prev = slideTo(window, cur, prev, w)
		prev = max(0, prev-cost)
	default:
		window, cur, prev = slideTo(window, cur, prev, w)
	}
	return State{Per: p, Window: window, Count: cur, Prev: prev}
}
