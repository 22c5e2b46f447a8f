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

// fixedGrid returns the window of l that holds now: its number, the
// length P (µs) its state is written with, and its end (µs). A plain window
// is number floor(now/P) of the grid of Per; a calendar window is numbered
// by its start (µs), and P is its own length, which varies with the
// calendar.
func fixedGrid(now int64, l Limit) (w, p, end int64) {
	if l.Calendar.Set() {
		start, end := l.Calendar.Bounds(now)
		return start, end - start, end
	}
	p = l.Per.Microseconds()
	w = floorDiv(now, p)
	return w, p, (w + 1) * p
}

// fixedStored returns the stored window, its P, its count and its end, and
// whether st holds a usable state for the window (w, p) of l: one of the
// same window, or of a later one (the clock went backwards, and then the
// stored window is kept with its count, so going back in time frees
// nothing).
func fixedStored(st *State, w, p int64, cal bool) (window, sp, count, end int64, ok bool) {
	if absent(st) {
		return 0, 0, 0, 0, false
	}
	if !cal {
		window, count, ok = windowStart(st, p)
		if !ok || window < w {
			return 0, 0, 0, 0, false
		}
		return window, p, count, (window + 1) * p, true
	}
	if st.Window < w || (st.Window == w && st.Per != p) {
		return 0, 0, 0, 0, false
	}
	return st.Window, st.Per, st.Count, st.Window + st.Per, true
}

// applyFixedWindow is Apply for FixedWindow. l must be valid.
func applyFixedWindow(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	r := l.Rate
	window, p, endAt := fixedGrid(now, l)
	var count int64
	if sw, sp, sc, se, ok := fixedStored(st, window, p, l.Calendar.Set()); ok {
		window, p, count, endAt = sw, sp, sc, se
	}

	res := Result{Allowed: count+cost <= r, Limit: r}
	if res.Allowed && consume {
		count += cost
	}
	res.Remaining = clamp(r-count, 0, r)
	res.Debt = max(count-r, 0)
	end := endAt - now
	if !res.Allowed {
		res.RetryAfter = micros(max(end, 1))
	}
	var ttl time.Duration
	if count > 0 {
		res.ResetAfter = micros(end)
		ttl = TTLMillis(end)
	}
	return State{Per: p, Window: window, Count: count}, res, ttl
}

// refundFixedWindow is Refund for FixedWindow: the cost comes off the count
// only while the window it was admitted in is still the current one.
func refundFixedWindow(st *State, now, cost int64, l Limit) State {
	w, p, _ := fixedGrid(now, l)
	window, sp, count, _, ok := fixedStored(st, w, p, l.Calendar.Set())
	if !ok {
		// An earlier window: nothing to take back from, keep it as is. A
		// state of another grid reads as absent.
		if absent(st) || (!l.Calendar.Set() && st.Per != p) {
			return State{}
		}
		return *st
	}
	count = max(0, count-cost)
	return State{Per: sp, Window: window, Count: count}
}
