package ratelimit

import (
	"fmt"
	"strings"
	"time"
)

// Apply evaluates, and when consume is true takes, cost units of limit l
// under algorithm alg from the state st at Unix time nowUS (microseconds).
// A nil st, or one whose Per is <= 0, is an absent key: a key at full
// capacity.
//
// It implements the arithmetic shared with the Redis scripts (integer
// microseconds and units only) and reads no clock. It never modifies *st.
//
// The returned Result describes the key after the call: r.Allowed reports
// whether cost fits now; the cost is taken only when it fits, consume is
// true and cost > 0 (r.Remaining and r.ResetAfter then count it). A cost of
// 0 evaluates without taking anything.
//
// next is the state to store. ttl is how long the store must keep next
// (rounded up to whole milliseconds, as a key expiry needs): from nowUS +
// ttl on, next behaves exactly like an absent key, so a store may expire it
// then. ttl is 0 when next already behaves like an absent key (a window
// algorithm with nothing counted), and at least 1 ms for a token bucket.
//
// The item (alg, l, cost) must be valid (see ValidateItem). For an invalid
// one Apply takes nothing: it returns st unchanged (the zero State for nil)
// with a Result that does not allow and a ttl of 0.
func Apply(alg Algorithm, st *State, nowUS int64, cost int64, l Limit, consume bool) (next State, r Result, ttl time.Duration) {
	if checkItem(alg, l, cost) != nil {
		if st != nil {
			next = *st
		}
		return next, Result{Limit: Capacity(alg, l)}, 0
	}
	switch alg {
	case TokenBucket:
		return applyTokenBucket(st, nowUS, cost, l, consume)
	case FixedWindow:
		return applyFixedWindow(st, nowUS, cost, l, consume)
	case SlidingWindow:
		return applySlidingWindow(st, nowUS, cost, l, consume)
	case Concurrency:
		return ApplySlots(st, nowUS, "", cost, l, consume)
	default:
		return applySlidingLog(st, nowUS, cost, l, consume)
	}
}

// Refund gives back cost units that an earlier Apply at about nowUS took
// from st, and returns the state to store. It is for a store that decides a
// batch in several atomic steps and must undo a step that was admitted when a
// later one denied.
//
// A token bucket gets cost units back, never above its capacity; a fixed
// window loses cost from its count if the window is still the current one; a
// sliding window loses it from the current window's count, or from the
// previous window's count if the window has just turned; a sliding log loses
// its newest entry of exactly that cost. A refund never makes a key live
// longer, so the store keeps the key's current expiry.
//
// A nil st (or one with Per <= 0) is an absent key, which is already full:
// Refund then returns the zero State and the store should leave the key
// absent. An invalid item (see ValidateItem) returns st unchanged.
func Refund(alg Algorithm, st *State, nowUS int64, cost int64, l Limit) State {
	if absent(st) {
		return State{}
	}
	if checkItem(alg, l, cost) != nil {
		return *st
	}
	switch alg {
	case TokenBucket:
		return refundTokenBucket(st, nowUS, cost, l)
	case FixedWindow:
		return refundFixedWindow(st, nowUS, cost, l)
	case SlidingWindow:
		return refundSlidingWindow(st, nowUS, cost, l)
	case Concurrency:
		return ReleaseSlot(st, "")
	default:
		return refundSlidingLog(st, cost, l)
	}
}

// Capacity returns the capacity of l under alg in units: Burst for a token
// bucket, Max for Concurrency, Rate for the window algorithms (0 for an
// unknown algorithm).
func Capacity(alg Algorithm, l Limit) int64 {
	switch alg {
	case TokenBucket:
		return l.Burst
	case Concurrency:
		return l.Max
	case FixedWindow, SlidingWindow, SlidingLog:
		return l.Rate
	}
	return 0
}

// ValidateItem reports whether it can be decided. The error wraps
// ErrInvalid and names the rule broken; it never contains the key. The rules:
// Key is not empty, Algorithm is one of the defined ones, Limit passes
// Limit.Validate for it, and 0 <= Cost <= capacity (see Capacity); a
// Concurrency item has Cost 0 or 1, and a Holder when its Cost is 1.
func ValidateItem(it Item) error {
	if it.Key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := checkItem(it.Algorithm, it.Limit, it.Cost); err != nil {
		return err
	}
	if it.Algorithm == Concurrency && it.Cost > 0 && it.Holder == "" {
		return fmt.Errorf("%w: concurrency: a slot needs a holder", ErrInvalid)
	}
	return nil
}

