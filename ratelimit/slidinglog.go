package ratelimit

import "time"

// applySlidingLog is Apply for SlidingLog. l must be valid.
//
// The log is evaluated at now' = max(now, newest admission), so a clock that
// went backwards cannot let admissions leave the window early.
func applySlidingLog(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p := l.Per.Microseconds()
	r := l.Rate
	var entries []LogEntry
	if !absent(st) {
		entries = st.Entries
	}
	at := now
	if n := len(entries); n > 0 && entries[n-1].At > at {
		at = entries[n-1].At
	}
	i := 0
	for i < len(entries) && entries[i].At <= at-p {
		i++
	}
	entries = entries[i:]
	var used int64
	for _, e := range entries {
		used += e.Cost
	}

	res := Result{Allowed: used+cost <= r, Limit: r}
	if res.Allowed && consume && cost > 0 {
		// A new array: the given state's entries are never written to.
		next := make([]LogEntry, len(entries)+1)
		copy(next, entries)
		next[len(entries)] = LogEntry{At: at, Cost: cost}
		entries = next
		used += cost
	}
	if len(entries) == 0 {
		entries = nil
	}
	res.Remaining = clamp(r-used, 0, r)
	res.Debt = max(used-r, 0)
	if !res.Allowed {
		// The wait ends when enough of the oldest admissions have left.
		needed := used + cost - r
		var freed int64
		for _, e := range entries {
			freed += e.Cost
			if freed >= needed {
				res.RetryAfter = micros(e.At + p - at)
				break
			}
		}
	}
	var ttl time.Duration
	if n := len(entries); n > 0 {
		newest := entries[n-1].At
		res.ResetAfter = micros(newest + p - at)
		ttl = TTLMillis(newest + p - now)
	}
	return State{Per: p, Entries: entries}, res, ttl
}

// refundSlidingLog is Refund for SlidingLog: it removes the newest entry of
// exactly that cost, if any.
func refundSlidingLog(st *State, cost int64, l Limit) State {
	if absent(st) {
		return State{}
	}
	p := l.Per.Microseconds()
	entries := st.Entries
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Cost == cost {
			next := make([]LogEntry, 0, len(entries)-1)
			next = append(next, entries[:i]...)
			next = append(next, entries[i+1:]...)
			entries = next
			break
		}
	}
	if len(entries) == 0 {
		entries = nil
	}
	return State{Per: p, Entries: entries}
}
