package ratelimit

import "time"

// windowStart returns the window and count of st. ok is false for an absent
// key, and for a state written with another Per: its window numbers belong
// to another grid, so a change of window length starts afresh.
func windowStart(st *State, p int64) (window, count int64, ok bool) {
	if absent(st) || st.Per != p {
		return 0, 0, false
	}
	return st.Window, st.Count, true
}

// applyFixedWindow is Apply for FixedWindow. l must be valid.
func applyFixedWindow(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p := l.Per.Microseconds()
	r := l.Rate
	w := floorDiv(now, p)
	window, count, ok := windowStart(st, p)
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
	window, count, ok := windowStart(st, p)
	if !ok {
		return State{}
	}
	if window >= floorDiv(now, p) {
		count = max(0, count-cost)
	}
	return State{Per: p, Window: window, Count: count}
}