// checkItem is ValidateItem without the key.
func checkItem(alg Algorithm, l Limit, cost int64) error {
	if !alg.Valid() {
		return fmt.Errorf("%w: unknown %s", ErrInvalid, alg)
	}
	if err := l.Validate(alg); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, alg, err)
	}
	if c := Capacity(alg, l); cost < 0 || cost > c {
		return fmt.Errorf("%w: %s: cost %d must be in [0, capacity %d]", ErrInvalid, alg, cost, c)
	}
	if alg == Concurrency && cost > 1 {
		return fmt.Errorf("%w: concurrency: cost %d must be 0 or 1 (a request holds one slot)", ErrInvalid, cost)
	}
	return nil
}

// LimitError is one rule of Limit.Validate that a limit breaks.
type LimitError struct {
	// Field is the field at fault: "rate", "per", "burst", "buckets" or
	// "max".
	Field string
	// Problem says what is wrong, such as "must be > 0".
	Problem string
}

// Error returns "field: problem".
func (e *LimitError) Error() string { return e.Field + ": " + e.Problem }

// LimitErrors is every rule a limit breaks, in the order of the rules.
type LimitErrors []*LimitError

// Error returns the problems separated by "; ".
func (es LimitErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Unwrap returns the individual problems, for errors.As.
func (es LimitErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// Validate reports every rule of algorithm alg that l breaks, as
// LimitErrors, or nil. It is the one statement of the limit rules; the
// configuration and the stores both use it. The rules:
//
//   - Rate > 0.
//   - Per > 0 and a whole number of microseconds (P): all time is kept in
//     integer microseconds.
//   - TokenBucket has Burst > 0; the window algorithms have Burst == 0
//     (their capacity is Rate).
//   - SlidingLog has Rate <= MaxSlidingLogRate.
//   - SlidingWindow has 0 <= Buckets <= MaxBuckets; the others Buckets == 0.
//   - Concurrency has 1 <= Max <= MaxConcurrency, Rate == 0 and Per > 0
//     (the slot's time to live), and no Calendar; the others Max == 0.
//   - Rate×P and Burst×P are at most 2^53, so that the scaled integers of
//     the algorithms are exact in IEEE doubles too.
//
// alg must be valid (see Algorithm.Valid); Validate does not check it. It
// does not allocate when l is valid.
func (l Limit) Validate(alg Algorithm) error {
	var errs LimitErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &LimitError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if alg == Concurrency {
		return l.validateSlots()
	}
	if l.Calendar.Set() {
		return l.validateCalendar(alg)
	}
	if l.Max != 0 {
		add("max", "applies to concurrency only, not %s; remove it", alg)
	}
	if l.Rate <= 0 {
		add("rate", "must be > 0")
	}
	switch {
	case l.Per <= 0:
		add("per", "must be > 0")
	case l.Per%time.Microsecond != 0:
		add("per", "must be a whole number of microseconds, got %s", l.Per)
	}
	if alg == TokenBucket {
		if l.Burst <= 0 {
			add("burst", "must be > 0 (the most units available at once)")
		}
	} else if l.Burst != 0 {
		add("burst", "does not apply to %s (its capacity is rate per window); remove it", alg)
	}
	if alg == SlidingWindow {
		if l.Buckets < 0 || l.Buckets > MaxBuckets {
			add("buckets", "must be in [1, %d] (0 or left out means %d), got %d", MaxBuckets, DefaultBuckets, l.Buckets)
		}
	} else if l.Buckets != 0 {
		add("buckets", "applies to sliding_window only, not %s; remove it", alg)
	}
	if alg == SlidingLog && l.Rate > MaxSlidingLogRate {
		add("rate", "must be at most %d for sliding_log (its state holds one entry per request); use sliding_window for larger rates", MaxSlidingLogRate)
	}
	if us := l.Per.Microseconds(); us > 0 {
		if l.Rate > maxExact/us {
			add("rate", "rate × per (%d × %dµs) must be at most 2^53; lower the rate or the period", l.Rate, us)
		}
		if l.Burst > maxExact/us {
			add("burst", "burst × per (%d × %dµs) must be at most 2^53; lower the burst or the period", l.Burst, us)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
