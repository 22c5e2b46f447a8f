package ratelimit

import (
	"fmt"
	"slices"
	"time"
)

// MaxConcurrency is the largest Limit.Max of a Concurrency limit: a key
// holds one entry per slot, and a store walks them on every decision.
const MaxConcurrency = 1 << 20

// validateSlots is Limit.Validate for Concurrency.
func (l Limit) validateSlots() error {
	var errs LimitErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &LimitError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if l.Max <= 0 || l.Max > MaxConcurrency {
		add("max", "must be in [1, %d], got %d", MaxConcurrency, l.Max)
	}
	switch {
	case l.Per <= 0:
		add("per", "must be > 0 (the time a slot is held without a renewal)")
	case l.Per%time.Microsecond != 0:
		add("per", "must be a whole number of microseconds, got %s", l.Per)
	case l.Per.Microseconds() > maxExact/4:
		add("per", "must be at most 2^51 µs, got %s", l.Per)
	}
	if l.Rate != 0 {
		add("rate", "does not apply to concurrency (its capacity is max); remove it")
	}
	if l.Burst != 0 {
		add("burst", "does not apply to concurrency (its capacity is max); remove it")
	}
	if l.Buckets != 0 {
		add("buckets", "applies to sliding_window only, not concurrency; remove it")
	}
	if l.Calendar.Set() {
		add("calendar", "applies to fixed_window only, not concurrency; remove it")
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// applySlots is Apply for Concurrency: a cost of 1 takes a slot for holder
// until nowUS + l.Per when fewer than l.Max slots are live. The Result's
// RetryAfter, when it denies, is the time until the earliest live slot
// expires (at least 1 µs): the latest a slot frees itself, although a
// release may free one sooner. ResetAfter is the time until the latest
// expires. ttl covers the latest slot.
func ApplySlots(st *State, nowUS int64, holder string, cost int64, l Limit, consume bool) (next State, r Result, ttl time.Duration) {
	live := LiveHolds(st, nowUS)
	r = Result{Limit: l.Max, Allowed: int64(len(live))+cost <= l.Max}
	if r.Allowed && consume && cost > 0 {
		live = append(slices.Clip(live), Hold{Holder: holder, Expires: nowUS + l.Per.Microseconds()})
	}
	r.Remaining = max(l.Max-int64(len(live)), 0)
	first, last := HoldSpan(live)
	if !r.Allowed {
		r.RetryAfter = micros(max(first-nowUS, 1))
	}
	if len(live) > 0 {
		r.ResetAfter = micros(last - nowUS)
		next = State{Per: l.Per.Microseconds(), Holds: live}
		ttl = TTLMillis(last - nowUS)
	}
	return next, r, ttl
}

// liveHolds returns the holds of st that have not expired at nowUS. It
// returns st's own slice when all are live, so the caller must not append
// to it in place.
func LiveHolds(st *State, nowUS int64) []Hold {
	if absent(st) {
		return nil
	}
	for i, h := range st.Holds {
		if h.Expires <= nowUS {
			live := slices.Clone(st.Holds[:i])
			for _, h := range st.Holds[i+1:] {
				if h.Expires > nowUS {
					live = append(live, h)
				}
			}
			return live
		}
	}
	return st.Holds
}

// holdSpan returns the earliest and latest expiry of holds (0, 0 when
// there are none).
func HoldSpan(holds []Hold) (first, last int64) {
	for i, h := range holds {
		if i == 0 || h.Expires < first {
			first = h.Expires
		}
		last = max(last, h.Expires)
	}
	return first, last
}

// releaseSlot returns st without holder's slot (one of them, should the
// holder hold several).
func ReleaseSlot(st *State, holder string) State {
	i := slices.IndexFunc(st.Holds, func(h Hold) bool { return h.Holder == holder })
	if i < 0 {
		return *st
	}
	next := *st
	next.Holds = slices.Delete(slices.Clone(st.Holds), i, i+1)
	return next
}

// CheckSlotItems reports whether items may be released or renewed (see
// SlotStore): each a valid Concurrency item with a Holder. The error wraps
// ErrInvalid and names the item's index.
func CheckSlotItems(items []Item) error {
	for i, it := range items {
		if it.Algorithm != Concurrency || it.Holder == "" {
			return fmt.Errorf("item %d: %w: only concurrency items with a holder hold slots", i, ErrInvalid)
		}
		if err := ValidateItem(Item{Key: it.Key, Algorithm: it.Algorithm, Limit: it.Limit, Holder: it.Holder}); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	return nil
}
